"""A chain of X-series servos on a pseudo-terminal, whose joints are a MuJoCo model.

The emulator is the device side of Protocol 2.0: it opens a pty, serves the
master end in a thread and lets any host (the vendor SDK, our bus driver, the
Dynamixel Wizard) open the slave end like a U2D2 adapter. Each servo keeps its
own control table; reads come from the MuJoCo state, goals drive MuJoCo
``position`` actuators. ``PhysicsOverrides`` make it play a "reality" that
differs from the training model, ``Faults`` inject what goes wrong on real buses.

Gain mapping (position mode). The MJCF's actuator gains are the servo's factory
gains: Position_P_Gain 800 gives the MJCF kp, Position_D_Gain 0 the MJCF kv, and

    kp = kp_mjcf * P / 800            (dxl_arm: 0.0075 N m/rad per P unit)
    kv = kv_mjcf + D * KV_PER_D_UNIT  (0.0025 N m s/rad per D unit)

both times ``PhysicsOverrides.gain_scale``. Torque off zeroes both: the joint is
passive (damping and friction remain). Present_Current is the actuator force
over the XM430-W350 torque constant (4.1 N m stall at 2.3 A).

Motor. The servo is a DC motor behind a gearbox: the torque it can give falls
linearly with speed, from the stall torque (the MJCF's forcerange, 4.1 N m) at
rest to zero at the no-load speed (46 rpm = 4.82 rad/s at 12 V). Each physics
step clamps the PD force to that line for the joint's present speed, so a large
goal step moves the joint at most at the no-load speed (the bare MJCF actuator
reaches 17-27 rad/s); braking against the motion may use up to the stall torque.

Velocity profile (position mode). Profile_Velocity 0 (the default) moves the
goal at once and the joint as fast as the motor allows; a nonzero value, at
most Velocity_Limit (a larger write is refused with a data-limit error, as is a
Goal_Velocity beyond it), moves the actuator's target toward the goal at that
speed (the e-Manual's rectangular profile; Profile_Acceleration is ignored).
Velocity_Limit itself bounds only those two items: it does not slow the joint.

Timing. ``realtime=True`` advances the physics to the wall clock at each packet
(at most ``MAX_CATCH_UP_S`` at once); ``realtime=False`` advances ``step_dt``
per packet that writes Goal_Position (lockstep, deterministic): ``from_config``
and ``main`` take it from ``--step-dt``, else the robot config's ``control_dt``,
else 0.02 s. A step that is not a whole number of MuJoCo timesteps is refused,
not rounded: rounded, the physics would run at a rate the controller does not.
A servo answers after Return_Delay_Time plus the packet's wire time at the baud
rate.

Baud rate. A servo hears only a host whose port is set to its Baud_Rate (the
e-Manual's codes 0-7: 9600 bps to 4.5 Mbps), read off the pty at each packet; a
written code takes effect after the status to that write. 4.5 Mbps has no termios
constant: a host (pyserial) sets it as a custom rate, which the emulator reads,
and sets, through Linux's termios2.

Protocol. Served: PING, READ, WRITE, REBOOT, SYNC_READ/WRITE and BULK_READ/WRITE;
WRITE and REBOOT to the broadcast id are carried out by every servo, silently.
Where it departs from an X-series servo, on purpose:
- REG_WRITE/ACTION, FACTORY_RESET, CLEAR, the fast sync/bulk reads and the
  backup instructions are not modelled: sent to one servo they get an
  instruction error, broadcast they are ignored;
- a packet with a bad CRC or an impossible length is dropped without a
  status (a servo may answer a CRC error): the host sees a timeout;
- a sync or bulk packet whose parameters are not whole entries is dropped;
- the control table ends at Present_Temperature (146): the indirect items
  and the rest read and write as an access error; a write to an address no
  item has is one too, a read of one gives 0;
- goals move the MuJoCo position actuators in every Operating_Mode, and the
  position limits bound Goal_Position in every mode.
"""

from __future__ import annotations

import argparse
import array
import collections
import fcntl
import math
import os
import random
import select
import sys
import termios
import threading
import time
import traceback
import tty
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import mujoco
import numpy as np

from . import protocol as p
from .control_table import (
    BAUD_CODES,
    BAUD_RATES,
    ITEMS,
    OPERATING_MODES,
    RAD_S_PER_VELOCITY_UNIT,
    RETURN_DELAY_UNIT_S,
    TABLE,
    TABLE_SIZE,
    WATCHDOG_TRIPPED,
    WATCHDOG_UNIT_S,
    CURRENT_UNIT_A,
    rad_to_ticks,
    ticks_to_rad,
    top_baud_code,
)

if TYPE_CHECKING:
    from .calibration import RobotConfig

DEFAULT_P_GAIN = 800
KV_PER_D_UNIT = 0.0025  # N m s/rad added per Position_D_Gain unit
STALL_TORQUE = 4.1  # N m, XM430-W350 at 12 V (where the MJCF sets no forcerange)
TORQUE_PER_AMP = STALL_TORQUE / 2.3  # XM430-W350 at 12 V: stall torque over stall current
NO_LOAD_SPEED = 46 * 2 * math.pi / 60  # rad/s, XM430-W350 at 12 V (46 rpm)
DEFAULT_STEP_DT = 0.02  # s of physics per goal write in lockstep: arm_reach's control period
MAX_CATCH_UP_S = 0.5  # realtime: never simulate more than this per packet
QUIET_RESYNC_S = 0.01  # a partial packet this old was garbage
FIRMWARE_VERSION = 48
GOAL_ITEMS = ("Goal_PWM", "Goal_Current", "Goal_Velocity", "Goal_Position")
REPO_ROOT = Path(__file__).resolve().parents[2]

