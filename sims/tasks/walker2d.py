"""Walker2d: Gymnasium's ``Walker2d-v5`` (default arguments) on the batched backend.

The hopper with two legs: model ``gymnasium/envs/mujoco/assets/walker2d_v5.xml``,
4 physics steps of 2 ms per control step (``control_dt`` 0.008 s), 1000 steps per
episode. It is the "walker-style" task of the D4RL family (walker2d-random/medium/
expert), so the offline benchmarks can use the same three locomotion tasks.

- Observation ``policy`` (17): ``qpos[1:]`` (torso height and angle, six joint
  angles) and ``qvel`` clipped to [-10, 10].
- Action (6): joint torques in [-1, 1] (motor controls, gear 100).
- Reward terms (as the hopper's): ``forward`` = x displacement of the torso over
  the step / dt; ``healthy`` = 1 while healthy; ``ctrl`` = -1e-3 * |a|^2.
- Terminated when unhealthy: torso height outside (0.8, 2.0) or torso angle
  outside (-1, 1). Unlike the hopper, joint positions and velocities are not
  bounded.
- Reset: ``qpos0`` and zero velocity plus U(-5e-3, 5e-3) noise on every entry.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco

from sims.task import tracking_camera
from sims.tasks.gym_assets import gym_asset
from sims.tasks.hopper import Hopper


@dataclass(kw_only=True)
class Walker2d(Hopper):
    healthy_state_range: tuple[float, float] = (-float("inf"), float("inf"))
    healthy_z_range: tuple[float, float] = (0.8, 2.0)
    healthy_angle_range: tuple[float, float] = (-1.0, 1.0)

    def model(self) -> mujoco.MjModel:
        return mujoco.MjModel.from_xml_path(gym_asset("walker2d_v5.xml"))

    def camera(self) -> mujoco.MjvCamera:
        return tracking_camera(body=1, distance=4.0)
