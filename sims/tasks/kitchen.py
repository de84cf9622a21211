"""Kitchen: a floating effector pushes four articulated objects to their targets (D4RL's FrankaKitchen, simplified).

The benchmark of skill-based RL (SPiRL, Skill-Critic) where skills recombine:
several sub-tasks, each rewarded once, demonstrations doing them in various
orders, and an online task asking for a combination the data shows only in
pieces. The robot is reduced to what that needs: a sphere of radius 3 cm on
three slide joints (x, y, z in metres, world axes; y points at the back wall,
z up), driven by velocity servos, that moves the objects by contact only (no
gripper). Gravity is off: the effector floats, and every object sits on its one
joint, held in place by joint friction, between a stop at 0 (closed) and a stop
just past its target.

The scene is generated from :data:`FIXTURES`, one articulated object per
sub-task, named after FrankaKitchen's four "mixed" sub-tasks:

- ``microwave``: a door on a vertical hinge at its left edge, opened (to 0.7 rad)
  by pushing its free end inwards;
- ``kettle``: a kettle on a slide along y, pushed 0.2 m back onto the back burner;
- ``burner``: a stove knob on a hinge along y, turned (0.8 rad) by pushing its lever sideways;
- ``light_switch``: a lever sticking out of the wall on a hinge along x, flipped (0.6 rad) by pushing it down.

A sub-task is completed when its joint is within ``tolerance`` of its target.
Which sub-tasks have been completed in the episode is part of the simulator
state: one mocap "lamp" per sub-task on the back wall, moved into view when it
completes (so a recorded state row restores it exactly, and renders show it).
Contacts are between the effector and the objects only (``contype`` /
``conaffinity``), frictional (``condim`` 3, friction 0.5). The model compiles
on MuJoCo Warp too (a test checks it). 16 physics steps of 5 ms per control step
(``control_dt`` 0.08 s, FrankaKitchen's).

- Observation ``policy`` (14): effector position (m, world) and velocity (m/s),
  then each object's joint position (m or rad, 0 = closed) and velocity, in
  :data:`FIXTURES` order (``microwave``, ``kettle``, ``burner``, ``light_switch``).
  Which sub-tasks are done is not observed (as in FrankaKitchen); the objects
  stay where they were pushed, so their joint positions tell.
- Action (3): effector velocity commands in [-1, 1], times :data:`MAX_SPEED`
  (0.25 m/s); a velocity servo (:data:`SERVO_GAIN`, 40 N s/m) tracks them, so 0
  holds still and pushing an object applies up to 10 N.
- Reward ``sub_task``: 1 for each sub-task of ``tasks`` completed for the first
  time in the episode at this step, else 0 (a sub-task undone and redone pays
  nothing more); objects not in ``tasks`` pay nothing. With ``ordered``, a
  sub-task counts only once every sub-task before it in ``tasks`` has.
- Success: every sub-task of ``tasks`` completed; the episode terminates there.
  Truncated after ``max_episode_steps`` (280, FrankaKitchen's).
- Reset: effector at :data:`HOME` plus U(-``start_noise``, ``start_noise``) m per
  axis (0.05), at rest; every object closed.
- Rearranged kitchens: ``offsets`` moves fixtures from the places the
  demonstrations were recorded at (unobserved), the distribution shift under
  which Skill-Critic's refined low level beats SPiRL's fixed decoder
  (BENCHMARKS.md, "A rearranged kitchen").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import mujoco
import torch

from robolearn.interfaces import Obs
from sims.backend import MujocoBackend
from sims.task import Task, check_noise_scales, uniform

EFFECTOR_RADIUS = 0.03
"""m; the effector is a sphere."""
HOME = (0.0, -0.2, 0.3)
"""Where each episode starts (world, m): in front of the objects, mid-height."""
MAX_SPEED = 0.25
"""m/s commanded by an action of 1 on an axis."""
SERVO_GAIN = 40.0
"""N per m/s of velocity error: the servo force, 10 N at most when blocked at full command."""
LAMP_Z, LAMP_OFF_Z = 0.6, -0.25
"""Height of a completed sub-task's lamp on the back wall, and of a pending one (hidden in the counter)."""


