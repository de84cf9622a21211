"""Our VecEnv as a Stable-Baselines3 ``VecEnv``, so SB3's algorithms train on our simulators.

SB3 has its own vector API: ``reset()`` returns only observations, ``step``
returns ``(obs, rewards, dones, infos)`` with one info dict per env, and a
finished env's last observation travels in ``infos[i]["terminal_observation"]``
with ``infos[i]["TimeLimit.truncated"]`` telling time limits from terminations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.vec_env.base_vec_env import VecEnv as SB3VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices

from robolearn.interfaces import VecEnv
from sims.adapters import group_space


class VecEnvAsSB3(SB3VecEnv):
    """Observation group ``group`` (``policy``) as SB3's observation; actions in our env's units."""

    def __init__(self, env: VecEnv, group: str = "policy") -> None:
        self.env, self.group = env, group
        super().__init__(env.num_envs, group_space(env, group, "VecEnvAsSB3"), env.action_spec)
        self.metadata["render_fps"] = 1.0 / env.control_dt  # VecVideoRecorder's frame rate: real time, not its 30
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        # SB3's seed(s) sets seeds s, s+1, ...: our envs take one seed for the batch.
        obs = self.env.reset(self._seeds[0])
        self._reset_seeds()
        return _numpy(obs[self.group])

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        action = torch.as_tensor(self._actions, dtype=torch.float32, device=self.env.device)
        obs, reward, terminated, truncated, info = self.env.step(action)
        dones = _numpy(terminated | truncated)
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        final = _numpy(info["final_obs"][self.group])
        time_limit = _numpy(truncated & ~terminated)
        for i in np.flatnonzero(dones):
            infos[i]["terminal_observation"] = final[i]
            infos[i]["TimeLimit.truncated"] = bool(time_limit[i])
        if "success" in info:
            for i, success in zip(np.flatnonzero(dones), _numpy(info["success"])[dones]):
                infos[i]["is_success"] = bool(success)
        return _numpy(obs[self.group]), _numpy(reward), dones, infos

    def close(self) -> None:
        self.env.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [self.env.render(i) for i in range(self.num_envs)]

    # The batch is one object, not num_envs separate envs: attributes are the batch's.
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        # SB3 asks for render_mode: our envs render RGB frames on request.
        value = "rgb_array" if attr_name == "render_mode" else getattr(self.env, attr_name)
        return [value] * len(list(self._get_indices(indices)))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any) -> list[Any]:
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result] * len(list(self._get_indices(indices)))

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False] * len(list(self._get_indices(indices)))


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()
