"""Record a controller's episodes on any VecEnv into a dataset.

``record(controller, env, writer, episodes)`` steps all ``num_envs`` envs
together and hands every finished episode to the writer, until it holds
``episodes`` of them (episodes still running then are dropped, never stored
cut short). On our simulators (envs with ``get_state``/``set_state``, e.g.
:class:`sims.task.TaskEnv`) every observation also gets its full simulator
state row and ``qpos``/``qvel`` in ``infos``, so the episode replays exactly.

Exploration noise is Gaussian, ``noise`` times half the action range per
dimension (1 where the range is unbounded), added to the controller's action
and clipped to the range; ``infos["commanded_actions"]`` then keeps the
controller's own action. The bookkeeping of episodes is
:class:`robolearn.data.recording_env.RecordingEnv`'s. Use the writer as a context manager with
``keep_partial=True`` so Ctrl+C or an error keeps the episodes already done, and give it
:func:`env_metadata`, so the dataset says which task (and settings) it was recorded on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from robolearn.data.episode import Episode
from robolearn.data.minari_store import DatasetWriter
from robolearn.data.recording_env import RecordingEnv, has_exact_state
from robolearn.interfaces import Obs, VecEnv
from robolearn.evaluate import Actor, action_of, check_actor


def env_metadata(env: VecEnv, task: str, task_kwargs: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """What a dataset recorded on ``env`` should say about it, for ``DatasetWriter(metadata=...)``: the task
    (its name and settings: what an offline run checks its env against and a replay rebuilds), the control
    period, the episode length and, on our simulators, the state layout replays restore; ``extra`` on top
    (controller, noise, reference scores...). ``robolearn dataset record`` writes the same::

        DatasetWriter("pend-expert", env.observation_spec, env.action_spec, metadata=env_metadata(env, "pendulum"))
    """
    metadata = {"task": task, "task_kwargs": dict(task_kwargs or {}), "control_dt": env.control_dt,
                "max_episode_steps": env.max_episode_steps, "num_envs": env.num_envs}
    if has_exact_state(env):
        metadata["state"] = {"format": "mjSTATE_INTEGRATION", "size": int(env.get_state()["state"].shape[1])}
    return metadata | extra


class RandomController:
    """Uniform random actions within the action bounds (the D4RL "random" datasets), one per env of ``env`` (the
    VecEnv itself: its ``num_envs``, ``device`` and ``action_spec`` are read; a space alone is refused)."""

    def __init__(self, env: VecEnv, seed: int = 0) -> None:
        if missing := [name for name in ("num_envs", "device", "action_spec") if not hasattr(env, name)]:
            what = "pass the env itself, not its action_spec" if hasattr(env, "sample") else "pass the env"
            raise TypeError(f"RandomController(env) takes the VecEnv it acts in (it reads its num_envs, device and "
                            f"action_spec); got a {type(env).__name__}, which has no {', '.join(missing)}: {what} "
                            "(e.g. RandomController(sims.make_env('pendulum', num_envs=4)))")
        self.num_envs, self.device = env.num_envs, env.device
        low, high = (np.nan_to_num(b, posinf=1.0, neginf=-1.0) for b in (env.action_spec.low, env.action_spec.high))
        self.low, self.high = torch.as_tensor(low), torch.as_tensor(high)
        self.generator = torch.Generator().manual_seed(seed)

    def act(self, obs: Obs) -> torch.Tensor:
        u = torch.rand(self.num_envs, *self.low.shape, generator=self.generator)
        return (self.low + u * (self.high - self.low)).to(self.device)

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Stateless."""


@dataclass
class RecordStats:
    episodes: int = 0
    steps: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    returns: list[float] = field(default_factory=list)  # of the stored episodes
    successes: list[bool] = field(default_factory=list)  # of the stored episodes the task judges (infos/success)


@torch.no_grad()
def record(controller: Actor, env: VecEnv, writer: DatasetWriter, episodes: int, *, noise: float = 0.0,
           seed: int = 0, progress: bool = True) -> RecordStats:
    """Add ``episodes`` episodes of ``controller`` on ``env`` to ``writer``; see the module docstring."""
    check_actor(controller, "record")
    low = torch.as_tensor(env.action_spec.low, device=env.device)
    high = torch.as_tensor(env.action_spec.high, device=env.device)
    half_range = torch.where(torch.isfinite(high - low), (high - low) / 2, torch.ones_like(low))
    generator = torch.Generator(device=env.device).manual_seed(seed)
    stats = RecordStats()
    # disable=None: no bar when stderr is not a terminal (a log file would get every \r update)
    bar = tqdm(total=episodes, unit="episode", disable=None if progress else True, dynamic_ncols=True)

    def stored(episode: Episode) -> None:
        stats.returns.append(episode.episode_return)
        if episode.success is not None:
            stats.successes.append(episode.success)
        bar.update(1)

    recorder = RecordingEnv(env, writer, max_episodes=episodes, on_episode=stored)
    start = time.perf_counter()
    try:
        obs = recorder.reset(seed=seed)
        controller.reset()
        while not recorder.full:
            commanded = action_of(controller, obs).to(env.device)
            action, infos = commanded, None
            if noise > 0:
                eps = torch.randn(commanded.shape, generator=generator, device=env.device, dtype=commanded.dtype)
                action = torch.clamp(commanded + noise * half_range * eps, low, high)
                infos = {"commanded_actions": commanded}
            step = recorder.step(action, infos)
            stats.steps += env.num_envs
            obs = step.obs
            controller.reset(step.terminated | step.truncated)
            bar.set_postfix(steps_per_s=f"{stats.steps / (time.perf_counter() - start):.0f}", refresh=False)
    except KeyboardInterrupt:
        stats.interrupted = writer.cut_short = True  # (the writer then replaces no dataset: --overwrite's is kept)
    finally:
        bar.close()
        stats.episodes = writer.episodes
        stats.seconds = time.perf_counter() - start
    return stats