# termios speed constant -> baud, to hear only hosts set to a servo's baud rate.
_TERMIOS_BAUD = {getattr(termios, f"B{b}"): b for b in BAUD_RATES.values() if hasattr(termios, f"B{b}")}
# A rate with no constant (4.5 Mbps: Baud_Rate 7) is a custom one: on Linux the speed bits say BOTHER and struct
# termios2 holds the rate (as pyserial sets it). The ioctls are the generic ones pyserial uses too.
_BOTHER = 0o010000
_TCGETS2, _TCSETS2 = 0x802C542A, 0x402C542B
_TERMIOS2_CFLAG, _TERMIOS2_ISPEED, _TERMIOS2_OSPEED = 2, 9, 10  # int slots of struct termios2


def _line_baud(fd: int) -> int:
    """The baud rate the pty is set to (by the host, on the other end); 0: one this cannot tell."""
    speed = termios.tcgetattr(fd)[4]
    if speed == _BOTHER and sys.platform.startswith("linux"):
        buf = array.array("i", [0] * 64)
        try:
            fcntl.ioctl(fd, _TCGETS2, buf)
        except OSError:
            return 0
        return buf[_TERMIOS2_ISPEED] or buf[_TERMIOS2_OSPEED]  # (input 0: the output rate)
    return _TERMIOS_BAUD.get(speed, 0)


def _set_line_baud(fd: int, baud: int) -> None:
    """Set the pty to ``baud``: its termios constant, or as a custom rate (Linux) where it has none."""
    attrs = termios.tcgetattr(fd)
    speed = getattr(termios, f"B{baud}", None)
    if speed is not None:
        attrs[4] = attrs[5] = speed
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
        return
    buf = array.array("i", [0] * 64)
    fcntl.ioctl(fd, _TCGETS2, buf)
    buf[_TERMIOS2_CFLAG] = (buf[_TERMIOS2_CFLAG] & ~termios.CBAUD) | _BOTHER
    buf[_TERMIOS2_ISPEED] = buf[_TERMIOS2_OSPEED] = baud
    fcntl.ioctl(fd, _TCSETS2, buf)


@dataclass
class PhysicsOverrides:
    """How the emulated arm differs from the MJCF it loads (the "reality gap")."""

    mass_scale: float = 1.0  # body masses and inertias
    damping_scale: float = 1.0  # joint damping (back-EMF)
    friction_scale: float = 1.0  # joint frictionloss (gear friction)
    gain_scale: float = 1.0  # actuator kp and kv
    actuation_latency: float = 0.0  # s of simulated time between a goal arriving and the motor acting

    def __post_init__(self) -> None:
        # Named as both Python and `robolearn emulate` take them (a Python caller had been told of --latency)
        for name in ("mass_scale", "damping_scale", "friction_scale", "gain_scale"):  # as sim randomization refuses
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name} (--{name.replace('_', '-')}) scales the MJCF's values and must be a finite "
                                 f"number > 0, got {getattr(self, name)}")
        if not 0 <= self.actuation_latency < math.inf:
            raise ValueError(f"actuation_latency (--latency) must be a finite number >= 0 s, got {self.actuation_latency}")


_PROBABILITY = (float, 0.0, 1.0, "a probability, from 0 to 1")
_COUNT = (int, 0, math.inf, "a number of status packets, a whole number >= 0")
_SECONDS = (float, 0.0, math.inf, "seconds, a finite number >= 0")
# The Faults fields `emulate --fault NAME=VALUE` sets (hardware_alert, a mapping, only from Python): type, range, words
FAULT_FIELDS = {"drop_reply": _PROBABILITY, "corrupt_crc": _PROBABILITY, "drop_next": _COUNT, "corrupt_next": _COUNT,
                "reply_latency": _SECONDS, "silent_after": _SECONDS,
                "seed": (int, -math.inf, math.inf, "a whole number")}


def _check_fault(name: str, value: object) -> None:
    kind, low, high, words = FAULT_FIELDS[name]
    number = isinstance(value, int) if kind is int else isinstance(value, (int, float)) and math.isfinite(value)
    if isinstance(value, bool) or not number or not low <= value <= high:
        raise ValueError(f"{name} is {words}, got {value!r}")


@dataclass
class Faults:
    """Bus and servo faults; fields may be changed while the emulator runs."""

    drop_reply: float = 0.0  # probability that a status packet is never sent
    corrupt_crc: float = 0.0  # probability that a status packet's CRC is wrong
    drop_next: int = 0  # drop exactly this many coming status packets (counts down)
    corrupt_next: int = 0  # corrupt exactly this many coming status packets (counts down)
    hardware_alert: dict[int, int] = field(default_factory=dict)  # id -> Hardware_Error_Status bits
    reply_latency: float = 0.0  # s added before every status packet
    silent_after: float | None = None  # s after the emulator's first instruction packet: from then on no replies
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in FAULT_FIELDS:
            if getattr(self, name) is not None or name not in ("silent_after", "seed"):
                _check_fault(name, getattr(self, name))

    def summary(self) -> str:
        """The faults that are on, as `--fault` sets them ("" for none), for the serving line."""
        words = []
        for name in [*FAULT_FIELDS, "hardware_alert"]:
            value = getattr(self, name)
            if value is None or not value and name not in ("seed", "silent_after"):  # seed=0, silent_after=0 are on
                continue
            words.append(f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}")
            if name == "silent_after":
                words[-1] += f" (no replies from {value:g} s after the first packet)"
        return ", ".join(words)


def parse_faults(specs: Sequence[str]) -> Faults:
    """``Faults`` from `--fault NAME=VALUE` words (a later one of a name wins); a bad one is a ValueError naming it."""
    values: dict[str, object] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        name, text = name.strip(), text.strip()
        if not sep:
            raise ValueError(f"--fault {spec}: give a fault as NAME=VALUE, e.g. drop_reply=0.3")
        if name not in FAULT_FIELDS:
            raise ValueError(f"--fault {spec}: no fault {name!r}; the faults: "
                             + ", ".join(f"{n} ({kind[3]})" for n, kind in FAULT_FIELDS.items()))
        try:
            value = FAULT_FIELDS[name][0](text)
            _check_fault(name, value)
        except ValueError as err:
            got = err if str(err).startswith(name) else f"{name} is {FAULT_FIELDS[name][3]}, got {text!r}"
            raise ValueError(f"--fault {spec}: {got}") from None
        values[name] = value
    return Faults(**values)


