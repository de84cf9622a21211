"""End-to-end PPO throughput: our Runner/PPO against rsl-rl-lib's OnPolicyRunner on the same VecEnv.

Both train ``--iterations`` iterations (collection + update) with the
hyperparameters of ``configs/ppo_<task>.yaml`` (rsl-rl-lib gets the same network
sizes, activation, rollout length, epochs, minibatches, learning-rate schedule
and clipping); RSL-RL trains through ``sims.adapters.rsl_rl.VecEnvAsRslRl`` on
the very VecEnv our runner built. The learners take turns (``--rounds``) so
that both see the same background load, each round starting from a fresh reset
of the shared env; the first iteration of each is warm-up and not timed. An
iteration's time is collection plus update, as each runner measures it (our
``iteration_time``, RSL-RL's collect_time + learn_time): neither runner's logging
or per-call setup is in it. Env steps/s = num_envs x num_steps / the median
iteration's seconds (the median keeps the figure of the learner, not of other
jobs on a shared machine). The tables also give the median seconds of each part,
collection (env steps and policy calls) and update, as each runner logs them.

With ``--mjlab TASK_ID`` a third learner joins the rounds: mjlab's own training
of its task (its ManagerBasedRlEnv, its RSL-RL config and its runner, as
``mjlab.scripts.train`` builds them) at the same number of worlds: the end-to-end
figure of the stack a user would otherwise reach for. Its env is mjlab's, not
ours, so that row compares whole stacks, not learners.

Not shared: RSL-RL has no return normalization (configs that set
``normalize_rewards`` differ there), and RSL-RL bootstraps time-outs from
V(s_t) where ours uses V(final_obs) (one extra critic pass per step).

Writes ``benchmarks/results/<--out>`` (BENCHMARKS.md, "GPU: MuJoCo Warp", "PPO end to end
against rsl-rl-lib"); ``bash benchmarks/gpu.sh ppo`` runs it on a GPU.

    python benchmarks/ppo_vs_rsl_rl.py --task pendulum --num-envs 64 --iterations 10
    python benchmarks/ppo_vs_rsl_rl.py --task ant --num-envs 4096 --device cuda --backend warp
    python benchmarks/ppo_vs_rsl_rl.py --task go1_flat --num-envs 4096 --device cuda --backend warp \\
        --mjlab Mjlab-Velocity-Flat-Unitree-Go1
"""

from __future__ import annotations

import os
import statistics
import tempfile
from importlib.metadata import version
from typing import Any, NamedTuple

import mujoco
import torch
from rsl_rl.runners import OnPolicyRunner

from common import benchmark_parser, machine, task_env, write_result
from robolearn.config import TrainConfig, load_config
from robolearn.runner import Runner
from sims.adapters.rsl_rl import VecEnvAsRslRl


def train_config(task: str, num_envs: int, device: str, backend: str, run_dir: str,
                 overrides: list[str] | None = None) -> TrainConfig:
    """``configs/ppo_<task>.yaml`` with ``overrides`` (key=value), without checkpoints, evaluation, video or W&B."""
    cfg = load_config(f"ppo_{task}", overrides or [])
    cfg.env.num_envs, cfg.env.device, cfg.run_dir = num_envs, device, run_dir
    cfg.env.backend = backend
    cfg.runner.checkpoint_every = 10**9
    cfg.runner.eval_episodes, cfg.runner.video_seconds = 0, 0.0
    cfg.logging.wandb, cfg.logging.progress = "disabled", False
    return cfg


def rsl_rl_config(cfg: TrainConfig) -> dict[str, Any]:
    """rsl-rl-lib 5.x runner config with our PPO's hyperparameters."""
    agent = cfg.agent

    def model(hidden: tuple[int, ...]) -> dict[str, Any]:
        return {"class_name": "MLPModel", "hidden_dims": list(hidden), "activation": agent.activation,
                "obs_normalization": agent.normalize_obs}

    return {
        "num_steps_per_env": agent.num_steps,
        "save_interval": 10**9,
        "obs_groups": {"actor": list(agent.actor_obs_groups), "critic": list(agent.critic_obs_groups)},
        "actor": {**model(agent.actor_hidden),
                  "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": agent.init_std}},
        "critic": model(agent.critic_hidden),
        "algorithm": {
            "class_name": "PPO", "num_learning_epochs": agent.num_epochs, "num_mini_batches": agent.num_minibatches,
            "clip_param": agent.clip_ratio, "gamma": agent.gamma, "lam": agent.lam,
            "value_loss_coef": agent.value_coef, "entropy_coef": agent.entropy_coef,
            "learning_rate": agent.learning_rate, "max_grad_norm": agent.max_grad_norm,
            "use_clipped_value_loss": agent.clip_value_loss, "schedule": agent.schedule,
            "desired_kl": agent.desired_kl,
        },
    }


