"""Cart-pole swing-up: push a cart so that the pole hanging below it swings up and balances.

Model ``sims/assets/cartpole.xml``: a 1 kg cart on a rail (+-1.8 m), pushed
by up to 10 N, with a 1 m, 0.1 kg pole on a free hinge. 2 physics steps of
10 ms per control step (``control_dt`` 0.02 s), 500 steps (10 s) per episode.

- Observation ``policy`` (5): cart position, cos and sin of the pole angle from
  upright, cart velocity, pole angular velocity.
- Action (1): motor control in [-1, 1] (force = 10 N * action).
- Reward: one smooth term in [0, 1] per step, in the manner of dm_control's
  swing-up, ``swingup`` = upright * centered * small_control * small_velocity:
  upright = (1 + cos angle) / 2; centered = (1 + g(x / 2)) / 2; small_control =
  (4 + max(0, 1 - a^2)) / 5; small_velocity = (1 + g(angular velocity / 5)) / 2,
  where g(z) = 0.1^(z^2) is 1 at 0 and 0.1 at 1. The return is at most 500
  (upright from the first step); a hand-made energy-pumping swing-up with a
  linear balance controller scores 368, and a minimal PPO (128 envs, gamma
  0.99, 2.4M steps, under 1.5 minutes on 2 cores) scored 395, balancing in
  every episode.
- Never terminates; truncated after 500 steps. Success: at the end the pole is
  within 18 degrees of upright (cos > 0.95) and turning slower than 1 rad/s.
- Reset: pole hanging down (angle pi); cart position, pole angle and both
  velocities get U(-0.1, 0.1) noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar
from pathlib import Path

import mujoco
import torch

from robolearn.interfaces import Obs
from sims.backend import MujocoBackend
from sims.task import Task, check_noise_scales, bump, uniform

ASSET = Path(__file__).parents[1] / "assets" / "cartpole.xml"


@dataclass(kw_only=True)
class Cartpole(Task):
    reset_noise_scale: float = 0.1
    frame_skip: int = 2
    max_episode_steps: int = 500
    resets_by_mask: ClassVar[bool] = True  # reset only draws: on a GPU the done worlds reset by a mask

    def __post_init__(self) -> None:
        check_noise_scales(self, reset_noise_scale=self.reset_noise_scale)

    def model(self) -> mujoco.MjModel:
        return mujoco.MjModel.from_xml_path(str(ASSET))

    def reset(self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        noise = self.reset_noise_scale
        qpos = uniform((len(ids), 2), -noise, noise, generator)
        qpos[:, 1] += math.pi
        return qpos, uniform((len(ids), 2), -noise, noise, generator)

    def observations(self, sim: MujocoBackend) -> Obs:
        x, angle = sim.qpos[:, 0], sim.qpos[:, 1]
        return {"policy": torch.stack([x, angle.cos(), angle.sin(), sim.qvel[:, 0], sim.qvel[:, 1]], dim=1)}

    def rewards(self, sim: MujocoBackend, action: torch.Tensor) -> dict[str, torch.Tensor]:
        upright = (1.0 + sim.qpos[:, 1].cos()) / 2.0
        centered = (1.0 + bump(sim.qpos[:, 0] / 2.0)) / 2.0
        small_control = (4.0 + (1.0 - action[:, 0].square()).clamp(min=0.0)) / 5.0
        small_velocity = (1.0 + bump(sim.qvel[:, 1] / 5.0)) / 2.0
        return {"swingup": upright * centered * small_control * small_velocity}

    def success(self, sim: MujocoBackend) -> torch.Tensor:
        return (sim.qpos[:, 1].cos() > 0.95) & (sim.qvel[:, 1].abs() < 1.0)

    def camera(self) -> str:
        return "front"
