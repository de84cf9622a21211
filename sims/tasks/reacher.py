"""Reacher: Gymnasium's ``Reacher-v5`` (default arguments) on the batched backend.

Model ``gymnasium/envs/mujoco/assets/reacher.xml``: a two-link planar arm and a
target on two slide joints. 2 physics steps of 10 ms per control step
(``control_dt`` 0.02 s), 50 steps per episode.

- Observation ``policy`` (10): cos and sin of the two arm angles, the target's
  x and y, the two arm joint velocities, and the x, y of fingertip - target.
- Action (2): joint torques in [-1, 1] (motor controls, gear 200).
- Reward terms: ``dist`` = -|fingertip - target|; ``ctrl`` = -|a|^2.
- Never terminates; truncated after 50 steps. Success: the fingertip is
  within ``success_distance`` (2 cm) of the target when the episode ends.
- Reset: arm angles U(-0.1, 0.1), target uniform in the disc of radius 0.2,
  arm velocities U(-0.005, 0.005), target at rest.

Fingertip and target positions are MuJoCo's ``xpos`` after the step (one
substep behind ``qpos``), as in Gymnasium, so rewards and observations match.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import mujoco
import torch

from robolearn.interfaces import Obs
from sims.backend import MujocoBackend
from sims.task import Task, tracking_camera, uniform
from sims.tasks.gym_assets import gym_asset


@dataclass(kw_only=True)
class Reacher(Task):
    reward_dist_weight: float = 1.0
    reward_control_weight: float = 1.0
    success_distance: float = 0.02
    frame_skip: int = 2
    max_episode_steps: int = 50
    fields: ClassVar[tuple[str, ...]] = ("xpos",)
    _fingertip: int = field(default=0, init=False, repr=False)
    _target: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.success_distance > 0:  # no distance is below it: no success ever, silently (as point_maze's)
            raise ValueError(f"reacher success_distance={self.success_distance}: must be > 0 (metres)")

    def model(self) -> mujoco.MjModel:
        model = mujoco.MjModel.from_xml_path(gym_asset("reacher.xml"))
        self._fingertip, self._target = model.body("fingertip").id, model.body("target").id
        return model

    def reset(self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        qpos, qvel = super().reset(sim, ids, generator)
        qpos += uniform(qpos.shape, -0.1, 0.1, generator)
        goal = uniform((len(ids), 2), -0.2, 0.2, generator)
        outside = goal.norm(dim=1) >= 0.2
        while outside.any():  # rejection sampling: uniform in the disc
            goal[outside] = uniform((int(outside.sum()), 2), -0.2, 0.2, generator)
            outside = goal.norm(dim=1) >= 0.2
        qpos[:, -2:] = goal
        qvel[:, :-2] = uniform((len(ids), qvel.shape[1] - 2), -0.005, 0.005, generator)
        return qpos, qvel

    def observations(self, sim: MujocoBackend) -> Obs:
        angles = sim.qpos[:, :2]
        to_target = self._to_target(sim)[:, :2]
        return {"policy": torch.cat([angles.cos(), angles.sin(), sim.qpos[:, 2:], sim.qvel[:, :2], to_target], dim=1)}

    def rewards(self, sim: MujocoBackend, action: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "dist": -self.reward_dist_weight * self._to_target(sim).norm(dim=1),
            "ctrl": -self.reward_control_weight * action.square().sum(1),
        }

    def success(self, sim: MujocoBackend) -> torch.Tensor:
        return self._to_target(sim).norm(dim=1) < self.success_distance

    def _to_target(self, sim: MujocoBackend) -> torch.Tensor:
        xpos = sim.field("xpos")
        return xpos[:, self._fingertip] - xpos[:, self._target]

    def camera(self) -> mujoco.MjvCamera:
        return tracking_camera(body=0, distance=1.0, elevation=-90.0)
