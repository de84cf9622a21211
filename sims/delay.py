"""The env side of a slow decision rate: observation delay and action latency, for any VecEnv.

:class:`DelayLine` is the per-env queue behind both (shared with
:class:`~sims.randomization.RandomizedEnv`, which draws the delays per episode).
:class:`DelayedEnv` wraps any VecEnv (our tasks, Gymnasium adapters) with fixed
delays, so FAS tables and training runs can be made under latency::

    env:
      delay: {obs_delay_steps: 1, action_latency_steps: 2}

- ``action_latency_steps = k``: the env applies the action sent ``k`` control
  steps ago; the first action of an episode fills the queue (there is no older
  one to apply).
- ``obs_delay_steps = d``: the controller sees the observation of ``d`` steps
  ago; a new episode has no past, so its first observation stands in for it.
  ``info["final_obs"]`` is delayed alike: transitions are what the controller saw.
  The ``critic`` group (privileged sim-only state, never a deployed controller's
  input) is not delayed: the critic values the state as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from robolearn.interfaces import Obs, Step, VecEnv
from sims.task import checked_action
from sims.worlds import Worlds


class DelayLine:
    """``depth`` past values of a batch ``(num_envs, *shape)``, newest first, in a ring
    buffer (a push writes one slot in place: no copy of the past on the env step)."""

    def __init__(self, depth: int, first: torch.Tensor) -> None:
        self.buffer = first.unsqueeze(0).repeat(max(1, depth), *([1] * first.dim())).clone()
        self.rows = torch.arange(first.shape[0], device=first.device)
        self.head = 0  # slot of the newest value

    def push(self, value: torch.Tensor) -> None:
        self.head = (self.head - 1) % len(self.buffer)
        self.buffer[self.head] = value

    def read(self, delay: torch.Tensor) -> torch.Tensor:
        """Each env's value from ``delay[env]`` pushes ago ``(num_envs, *shape)``."""
        return self.buffer[(self.head + delay) % len(self.buffer), self.rows]

    def fill(self, ids: torch.Tensor, value: torch.Tensor) -> None:
        """Make ``value`` (rows ``ids``) the whole past of envs ``ids``."""
        self.buffer[:, ids] = value.unsqueeze(0)

    def fill_where(self, mask: torch.Tensor, value: torch.Tensor) -> None:
        """Make ``value``'s rows the whole past of the envs where ``mask`` ``(num_envs,)``: ``fill`` without
        an index list, whose making (``mask.nonzero()``) would be a host sync every step on a GPU."""
        where = mask.view(1, -1, *([1] * (value.dim() - 1)))
        torch.where(where, value.unsqueeze(0), self.buffer, out=self.buffer)  # in place: one kernel


UNDELAYED = ("critic",)  # privileged sim-only state: no sensor of the robot's, so no sensing delay


def delay_lines(obs: Obs, depth: int) -> dict[str, DelayLine]:
    """A delay line of ``depth`` per observation group a controller sees, each filled with ``obs``'s (the
    ``UNDELAYED`` groups have none: a critic that saw its privileged state late had valued a stale state)."""
    return {k: DelayLine(depth, v) for k, v in obs.items() if k not in UNDELAYED}


def seen_late(lines: dict[str, DelayLine], final_obs: Obs, delay: torch.Tensor) -> Obs:
    """Push a step's ``final_obs`` into ``lines``; the observation as seen: each delayed group ``delay[env]``
    steps back, the others as they are."""
    for k, line in lines.items():
        line.push(final_obs[k])
    return {**final_obs, **{k: line.read(delay) for k, line in lines.items()}}


@dataclass
class Delay:
    """Fixed delays in control steps; the defaults change nothing."""

    obs_delay_steps: int = 0
    action_latency_steps: int = 0

    def __post_init__(self) -> None:
        for name in ("obs_delay_steps", "action_latency_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"env.delay.{name} must be >= 0, got {getattr(self, name)}")


def check_shorter_than_episode(key: str, steps: int, max_episode_steps: int | None) -> None:
    """Refuse a delay of ``steps`` control steps that no episode outlasts: the policy would see only an
    episode's first observation, or act only with its first action (``key`` names the setting)."""
    if max_episode_steps and steps >= max_episode_steps:
        raise ValueError(f"{key}: a delay of {steps} control steps is not shorter than an episode "
                         f"({max_episode_steps} steps): nothing the policy sees or does would reach the env in time")


class DelayedEnv(VecEnv):
    """``env`` seen ``obs_delay_steps`` late and actuated ``action_latency_steps`` late."""

    def __init__(self, env: VecEnv, cfg: Delay, seed: int | None = None) -> None:
        self.env, self.cfg = env, cfg
        for name in ("num_envs", "device", "control_dt", "max_episode_steps", "observation_spec", "action_spec"):
            setattr(self, name, getattr(env, name))
        randomized = getattr(env, "most_delay_steps", {})  # env.randomization's delays, inside: the two add up
        for name in ("obs_delay_steps", "action_latency_steps"):
            key = f"env.delay.{name}" + (" with env.randomization's most" if randomized.get(name) else "")
            check_shorter_than_episode(key, getattr(cfg, name) + randomized.get(name, 0), self.max_episode_steps)
        self._obs_delay = torch.full((self.num_envs,), cfg.obs_delay_steps, dtype=torch.long, device=self.device)
        self._latency = torch.full((self.num_envs,), cfg.action_latency_steps, dtype=torch.long, device=self.device)
        self._history: dict[str, DelayLine] = {}
        self._actions: DelayLine | None = None
        self._fresh = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._seed = seed  # a step before any reset starts from the state built with it (below)

    def reset(self, seed: int | None = None) -> Obs:
        obs = self.env.reset(seed)
        self._history = delay_lines(obs, self.cfg.obs_delay_steps + 1)
        self._fresh[:] = True
        return obs

    def step(self, action: torch.Tensor) -> Step:
        if not self._history:  # stepped as built, as the env it wraps can be: the built state, reset again with
            self.reset(self._seed)  # its seed (a Gymnasium env's first reset spends it, so not done when built)
        # checked before it enters the delay line, whose shape the first action sets: one of another shape had
        # made every later action refused, named by the first one's shape
        action = checked_action(action, self.num_envs, self.action_spec, self.device)
        if self._actions is None:
            self._actions = DelayLine(self.cfg.action_latency_steps + 1, action)
        self._actions.push(action)
        self._actions.fill_where(self._fresh, action)
        obs, reward, terminated, truncated, info = self.env.step(self._actions.read(self._latency))
        seen = seen_late(self._history, info["final_obs"], self._obs_delay)
        next_obs = seen
        done = terminated | truncated
        self._fresh.copy_(done)
        worlds = Worlds.of_step(info, done)  # as the env reset them: done.nonzero() would be a host sync on a GPU
        if worlds.maybe_any:
            for k, line in self._history.items():
                worlds.fill(line, obs[k])
            next_obs = {k: worlds.merged(v, worlds.take(obs[k])) for k, v in seen.items()}
        return Step(next_obs, reward, terminated, truncated, {**info, "final_obs": seen})

    def __getattr__(self, name: str) -> Any:
        """env.randomization's automatic width, inside, checkpointed and restored through this env: a run's
        ``hasattr(env, "adaptation_state")`` had found none, and a resume started the width over at 0."""
        if name in ("adaptation_state", "load_adaptation_state"):
            return getattr(self.env, name)  # (an env without automatic randomization has none: AttributeError)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def render(self, index: int = 0, width: int = 320, height: int = 240):
        return self.env.render(index, width, height)

    def close(self) -> None:
        self.env.close()
