"""Offline-to-online on our hopper: WSRL vs naive fine-tuning vs SAC from scratch, side by side.

One Cal-QL pretraining (the WSRL ensemble: 10 LayerNorm critics, 2 sampled for targets) on
``hopper-medium``, stopped at the phase boundary; both fine-tuning arms resume from copies of
that run directory, so they start from the same pretrained networks:

- ``wsrl``: ``--warmup`` steps with the frozen pretrained policy into a fresh buffer, then SAC
  from the pretrained networks (offline data dropped);
- ``naive``: the same without warmup (updates once the buffer holds a batch, offline data dropped);
- ``sac``: SAC from scratch (our ``sac`` agent, its defaults: twin critics, UTD 1) for
  ``--sac-steps`` online steps, by default 3x the fine-tuning budget, so "reaches SAC's final
  return in at most a third of the steps" can be read off one table.

Return against online env steps: ``--eval-episodes`` deterministic episodes every 1000 steps.
No peer library: the arms are ours, and BENCHMARKS.md reads them against the WSRL paper's claims.

Each finished (seed, arm) is appended to ``benchmarks/results/offline_to_online_runs.jsonl``; the
table and plot of the seeds with all three arms at this budget go to
``benchmarks/results/offline_to_online<suffix>.md`` and ``.png`` (the suffix names a non-default
``--target-entropy`` or ``--warmup``, or an older ``--revision``), quoted in BENCHMARKS.md, "Offline-to-online on hopper-medium".
Run directories are scratch, under /tmp/robolearn_offline_to_online (a pretraining found there is
resumed). With ``--pretrain 10000`` on 2 shared CPU cores (BENCHMARKS.md) pretraining took 13-26 min
per seed, each fine-tuning arm 3-12 min and SAC from scratch 7-10 min.

    python3 benchmarks/offline_to_online.py [--pretrain 5000] [--steps 10000] [--sac-steps 30000] [--seeds 1]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]  # this checkout's packages, not an installed copy
from common import RESULTS, benchmark_parser, machine, write_result  # noqa: E402

WORK = Path("/tmp/robolearn_offline_to_online")


def curve(run_dir: Path, phase: str = "online") -> list[tuple[int, float]]:
    """(online env steps, eval return) of a run's metrics.jsonl."""
    points = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("phase", "online") == phase and "eval/return" in record:
            points.append((int(record.get("env_steps", record.get("updates", 0))), float(record["eval/return"])))
    return points


def common_overrides(args: argparse.Namespace, seed: int) -> list[str]:
    return [f"seed={seed}", f"run_dir={WORK / 'runs'}", "logging.wandb=disabled", "runner.video_seconds=0",
            "runner.checkpoint_every=1", f"runner.eval_episodes={args.eval_episodes}", "env.num_envs=1"]


def pretrain(args: argparse.Namespace, seed: int) -> tuple[Path, float, float]:
    """Cal-QL pretraining only (``runner.total_steps=0``); returns the run, its eval return and seconds.

    An earlier pretraining of this seed (``WORK/runs/pretrain_s<seed>``, stopped at no more than
    ``--pretrain`` updates, or finished at that many) is resumed to ``--pretrain`` updates instead of
    started again; its seconds are those of the run up to its checkpoint (the offline metrics line
    there) plus the resumed part."""
    from robolearn import load_config
    from robolearn.runner import train

    overrides = [*common_overrides(args, seed), f"name={pretrain_name(seed)}", "runner.total_steps=0",
                 f"agent.pretrain_updates={args.pretrain}", f"agent.hidden={args.hidden}",
                 f"agent.n_actions={args.n_actions}", f"runner.checkpoint_every={max(1, args.pretrain // 10000)}"]
    earlier, done = earlier_pretraining(seed, args.pretrain)
    before = max((t for u, t in offline_times(earlier) if u <= done), default=0.0) if earlier else 0.0
    cfg = load_config(earlier / "config.yaml" if earlier else "wsrl_hopper", overrides)
    start = time.perf_counter()
    result = train(cfg, resume=earlier)
    return result.run_dir, float(result.evaluation["return_mean"]), before + time.perf_counter() - start