@dataclass(frozen=True)
class Fixture:
    """One articulated object: a joint to move from 0 (closed) to ``target``, and where it is pushed.

    Positions are in metres, world axes; the moving body's frame is the world's
    at joint position 0, translated to ``anchor``. ``contact`` and ``push`` say
    how to operate it (what a scripted demonstrator needs): the effector centre
    touching the handle at joint position 0, relative to ``anchor``, and the
    direction that pushes the joint positive from there. Both move with the
    body (translate along ``axis`` for a slide, rotate about it for a hinge).
    """

    name: str
    joint: Literal["slide", "hinge"]
    anchor: tuple[float, float, float]
    axis: tuple[float, float, float]
    target: float
    tolerance: float
    contact: tuple[float, float, float]
    push: tuple[float, float, float]
    geoms: str
    """MJCF of the moving body's geoms (class ``part`` collides with the effector; ``decor`` does not)."""
    decor: str = ""
    """MJCF of fixed, non-colliding geoms around it (a frame, a stove, a switch plate), in world coordinates."""

    @property
    def limit(self) -> float:
        """The upper joint stop, half a tolerance past the target: reaching the stop completes the sub-task."""
        return self.target + self.tolerance / 2


R = EFFECTOR_RADIUS
FIXTURES: tuple[Fixture, ...] = (
    Fixture(  # a 0.3 x 0.2 m door, hinged at its left edge, pushed 0.24 m along it from the hinge
        name="microwave", joint="hinge", anchor=(-0.45, 0.0, 0.15), axis=(0.0, 0.0, 1.0), target=0.7,
        tolerance=0.1,
        contact=(0.24, -R, 0.0), push=(0.0, 1.0, 0.0),
        geoms='<geom class="part" type="box" pos="0.15 0.01 0" size="0.15 0.01 0.1" mass="0.5" rgba="0.2 0.2 0.25 1"/>'
              '<geom class="decor" type="capsule" fromto="0.27 -0.025 -0.06 0.27 -0.025 0.06" size="0.008" '
              'rgba="0.7 0.7 0.7 1"/>',
        decor='<geom class="decor" type="box" pos="-0.3 0.17 0.04" size="0.16 0.17 0.01" rgba="0.85 0.85 0.85 1"/>'
              '<geom class="decor" type="box" pos="-0.3 0.17 0.26" size="0.16 0.17 0.01" rgba="0.85 0.85 0.85 1"/>'),
    Fixture(  # a 12 x 10 x 15 cm box, pushed at its front face
        name="kettle", joint="slide", anchor=(0.03, 0.0, 0.0), axis=(0.0, 1.0, 0.0), target=0.2, tolerance=0.03,
        contact=(0.0, -0.05 - R, 0.07), push=(0.0, 1.0, 0.0),
        geoms='<geom class="part" type="box" pos="0 0 0.075" size="0.06 0.05 0.075" mass="0.5" rgba="0.75 0.3 0.2 1"/>'
              '<geom class="decor" type="capsule" fromto="-0.04 0 0.17 0.04 0 0.17" size="0.01" rgba="0.2 0.2 0.2 1"/>',
        decor='<geom class="decor" type="cylinder" pos="0.03 0.2 0.002" size="0.07 0.002" rgba="0.3 0.3 0.3 1"/>'),
    Fixture(  # a knob with a 7.5 cm lever pointing up, pushed sideways near its tip
        name="burner", joint="hinge", anchor=(0.27, 0.0, 0.15), axis=(0.0, 1.0, 0.0), target=0.8, tolerance=0.1,
        contact=(-0.012 - R, -0.03, 0.055), push=(1.0, 0.0, 0.0),
        geoms='<geom class="part" type="capsule" fromto="0 -0.03 0 0 -0.03 0.075" size="0.012" mass="0.05" '
              'rgba="0.1 0.1 0.1 1"/>'
              '<geom class="decor" type="cylinder" pos="0 -0.015 0" zaxis="0 1 0" size="0.025 0.015" rgba="0.8 0.8 0.8 1"/>',
        decor='<geom class="decor" type="box" pos="0.27 0.1 0.12" size="0.09 0.1 0.12" rgba="0.55 0.55 0.6 1"/>'),
    Fixture(  # a 9 cm lever sticking out of the wall, pushed down near its tip
        name="light_switch", joint="hinge", anchor=(0.45, 0.06, 0.35), axis=(1.0, 0.0, 0.0), target=0.6,
        tolerance=0.1,
        contact=(0.0, -0.07, 0.012 + R), push=(0.0, 0.0, -1.0),
        geoms='<geom class="part" type="capsule" fromto="0 0 0 0 -0.09 0" size="0.012" mass="0.05" '
              'rgba="0.9 0.9 0.6 1"/>',
        decor='<geom class="decor" type="box" pos="0.45 0.08 0.35" size="0.04 0.02 0.06" rgba="0.95 0.95 0.95 1"/>'),
)
NAMES: tuple[str, ...] = tuple(f.name for f in FIXTURES)
NUM_FIXTURES = len(FIXTURES)
OBJECT_POSITIONS = slice(6, 6 + NUM_FIXTURES)
"""Where the objects' joint positions sit in observation ``policy``."""


