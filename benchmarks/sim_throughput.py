"""Simulation throughput of our CPU backend against Gymnasium's vector envs and the hardware limit.

For Hopper, HalfCheetah and Ant (Gymnasium's v5 models) with random actions:

- ours: ``TaskEnv`` (the whole VecEnv step: physics, observations, rewards,
  terminations, auto-resets) and the raw ``MujocoBackend`` step, at 64, 256
  and 1024 worlds on all cores;
- Gymnasium: ``SyncVectorEnv`` and ``AsyncVectorEnv`` of ``<Name>-v5`` at a
  few sizes, the best of each reported;
- the limit: ``mujoco.mj_step`` on one ``MjData`` on one thread (only the
  ``mj_step`` calls are timed, over random-action episodes with the task's
  termination rule), times the number of cores.

Prints a markdown table and writes it to ``benchmarks/results/sim_throughput.md`` (with ``--tasks``
naming some of them, to ``sim_throughput_<tasks>.md``: the full table stays whole), quoted in
BENCHMARKS.md, "Simulation throughput (CPU backend)".

    python benchmarks/sim_throughput.py           # about 3 minutes
    python benchmarks/sim_throughput.py --quick   # under 1 minute, noisier
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import gymnasium
import mujoco
import numpy as np
import torch

from common import benchmark_parser, cpu_model, write_result
from sims import TASKS, MujocoBackend, make_env

# Our task name -> (Gymnasium id, termination rule on (qpos, qvel) for the limit's episodes).
MODELS: dict[str, tuple[str, Callable[[np.ndarray, np.ndarray], bool]]] = {
    "hopper": (
        "Hopper-v5",
        lambda q, v: not (q[1] > 0.7 and abs(q[2]) < 0.2 and np.all(np.abs(np.r_[q[2:], v]) < 100)),
    ),
    "half_cheetah": ("HalfCheetah-v5", lambda q, v: False),
    "ant": ("Ant-v5", lambda q, v: not 0.2 <= q[2] <= 1.0),
}
WORLDS = (64, 256, 1024)


def cores() -> int:
    return len(os.sched_getaffinity(0))


def timed(
    step: Callable[[], None], seconds: float, windows: int, want_cores: float = 0.0, warmup: int = 3
) -> tuple[float, float]:
    """Calls of ``step`` per second, and the cores this process used meanwhile
    (CPU seconds per second), in the best of ``windows`` windows of ``seconds``.

    Best-of-windows keeps the figure of the machine, not of whatever else ran
    on it during one window. On a shared machine, up to ``4 * windows`` more
    windows are run until one gets ``want_cores`` cores.
    """
    for _ in range(warmup):
        step()
    best, runs = (0.0, 0.0), 0
    while runs < windows or (best[1] < want_cores and runs < 5 * windows):
        calls, start, cpu = 0, time.perf_counter(), time.process_time()
        while (elapsed := time.perf_counter() - start) < seconds:
            step()
            calls += 1
        best, runs = max(best, (calls / elapsed, (time.process_time() - cpu) / elapsed)), runs + 1
    return best


def limit_env_steps(name: str, seconds: float, windows: int) -> float:
    """Env steps/s of plain ``mj_step`` on one thread (only the physics calls are
    timed), over random-action episodes ended by the task's termination rule."""
    task = TASKS[name]()
    model, (_, unhealthy) = task.model(), MODELS[name]
    data = mujoco.MjData(model)
    low, high = model.actuator_ctrlrange.T
    rng = np.random.default_rng(0)
    rates, episode_step = [], 0
    for _ in range(windows):
        physics, steps = 0.0, 0
        while physics < seconds:
            data.ctrl[:] = rng.uniform(low, high)
            start = time.perf_counter()
            mujoco.mj_step(model, data, nstep=task.frame_skip)
            physics += time.perf_counter() - start
            steps, episode_step = steps + 1, episode_step + 1
            if unhealthy(data.qpos, data.qvel) or episode_step == task.max_episode_steps:
                mujoco.mj_resetData(model, data)
                mujoco.mj_forward(model, data)
                episode_step = 0
        rates.append(steps / physics)
    return max(rates)


def ours_env_steps(name: str, worlds: int, seconds: float, windows: int) -> tuple[float, float]:
    """Env steps/s of ``make_env(name, worlds)``, and the cores it used."""
    env = make_env(name, worlds, seed=0)
    low, high = (torch.as_tensor(b) for b in (env.action_spec.low, env.action_spec.high))
    generator = torch.Generator().manual_seed(0)

    def step() -> None:
        env.step(low + (high - low) * torch.rand(worlds, len(low), generator=generator))

    rate, cores_used = timed(step, seconds, windows, want_cores=0.9 * cores())
    env.close()
    return rate * worlds, cores_used