def pretrain_name(seed: int) -> str:
    """The pretraining's run name; this revision's own, so that no older code's pretraining is resumed."""
    return f"pretrain_r{REVISION}_s{seed}"


def earlier_pretraining(seed: int, updates: int) -> tuple[Path | None, int]:
    """The newest pretraining run of ``seed`` that stopped in its offline phase at or before ``updates``
    or finished at exactly ``updates``, and the updates of its checkpoint."""
    import torch

    for run in sorted((WORK / "runs" / pretrain_name(seed)).glob("*"), reverse=True):
        checkpoint = run / "checkpoints" / "latest.pt"
        if checkpoint.exists():
            progress = torch.load(checkpoint, weights_only=True, map_location="cpu")["progress"]
            stopped = progress["phase"] == "offline" and progress["updates"] <= updates
            if stopped or (progress["updates"] == updates and progress["env_steps"] == 0):
                return run, int(progress["updates"])
    return None, 0


def offline_times(run_dir: Path) -> list[tuple[int, float]]:
    """(updates, seconds since the run or its last resume) of each offline metrics line."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(int(r["updates"]), float(r["time"])) for r in lines if r.get("phase") == "offline"]


def finetune(args: argparse.Namespace, seed: int, pretrained: Path, arm: str) -> tuple[Path, float]:
    """Resume a copy of the pretrained run online as ``arm`` (``wsrl`` or ``naive``)."""
    from robolearn import load_config
    from robolearn.runner import train

    run_dir = pretrained.with_name(f"{pretrained.name}-{arm}")
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(pretrained, run_dir)
    for path in ("eval.json", "export"):
        shutil.rmtree(run_dir / path, ignore_errors=True) if (run_dir / path).is_dir() else (run_dir / path).unlink(missing_ok=True)
    warmup = args.warmup if arm == "wsrl" else 0
    cfg = load_config(run_dir / "config.yaml", [*common_overrides(args, seed), f"runner.total_steps={args.steps}",
                                                f"runner.utd_ratio={args.utd}", f"agent.online_batch_size={args.batch}",
                                                f"agent.warmup_steps={warmup}", "agent.offline_ratio=0.0",
                                                f"agent.online_target_entropy={'null' if args.target_entropy == 'keep' else args.target_entropy}"])
    start = time.perf_counter()
    train(cfg, resume=run_dir)
    return run_dir, time.perf_counter() - start


def sac(args: argparse.Namespace, seed: int) -> tuple[Path, float]:
    from robolearn import load_config

    cfg = load_config("sac_half_cheetah", [*common_overrides(args, seed), "env.task=hopper", f"name=sac_scratch_s{seed}",
                                           f"runner.total_steps={args.sac_steps}", f"runner.random_steps={args.random_steps}"])
    start = time.perf_counter()
    run_dir = _sac_with_evals(cfg)
    return run_dir, time.perf_counter() - start


def _sac_with_evals(cfg) -> Path:
    """SAC from scratch, evaluated like the fine-tuning arms every 1000 env steps (written as eval/return)."""
    from robolearn.evaluate import evaluate
    from robolearn.registry import make_env
    from robolearn.runner import Runner

    runner = Runner(cfg)
    eval_env = make_env(cfg.env, num_envs=cfg.runner.eval_episodes, seed=cfg.seed + 10_000)
    evals = []

    def stop(metrics: dict[str, float]) -> bool:
        result = evaluate(runner.agent.controller(), eval_env, cfg.runner.eval_episodes, seed=cfg.seed + 10_000)
        evals.append((runner.progress.env_steps, float(result["return_mean"])))
        return False

    try:
        runner.train(stop=stop)
    finally:
        runner.close()
        eval_env.close()
    (runner.run_dir / "evals.json").write_text(json.dumps(evals))
    return runner.run_dir


def first_reaching(points: list[tuple[int, float]], target: float) -> int | None:
    return next((step for step, value in points if value >= target), None)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--pretrain", type=int, default=5000, help="offline Cal-QL updates")
    parser.add_argument("--steps", type=int, default=10000, help="online env steps of each fine-tuning arm")
    parser.add_argument("--sac-steps", type=int, default=30000, help="online env steps of SAC from scratch")
    parser.add_argument("--random-steps", type=int, default=5000, help="SAC from scratch: uniform random steps first")
    parser.add_argument("--warmup", type=int, default=1000, help="WSRL warmup steps (the paper: 5000 of 250k-1M)")
    parser.add_argument("--utd", type=float, default=2.0, help="updates per online env step of both fine-tuning arms")
    parser.add_argument("--batch", type=int, default=256, help="online batch size of both fine-tuning arms")
    parser.add_argument("--target-entropy", default="keep",
                        help="online target entropy of both fine-tuning arms, or 'keep' the pretraining's (-|A|: what "
                             "WSRL's code runs, its SAC reading its config's 0 as -|A|)")
    parser.add_argument("--hidden", default="[128,128]", help="hidden sizes of the Cal-QL/WSRL networks (agent.hidden)")
    parser.add_argument("--n-actions", type=int, default=4, help="Cal-QL's sampled actions per proposal (agent.n_actions)")
    parser.add_argument("--eval-episodes", type=int, default=5, help="deterministic episodes per evaluation")
    parser.add_argument("--seeds", type=int, default=1, help="run seeds 0 .. N-1, one after another (unless --seed)")
    parser.add_argument("--seed", type=int, help="run this seed only (one process per seed; the report joins them)")
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: rewrite the table and plot from results/offline_to_online_runs.jsonl")
    parser.add_argument("--revision", type=int, default=REVISION,
                        help=f"with --report-only: report the fine-tuning records of this revision of the code "
                             f"(1: before session 61's WSRL fixes; {REVISION}: this code's)")
    args = parser.parse_args()
    if args.revision != REVISION and not args.report_only:
        parser.error(f"this code trains revision {REVISION}; --revision {args.revision} only goes with --report-only")
    if not args.report_only:
        import torch

        torch.set_num_threads(1)
        for seed in [args.seed] if args.seed is not None else range(args.seeds):
            run_seed(args, seed)
    report(args, *joined_seeds(args))


# One line per finished (seed, arm), kept with the results (not in WORK, which is scratch: /tmp may be wiped
# between sessions): an interrupted benchmark keeps every finished arm, and the report can be rebuilt anywhere.
RECORDS = RESULTS / "offline_to_online_runs.jsonl"
# What the fine-tuning arms compute at the same budget. Bump it when a fix changes that, so that the new code's
# runs are not skipped as finished and the two revisions' records are never joined. 2: session 61's WSRL fixes
# (the actor maximizes the min over all critics, as WSRL's code, not their mean; no online update before the
# buffer holds a batch's online rows). Records written before the key existed are revision 1.
REVISION = 2
PRETRAIN_BUDGET = ("pretrain", "hidden", "n_actions", "eval_episodes", "revision")
BUDGETS = {"wsrl": (*PRETRAIN_BUDGET, "steps", "warmup", "utd", "batch", "target_entropy"),
           "sac": ("sac_steps", "random_steps", "eval_episodes")}
BUDGETS["naive"] = tuple(k for k in BUDGETS["wsrl"] if k != "warmup")


def budget(args: argparse.Namespace, arm: str) -> dict:
    return {k: vars(args)[k] for k in BUDGETS[arm]}


def finished(args: argparse.Namespace) -> dict[tuple[int, str], dict]:
    """The saved (seed, arm) records of this budget and revision (the latest of each)."""
    lines = [json.loads(line) for line in RECORDS.read_text().splitlines()] if RECORDS.exists() else []
    return {(r["seed"], r["arm"]): r for r in lines if record_budget(r) == budget(args, r["arm"])}


def record_budget(record: dict) -> dict:
    """A record's budget; a fine-tuning record from before the revision key is revision 1."""
    return record["budget"] if record["arm"] == "sac" else {"revision": 1, **record["budget"]}


