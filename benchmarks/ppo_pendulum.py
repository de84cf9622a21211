"""PPO against Stable-Baselines3 PPO on Gymnasium's Pendulum-v1: wall-clock to solve.

Both train on the same Gymnasium env; "solved" is a mean deterministic evaluation
return of at least -200 over 10 episodes, checked after every update (SB3: every
rollout; ours: every iteration), each agent on the same 10 start states at every
check. Evaluation time is excluded from both clocks.
SB3 uses rl-baselines3-zoo's tuned Pendulum-v1 hyperparameters; ours uses
configs/ppo_gym_pendulum.yaml. Seeds run one after another, SB3's first.
Writes ``benchmarks/results/<--out>`` (BENCHMARKS.md, "PPO vs Stable-Baselines3 on Pendulum-v1").

    python benchmarks/ppo_pendulum.py [--seeds 3] [--budget 200000]
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from common import benchmark_parser, machine, quiet_sb3_logger, write_result

SOLVED = -200.0
EVAL_EPISODES = 10


class Clock:
    """Training wall-clock with evaluation pauses taken out."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.paused = 0.0

    def pause(self):
        clock = self

        class _Pause:
            def __enter__(self):
                self.t = time.perf_counter()

            def __exit__(self, *exc):
                clock.paused += time.perf_counter() - self.t

        return _Pause()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start - self.paused


def run_sb3(seed: int, budget: int) -> tuple[float, int, float]:
    """Returns (seconds to solve or inf, env steps, final eval return)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    # rl-zoo's Pendulum-v1 entry (hyperparams/ppo.yml) as it is: no `normalize` (an earlier version of this
    # benchmark wrapped both envs in VecNormalize, which the entry never had and which lost seeds here)
    env = make_vec_env("Pendulum-v1", n_envs=4, seed=seed)
    eval_env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed + 1000)
    model = PPO("MlpPolicy", env, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
                learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4, seed=seed, device="cpu", verbose=0)
    clock = Clock()
    result = {"time": float("inf"), "steps": budget, "return": float("nan")}

    def evaluate() -> float:
        eval_env.seed(seed + 1000)  # the same 10 start states at every check, as ours (evaluate's seed)
        return evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)[0]

    class Solve(BaseCallback):
        """Evaluates after each update (= at the start of the next rollout); stops once solved."""

        def _on_rollout_start(self) -> None:
            if self.num_timesteps == 0:
                return
            with clock.pause():
                mean = evaluate()
            result["return"] = mean
            if mean >= SOLVED and result["time"] == float("inf"):
                result["time"], result["steps"] = clock.elapsed(), self.num_timesteps

        def _on_step(self) -> bool:
            return result["time"] == float("inf")

    model.set_logger(quiet_sb3_logger())
    model.learn(total_timesteps=budget, callback=Solve())
    if result["time"] == float("inf"):  # unsolved: the steps it ran, and its last update evaluated too (the
        result["steps"], result["return"] = model.num_timesteps, evaluate()  # callback evaluates next rollouts only)
    return result["time"], result["steps"], result["return"]


def run_ours(seed: int, budget: int) -> tuple[float, int, float]:
    from robolearn import load_config
    from robolearn.evaluate import evaluate
    from robolearn.registry import make_env
    from robolearn.runner import Runner

    cfg = load_config("ppo_gym_pendulum", [f"seed={seed}", f"runner.total_steps={budget}", "logging.wandb=disabled",
                                           "logging.progress=false", "runner.video_seconds=0", "runner.eval_episodes=0",
                                           "run_dir=/tmp/robolearn-bench"])
    runner = Runner(cfg)
    eval_env = make_env(cfg.env, num_envs=EVAL_EPISODES)
    clock = Clock()
    result = {"time": float("inf"), "steps": budget, "return": float("nan")}

    def solved(_: dict) -> bool:
        with clock.pause():
            controller = runner.agent.controller()
            result["return"] = evaluate(controller, eval_env, EVAL_EPISODES, seed=seed + 1000)["return_mean"]
        if result["return"] >= SOLVED:
            result["time"], result["steps"] = clock.elapsed(), runner.progress.env_steps
            return True
        return False

    runner.train(stop=solved)
    if result["time"] == float("inf"):  # unsolved: the steps it ran (whole iterations: past the budget)
        result["steps"] = runner.progress.env_steps
    runner.close()
    return result["time"], result["steps"], result["return"]


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 of each agent")
    parser.add_argument("--budget", type=int, default=200_000, help="env steps per run, to the end of the iteration that reaches them (a run ends when solved)")
    parser.add_argument("--out", default="ppo_pendulum.md", help="file under benchmarks/results/ (a trial: another name)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # both agents alike; the runner's default too (see RunnerConfig.torch_threads)
    rows = []
    for name, fn in (("Stable-Baselines3 PPO (rl-zoo)", run_sb3), ("robolearn PPO", run_ours)):
        times, steps, returns = [], [], []
        for seed in range(args.seeds):
            t, s, r = fn(seed, args.budget)
            print(f"{name} seed {seed}: {t:.1f} s, {s} steps, eval return {r:.1f}", flush=True)
            times.append(t), steps.append(s), returns.append(r)
        rows.append((name, times, steps, returns))
    sb3_median = statistics.median(rows[0][1])
    lines = [
        "### PPO on Pendulum-v1: wall-clock to a mean evaluation return of -200",
        "",
        f"Machine: {machine()}. {args.seeds} seeds, budget {args.budget:,} env steps, evaluation "
        f"({EVAL_EPISODES} deterministic episodes after each update) excluded from the clock.",
        "",
        "| agent | seconds to solve (per seed) | median s | env steps (median) | final eval return (mean) | time vs SB3 |",
        "|---|---|---|---|---|---|",
    ]
    for name, times, steps, returns in rows:
        median = statistics.median(times)
        lines.append(f"| {name} | {', '.join(f'{t:.1f}' for t in times)} | {median:.1f} | {int(statistics.median(steps)):,} | "
                     f"{np.mean(returns):.1f} | {median / sb3_median:.2f} |")
    write_result(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
