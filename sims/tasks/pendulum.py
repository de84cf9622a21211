"""Pendulum swing-up: a torque-limited rod starts hanging down and must be balanced upright.

Model ``sims/assets/pendulum.xml``: a 1 m, 1 kg rod whose motor (at most
2 N m) is weaker than gravity's pull (up to 4.9 N m), so it has to swing back
and forth to gain energy. 2 physics steps of 10 ms per control step
(``control_dt`` 0.02 s), 500 steps (10 s) per episode.

- Observation ``policy`` (3): cos and sin of the angle from upright, angular velocity.
- Action (1): motor torque in [-2, 2] N m.
- Reward terms: ``upright`` = (1 - (angle / pi)^2) * (1 + 0.1^((velocity / 5)^2)) / 2
  in [0, 1], with the angle wrapped to [-pi, pi] (0 upright): it rises steadily
  from the bottom, so the first small swings already pay, and halves for fast
  spinning, so spinning through the top pays less than balancing; ``effort`` =
  -0.01 * (torque / 2)^2. The return is at most 500 (upright from the first
  step, which the torque limit rules out). A hand-made energy-pumping swing-up
  with a PD balance scores 406. PPO solves it with a discount horizon of about
  half a second (gamma 0.96 at this control rate): a minimal PPO (128 envs,
  2.4M steps, about a minute on 2 cores) scored 373 and Stable-Baselines3's
  (gSDE, 250k steps, 2 minutes) 397, both balancing in every episode; with
  gamma 0.99 PPO tended to settle for swinging round.
- Never terminates; truncated after 500 steps. Success: at the end the rod is
  within 18 degrees of upright (cos > 0.95) and turning slower than 1 rad/s.
- Reset: hanging down (angle pi), angle and velocity noise U(-0.1, 0.1).
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

ASSET = Path(__file__).parents[1] / "assets" / "pendulum.xml"


@dataclass(kw_only=True)
class Pendulum(Task):
    effort_weight: float = 0.01
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
        qpos = math.pi + uniform((len(ids), 1), -noise, noise, generator)
        return qpos, uniform((len(ids), 1), -noise, noise, generator)

    def observations(self, sim: MujocoBackend) -> Obs:
        angle = sim.qpos[:, 0]
        return {"policy": torch.stack([angle.cos(), angle.sin(), sim.qvel[:, 0]], dim=1)}

    def rewards(self, sim: MujocoBackend, action: torch.Tensor) -> dict[str, torch.Tensor]:
        max_torque = float(sim.model.actuator_ctrlrange[0, 1])
        angle = torch.atan2(sim.qpos[:, 0].sin(), sim.qpos[:, 0].cos())  # wrapped to [-pi, pi]
        upright = 1.0 - (angle / math.pi).square()
        slow = (1.0 + bump(sim.qvel[:, 0] / 5.0)) / 2.0
        return {
            "upright": upright * slow,
            "effort": -self.effort_weight * (action[:, 0] / max_torque).square(),
        }

    def success(self, sim: MujocoBackend) -> torch.Tensor:
        return (sim.qpos[:, 0].cos() > 0.95) & (sim.qvel[:, 0].abs() < 1.0)

    def camera(self) -> str:
        return "front"