@dataclass(frozen=True)
class ServoState:
    """What one servo is doing, for tests and inspection (joint units)."""

    joint: str
    position: float  # rad
    velocity: float  # rad/s
    goal: float  # rad, Goal_Position: what the host commanded last (or where a hold put it)
    target: float  # rad, the actuator's current target: the goal, or a velocity profile's way to it
    torque_enabled: bool
    watchdog_tripped: bool
    hardware_error: int
    kp: float
    kv: float


class _Servo:
    """One servo's control table and the MuJoCo indices of the joint it drives."""

    def __init__(self, servo_id: int, joint: str, qpos: int, dof: int, actuator: int) -> None:
        self.joint, self.qpos, self.dof, self.actuator = joint, qpos, dof, actuator
        self.table = bytearray(TABLE_SIZE)
        for item in ITEMS:
            self.set(item.name, item.default)
        self.set("ID", servo_id)
        self.watchdog_since = 0.0

    def get(self, name: str) -> int:
        item = TABLE[name]
        return item.from_bytes(self.table[item.address : item.address + item.size])

    def set(self, name: str, value: int) -> None:
        item = TABLE[name]
        self.table[item.address : item.address + item.size] = item.to_bytes(value)

    @property
    def torque(self) -> bool:
        return self.get("Torque_Enable") == 1

    @property
    def watchdog_tripped(self) -> bool:
        return self.get("Bus_Watchdog") == WATCHDOG_TRIPPED


