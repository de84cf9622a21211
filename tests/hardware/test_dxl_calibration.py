"""Calibration: radians <-> ticks through offset and direction, YAML round trip, clear errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from hardware.dynamixel.calibration import Calibration, CalibrationError, MotorCalibration, RobotConfig
from hardware.dynamixel.control_table import RAD_S_PER_VELOCITY_UNIT

ARM_YAML = Path(__file__).resolve().parents[2] / "configs/robots/dxl_arm.yaml"


def two_motors() -> Calibration:
    return Calibration((
        MotorCalibration(1, "j1", homing_offset=100, direction=1, min_position=-1.0, max_position=1.0),
        MotorCalibration(2, "j2", homing_offset=-50, direction=-1, min_position=-0.5, max_position=1.5),
    ))


def test_offset_and_direction_apply_both_ways() -> None:
    cal = two_motors()
    ticks = cal.to_ticks(np.array([0.0, 0.0]))
    assert ticks.tolist() == [2148, 1998]
    ticks = cal.to_ticks(np.array([math.pi / 2, math.pi / 2]))
    assert ticks.tolist() == [2148 + 1024, 1998 - 1024]
    assert cal.to_radians(ticks) == pytest.approx([math.pi / 2, math.pi / 2])
    assert cal.velocity_to_rad_s(np.array([10, 10])) == pytest.approx([10 * RAD_S_PER_VELOCITY_UNIT, -10 * RAD_S_PER_VELOCITY_UNIT])


def test_position_limits_swap_when_mirrored() -> None:
    m1, m2 = two_motors().motors
    assert Calibration.position_limit_ticks(m1) == (2148 - 652, 2148 + 652)
    assert Calibration.position_limit_ticks(m2) == (1998 - 978, 1998 + 326)


def test_robot_yaml_loads_the_arm() -> None:
    config = RobotConfig.load(ARM_YAML)
    assert config.calibration.ids == [1, 2, 3, 4] and config.calibration.joints == ["j1", "j2", "j3", "j4"]
    assert config.baudrate == 1_000_000 and config.calibration.motors[0].model_number == 1020


def test_save_then_load_round_trips_and_keeps_other_keys(tmp_path: Path) -> None:
    path = tmp_path / "arm.yaml"
    path.write_text(ARM_YAML.read_text())
    two_motors().save(path)
    assert Calibration.load(path) == two_motors()
    assert "max_speed" not in path.read_text()  # (unset: no cap, and no `null` written)
    capped = Calibration(tuple(MotorCalibration(**{**vars(m), "max_speed": 1.5}) for m in two_motors().motors))
    capped.save(path)
    assert Calibration.load(path) == capped
    assert RobotConfig.load(path).port == "/dev/ttyUSB0"
    assert [p.name for p in tmp_path.iterdir()] == ["arm.yaml"]  # no temporary file left behind


@pytest.mark.parametrize(
    "change, key",
    [
        ({"direction": 2}, "motors[1].direction"),
        ({"model": "XM999"}, "motors[1].model"),
        ({"min_position": 2.0}, "motors[1].min_position"),
        ({"velocity_limit": "fast"}, "motors[1].velocity_limit"),
        ({"velocity_limit": 0.01}, "motors[1].velocity_limit: must be in [0.024"),  # 0 units: no limit at all
        ({"max_speed": 0.01}, "motors[1].max_speed: must be in [0.024, velocity_limit"),  # 0 units: no profile
        ({"max_speed": 6.0}, "motors[1].max_speed"),  # above velocity_limit: the servo refuses the profile
        ({"max_speed": "fast"}, "motors[1].max_speed"),
        ({"homing_offset": 3000}, "motors[1].min_position/max_position"),
        ({"gear": 3}, "unknown key 'gear'"),
        ({"id": 1}, "motors.id: duplicate"),
    ],
)
def test_invalid_calibration_names_the_key(tmp_path: Path, change: dict, key: str) -> None:
    data = yaml.safe_load(ARM_YAML.read_text())
    data["motors"][1].update(change)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CalibrationError, match=key.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")) as raised:
        RobotConfig.load(path)
    assert str(raised.value).startswith(f"{path}: ")  # the file too (duplicate ids had named none)


def test_unknown_top_level_key_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(ARM_YAML.read_text() + "baud: 57600\n")
    with pytest.raises(CalibrationError, match="unknown key 'baud'"):
        RobotConfig.load(path)


@pytest.mark.parametrize("key", ["min_position", "max_position", "velocity_limit"])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_limits_are_refused_by_name(tmp_path: Path, key: str, value: float) -> None:
    data = yaml.safe_load(ARM_YAML.read_text())
    data["motors"][1][key] = value  # written as .inf / -.inf / .nan
    path = tmp_path / "arm.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CalibrationError, match=rf"motors\[1\]\.{key}: must be a finite number, got (-?inf|nan)"):
        RobotConfig.load(path)


def write_arm(tmp_path: Path, **top: object) -> Path:
    """The shipped arm's YAML with top-level keys added or replaced."""
    data = yaml.safe_load(ARM_YAML.read_text())
    data.update(top)
    path = tmp_path / "arm.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_safety_section_loads_and_save_round_trips_it(tmp_path: Path) -> None:
    """The safe pose, overspeed limit and margin are the robot's, so its YAML holds them."""
    assert RobotConfig.load(ARM_YAML).safety is None  # not given: SafetyConfig's defaults
    path = write_arm(tmp_path, safety={"safe_pose": [0, 1.2, -2.0, 0.5], "max_velocity": 6, "position_margin": 0.1})
    config = RobotConfig.load(path)
    assert config.safety.safe_pose == (0.0, 1.2, -2.0, 0.5)
    assert (config.safety.max_velocity, config.safety.position_margin, config.safety.max_step) == (6.0, 0.1, 0.2)
    config.save(tmp_path / "saved.yaml")
    assert RobotConfig.load(tmp_path / "saved.yaml") == config
    config.calibration.save(path)  # a calibration tool rewriting motors keeps the safety section
    assert RobotConfig.load(path).safety == config.safety
    RobotConfig.load(ARM_YAML).save(tmp_path / "plain.yaml")
    assert "safety" not in yaml.safe_load((tmp_path / "plain.yaml").read_text())


