"""Per-motor calibration and the robot YAML that holds it.

A servo reports raw ticks; the controller thinks in joint radians. Calibration
maps one to the other in software (the servos' own Homing_Offset stays 0, so
there is one place to look):

    ticks = 2048 + homing_offset + direction * rad * 4096 / (2 pi)

The robot YAML (e.g. ``configs/robots/dxl_arm.yaml``) holds where the bus is
(``port``, ``baudrate``), the MJCF the emulator plays (``model_xml``), one
entry per motor under ``motors``, optionally the control period the arm runs at
(``control_dt``, s: the emulator's lockstep advances it per goal write, and
deploy refuses a controller trained at another) and the safety layer's settings
under ``safety`` (the fields of :class:`hardware.safety.SafetyConfig`, e.g. the
``safe_pose`` to park in before torque off). Every key is validated; errors name the key.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from hardware.safety import SafetyConfig, check_safe_pose
from robolearn.checkpoint import atomic_write_bytes

from .control_table import (
    BAUD_CODES,
    BAUD_RATES,
    CENTER_TICKS,
    MODEL_NUMBERS,
    RAD_S_PER_VELOCITY_UNIT,
    TABLE,
    TICKS_PER_RAD,
    TICKS_PER_REV,
    top_baud_code,
)


class CalibrationError(ValueError):
    """A calibration or robot config that cannot be used; the message names the key."""


@dataclass(frozen=True)
class MotorCalibration:
    """One servo: its bus id, the joint it drives, and how its ticks map to radians."""

    id: int
    joint: str
    model: str = "XM430-W350"
    homing_offset: int = 0  # ticks added to the centre (2048) at joint zero
    direction: int = 1  # +1: joint and servo turn the same way; -1: mirrored
    min_position: float = -3.14  # rad, joint limit written to the servo
    max_position: float = 3.14
    velocity_limit: float = 4.8  # rad/s, written to Velocity_Limit: it bounds max_speed, not the joint's speed
    # rad/s, written to Profile_Velocity: the servo's own target moves toward each goal at most this fast, and the
    # joint follows it through its position loop, which may overshoot that speed briefly (2.4 rad/s seen at 2.0 on
    # the emulated arm; the safety layer's max_velocity watches the measured speed). None: no profile, the
    # motor's own top speed, as the training simulation has it (which models no such cap: set it above the speeds
    # the policy uses, or train with it)
    max_speed: float | None = None

    @property
    def model_number(self) -> int:
        return MODEL_NUMBERS[self.model]


@dataclass(frozen=True)
class Calibration:
    """All motors of one robot, in joint order; converts whole vectors at once."""

    motors: tuple[MotorCalibration, ...]

    def __post_init__(self) -> None:
        _validate(self.motors)

    @property
    def ids(self) -> list[int]:
        return [m.id for m in self.motors]

    @property
    def joints(self) -> list[str]:
        return [m.joint for m in self.motors]

    @property
    def _offsets(self) -> np.ndarray:
        return np.array([CENTER_TICKS + m.homing_offset for m in self.motors], dtype=np.float64)

    @property
    def _directions(self) -> np.ndarray:
        return np.array([m.direction for m in self.motors], dtype=np.float64)

    @property
    def min_positions(self) -> np.ndarray:
        return np.array([m.min_position for m in self.motors])

    @property
    def max_positions(self) -> np.ndarray:
        return np.array([m.max_position for m in self.motors])

    def to_ticks(self, positions: np.ndarray) -> np.ndarray:
        """Joint radians -> raw Goal/Present_Position ticks (int64)."""
        ticks = self._offsets + self._directions * np.asarray(positions, dtype=np.float64) * TICKS_PER_RAD
        return np.rint(ticks).astype(np.int64)

    def to_radians(self, ticks: np.ndarray) -> np.ndarray:
        """Raw position ticks -> joint radians."""
        return self._directions * (np.asarray(ticks, dtype=np.float64) - self._offsets) / TICKS_PER_RAD

    def velocity_to_rad_s(self, raw: np.ndarray) -> np.ndarray:
        """Raw Present_Velocity (0.229 rpm units) -> joint rad/s."""
        return self._directions * np.asarray(raw, dtype=np.float64) * RAD_S_PER_VELOCITY_UNIT

    @staticmethod
    def position_limit_ticks(motor: MotorCalibration) -> tuple[int, int]:
        """(Min, Max)_Position_Limit in ticks for one motor (swapped when mirrored)."""
        a, b = (
            round(CENTER_TICKS + motor.homing_offset + motor.direction * q * TICKS_PER_RAD)
            for q in (motor.min_position, motor.max_position)
        )
        return min(a, b), max(a, b)

    @staticmethod
    def velocity_limit_raw(motor: MotorCalibration) -> int:
        """Velocity_Limit in 0.229 rpm units for one motor."""
        return round(motor.velocity_limit / RAD_S_PER_VELOCITY_UNIT)

    @staticmethod
    def profile_velocity_raw(motor: MotorCalibration) -> int:
        """Profile_Velocity in 0.229 rpm units for one motor (0: no profile)."""
        return 0 if motor.max_speed is None else round(motor.max_speed / RAD_S_PER_VELOCITY_UNIT)

    @classmethod
    def from_list(cls, entries: Any, where: str = "motors") -> Calibration:
        if not isinstance(entries, list) or not entries:
            raise CalibrationError(f"{where}: expected a non-empty list of motors, got {entries!r}")
        return cls(tuple(_motor_from_dict(entry, f"{where}[{i}]") for i, entry in enumerate(entries)))

    def to_list(self) -> list[dict[str, Any]]:
        return [{k: v for k, v in asdict(m).items() if v is not None} for m in self.motors]  # (max_speed: unset)

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """The ``motors`` section of a robot YAML."""
        return RobotConfig.load(path).calibration

    def save(self, path: str | Path) -> None:
        """Write the ``motors`` section into a robot YAML, keeping its other keys."""
        path = Path(path)
        data = _read_yaml(path) if path.exists() else {}
        data["motors"] = self.to_list()
        _atomic_write_yaml(path, data)


@dataclass(frozen=True)
class RobotConfig:
    """A Dynamixel robot YAML: where the bus is, the MJCF it matches, the calibration, the safety settings."""

    calibration: Calibration
    port: str = "/dev/ttyUSB0"
    baudrate: int = 1_000_000
    model_xml: str = "sims/assets/dxl_arm.xml"  # relative paths are from the repository root
    safety: SafetyConfig | None = None  # None: SafetyConfig's defaults
    control_dt: float | None = None  # s per control step; None: the task's (arm_reach: 0.02)

    @classmethod
    def load(cls, path: str | Path) -> RobotConfig:
        data = _read_yaml(Path(path))
        allowed = {"port", "baudrate", "model_xml", "motors", "safety", "control_dt"}
        for key in data:
            if key not in allowed:
                raise CalibrationError(f"{path}: unknown key '{key}' (allowed: {sorted(allowed)})")
        if "motors" not in data:
            raise CalibrationError(f"{path}: missing key 'motors'")
        try:  # the motors' own checks (duplicate ids, limits) name the file too
            calibration = Calibration.from_list(data["motors"], f"{path}: motors")
        except CalibrationError as err:
            raise CalibrationError(str(err) if str(err).startswith(str(path)) else f"{path}: {err}") from None
        port = data.get("port", cls.port)
        baudrate = data.get("baudrate", cls.baudrate)
        model_xml = data.get("model_xml", cls.model_xml)
        if not isinstance(port, str):
            raise CalibrationError(f"{path}: 'port' must be a string, got {port!r}")
        if not isinstance(baudrate, int) or isinstance(baudrate, bool) or baudrate not in BAUD_CODES:
            raise CalibrationError(f"{path}: 'baudrate' must be one the X-series servos support "
                                   f"({', '.join(map(str, BAUD_CODES))}), got {baudrate!r}")
        for motor in calibration.motors:  # an XL330 stops at 4 Mbps: set higher it would hear nothing
            if BAUD_CODES[baudrate] > top_baud_code(motor.model_number):
                raise CalibrationError(f"{path}: 'baudrate' {baudrate} is above what motor {motor.id} "
                                       f"({motor.model}) supports, {BAUD_RATES[top_baud_code(motor.model_number)]}")
        if not isinstance(model_xml, str):
            raise CalibrationError(f"{path}: 'model_xml' must be a string, got {model_xml!r}")
        control_dt = data.get("control_dt")
        if control_dt is not None and (not isinstance(control_dt, (int, float)) or isinstance(control_dt, bool)
                                       or not math.isfinite(control_dt) or control_dt <= 0):
            raise CalibrationError(f"{path}: 'control_dt' must be a positive number of seconds, got {control_dt!r}")
        safety = None
        if data.get("safety") is not None:  # an empty `safety:` is the defaults
            try:
                safety = SafetyConfig.from_mapping(data["safety"], str(path))
                check_safe_pose(safety, calibration.min_positions, calibration.max_positions, calibration.joints)
            except ValueError as err:
                message = str(err) if str(err).startswith(str(path)) else f"{path}: {err}"
                raise CalibrationError(message) from None
        return cls(calibration, port, baudrate, model_xml, safety,
                   None if control_dt is None else float(control_dt))

    def save(self, path: str | Path) -> None:
        data: dict[str, Any] = {"port": self.port, "baudrate": self.baudrate, "model_xml": self.model_xml,
                                "motors": self.calibration.to_list()}
        if self.safety is not None:
            data["safety"] = self.safety.to_mapping()
        if self.control_dt is not None:
            data["control_dt"] = self.control_dt
        _atomic_write_yaml(Path(path), data)


def _motor_from_dict(entry: Any, where: str) -> MotorCalibration:
    if not isinstance(entry, dict):
        raise CalibrationError(f"{where}: expected a mapping, got {entry!r}")
    names = {f.name: f for f in fields(MotorCalibration)}
    for key in entry:
        if key not in names:
            raise CalibrationError(f"{where}: unknown key '{key}' (allowed: {sorted(names)})")
    for key in ("id", "joint"):
        if key not in entry:
            raise CalibrationError(f"{where}: missing key '{key}'")
    kinds = {"id": int, "joint": str, "model": str, "homing_offset": int, "direction": int,
             "min_position": float, "max_position": float, "velocity_limit": float, "max_speed": float}
    for key, value in entry.items():
        kind = kinds[key]
        if key == "max_speed" and value is None:  # (null: no profile, as when left out)
            continue
        ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
        if not ok or isinstance(value, bool):
            raise CalibrationError(f"{where}.{key}: expected {kind.__name__}, got {value!r}")
    values = {k: float(v) if kinds[k] is float else v for k, v in entry.items()}
    motor = MotorCalibration(**values)
    _validate_motor(motor, where)
    return motor


def _validate_motor(m: MotorCalibration, where: str) -> None:
    if not 0 <= m.id <= 252:
        raise CalibrationError(f"{where}.id: must be 0..252, got {m.id}")
    if m.model not in MODEL_NUMBERS:
        raise CalibrationError(f"{where}.model: unknown model '{m.model}' (known: {sorted(MODEL_NUMBERS)})")
    if m.direction not in (1, -1):
        raise CalibrationError(f"{where}.direction: must be 1 or -1, got {m.direction}")
    for key in ("min_position", "max_position", "velocity_limit"):  # .inf or .nan in YAML parse as floats
        if not math.isfinite(getattr(m, key)):
            raise CalibrationError(f"{where}.{key}: must be a finite number, got {getattr(m, key)}")
    if not m.min_position < m.max_position:
        raise CalibrationError(
            f"{where}.min_position: must be below max_position ({m.min_position} >= {m.max_position})"
        )
    limit = TABLE["Homing_Offset"]
    if not limit.minimum <= m.homing_offset <= limit.maximum:
        raise CalibrationError(f"{where}.homing_offset: out of range, got {m.homing_offset}")
    lo, hi = Calibration.position_limit_ticks(m)
    if lo < 0 or hi >= TICKS_PER_REV:
        raise CalibrationError(
            f"{where}.min_position/max_position: with homing_offset {m.homing_offset} the limits map to "
            f"ticks {lo}..{hi}, outside the servo's 0..4095 single-turn range"
        )
    raw = Calibration.velocity_limit_raw(m)
    if not 1 <= raw <= TABLE["Velocity_Limit"].maximum:  # (a rate that rounds to 0 units is no limit)
        raise CalibrationError(
            f"{where}.velocity_limit: must be in [{RAD_S_PER_VELOCITY_UNIT:.3f}, "
            f"{TABLE['Velocity_Limit'].maximum * RAD_S_PER_VELOCITY_UNIT:.2f}] rad/s, got {m.velocity_limit}"
        )
    if m.max_speed is not None and not (math.isfinite(m.max_speed) and 1 <= Calibration.profile_velocity_raw(m) <= raw):
        raise CalibrationError(  # (0 units would be no profile at all; above Velocity_Limit the servo refuses it)
            f"{where}.max_speed: must be in [{RAD_S_PER_VELOCITY_UNIT:.3f}, velocity_limit {m.velocity_limit}] rad/s "
            f"(or left out: no cap), got {m.max_speed}"
        )


def _validate(motors: tuple[MotorCalibration, ...]) -> None:
    for i, m in enumerate(motors):
        _validate_motor(m, f"motors[{i}] (id {m.id})")
    ids = [m.id for m in motors]
    joints = [m.joint for m in motors]
    for key, values in (("id", ids), ("joint", joints)):
        duplicates = sorted({str(v) for v in values if values.count(v) > 1})
        if duplicates:
            raise CalibrationError(f"motors.{key}: duplicate values {duplicates}")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise CalibrationError(f"{path}: no such robot config") from None
    except yaml.YAMLError as exc:
        raise CalibrationError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise CalibrationError(f"{path}: expected a mapping at the top level")
    return data


def _atomic_write_yaml(path: Path, data: dict[str, Any]) -> None:
    """Write to a temporary file beside ``path``, then rename: never a half-written file."""
    atomic_write_bytes(path, lambda f: f.write(yaml.safe_dump(data, sort_keys=False).encode()))
