"""Go1 velocity tracking: a Unitree-Go1-like quadruped follows (vx, vy, yaw rate) commands.

The legged_gym / mjlab velocity task on ``sims/assets/go1.xml`` (our own
primitive-geom Go1, position servos kp 35, kv 0.5). 5 physics steps of 4 ms per
control step (``control_dt`` 0.02 s, 50 Hz), 1000 steps (20 s) per episode.
Leg order everywhere: FR, FL, RR, RL; three joints per leg (abduction, hip, knee).

- Commands ``(vx, vy, yaw rate)`` in the trunk frame (as legged_gym tracks them), drawn per world
  from ``command_ranges`` at reset and again every ``resample_s`` seconds (per-world
  timers); a fraction ``standing_fraction`` of draws is a zero command, and planar
  commands slower than 0.2 m/s are zeroed (legged_gym).
- Observation ``policy`` (45): projected gravity (3), trunk angular velocity (3,
  gyro), command (3), joint positions minus the home pose (12), joint velocities
  (12), last action (12); with ``noise_scale`` > 0 each channel gets uniform noise
  within Playground's Go1 half-widths times ``noise_scale`` (a task setting: it stays on
  in evaluation, ``--nominal`` too, which drops ``env.randomization`` only; ``noise_scale=0``
  in ``sims.make_env`` or a config's ``env.kwargs`` turns it off, as legged_gym's play
  script does). With ``policy_linvel``
  (48) the trunk's linear velocity in its own frame comes first, noised within
  +-0.1 m/s (Playground; mjlab and legged_gym give the policy this too; off by
  default here, on in the Go1 configs). ``critic`` (53, or 56): the noise-free policy
  group plus the privileged trunk linear velocity (3), trunk height above the
  terrain (1) and foot contacts (4).
- Action (12): joint position offsets in [-1, 1]; the servos' targets are the home
  pose plus ``action_scale`` times the action: 0.25 rad as legged_gym (Playground:
  0.5). With 0.5 and PPO's initial noise 1.0 the robot flails (episodes of ~45
  steps, every step's penalties above its tracking reward) and 200k CPU steps
  learned nothing; with 0.25 the same run went from 55- to 750-step episodes.
  ``action_limit`` widens the box to [-limit, limit] in the same units. At 1, a
  learner that clamps to the box pushes its mean past the bounds and ends up
  switching joints between two corners (legged_gym clips at 100, mjlab not at all).
  The Go1 configs use 4, learner samples in these units, and ``policy_linvel``: 0.086 m/s
  tracking error after 28.6M env steps, against ~0.5 with the box at 1 (BENCHMARKS.md, session 49).
- Reward terms: ``reward_weights`` maps a term of :data:`REWARD_TERMS` to its
  weight; every term is ``weight * value * control_dt`` (legged_gym and Isaac
  Lab scale by dt, so weights do not depend on the control rate). Defaults are
  legged_gym's (A1/Go1 torque weight), see :data:`DEFAULT_REWARD_WEIGHTS`; the
  weights given replace those terms' defaults and leave the others (so
  ``env.kwargs.reward_weights.feet_air_time=0`` drops one term, not all the rest).
  Unknown names are errors; zero weights are not computed. ``pose`` and
  ``joint_limits`` (weight 0 by default) are mjlab's Go1 posture reward and soft
  joint-limit penalty, for its smaller reward set. With
  ``only_positive_rewards`` (legged_gym's default; Playground clips the same way) a
  negative step reward (``termination`` aside, as there) is lifted to 0 by an extra
  term ``positive_clip``: otherwise, early in training when penalties outweigh
  tracking, falling fast pays best (measured: episodes shrank from 20 to 11 steps).
- Terminated when the trunk centre is less than ``min_height`` (0.1 m: the trunk
  nearly on the ground) above the terrain or the trunk tilts more than
  ``max_tilt`` (90 degrees: Playground's upside-down test).
- Reset: the home pose with joints U(-0.1, 0.1) rad off (``reset_joint_noise``), a
  random yaw, trunk velocities U(-0.5, 0.5) (``reset_velocity``, Playground; a
  sideways 0.5 m/s can trip the standing pose, which the policy must learn to
  catch); on rough terrain anywhere within ``spawn_range`` of the origin. The reset
  pose and the servos' zero (``actuate``) are the ``home`` keyframe, never the model's
  ``qpos0``, as in Playground's Go1: ``env.randomization.qpos0_offset`` (the Go1
  configs draw Playground's +-0.05 rad) moves MuJoCo's reference pose alone, which on
  this model only the unread ``actuator_length0`` depends on.
- Domain randomization (``sims/randomization.py``; the Go1 configs) follows Playground's
  Go1 recipe: contact friction U(0.4, 1.0), each link's mass x U(0.9, 1.1), the trunk
  +-1 kg and its centre of mass +-5 cm per axis (inertias as compiled, as Playground
  leaves them), armature x U(1, 1.05) per joint, qpos0 +-0.05 rad, and joint frictionloss
  x U(0.9, 1.1) per joint, drawn apart from the contacts' factor (``contact_friction_scale``
  and ``frictionloss_scale``; ``friction_scale`` would scale both by one factor).
- ``metrics/lin_vel_error`` and ``metrics/ang_vel_error`` (absolute tracking
  errors, m/s and rad/s) are logged through :meth:`Task.metrics`.

Where this departs from legged_gym's LeggedRobotCfg (with its A1 config, a robot of the Go1's size) and mjlab's
Go1 velocity task, besides the choices said above:

- No ``collision`` term (legged_gym: -1 per thigh or calf touching): in ``go1.xml`` only feet and trunk touch the
  floor, so there is nothing for it to count.
- The A1 config's ``dof_pos_limits`` weight (-10, soft limits at 90 % of the range) is not among the defaults,
  though its torque weight is: ``joint_limits`` is that term, at weight 0 unless given. The Go1 numbers in
  BENCHMARKS.md were measured without it.
- Commands are yaw rates drawn directly, U(-1, 1) rad/s by default (legged_gym's ``ang_vel_yaw`` range with
  ``heading_command = False``); legged_gym's default draws a heading and commands
  clip(0.5 heading error, -1, 1), and mjlab does so for 30 % of its worlds, with yaw rates within +-0.5.
- Foot contact is the sole's height below 1 cm on this step, without legged_gym's filter (contact on this or
  the last step), which it needs for PhysX's missed contacts.
- Projected gravity, gyro and trunk linear velocity are MuJoCo sensors, which ``mj_step`` computes at the start
  of its last physics substep: 4 ms behind ``qpos``/``qvel`` (:mod:`sims.backend`), in observations, rewards
  and termination alike. mjlab's rewards and terminations see the same lag; its observations do not (it runs a
  forward pass before observing).

``terrain="rough"`` (task ``go1_rough``) adds a 20 x 20 m heightfield of random
0.5 m blocks, 10-100% of ``step_height`` (5 cm) high, ramped over one 0.1 m cell
(MuJoCo triangulates heightfields), on the flat floor around the origin. Heights
under the feet and trunk come from the same grid in torch (:meth:`terrain_height`),
so foot contact and trunk height mean the same on both terrains. MuJoCo Warp
collides heightfields too, so both variants run there.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, NamedTuple

import mujoco
import numpy as np
import torch
from gymnasium import spaces

from robolearn.interfaces import Obs
from sims.backend import MujocoBackend
from sims.task import Task, check_noise_scales, tracking_camera, uniform
from sims.worlds import put_rows_

GO1_XML = Path(__file__).resolve().parent.parent / "assets" / "go1.xml"
FEET = ("FR_foot", "FL_foot", "RR_foot", "RL_foot")
FOOT_RADIUS = 0.023
# Where a reset looks for the highest terrain under the trunk (x, y in m, body frame, yaw ignored).
FOOTPRINT = torch.tensor([[0.25, 0.2], [0.25, -0.2], [-0.25, 0.2], [-0.25, -0.2], [0.0, 0.0]], dtype=torch.float64)
# Playground's Go1 observation noise per channel: uniform within +-these (it draws (2 U(0, 1) - 1) x scale),
# not Gaussian standard deviations, which would spread sqrt(3) times wider.
NOISE_HALF_WIDTH = {"linvel": 0.1, "gravity": 0.05, "gyro": 0.2, "joint_pos": 0.03, "joint_vel": 1.5}
# mjlab's Go1 posture std per joint (abduction, hip, knee) x 4 legs: row 0 while standing (the command's
# |(vx, vy)| + |yaw rate| below POSE_WALKING_THRESHOLD), row 1 otherwise (mjlab's walking and running stds,
# the same for the Go1); and the share of each joint's range within which its joint-limit penalty is 0
# (mjlab's soft_joint_pos_limit_factor).
POSE_STD = torch.tensor([[0.05, 0.05, 0.1] * 4, [0.3, 0.3, 0.6] * 4])
POSE_WALKING_THRESHOLD = 0.05
SOFT_LIMIT_FACTOR = 0.9


class Snapshot(NamedTuple):
    """What reward terms read, computed once per step; all ``(num_worlds, ...)``. The callables are worked out
    only when a term calls them: inputs no weighted term reads cost no kernels."""

    lin_vel: torch.Tensor  # trunk linear velocity, trunk frame
    ang_vel: torch.Tensor  # trunk angular velocity, trunk frame
    gravity: torch.Tensor  # unit gravity in the trunk frame
    height: Callable[[], torch.Tensor]  # trunk centre above the terrain, worked out only if a term asks
    command: torch.Tensor  # (vx, vy, yaw rate)
    joint_acc: torch.Tensor
    torque: torch.Tensor  # actuator forces
    action_change: torch.Tensor  # action - previous action
    first_contact: torch.Tensor  # feet touching down this step
    air_time: torch.Tensor  # seconds each touching-down foot spent in the air
    terminated: Callable[[], torch.Tensor]  # worked out only if a term asks (none by default)
    joint_pos: torch.Tensor  # the 12 leg joints' positions
    home_joints: torch.Tensor  # their home pose
    soft_limits: torch.Tensor  # (12, 2): 90 % of each joint's range around its middle
    pose_std: torch.Tensor  # POSE_STD on the device (2, 12): standing, moving
    tracking_sigma: float
    base_height_target: float


def _moving(s: Snapshot) -> torch.Tensor:
    return (s.command[:, :2].norm(dim=1) > 0.1).to(s.lin_vel.dtype)


def _pose_std(s: Snapshot) -> torch.Tensor:
    """mjlab's ``variable_posture`` std per world and joint ``(num_worlds, 12)``: tight while the command
    stands (``|(vx, vy)| + |yaw rate| < 0.05``), loose otherwise."""
    speed = s.command[:, :2].norm(dim=1) + s.command[:, 2].abs()
    return torch.where((speed < POSE_WALKING_THRESHOLD).unsqueeze(1), s.pose_std[0], s.pose_std[1])


REWARD_TERMS: dict[str, Callable[[Snapshot], torch.Tensor]] = {
    "tracking_lin_vel": lambda s: torch.exp(-(s.command[:, :2] - s.lin_vel[:, :2]).square().sum(1) / s.tracking_sigma),
    "tracking_ang_vel": lambda s: torch.exp(-(s.command[:, 2] - s.ang_vel[:, 2]).square() / s.tracking_sigma),
    "lin_vel_z": lambda s: s.lin_vel[:, 2].square(),
    "ang_vel_xy": lambda s: s.ang_vel[:, :2].square().sum(1),
    "orientation": lambda s: s.gravity[:, :2].square().sum(1),
    "torques": lambda s: s.torque.square().sum(1),
    "action_rate": lambda s: s.action_change.square().sum(1),
    "joint_acc": lambda s: s.joint_acc.square().sum(1),
    # legged_gym: reward steps longer than 0.5 s, paid at touchdown, only when asked to move.
    "feet_air_time": lambda s: ((s.air_time - 0.5) * s.first_contact).sum(1) * _moving(s),
    "base_height": lambda s: (s.height() - s.base_height_target).square(),
    "termination": lambda s: s.terminated().to(s.lin_vel.dtype),
    # mjlab's Go1 terms: a posture reward near the home pose, per joint std (hip and thigh 0.3, calf 0.6 rad;
    # on a standing command 0.05 and 0.1), and a penalty on joints past 90 % of their range (its soft limits).
    "pose": lambda s: torch.exp(-((s.joint_pos - s.home_joints) / _pose_std(s)).square().mean(1)),
    "joint_limits": lambda s: ((s.soft_limits[:, 0] - s.joint_pos).clamp(min=0)
                               + (s.joint_pos - s.soft_limits[:, 1]).clamp(min=0)).sum(1),
}
"""Raw (unweighted) reward terms; weights give them sign and scale."""

# legged_gym's LeggedRobotCfg weights, except orientation (0 there; its ANYmal flat config: -5)
# and torques (its A1 config, a robot of the Go1's size: -2e-4 instead of -1e-5); without its collision
# term (-1) and the A1 config's dof_pos_limits (-10, our joint_limits): see the module docstring.
DEFAULT_REWARD_WEIGHTS: dict[str, float] = {
    "tracking_lin_vel": 1.0,
    "tracking_ang_vel": 0.5,
    "lin_vel_z": -2.0,
    "ang_vel_xy": -0.05,
    "orientation": -1.0,
    "torques": -2e-4,
    "action_rate": -0.01,
    "joint_acc": -2.5e-7,
    "feet_air_time": 1.0,
}


@dataclass(kw_only=True)
class Go1Velocity(Task):
    """Velocity tracking on flat ground (or ``terrain="rough"``); see the module docstring."""

    terrain: Literal["flat", "rough"] = "flat"
    command_ranges: tuple[tuple[float, float], ...] = ((-1.0, 1.0), (-1.0, 1.0), (-1.0, 1.0))
    resample_s: float = 10.0
    standing_fraction: float = 0.1
    action_scale: float = 0.25
    action_limit: float = 1.0  # the action box [-limit, limit], in units of action_scale
    noise_scale: float = 1.0
    policy_linvel: bool = False  # the policy also sees the trunk's linear velocity (noised)
    reward_weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_REWARD_WEIGHTS))
    tracking_sigma: float = 0.25
    base_height_target: float = 0.27
    only_positive_rewards: bool = True
    min_height: float = 0.1
    max_tilt: float = math.pi / 2
    reset_joint_noise: float = 0.1
    reset_velocity: float = 0.5
    spawn_range: float = 0.0
    step_height: float = 0.05
    terrain_seed: int = 0
    frame_skip: int = 5
    max_episode_steps: int = 1000
    fields: ClassVar[tuple[str, ...]] = ("actuator_force",)
    light_reset: ClassVar[bool] = True  # observations read state and sensors; actuator_force only rewards, after a step
    resets_by_mask: ClassVar[bool] = True  # reset only draws; after_reset_where lists no worlds

    def __post_init__(self) -> None:
        if unknown := sorted(set(self.reward_weights) - set(REWARD_TERMS)):  # (a misspelt one named with its match)
            close = difflib.get_close_matches(unknown[0], REWARD_TERMS, n=1)
            meant = f" (did you mean '{close[0]}'?)" if close else ""
            raise ValueError(f"reward_weights: unknown Go1 reward term(s) {unknown}{meant}; known terms: "
                             f"{sorted(REWARD_TERMS)}")
        if self.terrain not in ("flat", "rough"):
            raise ValueError(f"terrain must be 'flat' or 'rough', got {self.terrain!r}")
        if not self.action_limit > 0:
            raise ValueError(f"action_limit must be above 0 (the action box in units of action_scale), got {self.action_limit}")
        if len(self.command_ranges) != 3:
            raise ValueError("command_ranges needs three [low, high] pairs: vx, vy, yaw rate")
        check_noise_scales(self, reset_joint_noise=self.reset_joint_noise, reset_velocity=self.reset_velocity)
        for name, pair in zip(("vx", "vy", "yaw rate"), self.command_ranges):  # (a draw in [1, -1] lies outside both)
            if len(pair) != 2 or not pair[0] <= pair[1]:
                raise ValueError(f"command_ranges: the {name} range {list(pair)} is no [low, high] pair with low <= "
                                 f"high")
        if not self.tracking_sigma > 0:  # exp(-error^2 / sigma): 0 pays no tracking at all, below 0 pays errors
            raise ValueError(f"tracking_sigma must be above 0 (the tracking rewards' error scale, in squared m/s "
                             f"or rad/s), got {self.tracking_sigma}")
        if not 0.0 <= self.standing_fraction <= 1.0:
            raise ValueError(f"standing_fraction is the fraction of zero commands: in [0, 1], got {self.standing_fraction}")
        self._weights = {name: w for name, w in {**DEFAULT_REWARD_WEIGHTS, **self.reward_weights}.items() if w != 0.0}
        self._heights: torch.Tensor | None = None  # terrain grid (metres), rough only
        self._device_copies: dict[tuple[str, torch.device, torch.dtype], torch.Tensor] = {}
        self._terrain_half = 0.0

    # ---- model ----------------------------------------------------------------

    def model(self) -> mujoco.MjModel:
        spec = mujoco.MjSpec.from_file(str(GO1_XML))
        if self.terrain == "rough":
            self._add_terrain(spec)
        model = spec.compile()
        self._device_copies.clear()  # of this model's grid and home pose
        self._home = torch.as_tensor(model.key("home").qpos, dtype=torch.float64)
        self._sensor = {name: slice(model.sensor(name).adr[0], model.sensor(name).adr[0] + model.sensor(name).dim[0])
                        for name in ("world_up", "gyro", "local_linvel")}
        feet = model.sensor(f"{FEET[0]}_pos").adr[0]
        self._feet = slice(feet, feet + 3 * len(FEET))
        ranges = torch.as_tensor(model.jnt_range[1:], dtype=torch.float64)  # the 12 leg joints (0 is the free joint)
        middle, half = ranges.mean(1), (ranges[:, 1] - ranges[:, 0]) / 2 * SOFT_LIMIT_FACTOR
        self._soft_limits = torch.stack([middle - half, middle + half], dim=1)
        return model

    def _add_terrain(self, spec: mujoco.MjSpec, half: float = 10.0, cell: float = 0.1, block: float = 0.5) -> None:
        """Random blocks up to ``step_height`` on a ``2 half`` m square heightfield; zero at the rim."""
        n = int(round(2 * half / cell)) + 1
        per_block = int(round(block / cell))
        rng = np.random.default_rng(self.terrain_seed)
        blocks = rng.uniform(0.1, 1.0, size=(n // per_block + 1, n // per_block + 1))
        grid = np.kron(blocks, np.ones((per_block, per_block)))[:n, :n]
        grid[[0, -1], :] = 0.0
        grid[:, [0, -1]] = 0.0
        spec.add_hfield(name="terrain", size=[half, half, self.step_height, 0.1], nrow=n, ncol=n,
                        userdata=grid.ravel().tolist())
        spec.worldbody.add_geom(name="terrain", type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname="terrain",
                                contype=1, conaffinity=0, friction=[0.8, 0.02, 0.01], rgba=[0.45, 0.5, 0.55, 1])
        self._heights = torch.as_tensor(grid * self.step_height, dtype=torch.float32)
        self._terrain_half = half

    def terrain_height(self, xy: torch.Tensor) -> torch.Tensor:
        """Terrain height (m) under points ``xy`` ``(..., 2)``: bilinear in the heightfield grid, 0 off it."""
        if self._heights is None:
            return torch.zeros(xy.shape[:-1], dtype=xy.dtype, device=xy.device)
        heights = self.on_device("heights", self._heights, xy.device, xy.dtype)
        n = heights.shape[0]
        # Heightfield rows run along y, columns along x. The cell's corner is clamped, not the point
        # (n - 1 - eps rounds to n - 1 in float32, and its cell would then start past the grid's end).
        # (Columns and rows together, and the cell's four heights in one gather: ~15 kernels a call, not ~30.)
        grid = ((xy + self._terrain_half) / (2 * self._terrain_half) * (n - 1)).clamp(0, n - 1)  # (col, row)
        corner = grid.floor().long().clamp(0, n - 2)  # NaN: 0, no bad index
        fc, fr = (grid - corner).unbind(-1)
        first = corner[..., 1] * n + corner[..., 0]  # (r0, c0) in the flattened grid
        offsets = self.on_device("cell_corners", [0, 1, n, n + 1], xy.device, torch.long)  # (r0|r0+1, c0|c0+1)
        h00, h01, h10, h11 = heights.view(-1)[first.unsqueeze(-1) + offsets].unbind(-1)
        return torch.lerp(torch.lerp(h00, h01, fc), torch.lerp(h10, h11, fc), fr)

    def action_spec(self, model: mujoco.MjModel) -> spaces.Box:
        """Joint offsets from the home pose, in units of ``action_scale`` rad, within ``action_limit``."""
        return spaces.Box(-self.action_limit, self.action_limit, (model.nu,), dtype=np.float32)

    # ---- episodes and commands ---------------------------------------------------

    def reset(
        self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(ids)
        qpos = self.on_device("home", self._home, sim.device, torch.float64).expand(n, -1).clone()
        qpos[:, 7:] += uniform((n, 12), -self.reset_joint_noise, self.reset_joint_noise, generator)
        yaw = uniform((n,), -math.pi, math.pi, generator)
        qpos[:, 3], qpos[:, 6] = torch.cos(yaw / 2), torch.sin(yaw / 2)
        if self.spawn_range > 0:
            qpos[:, :2] = uniform((n, 2), -self.spawn_range, self.spawn_range, generator)
        # Stand on the highest terrain under the trunk's footprint.
        if self._heights is not None:
            footprint = self.on_device("footprint", FOOTPRINT, sim.device, qpos.dtype)
            qpos[:, 2] += self.terrain_height(qpos[:, None, :2] + footprint).amax(1)
        qvel = torch.zeros(n, sim.model.nv, dtype=torch.float64, device=sim.device)
        qvel[:, :6] = uniform((n, 6), -self.reset_velocity, self.reset_velocity, generator)
        return qpos, qvel

    def after_reset(self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator) -> None:
        mask = torch.zeros(sim.num_worlds, dtype=torch.bool, device=sim.device)
        mask[ids] = True
        self.after_reset_where(sim, mask, generator)

    def after_reset_where(self, sim: MujocoBackend, mask: torch.Tensor, generator: torch.Generator) -> None:
        if getattr(self, "_command", None) is None or len(self._command) != sim.num_worlds:
            self._allocate(sim)
        self._generator = generator  # the env's seeded generator: commands and noise follow its seed
        self._sample_commands_where(mask)
        rows = mask.unsqueeze(1)
        for buffer in (self._last_action, self._prev_action, self._air_time):
            buffer.masked_fill_(rows, 0.0)
        self._in_contact.masked_fill_(rows, True)
        put_rows_(mask, sim.qvel[:, 6:], self._qvel_before)

    def _allocate(self, sim: MujocoBackend) -> None:
        n, dtype, device = sim.num_worlds, sim.dtype, sim.device
        self._command = torch.zeros(n, 3, dtype=dtype, device=device)
        self._command_timer = torch.zeros(n, dtype=torch.long, device=device)
        self._last_action = torch.zeros(n, sim.model.nu, dtype=dtype, device=device)
        self._prev_action = torch.zeros_like(self._last_action)
        self._air_time = torch.zeros(n, len(FEET), dtype=dtype, device=device)
        self._in_contact = torch.ones(n, len(FEET), dtype=torch.bool, device=device)
        self._qvel_before = torch.zeros(n, 12, dtype=dtype, device=device)
        self._default_joints = self._home[7:].to(device, dtype)
        self._control_dt = self.frame_skip * sim.timestep

    @property
    def resample_steps(self) -> int:
        """Control steps between command draws."""
        return max(1, round(self.resample_s / self._control_dt))

    def _draw_commands(self, n: int) -> torch.Tensor:
        """``n`` fresh commands: uniform in the ranges, planar ones under 0.2 m/s zeroed, some standing."""
        # one draw for the three commands and the standing share: few kernels (this runs twice a step on a GPU)
        ranges = f"command_ranges {self.command_ranges}"  # keyed by value: a range changed mid-run is copied anew
        low, high = self.on_device(ranges, self.command_ranges, self._generator.device, torch.float64).T
        u = torch.rand(n, 4, generator=self._generator, device=self._generator.device, dtype=torch.float64)
        command = torch.addcmul(low, high - low, u[:, :3])
        command[:, :2] *= (command[:, :2].norm(dim=1, keepdim=True) > 0.2)
        command.masked_fill_(u[:, 3:] < self.standing_fraction, 0.0)  # a mask, not command[standing]: no host sync
        return command.to(self._command.dtype)

    def _sample_commands_where(self, mask: torch.Tensor) -> None:
        """New commands for the worlds where ``mask``. Every world draws and the masked ones take it:
        picking them (``mask.nonzero()``) would be a host sync every step on a GPU, and the draws are cheap
        next to a physics step."""
        put_rows_(mask, self._draw_commands(len(mask)), self._command)
        self._command_timer.masked_fill_(mask, self.resample_steps)

    @property
    def command(self) -> torch.Tensor:
        """Every world's current command ``(num_worlds, 3)``: vx, vy (m/s), yaw rate (rad/s)."""
        return self._command

    def pre_step(self, sim: MujocoBackend) -> None:
        # Buffers are written in place: a learner that steps under torch.inference_mode (RSL-RL)
        # must not turn them into inference tensors that a later reset cannot write.
        self._qvel_before.copy_(sim.qvel[:, 6:])
        self._command_timer -= 1
        self._sample_commands_where(self._command_timer <= 0)

    def actuate(self, sim: MujocoBackend, action: torch.Tensor) -> torch.Tensor:
        self._prev_action.copy_(self._last_action)
        self._last_action.copy_(action)
        return self._default_joints + self.action_scale * self._last_action

    # ---- observations -------------------------------------------------------------

    def _gravity(self, sim: MujocoBackend) -> torch.Tensor:
        """World gravity's direction (0, 0, -1) in the trunk's (IMU's) frame: the projected gravity."""
        return -sim.sensordata[:, self._sensor["world_up"]]

    def _above_terrain(self, z: torch.Tensor, xy: torch.Tensor) -> torch.Tensor:
        """``z`` less the terrain's height under ``xy``; on flat ground ``z`` itself, with no lookup (kernels
        fewer per call, several calls a step)."""
        return z if self._heights is None else z - self.terrain_height(xy)

    def _height(self, sim: MujocoBackend) -> torch.Tensor:
        return self._above_terrain(sim.qpos[:, 2], sim.qpos[:, :2])

    def _soles(self, sim: MujocoBackend) -> tuple[torch.Tensor, torch.Tensor]:
        """Each foot's sole: its height ``(num_worlds, 4)`` and its ``xy`` ``(num_worlds, 4, 2)``."""
        feet = sim.sensordata[:, self._feet].view(-1, len(FEET), 3)
        return feet[..., 2] - FOOT_RADIUS, feet[..., :2]

    def _feet_clearance(self, sim: MujocoBackend) -> torch.Tensor:
        """Height of each foot's sole above the terrain ``(num_worlds, 4)``."""
        return self._above_terrain(*self._soles(sim))

    def _trunk_and_feet_above_terrain(self, sim: MujocoBackend) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_height` and :meth:`_feet_clearance` from one terrain lookup of the five points (on rough
        ground ~14 kernels fewer than two lookups; the same values)."""
        if self._heights is None:
            return self._height(sim), self._feet_clearance(sim)
        z, xy = self._soles(sim)
        above = self._above_terrain(torch.cat([sim.qpos[:, 2:3], z], dim=1),
                                    torch.cat([sim.qpos[:, None, :2], xy], dim=1))
        return above[:, 0], above[:, 1:]

    def observations(self, sim: MujocoBackend) -> Obs:
        linvel = sim.sensordata[:, self._sensor["local_linvel"]]
        parts = {
            **({"linvel": linvel} if self.policy_linvel else {}),
            "gravity": self._gravity(sim),
            "gyro": sim.sensordata[:, self._sensor["gyro"]],
            "command": self._command,
            "joint_pos": sim.qpos[:, 7:] - self._default_joints,
            "joint_vel": sim.qvel[:, 6:],
            "action": self._last_action,
        }
        clean = torch.cat(list(parts.values()), dim=1)
        policy = clean
        if self.noise_scale > 0:  # one draw for all columns: a few kernels, not a few per part
            key = f"noise_width {self.noise_scale} {tuple(parts)}"  # by value: a changed scale is copied anew
            width = self.on_device(key, lambda: torch.cat([
                torch.full((value.shape[1],), self.noise_scale * NOISE_HALF_WIDTH.get(name, 0.0), dtype=torch.float64)
                for name, value in parts.items()]), sim.device, sim.dtype)
            policy = clean + width * (2 * torch.rand(
                clean.shape, generator=self._generator, device=clean.device, dtype=clean.dtype) - 1)
        height, clearance = self._trunk_and_feet_above_terrain(sim)
        privileged = [linvel, height[:, None], (clearance < 0.01).to(sim.dtype)]
        return {"policy": policy, "critic": torch.cat([clean, *privileged], dim=1)}

    # ---- rewards, termination, metrics ------------------------------------------

    def rewards(self, sim: MujocoBackend, action: torch.Tensor) -> dict[str, torch.Tensor]:
        dt = self._control_dt
        contact = self._feet_clearance(sim) < 0.01
        first_contact = contact & ~self._in_contact
        self._air_time += dt
        air_time = self._air_time * first_contact
        self._air_time *= ~contact
        self._in_contact.copy_(contact)
        s = Snapshot(
            lin_vel=sim.sensordata[:, self._sensor["local_linvel"]],
            ang_vel=sim.sensordata[:, self._sensor["gyro"]],
            gravity=self._gravity(sim),
            height=lambda: self._height(sim),
            command=self._command,
            joint_acc=(sim.qvel[:, 6:] - self._qvel_before) / dt,
            torque=sim.field("actuator_force"),
            action_change=self._last_action - self._prev_action,
            first_contact=first_contact.to(sim.dtype),
            air_time=air_time,
            terminated=lambda: self.terminated(sim),
            joint_pos=sim.qpos[:, 7:],  # (the terms that read these compute from them: none by default)
            home_joints=self._default_joints,
            soft_limits=self.on_device("soft_limits", self._soft_limits, sim.device, sim.dtype),
            pose_std=self.on_device("pose_std", POSE_STD, sim.device, sim.dtype),
            tracking_sigma=self.tracking_sigma,
            base_height_target=self.base_height_target,
        )
        terms = {name: weight * dt * REWARD_TERMS[name](s) for name, weight in self._weights.items()}
        if self.only_positive_rewards:  # lift a negative sum to 0, as its own logged term; then termination
            others = [value for name, value in terms.items() if name != "termination"]
            terms["positive_clip"] = torch.relu(-torch.stack(others).sum(0)) if others else torch.zeros_like(s.lin_vel[:, 0])
        return terms

    def terminated(self, sim: MujocoBackend) -> torch.Tensor:
        tilted = self._gravity(sim)[:, 2] > -math.cos(self.max_tilt)
        return tilted | (self._height(sim) < self.min_height) | ~torch.isfinite(sim.qpos).all(1)

    def metrics(self, sim: MujocoBackend) -> dict[str, torch.Tensor]:
        lin_vel = sim.sensordata[:, self._sensor["local_linvel"]]
        ang_vel = sim.sensordata[:, self._sensor["gyro"]]
        return {
            "lin_vel_error": (self._command[:, :2] - lin_vel[:, :2]).norm(dim=1),
            "ang_vel_error": (self._command[:, 2] - ang_vel[:, 2]).abs(),
        }

    def camera(self) -> mujoco.MjvCamera:
        return tracking_camera(body=1, distance=1.5)


@dataclass(kw_only=True)
class Go1Rough(Go1Velocity):
    """:class:`Go1Velocity` on random blocks, spawning anywhere within 4 m of the origin."""

    terrain: Literal["flat", "rough"] = "rough"
    spawn_range: float = 4.0
