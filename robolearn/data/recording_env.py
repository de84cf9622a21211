"""A VecEnv wrapper that writes every finished episode it steps into a dataset.

Whoever drives the env (a controller in :func:`robolearn.data.record`, or a
training run's own rollouts, which is how D4RL's "medium-replay" datasets are
made) is unaware of it: ``step`` returns the inner env's result unchanged, and
each episode that ends goes to the writer whole (observations T+1, actions,
rewards, terminations, truncations; on our simulators also the exact state in
``infos``, so it replays, and where the task tests success, ``infos/success``
after each step). Episodes still running when the driver stops are
not stored, and ``reset`` drops them too: a dataset never holds a cut-short
episode that did not end in the env. Actions are stored as applied, that is
clipped to the action bounds (every VecEnv clips what lies outside them).
With ``max_episodes``, each env keeps its first share of them (``max_episodes /
num_envs``, the remainder to the first envs): the episodes that finish first are
the short ones, and a policy's long episodes are often its good ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from robolearn.data.episode import Episode
from robolearn.data.minari_store import DatasetWriter
from robolearn.interfaces import Obs, Step, VecEnv


def has_exact_state(env: VecEnv) -> bool:
    """Whether ``env`` reads and restores its exact simulator state (our MuJoCo tasks)."""
    return callable(getattr(env, "get_state", None)) and callable(getattr(env, "set_state", None))


class RecordingEnv(VecEnv):
    """``env``, with its finished episodes added to ``writer`` (at most ``max_episodes`` of them)."""

    def __init__(self, env: VecEnv, writer: DatasetWriter, *, max_episodes: int | None = None,
                 on_episode: Callable[[Episode], None] | None = None) -> None:
        self.env, self.writer, self.max_episodes, self.on_episode = env, writer, max_episodes, on_episode
        for name in ("num_envs", "device", "control_dt", "max_episode_steps", "observation_spec", "action_spec"):
            setattr(self, name, getattr(env, name))
        self.exact = has_exact_state(env)
        if self.exact:
            env.keep_final_state = True  # type: ignore[attr-defined]
        self.low = torch.as_tensor(env.action_spec.low, device=env.device)
        self.high = torch.as_tensor(env.action_spec.high, device=env.device)
        self._rows: list[dict[str, list[np.ndarray]]] = [{} for _ in range(self.num_envs)]
        self._obs: dict[str, np.ndarray] = {}
        n = self.num_envs
        self._share = None if max_episodes is None else [max_episodes // n + (i < max_episodes % n) for i in range(n)]
        self._kept = [0] * n

    @property
    def full(self) -> bool:
        """Whether this recorder stored its ``max_episodes`` (a writer may hold others before it: a second
        recording into it had stored none)."""
        return self.max_episodes is not None and sum(self._kept) >= self.max_episodes

    def reset(self, seed: int | None = None) -> Obs:
        obs = self.env.reset(seed)
        self._rows = [{} for _ in range(self.num_envs)]
        self._obs = self._current(obs)
        return obs

    def step(self, action: torch.Tensor, infos: dict[str, torch.Tensor] | None = None) -> Step:
        """Step the inner env; ``infos`` are extra per-env rows to store with this step."""
        applied = torch.clamp(action.to(self.device, self.low.dtype), self.low, self.high)
        step = self.env.step(applied)
        rows = self._obs | _numpy({"actions": applied, "rewards": step.reward, "terminations": step.terminated,
                                   "truncations": step.truncated})
        rows |= _numpy({f"infos/{k}": v for k, v in (infos or {}).items()})
        if "success" in step.info:  # the task's test after each step, as Minari's goal datasets keep it
            rows["infos/success"] = step.info["success"].cpu().numpy()
        final = _numpy({f"obs/{g}": v for g, v in step.info["final_obs"].items()})
        if self.exact:
            final |= _numpy({f"infos/{k}": v for k, v in step.info["final_state"].items()})
        done = (step.terminated | step.truncated).cpu().numpy()
        for i in range(self.num_envs):
            for key, value in rows.items():
                self._rows[i].setdefault(key, []).append(value[i])
            if done[i]:
                self._finish(i, {key: value[i] for key, value in final.items()})
        self._obs = self._current(step.obs)
        return step

    def _current(self, obs: Obs) -> dict[str, np.ndarray]:
        """The rows stored with the observation an action is taken from."""
        rows = _numpy({f"obs/{g}": v for g, v in obs.items()})
        if self.exact:
            rows |= _numpy({f"infos/{k}": v for k, v in self.env.get_state().items()})  # type: ignore[attr-defined]
        return rows

    def _finish(self, i: int, final: dict[str, np.ndarray]) -> None:
        rows, self._rows[i] = self._rows[i], {}
        if self._share is not None and self._kept[i] >= self._share[i]:  # (all shares kept: full)
            return
        for key, value in final.items():
            rows[key].append(value)
        arrays = {key: np.stack(values) for key, values in rows.items()}

        def take(prefix: str) -> dict[str, Any]:
            return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}

        episode = Episode(observations=take("obs/"), actions=arrays["actions"], rewards=arrays["rewards"],
                          terminations=arrays["terminations"], truncations=arrays["truncations"], infos=take("infos/"))
        before = self.writer.episodes
        try:
            self.writer.add(episode)
        finally:  # a stop signal the write deferred is raised after it: the stored episode is still counted
            if self.writer.episodes > before:
                self._kept[i] += 1
                if self.on_episode is not None:
                    self.on_episode(episode)

    def render(self, index: int = 0, width: int = 320, height: int = 240) -> np.ndarray:
        return self.env.render(index, width, height)

    def close(self) -> None:
        self.env.close()


def _numpy(rows: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {key: value.detach().cpu().numpy() for key, value in rows.items()}
