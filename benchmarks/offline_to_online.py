"""Offline-to-online on our hopper: WSRL vs naive fine-tuning vs SAC from scratch, side by side.

One Cal-QL pretraining (the WSRL ensemble: 10 LayerNorm critics, 2 sampled for targets) on
``hopper-medium``, stopped at the phase boundary; both fine-tuning arms resume from copies of
that run directory, so they start from the same pretrained networks:

- ``wsrl``: ``--warmup`` steps with the frozen pretrained policy into a fresh buffer, then SAC
  from the pretrained networks (offline data dropped);
- ``naive``: the same without warmup (updates from the first online step, offline data dropped);
- ``sac``: SAC from scratch (our ``sac`` agent, its defaults: twin critics, UTD 1) for
  ``--sac-steps`` online steps, by default 3x the fine-tuning budget, so "reaches SAC's final
  return in at most a third of the steps" can be read off one table.

Return against online env steps: ``--eval-episodes`` deterministic episodes every 1000 steps.

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
from common import RESULTS, machine, write_result  # noqa: E402

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
    """Cal-QL pretraining only (``runner.total_steps=0``); returns the run, its eval return and seconds."""
    from robolearn import load_config
    from robolearn.runner import train

    cfg = load_config("wsrl_hopper", [*common_overrides(args, seed), f"name=pretrain_s{seed}", "runner.total_steps=0",
                                      f"agent.pretrain_updates={args.pretrain}", f"agent.hidden={args.hidden}",
                                      f"agent.n_actions={args.n_actions}", f"runner.checkpoint_every={max(1, args.pretrain // 1000)}"])
    start = time.perf_counter()
    result = train(cfg)
    return result.run_dir, float(result.evaluation["return_mean"]), time.perf_counter() - start


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
                                                f"agent.warmup_steps={warmup}", "agent.offline_ratio=0.0"])
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain", type=int, default=5000, help="offline Cal-QL updates")
    parser.add_argument("--steps", type=int, default=10000, help="online env steps of each fine-tuning arm")
    parser.add_argument("--sac-steps", type=int, default=30000, help="online env steps of SAC from scratch")
    parser.add_argument("--random-steps", type=int, default=5000, help="SAC from scratch: uniform random steps first")
    parser.add_argument("--warmup", type=int, default=1000, help="WSRL warmup steps (the paper: 5000 of 250k-1M)")
    parser.add_argument("--utd", type=float, default=2.0)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", default="[128,128]")
    parser.add_argument("--n-actions", type=int, default=4)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--report-only", action="store_true", help="rewrite the table and plot from the last run's curves")
    args = parser.parse_args()
    if args.report_only:
        saved = json.loads((WORK / "curves.json").read_text())
        report(argparse.Namespace(**saved["args"]), saved["curves"], saved["pretrained"], saved["seconds"])
        return
    import torch

    torch.set_num_threads(1)
    curves: dict[str, list[list[tuple[int, float]]]] = {"wsrl": [], "naive": [], "sac": []}
    pretrained_returns, seconds = [], {"pretrain": 0.0, "wsrl": 0.0, "naive": 0.0, "sac": 0.0}
    for seed in range(args.seeds):
        run, value, elapsed = pretrain(args, seed)
        pretrained_returns.append(value)
        seconds["pretrain"] += elapsed
        for arm in ("wsrl", "naive"):
            run_dir, elapsed = finetune(args, seed, run, arm)
            curves[arm].append([(0, value)] + curve(run_dir))
            seconds[arm] += elapsed
            _save(args, curves, pretrained_returns, seconds)
        run_dir, elapsed = sac(args, seed)
        curves["sac"].append(json.loads((run_dir / "evals.json").read_text()))
        seconds["sac"] += elapsed
        _save(args, curves, pretrained_returns, seconds)
    report(args, curves, pretrained_returns, seconds)


def _save(args, curves, pretrained_returns, seconds) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "curves.json").write_text(json.dumps({"args": vars(args), "curves": curves, "pretrained": pretrained_returns,
                                                  "seconds": seconds}))


def mean_curve(runs: list[list[tuple[int, float]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    length = min(len(r) for r in runs)
    steps = np.array([p[0] for p in runs[0][:length]])
    values = np.array([[p[1] for p in r[:length]] for r in runs])
    return steps, values.mean(0), values.std(0)


def report(args, curves, pretrained_returns, seconds) -> None:
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
    fig.savefig(RESULTS / "offline_to_online.png", dpi=100)

    sac_final = float(np.mean([r[-1][1] for r in curves["sac"]])) if curves["sac"] else float("nan")
    pre = float(np.mean(pretrained_returns))
    rows = []
    for arm, runs in curves.items():
        if not runs:
            continue
        steps, mean, std = mean_curve(runs)
        early = mean[steps <= max(args.warmup, 1000) + 1000]
        reach = first_reaching(list(zip(steps.tolist(), mean.tolist())), sac_final)
        budget = args.sac_steps if arm == "sac" else args.steps
        rows.append(f"| {labels[arm]} | {budget:,} | {len(runs)} | {mean[0]:.0f} | {early.min():.0f} | {mean[-1]:.0f} ± {std[-1]:.0f} | "
                    f"{'-' if reach is None else f'{reach:,}'} | {seconds[arm] / len(runs) / 60:.1f} |")
    table = "\n".join(rows)
    per_step = " ".join(f"{s // 1000}k:{v:.0f}" for s, v in zip(*mean_curve(curves["wsrl"])[:2])) if curves["wsrl"] else ""
    per_step_naive = " ".join(f"{s // 1000}k:{v:.0f}" for s, v in zip(*mean_curve(curves["naive"])[:2])) if curves["naive"] else ""
    per_step_sac = " ".join(f"{s // 1000}k:{v:.0f}" for s, v in zip(*mean_curve(curves["sac"])[:2])) if curves["sac"] else ""
    write_result("offline_to_online.md", f"""### Offline-to-online on hopper-medium: WSRL vs naive fine-tuning vs SAC from scratch

