"""Arm reach: move the fingertip of a 4-joint Dynamixel arm to a target.

Model ``sims/assets/dxl_arm.xml``: XM430-W350 servos in position mode (base
yaw, shoulder, elbow, wrist). 10 physics steps of 2 ms per control step
(``control_dt`` 0.02 s, 50 Hz, the rate a Dynamixel bus sustains comfortably),
100 steps (2 s) per episode. The same observation is built on the real robot
(``hardware.dxl_arm``) from the servos' positions and velocities, so a
controller trained here deploys unchanged.

- Observation ``policy`` (14): joint positions (4, rad), joint velocities (4,
  rad/s), the target (3, m, base frame), fingertip - target (3, m). The
  fingertip comes from :func:`fingertip_position` (forward kinematics of the
  current joint angles), which the robot uses too.
- Action (4): goal joint positions (rad) within the joint ranges: exactly what
  a Dynamixel's Goal_Position receives. Each goal moves at most
  ``max_goal_step`` (0.2 rad) from the previous one per step, as the robot's
  safety layer enforces (``SafetyConfig.max_step``), so the controller learns
  under the limit it will meet on hardware.
- Reward terms: ``dist`` = -|fingertip - target|; ``reach`` = 1 - tanh(|d| /
  5 cm), a sharper term near the goal; ``velocity`` = -0.01 |qvel|^2;
  ``smooth`` = -0.5 |goal_t - goal_{t-1}|^2 (without it the policy chatters
  between extreme goals, which no real arm should be asked to do).
- Never terminates; truncated after 100 steps. Success: the fingertip is
  within ``success_distance`` (2 cm) of the target when the episode ends.
- Reset: joints U(-0.1, 0.1) around the home pose (upper arm up, forearm
  level), at rest; target uniform over a reachable shell in front of the arm
  (a replay of a robot's recording puts the recorded one back:
  ``state_from_observation``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import mujoco
import torch

from robolearn.interfaces import Obs
from sims.backend import MujocoBackend
from sims.task import Task, check_noise_scales, uniform

ARM_XML = Path(__file__).resolve().parent.parent / "assets" / "dxl_arm.xml"

# Geometry of dxl_arm.xml (metres), for forward kinematics in torch.
SHOULDER_HEIGHT = 0.09
UPPER_ARM, FOREARM, HAND = 0.12, 0.12, 0.08


def fingertip_position(q: torch.Tensor) -> torch.Tensor:
    """Fingertip position ``(..., 3)`` of joint angles ``q`` ``(..., 4)``, in the base frame.

    Exact for dxl_arm.xml (a test compares it with MuJoCo's kinematics); computed
    from the current angles rather than read from MuJoCo's derived fields, which
    lag one physics substep, so sim and robot observations agree.
    """
    yaw, shoulder, elbow, wrist = q.unbind(-1)
    forearm_angle = shoulder + elbow
    hand_angle = forearm_angle + wrist
    reach = UPPER_ARM * shoulder.sin() + FOREARM * forearm_angle.cos() + HAND * hand_angle.cos()
    height = SHOULDER_HEIGHT + UPPER_ARM * shoulder.cos() - FOREARM * forearm_angle.sin() - HAND * hand_angle.sin()
    return torch.stack([reach * yaw.cos(), reach * yaw.sin(), height], dim=-1)


# The shell targets are drawn from: in front of the arm and within its reach (it reaches 32 cm).
TARGET_RADIUS = (0.10, 0.24)  # m, horizontal distance from the base axis
TARGET_YAW = math.radians(70)  # either side of straight ahead
TARGET_HEIGHT = (0.04, 0.26)  # m above the base
TARGET_FROM_SHOULDER = 0.26  # m at most
TARGET_RANGE = ("horizontal distance 0.10-0.24 m, yaw within +-70 deg, height 0.04-0.26 m, "
                "at most 0.26 m from the shoulder")


def sample_targets(n: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` float64 targets uniform over the shell ``TARGET_RANGE`` describes."""
    targets = torch.empty(n, 3, dtype=torch.float64, device=generator.device)
    todo = torch.ones(n, dtype=torch.bool, device=generator.device)
    while todo.any():  # rejection sampling
        k = int(todo.sum())
        radius = uniform((k,), *TARGET_RADIUS, generator)
        yaw = uniform((k,), -TARGET_YAW, TARGET_YAW, generator)
        height = uniform((k,), *TARGET_HEIGHT, generator)
        candidate = torch.stack([radius * yaw.cos(), radius * yaw.sin(), height], dim=1)
        targets[todo] = candidate
        to_shoulder = candidate - candidate.new_tensor([0.0, 0.0, SHOULDER_HEIGHT])
        still = todo.clone()
        still[todo] = to_shoulder.norm(dim=1) > TARGET_FROM_SHOULDER
        todo = still
    return targets


def check_target(target: tuple[float, float, float]) -> None:
    """Refuse a fixed target (m, base frame) outside the shell targets are sampled from:
    out of reach, or a place no controller trained on this task has seen."""
    values = [float(v) for v in target]
    if len(values) != 3 or not all(math.isfinite(v) for v in values):
        raise ValueError(f"target must be three finite numbers (x, y, z in m), got {tuple(target)}")
    x, y, z = values
    radius, yaw = math.hypot(x, y), math.atan2(y, x)
    from_shoulder = math.hypot(radius, z - SHOULDER_HEIGHT)
    eps = 1e-9
    if not (TARGET_RADIUS[0] - eps <= radius <= TARGET_RADIUS[1] + eps and abs(yaw) <= TARGET_YAW + eps
            and TARGET_HEIGHT[0] - eps <= z <= TARGET_HEIGHT[1] + eps and from_shoulder <= TARGET_FROM_SHOULDER + eps):
        raise ValueError(f"target ({x:g}, {y:g}, {z:g}) m is outside the arm-reach target range ({TARGET_RANGE}): "
                         f"it has horizontal distance {radius:.3f} m, yaw {math.degrees(yaw):.0f} deg, "
                         f"height {z:.3f} m, {from_shoulder:.3f} m from the shoulder")


TARGET_IN_POLICY = slice(8, 11)
"""Where :func:`reach_observation` puts the target in the ``policy`` group."""


def reach_observation(q: torch.Tensor, qvel: torch.Tensor, target: torch.Tensor) -> Obs:
    """The ``policy`` group from joint state and target (at ``TARGET_IN_POLICY``), shared by sim and robot."""
    to_target = fingertip_position(q) - target
    return {"policy": torch.cat([q, qvel, target, to_target], dim=-1).float()}


def reach_rewards(q: torch.Tensor, qvel: torch.Tensor, target: torch.Tensor, goal_change: torch.Tensor,
                  task: ArmReach) -> dict[str, torch.Tensor]:
    """Named reward terms from joint state, target and the change of the applied goals,
    shared by sim and robot."""
    distance = (fingertip_position(q) - target).norm(dim=-1).float()
    return {
        "dist": -task.reward_dist_weight * distance,
        "reach": task.reward_reach_weight * (1 - torch.tanh(distance / task.reach_scale)),
        "velocity": -task.reward_velocity_weight * qvel.float().square().sum(-1),
        "smooth": -task.reward_smooth_weight * goal_change.float().square().sum(-1),
    }


@dataclass(kw_only=True)
class ArmReach(Task):
    reward_dist_weight: float = 1.0
    reward_reach_weight: float = 1.0
    reach_scale: float = 0.05
    reward_velocity_weight: float = 0.01
    reward_smooth_weight: float = 0.5
    success_distance: float = 0.02
    reset_noise: float = 0.1
    max_goal_step: float = 0.2  # rad per control step; a robot tightens SafetyConfig.max_step (0.2) to it
    _goal_change: torch.Tensor = field(default_factory=lambda: torch.zeros(4), init=False, repr=False)
    frame_skip: int = 10
    max_episode_steps: int = 100

    def __post_init__(self) -> None:
        if not self.success_distance > 0:  # no distance is below it: no success ever, silently (as point_maze's)
            raise ValueError(f"arm_reach success_distance={self.success_distance}: must be > 0 (metres)")
        check_noise_scales(self, "arm_reach", reset_noise=self.reset_noise)

    def model(self) -> mujoco.MjModel:
        return mujoco.MjModel.from_xml_path(str(ARM_XML))

    def reset(self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        qpos, qvel = super().reset(sim, ids, generator)
        return qpos + uniform(qpos.shape, -self.reset_noise, self.reset_noise, generator), qvel

    def actuate(self, sim: MujocoBackend, action: torch.Tensor) -> torch.Tensor:
        previous = sim.ctrl.to(action.dtype)  # the last goals; a reset world's are zero = home
        goal = previous + (action - previous).clamp(-self.max_goal_step, self.max_goal_step)
        self._goal_change = goal - previous
        return goal

    def after_reset(self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator) -> None:
        sim.set_mocap_pos(ids, sample_targets(len(ids), generator).unsqueeze(1))

    def state_from_observation(self, obs: Obs) -> dict[str, torch.Tensor]:
        """The target (the mocap body) as the observation reports it."""
        return {"mocap_pos": obs["policy"][:, TARGET_IN_POLICY].double().unsqueeze(1)}

    def observations(self, sim: MujocoBackend) -> Obs:
        return reach_observation(sim.qpos.double(), sim.qvel.double(), self._target(sim))

    def rewards(self, sim: MujocoBackend, action: torch.Tensor) -> dict[str, torch.Tensor]:
        return reach_rewards(sim.qpos.double(), sim.qvel, self._target(sim), self._goal_change, self)

    def success(self, sim: MujocoBackend) -> torch.Tensor:
        return self._distance(sim) < self.success_distance

    def _target(self, sim: MujocoBackend) -> torch.Tensor:
        return sim.mocap_pos[:, 0].double()

    def _distance(self, sim: MujocoBackend) -> torch.Tensor:
        return (fingertip_position(sim.qpos.double()) - self._target(sim)).norm(dim=1).float()

    def camera(self) -> str:
        return "front"