class Seconds(NamedTuple):
    """One iteration's seconds: the whole, and its collection and update parts."""

    total: float
    collect: float
    update: float


class Ours:
    """Our Runner + PPO, trained a few iterations at a time."""

    def __init__(self, cfg: TrainConfig) -> None:
        cfg.runner.total_steps = 0
        self.runner = Runner(cfg)
        self.steps_per_iteration = cfg.env.num_envs * cfg.agent.num_steps

    def train(self, iterations: int) -> list[Seconds]:
        """Seconds of each iteration (``train`` also saves and exports at its end: not timed)."""
        seconds: list[Seconds] = []
        self.runner.cfg.runner.total_steps += iterations * self.steps_per_iteration
        self.runner.train(stop=lambda m: seconds.append(
            Seconds(m["iteration_time"], m["collect_time"], m["update_time"])) and False)
        return seconds

    def close(self) -> None:
        self.runner.close()


class RslRl:
    """rsl-rl-lib's OnPolicyRunner on our runner's very env, through ``VecEnvAsRslRl``."""

    random_start = False  # episodes of the first iteration start at random lengths

    def __init__(self, ours: Ours, cfg: TrainConfig) -> None:
        torch.manual_seed(cfg.seed)
        self.env, self.seed, self.calls = VecEnvAsRslRl(ours.runner.env), cfg.seed, 0
        self.runner = OnPolicyRunner(self.env, rsl_rl_config(cfg), log_dir=None, device=cfg.env.device)
        self.steps_per_iteration = ours.steps_per_iteration
        self._time_iterations()

    def _time_iterations(self) -> None:
        """Record each iteration's time as RSL-RL measures it (collection + update, as our ``iteration_time``):
        timing ``learn()`` calls instead would add its per-call setup and console log, which ours leaves out."""
        self.seconds: list[Seconds] = []
        log = self.runner.logger.log

        def timed(**kwargs: Any) -> None:
            collect, learn = kwargs["collect_time"], kwargs["learn_time"]
            self.seconds.append(Seconds(collect + learn, collect, learn))
            log(**kwargs)

        self.runner.logger.log = timed

    def start_round(self) -> None:
        """Each of our rounds (``Runner.train``) starts from a fresh reset of the shared env, not timed:
        so does each of RSL-RL's, so both time iterations from the same kind of state."""
        self.env.restart(seed=self.seed + 1000 + self.calls)
        self.calls += 1

    def train(self, iterations: int) -> list[Seconds]:
        self.start_round()
        self.seconds.clear()
        self.runner.learn(num_learning_iterations=iterations, init_at_random_ep_len=self.random_start)
        self.random_start = False
        return list(self.seconds)

    def close(self) -> None:
        """Nothing of its own: the env is our runner's."""


class Mjlab(RslRl):
    """mjlab's own training of ``task_id``: its env, RSL-RL config and runner, as its train script builds them
    (which also turns on TF32 matmuls for the whole process: ``--set runner.matmul_precision=high`` does, for
    all the learners of a run alike)."""

    def __init__(self, task_id: str, num_envs: int, device: str, seed: int) -> None:
        from dataclasses import asdict

        from mjlab.envs import ManagerBasedRlEnv
        from mjlab.rl import MjlabOnPolicyRunner, RslRlVecEnvWrapper
        from mjlab.tasks.registry import load_env_cfg, load_rl_cfg, load_runner_cls

        env_cfg, agent_cfg = load_env_cfg(task_id), load_rl_cfg(task_id)
        env_cfg.scene.num_envs, env_cfg.seed, agent_cfg.seed = num_envs, seed, seed
        agent_cfg.save_interval = 10**9
        env = RslRlVecEnvWrapper(ManagerBasedRlEnv(cfg=env_cfg, device=device), clip_actions=agent_cfg.clip_actions)
        self.steps_per_iteration = num_envs * agent_cfg.num_steps_per_env
        runner_cls = load_runner_cls(task_id) or MjlabOnPolicyRunner
        self.runner = runner_cls(env, asdict(agent_cfg), None, device)
        self.random_start = True  # as mjlab's train script asks
        self._time_iterations()

    def start_round(self) -> None:
        """Its env is its own: it goes on where its last round stopped, as in one mjlab run."""

    def close(self) -> None:
        self.runner.env.close()


def physics(model: Any, substeps: int) -> str:
    """What one control step simulates: a stack's speed depends on it as much as on its code."""
    opt = model.opt
    solver = mujoco.mjtSolver(opt.solver).name.removeprefix("mjSOL_").lower()
    cone = mujoco.mjtCone(opt.cone).name.removeprefix("mjCONE_").lower()
    return (f"{substeps} x {opt.timestep * 1000:g} ms substeps, {solver} solver {opt.iterations} iterations / "
            f"{opt.ls_iterations} line search, {cone} cones, {model.ngeom} geoms")