Machine: {machine()} (2 cores shared with other jobs, one torch thread). Made by
`python3 benchmarks/offline_to_online.py --pretrain {args.pretrain} --steps {args.steps} --sac-steps {args.sac_steps} --seeds {args.seeds}`.

**Budget.** Pretraining: Cal-QL, {args.pretrain:,} updates (batch 256, cql_alpha 5, {args.n_actions} sampled actions per
proposal), 10 critics with LayerNorm, 2 sampled for targets, networks {args.hidden}
({seconds['pretrain'] / max(1, args.seeds) / 60:.1f} min per seed); pretrained policy return {pre:.0f}. Online, both
fine-tuning arms start from the same pretrained run: {args.steps:,} env steps, UTD {args.utd:g}, batch {args.batch},
actor lr 1e-4, critic lr 3e-4, target entropy 0, tau 5e-3; WSRL warms up for {args.warmup:,} steps with the frozen
pretrained policy and no updates; naive fine-tuning updates from step 1; neither keeps the offline data. SAC from
scratch: our `sac` (twin critics 256x256, UTD 1, batch 256, {args.random_steps:,} random steps) for {args.sac_steps:,} steps.
Evaluation: {args.eval_episodes} deterministic episodes every 1,000 online steps.

| arm | online steps | seeds | first eval return (step 0: pretrained; SAC: 1k) | lowest return in first {max(args.warmup, 1000) + 1000:,} steps | final return | first step reaching SAC's final return ({sac_final:.0f}) | minutes per seed |
|---|---|---|---|---|---|---|---|
{table}

Curves (mean eval return per 1k online steps): WSRL {per_step}; naive {per_step_naive}; SAC {per_step_sac}.

![return against online steps](offline_to_online.png)
""")


if __name__ == "__main__":
    main()