def run_seed(args: argparse.Namespace, seed: int) -> None:
    """Pretrain, fine-tune both arms and train SAC from scratch for one seed, skipping the arms already saved
    with this budget (SAC from scratch does not depend on the fine-tuning settings, so one run serves all)."""
    done = finished(args)
    todo = [arm for arm in ("wsrl", "naive", "sac") if (seed, arm) not in done]
    if {"wsrl", "naive"} & set(todo):
        run, pretrained, pretrain_s = pretrain(args, seed)
    for arm in todo:
        record = {"seed": seed, "arm": arm, "budget": budget(args, arm), "machine": machine()}
        if arm == "sac":
            run_dir, record["seconds"] = sac(args, seed)
            record["curve"] = json.loads((run_dir / "evals.json").read_text())
        else:
            run_dir, record["seconds"] = finetune(args, seed, run, arm)
            record |= {"curve": [(0, pretrained)] + curve(run_dir), "pretrained": pretrained,
                       "pretrain_seconds": pretrain_s, "pretrain_curve": curve(run, phase="offline")}
        with open(RECORDS, "a") as f:
            f.write(json.dumps(record) + "\n")


def joined_seeds(args: argparse.Namespace) -> tuple[dict, list[float], dict[str, float], list[int], list[str]]:
    """The seeds with all three arms saved at this budget: curves per arm, pretrained returns, summed seconds,
    the seeds and the machines they ran on."""
    done = finished(args)
    seeds = sorted(seed for seed, arm in done if arm == "wsrl" and all((seed, a) in done for a in ("naive", "sac")))
    if not seeds:
        raise SystemExit(f"no seed in {RECORDS} has all three arms at this budget")
    curves = {arm: [done[seed, arm]["curve"] for seed in seeds] for arm in ("wsrl", "naive", "sac")}
    seconds = {arm: sum(done[seed, arm]["seconds"] for seed in seeds) for arm in curves}
    seconds["pretrain"] = sum(done[seed, "wsrl"]["pretrain_seconds"] for seed in seeds)
    machines = sorted({done[seed, arm].get("machine", "not recorded") for seed in seeds for arm in curves})
    return curves, [done[seed, "wsrl"]["pretrained"] for seed in seeds], seconds, seeds, machines


