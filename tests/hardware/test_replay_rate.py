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


def write_recording(folder, steps: int = 10, control_dt: float = 0.01):
    """An episode that holds home, recorded at ``control_dt`` (frame_skip to match) beside its metadata.json."""
    import numpy as np

    folder.mkdir(exist_ok=True)
    (folder / "metadata.json").write_text(json.dumps({"control_dt": control_dt, "task": {
        "max_episode_steps": 200, "frame_skip": round(control_dt / 0.002), "safety_max_step": 0.2}}))
    episode = folder / "episode_00000.npz"
    np.savez(episode, actions=np.zeros((steps, 4)), **{"obs/joint_state": np.zeros((steps + 1, 8))})
    return episode


def test_a_robot_at_another_rate_than_the_recording_is_refused(tmp_path):
    """replay_on_robot had replayed a 100 Hz recording on a 50 Hz arm without a word, each goal held twice as long."""
    from hardware.replay import ReplayError, replay_on_robot

    episode = write_recording(tmp_path)
    robot = DynamixelArm(load_robot_config("dxl_arm"), port="/dev/null")  # the default task: 0.02 s
    with pytest.raises(ReplayError, match=r"recorded at control_dt 0.01 s, the robot runs at 0.02 s: build it with "
                                          r"the recording's task settings .* or replay with hardware.replay.replay"):
        replay_on_robot(episode, robot)


def test_a_robot_config_of_another_rate_is_refused_as_a_replays(tmp_path, capsys):
    """A robot config with control_dt 0.04 s had refused a 0.01 s recording as a controller: "deploy a controller
    trained at the config's rate", where a replay has none."""
    import yaml

    from hardware.replay import ReplayError, replay
    from hardware.dxl_arm import robot_config_path

    config = yaml.safe_load(robot_config_path("dxl_arm").read_text()) | {"control_dt": 0.04}
    (tmp_path / "slow.yaml").write_text(yaml.safe_dump(config))
    episode = write_recording(tmp_path / "rec")
    with pytest.raises(ReplayError, match=r"recorded at control_dt 0.01 s, the robot config .*slow.yaml runs at 0.04 s "
                                          r"\(its control_dt\): replay it with a robot config of the recording's rate"):
        replay(episode, tmp_path / "slow.yaml", port="/dev/null")
    from robolearn.cli import main

    assert main(["replay", str(episode), "--robot", str(tmp_path / "slow.yaml"), "--port", "/dev/null"]) == 2
    out, err = capsys.readouterr()
    assert "recorded at control_dt 0.01 s" in err and "rate:" not in out  # ('100 Hz, as recorded' had come first)


def test_replay_from_python_runs_at_the_recordings_rate(tmp_path, make_emulator):
    """What `robolearn replay` did had been the CLI's alone: from Python, the recording's rate had to be rebuilt by hand."""
    from hardware.replay import replay

    emulator = make_emulator(step_dt=0.01)
    result = replay(write_recording(tmp_path), "dxl_arm", port=emulator.port,
                    safety_overrides={"watchdog_s": 0.5, "stop_after_s": 2.0})
    assert result["steps"] == 10 and result["divergence_rad_max"] < 0.05
    assert not any(s.torque_enabled for s in emulator.state().values())  # parked, torque off


def test_a_replay_is_recorded_for_its_plot(tmp_path, make_emulator):
    """A replay had returned only its divergence numbers: the joints it moved could not be drawn beside the recording."""
    from hardware.replay import replay
    from robolearn.recording import EpisodeRecorder, load_episode
    from robolearn.recording_plot import plot_recording

    recorder = EpisodeRecorder(tmp_path / "replayed", {"control_dt": 0.01})
    replay(write_recording(tmp_path / "recorded"), "dxl_arm", port=make_emulator(step_dt=0.01).port,
           safety_overrides={"watchdog_s": 0.5, "stop_after_s": 2.0}, sink=recorder)
    episode = load_episode(tmp_path / "replayed" / "episode_00000.npz")
    assert episode["actions"].shape == (10, 4) and episode["obs/joint_state"].shape == (11, 8)
    assert bool(episode["interrupted"])  # 10 steps of an episode of 200: kept as cut short
    assert plot_recording(tmp_path / "replayed").is_file()


def test_an_episode_without_its_metadata_is_replayed_at_the_robots_rate_and_said(tmp_path, make_emulator):
    """An episode copied without its folder's metadata.json had been replayed at the robot's 50 Hz without a word,
    whatever rate it was recorded at."""
    import numpy as np

    from hardware.replay import replay

    episode = tmp_path / "episode_00000.npz"
    np.savez(episode, actions=np.zeros((5, 4)), **{"obs/joint_state": np.zeros((6, 8))})
    with pytest.warns(UserWarning, match=r"no metadata.json beside it gives the control rate it was recorded at: "
                                         r"replayed at the robot's 50 Hz, each goal held 0.02 s"):
        result = replay(episode, "dxl_arm", port=make_emulator().port,
                        safety_overrides={"watchdog_s": 0.5, "stop_after_s": 2.0})
    assert result["steps"] == 5


def test_a_line_lost_mid_replay_says_what_ended_it(tmp_path, make_emulator, monkeypatch):
    """The safe stop failing after the line died had replaced the error that ended the replay: it said only
    "connection lost before or during the safe stop", not where the line went or what to check."""
    from hardware.replay import replay
    from hardware.safety import ConnectionLost

    emulator = make_emulator(step_dt=0.01)
    step, steps = DynamixelArm.step, []

    def step_then_pull_the_plug(self, action):
        steps.append(1)
        if len(steps) == 3:
            emulator.disconnect()  # as the emulator stopped, or a cable pulled
        return step(self, action)

    monkeypatch.setattr(DynamixelArm, "step", step_then_pull_the_plug)
    with pytest.raises(ConnectionLost, match="connection lost") as raised:
        replay(write_recording(tmp_path), "dxl_arm", port=emulator.port,
               safety_overrides={"watchdog_s": 0.5, "stop_after_s": 2.0})
    assert "it began with ConnectionLost: lost the connection on /dev/pts/" in str(raised.value)


def test_a_replay_stopped_by_ctrl_c_says_the_robot_parked(tmp_path, make_emulator, monkeypatch, capsys):
    """`robolearn replay` stopped by Ctrl+C had said only "interrupted", where deploy says the robot was parked and
    its torque turned off."""
    from robolearn.cli import main

    emulator = make_emulator(step_dt=0.01)
    step, steps = DynamixelArm.step, []

    def step_then_ctrl_c(self, action):
        steps.append(1)
        if len(steps) == 3:
            raise KeyboardInterrupt
        return step(self, action)

    monkeypatch.setattr(DynamixelArm, "step", step_then_ctrl_c)
    assert main(["replay", str(write_recording(tmp_path)), "--robot", "dxl_arm", "--port", emulator.port,
                 "--safety", "watchdog_s=0.5", "--safety", "stop_after_s=2.0"]) == 130
    assert "interrupted: SIGINT; the robot was parked and its torque turned off" in capsys.readouterr().err
    assert not any(s.torque_enabled for s in emulator.state().values())
