"""Simulators: the CPU MuJoCo backend, tasks over it, and adapters to Gymnasium.

``make_env("hopper", num_envs=1024)`` builds one of our tasks on the batched
backend; ``make_env("gym:Pendulum-v1", num_envs=8)`` wraps a Gymnasium env and
``make_env("mjlab:Mjlab-Velocity-Flat-Unitree-Go1", num_envs=8)`` an mjlab task.
"""

from __future__ import annotations

from typing import Any

import torch

from robolearn.interfaces import VecEnv
from sims.backend import MujocoBackend
from sims.task import Task, TaskEnv
from sims.tasks.ant import Ant
from sims.tasks.arm_reach import ArmReach
from sims.tasks.cartpole import Cartpole
from sims.tasks.half_cheetah import HalfCheetah
from sims.tasks.hopper import Hopper
from sims.tasks.pendulum import Pendulum
from sims.tasks.reacher import Reacher

TASKS: dict[str, type[Task]] = {
    "pendulum": Pendulum,
    "cartpole": Cartpole,
    "reacher": Reacher,
    "hopper": Hopper,
    "half_cheetah": HalfCheetah,
    "ant": Ant,
    "arm_reach": ArmReach,
}

GYM_PREFIX = "gym:"
MJLAB_PREFIX = "mjlab:"


def make_env(
    task: str,
    num_envs: int,
    device: str | torch.device = "cpu",
    num_threads: int | None = None,
    seed: int | None = None,
    randomization: dict[str, Any] | None = None,
    delay: dict[str, Any] | None = None,
    **task_kwargs: Any,
) -> VecEnv:
    """A VecEnv of ``num_envs`` copies of ``task``.

    ``task`` is a name in :data:`TASKS` (``task_kwargs`` go to its constructor;
    physics runs on ``num_threads`` threads, all cores by default) or
    ``gym:<Gymnasium id>`` (``task_kwargs`` go to ``gymnasium.make``; the envs
    step one after another in this thread). ``delay`` (``sims/delay.py``) wraps
    either in a fixed observation delay and action latency.
    """
    if delay:
        from robolearn.config import build_dataclass
        from sims.delay import Delay, DelayedEnv

        inner = make_env(task, num_envs, device, num_threads, seed, randomization, **task_kwargs)
        return DelayedEnv(inner, build_dataclass(Delay, delay, "env.delay."))
    if task.startswith(GYM_PREFIX):
        from sims.adapters.gymnasium import GymVecEnv

        if randomization:
            raise ValueError("env.randomization needs one of our tasks; Gymnasium envs cannot be randomized here")
        return GymVecEnv(task[len(GYM_PREFIX):], num_envs, device=device, seed=seed, **task_kwargs)
    if task.startswith(MJLAB_PREFIX):
        from sims.adapters.mjlab import MjlabVecEnv

        if randomization:
            raise ValueError("env.randomization needs one of our tasks; mjlab tasks randomize through their own events")
        return MjlabVecEnv(task[len(MJLAB_PREFIX):], num_envs, device=device, seed=seed, **task_kwargs)
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {sorted(TASKS)} or '{GYM_PREFIX}<Gymnasium id>'")
    spec = TASKS[task](**task_kwargs)
    backend = MujocoBackend(spec.model(), num_envs, device=device, num_threads=num_threads, fields=spec.fields)
    env = TaskEnv(spec, backend, seed=seed)
    if randomization:
        from robolearn.config import build_dataclass
        from sims.randomization import Randomization, RandomizedEnv

        env = RandomizedEnv(env, build_dataclass(Randomization, randomization, "env.randomization."), seed=seed)
    return env


__all__ = ["TASKS", "MujocoBackend", "Task", "TaskEnv", "make_env"]
