"""PPO against Stable-Baselines3 PPO at rl-zoo's budget (1M env steps) on half_cheetah, hopper and ant.

SB3 trains on Gymnasium's v5 env with rl-baselines3-zoo's hyperparameters for it (rl_zoo3 2.9.2,
hyperparams/ppo.yml: the tuned HalfCheetah-v4 and Hopper-v4 entries; its Ant-v4 entry is SB3's defaults
with ``normalize``), in VecNormalize as rl-zoo wraps it (the entry's gamma). Ours trains
configs/ppo_<task>.yaml, unchanged but for the budget (128 envs, tuned for wall-clock); ``--agents ours_zoo``
also trains ours with rl-zoo's hyperparameters (configs/ppo_<task>_zoo.yaml, one env, 20 epochs), which tells
our implementation apart from our operating point. Every ``--eval-every`` env steps both are evaluated
on 10 deterministic episodes from the same seed (seed + 10000): SB3 on the v5 env with its observation
statistics frozen, ours on our task, which reproduces the v5 env's observations, rewards and
terminations (tests/sims/test_gym_parity.py). Seconds are whole runs, evaluations included; the two
agents collect differently (one env against 128), so they are not a speed comparison.

Each run is appended to results/ppo_mujoco_sb3_runs.jsonl (named after ``--out``) as it ends (a cut-short benchmark keeps them;
``--append`` adds seeds or tasks); the report (results/ppo_mujoco_sb3.md, .png) is made from that file.

    python benchmarks/ppo_mujoco_sb3.py [--tasks half_cheetah hopper ant] [--seeds 3] [--steps 1000000]
    python benchmarks/ppo_mujoco_sb3.py --agents ours_zoo --tasks half_cheetah --append
    python benchmarks/ppo_mujoco_sb3.py --report-only
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from common import (RESULTS, benchmark_parser, machine, pool_runs, quiet_sb3_logger, read_jsonl,
                    train_online_with_evals, write_result)

EVAL_EPISODES = 10
GYM_IDS = {"half_cheetah": "HalfCheetah-v5", "hopper": "Hopper-v5", "ant": "Ant-v5"}
CONFIGS = {"ours": "ppo_{task}", "ours_zoo": "ppo_{task}_zoo"}  # our agents: their configs
NAMES = {"sb3": "Stable-Baselines3 PPO (rl-zoo)", "ours": "robolearn PPO (its config)",
         "ours_zoo": "robolearn PPO, rl-zoo's hyperparameters"}
# rl_zoo3 2.9.2 hyperparams/ppo.yml, as data (rl_zoo3 itself is not a dependency: it pins its own stack).
# Every entry has `normalize: true` and `n_envs: 1`; the policy_kwargs strings are written out as dicts.
_ZOO_NET = {"log_std_init": -2, "ortho_init": False, "net_arch": {"pi": [256, 256], "vf": [256, 256]}}
RL_ZOO = {
    "HalfCheetah-v5": {"batch_size": 64, "n_steps": 512, "gamma": 0.98, "learning_rate": 2.0633e-05,
                       "ent_coef": 0.000401762, "clip_range": 0.1, "n_epochs": 20, "gae_lambda": 0.92,
                       "max_grad_norm": 0.8, "vf_coef": 0.58096, "policy_kwargs": _ZOO_NET},
    "Hopper-v5": {"batch_size": 32, "n_steps": 512, "gamma": 0.999, "learning_rate": 9.80828e-05,
                  "ent_coef": 0.00229519, "clip_range": 0.2, "n_epochs": 5, "gae_lambda": 0.99,
                  "max_grad_norm": 0.7, "vf_coef": 0.835671, "policy_kwargs": _ZOO_NET},
    "Ant-v5": {},  # rl-zoo's tuned Ant entry is commented out; the live one is `<<: *mujoco-defaults`
}


def run_sb3(task: str, seed: int, steps: int, eval_every: int) -> dict:
    """SB3 PPO with rl-zoo's entry for the task's v5 env; the curve of deterministic evaluations."""
    import torch.nn as nn
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    gym_id, start = GYM_IDS[task], time.perf_counter()
    params = {key: dict(value) if isinstance(value, dict) else value for key, value in RL_ZOO[gym_id].items()}
    if "policy_kwargs" in params:
        params["policy_kwargs"]["activation_fn"] = nn.ReLU
    normalize = {"gamma": params["gamma"]} if "gamma" in params else {}  # rl-zoo normalizes with the entry's gamma
    env = VecNormalize(make_vec_env(gym_id, n_envs=1, seed=seed), **normalize)
    eval_env = VecNormalize(make_vec_env(gym_id, n_envs=1, seed=seed + 10_000), training=False, norm_reward=False,
                            **normalize)
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **params)
    curve: list[dict] = []

    def evaluate(env_steps: int) -> None:
        eval_env.obs_rms = env.obs_rms.copy()
        eval_env.seed(seed + 10_000)  # the same start states at every evaluation
        returns, lengths = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True,
                                           return_episode_rewards=True)
        curve.append({"env_steps": env_steps, "return": float(np.mean(returns)), "length": float(np.mean(lengths)),
                      "time": time.perf_counter() - start})
        print(f"sb3 {task} seed {seed}: {env_steps:,} steps, eval {curve[-1]['return']:.0f}", flush=True)

    class EvalEvery(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % eval_every == 0:
                evaluate(self.num_timesteps)
            return True

    model.set_logger(quiet_sb3_logger())
    model.learn(total_timesteps=steps, callback=EvalEvery())
    if not curve or curve[-1]["env_steps"] != model.num_timesteps:
        evaluate(model.num_timesteps)
    return {"agent": "sb3", "task": task, "seed": seed, "curve": curve, "seconds": time.perf_counter() - start}


def run_ours(agent: str, task: str, seed: int, steps: int, eval_every: int) -> dict:
    """Our config for the agent (``ours``: configs/ppo_<task>.yaml; ``ours_zoo``: ppo_<task>_zoo.yaml, rl-zoo's
    hyperparameters) for ``steps`` env steps, evaluated as SB3 is."""
    config = CONFIGS[agent].format(task=task)
    _, curve, seconds = train_online_with_evals(
        config, [], f"/tmp/robolearn-bench/ppo_mujoco_sb3/{config}-{seed}", seed, steps, eval_every, EVAL_EPISODES,
        on_eval=lambda point: print(f"{agent} {task} seed {seed}: {point['env_steps']:,} steps, eval "
                                    f"{point['return']:.0f}", flush=True))
    points = [{key: point[key] for key in ("env_steps", "return", "length", "time")} for point in curve]
    return {"agent": agent, "task": task, "seed": seed, "curve": points, "seconds": seconds}


def run_job(job: tuple[str, str, int, int, int]) -> dict:
    import torch

    torch.set_num_threads(1)  # one core per run; two runs share the machine's two
    agent, task, seed, steps, eval_every = job
    run = run_sb3(task, seed, steps, eval_every) if agent == "sb3" else run_ours(agent, task, seed, steps, eval_every)
    return {**run, "steps": steps, "machine": machine()}


def mean_std(values: list[float]) -> str:
    return f"{np.mean(values):.0f} ± {np.std(values):.0f}" if len(values) > 1 else f"{values[0]:.0f}"


def report(runs: list[dict], png: Path) -> str:
    """The table of final and best evaluations per task and agent, and their curves drawn into ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [task for task in GYM_IDS if any(run["task"] == task for run in runs)]
    lines = ["### PPO against Stable-Baselines3 PPO at 1M env steps (rl-zoo's budget)", "",
             f"Machine: {runs[0]['machine']}. Final = the deterministic evaluation ({EVAL_EPISODES} episodes) at the "
             "end of the budget; best = the best of a run's evaluations. "
             "Seconds: whole runs, evaluations included, with other runs sharing the machine's cores (--processes); "
             "not a speed comparison (one env against 128).", "",
             "| task | agent | seeds | env steps | final eval per seed | final mean ± std | best mean ± std | s per run (median) |",
             "|---|---|---|---|---|---|---|---|"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for agent, color in (("sb3", "tab:orange"), ("ours", "tab:blue"), ("ours_zoo", "tab:green")):
            mine = sorted((run for run in runs if run["task"] == task and run["agent"] == agent), key=lambda r: r["seed"])
            if not mine:
                continue
            finals = [run["curve"][-1]["return"] for run in mine]
            bests = [max(point["return"] for point in run["curve"]) for run in mine]
            lines.append(f"| {task} | {NAMES[agent]} | {', '.join(str(run['seed']) for run in mine)} | "
                         f"{statistics.median(run['curve'][-1]['env_steps'] for run in mine):,.0f} | "
                         f"{', '.join(f'{value:.0f}' for value in finals)} | {mean_std(finals)} | {mean_std(bests)} | "
                         f"{statistics.median(run['seconds'] for run in mine):.0f} |")
            for i, run in enumerate(mine):
                ax.plot([p["env_steps"] for p in run["curve"]], [p["return"] for p in run["curve"]], color=color,
                        alpha=0.8, linewidth=1, label=NAMES[agent] if i == 0 else None)
        ax.set_title(f"{task} ({GYM_IDS[task]})")
        ax.set_xlabel("env steps")
        ax.set_ylabel(f"eval return ({EVAL_EPISODES} episodes)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    lines += ["", f"![]({png.name})"]
    return "\n".join(lines)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--tasks", nargs="+", default=list(GYM_IDS), choices=list(GYM_IDS), help="tasks to train, each agent on each")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 of each agent")
    parser.add_argument("--steps", type=int, default=1_000_000, help="env steps per run (rl-zoo's n_timesteps)")
    parser.add_argument("--eval-every", type=int, default=100_000, help="env steps between evaluations")
    parser.add_argument("--agents", nargs="+", default=["ours", "sb3"], choices=list(NAMES),
                        help="ours: configs/ppo_<task>.yaml; ours_zoo: ppo_<task>_zoo.yaml (rl-zoo's hyperparameters, "
                             "half_cheetah only); sb3: SB3 with rl-zoo's entry")
    parser.add_argument("--processes", type=int, default=2, help="runs at a time, one core each")
    parser.add_argument("--append", action="store_true", help="add these runs to the runs file instead of starting it anew")
    parser.add_argument("--report-only", action="store_true", help="write the report from the runs file, training nothing")
    parser.add_argument("--out", default="ppo_mujoco_sb3.md", help="file under benchmarks/results/ (a trial: another name)")
    args = parser.parse_args()
    configs = RESULTS.parents[1] / "configs"
    wanted = [CONFIGS[agent].format(task=task) for agent in args.agents if agent in CONFIGS for task in args.tasks]
    if missing := [f"{name}.yaml" for name in wanted if not (configs / f"{name}.yaml").is_file()]:
        # (said before the runs file is set aside: found in a job, it had stopped the pool, killing runs in flight)
        parser.error(f"no configs/{', '.join(missing)}: give --tasks that each agent has a config for")
    out = RESULTS / args.out if Path(args.out).name == args.out else Path(args.out)  # as write_result reads it
    runs = out.with_name(f"{out.stem}_runs.jsonl")
    if not args.report_only:
        # ours first: its runs take minutes, SB3's about 14 min each for half_cheetah on one core
        jobs = [(agent, task, seed, args.steps, args.eval_every)
                for agent in args.agents for task in args.tasks for seed in range(args.seeds)]
        for run in pool_runs(run_job, jobs, args.processes, runs, append=args.append):
            print(f"done: {run['agent']} {run['task']} seed {run['seed']}: final {run['curve'][-1]['return']:.0f} "
                  f"in {run['seconds']:.0f} s", flush=True)
    if not runs.is_file() or not runs.read_text().strip():
        raise SystemExit(f"{runs} has no runs; run without --report-only first")
    write_result(args.out, report(read_jsonl(runs), out.with_suffix(".png")))


if __name__ == "__main__":
    main()
