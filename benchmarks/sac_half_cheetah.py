"""SAC against Stable-Baselines3 SAC on Gymnasium's HalfCheetah-v5.

Same env (one Gymnasium HalfCheetah-v5 through our adapter), same budget
(default 30k env steps, 10k random first, one gradient update per env step,
batch 256, lr 3e-4, 256x256 networks: SB3's defaults and rl-zoo's MuJoCo
settings), same evaluation (10 deterministic episodes at the end). Reported:
final return per seed and training env steps per second.

Our config runs float32 matmuls at ``matmul_precision: medium`` (bf16 inputs,
fp32 accumulation, on AMX / AVX512-BF16 CPUs); ``--sb3-medium`` adds SB3 with the
same switch (``torch.set_float32_matmul_precision("medium")``), so the table
shows how much of the ratio is that switch and how much is the implementation.

    python benchmarks/sac_half_cheetah.py [--seeds 3] [--steps 30000] [--sb3-medium] [--out sac_half_cheetah.md]

Seeds run one after another, SB3's first. Writes ``benchmarks/results/<--out>`` (BENCHMARKS.md,
"SAC vs Stable-Baselines3 on HalfCheetah-v5").
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import torch

from common import benchmark_parser, check_whole_iterations, machine, quiet_sb3_logger, write_result

EVAL_EPISODES = 10
RANDOM_STEPS = 10_000


def run_sb3(seed: int, steps: int, precision: str = "highest") -> tuple[float, float]:
    """Returns (final mean eval return, training env steps/s)."""
    from stable_baselines3 import SAC

    torch.set_float32_matmul_precision(precision)
    from stable_baselines3.common.evaluation import evaluate_policy

    env = gym.make("HalfCheetah-v5")
    model = SAC("MlpPolicy", env, learning_starts=RANDOM_STEPS, seed=seed, device="cpu", verbose=0)
    start = time.perf_counter()
    model.set_logger(quiet_sb3_logger())
    model.learn(total_timesteps=steps)
    elapsed = time.perf_counter() - start
    mean, _ = evaluate_policy(model, gym.make("HalfCheetah-v5"), n_eval_episodes=EVAL_EPISODES, deterministic=True)
    return float(mean), steps / elapsed


def run_ours(seed: int, steps: int) -> tuple[float, float]:
    from robolearn import load_config
    from robolearn.runner import Runner

    cfg = load_config("sac_gym_half_cheetah", [f"seed={seed}", f"runner.total_steps={steps}", "logging.wandb=disabled",
                                               "logging.progress=false", "runner.video_seconds=0",
                                               f"runner.eval_episodes={EVAL_EPISODES}", f"runner.random_steps={RANDOM_STEPS}",
                                               "run_dir=/tmp/robolearn-bench"])
    runner = Runner(cfg)
    trained: list[float] = []  # when the budget was reached: the clock excludes the final export and evaluation, as SB3's does

    def stop(_: dict) -> bool:
        if runner.progress.env_steps >= steps:
            trained.append(time.perf_counter())
        return bool(trained)

    start = time.perf_counter()
    result = runner.train(stop=stop)
    elapsed = trained[0] - start
    runner.close()
    return result.evaluation["return_mean"], steps / elapsed


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 of each agent")
    parser.add_argument("--steps", type=int, default=30_000, help="env steps per run, the random ones included")
    parser.add_argument("--sb3-medium", action="store_true", help="also run SB3 with float32 matmul precision 'medium'")
    parser.add_argument("--out", default="sac_half_cheetah.md", help="results file under benchmarks/results/")
    args = parser.parse_args()
    check_whole_iterations(parser, args.steps)
    if args.steps <= RANDOM_STEPS:  # else nothing trains, and the speed ratio compares random-action collection
        parser.error(f"--steps {args.steps:,} must exceed the {RANDOM_STEPS:,} random steps both agents take first")
    torch.set_num_threads(1)  # both agents alike; the runner's default too (see RunnerConfig.torch_threads)
    agents = [("Stable-Baselines3 SAC", run_sb3)]
    if args.sb3_medium:
        agents.append(("Stable-Baselines3 SAC, matmul precision medium", lambda seed, steps: run_sb3(seed, steps, "medium")))
    agents.append(("robolearn SAC (matmul precision medium)", run_ours))
    rows = []
    for name, fn in agents:
        returns, speeds = [], []
        for seed in range(args.seeds):
            r, sps = fn(seed, args.steps)
            print(f"{name} seed {seed}: return {r:.1f}, {sps:.1f} steps/s", flush=True)
            returns.append(r), speeds.append(sps)
        rows.append((name, returns, speeds))
    sb3_speed = np.mean(rows[0][2])
    lines = [
        f"### SAC on HalfCheetah-v5: {args.steps:,} env steps, {args.seeds} seeds",
        "",
        f"Machine: {machine()}. {RANDOM_STEPS:,} random steps first, then one update per env step; "
        f"final return = mean of {EVAL_EPISODES} deterministic episodes.",
        "",
        "| agent | final return per seed | mean ± std | train steps/s (mean) | speed vs SB3 |",
        "|---|---|---|---|---|",
    ]
    for name, returns, speeds in rows:
        lines.append(f"| {name} | {', '.join(f'{r:.0f}' for r in returns)} | {np.mean(returns):.0f} ± {np.std(returns):.0f} | "
                     f"{np.mean(speeds):.0f} | {np.mean(speeds) / sb3_speed:.2f}x |")
    write_result(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
