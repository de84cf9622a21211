"""Our IQL and TD3+BC against d3rlpy's on the D4RL-style datasets of benchmarks/make_datasets.py.

Same datasets (our hopper / half_cheetah "medium", Minari format, read by both through
``robolearn.data.Dataset``), same number of gradient updates, batch 256, the papers'
hyperparameters on both sides (IQL: expectile 0.7, beta 3, weight clip 100, cosine
actor lr over the run, rewards scaled by 1000 / return spread, standardized
observations; TD3+BC: alpha 2.5, policy delay 2, target noise 0.2 clip 0.5,
standardized observations), one torch thread each. Same evaluation: the final
policy's deterministic actions on our VecEnv of the task, ``EVAL_EPISODES`` episodes,
scored with the dataset's normalized score (x100). Speed: gradient updates per second
of the training loop (ours: the runner's iteration time, sampling included; d3rlpy:
``fit``, its setup included).

d3rlpy pins gymnasium==1.0.0 (we use 1.4), so it lives in its own virtualenv that
sees our packages (only its gymnasium wrappers would care, and they are not used):

    python3 -m venv --system-site-packages .venv
    .venv/bin/pip install --no-deps d3rlpy==2.8.1 structlog dataclasses-json marshmallow \\
        typing-inspect gym==0.26.2 gym-notices scikit-learn joblib threadpoolctl narwhals
    python3 benchmarks/offline_d4rl_style.py [--updates 20000] [--seeds 3] [--datasets hopper-medium ...]

Results are rewritten to benchmarks/results/offline.md after every run (seed-major
order), so a cut-short benchmark still leaves a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]  # this checkout's packages, not an installed copy
from common import machine, write_result  # noqa: E402

VENV_PYTHON = REPO / ".venv" / "bin" / "python"
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


def run_ours(algo: str, dataset: str, seed: int, updates: int) -> dict[str, float]:
    from robolearn import load_config
    from robolearn.data import Dataset
    from robolearn.logger import read_metrics
    from robolearn.offline_runner import OfflineRunner

    task = Dataset.load(dataset).task
    cfg = load_config(f"{algo}_{task}", [f"dataset={dataset}", f"seed={seed}", f"runner.total_steps={updates}",
                                         "runner.eval_episodes=0", "runner.video_seconds=0", "runner.checkpoint_every=1000000",
                                         "logging.wandb=disabled", "logging.progress=false", "run_dir=/tmp/robolearn-offline-bench"])
    runner = OfflineRunner(cfg)
    try:
        runner.train()
    finally:
        runner.close()
    seconds = sum(m["iteration_time"] for m in read_metrics(runner.run_dir))
    controller = runner.agent.controller().eval()
    with torch.no_grad():
        score = evaluate_policy(lambda o: controller(torch.as_tensor(o)).numpy(), task, dataset, seed)
    return {"score": score, "updates_per_s": updates / seconds}


def run_d3rlpy(algo: str, dataset: str, seed: int, updates: int) -> dict[str, float]:
    """Runs in the d3rlpy virtualenv (see the module docstring)."""
    import d3rlpy

    from robolearn.data import Dataset

    ds = Dataset.load(dataset)
    data = ds.transitions("cpu")
    mdp = d3rlpy.dataset.MDPDataset(
        observations=data["obs"]["policy"].numpy(), actions=data["action"].numpy(),
        rewards=data["reward"].numpy().astype(np.float32), terminals=data["terminated"].numpy().astype(np.float32),
        timeouts=data["truncated"].numpy().astype(np.float32))
    d3rlpy.seed(seed)
    scaler = d3rlpy.preprocessing.StandardObservationScaler()
    if algo == "iql":  # d3rlpy's reproduction script for IQL on D4RL MuJoCo
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
    return {"score": score, "updates_per_s": updates / seconds}


def in_d3rlpy_env(algo: str, dataset: str, seed: int, updates: int) -> dict[str, float]:
    if not VENV_PYTHON.is_file():
        raise SystemExit(f"{VENV_PYTHON}: missing; make the d3rlpy virtualenv (see this file's docstring)")
    out = subprocess.run([str(VENV_PYTHON), __file__, "--worker", algo, dataset, str(seed), str(updates)], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"d3rlpy worker failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(results: list[dict], args: argparse.Namespace) -> str:
    from robolearn.data import Dataset

    lines = [f"### Offline RL on D4RL-style datasets of our tasks: robolearn vs d3rlpy {args.d3rlpy_version}", "",
             f"Machine: {machine()}. {args.updates:,} gradient updates per run, batch 256, one torch thread, "
             f"the papers' hyperparameters on both sides; score = normalized score x100 of the final policy over "
             f"{EVAL_EPISODES} deterministic episodes on our VecEnv (0 = random policy, 100 = our PPO expert; "
             "datasets: benchmarks/results/offline_datasets.md). Made by `python3 benchmarks/offline_d4rl_style.py`.", "",
             "| dataset (behavior score) | algo | seeds | robolearn score | d3rlpy score | robolearn updates/s | "
             "d3rlpy updates/s | speed ratio |", "|---|---|---|---|---|---|---|---|"]
    for dataset in args.datasets:
        behavior = 100 * Dataset.load(dataset).summary()["normalized_score_mean"]
        for algo in ALGOS:
            rows = {lib: [r for r in results if r["lib"] == lib and r["algo"] == algo and r["dataset"] == dataset]
                    for lib in ("robolearn", "d3rlpy")}
            if not rows["robolearn"] and not rows["d3rlpy"]:
                continue

            def stat(rs: list[dict], key: str, fmt: str) -> str:
                values = [r[key] for r in rs]
                return "-" if not values else (f"{np.mean(values):{fmt}} ± {np.std(values):{fmt}}" if key == "score"
                                               else f"{np.mean(values):{fmt}}")

            speeds = [np.mean([r["updates_per_s"] for r in rows[lib]]) if rows[lib] else np.nan for lib in rows]
            ratio = f"{speeds[0] / speeds[1]:.2f}x" if np.isfinite(speeds).all() else "-"
            seeds = min(len(rows["robolearn"]), len(rows["d3rlpy"])) or max(len(rows["robolearn"]), len(rows["d3rlpy"]))
            lines.append(f"| {dataset} ({behavior:.1f}) | {algo} | {seeds} | {stat(rows['robolearn'], 'score', '.1f')} | "
                         f"{stat(rows['d3rlpy'], 'score', '.1f')} | {stat(rows['robolearn'], 'updates_per_s', ',.0f')} | "
                         f"{stat(rows['d3rlpy'], 'updates_per_s', ',.0f')} | {ratio} |")
    lines += ["", "Per run: " + "; ".join(f"{r['lib']} {r['algo']} {r['dataset']} seed {r['seed']}: {r['score']:.1f} "
                                          f"({r['updates_per_s']:.0f}/s)" for r in results)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--updates", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--datasets", nargs="+", default=["hopper-medium", "half_cheetah-medium"])
    parser.add_argument("--worker", nargs=4, metavar=("ALGO", "DATASET", "SEED", "UPDATES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.worker:
        algo, dataset, seed, updates = args.worker
        print(json.dumps(run_d3rlpy(algo, dataset, int(seed), int(updates))))
        return
    args.d3rlpy_version = subprocess.run([str(VENV_PYTHON), "-c", "import d3rlpy; print(d3rlpy.__version__)"],
                                         capture_output=True, text=True).stdout.strip() or "(not installed)"
    results: list[dict] = []
    for seed in range(args.seeds):
        for dataset in args.datasets:
            for algo in ALGOS:
                for lib, fn in (("robolearn", run_ours), ("d3rlpy", in_d3rlpy_env)):
                    r = {"lib": lib, "algo": algo, "dataset": dataset, "seed": seed, **fn(algo, dataset, seed, args.updates)}
                    print(json.dumps(r), flush=True)
                    results.append(r)
                    (Path("/tmp") / "offline_bench.json").write_text(json.dumps(results))
                    write_result("offline.md", table(results, args))


if __name__ == "__main__":
    main()
