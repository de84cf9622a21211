"""The safety layer between a controller and a robot's actuators. On by default.

Every command a :class:`~hardware.robot.Robot` sends passes :meth:`SafetyLayer.filter`:

1. NaN or inf anywhere: the whole command is rejected and the last safe one held.
2. A measured joint speed above ``max_velocity``: hold the measured position
   (a position servo then brakes) instead of following the controller.
3. Positions are clamped into the joint limits shrunk by ``position_margin``.
4. Each joint may move at most ``max_step`` rad from the previous command per
   control step (the jump limit), so a bad action cannot slam the arm.

Each intervention is counted by name (``nonfinite``, ``overspeed``,
``position_limit``, ``jump_limit``) and reported in the step's ``info``, so a
deployment log shows how often the controller was overruled. A command that
misses a limit by less than ``EVENT_TOLERANCE`` (float32 rounding of a
recorded action) is still clipped exactly, but not counted as an intervention.
The watchdog, the emergency stop and the ramp to the safe pose are the Robot's
(they need its clock and bus); their settings live here with the others.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np


def add_to_message(err: BaseException, said: str) -> None:
    """Add ``said`` to ``err``'s one-line message (where the CLI prints errors), or as a note."""
    if len(err.args) == 1 and isinstance(err.args[0], str):
        err.args = (f"{err.args[0]}; {said}",)
    else:
        err.add_note(said)


class RobotError(RuntimeError):
    """Base of the errors a robot raises; the message says what to check."""


class ConnectionLost(RobotError):
    """The link to the robot is gone (cable, power, closed port)."""


class SafetyStop(RobotError):
    """The safety layer stopped the robot; it ramped to its safe pose (if it could) and turned torque off."""


class EmergencyStop(SafetyStop):
    """Someone pressed the emergency stop: torque went off where the robot stood."""


class WatchdogStop(SafetyStop):
    """Observations went stale or the controller stopped calling for too long."""


class ServosStopped(SafetyStop):
    """The servos' own bus watchdog stopped them (nothing reached them for its window: the bus or this process
    stalled); they ignored goals until re-armed, so the run stops: re-armed where they stood, then parked."""


class ParkSkipped(SafetyStop):
    """The ramp to the safe pose was interrupted (a second Ctrl+C): torque went off where the robot stood."""


class ParkUnfinished(SafetyStop):
    """The ramp to the safe pose was given up: nothing was read for ``safety.park_blind_s`` of it (a silent bus, or
    replies all garbled: its message says which).
    Torque off was sent where the robot stood; its message says whether the servos confirmed it."""


EVENT_TOLERANCE = 1e-6
"""rad: clipping by less than this is not counted as an intervention (float32 actions are
rounded by up to ~2.4e-7 rad near 4 rad); the limits themselves are applied exactly."""
LIMIT_SLACK_RAD = 0.05
"""rad: how far outside its limits a limp joint may read at torque on (one that rests against its limit);
further out, the first goal, inside the limits, would move it there at the motor's full speed."""


def outside_limits(q: np.ndarray, low: np.ndarray, high: np.ndarray) -> list[int]:
    """The joints (indices) that read further than :data:`LIMIT_SLACK_RAD` outside their limits."""
    q = np.asarray(q, dtype=np.float64)
    return np.flatnonzero((q < np.asarray(low) - LIMIT_SLACK_RAD) | (q > np.asarray(high) + LIMIT_SLACK_RAD)).tolist()