def kitchen_mjcf(offsets: Mapping[str, Sequence[float]] | None = None) -> str:
    """The scene: a counter and a back wall (visual only), the effector, the fixtures, one lamp per fixture.

    ``offsets`` moves fixtures (name -> (dx, dy, dz) m, world axes) with their surrounds; the lamps stay.
    """
    offsets = offsets or {}
    fixtures = "\n".join(_fixture_mjcf(f, tuple(offsets.get(f.name, (0.0, 0.0, 0.0)))) for f in FIXTURES)
    lamps = "\n".join(
        f'<body name="lamp_{f.name}" mocap="true" pos="{f.anchor[0]} 0.34 {LAMP_OFF_Z}">'
        '<geom class="decor" type="sphere" size="0.02" rgba="1 0.85 0.1 1"/></body>' for f in FIXTURES)
    x, y, z = HOME
    return f"""
<mujoco model="kitchen">
  <compiler angle="radian"/>
  <option timestep="0.005" gravity="0 0 0" integrator="implicitfast"/>
  <default>
    <joint damping="0.2" frictionloss="0.1" armature="0.002" limited="true"/>
    <geom condim="3" friction="0.5 0.005 0.0001"/>
    <default class="part"><geom contype="1" conaffinity="2"/></default>
    <default class="decor"><geom contype="0" conaffinity="0" mass="0"/></default>
  </default>
  <worldbody>
    <light pos="0 -0.5 1.5" dir="0 0.4 -1"/>
    <camera name="front" pos="0 -1.1 0.75" xyaxes="1 0 0 0 0.5 0.87"/>
    <geom class="decor" type="box" pos="0 0.05 -0.25" size="0.6 0.35 0.25" rgba="0.7 0.6 0.45 1"/>
    <geom class="decor" type="box" pos="0 0.36 0.35" size="0.6 0.01 0.35" rgba="0.9 0.9 0.88 1"/>
    <body name="effector" pos="{x} {y} {z}">
      <joint name="x" type="slide" axis="1 0 0" range="{-0.55 - x} {0.55 - x}" damping="0" frictionloss="0"/>
      <joint name="y" type="slide" axis="0 1 0" range="{-0.35 - y} {0.25 - y}" damping="0" frictionloss="0"/>
      <joint name="z" type="slide" axis="0 0 1" range="{0.06 - z} {0.6 - z}" damping="0" frictionloss="0"/>
      <geom type="sphere" size="{EFFECTOR_RADIUS}" mass="0.5" contype="2" conaffinity="1" rgba="0.9 0.3 0.2 1"/>
    </body>
    {fixtures}
    {lamps}
  </worldbody>
  <actuator>
    {"".join(f'<general joint="{j}" ctrlrange="-1 1" ctrllimited="true" gainprm="{SERVO_GAIN * MAX_SPEED}" '
             f'biastype="affine" biasprm="0 0 {-SERVO_GAIN}"/>' for j in "xyz")}
  </actuator>
</mujoco>"""


def _fixture_mjcf(f: Fixture, offset: tuple[float, ...]) -> str:
    """One fixture's jointed body at its anchor plus ``offset``, and its decor moved along in a static body."""
    anchor = tuple(a + d for a, d in zip(f.anchor, offset))
    body = (f'<body name="{f.name}" pos="{_xyz(anchor)}">'
            f'<joint name="{f.name}" type="{f.joint}" axis="{_xyz(f.axis)}" range="0 {f.limit}"/>{f.geoms}</body>')
    return body + (f'<body pos="{_xyz(offset)}">{f.decor}</body>' if f.decor and any(offset) else f.decor)


def _xyz(v: tuple[float, ...]) -> str:
    return " ".join(f"{c:g}" for c in v)


def _offset(name: str, offset: object) -> tuple[float, float, float]:
    """A validated ``offsets`` entry: a fixture name and three finite metres."""
    try:
        values = tuple(float(d) for d in offset)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        values = ()
    if name not in NAMES or len(values) != 3 or not all(math.isfinite(v) for v in values):
        raise ValueError(f"kitchen offsets: {name}: {offset!r}: give fixture names from {list(NAMES)}, "
                         "each a [dx, dy, dz] of finite metres")
    return values  # type: ignore[return-value]


