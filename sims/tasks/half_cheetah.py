"""HalfCheetah: Gymnasium's ``HalfCheetah-v5`` (default arguments) on the batched backend.

Model ``gymnasium/envs/mujoco/assets/half_cheetah.xml``, 5 physics steps of
10 ms per control step (``control_dt`` 0.05 s), 1000 steps per episode.

- Observation ``policy`` (17): ``qpos[1:]`` (torso height and angle, six joint
  angles) and ``qvel``.
- Action (6): joint torques in [-1, 1] (motor controls).
- Reward terms: ``forward`` = x displacement of the torso over the step / dt;
  ``ctrl`` = -0.1 * |a|^2.
- Never terminates; truncated after 1000 steps.
- Reset: ``qpos0`` plus U(-0.1, 0.1) noise, zero velocity plus N(0, 0.1^2) noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import mujoco
import torch

from robolearn.interfaces import Obs
from sims.backend import MujocoBackend
from sims.task import Task, check_noise_scales, normal, tracking_camera, uniform
from sims.tasks.gym_assets import gym_model


@dataclass(kw_only=True)
class HalfCheetah(Task):
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.1
    reset_noise_scale: float = 0.1
    frame_skip: int = 5
    max_episode_steps: int = 1000
    resets_by_mask: ClassVar[bool] = True  # reset only draws: on a GPU the done worlds reset by a mask
    _x_before: torch.Tensor | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        check_noise_scales(self, reset_noise_scale=self.reset_noise_scale)

    def model(self) -> mujoco.MjModel:
        return gym_model("half_cheetah.xml")

    def reset(self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        qpos, qvel = super().reset(sim, ids, generator)
        noise = self.reset_noise_scale
        return qpos + uniform(qpos.shape, -noise, noise, generator), qvel + normal(qvel.shape, noise, generator)

    def pre_step(self, sim: MujocoBackend) -> None:
        self._x_before = sim.qpos[:, 0].clone()

    def observations(self, sim: MujocoBackend) -> Obs:
        return {"policy": torch.cat([sim.qpos[:, 1:], sim.qvel], dim=1)}

    def rewards(self, sim: MujocoBackend, action: torch.Tensor) -> dict[str, torch.Tensor]:
        dt = self.frame_skip * sim.timestep
        return {
            "forward": self.forward_reward_weight * (sim.qpos[:, 0] - self._x_before) / dt,
            "ctrl": -self.ctrl_cost_weight * action.square().sum(1),
        }

    def camera(self) -> mujoco.MjvCamera:
        return tracking_camera(body=1, distance=4.0)
