"""Our IQL and TD3+BC against d3rlpy's on the D4RL-style datasets of benchmarks/make_datasets.py.

Same datasets (our hopper / half_cheetah "medium", Minari format, read by both through
``robolearn.data.Dataset``), same number of gradient updates, batch 256, the papers'
hyperparameters on both sides (IQL: expectile 0.7, beta 3, weight clip 100, cosine
actor lr over the run, rewards scaled by 1000 / return spread; TD3+BC: alpha 2.5, policy
delay 2, target noise 0.2 clip 0.5, standardized observations) with one addition: IQL's
observations are standardized too, as CORL's IQL (which our config follows) does and IQL's
paper code and d3rlpy's IQL reproduction script (reproductions/offline/iql.py) do not; both
sides do it, so the comparison stays like for like. One torch thread each. Same evaluation:
the final policy's deterministic actions on our VecEnv of the task, ``EVAL_EPISODES`` episodes,
scored with the dataset's normalized score (x100). Speed: gradient updates per second
of the training loop (ours: the runner's iteration time, sampling included; d3rlpy:
``fit``, its setup included).

d3rlpy pins gymnasium==1.0.0 (we use 1.4), so it lives in its own virtualenv that
sees our packages (only its gymnasium wrappers would care, and they are not used):

    python3 -m venv --system-site-packages .venv
    .venv/bin/pip install --no-deps d3rlpy==2.8.1 structlog dataclasses-json marshmallow \\
        typing-inspect gym==0.26.2 gym-notices scikit-learn joblib threadpoolctl narwhals
    python3 benchmarks/offline_d4rl_style.py [--updates 20000] [--seeds 0 1 2] [--datasets hopper-medium ...]
    python3 benchmarks/offline_d4rl_style.py --seeds 1 2      # add seeds to earlier results
    python3 benchmarks/offline_d4rl_style.py --table-only     # rebuild offline.md from the runs file
    python3 benchmarks/offline_d4rl_style.py --tag avx512 ...  # another machine: offline_runs_avx512.jsonl, offline_avx512.md
    python3 benchmarks/offline_d4rl_style.py --tag amx_medium --peer-matmul-precision medium ...  # d3rlpy with our matmul switch
    python3 benchmarks/offline_d4rl_style.py --tag amx_fp32 --libs robolearn --overrides runner.matmul_precision=highest ...
    python3 benchmarks/offline_d4rl_style.py --tag amx_indep --libs d3rlpy --peer-seeding independent ...  # numpy seeded apart

A variant (``--overrides``, ``--peer-matmul-precision`` other than highest, ``--peer-seeding
independent``) needs its own ``--tag``: the table keeps one run per library, algorithm, dataset,
seed and budget, so an untagged variant would replace the main runs in offline.md.

Our configs set ``runner.matmul_precision: medium`` (bf16-input matmuls with fp32
accumulation where the CPU has them: Intel AMX; a no-op on AVX2). d3rlpy runs at torch's
default, ``highest``, unless ``--peer-matmul-precision`` gives it the same switch; each run
records its precision, and the table's notes show it.

Every finished run is appended as one JSON line to benchmarks/results/offline_runs.jsonl
(library, algorithm, dataset, seed, updates, score, updates/s, the code's commit, load
averages before and after), and benchmarks/results/offline.md is rebuilt from ALL lines
of that file after every run: seeds run on different days add up instead of overwriting,
and a cut-short benchmark still leaves a table. Order: seed-major, and for each algorithm
robolearn then d3rlpy, so both libraries see similar machine load. BENCHMARKS.md quotes the
tables in "Offline datasets and offline RL".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]  # this checkout's packages, not an installed copy
from common import (  # noqa: E402
    append_jsonl, benchmark_parser, code_commit, machine, read_jsonl, train_offline, write_result)

VENV_PYTHON = REPO / ".venv" / "bin" / "python"
RUNS = REPO / "benchmarks" / "results" / "offline_runs.jsonl"
EVAL_EPISODES = 10
ALGOS = ("iql", "td3bc")


def evaluate_policy(act, task: str, dataset: str, seed: int) -> float:
    """Normalized score (x100) of ``act(obs_numpy) -> action_numpy`` over EVAL_EPISODES episodes."""
    import sims
    from robolearn.data import Dataset
    from robolearn.evaluate import evaluate

    class Wrapped:
        def act(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
            return torch.as_tensor(act(obs["policy"].cpu().numpy()), dtype=torch.float32)

        def reset(self, mask: torch.Tensor | None = None) -> None:
            """Stateless."""

    with sims.make_env(task, num_envs=EVAL_EPISODES, seed=10_000 + seed) as env:
        result = evaluate(Wrapped(), env, EVAL_EPISODES, seed=10_000 + seed)
    return 100 * float(Dataset.load(dataset).normalized_score(result["return_mean"]))


def run_ours(algo: str, dataset: str, seed: int, updates: int, overrides: list[str]) -> dict[str, float]:
    from robolearn.data import Dataset

    task = Dataset.load(dataset).task
    runner, seconds = train_offline(f"{algo}_{task}", [f"dataset={dataset}", f"seed={seed}", f"runner.total_steps={updates}",
                                                       *overrides], "/tmp/robolearn-offline-bench")
    controller = runner.agent.controller().eval()
    with torch.no_grad():
        score = evaluate_policy(lambda o: controller(torch.as_tensor(o)).numpy(), task, dataset, seed)
    return {"score": score, "updates_per_s": updates / seconds,
            "matmul_precision": torch.get_float32_matmul_precision()}  # what the config set


def run_d3rlpy(algo: str, dataset: str, seed: int, updates: int, precision: str, seeding: str) -> dict[str, Any]:
    """Runs in the d3rlpy virtualenv (see the module docstring), its float32 matmuls at ``precision``.

    ``seeding``: "d3rlpy" is ``d3rlpy.seed(seed)``, which gives numpy (its minibatch indices) and torch
    (its initial weights) the same integer; both are MT19937 seeded the same way, so the indices are drawn
    from the very bits the weights were. "independent" then reseeds numpy from a hash of the seed
    (``SeedSequence``), so the two streams share nothing."""
    import d3rlpy

    torch.set_float32_matmul_precision(precision)

    from robolearn.data import Dataset
    from robolearn.data.d4rl import exclusive_timeouts

    ds = Dataset.load(dataset)
    data = ds.transitions("cpu")
    mdp = d3rlpy.dataset.MDPDataset(
        observations=data["obs"]["policy"].numpy(), actions=data["action"].numpy(),
        rewards=data["reward"].numpy().astype(np.float32), terminals=data["terminated"].numpy().astype(np.float32),
        timeouts=exclusive_timeouts(data["terminated"], data["truncated"]).numpy().astype(np.float32))
    d3rlpy.seed(seed)
    if seeding == "independent":
        np.random.seed(np.random.SeedSequence(seed).generate_state(1)[0])
    scaler = d3rlpy.preprocessing.StandardObservationScaler()
    if algo == "iql":  # d3rlpy's IQL reproduction (reproductions/offline/iql.py) plus the observation scaler, which
        # that script lacks: our IQL standardizes observations, so d3rlpy's does too (like for like)
        config = d3rlpy.algos.IQLConfig(
            batch_size=256, actor_learning_rate=3e-4, critic_learning_rate=3e-4, expectile=0.7, weight_temp=3.0,
            max_weight=100.0, observation_scaler=scaler,
            reward_scaler=d3rlpy.preprocessing.ReturnBasedRewardScaler(multiplier=1000.0),
            actor_optim_factory=d3rlpy.optimizers.AdamFactory(
                lr_scheduler_factory=d3rlpy.optimizers.CosineAnnealingLRFactory(T_max=updates)))
    else:
        config = d3rlpy.algos.TD3PlusBCConfig(
            batch_size=256, actor_learning_rate=3e-4, critic_learning_rate=3e-4, target_smoothing_sigma=0.2,
            target_smoothing_clip=0.5, alpha=2.5, update_actor_interval=2, observation_scaler=scaler)
    agent = config.create(device="cpu:0")
    start = time.perf_counter()
    agent.fit(mdp, n_steps=updates, n_steps_per_epoch=updates, show_progress=False, save_interval=10**9,
              logger_adapter=d3rlpy.logging.NoopAdapterFactory())
    seconds = time.perf_counter() - start
    score = evaluate_policy(agent.predict, ds.task, dataset, seed)
    return {"score": score, "updates_per_s": updates / seconds, "matmul_precision": precision, "peer_seeding": seeding}


def in_d3rlpy_env(algo: str, dataset: str, seed: int, updates: int, precision: str, seeding: str) -> dict[str, Any]:
    if not VENV_PYTHON.is_file():
        raise SystemExit(f"{VENV_PYTHON}: missing; make the d3rlpy virtualenv (see this file's docstring)")
    out = subprocess.run([str(VENV_PYTHON), __file__, "--worker", algo, dataset, str(seed), str(updates), precision,
                          seeding], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"d3rlpy worker failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def use_tag(tag: str | None) -> str:
    """Point the runs file at ``offline_runs_<tag>.jsonl`` (a table per machine: speed ratios of different CPUs
    do not average); returns the table's file name."""
    global RUNS
    if tag:
        RUNS = RUNS.with_name(f"offline_runs_{tag}.jsonl")
    return f"offline_{tag}.md" if tag else "offline.md"