def mean_curve(runs: list[list[tuple[int, float]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    length = min(len(r) for r in runs)
    steps = np.array([p[0] for p in runs[0][:length]])
    values = np.array([[p[1] for p in r[:length]] for r in runs])
    return steps, values.mean(0), values.std(0)


EARLY = 2000  # "no collapse" is read over the first online steps that update the pretrained networks


def suffix(args: argparse.Namespace) -> str:
    """Result files of the paper's online target entropy and our 1,000 warmup steps keep the plain name;
    other settings say theirs."""
    return ("" if args.target_entropy == "0" else f"_target_entropy_{args.target_entropy}") + \
        ("" if args.warmup == 1000 else f"_warmup_{args.warmup}") + \
        ("" if args.revision == REVISION else f"_revision_{args.revision}")


def report(args, curves, pretrained_returns, seconds, seeds, machines) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = {"wsrl": "WSRL (warmup, no offline data)", "naive": "naive fine-tuning", "sac": "SAC from scratch"}
    for arm, runs in curves.items():
        if runs:
            steps, mean, std = mean_curve(runs)
            ax.plot(steps, mean, label=labels[arm])
            ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
    ax.axhline(float(np.mean(pretrained_returns)), color="gray", ls=":", label="pretrained (Cal-QL)")
    ax.set_xlabel("online env steps")
    ax.set_ylabel(f"eval return ({args.eval_episodes} episodes)")
    ax.set_title("hopper-medium: offline-to-online")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / f"offline_to_online{suffix(args)}.png", dpi=100)

    sac_final = float(np.mean([r[-1][1] for r in curves["sac"]])) if curves["sac"] else float("nan")
    pre = float(np.mean(pretrained_returns))
    rows, per_step = [], []
    for arm, runs in curves.items():
        if not runs:
            continue
        steps, mean, std = mean_curve(runs)
        first_update = {"wsrl": args.warmup, "naive": 0}.get(arm)  # SAC from scratch has no pretrained return to keep
        lowest = "-"
        if first_update is not None:
            early = lambda step: first_update <= step <= first_update + EARLY  # noqa: E731
            per_seed = [min(v for t, v in run if early(t)) for run in runs]
            lowest = f"{min(v for t, v in zip(steps, mean) if early(t)):.0f} (per seed: {', '.join(f'{v:.0f}' for v in per_seed)})"
        reach = first_reaching(list(zip(steps.tolist(), mean.tolist())), sac_final)
        own = [first_reaching(run, sac[-1][1]) for run, sac in zip(runs, curves["sac"])]  # each seed against its own SAC
        budget = args.sac_steps if arm == "sac" else args.steps
        rows.append(f"| {labels[arm]} | {budget:,} | {len(runs)} | {mean[0]:.0f} | {lowest} | {mean[-1]:.0f} ± {std[-1]:.0f} | "
                    f"{'-' if reach is None else f'{reach:,}'} | {', '.join('-' if r is None else f'{r:,}' for r in own)} | "
                    f"{seconds[arm] / len(runs) / 60:.1f} |")
        per_step.append(f"{labels[arm]} " + " ".join(f"{s // 1000}k:{v:.0f}" for s, v in zip(steps, mean)))
    table = "\n".join(rows)
    made_by = " and ".join(f"`--seed {s}`" for s in seeds)
    naive_start = "from step 1" if args.revision == 1 else f"once its buffer holds a batch ({args.batch} steps)"
    revision = "" if args.revision == REVISION else f" --revision {args.revision}"  # an older code's records
    write_result(f"offline_to_online{suffix(args)}.md", f"""### Offline-to-online on hopper-medium: WSRL vs naive fine-tuning vs SAC from scratch

Machine: {'; '.join(machines)} (2 cores shared with other jobs, one torch thread). Made by
`python3 benchmarks/offline_to_online.py --pretrain {args.pretrain} --steps {args.steps} --sac-steps {args.sac_steps}
--target-entropy {args.target_entropy} --warmup {args.warmup}` with {made_by} (one process per seed), then `--report-only{revision}`.

**Budget.** Pretraining: Cal-QL, {args.pretrain:,} updates (batch 256, cql_alpha 5 on the paper's 1/2-weighted Bellman error, 10 in CORL's units, {args.n_actions} sampled actions per
proposal), 10 critics with LayerNorm, 2 sampled for targets, networks {args.hidden}
({seconds['pretrain'] / len(seeds) / 60:.1f} min per seed); pretrained policy return {pre:.0f} (per seed:
{', '.join(f'{r:.0f}' for r in pretrained_returns)}). Online, both
fine-tuning arms start from the same pretrained run: {args.steps:,} env steps, UTD {args.utd:g}, batch {args.batch},
actor lr 1e-4, critic lr 3e-4, target entropy {'-|A| (kept from the pretraining)' if args.target_entropy == 'keep' else args.target_entropy}, tau 5e-3; WSRL warms up for {args.warmup:,} steps with the frozen
pretrained policy and no updates; naive fine-tuning updates {naive_start}; neither keeps the offline data. SAC from
scratch: our `sac` (twin critics 256x256, UTD 1, batch 256, {args.random_steps:,} random steps) for {args.sac_steps:,} steps.
Evaluation: {args.eval_episodes} deterministic episodes every 1,000 online steps.

| arm | online steps | seeds | first eval return (step 0: pretrained; SAC: 1k) | lowest return in the first {EARLY:,} steps of updates (WSRL: after its warmup) | final return | first step the mean reaches SAC's final return ({sac_final:.0f}) | per seed, against its own SAC's final | minutes per seed |
|---|---|---|---|---|---|---|---|---|
{table}

Curves (mean eval return per 1k online steps): {'; '.join(per_step)}.

![return against online steps](offline_to_online{suffix(args)}.png)
""")


if __name__ == "__main__":
    main()
