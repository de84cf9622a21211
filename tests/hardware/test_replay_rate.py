"""A robot replay runs at the rate its recording was made at."""

from __future__ import annotations

import json

import pytest

from hardware.dxl_arm import DynamixelArm, load_robot_config
from hardware.replay import recorded_task_settings
from robolearn.config import build_dataclass
from sims.tasks.arm_reach import ArmReach


def test_a_replay_takes_the_recordings_task_settings(tmp_path):
    """A 100 Hz deployment (frame_skip 5) once replayed at the default 50 Hz: 0.085 rad of drift, not 0.007."""
    (tmp_path / "metadata.json").write_text(json.dumps({"control_dt": 0.01, "task": {
        "max_episode_steps": 200, "max_goal_step": 0.2, "success_distance": 0.02, "frame_skip": 5,
        "safety_max_step": 0.2}}))
    settings = recorded_task_settings(tmp_path / "episode_00000.npz")
    assert settings["frame_skip"] == 5 and "safety_max_step" not in settings
    robot = DynamixelArm(load_robot_config("dxl_arm"), port="/dev/null",
                         task=build_dataclass(ArmReach, settings, "metadata.json task."))
    assert robot.control_dt == pytest.approx(0.01) and robot.max_episode_steps == 200
    assert recorded_task_settings(tmp_path / "elsewhere" / "episode_00000.npz") == {}  # no metadata: the defaults