@dataclass(kw_only=True)
class Kitchen(Task):
    tasks: tuple[str, ...] = NAMES
    """The sub-tasks this episode asks for (names in :data:`NAMES`); all four by default."""
    ordered: bool = False
    """Whether a sub-task counts only after every one before it in ``tasks``."""
    offsets: dict[str, Sequence[float]] = field(default_factory=dict)
    """Fixtures moved from their places (name -> (dx, dy, dz) m, world axes), with their surrounds: a kitchen
    rearranged from the one the demonstrations were recorded in (a distribution shift the observation does
    not show, as when data from one kitchen meets another)."""
    start_noise: float = 0.05
    frame_skip: int = 16
    max_episode_steps: int = 280

    def __post_init__(self) -> None:
        self.tasks = tuple(self.tasks)
        unknown = [t for t in self.tasks if t not in NAMES]
        if unknown or not self.tasks or len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"kitchen tasks={list(self.tasks)}: choose distinct names from {list(NAMES)}")
        check_noise_scales(self, "kitchen", start_noise=self.start_noise)
        self.offsets = {name: _offset(name, offset) for name, offset in dict(self.offsets).items()}
        self._index = [NAMES.index(t) for t in self.tasks]  # fixture of each listed sub-task, in list order

    def model(self) -> mujoco.MjModel:
        return mujoco.MjModel.from_xml_string(kitchen_mjcf(self.offsets))

    def reset(self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator
              ) -> tuple[torch.Tensor, torch.Tensor]:
        qpos = torch.zeros(len(ids), sim.model.nq, dtype=torch.float64, device=generator.device)
        qpos[:, :3] = uniform((len(ids), 3), -self.start_noise, self.start_noise, generator)
        return qpos, torch.zeros(len(ids), sim.model.nv, dtype=torch.float64, device=generator.device)

    def observations(self, sim: MujocoBackend) -> Obs:
        home = torch.tensor(HOME, dtype=sim.qpos.dtype, device=sim.device)
        n = NUM_FIXTURES
        return {"policy": torch.cat([sim.qpos[:, :3] + home, sim.qvel[:, :3], sim.qpos[:, 3:3 + n],
                                     sim.qvel[:, 3:3 + n]], dim=1).float()}

    def completed(self, sim: MujocoBackend) -> torch.Tensor:
        """``(num_worlds, NUM_FIXTURES)`` bool: which sub-tasks have been completed this episode (lamps on)."""
        return sim.mocap_pos[:, :, 2] > 0

    def reached(self, sim: MujocoBackend) -> torch.Tensor:
        """``(num_worlds, NUM_FIXTURES)`` bool: which objects are within tolerance of their targets now."""
        target = torch.tensor([f.target for f in FIXTURES], device=sim.device)
        tolerance = torch.tensor([f.tolerance for f in FIXTURES], device=sim.device)
        return (sim.qpos[:, 3:3 + NUM_FIXTURES] - target).abs() < tolerance

    def rewards(self, sim: MujocoBackend, action: torch.Tensor) -> dict[str, torch.Tensor]:
        """Also switches on the lamps of the sub-tasks newly completed: the reward is paid once."""
        done, reached = self.completed(sim), self.reached(sim)
        new = torch.zeros_like(done)
        for i, k in enumerate(self._index):  # in list order, so that with ``ordered`` a chain can complete at once
            allowed = ~done[:, k] & reached[:, k]
            if self.ordered:
                before = self._index[:i]
                allowed &= (done[:, before] | new[:, before]).all(1)
            new[:, k] = allowed
        if new.any():
            lamps = sim.mocap_pos.clone()
            lamps[:, :, 2] = torch.where(done | new, LAMP_Z, LAMP_OFF_Z)
            ids = new.any(1).nonzero().squeeze(1)
            sim.set_mocap_pos(ids, lamps[ids])
        return {"sub_task": new.sum(1).float()}

    def metrics(self, sim: MujocoBackend) -> dict[str, torch.Tensor]:
        """How many of ``tasks`` are done, and whether each is."""
        done = self.completed(sim).float()
        return {"sub_tasks_done": done[:, self._index].sum(1),
                **{f"done_{name}": done[:, k] for name, k in zip(self.tasks, self._index)}}

    def success(self, sim: MujocoBackend) -> torch.Tensor:
        return self.completed(sim)[:, self._index].all(1)

    def terminated(self, sim: MujocoBackend) -> torch.Tensor:
        return self.success(sim)

    def camera(self) -> str:
        return "front"
