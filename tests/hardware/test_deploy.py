"""Deployment end to end: an exported controller drives the emulated arm through the real SDK."""

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import sims
from hardware.deploy import deploy
from hardware.dxl_arm import DynamixelArm, load_robot_config
from hardware.safety import ConnectionLost, SafetyConfig
from policies.modules import ActionScaler
from robolearn.cli import main
from robolearn.export import export_controller
from robolearn.interfaces import Controller
from robolearn.recording import load_episode


class TowardTarget(Controller):
    """A hand-written arm controller: shoulder and elbow follow a fixed pose."""

    def __init__(self) -> None:
        super().__init__()
        self.obs_size = 14
        self.register_buffer("pose", torch.tensor([0.3, 0.4, 0.2, -0.2]))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pose.expand(obs.shape[0], 4) + 0.0 * obs[:, :4]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    export_controller(TowardTarget(), tmp_path / "export", ("torchscript",), extra={"task": "arm_reach", "control_dt": 0.02})
    return tmp_path


# The watchdog's own tests are in test_robot.py; here a loaded CI machine must not stop the run.
PATIENT = SafetyConfig(watchdog_s=0.5, stop_after_s=2.0)


def test_deploy_drives_the_emulated_arm_and_records_it(run_dir, make_emulator):
    emulator = make_emulator(realtime=True)
    summary = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=1, seed=0, safety=PATIENT)
    assert summary["episodes"] == 1 and summary["loop"]["steps"] == 100
    episode = load_episode(next(Path(summary["recording"]).glob("episode_00000.npz")))
    assert episode["obs/policy"].shape == (101, 14) and episode["actions"].shape == (100, 4)
    np.testing.assert_allclose(episode["commanded_actions"][-1], [0.3, 0.4, 0.2, -0.2], atol=1e-6)
    np.testing.assert_allclose(episode["obs/policy"][-1, :4], [0.3, 0.4, 0.2, -0.2], atol=0.08)  # the servos got there
    assert np.abs(np.diff(episode["actions"], axis=0)).max() <= 0.2 + 1e-6  # jump limit held
    state = emulator.state()
    assert not any(s.torque_enabled for s in state.values())  # parked, then torque off
    assert max(abs(s.goal) for s in state.values()) < 1e-3  # parked at the safe pose (home) before torque off
    saved = json.loads((Path(summary["recording"]) / "deploy.json").read_text())
    assert saved["loop"]["rate_hz"] == 50


def test_lost_connection_mid_run_keeps_the_completed_steps(run_dir, make_emulator):
    emulator = make_emulator(realtime=True)
    threading.Timer(1.5, emulator.disconnect).start()
    with pytest.raises(ConnectionLost, match="connection lost"):
        deploy(run_dir, "dxl_arm", port=emulator.port, episodes=3, seed=0)
    recording = next((run_dir / "deploy").iterdir())
    episodes = [load_episode(p) for p in sorted(recording.glob("episode_*.npz"))]
    assert episodes and episodes[-1]["interrupted"]
    assert sum(len(e["actions"]) for e in episodes) >= 20


def test_controller_for_another_task_is_refused(tmp_path, make_emulator):
    env = sims.make_env("pendulum", 1)

    class Other(Controller):
        def __init__(self):
            super().__init__()
            self.obs_size = 3
            self.scale = ActionScaler(env.action_spec)

        def forward(self, obs):
            return self.scale(obs[:, :1])

    export_controller(Other(), tmp_path / "export", ("torchscript",), extra={"task": "pendulum", "control_dt": 0.05})
    with pytest.raises(ValueError, match="trained on task 'pendulum'"):
        deploy(tmp_path, "dxl_arm", port="/dev/null", episodes=1)


def test_missing_export_says_what_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="robolearn export"):
        deploy(tmp_path, "dxl_arm", episodes=1)


def test_cli_deploy_on_the_emulator(run_dir, make_emulator, capsys):
    emulator = make_emulator(realtime=True)
    code = main(["deploy", str(run_dir), "--robot", "dxl_arm", "--port", emulator.port, "--episodes", "1",
                 "--target", "0.15", "0.0", "0.15", "--no-record"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "deployed:    1 episodes" in out and "50 Hz" in out


def test_unplugged_port_is_a_one_line_error(run_dir, capsys):
    assert main(["deploy", str(run_dir), "--robot", "dxl_arm", "--port", "/dev/does-not-exist"]) == 2
    assert "cannot open /dev/does-not-exist" in capsys.readouterr().err


def test_recorded_deployment_replays_on_the_robot(run_dir, make_emulator, capsys):
    emulator = make_emulator(realtime=True)
    summary = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=1, seed=0, safety=PATIENT)
    episode = Path(summary["recording"]) / "episode_00000.npz"
    emulator.set_joint_positions({1: -0.3, 2: 0.2, 3: 0.0, 4: 0.0})  # somewhere else before the replay
    assert main(["replay", str(episode), "--robot", "dxl_arm", "--port", emulator.port, "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["steps"] == 100
    assert result["start_error_rad"] < 0.05  # ramped to the recorded first pose
    assert result["divergence_rad_max"] < 0.1 and result["divergence_rad_final"] < 0.05


def test_replay_refuses_a_bad_recording(tmp_path, capsys):
    bad = tmp_path / "episode_00000.npz"
    np.savez(bad, actions=np.zeros((5, 3)), **{"obs/joint_state": np.zeros((6, 8))})
    assert main(["replay", str(bad), "--robot", "dxl_arm", "--port", "/dev/null"]) == 2
    assert "'actions' has shape (5, 3)" in capsys.readouterr().err
    np.savez(bad, actions=np.full((5, 4), np.nan), **{"obs/joint_state": np.zeros((6, 8))})
    assert main(["replay", str(bad), "--robot", "dxl_arm", "--port", "/dev/null"]) == 2
    assert "NaN" in capsys.readouterr().err


def test_cli_emulate_prints_the_port_it_serves():
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "robolearn", "emulate", "dynamixel", "--gain-scale", "0.5"],
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving Dynamixel arm on /dev/pts/"), line
        port = line.split()[4]
        from hardware.dynamixel.bus import DynamixelBus

        with DynamixelBus(port, load_robot_config("dxl_arm").calibration) as bus:
            q, _ = bus.read_state()
            assert q.shape == (4,)
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