@pytest.mark.parametrize(
    "safety, error",
    [
        ({"max_vel": 5.0}, "unknown key 'safety.max_vel' (did you mean 'safety.max_velocity'?); allowed keys here: enabled, max_step"),
        ({"max_velocity": "fast"}, "safety.max_velocity: expected float, got 'fast'"),
        ({"enabled": "yes"}, "safety.enabled: expected bool, got 'yes'"),
        ({"max_velocity": -1.0}, "safety.max_velocity must be positive"),
        ({"max_velocity": math.nan}, "safety.max_velocity: got nan; give a finite number"),
        ({"position_margin": -0.1}, "safety.position_margin must be 0 or more"),
        ({"safe_pose": "home"}, "safety.safe_pose: expected a list, got 'home'"),
        ({"safe_pose": [0.0, 1.0, 0.0]},
         "safety.safe_pose has 3 positions, the robot has 4 joints ['j1', 'j2', 'j3', 'j4']"),
        ({"safe_pose": [0.0, 1.7, 0.0, 0.0]},
         "safety.safe_pose: j2 at 1.7 rad is outside its limits less position_margin (0.05): [-1.65, 1.65]"),
        ([0.0, 1.0], "'safety' must be a mapping"),
    ],
)
def test_invalid_safety_section_names_the_file_and_key(tmp_path: Path, safety: object, error: str) -> None:
    path = write_arm(tmp_path, safety=safety)
    with pytest.raises(CalibrationError) as raised:
        RobotConfig.load(path)
    assert str(raised.value).startswith(f"{path}: ") and error in str(raised.value)


def test_unsupported_baudrate_lists_the_supported_ones(tmp_path: Path) -> None:
    rates = "9600, 57600, 115200, 1000000, 2000000, 3000000, 4000000, 4500000"
    with pytest.raises(CalibrationError,
                       match=rf"'baudrate' must be one the X-series servos support \({rates}\), got 500000"):
        RobotConfig.load(write_arm(tmp_path, baudrate=500_000))


def test_a_baudrate_above_a_motors_model_is_refused(tmp_path: Path) -> None:
    """XL330s stop at 4 Mbps: a bus at 4.5 Mbps would hear none of them, told as a missing servo."""
    data = yaml.safe_load(ARM_YAML.read_text())
    motors = [{**motor, "model": "XL330-M288"} for motor in data["motors"]]
    assert RobotConfig.load(write_arm(tmp_path, motors=motors, baudrate=4_000_000)).baudrate == 4_000_000
    first = motors[0]["id"]
    with pytest.raises(CalibrationError, match=rf"'baudrate' 4500000 is above what motor {first} \(XL330-M288\) "
                                               "supports, 4000000"):
        RobotConfig.load(write_arm(tmp_path, motors=motors, baudrate=4_500_000))


def test_control_dt_loads_saves_and_is_checked(tmp_path: Path) -> None:
    """The arm's control period: what the emulator's lockstep advances per goal write."""
    assert RobotConfig.load(ARM_YAML).control_dt is None  # not given: the task's
    config = RobotConfig.load(write_arm(tmp_path, control_dt=0.01))
    assert config.control_dt == 0.01
    config.save(tmp_path / "saved.yaml")
    assert RobotConfig.load(tmp_path / "saved.yaml") == config
    for bad in (0, -0.02, math.nan, math.inf, "fast", True):
        with pytest.raises(CalibrationError, match="'control_dt' must be a positive number of seconds, got"):
            RobotConfig.load(write_arm(tmp_path, control_dt=bad))


def test_an_arm_is_refused_a_task_at_another_rate_than_its_config(tmp_path: Path) -> None:
    from hardware.dxl_arm import DynamixelArm
    from sims.tasks.arm_reach import ArmReach

    config = RobotConfig.load(write_arm(tmp_path, control_dt=0.01))
    with pytest.raises(ValueError, match=r"control_dt is 0\.01 s, but the task runs at 0\.02 s \(frame_skip 10\)"):
        DynamixelArm(config, port="/dev/null")
    assert DynamixelArm(config, port="/dev/null", task=ArmReach(frame_skip=5)).control_dt == pytest.approx(0.01)
