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
controller's own action. Use the writer as a context manager with
``keep_partial=True`` so Ctrl+C or an error keeps the episodes already done.
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
from robolearn.interfaces import Obs, VecEnv
from robolearn.runtime import Actor


class RandomController:
    """Uniform random actions within the action bounds (the D4RL "random" datasets)."""

    def __init__(self, env: VecEnv, seed: int = 0) -> None:
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


def has_exact_state(env: VecEnv) -> bool:
    """Whether ``env`` reads and restores its exact simulator state (our MuJoCo tasks)."""
    return callable(getattr(env, "get_state", None)) and callable(getattr(env, "set_state", None))


class _Episodes:
    """Per-env buffers of the episodes in progress."""

    def __init__(self, num_envs: int) -> None:
        self.rows: list[dict[str, list[Any]]] = [{} for _ in range(num_envs)]

    def append(self, env: int, key: str, value: np.ndarray) -> None:
        self.rows[env].setdefault(key, []).append(value)

    def finish(self, env: int, final: dict[str, np.ndarray]) -> Episode:
        for key, value in final.items():
            self.append(env, key, value)
        rows, self.rows[env] = self.rows[env], {}
        arrays = {key: np.stack(values) for key, values in rows.items()}

        def take(prefix: str) -> dict[str, np.ndarray]:
            return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}

        return Episode(observations=take("obs/"), actions=arrays["actions"], rewards=arrays["rewards"],
                       terminations=arrays["terminations"], truncations=arrays["truncations"], infos=take("infos/"))


@torch.no_grad()
def record(controller: Actor, env: VecEnv, writer: DatasetWriter, episodes: int, *, noise: float = 0.0,
           seed: int = 0, progress: bool = True) -> RecordStats:
    """Add ``episodes`` episodes of ``controller`` on ``env`` to ``writer``; see the module docstring."""
    exact = has_exact_state(env)
    if exact:
        env.keep_final_state = True  # type: ignore[attr-defined]
    low = torch.as_tensor(env.action_spec.low, device=env.device)
    high = torch.as_tensor(env.action_spec.high, device=env.device)
    half_range = torch.where(torch.isfinite(high - low), (high - low) / 2, torch.ones_like(low))
    generator = torch.Generator(device=env.device).manual_seed(seed)
    buffers = _Episodes(env.num_envs)
    stats = RecordStats()
    start = time.perf_counter()
    bar = tqdm(total=episodes, unit="episode", disable=not progress, dynamic_ncols=True)
    try:
        obs = env.reset(seed=seed)
        controller.reset()
        state = _numpy(env.get_state()) if exact else {}  # type: ignore[attr-defined]
        while writer.episodes < episodes:
            commanded = controller.act(obs).to(env.device)
            action = commanded
            if noise > 0:
                eps = torch.randn(commanded.shape, generator=generator, device=env.device, dtype=commanded.dtype)
                action = torch.clamp(commanded + noise * half_range * eps, low, high)
            step = env.step(action)
            rows = {"actions": action, "rewards": step.reward, "terminations": step.terminated,
                    "truncations": step.truncated, **{f"obs/{g}": v for g, v in obs.items()}}
            if noise > 0:
                rows["infos/commanded_actions"] = commanded
            rows_np = {key: value.detach().cpu().numpy() for key, value in rows.items()}
            rows_np |= {f"infos/{key}": value for key, value in state.items()}
            final = {f"obs/{g}": v.detach().cpu().numpy() for g, v in step.info["final_obs"].items()}
            if exact:
                final |= {f"infos/{k}": v for k, v in _numpy(step.info["final_state"]).items()}
            done = (step.terminated | step.truncated).cpu().numpy()
            for i in range(env.num_envs):
                for key, value in rows_np.items():
                    buffers.append(i, key, value[i])
                if done[i] and writer.episodes < episodes:
                    episode = buffers.finish(i, {key: value[i] for key, value in final.items()})
                    writer.add(episode)
                    stats.returns.append(episode.episode_return)
                    bar.update(1)
                elif done[i]:
                    buffers.rows[i] = {}
            stats.steps += env.num_envs
            obs = step.obs
            controller.reset(step.terminated | step.truncated)
            if exact:
                state = _numpy(env.get_state())  # type: ignore[attr-defined]
            bar.set_postfix(steps_per_s=f"{stats.steps / (time.perf_counter() - start):.0f}", refresh=False)
    except KeyboardInterrupt:
        stats.interrupted = True
    finally:
        bar.close()
        stats.episodes = writer.episodes
        stats.seconds = time.perf_counter() - start
    return stats


def _numpy(state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {key: value.detach().cpu().numpy() for key, value in state.items()}
