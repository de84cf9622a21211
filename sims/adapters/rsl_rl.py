"""Our VecEnv as an RSL-RL ``VecEnv`` (package ``rsl-rl-lib``, 5.x), so RSL-RL's
``OnPolicyRunner`` trains on our simulators.

RSL-RL's contract: ``get_observations()`` returns the current observation
groups as a ``TensorDict``; ``step(actions)`` returns ``(obs, rewards, dones,
extras)`` where ``dones`` covers both endings and ``extras["time_outs"]`` marks
the time-limit ones (RSL-RL then bootstraps them with V(s_t), its
approximation of V(s_T)); ``extras["log"]`` holds scalars, logged under their
key. RSL-RL never calls ``reset``: the env must be reset when wrapped.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from rsl_rl.env import VecEnv as RslRlVecEnv
from tensordict import TensorDict

from robolearn.interfaces import Obs, VecEnv
from sims.task import episode_clock


class VecEnvAsRslRl(RslRlVecEnv):
    """``env``'s observation groups (``policy``, ``critic``...) as RSL-RL's
    observation groups; actions in ``env``'s own units, clipped by ``env``.

    Map groups to RSL-RL's observation sets in the runner config, e.g.
    ``obs_groups={"actor": ["policy"], "critic": ["critic"]}``. ``info["log"]``
    is forwarded as ``extras["log"]`` (RSL-RL logs the batch mean of each).
    """

    def __init__(self, env: VecEnv, seed: int | None = None) -> None:
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = int(np.prod(env.action_spec.shape))
        self.max_episode_length = env.max_episode_steps
        self.device = env.device
        self.dt = env.control_dt  # legged_gym's name for the control period, read by sims.adapters.isaac
        self.cfg = {"env": type(env).__name__, "num_envs": env.num_envs, "control_dt": env.control_dt,
                    "max_episode_steps": env.max_episode_steps}
        self.restart(seed)  # RSL-RL's runner never resets

    def restart(self, seed: int | None = None) -> TensorDict:
        """Start a fresh episode in every env, between runs of a script (RSL-RL's runner never resets;
        not named ``reset``: adapters of Isaac envs, whose ``reset`` takes no seed, would call it)."""
        self._obs = self.env.reset(seed)
        self._episode_length = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        return self.get_observations()

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """Steps since each env's last reset."""
        return self._episode_length

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        """RSL-RL's ``learn(init_at_random_ep_len=True)`` sets random episode lengths here: they become our
        task env's episode clocks (``TaskEnv.episode_step``), so its time limits are staggered as legged_gym's."""
        clock = episode_clock(self.env)
        if clock is None:
            raise NotImplementedError(f"{type(self.env).__name__} keeps its own episode time limit, which cannot be "
                                      "set from here: train with learn(init_at_random_ep_len=False)")
        clock.episode_step = value
        self._episode_length = clock.episode_step.clone()

    def get_observations(self) -> TensorDict:
        return _tensordict(self._obs, self.num_envs)

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(actions.reshape(self.num_envs, *self.env.action_spec.shape))
        done = terminated | truncated
        self._obs = obs
        self._episode_length = torch.where(done, 0, self._episode_length + 1)
        extras = {"time_outs": truncated & ~terminated, "log": dict(info.get("log", {}))}
        return _tensordict(obs, self.num_envs), reward, done.long(), extras

    def close(self) -> None:
        self.env.close()


def _tensordict(obs: Obs, num_envs: int) -> TensorDict:
    return TensorDict(dict(obs), batch_size=[num_envs])