def backend_env_steps(name: str, worlds: int, seconds: float, windows: int) -> float:
    task = TASKS[name]()
    sim = MujocoBackend(task.model(), worlds, fields=task.fields)
    nu = sim.model.nu
    generator = torch.Generator().manual_seed(0)

    def step() -> None:
        sim.step(torch.rand(worlds, nu, generator=generator) * 2 - 1, task.frame_skip)

    return timed(step, seconds, windows, want_cores=0.9 * cores())[0] * worlds


def gym_env_steps(gym_id: str, num_envs: int, vectorizer: str, seconds: float, windows: int) -> float:
    vector_class = gymnasium.vector.SyncVectorEnv if vectorizer == "sync" else gymnasium.vector.AsyncVectorEnv
    envs = vector_class([lambda: gymnasium.make(gym_id)] * num_envs)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    rate = timed(lambda: envs.step(envs.action_space.sample()), seconds, windows)[0]
    envs.close()
    return rate * num_envs


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="short measurements (noisier)")
    parser.add_argument("--tasks", nargs="+", choices=list(MODELS), default=list(MODELS), help="models to measure")
    parser.add_argument("--out", help="file under benchmarks/results/; default sim_throughput.md, with some --tasks "
                        "sim_throughput_<tasks>.md and with --quick sim_throughput_quick.md, so that a partial or "
                        "quick run leaves the full table whole")
    args = parser.parse_args()
    if args.out is None:
        partial = "" if args.tasks == list(MODELS) else "_" + "_".join(args.tasks)
        args.out = f"sim_throughput{partial}{'_quick' if args.quick else ''}.md"
    seconds, windows = (0.5, 2) if args.quick else (1.0, 4)
    n = cores()
    sync_sizes = sorted({n, 4 * n})
    async_sizes = sorted({n, min(2 * n, 16)})
    torch.set_num_threads(1)  # task math is tiny; the cores belong to the physics threads

    rows = []
    for name in args.tasks:
        gym_id = MODELS[name][0]
        frame_skip = TASKS[name]().frame_skip
        limit = limit_env_steps(name, seconds, windows) * n
        best_sync = max(gym_env_steps(gym_id, k, "sync", seconds, windows) for k in sync_sizes)
        best_async = max(gym_env_steps(gym_id, k, "async", seconds, windows) for k in async_sizes)
        best_gym = max(best_sync, best_async)
        for worlds in WORLDS:
            ours, cores_used = ours_env_steps(name, worlds, seconds, windows)
            raw = backend_env_steps(name, worlds, seconds, windows)
            rows.append(
                f"| {name} | {worlds} | {ours:,.0f} | {ours * frame_skip:,.0f} | {cores_used:.1f} | {raw:,.0f} "
                f"| {limit:,.0f} | {ours / limit:.2f} | {best_sync:,.0f} | {best_async:,.0f} | {ours / best_gym:.1f}x |"
            )
            print(rows[-1], flush=True)

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    table = "\n".join(
        [
            f"Machine: {cpu_model()}, {n} cores; load average (1, 5, 15 min) at the end of the run {load}. "
            f"torch {torch.__version__}, mujoco {mujoco.__version__}, gymnasium {gymnasium.__version__}"
            f"{' (--quick)' if args.quick else ''}.",
            "",
            f"Env steps/s with random actions, each the best of {windows} windows of {seconds:g} s."
            " *ours*: `make_env(task, worlds)` (physics, observations, rewards, terminations, auto-resets)"
            " on all cores, with the cores it got (CPU s per s; less than the machine's when other work"
            " shares it); *raw*: `MujocoBackend.step` alone (no resets); *limit*: env steps/s of plain `mj_step`"
            f" (frame skip included) on one thread, x {n} cores; Gymnasium: best of SyncVectorEnv with {sync_sizes} envs and AsyncVectorEnv"
            f" with {async_sizes} envs of the v5 env.",
            "",
            "| task | worlds | ours env steps/s | ours physics steps/s | cores used | raw backend | limit "
            "| ours/limit | gym sync | gym async | ours/best gym |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )
    print()
    write_result(args.out, table)  # written aside and renamed: a cut-short write keeps the old table


if __name__ == "__main__":
    main()
