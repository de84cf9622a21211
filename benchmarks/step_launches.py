"""How many kernels a Go1 env step and a PPO iteration launch: ours against mjlab's and rsl-rl-lib's.

On a GPU at a few thousand worlds the torch math around the physics is bound by launches, not
arithmetic: each torch op costs the host a few microseconds to dispatch and the device one kernel,
whatever its size. So ops per step is what a step's fixed cost scales with, and it can be counted
without a GPU (``robolearn.torch_ops.TorchOps``). Everything here runs on MuJoCo Warp's CPU device,
on the GPU's code path (resets by mask, no host read in the step), with 16 worlds:

- **Env step**, uniform random actions: torch ops (views excepted; each a launch on a GPU) and MuJoCo
  Warp kernel launches (replayed inside CUDA graphs on a GPU) per step, for our Go1 configs and mjlab's
  ``Mjlab-Velocity-Flat-Unitree-Go1`` (stepped as its training steps it, its own resets). Also the
  median step time on this CPU: on Warp's CPU device (physics included, so mostly physics), and ours
  on the CPU MuJoCo backend by mask, where the host's dispatch is a large share as on a GPU.
- **PPO iteration** (collection + update), torch ops per env step: our Runner + PPO and rsl-rl-lib's
  OnPolicyRunner on the very same Go1 env (``benchmarks/ppo_vs_rsl_rl.py``'s learners), and mjlab's own
  training of its task; and the host reads per iteration of each (``robolearn.host_reads.HostReads``).
  Counted as the difference between a 3- and a 1-iteration call, so that each call's setup and saving cancel.

The two stacks simulate different physics per control step (mjlab 4 substeps of Newton 10 iterations,
ours 5 of 1; the Warp count shows it); the torch counts do not depend on it.

    python benchmarks/step_launches.py            # writes results/step_launches.md
"""

from __future__ import annotations

import contextlib
import io
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from common import benchmark_parser, code_commit, machine, write_result
from ppo_vs_rsl_rl import Mjlab, Ours, RslRl, train_config
from robolearn import interfaces
from robolearn.config import load_config
from robolearn.host_reads import OURS, HostReads
from robolearn.registry import make_env
from robolearn.torch_ops import TorchOps

MJLAB_TASK = "Mjlab-Velocity-Flat-Unitree-Go1"


@contextlib.contextmanager
def warp_launches() -> Iterator[list[int]]:
    """``[n]``: MuJoCo Warp's kernel launches inside the block (it calls ``wp.launch`` and ``wp.launch_tiled``)."""
    import warp as wp

    count = [0]
    originals = {name: getattr(wp, name) for name in ("launch", "launch_tiled") if hasattr(wp, name)}

    def counted(original: Callable) -> Callable:
        def launch(*args, **kwargs):
            count[0] += 1
            return original(*args, **kwargs)
        return launch

    for name, original in originals.items():
        setattr(wp, name, counted(original))
    try:
        yield count
    finally:
        for name, original in originals.items():
            setattr(wp, name, original)


def our_env(config: str, worlds: int, backend: str, overrides: tuple[str, ...] = ()) -> tuple[Callable, int]:
    """A Go1 config's env: its step and action size."""
    cfg = load_config(config, [f"env.backend={backend}", "env.device=cpu", f"env.num_envs={worlds}",
                               "env.num_threads=1", *overrides])
    env = make_env(cfg.env, seed=0)
    return env.step, int(env.action_spec.shape[0])


def mjlab_env(worlds: int) -> tuple[Callable, int]:
    """mjlab's own Go1 velocity env, as its training builds it (its auto-resets on)."""
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.tasks.registry import load_env_cfg

    cfg = load_env_cfg(MJLAB_TASK)
    cfg.scene.num_envs, cfg.seed = worlds, 0
    env = quietly(ManagerBasedRlEnv, cfg, "cpu")
    env.reset()
    return env.step, int(env.single_action_space.shape[0])


