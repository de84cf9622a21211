"""The safety layer's rules, one by one."""

import numpy as np
import pytest

from hardware.safety import SafetyConfig, SafetyLayer, parse_overrides

LOW, HIGH = np.array([-1.0, -2.0]), np.array([1.0, 2.0])


def layer(**cfg) -> SafetyLayer:
    safety = SafetyLayer(LOW, HIGH, SafetyConfig(**cfg))
    safety.start(np.zeros(2))
    return safety


def test_nonfinite_commands_hold_the_last_safe_one():
    safety = layer(max_step=1.0)
    first, _ = safety.filter(np.array([0.3, 0.2]), np.zeros(2), np.zeros(2))
    for bad in ([np.nan, 0.0], [0.0, np.inf], [1.0]):
        sent, events = safety.filter(np.array(bad), np.zeros(2), np.zeros(2))
        assert events == ["nonfinite"] and np.array_equal(sent, first)
    assert safety.events["nonfinite"] == 3


def test_positions_are_clamped_inside_the_margin():
    safety = layer(max_step=10.0, position_margin=0.1)
    sent, events = safety.filter(np.array([5.0, -5.0]), np.zeros(2), np.zeros(2))
    assert events == ["position_limit"] and np.allclose(sent, [0.9, -1.9])


def test_a_margin_that_leaves_a_joint_no_range_names_the_joint_and_its_limits():
    """It had said "joint limits are narrower than twice safety.position_margin", naming neither joint nor limits."""
    with pytest.raises(ValueError, match=r"^safety.position_margin 1 leaves elbow no range: its limits \[-1, 1\] are 2 "
                                         r"rad apart, not more than twice the margin; give a position_margin below 1 "):
        SafetyLayer(LOW, HIGH, SafetyConfig(position_margin=1.0), ["elbow", "wrist"])
    with pytest.raises(ValueError, match=r"leaves joint 1 no range: its limits \[-2, 2\]"):
        SafetyLayer(np.array([-3.0, -2.0]), np.array([3.0, 2.0]), SafetyConfig(position_margin=2.0))  # unnamed: from 0


def test_jump_limit_bounds_each_step():
    safety = layer(max_step=0.2)
    sent, events = safety.filter(np.array([0.9, -0.05]), np.zeros(2), np.zeros(2))
    assert events == ["jump_limit"] and np.allclose(sent, [0.2, -0.05])
    sent, _ = safety.filter(np.array([0.9, -0.05]), np.zeros(2), np.zeros(2))
    assert np.allclose(sent, [0.4, -0.05])  # relative to the previous command


def test_float32_rounding_is_clipped_but_not_counted():
    safety = layer(max_step=0.2)
    sent, events = safety.filter(np.array([np.float32(0.2), 0.0]), np.zeros(2), np.zeros(2))  # 0.2 + 3e-9
    assert events == [] and sent[0] == 0.2  # the limit itself stays exact
    sent, events = safety.filter(np.array([0.4 + 1e-8, 0.0]), np.zeros(2), np.zeros(2))
    assert events == [] and sent[0] == 0.4
    sent, events = safety.filter(np.array([0.6 + 1e-3, 0.0]), np.zeros(2), np.zeros(2))
    assert events == ["jump_limit"] and sent[0] == pytest.approx(0.6)
    safety = layer(max_step=10.0, position_margin=0.05)
    sent, events = safety.filter(np.array([0.95 + 1e-8, 0.0]), np.zeros(2), np.zeros(2))  # the margin's edge
    assert events == [] and sent[0] == 0.95
    sent, events = safety.filter(np.array([0.95 + 1e-3, 0.0]), np.zeros(2), np.zeros(2))
    assert events == ["position_limit"] and sent[0] == 0.95


def test_overspeed_holds_the_measured_position():
    safety = layer(max_velocity=2.0)
    sent, events = safety.filter(np.array([0.5, 0.5]), np.array([0.7, -0.3]), np.array([0.0, 3.0]))
    assert "overspeed" in events and np.allclose(sent, [0.7, -0.3])


def test_disabled_layer_passes_commands_through():
    safety = layer(enabled=False)
    sent, events = safety.filter(np.array([5.0, np.nan]), np.zeros(2), np.zeros(2))
    assert events == [] and sent[0] == 5.0 and np.isnan(sent[1])


def test_ramp_respects_speed_and_limits():
    safety = layer(ramp_speed=0.5)
    waypoints = safety.ramp(np.zeros(2), np.array([0.5, 3.0]), dt=0.1)
    assert np.allclose(waypoints[-1], [0.5, 1.95])  # goal clamped inside the margin
    steps = np.abs(np.diff(np.vstack([np.zeros(2), waypoints]), axis=0))
    assert steps.max() <= 0.05 + 1e-12


@pytest.mark.parametrize("bad, says", [
    (dict(max_step=0), r"^safety\.max_step must be positive, got 0$"),
    (dict(park_blind_s=0), r"^safety\.park_blind_s must be positive, got 0$"),
    (dict(park_blind_s=np.inf), r"^safety\.park_blind_s must be a finite number, got inf$"),
    (dict(watchdog_s=1.0, stop_after_s=0.5), r"^safety\.stop_after_s \(0\.5\) must be at least watchdog_s \(1\.0\)$"),
    (dict(max_velocity=np.nan), r"^safety\.max_velocity must be a finite number, got nan$"),
    (dict(position_margin=-0.05), r"^safety\.position_margin must be 0 or more, got -0\.05$"),
    (dict(safe_pose=(0.0, np.inf)), r"^safety\.safe_pose must be finite joint positions, got \[0\.0, inf\]$"),
])
def test_bad_settings_are_refused(bad, says):
    """Each refusal names its own key (a match on "safety." alone had passed a message naming none)."""
    with pytest.raises(ValueError, match=says):
        SafetyConfig(**bad)


def test_edge_settings_are_accepted():
    """No margin, and a stop as soon as the hold: the lowest values the rules allow are allowed."""
    assert SafetyConfig(position_margin=0.0, watchdog_s=0.3, stop_after_s=0.3).position_margin == 0.0


def test_command_line_overrides_change_only_what_they_name():
    """``--safety KEY=VALUE`` (values read as YAML) on top of a robot config's settings, validated as its YAML is."""
    base = SafetyConfig(max_velocity=5.0, safe_pose=(0.1, 0.2))
    cfg = base.updated(parse_overrides(["max_step=0.1", "safe_pose=[0.3, -0.3]"]))
    assert (cfg.max_velocity, cfg.max_step, cfg.safe_pose) == (5.0, 0.1, (0.3, -0.3))
    assert base.updated({"safe_pose": None}).safe_pose is None  # back to the robot's home
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_overrides(["max_step"])
    with pytest.raises(ValueError, match=r"--safety 'stop_after_s=010': YAML reads a number with a leading 0 as octal, "
                                         r"010 as 8; write it without the 0s \(10\)"):  # (it had been 8 s, silently)
        parse_overrides(["stop_after_s=010"])
    with pytest.raises(ValueError, match=r"YAML reads a number with colons in base 60, 1:30 as 90"):
        parse_overrides(["max_velocity=1:30"])
    assert parse_overrides(["watchdog_s=0.05", "safe_pose=[0, 1.2]"]) == {"watchdog_s": 0.05, "safe_pose": [0, 1.2]}
    with pytest.raises(ValueError, match="unknown key 'safety.speed'"):
        base.updated(parse_overrides(["speed=3"]))