def our_physics(env: Any) -> str:
    env = task_env(env)
    return physics(env.sim.model, env.task.frame_skip)


def device_name(device: str) -> str:
    return torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "CPU"


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--task", default="pendulum", help="a task with a configs/ppo_<task>.yaml")
    parser.add_argument("--num-envs", type=int, default=64, help="worlds of the shared VecEnv (and of mjlab's env)")
    parser.add_argument("--iterations", type=int, default=12, help="timed iterations (+1 warm-up) per learner")
    parser.add_argument("--rounds", type=int, default=3, help="the learners take turns this many times")
    parser.add_argument("--device", default="cpu", help="cpu or a CUDA device (env.device)")
    parser.add_argument("--backend", default="mujoco", choices=["mujoco", "warp"],
                        help="the simulator: our CPU MuJoCo backend or MuJoCo Warp")
    parser.add_argument("--mjlab", metavar="TASK_ID", help="also time mjlab's own training of this mjlab task")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config overrides for the env both learners share, e.g. env.randomization.dynamics_pool=0")
    parser.add_argument("--out", default="ppo_vs_rsl_rl.md", help="file under benchmarks/results/")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as run_dir:
        cfg = train_config(args.task, args.num_envs, args.device, args.backend, run_dir, args.set)
        ours = Ours(cfg)
        learners: dict[str, Ours | RslRl] = {"ours": ours, "rsl": RslRl(ours, cfg)}
        if args.mjlab:
            learners["mjlab"] = Mjlab(args.mjlab, args.num_envs, args.device, cfg.seed)
        seconds: dict[str, list[Seconds]] = {name: [] for name in learners}
        for name, learner in learners.items():
            learner.train(1)  # warm-up
        for round_ in range(args.rounds):  # interleaved: both see the same background load
            for name, learner in learners.items():
                seconds[name] += learner.train(len(range(round_, args.iterations, args.rounds)))
        if args.mjlab:
            our_physics_line = our_physics(ours.runner.env)
            mjlab_env = learners["mjlab"].runner.env.unwrapped
            mjlab_physics_line = physics(mjlab_env.sim.mj_model, mjlab_env.cfg.decimation)
        for learner in learners.values():
            learner.close()

    medians = {name: Seconds(*map(statistics.median, zip(*times))) for name, times in seconds.items()}
    rates = {name: learners[name].steps_per_iteration / median.total for name, median in medians.items()}

    def row(label: str, name: str, ratio: str) -> str:
        median = medians[name]
        return (f"| {label} | {rates[name]:,.0f} | {median.total:.3f} | {median.collect:.3f} | "
                f"{median.update:.3f} | {ratio} |")

    header = "| {} | env steps/s | median s/iteration | of which collection | of which update | {} |"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    agent = cfg.agent
    table = "\n".join([
        f"Machine: {machine()}, rsl-rl-lib {version('rsl-rl-lib')}, torch threads {torch.get_num_threads()}; device {args.device} "
        f"({device_name(args.device)}), backend {args.backend}; load average (1, 5, 15 min) at the end {load}.",
        "",
        f"PPO end to end (collection + update) on `{args.task}`, {args.num_envs} envs, "
        f"{args.iterations} timed iterations each after 1 warm-up, in {args.rounds} interleaved rounds; an iteration is {agent.num_steps} steps x {args.num_envs} envs; "
        f"actor {list(agent.actor_hidden)}, critic {list(agent.critic_hidden)} ({agent.activation}), "
        f"{agent.num_epochs} epochs x {agent.num_minibatches} minibatches (configs/ppo_{args.task}.yaml). "
        "rsl-rl-lib trains on the same VecEnv through `VecEnvAsRslRl`."
        + (f" Overrides: `{' '.join(args.set)}`." if args.set else ""),
        "",
        header.format("learner", "ours / rsl-rl"), "|---|---:|---:|---:|---:|---:|",
        row("robolearn Runner + PPO", "ours", f"{rates['ours'] / rates['rsl']:.2f}x"),
        row("rsl-rl-lib OnPolicyRunner", "rsl", "1.00x"),
    ])
    if args.mjlab:
        table += "\n".join([
            "", "", f"mjlab {version('mjlab')}'s own training of `{args.mjlab}` (its env, its RSL-RL config and runner), "
            f"{args.num_envs} worlds, in the same rounds:", "",
            header.format("stack", "ours / it"), "|---|---:|---:|---:|---:|---:|",
            row(f"robolearn (`{args.task}`, Runner + PPO)", "ours", "1.00x"),
            row(f"mjlab (`{args.mjlab}`)", "mjlab", f"{rates['ours'] / rates['mjlab']:.2f}x"),
            "", f"Physics per control step: ours {our_physics_line}; mjlab's {mjlab_physics_line}.",
        ])
    write_result(args.out, table)


if __name__ == "__main__":
    main()