def quietly(make: Callable, *args: object) -> object:
    """``make(*args)`` without what it prints (mjlab's manager tables)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return make(*args)


def random_actions(worlds: int, size: int, n: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [2 * torch.rand(worlds, size, generator=generator) - 1 for _ in range(n)]


def step_counts(step: Callable, size: int, worlds: int, steps: int) -> dict[str, float]:
    """Torch ops and Warp launches per step (``steps`` after 5 untimed), and the median ms of a step."""
    actions = random_actions(worlds, size, steps + 5)
    for action in actions[:5]:  # kernel loading, first-step checks
        step(action)
    with TorchOps() as ops, warp_launches() as launches:
        for action in actions[5:]:
            step(action)
    return {"torch": ops.total / steps, "warp": launches[0] / steps, "ms": median_ms(step, actions[5:], block=5),
            "top": [(name, n / steps) for name, n in ops.counts.most_common(5)]}


def median_ms(step: Callable, actions: list[torch.Tensor], block: int = 10) -> float:
    """Milliseconds per step: the median over blocks of ``block`` steps (a shared machine's hiccups left out)."""
    times = []
    for start in range(0, len(actions) - block + 1, block):
        began = time.perf_counter()
        for action in actions[start:start + block]:
            step(action)
        times.append((time.perf_counter() - began) * 1e3 / block)
    return statistics.median(times)


def iteration_counts(learner: Ours | RslRl, worlds: int) -> tuple[float, float]:
    """Torch ops per control step (of all worlds) of a PPO iteration, and host reads per iteration (each a
    wait for the queue to drain on a GPU; ours, rsl-rl-lib's and mjlab's code alike): a 3-iteration call
    less a 1-iteration one, over 2 iterations."""
    import mjlab
    import rsl_rl

    peers = tuple(Path(package.__file__).parent for package in (rsl_rl, mjlab))
    learner.train(1)  # warm-up
    ops_counts, read_counts = [], []
    for iterations in (1, 3):
        with TorchOps() as ops, HostReads(code=(*OURS, *peers)) as reads:
            learner.train(iterations)
        ops_counts.append(ops.total)
        read_counts.append(sum(reads.sites.values()))
    return ((ops_counts[1] - ops_counts[0]) / (2 * learner.steps_per_iteration / worlds),
            (read_counts[1] - read_counts[0]) / 2)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--worlds", type=int, default=16, help="worlds per env (few: the host's dispatch dominates)")
    parser.add_argument("--steps", type=int, default=50, help="env steps counted and timed")
    parser.add_argument("--out", default="step_launches.md", help="file under benchmarks/results/ (a trial: another name)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    interfaces.HOST_READS_FREE_ON.clear()  # the GPU's code path on CPU devices: resets by mask

    envs = {
        "robolearn `ppo_go1_flat` (its randomization)": ("ppo_go1_flat", ()),
        "robolearn `ppo_go1_flat`, no randomization": ("ppo_go1_flat", ("env.randomization={}",)),
        "robolearn `ppo_go1_rough` (its randomization)": ("ppo_go1_rough", ()),
    }
    rows = []
    for name, (config, overrides) in envs.items():
        counts = step_counts(*our_env(config, args.worlds, "warp", overrides), args.worlds, args.steps)
        step, size = our_env(config, args.worlds, "mujoco", overrides)
        cpu_ms = median_ms(step, random_actions(args.worlds, size, 420)[20:])
        rows.append((name, counts, f"{cpu_ms:.2f}"))
    peer = step_counts(*mjlab_env(args.worlds), args.worlds, args.steps)
    rows.append((f"mjlab `{MJLAB_TASK}`", peer, "-"))
    for name, counts, cpu_ms in rows:
        print(f"{name}: {counts['torch']:.0f} torch ops, {counts['warp']:.0f} Warp kernels per env step")
    env_table = [f"| {name} | {c['torch']:.0f} | {c['torch'] / peer['torch']:.2f} | {c['warp']:.0f} | {c['ms']:.1f} | "
                 f"{cpu_ms} | {', '.join(f'{op} {n:g}' for op, n in c['top'])} |" for name, c, cpu_ms in rows]

    with tempfile.TemporaryDirectory() as run_dir:
        cfg = train_config("go1_flat", args.worlds, "cpu", "warp", run_dir, ["env.num_threads=1"])
        ours = Ours(cfg)
        learners = {"robolearn Runner + PPO": ours, "rsl-rl-lib 5 OnPolicyRunner, same env": RslRl(ours, cfg),
                    f"mjlab's own training of `{MJLAB_TASK}`": quietly(Mjlab, MJLAB_TASK, args.worlds, "cpu", cfg.seed)}
        counts = {name: iteration_counts(learner, args.worlds) for name, learner in learners.items()}
        for learner in learners.values():
            learner.close()
    print(", ".join(f"{name}: {n:.0f} ({reads:g} host reads per iteration)" for name, (n, reads) in counts.items()),
          "torch ops per control step of PPO")
    env_ops = [rows[0][1]["torch"], rows[0][1]["torch"], peer["torch"]]  # the env each learner steps
    ppo_table = [f"| {name} | {n:.0f} | {n - env:.0f} | {reads:g} |"
                 for (name, (n, reads)), env in zip(counts.items(), env_ops)]

    write_result(args.out, "\n".join([
        "# Kernels per Go1 env step and PPO iteration: robolearn against mjlab and rsl-rl-lib", "",
        f"Machine: {machine()}. Code: {code_commit()}.", "",
        f"MuJoCo Warp's CPU device, {args.worlds} worlds, on the GPU's code path (resets by mask; "
        "`python benchmarks/step_launches.py`). Torch ops exclude views; on a GPU each is a kernel launch. "
        "Warp kernels are MuJoCo Warp's launches, replayed in CUDA graphs on a GPU.", "",
        f"Env step, {args.steps} steps of uniform random actions. Times are this CPU's median step (over blocks of "
        f"5 of those {args.steps} steps on Warp's CPU device, mostly its physics; over blocks of 10 of 400 steps on "
        "our CPU MuJoCo backend, by mask).", "",
        "| env | torch ops per step | / mjlab | Warp kernels per step | ms, Warp CPU | ms, CPU MuJoCo | "
        "most frequent torch ops |", "|---|---:|---:|---:|---:|---:|---|", *env_table, "",
        "PPO iteration (collection + update; our and rsl-rl-lib's with `configs/ppo_go1_flat.yaml`'s "
        "hyperparameters on its env, the first row above; mjlab's with its own, on its env, the last row), torch ops "
        "per control step of all worlds, and less the env step's own; and host reads per iteration (`.item()`, "
        "`.cpu()`, a mask index...: each a wait for the GPU's queue to drain, counted by "
        "`robolearn.host_reads.HostReads` in our, rsl-rl-lib's and mjlab's code):", "",
        "| learner | torch ops per control step | less the env step's | host reads per iteration |",
        "|---|---:|---:|---:|", *ppo_table]))


if __name__ == "__main__":
    main()
