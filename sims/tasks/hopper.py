"""Hopper: Gymnasium's ``Hopper-v5`` (default arguments) on the batched backend.

Model ``gymnasium/envs/mujoco/assets/hopper.xml``, 4 physics steps of 2 ms per
control step (``control_dt`` 0.008 s), 1000 steps per episode.

- Observation ``policy`` (11): ``qpos[1:]`` (torso height and angle, three joint
  angles) and ``qvel`` clipped to [-10, 10].
- Action (3): joint torques in [-1, 1] (motor controls, gear 200).
- Reward terms: ``forward`` = x displacement of the torso over the step / dt;
  ``healthy`` = 1 while healthy; ``ctrl`` = -1e-3 * |a|^2.
- Terminated when unhealthy: torso height <= 0.7, |torso angle| >= 0.2, or any
  of ``qpos[2:]``, ``qvel`` outside (-100, 100).
- Reset: ``qpos0`` and zero velocity plus U(-5e-3, 5e-3) noise on every entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import mujoco
import torch

from robolearn.interfaces import Obs
from sims.backend import MujocoBackend
from sims.task import Task, check_noise_scales, tracking_camera, uniform
from sims.tasks.gym_assets import gym_asset


@dataclass(kw_only=True)
class Hopper(Task):
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 1e-3
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True
    healthy_state_range: tuple[float, float] = (-100.0, 100.0)
    healthy_z_range: tuple[float, float] = (0.7, float("inf"))
    healthy_angle_range: tuple[float, float] = (-0.2, 0.2)
    reset_noise_scale: float = 5e-3
    frame_skip: int = 4
    max_episode_steps: int = 1000
    resets_by_mask: ClassVar[bool] = True  # reset only draws: on a GPU the done worlds reset by a mask
    _x_before: torch.Tensor | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        check_noise_scales(self, reset_noise_scale=self.reset_noise_scale)

    def model(self) -> mujoco.MjModel:
        return mujoco.MjModel.from_xml_path(gym_asset("hopper.xml"))

    def reset(self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        qpos, qvel = super().reset(sim, ids, generator)
        noise = self.reset_noise_scale
        qpos += uniform(qpos.shape, -noise, noise, generator)
        qvel += uniform(qvel.shape, -noise, noise, generator)
        return qpos, qvel

    def pre_step(self, sim: MujocoBackend) -> None:
        self._x_before = sim.qpos[:, 0].clone()

    def observations(self, sim: MujocoBackend) -> Obs:
        return {"policy": torch.cat([sim.qpos[:, 1:], sim.qvel.clamp(-10.0, 10.0)], dim=1)}

    def rewards(self, sim: MujocoBackend, action: torch.Tensor) -> dict[str, torch.Tensor]:
        dt = self.frame_skip * sim.timestep
        return {
            "forward": self.forward_reward_weight * (sim.qpos[:, 0] - self._x_before) / dt,
            "healthy": self.healthy_reward * self._healthy(sim).to(sim.dtype),
            "ctrl": -self.ctrl_cost_weight * action.square().sum(1),
        }

    def terminated(self, sim: MujocoBackend) -> torch.Tensor:
        unhealthy = ~self._healthy(sim)
        return unhealthy if self.terminate_when_unhealthy else torch.zeros_like(unhealthy)

    def _healthy(self, sim: MujocoBackend) -> torch.Tensor:
        z, angle = sim.qpos[:, 1], sim.qpos[:, 2]
        state = torch.cat([sim.qpos[:, 2:], sim.qvel], dim=1)
        return (
            _inside(state, self.healthy_state_range).all(1)
            & _inside(z, self.healthy_z_range)
            & _inside(angle, self.healthy_angle_range)
        )

    def camera(self) -> mujoco.MjvCamera:
        return tracking_camera(body=2, distance=3.0)


def _inside(x: torch.Tensor, bounds: tuple[float, float]) -> torch.Tensor:
    """Strictly inside the open interval ``bounds``."""
    return (bounds[0] < x) & (x < bounds[1])