def read_runs() -> list[dict]:
    """Every run recorded in :data:`RUNS`, in order."""
    if not RUNS.is_file():
        return []
    return read_jsonl(RUNS)


def fingerprint(dataset: str) -> str | None:
    """What identifies the dataset's current contents (datasets made again differ), or None if it is not here."""
    from robolearn.data import Dataset

    try:
        s = Dataset.load(dataset).summary()
    except Exception:  # noqa: BLE001 - a dataset missing here cannot be compared
        return None
    return f"{s['episodes']} episodes, {s['steps']} steps, return {s['return_mean']:.3f}"


def behavior_score(dataset: str) -> float:
    """The dataset's own normalized score (x100): what an offline agent should at least match."""
    from robolearn.data import Dataset

    return 100 * Dataset.load(dataset).summary()["normalized_score_mean"]


def latest_runs(runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the newest run of each library, algorithm, dataset, seed and budget; the older runs it replaces).

    A seed run again (new code, quieter machine) replaces its earlier line in the table;
    both stay in the runs file and the older one is listed as superseded. Runs on an earlier
    version of a dataset (their recorded fingerprint, or the lack of one, differs from that of
    the newest run that recorded one) are superseded too. Only the runs file is read, so the
    table is the same on a machine that lacks the datasets.
    """
    current = {r["dataset"]: r["dataset_fingerprint"] for r in runs if r.get("dataset_fingerprint")}
    valid = [r for r in runs if r["dataset"] not in current or r.get("dataset_fingerprint") == current[r["dataset"]]]
    newest: dict[tuple, dict] = {}
    for r in valid:
        newest[(r["lib"], r["algo"], r["dataset"], r["seed"], r["updates"])] = r
    kept = [r for r in runs if any(r is n for n in newest.values())]
    return kept, [r for r in runs if not any(r is n for n in newest.values())]


def table(runs: list[dict]) -> str:
    """offline.md from all recorded runs: mean ± sample std over seeds, speed ratio from per-run updates/s."""
    runs, superseded = latest_runs(runs)
    budgets = sorted({r["updates"] for r in runs})
    recorded = sorted({r["machine"] for r in runs if "machine" in r})  # runs before session 18 did not record it
    peers = ", ".join(sorted({r["commit"] for r in runs if r["lib"] == "d3rlpy"})) or "d3rlpy"
    lines = [f"### Offline RL on D4RL-style datasets of our tasks: robolearn vs {peers}", "",
             f"Machine: {'; '.join(recorded) or 'not recorded with these runs (see BENCHMARKS.md)'}. {', '.join(f'{u:,}' for u in budgets)} gradient updates per run, batch 256, one torch "
             f"thread, the papers' hyperparameters on both sides, plus standardized observations for IQL on both sides "
             "(TD3+BC's paper and CORL's IQL standardize them; IQL's paper code and d3rlpy's IQL reproduction script "
             "do not); score = normalized score x100 of the final policy over "
             f"{EVAL_EPISODES} deterministic episodes on our VecEnv (0 = random policy, 100 = our PPO expert; "
             "datasets: benchmarks/results/offline_datasets*.md, one per machine that made them; each run records its "
             "dataset's fingerprint). Made by `python3 benchmarks/offline_d4rl_style.py` "
             f"from every run in `benchmarks/results/{RUNS.name}` (one JSON line per run). Scores: mean ± "
             "sample std over seeds. Updates/s: mean over the runs whose timing is valid (see the notes per run). Speed ratio: mean robolearn updates/s over mean d3rlpy updates/s; per seed: "
             "the ratio of the two runs of that seed (run one after the other).", "",
             "| dataset (behavior score) | algo | updates | seeds | robolearn score | d3rlpy score | robolearn updates/s | "
             "d3rlpy updates/s | speed ratio | per-seed ratios |", "|---|---|---|---|---|---|---|---|---|---|"]

    def mean_std(values: list[float], fmt: str) -> str:
        if not values:
            return "-"
        std = np.std(values, ddof=1) if len(values) > 1 else float("nan")
        return f"{np.mean(values):{fmt}} ± {std:{fmt}}" if len(values) > 1 else f"{values[0]:{fmt}}"

    def ups(value: float) -> str:
        return f"{value:,.0f}" if np.isfinite(value) else "-"

    keys = list(dict.fromkeys((r["dataset"], r["algo"], r["updates"]) for r in runs))
    keys.sort(key=lambda k: (k[0], ALGOS.index(k[1]) if k[1] in ALGOS else 99, k[2]))
    for dataset, algo, updates in keys:
        rows = {lib: [r for r in runs if (r["lib"], r["algo"], r["dataset"], r["updates"]) == (lib, algo, dataset, updates)]
                for lib in ("robolearn", "d3rlpy")}
        behaviors = [r["behavior_score"] for r in rows["robolearn"] + rows["d3rlpy"] if "behavior_score" in r]
        behavior = f"{behaviors[-1]:.1f}" if behaviors else "?"  # from the runs: the dataset may not be on this machine
        timed = {lib: [r for r in rs if not r.get("speed_invalid")] for lib, rs in rows.items()}
        speed = {lib: np.mean([r["updates_per_s"] for r in rs]) if rs else np.nan for lib, rs in timed.items()}
        ratio = f"{speed['robolearn'] / speed['d3rlpy']:.2f}x" if np.isfinite(list(speed.values())).all() else "-"
        by_seed = {lib: {r["seed"]: r["updates_per_s"] for r in rs} for lib, rs in timed.items()}
        paired = sorted(set(by_seed["robolearn"]) & set(by_seed["d3rlpy"]))
        per_seed = ", ".join(f"{s}: {by_seed['robolearn'][s] / by_seed['d3rlpy'][s]:.2f}x" for s in paired) or "-"
        seeds = "/".join(str(len({r["seed"] for r in rs})) for rs in rows.values())
        lines.append(f"| {dataset} ({behavior}) | {algo} | {updates:,} | {seeds} | "
                     f"{mean_std([r['score'] for r in rows['robolearn']], '.1f')} | "
                     f"{mean_std([r['score'] for r in rows['d3rlpy']], '.1f')} | "
                     f"{ups(speed['robolearn'])} | {ups(speed['d3rlpy'])} | {ratio} | {per_seed} |")
    lines += ["", "Seeds column: robolearn/d3rlpy runs. Per run (code commit; 1-min load average before -> after the run):", ""]
    for r in runs:
        load = (f"; load {r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f}" if "load_before" in r else "")
        load += f"; float32 matmuls at {r['matmul_precision']}" if "matmul_precision" in r else ""
        note = f"; {r['note']}" if r.get("note") else ""
        note += f"; overrides {' '.join(r['overrides'])}" if r.get("overrides") else ""
        note += "; numpy seeded apart from torch (--peer-seeding independent)" if r.get("peer_seeding") == "independent" else ""
        lines.append(f"- {r['lib']} {r['algo']} {r['dataset']} seed {r['seed']}: score {r['score']:.1f}, "
                     f"{r['updates_per_s']:.0f} updates/s ({r.get('commit', '?')}{load}{note})")
    lines += ["", "**How to read it.** Updates/s depend on the machine's load (its 2 cores are shared with other jobs; "
              "each run records the load average before and after): compare the two libraries through the ratio of "
              "runs made one after the other, not through absolute numbers across sessions. d3rlpy's time includes "
              "its `fit` setup (dataset conversion, network build: seconds out of minutes), ours only the update "
              "loop (sampling included). Known differences left in: d3rlpy drops the last transition of "
              "time-limit-truncated episodes, we keep it and bootstrap. Both standardize observations with the "
              "dataset's mean and std + 1e-3, unclipped. Evaluation episodes use the same env seed "
              "(10,000 + seed) for both libraries."]
    if superseded:
        lines += ["", "Superseded (the same library, algorithm, dataset and seed ran again later, or the run was made on an "
                  "earlier version of the dataset; not in the table):", ""]
        lines += [f"- {r['lib']} {r['algo']} {r['dataset']} seed {r['seed']}: score {r['score']:.1f}, "
                  f"{r['updates_per_s']:.0f} updates/s ({r.get('commit', '?')}{'; ' + r['note'] if r.get('note') else ''})"
                  for r in superseded]
    return "\n".join(lines)


def d3rlpy_version() -> str:
    """d3rlpy's version in its virtualenv; exits with the setup lines if that is missing."""
    if not VENV_PYTHON.is_file():
        sys.exit(f"{VENV_PYTHON} is missing: make d3rlpy's virtualenv first (the lines at the top of {Path(__file__).name})")
    return subprocess.run([str(VENV_PYTHON), "-c", "import d3rlpy; print(d3rlpy.__version__)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--updates", type=int, default=20_000, help="gradient updates per run, both libraries")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the seeds to run (added to earlier runs)")
    parser.add_argument("--datasets", nargs="+", default=["hopper-medium", "half_cheetah-medium", "walker2d-medium"],
                        help="datasets of benchmarks/make_datasets.py (<task>-<kind>)")
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS, help="algorithms, each run by both libraries")
    parser.add_argument("--libs", nargs="+", default=["robolearn", "d3rlpy"], choices=["robolearn", "d3rlpy"],
                        help="libraries to run (d3rlpy in its own virtualenv, above)")
    parser.add_argument("--table-only", action="store_true", help="rebuild offline.md from offline_runs.jsonl; run nothing")
    parser.add_argument("--tag", help="keep this machine's runs apart: results/offline_runs_<tag>.jsonl and offline_<tag>.md")
    parser.add_argument("--peer-matmul-precision", default="highest", choices=["highest", "high", "medium"],
                        help="d3rlpy's float32 matmul precision (torch's default: highest; our configs use medium, "
                             "which on AMX CPUs takes bf16 matmuls: give d3rlpy the same switch to compare code, not settings)")
    parser.add_argument("--overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config overrides for our runs, recorded with each (e.g. runner.matmul_precision=highest)")
    parser.add_argument("--peer-seeding", default="d3rlpy", choices=["d3rlpy", "independent"],
                        help="d3rlpy: d3rlpy.seed(seed), numpy's minibatch indices drawn from the bits of torch's initial "
                             "weights; independent: numpy reseeded from a hash of the seed (see run_d3rlpy)")
    parser.add_argument("--worker", nargs=6, metavar=("ALGO", "DATASET", "SEED", "UPDATES", "PRECISION", "SEEDING"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.worker:
        algo, dataset, seed, updates, precision, seeding = args.worker
        print(json.dumps(run_d3rlpy(algo, dataset, int(seed), int(updates), precision, seeding)))
        return
    variant = args.overrides or args.peer_matmul_precision != "highest" or args.peer_seeding != "d3rlpy"
    if variant and not args.tag and not args.table_only:
        parser.error("a variant run (--overrides, --peer-matmul-precision, --peer-seeding) needs --tag NAME: "
                     "untagged, it would replace the main runs in results/offline.md")
    out = use_tag(args.tag)
    if args.table_only:
        write_result(out, table(read_runs()))
        return
    version = d3rlpy_version() if "d3rlpy" in args.libs else None
    fns = {"robolearn": lambda *a: {**run_ours(*a, args.overrides), "overrides": args.overrides},
           "d3rlpy": lambda *a: in_d3rlpy_env(*a, args.peer_matmul_precision, args.peer_seeding)}
    for seed in args.seeds:
        for dataset in args.datasets:
            for algo in args.algos:
                for lib in args.libs:
                    load_before, started = os.getloadavg(), datetime.now(timezone.utc)
                    result = fns[lib](algo, dataset, seed, args.updates)
                    r = {"lib": lib, "algo": algo, "dataset": dataset, "seed": seed, "updates": args.updates, **result,
                         "dataset_fingerprint": fingerprint(dataset), "behavior_score": behavior_score(dataset),
                         "commit": code_commit() if lib == "robolearn" else f"d3rlpy {version}",
                         "started": started.isoformat(timespec="seconds"), "load_before": list(load_before),
                         "load_after": list(os.getloadavg()), "machine": machine()}
                    print(json.dumps(r), flush=True)
                    append_jsonl(RUNS, r)
                    write_result(out, table(read_runs()))


if __name__ == "__main__":
    main()