class DynamixelEmulator:
    """Servos ``{id: joint name}`` of ``model_xml`` served on a pty; use as a context manager."""

    def __init__(
        self,
        model_xml: str | Path,
        servos: Mapping[int, str],
        model_number: int | Mapping[int, int] = 1020,
        baudrate: int = 1_000_000,
        physics: PhysicsOverrides | None = None,
        faults: Faults | None = None,
        realtime: bool = True,
        step_dt: float = DEFAULT_STEP_DT,
        no_load_speed: float = NO_LOAD_SPEED,
    ) -> None:
        """``step_dt``: s of physics per goal write when not ``realtime``; ``no_load_speed`` (rad/s) ends the
        motors' torque-speed line (``math.inf``: no speed limit, the bare MJCF actuator)."""
        if baudrate not in BAUD_CODES:
            raise ValueError(f"baudrate {baudrate} is not an X-series rate ({sorted(BAUD_CODES)})")
        if not hasattr(termios, f"B{baudrate}") and not sys.platform.startswith("linux"):
            raise ValueError(f"baudrate {baudrate} has no termios constant here; a custom rate is set on Linux only")
        if not no_load_speed > 0:
            raise ValueError(f"no_load_speed must be > 0 rad/s, got {no_load_speed}")
        self.physics = physics or PhysicsOverrides()
        self.faults = faults or Faults()
        self.realtime = realtime
        self.baudrate = baudrate
        self.no_load_speed = no_load_speed
        model_xml = Path(model_xml)
        if not model_xml.is_absolute() and not model_xml.exists():
            model_xml = REPO_ROOT / model_xml  # robot YAMLs name models relative to the repository
        self.model = mujoco.MjModel.from_xml_path(str(model_xml))
        self.data = mujoco.MjData(self.model)
        self.step_dt = step_dt
        self._lockstep_steps = 0 if realtime else lockstep_steps(step_dt, self.model.opt.timestep)
        self._apply_physics_overrides()
        self._kp0 = self.model.actuator_gainprm[:, 0].copy()
        self._kv0 = -self.model.actuator_biasprm[:, 2].copy()
        self._servos: dict[int, _Servo] = {}
        for servo_id, joint in servos.items():  # one model for all, or each servo's (an arm with another gripper)
            number = model_number[servo_id] if isinstance(model_number, Mapping) else model_number
            if BAUD_CODES[baudrate] > top_baud_code(number):
                raise ValueError(f"servo {servo_id} (model number {number}) tops out at "
                                 f"{BAUD_RATES[top_baud_code(number)]} bps, below baudrate {baudrate}")
            self._servos[servo_id] = self._make_servo(servo_id, joint, number)
        self._actuators = np.array([s.actuator for s in self._servos.values()], dtype=int)
        self._dofs = np.array([s.dof for s in self._servos.values()], dtype=int)
        m = self.model  # the MJCF's forcerange is the stall torque; one that sets none gets the XM430's
        self._stall_torque = np.where(m.actuator_forcelimited[self._actuators], m.actuator_forcerange[self._actuators, 1],
                                      STALL_TORQUE)
        m.actuator_forcelimited[self._actuators] = 1
        self._target = self.data.ctrl.copy()  # the goal each actuator's velocity profile moves toward (rad)
        self._profile_speed = np.full(m.nu, np.inf)  # rad/s per actuator; inf: Profile_Velocity 0, no profile
        self._pending: collections.deque[tuple[float, int, float]] = collections.deque()
        self._limit_torque()
        mujoco.mj_forward(self.model, self.data)
        for servo in self._servos.values():
            self._hold(servo)
        self._rng = random.Random(self.faults.seed)
        self._first_packet_at: float | None = None  # when the first instruction packet came (Faults.silent_after)
        self._lock = threading.Lock()
        self._parser = p.PacketParser()
        self._thread: threading.Thread | None = None
        self._master = self._slave = self._wake_r = self._wake_w = -1
        self._stop = threading.Event()
        self._disconnect = threading.Event()
        self._disconnected = threading.Event()
        self._t0 = 0.0
        self.packets = 0  # instruction packets handled
        self.replies = 0  # status packets sent
        self.dropped = 0  # status packets dropped by the fault
        self.corrupted = 0  # status packets sent with a bad CRC

    @classmethod
    def from_config(cls, config: RobotConfig | str | Path, *, lockstep: bool = False, step_dt: float | None = None,
                    physics: PhysicsOverrides | None = None, faults: Faults | None = None) -> DynamixelEmulator:
        """The servos of a robot config (a ``RobotConfig``, or as ``deploy`` takes it: a YAML path or a name in
        ``configs/robots/``). Lockstep advances ``step_dt`` per goal write, by default the config's
        ``control_dt`` (else ``DEFAULT_STEP_DT``): the period the arm's controller writes goals at."""
        if step_dt is not None and not lockstep:  # ValueError, as robolearn emulate reports refused settings
            raise ValueError("--step-dt sets the physics per goal write in lockstep: add --lockstep")
        if isinstance(config, (str, Path)):  # ('dxl_arm' had failed as "'str' object has no attribute 'calibration'")
            from hardware.dxl_arm import load_robot_config

            config = load_robot_config(config)
        motors = config.calibration.motors
        period = step_dt if step_dt is not None else config.control_dt or DEFAULT_STEP_DT
        return cls(config.model_xml, {m.id: m.joint for m in motors}, {m.id: m.model_number for m in motors},
                   config.baudrate,
                   physics=physics, faults=faults, realtime=not lockstep, step_dt=period)

    # ----------------------------------------------------------------- setup

    def _apply_physics_overrides(self) -> None:
        m, o = self.model, self.physics
        m.body_mass[:] *= o.mass_scale
        m.body_inertia[:] *= o.mass_scale
        m.dof_damping[:] *= o.damping_scale
        m.dof_frictionloss[:] *= o.friction_scale

    def _make_servo(self, servo_id: int, joint: str, model_number: int) -> _Servo:
        joint_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, joint)
        if joint_id < 0:
            raise ValueError(f"servo {servo_id}: joint '{joint}' is not in the model")
        actuators = [a for a in range(self.model.nu) if self.model.actuator_trnid[a, 0] == joint_id]
        if not actuators:
            raise ValueError(f"servo {servo_id}: joint '{joint}' has no actuator in the model")
        servo = _Servo(
            servo_id, joint, int(self.model.jnt_qposadr[joint_id]), int(self.model.jnt_dofadr[joint_id]), actuators[0]
        )
        servo.set("Model_Number", model_number)
        servo.set("Firmware_Version", FIRMWARE_VERSION)
        servo.set("Baud_Rate", BAUD_CODES[self.baudrate])
        if self.model.jnt_limited[joint_id]:
            low, high = self.model.jnt_range[joint_id]
            servo.set("Min_Position_Limit", max(0, rad_to_ticks(low)))
            servo.set("Max_Position_Limit", min(4095, rad_to_ticks(high)))
        return servo

    # ------------------------------------------------------------- lifecycle

    @property
    def running(self) -> bool:
        """Whether the serving thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def port(self) -> str:
        """The slave path a host opens, e.g. ``/dev/pts/5``."""
        if self._slave < 0:
            raise RuntimeError("emulator not started: call start() or use it as a context manager")
        return os.ttyname(self._slave)

    def start(self) -> DynamixelEmulator:
        """Open the pty and serve it in a background thread; an emulator already started is left as it is
        (``with emulator.start():`` had opened a second pty and left the first one's thread serving it)."""
        if self._thread is not None:
            return self
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        _set_line_baud(self._slave, self.baudrate)
        self._wake_r, self._wake_w = os.pipe()
        self._t0 = time.monotonic() - self.data.time
        now = time.monotonic()
        for servo in self._servos.values():
            servo.watchdog_since = now
        self._thread = threading.Thread(target=self._serve, name="dxl-emulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the pty; safe to call twice."""
        if self._thread is not None:
            self._stop.set()
            os.write(self._wake_w, b"s")
            self._thread.join(timeout=5)
            self._thread = None
        for fd in (self._master, self._slave, self._wake_r, self._wake_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._master = self._slave = self._wake_r = self._wake_w = -1

    def disconnect(self) -> None:
        """Close the pty master mid-run, as if the USB cable were pulled."""
        if self._thread is None:
            return
        self._disconnect.set()
        os.write(self._wake_w, b"d")
        self._disconnected.wait(timeout=5)

    def __enter__(self) -> DynamixelEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --------------------------------------------------------- test helpers

    def set_joint_positions(self, positions: Mapping[int, float]) -> None:
        """Place joints (by servo id) at rest at these angles (rad) and hold them there."""
        with self._lock:
            for servo_id, q in positions.items():
                servo = self._servos[servo_id]
                self.data.qpos[servo.qpos] = q
                self.data.qvel[servo.dof] = 0.0
                servo.set("Goal_Position", rad_to_ticks(q) + servo.get("Homing_Offset"))
                self.data.ctrl[servo.actuator] = self._target[servo.actuator] = q
            self._limit_torque()
            mujoco.mj_forward(self.model, self.data)

    def trip_watchdogs(self) -> None:
        """As if nothing had reached the servos for their Bus_Watchdog window: each armed, torqued one trips
        and holds where it stands, ignoring goals until its watchdog is cleared (a stalled bus, in a test)."""
        with self._lock:
            self._check_watchdogs(float("inf"))

    def reboot(self, servo_id: int) -> None:
        """As if the servo's power dipped: it reboots, RAM back to defaults (torque off, watchdog off), and goes
        limp where it stands while the others go on (a brown-out, in a test)."""
        with self._lock:
            self._reboot(self._servos[servo_id])

    def state(self) -> dict[int, ServoState]:
        """A snapshot of every servo, by id."""
        with self._lock:
            return {
                servo_id: ServoState(
                    joint=s.joint,
                    position=float(self.data.qpos[s.qpos]),
                    velocity=float(self.data.qvel[s.dof]),
                    goal=ticks_to_rad(s.get("Goal_Position") - s.get("Homing_Offset")),
                    target=float(self.data.ctrl[s.actuator]),
                    torque_enabled=s.torque,
                    watchdog_tripped=s.watchdog_tripped,
                    hardware_error=s.get("Hardware_Error_Status"),
                    kp=float(self.model.actuator_gainprm[s.actuator, 0]),
                    kv=float(-self.model.actuator_biasprm[s.actuator, 2]),
                )
                for servo_id, s in self._servos.items()
            }

    def register(self, servo_id: int, name: str) -> int:
        """One control-table value as the servo would report it."""
        with self._lock:
            self._refresh(self._servos[servo_id])
            return self._servos[servo_id].get(name)

    @property
    def parse_errors(self) -> int:
        """Instruction packets rejected for a bad CRC or length."""
        return self._parser.crc_errors + self._parser.length_errors

    # ------------------------------------------------------------- serving

    def _serve(self) -> None:
        last_rx = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            deadline = self._next_deadline(last_rx)
            timeout = None if deadline is None else max(0.0, deadline - now)
            readable, _, _ = select.select([self._master, self._wake_r], [], [], timeout)
            if self._wake_r in readable:
                os.read(self._wake_r, 64)
                if self._disconnect.is_set():
                    os.close(self._master)
                    self._master = -1
                    self._disconnected.set()
                    return
                continue
            packets: list[p.Packet] = []
            if self._master in readable:
                try:
                    data = os.read(self._master, 4096)
                except OSError:
                    return
                last_rx = time.monotonic()
                packets = self._parser.feed(data)
            elif self._parser.buffer and time.monotonic() - last_rx >= QUIET_RESYNC_S:
                packets = self._parser.timeout()
            baud = _line_baud(self._master)
            with self._lock:
                self._advance_realtime()
                self._check_watchdogs(time.monotonic())
            for packet in packets:
                try:
                    self._handle(packet, baud)
                except Exception:  # an emulator bug must not silence the whole bus: report it, keep serving
                    traceback.print_exc()

    def _next_deadline(self, last_rx: float) -> float | None:
        """When the serve loop must wake without input: a watchdog or a stale partial packet."""
        deadlines = [
            s.watchdog_since + s.get("Bus_Watchdog") * WATCHDOG_UNIT_S
            for s in self._servos.values()
            if s.torque and 0 < s.get("Bus_Watchdog") < WATCHDOG_TRIPPED
        ]
        if self._parser.buffer:
            deadlines.append(last_rx + QUIET_RESYNC_S)
        return min(deadlines, default=None)

    def _handle(self, packet: p.Packet, baud: int) -> None:
        """Run one instruction packet and send the replies it asks for."""
        if packet.error is not None:
            return  # a status packet: another device's reply
        with self._lock:
            self.packets += 1
            now = time.monotonic()
            if self._first_packet_at is None:
                self._first_packet_at = now
            listeners = {
                i: s for i, s in self._servos.items() if BAUD_RATES.get(s.get("Baud_Rate")) == baud
            }
            for servo_id, s in listeners.items():
                if packet.id in (servo_id, p.BROADCAST_ID):
                    s.watchdog_since = now
            self._apply_alerts()
            replies = [r for r in self._dispatch(packet, listeners) if r is not None]
        self._send(replies)

    def _send(self, replies: list[tuple[int, bytes]]) -> None:
        """Write replies in order, each after its servo's return delay and its wire time."""
        faults = self.faults
        for delay_units, packet in replies:
            if faults.silent_after is not None and time.monotonic() - self._first_packet_at >= faults.silent_after:
                self.dropped += 1  # the bus has gone quiet
                continue
            if faults.drop_next > 0 or self._rng.random() < faults.drop_reply:
                faults.drop_next = max(0, faults.drop_next - 1)
                self.dropped += 1
                continue
            if faults.corrupt_next > 0 or self._rng.random() < faults.corrupt_crc:
                faults.corrupt_next = max(0, faults.corrupt_next - 1)
                packet = packet[:-1] + bytes([packet[-1] ^ 0xFF])
                self.corrupted += 1
            wire = len(packet) * 10 / self.baudrate
            _wait(delay_units * RETURN_DELAY_UNIT_S + faults.reply_latency + wire)
            # counted before the host can read it: counted after, a host that had read the reply could look at the
            # count before this thread, preempted between the two, counted it (a test's count then came out one short)
            self.replies += 1
            try:
                view = memoryview(packet)
                while view:
                    view = view[os.write(self._master, view) :]
            except OSError:
                self.replies -= 1  # (the line is gone: never sent)
                return

    # ----------------------------------------------------------- instructions

    def _dispatch(self, packet: p.Packet, servos: dict[int, _Servo]) -> list[tuple[int, bytes] | None]:
        inst, params, broadcast = packet.instruction, packet.params, packet.id == p.BROADCAST_ID
        if inst == p.PING:
            targets = sorted(servos) if broadcast else [packet.id] if packet.id in servos else []
            return [self._status(servos[i], 0, self._ping_data(servos[i]), always=True) for i in targets]
        if inst == p.SYNC_READ and broadcast:
            if len(params) < 4:
                return []
            address, length = _u16(params, 0), _u16(params, 2)
            return [self._read(servos[i], address, length) for i in params[4:] if i in servos]
        if inst == p.BULK_READ and broadcast:
            if len(params) % 5:  # not whole (id, address, length) entries: framing lost, no entry is trusted
                return []
            entries = [params[k : k + 5] for k in range(0, len(params), 5)]
            return [self._read(servos[e[0]], _u16(e, 1), _u16(e, 3)) for e in entries if e[0] in servos]
        if inst == p.SYNC_WRITE and broadcast:
            if len(params) < 4:
                return []
            address, length = _u16(params, 0), _u16(params, 2)
            stride, goals = length + 1, False
            if (len(params) - 4) % stride:  # not whole (id, data) entries: framing lost, nothing is written
                return []
            for k in range(4, len(params), stride):
                if params[k] in servos:
                    goals |= self._write(servos[params[k]], address, params[k + 1 : k + stride])[1]
            self._lockstep(goals)
            return []
        if inst == p.BULK_WRITE and broadcast:
            entries, k = [], 0
            while k + 5 <= len(params) and k + 5 + _u16(params, k + 3) <= len(params):
                length = _u16(params, k + 3)
                entries.append((params[k], _u16(params, k + 1), params[k + 5 : k + 5 + length]))
                k += 5 + length
            if k != len(params):  # an entry cut short: framing lost, nothing is written
                return []
            goals = False
            for servo_id, address, data in entries:
                if servo_id in servos:
                    goals |= self._write(servos[servo_id], address, data)[1]
            self._lockstep(goals)
            return []
        if broadcast and inst in (p.WRITE, p.REBOOT):  # every servo carries it out, none answers
            goals = False
            for servo in list(servos.values()):
                if inst == p.REBOOT:
                    self._reboot(servo)
                elif len(params) >= 3:
                    goals |= self._write(servo, _u16(params, 0), params[2:])[1]
            self._lockstep(goals)
            return []
        if broadcast or packet.id not in servos:
            return []
        servo = servos[packet.id]
        if inst == p.READ:
            if len(params) != 4:
                return [self._status(servo, p.ERR_DATA_LENGTH, b"", level=1)]
            return [self._read(servo, _u16(params, 0), _u16(params, 2))]
        if inst == p.WRITE:
            if len(params) < 3:
                return [self._status(servo, p.ERR_DATA_LENGTH, b"")]
            error, goals = self._write(servo, _u16(params, 0), params[2:])
            self._lockstep(goals)
            return [self._status(servo, error, b"")]
        if inst == p.REBOOT:
            reply = self._status(servo, 0, b"")
            self._reboot(servo)
            return [reply]
        return [self._status(servo, p.ERR_INSTRUCTION, b"")]

    def _status(
        self, servo: _Servo, error: int, data: bytes, level: int = 2, always: bool = False
    ) -> tuple[int, bytes] | None:
        """(return delay, status packet), or None when Status_Return_Level is below ``level``."""
        if not always and servo.get("Status_Return_Level") < level:
            return None
        if servo.get("Hardware_Error_Status"):
            error |= p.ERR_ALERT
        return (servo.get("Return_Delay_Time"), p.encode_status(servo.get("ID"), error, data))

    def _ping_data(self, servo: _Servo) -> bytes:
        return TABLE["Model_Number"].to_bytes(servo.get("Model_Number")) + bytes([servo.get("Firmware_Version")])

    def _read(self, servo: _Servo, address: int, length: int) -> tuple[int, bytes] | None:
        if length == 0 or address + length > TABLE_SIZE:
            return self._status(servo, p.ERR_ACCESS, b"", level=1)
        self._refresh(servo)
        return self._status(servo, 0, bytes(servo.table[address : address + length]), level=1)

    def _write(self, servo: _Servo, address: int, data: bytes) -> tuple[int, bool]:
        """Validate then apply a write; returns (status error, whether a goal position was written)."""
        end = address + len(data)
        if not data or end > TABLE_SIZE:
            return p.ERR_ACCESS, False
        items = [i for i in ITEMS if i.address < end and address < i.address + i.size]
        if sum(min(end, i.address + i.size) - max(address, i.address) for i in items) < len(data):
            return p.ERR_ACCESS, False  # a byte at an address no item has (e-Manual: "not been defined")
        values = {}
        for item in items:
            if item.address < address or item.address + item.size > end:
                return p.ERR_DATA_LENGTH, False
            if not item.writable or (item.eeprom and servo.torque):
                return p.ERR_ACCESS, False
            offset = item.address - address
            value = item.from_bytes(data[offset : offset + item.size])
            if not item.minimum <= value <= item.maximum:
                return p.ERR_DATA_RANGE, False
            if item.name == "Operating_Mode" and value not in OPERATING_MODES:  # (2 and 6..15 are no mode)
                return p.ERR_DATA_RANGE, False
            if item.name == "Baud_Rate" and value > top_baud_code(servo.get("Model_Number")):  # XL330s stop at 6
                return p.ERR_DATA_RANGE, False
            if item.name in GOAL_ITEMS and servo.watchdog_tripped:
                return p.ERR_DATA_RANGE, False
            if item.name == "Torque_Enable" and value and servo.get("Hardware_Error_Status") & servo.get("Shutdown"):
                continue  # after a shutdown torque stays off until a reboot (the status's alert bit says why)
            if item.name == "Goal_Position":
                ticks = value - servo.get("Homing_Offset")
                if not servo.get("Min_Position_Limit") <= ticks <= servo.get("Max_Position_Limit"):
                    return p.ERR_DATA_LIMIT, False
            if item.name in ("Profile_Velocity", "Goal_Velocity"):  # Velocity_Limit bounds these two, no more
                if abs(value) > values.get("Velocity_Limit", servo.get("Velocity_Limit")):
                    return p.ERR_DATA_LIMIT, False
            if item.name == "ID" and self._servos.get(value, servo) is not servo:  # another servo's id: two
                return p.ERR_DATA_RANGE, False  # would answer every packet to it (a real bus garbles); refused
            values[item.name] = value
        for name, value in values.items():
            self._apply(servo, name, value)
        return 0, "Goal_Position" in values

    def _apply(self, servo: _Servo, name: str, value: int) -> None:
        """Store one validated value and do what the servo does when it changes."""
        servo.set(name, value)
        if name == "ID" and value != (old := next(i for i, s in self._servos.items() if s is servo)):
            self._servos[value] = self._servos.pop(old)
        elif name == "Goal_Position":
            self._command(servo, ticks_to_rad(value - servo.get("Homing_Offset")))
        elif name in ("Torque_Enable", "Position_P_Gain", "Position_D_Gain"):
            self._set_gains(servo)
            if name == "Torque_Enable" and value:  # (off keeps the target: the state's goal says where it parked)
                self.data.ctrl[servo.actuator] = self.data.qpos[servo.qpos]  # a profile starts where the joint is
                self._command(servo, ticks_to_rad(servo.get("Goal_Position") - servo.get("Homing_Offset")))
        elif name in ("Profile_Velocity", "Velocity_Limit"):
            self._set_profile(servo)
        elif name == "Bus_Watchdog":
            servo.watchdog_since = time.monotonic()

    def _reboot(self, servo: _Servo) -> None:
        """RAM back to defaults (torque off, errors cleared); EEPROM kept."""
        for item in ITEMS:
            if not item.eeprom:
                servo.set(item.name, item.default)
        self._set_profile(servo)
        self._hold(servo)

    def _apply_alerts(self) -> None:
        """Latch the configured hardware faults; the shutdown ones also cut torque."""
        for servo_id, bits in self.faults.hardware_alert.items():
            servo = self._servos.get(servo_id)
            if servo is None or not bits:
                continue
            servo.set("Hardware_Error_Status", servo.get("Hardware_Error_Status") | bits)
            if bits & servo.get("Shutdown") and servo.torque:
                servo.set("Torque_Enable", 0)
                self._set_gains(servo)

    # --------------------------------------------------------------- physics

    def _set_gains(self, servo: _Servo) -> None:
        a, scale = servo.actuator, self.physics.gain_scale if servo.torque else 0.0
        kp = self._kp0[a] * servo.get("Position_P_Gain") / DEFAULT_P_GAIN * scale
        kv = (self._kv0[a] + servo.get("Position_D_Gain") * KV_PER_D_UNIT) * scale
        self.model.actuator_gainprm[a, 0] = kp
        self.model.actuator_biasprm[a, 1] = -kp
        self.model.actuator_biasprm[a, 2] = -kv

    def _set_profile(self, servo: _Servo) -> None:
        """The speed the actuator's target moves at: Profile_Velocity clipped to Velocity_Limit; 0 is no profile."""
        units = min(servo.get("Profile_Velocity"), servo.get("Velocity_Limit"))
        self._profile_speed[servo.actuator] = units * RAD_S_PER_VELOCITY_UNIT if units > 0 else np.inf

    def _command(self, servo: _Servo, q: float) -> None:
        """Send a goal angle to the actuator, after the configured actuation latency."""
        if self.physics.actuation_latency > 0:
            self._pending.append((self.data.time + self.physics.actuation_latency, servo.actuator, q))
        else:
            self._set_target(servo.actuator, q)

    def _set_target(self, actuator: int, q: float) -> None:
        """A new goal: the actuator takes it at once, or its velocity profile moves toward it step by step."""
        self._target[actuator] = q
        if self._profile_speed[actuator] == np.inf:
            self.data.ctrl[actuator] = q

    def _hold(self, servo: _Servo) -> None:
        """Goal := present position, gains from the table: the servo stays where it is."""
        q = float(self.data.qpos[servo.qpos])
        servo.set("Goal_Position", rad_to_ticks(q) + servo.get("Homing_Offset"))
        self._pending = collections.deque(x for x in self._pending if x[1] != servo.actuator)
        self.data.ctrl[servo.actuator] = self._target[servo.actuator] = q
        self._set_gains(servo)

    def _limit_torque(self) -> None:
        """Clamp each servo's force to its DC motor's torque-speed line at the joint's present speed.

        At full voltage a DC motor gives tau_stall * (1 - qd / w0) forward and -tau_stall * (1 + qd / w0)
        in reverse (``motor_torque_bounds``). The braking side (force against the motion) would exceed the
        stall torque: it is capped there, as the servo's current limit does; a joint driven past w0 (by
        gravity) gets a negative upper bound, so the motor can only brake it. Why forcerange: MuJoCo
        already clamps the position actuator's PD force to it, so updating it per step keeps MuJoCo's PD
        law (and its implicit damping) untouched, and actuator_force, read as Present_Current, is the
        clamped torque. The speed is the step's starting one; that explicit update is stable while
        timestep * tau_stall / (w0 * inertia) < 1 (under 0.15 for dxl_arm, armature 0.012 kg m^2).
        """
        low, high = motor_torque_bounds(self.data.qvel[self._dofs], self._stall_torque, self.no_load_speed)
        self.model.actuator_forcerange[self._actuators, 0] = low
        self.model.actuator_forcerange[self._actuators, 1] = high

    def _step(self, steps: int) -> None:
        """Advance ``steps`` MuJoCo timesteps: due latent goals, velocity profiles, motor limits, physics."""
        dt = self.model.opt.timestep
        for _ in range(steps):
            while self._pending and self._pending[0][0] <= self.data.time:
                _, actuator, q = self._pending.popleft()
                self._set_target(actuator, q)
            ctrl, reach = self.data.ctrl, self._profile_speed * dt  # inf where no profile runs
            ctrl += np.clip(self._target - ctrl, -reach, reach)
            self._limit_torque()
            mujoco.mj_step(self.model, self.data)

    def _advance_realtime(self) -> None:
        if not self.realtime:
            return
        lag = time.monotonic() - self._t0 - self.data.time
        if lag > MAX_CATCH_UP_S:
            self._t0 += lag - MAX_CATCH_UP_S
            lag = MAX_CATCH_UP_S
        self._step(int(lag / self.model.opt.timestep))

    def _lockstep(self, goals_written: bool) -> None:
        if goals_written and not self.realtime:
            self._step(self._lockstep_steps)

    def _check_watchdogs(self, now: float) -> None:
        for servo in self._servos.values():
            window = servo.get("Bus_Watchdog")
            if servo.torque and 0 < window < WATCHDOG_TRIPPED and now - servo.watchdog_since > window * WATCHDOG_UNIT_S:
                servo.set("Bus_Watchdog", WATCHDOG_TRIPPED)
                self._hold(servo)

    def _refresh(self, servo: _Servo) -> None:
        """Present_* items from the MuJoCo state."""
        q, qd = float(self.data.qpos[servo.qpos]), float(self.data.qvel[servo.dof])
        velocity = _saturate(round(qd / RAD_S_PER_VELOCITY_UNIT), TABLE["Present_Velocity"].size)
        force = float(self.data.actuator_force[servo.actuator])
        servo.set("Present_Position", rad_to_ticks(q) + servo.get("Homing_Offset"))
        servo.set("Position_Trajectory", rad_to_ticks(float(self.data.ctrl[servo.actuator])) + servo.get("Homing_Offset"))
        servo.set("Present_Velocity", velocity)
        servo.set("Present_Current", _saturate(round(force / TORQUE_PER_AMP / CURRENT_UNIT_A), TABLE["Present_Current"].size))
        servo.set("Moving", int(abs(velocity) > servo.get("Moving_Threshold")))
        servo.set("Realtime_Tick", int(self.data.time * 1000) % 32768)


def motor_torque_bounds(velocity: np.ndarray | float, stall_torque: np.ndarray | float,
                        no_load_speed: float) -> tuple[np.ndarray, np.ndarray]:
    """(lowest, highest) torque a DC motor gives at ``velocity``: the line from the stall torque at rest to
    zero at the no-load speed, each side capped at the stall torque (braking, or driven past no-load)."""
    ratio = np.asarray(velocity, dtype=np.float64) / no_load_speed
    return -stall_torque * np.clip(1 + ratio, -1, 1), stall_torque * np.clip(1 - ratio, -1, 1)


def lockstep_steps(step_dt: float, timestep: float) -> int:
    """MuJoCo timesteps per lockstep goal write. Refuses a non-positive or non-finite ``step_dt`` and one that
    is not a whole number of timesteps: rounded, the physics would run at a rate the controller does not."""
    if not (math.isfinite(step_dt) and step_dt > 0):
        raise ValueError(f"the lockstep step (--step-dt) must be a positive, finite number of seconds, got {step_dt}")
    steps = round(step_dt / timestep)
    if steps < 1 or abs(steps * timestep - step_dt) > 1e-9:
        near = sorted({max(1, math.floor(step_dt / timestep)), max(1, math.ceil(step_dt / timestep))})
        raise ValueError(f"a lockstep step of {step_dt} s is not a whole number of the model's {timestep:g} s "
                         f"timesteps: set --step-dt or the robot config's control_dt to one, e.g. "
                         f"{' or '.join(f'{n * timestep:g}' for n in near)} s")
    return steps


def _saturate(value: int, size: int) -> int:
    """Clip a reading to what a signed field of ``size`` bytes holds, as the servo's own sensor would."""
    limit = (1 << (8 * size - 1)) - 1
    return max(-limit, min(limit, value))


def _u16(data: bytes, offset: int) -> int:
    return data[offset] | (data[offset + 1] << 8)


def _wait(seconds: float) -> None:
    """Wait ``seconds`` to within a few microseconds, as a servo's reply timing is: ``time.sleep`` alone
    overshoots sub-millisecond waits by up to a millisecond on a loaded machine, which would hide a
    Return_Delay_Time of 0.5 ms. Sleeps all but the last millisecond, then spins."""
    deadline = time.perf_counter() + seconds
    if seconds > 2e-3:
        time.sleep(seconds - 1e-3)
    while time.perf_counter() < deadline:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the robot of a robot YAML on a pty until Ctrl+C."""
    from .calibration import RobotConfig

    parser = argparse.ArgumentParser(prog="python3 -m hardware.dynamixel.emulator", description=main.__doc__)
    parser.add_argument("--robot", default=str(REPO_ROOT / "configs/robots/dxl_arm.yaml"), help="robot YAML")
    parser.add_argument("--lockstep", action="store_true", help="advance physics per goal write, not wall clock")
    parser.add_argument("--step-dt", type=float, metavar="SECONDS",
                        help="with --lockstep: physics per goal write; default: the robot config's control_dt, else "
                             f"{DEFAULT_STEP_DT}")
    reality = parser.add_argument_group("reality", "how the emulated arm differs from its MJCF (the sim-to-real gap)")
    for name in ("mass_scale", "damping_scale", "friction_scale", "gain_scale"):
        reality.add_argument(f"--{name.replace('_', '-')}", type=float, default=1.0)
    reality.add_argument("--latency", type=float, default=0.0, help="actuation latency (s)")
    parser.add_argument("--fault", action="append", default=[], metavar="NAME=VALUE",
                        help="a bus fault (repeatable), a Faults field: " + ", ".join(FAULT_FIELDS))
    args = parser.parse_args(argv)
    faults = parse_faults(args.fault)
    fault_words = f"; faults: {faults.summary()}" if faults.summary() else ""
    config = RobotConfig.load(args.robot)
    physics = PhysicsOverrides(args.mass_scale, args.damping_scale, args.friction_scale, args.gain_scale, args.latency)
    ids = sorted(config.calibration.ids)
    span = f"{ids[0]}-{ids[-1]}" if ids == list(range(ids[0], ids[-1] + 1)) else ",".join(map(str, ids))
    try:  # around the print too: a Ctrl+C as soon as the line is read may land before the wait
        with DynamixelEmulator.from_config(config, lockstep=args.lockstep, step_dt=args.step_dt,
                                           physics=physics, faults=faults) as emulator:
            timing = f"; lockstep: {emulator.step_dt:g} s of physics per goal write" if args.lockstep else ""
            print(f"serving Dynamixel arm on {emulator.port} (ids {span}, {config.baudrate} baud){timing}"
                  f"{fault_words}; Ctrl+C to stop", flush=True)
            _wait_for_ctrl_c()
    except KeyboardInterrupt:
        pass
    return 0


def _wait_for_ctrl_c() -> None:
    """Block until Ctrl+C (a test replaces it, so that a setting that should be refused cannot hang it)."""
    threading.Event().wait()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ValueError as err:  # a refused setting (--step-dt, a scale): its message, not a traceback
        sys.exit(f"error: {err}")
