"""Ant: Gymnasium's ``Ant-v5`` (default arguments) on the batched backend.

Model ``gymnasium/envs/mujoco/assets/ant.xml`` plus one sensor (see
:meth:`Ant.model`), 5 physics steps of 10 ms per control step (``control_dt``
0.05 s), 1000 steps per episode.

- Observation ``policy`` (105): ``qpos[2:]`` (torso height and orientation,
  eight joint angles), ``qvel``, and the external (contact) wrench of bodies
  1-13 (``cfrc_ext``) clipped to [-1, 1]; without contact forces
  (``include_cfrc_ext_in_observation=False``) 27.
- Action (8): hip and ankle torques in [-1, 1] (motor controls).
- Reward terms: ``forward`` = x displacement of the torso over the step / dt;
  ``healthy`` = 1 while healthy; ``ctrl`` = -0.5 * |a|^2; ``contact`` =
  -5e-4 * |clip(cfrc_ext, -1, 1)|^2.
- Terminated when unhealthy: torso height outside [0.2, 1.0] or a non-finite state.
- Reset: ``qpos0`` plus U(-0.1, 0.1) noise (quaternion included, as Gymnasium
  does), zero velocity plus N(0, 0.1^2) noise.

Position and velocity parts of the observation, the termination and every
reward term except ``contact`` equal Gymnasium's for the same state and action.
The contact wrench does not quite: Gymnasium recomputes ``cfrc_ext`` after the
step from the last Runge-Kutta stage, while here MuJoCo computes it in its
sensor pass at the start of the last physics step (cheap, in the step's
threads). Over random-action episodes the two agree on 97% of the clipped
entries, and the reward differs by 7e-4 per step on average (at most 0.01).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import mujoco
import torch

from robolearn.interfaces import Obs
from sims.backend import MujocoBackend
from sims.task import Task, check_noise_scales, normal, tracking_camera, uniform
from sims.tasks.gym_assets import gym_asset


@dataclass(kw_only=True)
class Ant(Task):
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.5
    contact_cost_weight: float = 5e-4
    healthy_reward: float = 1.0
    main_body: int | str = 1
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (0.2, 1.0)
    contact_force_range: tuple[float, float] = (-1.0, 1.0)
    reset_noise_scale: float = 0.1
    include_cfrc_ext_in_observation: bool = True
    frame_skip: int = 5
    max_episode_steps: int = 1000
    resets_by_mask: ClassVar[bool] = True  # reset only draws: on a GPU the done worlds reset by a mask
    fields: ClassVar[tuple[str, ...]] = ("xpos", "cfrc_ext")
    _body: int = field(default=1, init=False, repr=False)
    _xy_before: torch.Tensor | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        check_noise_scales(self, reset_noise_scale=self.reset_noise_scale)

    def model(self) -> mujoco.MjModel:
        spec = mujoco.MjSpec.from_file(gym_asset("ant.xml"))
        # An acceleration sensor makes mj_step run mj_rnePostConstraint, which
        # fills cfrc_ext; its own reading is not used.
        spec.add_sensor(
            name="torso_linacc",
            type=mujoco.mjtSensor.mjSENS_FRAMELINACC,
            objtype=mujoco.mjtObj.mjOBJ_BODY,
            objname="torso",
        )
        model = spec.compile()
        self._body = model.body(self.main_body).id
        return model

    def reset(self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        qpos, qvel = super().reset(sim, ids, generator)
        noise = self.reset_noise_scale
        return qpos + uniform(qpos.shape, -noise, noise, generator), qvel + normal(qvel.shape, noise, generator)

    def pre_step(self, sim: MujocoBackend) -> None:
        # Gymnasium differences the body position MuJoCo left in xpos, which
        # lags qpos by one substep; so do we, to match its reward exactly.
        self._xy_before = sim.field("xpos")[:, self._body, :2].clone()

    def observations(self, sim: MujocoBackend) -> Obs:
        parts = [sim.qpos[:, 2:], sim.qvel]
        if self.include_cfrc_ext_in_observation:
            parts.append(self._contact_forces(sim)[:, 1:].flatten(1))
        return {"policy": torch.cat(parts, dim=1)}

    def rewards(self, sim: MujocoBackend, action: torch.Tensor) -> dict[str, torch.Tensor]:
        dt = self.frame_skip * sim.timestep
        x_velocity = (sim.field("xpos")[:, self._body, 0] - self._xy_before[:, 0]) / dt
        return {
            "forward": self.forward_reward_weight * x_velocity,
            "healthy": self.healthy_reward * self._healthy(sim).to(sim.dtype),
            "ctrl": -self.ctrl_cost_weight * action.square().sum(1),
            "contact": -self.contact_cost_weight * self._contact_forces(sim).square().sum((1, 2)),
        }

    def terminated(self, sim: MujocoBackend) -> torch.Tensor:
        unhealthy = ~self._healthy(sim)
        return unhealthy if self.terminate_when_unhealthy else torch.zeros_like(unhealthy)

    def _healthy(self, sim: MujocoBackend) -> torch.Tensor:
        z = sim.qpos[:, 2]
        finite = torch.isfinite(torch.cat([sim.qpos, sim.qvel], dim=1)).all(1)  # one check: 6 kernels, not 11
        return finite & (self.healthy_z_range[0] <= z) & (z <= self.healthy_z_range[1])

    def _contact_forces(self, sim: MujocoBackend) -> torch.Tensor:
        return sim.field("cfrc_ext").clamp(*self.contact_force_range)

    def camera(self) -> mujoco.MjvCamera:
        return tracking_camera(body=self._body, distance=4.0)
