"""Learning curves of PPO on our CPU MuJoCo tasks: return against env steps and wall-clock.

Trains each config (default: ppo_half_cheetah, ppo_ant) through the normal
runner, then plots its metrics.jsonl into benchmarks/results/ppo_<task>.png, and
writes the table (steps, seconds, final evaluation return) to benchmarks/results/<--out>
(BENCHMARKS.md, "PPO learning curves"). No peer library runs here: benchmarks/ppo_mujoco_sb3.py sets
our PPO against SB3's at rl-zoo's 1M-step budget. In its run on 2 CPU cores, half_cheetah took
259 s for its 3M steps and ant 429 s for its 2M.

    python benchmarks/learning_curves.py [--configs ppo_half_cheetah ppo_ant] [--steps N]
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from common import RESULTS, benchmark_parser, machine, raise_to_end_an_episode, write_result  # noqa: E402


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--configs", nargs="+", default=["ppo_half_cheetah", "ppo_ant"],
                        help="PPO configs to train, one after another")
    parser.add_argument("--steps", type=int, default=0, help="override runner.total_steps (0: the config's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every run")
    parser.add_argument("--out", default="learning_curves.md", help="file under benchmarks/results/ (a trial: another name)")
    args = parser.parse_args()

    from robolearn import load_config, train
    from robolearn.logger import read_metrics

    rows, curveless = [], []
    for name in args.configs:
        overrides = [f"seed={args.seed}", "logging.wandb=disabled", "runner.video_seconds=0", "run_dir=/tmp/robolearn-bench"]
        if args.steps:
            overrides.append(f"runner.total_steps={args.steps}")
        cfg = load_config(name, overrides)
        result = train(cfg)
        metrics = [m for m in read_metrics(result.run_dir) if "return" in m]
        if not metrics:  # said at the end: the other configs' curves and table are still written
            curveless.append(f"{name}: no training episode ended within {cfg.runner.total_steps:,} env steps, so "
                             f"there is no curve; {raise_to_end_an_episode('--steps', name)}")
            continue
        steps = [m["env_steps"] for m in metrics]
        returns = [m["return"] for m in metrics]
        seconds = [m["time"] for m in metrics]
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
        left.plot(steps, returns)
        left.set_xlabel("env steps")
        left.set_ylabel("training episode return (last 100)")
        right.plot(seconds, returns)
        right.set_xlabel("wall-clock seconds (2 CPU cores)")
        fig.suptitle(f"robolearn PPO on {cfg.env.task} ({cfg.env.num_envs} envs)")
        fig.tight_layout()
        RESULTS.mkdir(parents=True, exist_ok=True)
        # beside the table, named after it unless it is the default one (whose curves BENCHMARKS.md embeds)
        stem = "" if args.out == "learning_curves.md" else f"{Path(args.out).stem}_"
        png = (RESULTS / args.out).parent / f"{stem}ppo_{cfg.env.task}.png"
        fig.savefig(png, dpi=100)
        plt.close(fig)
        evaluation = result.evaluation or {}
        rows.append(f"| {cfg.env.task} | {cfg.env.num_envs} | {steps[-1]:,} | {seconds[-1]:.0f} | {steps[-1] / seconds[-1]:,.0f} | "
                    f"{evaluation.get('return_mean', float('nan')):.0f} ± {evaluation.get('return_std', float('nan')):.0f} | "
                    f"![]({png.name}) |")  # beside this table in results/
    lines = [
        "### PPO learning curves on our CPU MuJoCo tasks",
        "",
        f"Machine: {machine()}. Collection plus updates, end to end; evaluation = 10 deterministic episodes at the end.",
        "",
        "| task | envs | env steps | seconds | env steps/s | final eval return | curve |",
        "|---|---|---|---|---|---|---|",
        *rows,
        *(["", *(f"No curve: {said}" for said in curveless)] if curveless else []),
    ]
    if rows:
        write_result(args.out, "\n".join(lines))
    if curveless:
        raise SystemExit("\n".join(curveless))


if __name__ == "__main__":
    main()
