"""Action-sequence critic (K actions scored together) against its K = 1 version, at equal updates.

Same task, budget, settings and number of gradient updates (one per env step after the random
phase); the only change is K: how many actions the critic scores and the actor emits per
decision. Reported per seed: the final return (10 deterministic episodes, each deciding every
K steps as deployed), and the training wall-clock.

    python benchmarks/sequence_critic.py [--seeds 3] [--steps 10000] [--ks 1 4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import machine, write_result  # noqa: E402

EVAL_EPISODES = 10


def run(k: int, seed: int, steps: int, random_steps: int) -> tuple[float, float]:
    from robolearn import load_config
    from robolearn.runner import Runner

    cfg = load_config("sac_as_gym_pendulum", [
        f"agent.sequence_length={k}", f"seed={seed}", f"runner.total_steps={steps}", f"runner.random_steps={random_steps}",
        f"runner.eval_episodes={EVAL_EPISODES}", "runner.video_seconds=0", "runner.checkpoint_every=100000",
        "logging.wandb=disabled", "logging.progress=false", f"run_dir={tempfile.gettempdir()}/robolearn-seqcritic"])
    runner = Runner(cfg)
    start = time.perf_counter()
    result = runner.train()
    elapsed = time.perf_counter() - start  # includes the export and the final evaluation, alike for every K
    runner.close()
    return result.evaluation["return_mean"], elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--random-steps", type=int, default=1_000)
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for k in args.ks:
        returns, clocks = [], []
        for seed in range(args.seeds):
            r, s = run(k, seed, args.steps, args.random_steps)
            print(f"K={k} seed {seed}: return {r:.1f}, {s:.0f} s", flush=True)
            returns.append(r), clocks.append(s)
        rows.append(f"| K = {k} | {', '.join(f'{r:.0f}' for r in returns)} | {np.mean(returns):.0f} ± {np.std(returns):.0f} | "
                    f"{np.mean(clocks):.0f} |")
    updates = args.steps - args.random_steps
    write_result("sequence_critic.md", "\n".join([
        f"### Action-sequence critic vs K = 1 on Pendulum-v1: {args.steps:,} env steps, {updates:,} updates each, "
        f"{args.seeds} seeds", "",
        f"Machine: {machine()}. SAC settings (lr 3e-4, 256x256, batch 256), {args.random_steps:,} random steps, one "
        f"update per env step, 1-step bootstrap; the actor emits K actions played open loop. Final return: "
        f"{EVAL_EPISODES} deterministic episodes.", "",
        "| critic | final return per seed | mean ± std | wall-clock (s) |", "|---|---|---|---|", *rows]))


if __name__ == "__main__":
    main()