@dataclass
class SafetyConfig:
    """Limits and timings; units are the robot's joint units (rad, rad/s, s)."""

    enabled: bool = True
    position_margin: float = 0.05  # keep commands this far inside the joint limits
    max_velocity: float = 4.0  # measured joint speed above which the robot holds
    max_step: float = 0.2  # largest change of a joint command per control step
    watchdog_s: float = 0.1  # stale observation or silent controller: hold after this long
    stop_after_s: float = 0.5  # ... and stop (ramp to the safe pose, torque off) after this long
    ramp_speed: float = 0.6  # rad/s of every ramp to a pose (start of episode, safe pose)
    park_blind_s: float = 10.0  # a park that reads nothing for this long (a silent bus) is given up: torque off where
    # the robot stands; counted since its last reading, across the ramps it starts again after re-arming stopped
    # servos; a park whose reads get through now and then (a bus that loses replies) goes on, slower, to the pose:
    # each waypoint waits out one read at most (a Dynamixel read failing after 3 retries: ~0.3 s, for 20 ms planned),
    # so at the worst 15-30 x its planned time, per ramp (the README's deploy section has a measured case)
    safe_pose: tuple[float, ...] | None = None  # where to park before torque off; None: the robot's home

    def __post_init__(self) -> None:
        for name in NUMBERS:  # NaN passes every comparison: refuse it (and inf) by name
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"safety.{name} must be a finite number, got {getattr(self, name)}")
        for name in ("max_velocity", "max_step", "watchdog_s", "stop_after_s", "ramp_speed", "park_blind_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"safety.{name} must be positive, got {getattr(self, name)}")
        if self.position_margin < 0:  # a negative margin would let commands past the joint limits
            raise ValueError(f"safety.position_margin must be 0 or more, got {self.position_margin}")
        if self.stop_after_s < self.watchdog_s:
            raise ValueError(f"safety.stop_after_s ({self.stop_after_s}) must be at least watchdog_s ({self.watchdog_s})")
        if self.safe_pose is not None and not all(math.isfinite(float(q)) for q in self.safe_pose):
            raise ValueError(f"safety.safe_pose must be finite joint positions, got {list(self.safe_pose)}")

    @classmethod
    def from_mapping(cls, data: Any, where: str = "safety") -> SafetyConfig:
        """The settings of a robot YAML's ``safety:`` mapping (the others keep their defaults), checked as
        run configs are (``robolearn.config.build_dataclass``); errors read ``<where>: safety.<key>: ...``."""
        from robolearn.config import ConfigError, build_dataclass

        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: 'safety' must be a mapping of safety settings, got {data!r}")
        try:
            return build_dataclass(cls, dict(data), "safety.")
        except (ConfigError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from None

    def to_mapping(self) -> dict[str, Any]:
        """The settings that differ from the defaults, as a robot YAML's ``safety:`` holds them."""
        default, out = SafetyConfig(), {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "safe_pose":
                if value is not None:
                    out[f.name] = [float(q) for q in value]
            elif value != getattr(default, f.name):
                out[f.name] = value
        return out

    def updated(self, overrides: Mapping[str, Any], where: str = "safety overrides") -> SafetyConfig:
        """These settings with ``overrides`` (a ``safety:`` mapping, validated as one) on top."""
        if not isinstance(overrides, Mapping):  # a CLI-style list had failed as "'list' object is not a mapping"
            raise TypeError(f"{where}: give a mapping of safety settings, e.g. {{'max_velocity': 6.0}}, got "
                            f"{overrides!r} (hardware.safety.parse_overrides makes one of 'key=value' strings)")
        return SafetyConfig.from_mapping({**self.to_mapping(), **overrides}, where)


NUMBERS = ("position_margin", "max_velocity", "max_step", "watchdog_s", "stop_after_s", "ramp_speed", "park_blind_s")
"""The SafetyConfig settings that are numbers."""


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings (a command line's ``--safety max_velocity=5.5``), values read as YAML
    (``safe_pose=[0,1.2,-2,0]``), as a mapping for :meth:`SafetyConfig.updated`."""
    import yaml

    from robolearn.config import misread_number

    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--safety {item!r}: expected KEY=VALUE, e.g. max_velocity=5.5")
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ValueError(f"--safety {item!r}: the value is not valid YAML") from None
        if said := misread_number(text):  # stop_after_s=010 had been 8 s, max_velocity=1:30 90 rad/s
            raise ValueError(f"--safety {item!r}: {said}")
    return out


def check_safe_pose(cfg: SafetyConfig, low: np.ndarray, high: np.ndarray, joints: Sequence[str] | None = None) -> None:
    """Refuse a ``safe_pose`` of the wrong length or outside the joint limits less ``position_margin``:
    the ramp clamps its goal into them, so the robot would park somewhere else than configured."""
    if cfg.safe_pose is None:
        return
    pose = np.asarray(cfg.safe_pose, dtype=np.float64)
    names = list(joints) if joints is not None else [f"joint {i}" for i in range(len(low))]
    if pose.shape != (len(low),):
        raise ValueError(f"safety.safe_pose has {pose.size} positions, the robot has {len(low)} joints {names}")
    if outside := _outside_margin(cfg, pose, low, high, names):
        name, q, said = outside
        raise ValueError(f"safety.safe_pose: {name} at {q:g} rad is outside {said}; the arm would park elsewhere")


def check_home_pose(cfg: SafetyConfig, home: np.ndarray, low: np.ndarray, high: np.ndarray,
                    joints: Sequence[str]) -> None:
    """Without a ``safe_pose``, refuse a home pose outside the joint limits less ``position_margin``: home is then
    the safe pose, and the ramp clamps its goal into the limits, so the robot would park (and start its episodes)
    somewhere else than home, each step counted as ``position_limit``."""
    if cfg.safe_pose is None and (outside := _outside_margin(cfg, np.asarray(home, float), low, high, joints)):
        name, q, said = outside
        raise ValueError(f"{name}: home ({q:g} rad) is outside {said}; with no safety.safe_pose the robot parks at "
                         "home, and the ramp would clamp it elsewhere: give limits that hold home, or a "
                         "safety.safe_pose")


def _outside_margin(cfg: SafetyConfig, pose: np.ndarray, low: np.ndarray, high: np.ndarray,
                    joints: Sequence[str]) -> tuple[str, float, str] | None:
    """The first joint of ``pose`` outside its limits less ``position_margin``: its name, position and the range
    said in words; None where every joint is inside."""
    lo, hi = np.asarray(low, float) + cfg.position_margin, np.asarray(high, float) - cfg.position_margin
    for name, q, a, b in zip(joints, pose, lo, hi):
        if not a <= q <= b:
            return name, float(q), f"its limits less position_margin ({cfg.position_margin:g}): [{a:g}, {b:g}]"
    return None


class SafetyLayer:
    """Filters joint-position commands of one robot; see the module docstring."""

    def __init__(self, low: np.ndarray, high: np.ndarray, cfg: SafetyConfig,
                 joints: Sequence[str] | None = None) -> None:
        """``joints``: the joints' names, as errors say them (default ``joint 0``, ``joint 1``...)."""
        self.cfg = cfg
        self.low = np.asarray(low, dtype=np.float64) + cfg.position_margin
        self.high = np.asarray(high, dtype=np.float64) - cfg.position_margin
        names = list(joints) if joints is not None else [f"joint {i}" for i in range(len(self.low))]
        for name, inner_low, inner_high, a, b in zip(names, self.low, self.high, np.asarray(low, dtype=np.float64),
                                                     np.asarray(high, dtype=np.float64)):
            if inner_low >= inner_high:  # (it had named neither joint nor limits)
                raise ValueError(f"safety.position_margin {cfg.position_margin:g} leaves {name} no range: its limits "
                                 f"[{a:g}, {b:g}] are {b - a:g} rad apart, not more than twice the margin; give a "
                                 f"position_margin below {(b - a) / 2:g} (or check {name}'s limits)")
        self.last_sent: np.ndarray | None = None
        self.events: Counter[str] = Counter()
        self.peak_speed = 0.0  # rad/s: the fastest measured joint speed the overspeed rule compared

    def start(self, measured: np.ndarray) -> None:
        """Begin from the measured pose, held inside the limits less ``position_margin``: the first command may move
        ``max_step`` from it (and, from a pose outside that margin, back inside it first, as any command would be)."""
        self.last_sent = np.clip(np.asarray(measured, dtype=np.float64), self.low, self.high)

    def filter(self, command: np.ndarray, measured_q: np.ndarray, measured_qd: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """The command to send instead of ``command``, and the names of the rules that fired."""
        command = np.asarray(command, dtype=np.float64)
        if not self.cfg.enabled:
            self.last_sent = command
            return command, []
        reference = self.last_sent if self.last_sent is not None else np.asarray(measured_q, dtype=np.float64)
        events = []
        speed = float(np.max(np.abs(measured_qd), initial=0.0))
        if np.isfinite(speed):  # a broken reading is the nonfinite and overspeed rules' business
            self.peak_speed = max(self.peak_speed, speed)
        if command.shape != reference.shape or not np.all(np.isfinite(command)):
            events.append("nonfinite")
            command = reference.copy()
        if np.any(np.abs(measured_qd) > self.cfg.max_velocity):
            events.append("overspeed")
            command = np.asarray(measured_q, dtype=np.float64).copy()
        clamped = np.clip(command, self.low, self.high)
        if np.any(np.abs(clamped - command) > EVENT_TOLERANCE):
            events.append("position_limit")
        stepped = np.clip(clamped, reference - self.cfg.max_step, reference + self.cfg.max_step)
        if np.any(np.abs(stepped - clamped) > EVENT_TOLERANCE) and "overspeed" not in events:
            events.append("jump_limit")
        if "overspeed" in events:
            stepped = clamped  # braking to where the joint is must not be slowed by the jump limit
        self.last_sent = stepped
        self.events.update(events)
        return stepped, events

    def ramp(self, start: np.ndarray, goal: np.ndarray, dt: float) -> np.ndarray:
        """Waypoints ``(n, joints)`` from ``start`` to ``goal`` (clamped into the limits) at ``ramp_speed``."""
        goal = np.clip(np.asarray(goal, dtype=np.float64), self.low, self.high)
        start = np.asarray(start, dtype=np.float64)
        distance = float(np.max(np.abs(goal - start), initial=0.0))
        n = max(1, int(np.ceil(distance / (self.cfg.ramp_speed * dt))))
        return start + (goal - start) * (np.arange(1, n + 1) / n)[:, None]
