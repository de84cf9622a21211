"""mjlab's ``ManagerBasedRlEnv`` (MuJoCo Warp, Isaac Lab's manager API) as our VecEnv.

``make_env("mjlab:Mjlab-Velocity-Flat-Unitree-Go1", num_envs=4096, device="cuda")``
trains our learners on any registered mjlab task. mjlab runs on Warp's CPU
device too (``device="cpu"``), slowly, which is how the tests run it.

The env is built with ``auto_reset=False``: mjlab's step then returns the true
last observation of finished episodes (our ``info["final_obs"]``), and this
adapter resets those envs itself right after, as mjlab's own auto-reset would.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import mjlab.tasks  # noqa: F401  (importing it registers mjlab's tasks)
import numpy as np
import torch
from gymnasium import spaces
from mjlab.envs import ManagerBasedRlEnv, ManagerBasedRlEnvCfg
from mjlab.tasks.registry import list_tasks, load_env_cfg, load_rl_cfg

from robolearn.interfaces import Obs, Step, VecEnv
from sims.task import checked_action, checked_episode_steps
from sims.warp_backend import quiet_warp

quiet_warp()  # mjlab runs on MuJoCo Warp

GROUP_NAMES = {"actor": "policy"}
"""mjlab's observation group names -> ours (``critic`` is ``critic`` in both)."""

_DESCRIBED: set[str] = set()  # tasks whose manager tables were printed: not again for a run's eval and video envs


class MjlabVecEnv(VecEnv):
    """A registered mjlab task (or a ready ``ManagerBasedRlEnvCfg``) as a VecEnv.

    Observation groups keep mjlab's names except ``actor``, which becomes
    ``policy``; every group must be concatenated (one tensor). Actions are
    mjlab's: offsets scaled by each action term (e.g. joint targets around the
    default pose), not physical units. mjlab leaves them unbounded; the action
    spec is ``[-action_limit, action_limit]``, by default the ``clip_actions``
    of the task's RSL-RL config, else unbounded, and our agents need finite
    bounds: pass ``action_limit`` to train them. Rewards are mjlab's (scaled by
    the control period unless the config says otherwise). A finite-horizon
    task (``is_finite_horizon``) reports its time limit as a termination.
    """

    def __init__(
        self,
        task: str | ManagerBasedRlEnvCfg,
        num_envs: int,
        *,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        action_limit: float | None = None,
    ) -> None:
        if isinstance(task, str) and task not in list_tasks():
            raise ValueError(f"unknown mjlab task {task!r}; registered: {list_tasks()}")
        cfg = load_env_cfg(task) if isinstance(task, str) else task
        if action_limit is None and isinstance(task, str):
            action_limit = load_rl_cfg(task).clip_actions
        cfg.scene.num_envs = num_envs
        cfg.seed = seed
        cfg.auto_reset = False  # we reset after reading the true final observations
        key = task if isinstance(task, str) else str(id(task))  # a ready config: this one only
        with contextlib.redirect_stdout(io.StringIO()) if key in _DESCRIBED else contextlib.nullcontext():
            self.mjlab = ManagerBasedRlEnv(cfg, device=str(device))  # prints its manager tables: once per process
        _DESCRIBED.add(key)

        self.num_envs = num_envs
        self.device = torch.device(self.mjlab.device)
        self.control_dt = float(self.mjlab.step_dt)
        self.max_episode_steps = int(self.mjlab.max_episode_length)
        self.observation_spec = {}
        for group, shape in self.mjlab.observation_manager.group_obs_dim.items():
            if not isinstance(shape, tuple) or not all(isinstance(n, int) for n in shape):
                raise TypeError(f"mjlab observation group {group!r} is not concatenated into one tensor")
            self.observation_spec[GROUP_NAMES.get(group, group)] = spaces.Box(-np.inf, np.inf, shape, np.float32)
        limit = np.inf if action_limit is None else float(action_limit)
        action_dim = int(self.mjlab.single_action_space.shape[0])
        self.action_spec = spaces.Box(-limit, limit, (action_dim,), np.float32)
        self._limit = limit

    @property
    def episode_step(self) -> torch.Tensor:
        """Control steps since each world's episode began (mjlab's ``episode_length_buf``)."""
        return self.mjlab.episode_length_buf

    @episode_step.setter
    def episode_step(self, steps: torch.Tensor) -> None:
        """Set the episode clocks (``env.random_episode_start``, RSL-RL's ``init_at_random_ep_len``)."""
        self.mjlab.episode_length_buf[:] = checked_episode_steps(steps, self)

    def reset(self, seed: int | None = None) -> Obs:
        obs, _ = self.mjlab.reset(seed=seed)
        return _groups(obs)

    def step(self, action: Any) -> Step:
        # numpy and lists too, and a wrong shape said as ours say it (it had failed on `.to` or in the sim)
        action = checked_action(action, self.num_envs, self.action_spec, self.device)
        action = action.clamp(-self._limit, self._limit)
        obs, reward, terminated, time_out, extras = self.mjlab.step(action)
        final = _groups(obs)
        log = dict(extras.get("log", {}))
        if self.mjlab.cfg.is_finite_horizon:
            terminated = terminated | time_out
        truncated = time_out & ~terminated
        done = terminated | truncated
        if bool(done.any()):
            reset_obs, reset_extras = self.mjlab.reset(env_ids=done.nonzero().squeeze(-1))
            log.update(reset_extras.get("log", {}))  # episode sums of the finished envs
            obs = {name: torch.where(_rows(done, x), x, final[name]) for name, x in _groups(reset_obs).items()}
        else:
            obs = final
        info: dict[str, Any] = {"final_obs": final, "log": log}
        return Step(obs, reward.float(), terminated.bool(), truncated.bool(), info)

    def close(self) -> None:
        self.mjlab.close()


def _groups(obs: dict[str, Any]) -> Obs:
    """mjlab's groups under our names; copies, as mjlab reuses its buffers."""
    return {GROUP_NAMES.get(name, name): x.clone() for name, x in obs.items()}


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.view(-1, *([1] * (like.dim() - 1)))
