"""Deployment end to end: an exported controller drives the emulated arm through the real SDK."""

import json
import os
import re
import signal
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import sims
from hardware.deploy import deploy, report, run_task
from hardware.dxl_arm import DynamixelArm, actuated_joints, check_target, load_robot_config, robot_config_path
from hardware.dynamixel.errors import NotConnectedError
from hardware.safety import ConnectionLost, EmergencyStop, SafetyConfig, ServosStopped
from policies.modules import ActionScaler
from robolearn.cli import main
from robolearn.config import load_config, to_dict
from robolearn.export import ExportedController, export_controller, task_meta
from robolearn.interfaces import Controller
from robolearn.recording import EpisodeRecorder, load_episode, overruled_rules
from sims.tasks.arm_reach import ArmReach, sample_targets


class TowardTarget(Controller):
    """A hand-written arm controller: shoulder and elbow follow a fixed pose."""

    def __init__(self) -> None:
        super().__init__()
        self.obs_size = 14
        self.register_buffer("pose", torch.tensor([0.3, 0.4, 0.2, -0.2]))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pose.expand(obs.shape[0], 4) + 0.0 * obs[:, :4]


def write_run_config(run_dir: Path, *overrides: str, config: str = "ppo_arm_reach") -> None:
    """The resolved config.yaml that `robolearn train <config> <overrides>` leaves in its run."""
    cfg = load_config(config, list(overrides))
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    export_controller(TowardTarget(), tmp_path / "export", ("torchscript",), extra={"task": "arm_reach", "control_dt": 0.02})
    write_run_config(tmp_path)
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
    # the jump limit held, except where the overspeed rule braked to the measured pose past it, as it should (a
    # loaded machine's late steps read as speed: a jump of 0.22 failed this on one CI run, its rules not recorded)
    jumps = np.abs(np.diff(episode["actions"], axis=0)).max(axis=1)
    braked = np.array(["overspeed" in rules for rules in overruled_rules(episode)[1:]])
    assert jumps[~braked].max() <= 0.2 + 1e-6 and braked.mean() < 0.1
    state = emulator.state()
    assert not any(s.torque_enabled for s in state.values())  # parked, then torque off
    assert max(abs(s.goal) for s in state.values()) < 1e-3  # parked at the safe pose (home) before torque off
    saved = json.loads((Path(summary["recording"]) / "deploy.json").read_text())
    assert saved["loop"]["rate_hz"] == 50
    # Paths, as train()'s RunResult and plot_recording give them (they had been strings); strings in deploy.json
    assert summary["run"] == run_dir and summary["recording"].parent == run_dir / "deploy"
    assert summary["plot"] == summary["recording"] / "deploy.png"
    assert (saved["run"], saved["recording"], saved["plot"]) == tuple(map(str, (run_dir, summary["recording"],
                                                                                 summary["plot"])))


def test_a_controller_of_another_action_size_is_refused_before_connecting(tmp_path):
    """A 7-wide action had been held by the safety layer for every step, reported as 'nonfinite'."""

    class Wide(TowardTarget):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.zeros(obs.shape[0], 7) + 0.0 * obs[:, :1]

    export_controller(Wide(), tmp_path / "export", ("torchscript",), extra={"task": "arm_reach", "control_dt": 0.02})
    write_run_config(tmp_path)
    with pytest.raises(ValueError, match=r"controller.pt: its action has shape \(1, 7\), the robot takes \(1, 4\)"):
        deploy(tmp_path, "dxl_arm", port="/dev/null")  # refused before the port is opened


def test_a_controller_whose_action_is_not_finite_is_refused_before_connecting(tmp_path):
    """Broken weights (inf even for an observation of zeros) had connected and ramped the arm to its start, only
    to stop at the first step."""

    class Broken(TowardTarget):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.full((obs.shape[0], 4), float("inf")) + 0.0 * obs[:, :1]

    export_controller(Broken(), tmp_path / "export", ("torchscript",), extra={"task": "arm_reach", "control_dt": 0.02})
    write_run_config(tmp_path)
    with pytest.raises(ValueError, match=r"controller.pt: its action for an observation of zeros is not finite"):
        deploy(tmp_path, "dxl_arm", port="/dev/null")  # refused before the port is opened


def test_an_exported_file_that_fails_on_its_described_observation_is_refused_before_connecting(tmp_path):
    """Another task's controller.pt in an export whose controller.json has no digest (exports made before them)
    had ended the deploy in a traceback from inside TorchScript (ONNX Runtime's InvalidArgument for a .onnx)."""
    export_controller(TowardTarget(), tmp_path / "export", ("torchscript",), extra={"task": "arm_reach",
                                                                                     "control_dt": 0.02})
    meta_path = tmp_path / "export" / "controller.json"
    meta = json.loads(meta_path.read_text())
    del meta["sha256"]
    meta_path.write_text(json.dumps(meta))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        five = torch.jit.trace(torch.nn.Linear(5, 4), torch.zeros(1, 5))  # a controller of 5-value observations
    five.save(str(tmp_path / "export" / "controller.pt"))
    write_run_config(tmp_path)
    with pytest.raises(ValueError, match=r"controller.pt: fails \(RuntimeError\) on an observation of the size its "
                                         r"controller.json gives \(14\): .*mat1 and mat2 shapes cannot be multiplied "
                                         r"\(1x14 and 5x4\); is the file another export's\?"):
        deploy(tmp_path, "dxl_arm", port="/dev/null")  # refused before the port is opened; what failed said too (a
        # file of this export that fails for another reason, an op this torch lacks, had been said as another's only)


def main_with_ctrl_c(argv: list[str]) -> int:
    """``main(argv)`` with SIGINT raising KeyboardInterrupt, as at a terminal, for the tests whose Ctrl+C is a
    real signal (the test's process may have another handler, or none)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return main(argv)
    finally:
        signal.signal(signal.SIGINT, previous)


def after_recorded_steps(monkeypatch, steps: int, action, now=None) -> None:
    """Run ``action`` on a thread of its own once the deploy has recorded ``steps`` steps: a timer started before
    the deploy had fired, on a loaded machine, while it was still connecting and ramping to the start. ``now``
    runs first on the loop's own thread, at that step: what must happen there and then (a thread's start can lag
    by seconds on a loaded machine, the episode ended meanwhile)."""
    add, added = EpisodeRecorder.add, []

    def add_then_act(self, *args, **kwargs):
        add(self, *args, **kwargs)
        added.append(1)
        if len(added) == steps:
            if now is not None:
                now()
            threading.Thread(target=action, daemon=True).start()

    monkeypatch.setattr(EpisodeRecorder, "add", add_then_act)


def test_lost_connection_mid_run_keeps_the_completed_steps(run_dir, make_emulator, monkeypatch):
    """The line drops after the 30th recorded step (a 1.5 s timer had fired before the first step on a loaded
    machine: connecting and the ramp to the start took longer, and nothing was recorded yet)."""
    emulator = make_emulator(realtime=True)
    after_recorded_steps(monkeypatch, 30, emulator.disconnect)  # from outside the loop, as a pulled cable
    with pytest.raises(ConnectionLost, match="connection lost") as raised:
        deploy(run_dir, "dxl_arm", port=emulator.port, episodes=3, seed=0)
    recording = next((run_dir / "deploy").iterdir())
    episodes = [load_episode(p) for p in sorted(recording.glob("episode_*.npz"))]
    assert episodes and episodes[-1]["interrupted"]
    assert sum(len(e["actions"]) for e in episodes) >= 20
    assert str(recording) in str(raised.value)  # the one-line error says where the recording is
    assert "it began with ConnectionLost: lost the connection" in str(raised.value)  # and the bus-level cause
    saved = json.loads((recording / "deploy.json").read_text())  # written on this exit too
    assert saved["error"].startswith("ConnectionLost: connection lost") and saved["loop"]["steps"] >= 20


def test_emergency_stop_writes_deploy_json_and_names_the_recording(run_dir, make_emulator):
    emulator = make_emulator(realtime=True)

    def press_ctrl_backslash() -> None:  # only once deploy has bound SIGQUIT (its default dumps core)
        while not callable(signal.getsignal(signal.SIGQUIT)):
            time.sleep(0.01)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGQUIT)

    threading.Thread(target=press_ctrl_backslash, daemon=True).start()
    with pytest.raises(EmergencyStop) as raised:
        deploy(run_dir, "dxl_arm", port=emulator.port, episodes=3, seed=0, safety=PATIENT)
    recording = next((run_dir / "deploy").iterdir())
    assert str(recording) in str(raised.value)
    assert json.loads((recording / "deploy.json").read_text())["error"].startswith("EmergencyStop")
    assert not any(s.torque_enabled for s in emulator.state().values())


def test_deploy_runs_the_task_the_run_was_trained_with(run_dir, make_emulator, monkeypatch):
    monkeypatch.setattr("hardware.robot.Robot.settle_s", 1.0)  # a reset ramp of over 1 s (see the timing below)
    write_run_config(run_dir, "env.kwargs.max_episode_steps=40", "env.kwargs.max_goal_step=0.05",
                     "env.kwargs.reward_smooth_weight=0.25")
    emulator = make_emulator(realtime=True)
    summary = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=2, seed=0, safety=PATIENT)
    assert summary["loop"]["steps"] == 80 and summary["episodes"] == 2  # 40-step episodes, as trained
    assert summary["task"]["max_goal_step"] == 0.05 and summary["task"]["safety_max_step"] == 0.05
    recorded = json.loads((Path(summary["recording"]) / "metadata.json").read_text())["task"]
    assert recorded["reward_smooth_weight"] == 0.25  # every setting: an import scores the steps as the robot did
    episode = load_episode(Path(summary["recording"]) / "episode_00000.npz")
    assert episode["actions"].shape == (40, 4)
    steps = np.abs(np.diff(np.vstack([np.zeros(4), episode["actions"]]), axis=0))
    assert steps.max() <= 0.05 + 1e-6  # the safety layer held the trained goal-step limit, not its 0.2 default
    # The reset ramps that end each episode (> 1 s of settling alone; 2 of the 80 steps) are not timed as steps,
    # which take 20 ms. (At a 0.2 s settle, with bounds of 150 ms, steps beside busy loops had come out longer:
    # a p99 of 260 ms, a step between timestamps of 150.4 ms.)
    assert summary["loop"]["step_ms_p99"] < 500
    assert np.diff(episode["timestamps"]).max() < 0.5


def test_task_goal_step_tightens_the_safety_limit_and_never_loosens_it():
    config = load_robot_config("dxl_arm")
    assert DynamixelArm(config, port="/dev/null", task=ArmReach(max_goal_step=0.05)).safety.cfg.max_step == 0.05
    with pytest.warns(UserWarning, match="expect jump_limit events"):
        arm = DynamixelArm(config, port="/dev/null", task=ArmReach(max_goal_step=0.5))
    assert arm.safety.cfg.max_step == 0.2
    previous = np.zeros(4)  # the arm's own goal-step rule, as ArmReach.actuate applies it in simulation
    np.testing.assert_allclose(arm._actuate(np.array([1.0, -1.0, 0.1, 0.0]), previous), [0.5, -0.5, 0.1, 0.0])


@pytest.mark.parametrize("overrides, error", [
    (("env.kwargs.bogus=1",), "the task settings cannot build the arm_reach task.*env.kwargs.bogus"),
    (("env.kwargs.max_goal_step=0",), "env.kwargs.max_goal_step must be positive"),
    (("env.kwargs.max_episode_steps=0",), "env.kwargs.max_episode_steps must be positive"),
    (("env.kwargs.success_distance=.nan",), "env.kwargs.success_distance: got nan"),
    (("env.kwargs.success_distance=.inf",), "env.kwargs.success_distance: got inf; give a finite number"),
])
def test_kwargs_that_cannot_build_the_task_are_refused(run_dir, overrides, error):
    write_run_config(run_dir, *overrides)
    with pytest.raises(ValueError, match=error):
        deploy(run_dir, "dxl_arm", port="/dev/does-not-exist", episodes=1)


def test_run_without_its_config_is_refused(run_dir):
    """An old export (no task_kwargs in controller.json) needs its run's config.yaml."""
    (run_dir / "config.yaml").unlink()
    with pytest.raises(FileNotFoundError, match="neither the export's controller.json nor a config.yaml"):
        deploy(run_dir, "dxl_arm", port="/dev/does-not-exist", episodes=1)


def test_an_export_carries_its_task_settings(tmp_path):
    """Exports record the run's env.kwargs: the export folder alone (copied to the robot's computer)
    runs the trained task, and they take precedence over a config.yaml beside it."""
    cfg = load_config("ppo_arm_reach", ["env.kwargs.max_episode_steps=40", "env.kwargs.max_goal_step=0.05"])
    export_controller(TowardTarget(), tmp_path / "export", ("torchscript",), extra=task_meta(cfg.env, 0.02))
    meta = ExportedController(tmp_path / "export" / "controller.pt").meta
    assert meta["task_kwargs"]["max_episode_steps"] == 40
    task = run_task(tmp_path, meta)  # no config.yaml here
    assert (task.max_episode_steps, task.max_goal_step) == (40, 0.05)
    write_run_config(tmp_path)  # defaults beside it: the export's own settings win
    assert run_task(tmp_path, meta).max_episode_steps == 40


def test_deploys_in_the_same_second_get_their_own_folders(run_dir, make_emulator, monkeypatch):
    monkeypatch.setattr("hardware.deploy.time.strftime", lambda *_: "20250101-120000")
    taken = run_dir / "deploy" / "20250101-120000"
    taken.mkdir(parents=True)
    (taken / "episode_00000.npz").write_bytes(b"another deploy's")
    write_run_config(run_dir, "env.kwargs.max_episode_steps=10")
    emulator = make_emulator(realtime=True)
    first = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=1, safety=PATIENT)["recording"]
    second = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=1, safety=PATIENT)["recording"]
    assert (first, second) == (Path(f"{taken}-1"), Path(f"{taken}-2"))
    assert (taken / "episode_00000.npz").read_bytes() == b"another deploy's"


@pytest.mark.parametrize("episodes", [0, -3])
def test_no_episodes_is_refused_before_connecting(run_dir, emulator, episodes):
    with pytest.raises(ValueError, match="episodes must be .* at least 1"):
        deploy(run_dir, "dxl_arm", port=emulator.port, episodes=episodes)
    assert not any(s.torque_enabled for s in emulator.state().values()) and emulator.packets == 0
    assert not (run_dir / "deploy").exists()


def test_numpy_integers_for_episodes_and_seed_deploy_as_the_numbers_they_are(run_dir, emulator):
    """deploy(episodes=np.int64(1)) had been refused as "episodes must be a whole number of at least 1, got
    np.int64(1)", and a numpy seed alike: a loop over np.arange's counts or seeds could not deploy."""
    write_run_config(run_dir, "env.kwargs.max_episode_steps=10")
    summary = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=np.int64(1), seed=np.int64(2), safety=PATIENT)
    assert (summary["episodes"], summary["seed"]) == (1, 2) and type(summary["seed"]) is int
    assert json.loads((summary["recording"] / "deploy.json").read_text())["seed"] == 2


def test_a_pathlib_port_deploys_as_its_string_does(run_dir, emulator):
    """port=Path("/dev/pts/N") had failed as "'PosixPath' object has no attribute 'strip'"."""
    write_run_config(run_dir, "env.kwargs.max_episode_steps=10")
    summary = deploy(run_dir, "dxl_arm", port=Path(emulator.port), episodes=1, safety=PATIENT)
    assert summary["port"] == emulator.port
    assert json.loads((summary["recording"] / "deploy.json").read_text())["port"] == emulator.port


@pytest.mark.parametrize("port", ["/dev/does-not-exist", "wrong baud"])
def test_a_deploy_that_cannot_start_leaves_no_recording_folder(run_dir, make_emulator, port):
    if port == "wrong baud":
        port = make_emulator(baudrate=57_600).port
    with pytest.raises(Exception, match="cannot open|no reply"):
        deploy(run_dir, "dxl_arm", port=port, episodes=1, retries=0)
    assert not (run_dir / "deploy").exists()


def test_unreachable_target_is_refused_naming_the_range(run_dir):
    with pytest.raises(ValueError, match=r"outside the arm-reach target range \(horizontal distance 0.10-0.24 m"):
        deploy(run_dir, "dxl_arm", port="/dev/does-not-exist", target=(5.0, 5.0, 5.0))
    for target in sample_targets(2000, torch.Generator().manual_seed(0)).tolist():  # every trained target is fine
        check_target(target)
    for bad in ((0.05, 0.0, 0.1), (0.05, -0.15, 0.1), (0.2, 0.0, 0.3)):
        with pytest.raises(ValueError, match=r"is outside the arm-reach target range"):
            check_target(bad)
    for bad in ((float("nan"), 0.1, 0.1), (0.2, float("inf"), 0.1), (0.2, 0.0)):  # not a place: said so, not "outside"
        with pytest.raises(ValueError, match=r"^target must be three finite numbers \(x, y, z in m\), got "):
            check_target(bad)


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
    write_run_config(tmp_path, "env.task=pendulum")
    with pytest.raises(ValueError, match="trained on task 'pendulum'"):
        deploy(tmp_path, "dxl_arm", port="/dev/null", episodes=1)


def test_missing_export_says_what_to_run(tmp_path, run_dir):
    (tmp_path / "my run" / "checkpoints").mkdir(parents=True)  # the command to paste quotes the path (bare, it
    (tmp_path / "my run" / "checkpoints" / "latest.pt").touch()  # was two words), of a run with a checkpoint
    with pytest.raises(FileNotFoundError, match=re.escape(f"run `robolearn export '{tmp_path / 'my run'}'` first")):
        deploy(tmp_path / "my run", "dxl_arm", episodes=1)
    with pytest.raises(FileNotFoundError, match=rf"give the folder that holds export/, not export/ itself: "
                                                rf"robolearn deploy {run_dir} "):  # not `robolearn export`, which fails
        deploy(run_dir / "export", "dxl_arm", episodes=1)
    copy = tmp_path / "copy"  # the controller's files copied somewhere, outside any export/
    shutil.copytree(run_dir / "export", copy)
    with pytest.raises(FileNotFoundError, match=re.escape(f"holds controller.pt itself; deploy takes a folder with the "
                                                          f"exported files in export/ (a run's): move them into "
                                                          f"{copy / 'export'}")):
        deploy(copy, "dxl_arm", episodes=1)


def test_an_export_in_the_other_format_only_says_which_format_to_deploy(run_dir):
    """`robolearn export RUN --format onnx` removes controller.pt; deploy --format torchscript had said "no exported
    controller; run `robolearn export RUN` first", as if there were none."""
    (run_dir / "export" / "controller.pt").rename(run_dir / "export" / "controller.onnx")  # (only its name is read)
    with pytest.raises(FileNotFoundError, match=re.escape("controller.pt: not exported in this format, but export/ "
                                                          "holds controller.onnx: deploy that with --format onnx")):
        deploy(run_dir, "dxl_arm", episodes=1, fmt="torchscript")


def test_deploy_plays_the_onnx_file_unless_the_run_exported_torchscript_alone(run_dir, make_emulator):
    """The default had been controller.pt, which torch.jit.load runs code of as it loads (README: a controller.pt
    from elsewhere is code), where ONNX Runtime runs none, in about half the time; TorchScript is deprecated upstream."""
    from hardware.deploy import default_format

    assert default_format(run_dir) == "torchscript"  # the fixture's export: TorchScript alone
    export_controller(TowardTarget(), run_dir / "export", extra={"task": "arm_reach", "control_dt": 0.02})  # both
    assert default_format(run_dir) == "onnx" and default_format(run_dir / "export") == "onnx"
    emulator = make_emulator()
    summary = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=1, safety=PATIENT)
    metadata = json.loads((Path(summary["recording"]) / "metadata.json").read_text())
    assert metadata["controller"] == str(run_dir / "export" / "controller.onnx")
    (run_dir / "export" / "controller.onnx").unlink()
    assert default_format(run_dir) == "torchscript"
    (run_dir / "export" / "controller.pt").unlink()  # none: said of the default's file
    with pytest.raises(FileNotFoundError, match=re.escape(f"{run_dir / 'export' / 'controller.onnx'}: no exported")):
        deploy(run_dir, "dxl_arm", episodes=1)


def test_a_run_still_training_is_said_so_not_called_stopped_or_unexported(run_dir, tmp_path):
    """A deploy during training had said 'run robolearn export first', then, once exported, that the run had
    'trained on and stopped before its end': it was training still."""
    from robolearn.run_lock import RunLock

    (tmp_path / "training").mkdir()
    write_run_config(tmp_path / "training")
    lock = RunLock(tmp_path / "training")  # as if another terminal trained it now
    try:
        with pytest.raises(FileNotFoundError, match=r"no exported controller yet: the run is still training \(pid "):
            deploy(tmp_path / "training", "dxl_arm", port="/dev/null", episodes=1)
        lock.release()
        lock = RunLock(run_dir)
        with pytest.warns(UserWarning, match=r"still training \(pid .*\); its export is of an earlier point, and the "
                                             r"run exports again when it ends"), pytest.raises(NotConnectedError):
            deploy(run_dir, "dxl_arm", port="/dev/null", episodes=1)  # warned before the port is opened
    finally:
        lock.release()


def test_safety_off_is_said_before_the_arm_moves_and_a_port_nobody_typed_says_where_it_came_from(run_dir, tmp_path):
    """Safety off had been said only in the summary after the run; a missing /dev/ttyUSB0 (the robot config's
    port, used when --port is left out) had not said where it came from nor what to give instead."""
    config = tmp_path / "arm.yaml"
    shipped = robot_config_path("dxl_arm").read_text()
    assert "port: /dev/ttyUSB0" in shipped
    config.write_text(shipped.replace("port: /dev/ttyUSB0", f"port: {tmp_path / 'no-such-tty'}"))
    with pytest.warns(UserWarning, match=r"the safety layer is off \(safety enabled=false\)"), \
            pytest.raises(NotConnectedError, match=r"no-such-tty.*\(the robot config's port; --port names another, "
                                                   r"and `robolearn emulate dynamixel` serves an emulated arm on one\)"):
        deploy(run_dir, config, episodes=1, safety_overrides={"enabled": False})
    with pytest.raises(NotConnectedError) as typed:
        deploy(run_dir, config, port=str(tmp_path / "typed-tty"), episodes=1)
    assert "typed-tty" in str(typed.value) and "no-such-tty" not in str(typed.value)  # the port typed is the one opened
    assert "robot config's port" not in str(typed.value)


def test_cli_deploy_on_the_emulator(run_dir, make_emulator, capsys, monkeypatch):
    emulator, arms = make_emulator(realtime=True), _arms_made_by_deploy(monkeypatch)
    code = main(["deploy", str(run_dir), "--robot", "dxl_arm", "--port", emulator.port, "--episodes", "1",
                 "--target", "0.15", "0.0", "0.15", "--no-record", "--safety", "watchdog_s=0.5",
                 "--safety", "stop_after_s=2.0", "--retries", "1", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "deployed:    1 episode on" in out and "50 Hz" in out
    assert "task:        100 steps per episode, goal steps <= 0.2 rad" in out  # the run's own task settings
    assert "seed:        0 (a fixed --target)" in out
    assert json.loads(out.strip().splitlines()[-1])["safety"]["watchdog_s"] == 0.5  # --safety reached the robot
    assert arms[0].bus.retries == 1  # and --retries the bus (it had no such option: 3 from the command line)


def test_unplugged_port_is_a_one_line_error(run_dir, capsys):
    assert main(["deploy", str(run_dir), "--robot", "dxl_arm", "--port", "/dev/does-not-exist"]) == 2
    assert "cannot open /dev/does-not-exist" in capsys.readouterr().err


def test_recorded_deployment_replays_on_the_robot(run_dir, make_emulator, capsys):
    # In lockstep (its physics a control period per goal written), not in real time: beside busy loops the realtime
    # emulator's arm had run on through late steps, and the replay came out 0.18 rad from the recording
    emulator = make_emulator()
    summary = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=1, seed=0, safety=PATIENT)
    episode = Path(summary["recording"]) / "episode_00000.npz"
    emulator.set_joint_positions({1: -0.3, 2: 0.2, 3: 0.0, 4: 0.0})  # somewhere else before the replay
    assert main(["replay", str(episode), "--robot", "dxl_arm", "--port", emulator.port, "--json",  # PATIENT's, as
                 "--safety", "watchdog_s=0.5", "--safety", "stop_after_s=2.0"]) == 0  # a loaded CI machine stalls
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["steps"] == 100
    assert result["start_error_rad"] < 0.05  # ramped to the recorded first pose
    assert result["divergence_rad_max"] < 0.1 and result["divergence_rad_final"] < 0.05
    # Only the first step may clip (the recorded start is measured, a few mrad off the commanded one):
    # float32 rounding of the recorded actions (~1e-8 over max_step) is not an intervention.
    assert result["safety_events"].get("jump_limit", 0) <= 1

    def kill() -> None:  # a kill mid-replay had ended the process with torque on: it stops as Ctrl+C does
        while signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            time.sleep(0.01)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=kill, daemon=True).start()
    assert main(["replay", str(episode), "--robot", "dxl_arm", "--port", emulator.port,
                 "--safety", "watchdog_s=0.5", "--safety", "stop_after_s=2.0"]) == 130
    assert not any(s.torque_enabled for s in emulator.state().values())
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_bus_stall_that_tripped_the_servos_watchdog_stops_the_run_and_parks(make_emulator):
    """A stall long enough for the servos' own watchdog had gone unnoticed: they ignored every goal after it,
    and the run went on (episodes reported as ordinary misses) against a frozen arm, whose park did nothing."""
    from hardware.dynamixel.errors import CommTimeoutError
    from hardware.safety import ServosStopped

    emulator = make_emulator(realtime=True)
    arm = DynamixelArm(load_robot_config("dxl_arm"), port=emulator.port, safety=PATIENT)  # a 2 s bus window
    with pytest.raises(ServosStopped, match=r"bus watchdog fired \(ids \[1, 2, 3, 4\]\).*re-armed where they stood"):
        with arm:
            arm.reset(seed=0)
            for _ in range(25):  # half a second toward a pose 0.6 rad from home
                arm.step(torch.tensor([[0.6, 0.6, -0.6, 0.0]]))
            assert max(abs(s.position) for s in emulator.state().values()) > 0.4  # (so "parked" below means it)
            read, until = arm.bus.read_state, time.monotonic() + 1.2  # no answer for 1.2 s...

            def stalled(**kwargs):
                if time.monotonic() < until:
                    raise CommTimeoutError(None, emulator.port, 57600, "read the joint state")
                return read(**kwargs)

            arm.bus.read_state = stalled
            emulator.trip_watchdogs()  # ... in which the servos' watchdog fired
            for _ in range(200):
                arm.step(torch.tensor([[0.6, 0.6, -0.6, 0.0]]))
    state = emulator.state()
    assert not any(s.torque_enabled or s.watchdog_tripped for s in state.values())
    assert max(abs(s.position) for s in state.values()) < 0.1  # parked at home (not frozen where it stood)
    assert arm.safety.events["servo_watchdog"] == 1


def _arm_out_at_a_pose(emulator, steps: int = 25, safety: SafetyConfig = PATIENT) -> DynamixelArm:
    """An arm stepped for ``steps`` control steps toward a pose 0.6 rad from home (so "parked" means it)."""
    arm = DynamixelArm(load_robot_config("dxl_arm"), port=emulator.port, safety=safety).connect()
    arm.reset(seed=0)
    for _ in range(steps):
        arm.step(torch.tensor([[0.6, 0.6, -0.6, 0.0]]))
    assert max(abs(s.position) for s in emulator.state().values()) > 0.4
    return arm


def _parked(emulator, but: tuple[int, ...] = ()) -> bool:
    """Every servo (but ``but``) at home, and none holding torque."""
    state = emulator.state()
    return (not any(s.torque_enabled for s in state.values())
            and max(abs(s.position) for i, s in state.items() if i not in but) < 0.1)


def test_a_servo_that_rebooted_mid_run_stops_the_run_and_the_arm_parks(make_emulator):
    """A servo that lost power for a moment comes back limp (torque off) and ignores goals; the run had gone on
    against it to the end, reporting ordinary misses, while the joint hung at its stop."""
    from hardware.safety import ServosStopped

    emulator = make_emulator()
    arm = _arm_out_at_a_pose(emulator)
    emulator.reboot(2)
    assert not emulator.state()[2].torque_enabled
    with pytest.raises(ServosStopped, match=r"servos \[2\] had turned their torque off .* re-armed where they stood"):
        try:
            for _ in range(50):  # the check comes a few times a second
                arm.step(torch.tensor([[0.6, 0.6, -0.6, 0.0]]))
        finally:
            arm.close()
    assert _parked(emulator)  # the rebooted joint too: re-armed, then parked
    assert arm.safety.events["servo_torque_off"] == 1


def test_a_hardware_alert_parks_the_other_servos_before_torque_goes_off(make_emulator):
    """An overload alert (the servo cuts its own torque) had turned torque off on every joint where it stood:
    the whole arm dropped, and the message did not say that the park was skipped."""
    from hardware.dynamixel.errors import HardwareAlertError

    emulator = make_emulator()
    arm = _arm_out_at_a_pose(emulator)
    emulator.faults.hardware_alert[4] = 0x20  # overload: a shutdown fault (the wrist; the others hold the arm)
    with pytest.raises(HardwareAlertError, match=r"servo 4 .*overload.*; what still followed goals parked at the "
                                                 r"safe pose, then torque went off"):
        try:
            arm.step(torch.tensor([[0.6, 0.6, -0.6, 0.0]]))
        finally:
            arm.close()
    assert _parked(emulator, but=(4,))


def test_a_park_that_a_watchdog_stop_began_re_arms_servos_whose_own_watchdog_fired(make_emulator):
    """A stalled process (Ctrl+Z, then fg): the servos' bus watchdog fired, and when the software watchdog got to
    the stop first, its park skipped the re-arm (the robot counted as stopped), so the tripped servos ignored
    every waypoint and torque went off mid-pose, under a message that said "stopped safely"."""
    from hardware.safety import WatchdogStop

    emulator = make_emulator(realtime=True)
    arm = _arm_out_at_a_pose(emulator)
    emulator.trip_watchdogs()
    arm._heard_at -= 3.0  # the stall: no read for longer than the servos' window, so the park's first read asks
    with arm._bus():  # as the watchdog thread does, once the silence lasted safety.stop_after_s
        arm.stopped = WatchdogStop("no fresh observation")
        arm._stop(ramp=True)
    arm.close()
    assert _parked(emulator)
    assert arm.safety.events["servo_watchdog"] == 1


def test_a_check_after_a_watchdog_stop_parked_leaves_torque_off(make_emulator):
    """The main thread's read after the watchdog thread's park had found every servo limp (torque off, as the
    stop left it) and re-armed them all, under a message saying torque was off."""
    from hardware.safety import WatchdogStop

    emulator = make_emulator()
    arm = _arm_out_at_a_pose(emulator)
    with arm._bus():
        arm.stopped = WatchdogStop("no fresh observation")
        arm._stop(ramp=True)
    assert _parked(emulator)
    arm._checked_at -= 1.0  # a check is due
    arm._refresh()  # as the step the main thread was in reads once the park lets go of the bus
    assert _parked(emulator) and arm.safety.events["servo_torque_off"] == 0
    arm.close()


def test_a_park_on_a_silent_bus_says_how_it_goes(make_emulator, monkeypatch, capsys):
    """A bus gone silent mid-run: the watchdog's park goes on blind, every read waiting out its timeout, and a
    park of seconds took 10-30 s with nothing said (a frozen terminal). It is said at its start and as it goes."""
    from hardware.safety import WatchdogStop

    monkeypatch.setattr("hardware.robot.PARK_NOTICE_S", 0.5)  # (3 s in a park of 10-30 s; this one takes a few)
    # A bus silent from the start: a read before it that failed, then got through (a reply past the bus's 34 ms,
    # beside busy loops, the likely cause), has the notices say "replies lost" and match none (1 of 2 load runs;
    # one reply dropped before the 10 steps, injected, failed it every time). That wording has its own tests in
    # test_robot.py
    monkeypatch.setattr("hardware.robot.LOSSY_S", 0.0)
    emulator = make_emulator(realtime=True)
    arm = DynamixelArm(load_robot_config("dxl_arm"), port=emulator.port, safety=PATIENT, retries=0).connect()
    try:
        arm.reset(seed=0)
        for _ in range(10):  # out toward a pose, so the park has a way to go
            arm.step(torch.tensor([[0.6, 0.6, -0.6, 0.0]]))
        emulator.faults.drop_reply = 1.0  # silent: goals still reach the servos, no reply comes back
        with pytest.raises(WatchdogStop, match="no fresh observation"):
            for _ in range(1000):
                arm.step(torch.tensor([[0.6, 0.6, -0.6, 0.0]]))
    finally:
        emulator.faults.drop_reply = 0.0
        arm.close()
    said = re.findall(r"^no reading for \d+\.\d s \(a silent bus\): parking the arm blind, about (\d+) s left of about "
                      r"(\d+) s(?:, given up in \d+ s if nothing is read)?; a second Ctrl\+C cuts the park short$",
                      capsys.readouterr().err, re.MULTILINE)
    left = [int(seconds) for seconds, _ in said]
    assert len(left) >= 2 and left[0] >= 2 and left[-1] < left[0], said  # at its start (of about 5 s), and as it goes


def test_a_second_stop_that_lands_in_a_blind_read_is_not_asked_for_again(make_emulator, monkeypatch, capsys):
    """A second Ctrl+C that landed while a blind park's waypoint waited out its read was followed by the notice
    "bus silent ...; a second Ctrl+C cuts the park short", as if unheard, before the next waypoint cut the park."""
    from hardware.safety import ParkSkipped, WatchdogStop

    monkeypatch.setattr("hardware.robot.PARK_NOTICE_S", 0.0)
    emulator = make_emulator(realtime=True)
    arm = DynamixelArm(load_robot_config("dxl_arm"), port=emulator.port, safety=PATIENT, retries=0).connect()
    try:
        arm.reset(seed=0)
        for _ in range(10):  # out toward a pose, so the park has a way to go
            arm.step(torch.tensor([[0.6, 0.6, -0.6, 0.0]]))
        emulator.faults.drop_reply = 1.0  # silent: goals still reach the servos, no reply comes back
        arm._fresh_at -= PATIENT.stop_after_s  # blind for stop_after_s already: the notice is due at once
        refresh, reads = arm._refresh, []

        def second_stop_during_the_first_waypoints_read() -> None:
            refresh()
            reads.append(1)
            if len(reads) == 2:  # (the first is the park's own before its waypoints)
                arm._park_cut.set()

        monkeypatch.setattr(arm, "_refresh", second_stop_during_the_first_waypoints_read)
        with arm._bus(), pytest.raises(ParkSkipped, match="a second stop"):
            arm.stopped = WatchdogStop("no fresh observation")
            arm._stop(ramp=True)
    finally:
        emulator.faults.drop_reply = 0.0
        monkeypatch.undo()
        with pytest.raises(WatchdogStop):  # the close says the stop again (its torque-off unconfirmed)
            arm.close()
    assert len(reads) == 2 and "parking the arm blind" not in capsys.readouterr().err


@pytest.mark.parametrize("park", ["close", "watchdog"])
def test_a_park_on_a_silent_bus_is_given_up_after_park_blind_s_and_says_to_cut_power(make_emulator, park):
    """A park on a bus that answers nothing had no time limit: every waypoint waited out a failed read (~0.28 s
    with the bus's retries), so a park of about a second went on blind for about 20 s, and a longer one for
    minutes. Once it has read nothing for safety.park_blind_s it stops moving, torque off is sent, and it ends
    as an unsafe stop: the park did not finish, and (the silent bus confirming nothing) cut the servos' power.
    The close's own park raises that; the watchdog's says it in the stop the next step raises."""
    from hardware.safety import ParkUnfinished, WatchdogStop

    emulator = make_emulator(realtime=True)
    safety = SafetyConfig(watchdog_s=0.5, stop_after_s=1.0, park_blind_s=1.0)
    arm = DynamixelArm(load_robot_config("dxl_arm"), port=emulator.port, safety=safety).connect()  # (3 retries)
    said = (r"the park to the safe pose did not finish: nothing was read for 1\.\d s of it \(a silent bus; "
            r"safety.park_blind_s = 1\), so it was given up short of the safe pose; the torque-off was not confirmed "
            r".*the servos may still hold torque; cut their power")
    try:
        arm.reset(seed=0)
        for _ in range(25):  # 0.6 rad out: a park of about 1.2 s, about 20 s blind
            arm.step(torch.tensor([[0.6, 0.6, -0.6, 0.0]]))
        emulator.faults.drop_reply = 1.0  # silent: goals and the torque-off still reach the servos, no reply comes back
        began = time.monotonic()
        if park == "close":
            with pytest.raises(ParkUnfinished, match=said):
                arm.close()
        else:
            with pytest.raises(WatchdogStop, match="no fresh observation .*; the safe stop failed: " + said):
                for _ in range(1000):
                    arm.step(torch.tensor([[0.6, 0.6, -0.6, 0.0]]))
        took = time.monotonic() - began
    finally:
        emulator.faults.drop_reply = 0.0
        arm.close()
    # park_blind_s, the failed reads around it and the torque-off's (plus the watchdog's stop_after_s), not 20 s
    assert took < 10.0, took
    state = emulator.state()
    assert not any(s.torque_enabled for s in state.values())  # torque off reached the servos
    assert max(abs(s.goal) for s in state.values()) > 0.3  # where the park was given up, not at home


def test_a_park_on_a_bus_of_garbled_replies_says_they_are_garbled_not_silent(make_emulator, monkeypatch, capsys):
    """Every reply failing its checksum (`--fault corrupt_crc=1`): the blind park had been said as "bus silent", and
    given up "(a silent bus; ...)", sending a person to check power and cables of a bus that answers every packet."""
    from hardware.safety import ParkUnfinished

    monkeypatch.setattr("hardware.robot.PARK_NOTICE_S", 0.0)
    emulator = make_emulator(realtime=True)
    safety = SafetyConfig(watchdog_s=0.5, stop_after_s=0.5, park_blind_s=1.0)
    arm = DynamixelArm(load_robot_config("dxl_arm"), port=emulator.port, safety=safety)
    # Every reply comes, garbled, and the last read's failure is what the park says: the emulator's thread replies
    # within the bus's 34 ms on an idle machine, but beside busy loops a reply came 57 ms late and the give-up said
    # "late replies" (true of that read). A timeout no stall reaches leaves the garbling alone to fail the reads.
    arm.bus.timeout_ms = 1000.0
    arm.connect()
    garbled = "garbled replies, failing their checksum or length check"
    try:
        arm.reset(seed=0)
        for _ in range(25):  # 0.6 rad out: a park of over 1.4 s (its waypoints and hold), given up after 1 s blind
            arm.step(torch.tensor([[0.6, 0.6, -0.6, 0.0]]))
        emulator.faults.corrupt_crc = 1.0
        with pytest.raises(ParkUnfinished, match=rf"nothing was read for 1\.\d s of it \({garbled}; "
                                                 r"safety\.park_blind_s = 1\)") as raised:
            arm.close()
    finally:
        emulator.faults.corrupt_crc = 0.0
        arm.close()
    err = capsys.readouterr().err
    assert re.search(rf"^no reading for \d+\.\d s \({garbled}\): parking the arm blind", err, re.MULTILINE), err
    assert "silent" not in err and "silent" not in str(raised.value)
    assert emulator.corrupted > 0


def test_a_park_on_a_bus_losing_15_percent_of_replies_reaches_the_safe_pose(make_emulator):
    """A park on a bus that loses replies but answers (`--fault drop_reply=0.15`: about half the sync reads retried,
    a few failing after their retries) takes longer than planned. The time of its failed and retried reads, added
    up, had given it up at safety.park_blind_s (10.8 s of a park of 2.8 s, torque off short of the safe pose, where
    a real arm drops); its readings say where the arm is, so it goes on to the safe pose. Here park_blind_s is 1 s,
    its failed and retried reads several times that, never 1 s in a row without a reading."""
    from hardware.dynamixel.emulator import Faults

    emulator = make_emulator(faults=Faults(seed=3))
    arm = _arm_out_at_a_pose(emulator, safety=SafetyConfig(watchdog_s=0.5, stop_after_s=2.0, park_blind_s=1.0))
    retries = arm.bus.stats.retries
    emulator.faults.drop_reply = 0.15
    try:
        arm.close()
    finally:
        emulator.faults.drop_reply = 0.0
    assert _parked(emulator) and arm.bus.stats.retries - retries > 10


def _arms_made_by_deploy(monkeypatch) -> list:
    """The DynamixelArms deploy makes, kept here to watch (its park, its stops)."""
    arms = []

    class Kept(DynamixelArm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            arms.append(self)

    monkeypatch.setattr("hardware.deploy.DynamixelArm", Kept)
    return arms


def _silence_the_bus(emulator):
    """What silences the bus (goals still reach the servos, no reply comes back), for ``after_recorded_steps``'s
    ``now``: on a thread of its own it had come late on a loaded machine, after the episode's end, and the ramp to
    the next start, not the watchdog, had stopped the arm."""
    return lambda: setattr(emulator.faults, "drop_reply", 1.0)


def _until_the_watchdog_parks(arm) -> float:
    """Wait for the watchdog's park on the silenced bus, ``stop_after_s`` after the silence; the deadline the
    caller's waits share."""
    until = time.monotonic() + 60
    while not arm.parking and time.monotonic() < until:
        time.sleep(0.01)
    return until


def test_a_second_ctrl_c_while_the_watchdog_parks_on_a_silent_bus_cuts_the_park_short_and_says_so(
        run_dir, make_emulator, monkeypatch, capsys):
    """The bus goes silent mid-deploy and the watchdog parks blind; a Ctrl+C ends the loop (the close waits for that
    park), and a second had ended the process at once as "interrupted", status 130: the park died with it, nothing
    said of the torque it may have left on. It cuts the park short, turns torque off where the arm stands and ends
    as an unsafe stop does: an error (status 2) that says the park was skipped and to cut the servos' power."""
    emulator, arms = make_emulator(realtime=True), _arms_made_by_deploy(monkeypatch)

    def press_twice() -> None:
        until = _until_the_watchdog_parks(arms[0])
        os.kill(os.getpid(), signal.SIGINT)  # ends the loop; the close waits for the park
        while not arms[0].stop_requested and time.monotonic() < until:
            time.sleep(0.01)  # (until the first is taken: two pending SIGINTs are handled as one)
        os.kill(os.getpid(), signal.SIGINT)

    after_recorded_steps(monkeypatch, 10, press_twice, now=_silence_the_bus(emulator))
    assert main_with_ctrl_c(["deploy", str(run_dir), "--robot", "dxl_arm", "--port", emulator.port,  # PATIENT's
                             "--safety", "watchdog_s=0.5", "--safety", "stop_after_s=2.0"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"error: no fresh observation .*; the safe stop failed: a second stop .*parking was skipped .*"
                     r"the servos may still hold torque; cut their power", err), err
    state = emulator.state()
    assert not any(s.torque_enabled for s in state.values())  # torque-off sent (the silent bus confirmed none)
    assert max(abs(s.goal) for s in state.values()) > 0.1  # where the park was cut short, not at home


def test_a_ctrl_c_while_the_watchdog_parks_says_the_park_is_under_way_and_how_to_cut_it(run_dir, make_emulator,
                                                                                         monkeypatch, capsys):
    """The bus goes silent mid-deploy and the watchdog parks blind; a Ctrl+C then ended the loop and the close
    waited for that park, with nothing said of the stop: it seemed unheard. It says, once, on one line, that a
    park is under way and that a second Ctrl+C cuts it short."""
    emulator, arms = make_emulator(realtime=True), _arms_made_by_deploy(monkeypatch)

    def press_once() -> None:
        _until_the_watchdog_parks(arms[0])
        os.kill(os.getpid(), signal.SIGINT)

    after_recorded_steps(monkeypatch, 10, press_once, now=_silence_the_bus(emulator))
    # (the blind park is given up after park_blind_s: an error, its stop said; 3 s, not 1: the press must land
    # while the park is under way, and a loaded CI machine (load 5 on 2 cores) had taken over 1 s to deliver it)
    assert main_with_ctrl_c(["deploy", str(run_dir), "--robot", "dxl_arm", "--port", emulator.port, "--safety",
                             "watchdog_s=0.5", "--safety", "stop_after_s=2.0", "--safety", "park_blind_s=3.0"]) == 2
    err = capsys.readouterr().err
    said = re.findall(r"SIGINT: a park to the safe pose is under way \(the watchdog's\): stopping once it ends; a "
                      r"second Ctrl\+C cuts it short \(torque off where the robot stands\)$", err, re.MULTILINE)
    assert len(said) == 1, err  # (after the progress bar's carriage return: on its own line on a terminal)
    assert re.search(r"error: no fresh observation .*; the safe stop failed: the park to the safe pose did not finish",
                     err), err
    assert "the run had been stopped" not in err  # the watchdog's stop came first


def test_a_second_ctrl_c_before_the_close_parks_is_kept_and_skips_the_park(run_dir, make_emulator, monkeypatch,
                                                                               capsys):
    """A second Ctrl+C that came after the first had ended the loop, while its clean-up saved the recording and
    before the close took stop signals its own way, had been raised there: it cut the save short (the episode in
    progress lost) and reached the close as the first stop, so the park went on in full and deploy ended as
    "interrupted" (status 130), the second press lost. It is kept for the close: no park, torque off where the arm
    stands, the episode saved, and an error (status 2) that says the park was skipped."""
    emulator = make_emulator(realtime=True)
    close = EpisodeRecorder.close

    def second_stop_then_save(self):
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl+C, as the loop's clean-up saves the recording
        close(self)

    monkeypatch.setattr(EpisodeRecorder, "close", second_stop_then_save)
    after_recorded_steps(monkeypatch, 10, lambda: os.kill(os.getpid(), signal.SIGINT))  # the first ends the loop
    assert main_with_ctrl_c(["deploy", str(run_dir), "--robot", "dxl_arm", "--port", emulator.port,  # PATIENT's
                             "--safety", "watchdog_s=0.5", "--safety", "stop_after_s=2.0"]) == 2
    err = capsys.readouterr().err
    assert "SIGINT: a second stop: no park to the safe pose" in err, err
    assert re.search(r"error: a second stop .* before or during the ramp to the safe pose: parking was skipped", err), err
    state = emulator.state()
    assert not any(s.torque_enabled for s in state.values())  # torque off
    assert max(abs(s.goal) for s in state.values()) > 0.1  # where the arm stood, not parked at home
    episode = load_episode(next((run_dir / "deploy").iterdir()) / "episode_00000.npz")  # the episode in progress
    assert episode["interrupted"] and len(episode["actions"]) >= 10


def test_an_emergency_stop_during_a_park_leaves_a_limp_servo_limp(make_emulator):
    """Ctrl+\\ only marks the stop mid-transaction; the park's next read had still re-armed a rebooted servo."""
    from hardware.safety import EmergencyStop

    emulator = make_emulator()
    arm = _arm_out_at_a_pose(emulator)
    emulator.reboot(2)
    arm.parking, arm.stopped = True, EmergencyStop("emergency stop")  # as during close()'s park
    arm._checked_at -= 1.0
    arm._refresh()
    assert not emulator.state()[2].torque_enabled and arm.safety.events["servo_torque_off"] == 0
    arm.parking = False
    arm.close()


def test_a_servo_that_reboots_during_an_alerts_park_is_re_armed_and_parked_too(make_emulator):
    """With one servo in an alert, every check had raised its alert and seen nothing else."""
    from hardware.dynamixel.errors import HardwareAlertError

    emulator = make_emulator()
    arm = _arm_out_at_a_pose(emulator)
    emulator.faults.hardware_alert[4] = 0x20
    with pytest.raises(HardwareAlertError):
        arm.step(torch.tensor([[0.6, 0.6, -0.6, 0.0]]))
    emulator.reboot(2)
    arm._checked_at -= 1.0  # the park's first read checks
    arm.close()
    assert _parked(emulator, but=(4,)) and arm.safety.events["servo_torque_off"] == 1


def test_replay_refuses_a_bad_recording(tmp_path, capsys):
    bad = tmp_path / "episode_00000.npz"
    np.savez(bad, actions=np.zeros((5, 3)), **{"obs/joint_state": np.zeros((6, 8))})
    assert main(["replay", str(bad), "--robot", "dxl_arm", "--port", "/dev/null"]) == 2
    assert "'actions' has shape (5, 3)" in capsys.readouterr().err
    np.savez(bad, actions=np.full((5, 4), np.nan), **{"obs/joint_state": np.zeros((6, 8))})
    assert main(["replay", str(bad), "--robot", "dxl_arm", "--port", "/dev/null"]) == 2
    assert "NaN" in capsys.readouterr().err
    (tmp_path / "deploy.json").write_text("{}")  # not an episode: said, not numpy's "pickled data" complaint
    (tmp_path / "metadata.json").write_text('{"control_dt": 0.02}')  # ("rate: 50 Hz, as recorded" had come first)
    assert main(["replay", str(tmp_path / "deploy.json"), "--robot", "dxl_arm", "--port", "/dev/null"]) == 2
    captured = capsys.readouterr()
    assert "deploy.json: give one episode_*.npz of a recording, e.g. " in captured.err and "rate:" not in captured.out
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metadata.json").write_text("{}")  # a deploy that stopped before its first step was kept
    assert main(["plot", str(empty)]) == 2
    assert "a recording without episodes (it stopped before its first step was kept)" in capsys.readouterr().err


def test_replay_of_an_episode_that_is_not_there_names_those_that_are(tmp_path, capsys):
    """A mistyped episode number had printed the recording's rate as if replaying, then numpy's "[Errno 2] No such
    file" inside "not a readable episode file (missing, truncated or corrupt: ...)"."""
    np.savez(tmp_path / "episode_00000.npz", actions=np.zeros((5, 4)), **{"obs/joint_state": np.zeros((6, 8))})
    (tmp_path / "metadata.json").write_text(json.dumps({"control_dt": 0.02}))
    missing = tmp_path / "episode_00009.npz"
    assert main(["replay", str(missing), "--robot", "dxl_arm", "--port", "/dev/null"]) == 2
    out, err = capsys.readouterr()
    assert "rate:" not in out
    assert f"error: {missing}: no such episode file; {tmp_path} holds episode_00000.npz\n" == err
    gone = tmp_path / "gone" / "episode_00000.npz"
    assert main(["replay", str(gone), "--robot", "dxl_arm", "--port", "/dev/null"]) == 2
    assert f"no such episode file; no folder {tmp_path / 'gone'}" in capsys.readouterr().err


def test_replay_refuses_an_episode_without_steps_before_moving_the_arm(tmp_path, capsys):
    """An episode file cut to no steps had ramped the arm to its start pose, then failed with Python's
    "max() arg is an empty sequence"."""
    empty = tmp_path / "episode_00000.npz"
    np.savez(empty, actions=np.zeros((0, 4)), **{"obs/joint_state": np.zeros((1, 8))})
    assert main(["replay", str(empty), "--robot", "dxl_arm", "--port", "/dev/null"]) == 2
    assert "episode_00000.npz: holds no steps, nothing to replay" in capsys.readouterr().err


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


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["kill", "terminal-closed"])
def test_a_kill_or_a_closed_terminal_stops_safely_as_ctrl_c_does(run_dir, make_emulator, signum, monkeypatch):
    """Both had ended the process on the spot: torque left on, no deploy.json, the episode lost."""
    emulator = make_emulator(realtime=True)
    after_recorded_steps(monkeypatch, 10, lambda: os.kill(os.getpid(), signum))  # (deploy's handler bound by then)
    summary = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=3, seed=0, safety=PATIENT)
    assert summary["loop"]["interrupted"] and 0 < summary["loop"]["steps"]
    recording = next((run_dir / "deploy").iterdir())
    assert json.loads((recording / "deploy.json").read_text())["loop"]["interrupted"]
    assert list(recording.glob("episode_*.npz"))  # the episode in progress kept
    assert not any(s.torque_enabled for s in emulator.state().values())


def robot_yaml(tmp_path: Path, safety: dict | None = None, motors=None) -> Path:
    """The shipped arm's YAML with a ``safety:`` section and/or other motors."""
    data = yaml.safe_load(robot_config_path("dxl_arm").read_text())
    if safety is not None:
        data["safety"] = safety
    if motors is not None:
        data["motors"] = motors
    path = tmp_path / "arm.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_robot_configs_safety_settings_are_used_and_parking_goes_to_its_safe_pose(run_dir, make_emulator):
    """Parking at home (upright) and turning torque off drops a real arm: the YAML's safe_pose is where it parks."""
    write_run_config(run_dir, "env.kwargs.max_episode_steps=10")
    safe_pose = [0.0, 0.6, -0.8, 0.3]
    path = robot_yaml(run_dir, {"safe_pose": safe_pose, "max_velocity": 6.0, "watchdog_s": 0.5, "stop_after_s": 2.0,
                                "ramp_speed": 2.0})
    arm = DynamixelArm(load_robot_config(path), port="/dev/null")
    assert arm.safety_cfg.max_velocity == 6.0 and arm.safety_cfg.safe_pose == tuple(safe_pose)
    explicit = DynamixelArm(load_robot_config(path), port="/dev/null", safety=PATIENT)
    assert explicit.safety_cfg == PATIENT  # a SafetyConfig passed in wins
    emulator = make_emulator(realtime=True)
    summary = deploy(run_dir, path, port=emulator.port, episodes=1)
    state = emulator.state()
    assert not any(s.torque_enabled for s in state.values())
    goals = [state[i].goal for i in (1, 2, 3, 4)]
    np.testing.assert_allclose(goals, safe_pose, atol=1e-3)  # parked there, then torque off
    assert summary["safety"]["safe_pose"] == safe_pose and summary["safety"]["max_velocity"] == 6.0


def test_safety_overrides_change_only_what_they_name_and_bad_ones_are_refused_before_connecting(run_dir, make_emulator):
    write_run_config(run_dir, "env.kwargs.max_episode_steps=10")
    emulator = make_emulator(realtime=True)
    summary = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=1, safety=PATIENT,
                     safety_overrides={"max_velocity": 6.5})
    metadata = json.loads((Path(summary["recording"]) / "metadata.json").read_text())
    assert metadata["safety"]["max_velocity"] == 6.5 and metadata["safety"]["watchdog_s"] == PATIENT.watchdog_s
    with pytest.raises(ValueError, match="unknown key 'safety.max_vel'"):
        deploy(run_dir, "dxl_arm", port=emulator.port, safety_overrides={"max_vel": 6.0})
    assert len(list((run_dir / "deploy").iterdir())) == 1


def test_the_seed_is_recorded(run_dir, make_emulator):
    """Every deploy samples the same targets unless --seed says otherwise: its recording must say which ran."""
    write_run_config(run_dir, "env.kwargs.max_episode_steps=10")
    emulator = make_emulator(realtime=True)
    summary = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=1, seed=7, safety=PATIENT)
    recording = Path(summary["recording"])
    assert summary["seed"] == 7 and json.loads((recording / "deploy.json").read_text())["seed"] == 7
    assert json.loads((recording / "metadata.json").read_text())["seed"] == 7


@pytest.mark.parametrize("change", ["swap j1 and j2", "typo j33"])
def test_motors_must_drive_the_models_joints_in_actuator_order(run_dir, tmp_path, change):
    """Swapped motors or a misspelt joint had deployed with the controller's joints mixed up."""
    motors = yaml.safe_load(robot_yaml(tmp_path).read_text())["motors"]
    if change == "swap j1 and j2":
        motors[0], motors[1] = motors[1], motors[0]
    else:
        motors[2]["joint"] = "j33"
    path = robot_yaml(tmp_path, motors=motors)
    assert actuated_joints("sims/assets/dxl_arm.xml") == ["j1", "j2", "j3", "j4"]
    joints = [m["joint"] for m in motors]
    with pytest.raises(ValueError, match=re.escape(f"the robot config's motors drive joints {joints}, but "
                                                   "sims/assets/dxl_arm.xml actuates ['j1', 'j2', 'j3', 'j4']")):
        deploy(run_dir, path, port="/dev/does-not-exist", episodes=1)


def test_limits_wider_than_the_models_ranges_are_refused(run_dir, tmp_path):
    """j2 allowed [-2.9, 2.9] where the MJCF's actuator range, which simulation clipped every goal to, is [-1.7, 1.7]:
    the arm had deployed and taken goals past 1.7 rad that training never sent."""
    motors = yaml.safe_load(robot_yaml(tmp_path).read_text())["motors"]
    motors[1].update(min_position=-2.9, max_position=2.9)
    with pytest.raises(ValueError, match=re.escape("motor 2 (j2): its limits [-2.9, 2.9] are wider than "
                                                   "sims/assets/dxl_arm.xml's range for j2, [-1.7, 1.7]")):
        deploy(run_dir, robot_yaml(tmp_path, motors=motors), port="/dev/does-not-exist", episodes=1)
    motors[1].update(min_position=-1.5, max_position=1.5)  # narrower: the arm's own limits, kept
    DynamixelArm(robot_yaml(tmp_path, motors=motors))


def test_limits_that_leave_out_home_are_refused_when_home_is_the_safe_pose(run_dir, tmp_path):
    """j2 limited to [0.3, 1.0] (home, 0, outside): the arm had deployed, each episode started and the park ended
    at the clamped pose instead of home, every step counted as position_limit, and "parked" said."""
    motors = yaml.safe_load(robot_yaml(tmp_path).read_text())["motors"]
    motors[1].update(min_position=0.3, max_position=1.0)
    with pytest.raises(ValueError, match=re.escape("j2: home (0 rad) is outside its limits less position_margin "
                                                   "(0.05): [0.35, 0.95]")):
        deploy(run_dir, robot_yaml(tmp_path, motors=motors), port="/dev/does-not-exist", episodes=1)
    DynamixelArm(robot_yaml(tmp_path, motors=motors, safety={"safe_pose": [0.0, 0.5, 0.0, 0.0]}))  # parks there


def test_a_folder_of_runs_is_named_as_one_with_its_exported_runs(tmp_path):
    """`robolearn deploy runs/dr_long` had said to export the folder, which is no run."""
    folder = tmp_path / "dr_long"
    for name in ("seed_0", "seed_1"):
        (folder / name).mkdir(parents=True)
        write_run_config(folder / name)
    with pytest.raises(FileNotFoundError, match=re.escape(f"{folder}: a folder of runs, not a run, and none of its 2 "
                                                          f"runs is exported; the newest is {folder}/seed_")):
        deploy(folder, "dxl_arm", episodes=1)
    export_controller(TowardTarget(), folder / "seed_1" / "export", ("torchscript",),
                      extra={"task": "arm_reach", "control_dt": 0.02})
    with pytest.raises(FileNotFoundError, match=re.escape(f"{folder}: a folder of runs, not a run; its exported runs: "
                                                          f"{folder}/seed_1; deploy one (the newest arm_reach export: "
                                                          f"robolearn deploy {folder}/seed_1 ...)")):
        deploy(folder, "dxl_arm", episodes=1)
    with pytest.raises(FileNotFoundError, match=re.escape(f"robolearn deploy {folder}/seed_1 --format torchscript ...)")):
        deploy(folder, "dxl_arm", episodes=1, fmt="torchscript")  # the format asked for, kept in what it names
    (folder / "cartpole").mkdir()  # a newer export of another task: listed, not named as the one to deploy
    write_run_config(folder / "cartpole", config="ppo_cartpole")
    export_controller(TowardTarget(), folder / "cartpole" / "export", ("torchscript",), extra={"task": "cartpole"})
    with pytest.raises(FileNotFoundError, match=re.escape(f"{folder}/seed_1; deploy one (the newest arm_reach export: "
                                                          f"robolearn deploy {folder}/seed_1 ...)")):
        deploy(folder, "dxl_arm", episodes=1)
    shutil.rmtree(folder / "seed_1" / "export")
    with pytest.raises(FileNotFoundError, match=re.escape(f"its exported runs ({folder}/cartpole) were trained on "
                                                          "other tasks than arm_reach")):
        deploy(folder, "dxl_arm", episodes=1)


def test_deploy_reports_each_episode_and_draws_its_joints(run_dir, make_emulator, capsys):
    """deploy.json gives each episode's return, success and safety interventions; the recording keeps, per
    step, the goal before the safety layer and the rules that overruled it; deploy.png draws them."""
    write_run_config(run_dir, "env.kwargs.max_episode_steps=20")
    emulator = make_emulator(realtime=True)
    with pytest.warns(UserWarning, match="expect jump_limit events"):
        code = main(["deploy", str(run_dir), "--robot", "dxl_arm", "--port", emulator.port, "--episodes", "2",
                     "--target", "0.15", "0.0", "0.15", "--safety", "max_step=0.1", "--safety", "watchdog_s=0.5",
                     "--safety", "stop_after_s=2.0", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    summary = json.loads(out.strip().splitlines()[-1])
    recording = Path(summary["recording"])
    episodes = summary["per_episode"]
    assert [e["file"] for e in episodes] == ["episode_00000.npz", "episode_00001.npz"]
    first = load_episode(recording / "episode_00000.npz")
    assert episodes[0]["steps"] == 20 and episodes[0]["return"] == pytest.approx(float(first["rewards"].sum()), rel=1e-6)
    assert isinstance(episodes[0]["success"], bool) and episodes[0]["success"] == bool(first["success"])
    # The pose is up to 0.4 rad from home: the 0.1 rad jump limit overrules the first steps, not the task's 0.2
    assert first["safety_events"][0] == "jump_limit" and first["safety_events"][-1] == ""
    np.testing.assert_allclose(first["goals"][0], np.clip(first["commanded_actions"][0], -0.2, 0.2), atol=1e-6)
    assert np.abs(first["actions"][0]).max() <= 0.1 + 1e-6 < np.abs(first["goals"][0]).max()
    counted = sum(e["safety_events"].get("jump_limit", 0) for e in episodes)
    assert counted == summary["safety_events"]["jump_limit"] > 0  # the per-episode counts add up to the run's
    # (a loaded machine may add a watchdog_hold after it: the line's counts are whatever the episode's are)
    assert re.search(r"episodes:    0: return -?\d+\.\d+ in .*\d+ jump_limit[,)]", out)
    from sims.tasks.arm_reach import fingertip_position

    tip = fingertip_position(torch.as_tensor(first["obs/joint_state"][-1:, :4], dtype=torch.float64))[0]
    final = float((tip - torch.tensor([0.15, 0.0, 0.15], dtype=torch.float64)).norm())  # from the fixed target
    assert episodes[0]["final_distance_m"] == pytest.approx(final, rel=1e-4, abs=1e-6)
    assert episodes[0]["success"] == (final < 0.02) and episodes[0]["min_distance_m"] <= final
    # the safety layer saw them all (the episode's from its float32 recording: within its rounding)
    assert 0 < episodes[0]["peak_joint_speed"] <= summary["peak_joint_speed"] * (1 + 1e-6)
    assert re.search(r"ended \d+\.\d cm away, nearest \d+\.\d cm", out)
    assert summary["plot"] == str(recording / "deploy.png")
    assert (recording / "deploy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", str(recording)]) == 0  # any recording, drawn again on demand
    assert (recording / "recording.png").stat().st_size > 10_000


def test_a_stop_while_the_plot_is_drawn_keeps_the_summary(run_dir, make_emulator, monkeypatch, capsys):
    """A Ctrl+C or kill during deploy.png's drawing (after the park) had lost deploy.json and the report."""
    import robolearn.recording_plot

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt("SIGTERM")

    monkeypatch.setattr(robolearn.recording_plot, "plot_recording", stopped)
    write_run_config(run_dir, "env.kwargs.max_episode_steps=5")
    emulator = make_emulator(realtime=True)
    summary = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=1, seed=0, safety=PATIENT)
    assert summary["plot"] is None and summary["episodes"] == 1
    saved = json.loads((Path(summary["recording"]) / "deploy.json").read_text())
    assert saved["episodes"] == 1 and saved["plot"] is None
    assert f"deploy.png not drawn (stopped): `robolearn plot {summary['recording']}` draws it" in capsys.readouterr().err


def test_the_report_names_the_peak_speed_an_overspeed_hold_stopped(run_dir):
    summary = {"episodes": 1, "port": "/dev/pts/9", "return_mean": 1.0, "success_rate": 1.0, "seed": 0,
               "task": {"max_episode_steps": 100, "safety_max_step": 0.2}, "safety": {"max_velocity": 4.0},
               "loop": {"rate_hz": 50, "steps": 100, "overruns": 0, "jitter_ms_p50": 0.0, "jitter_ms_p99": 0.1,
                        "interrupted": False},
               "safety_events": {"overspeed": 2, "jump_limit": 1}, "recording": None,
               "per_episode": [{"steps": 100, "return": 1.0, "success": True, "interrupted": False,
                                "safety_events": {"overspeed": 2}, "peak_joint_speed": 4.36}]}
    text = report({**summary, "peak_joint_speed": 4.36})
    assert "deployed:    1 episode on /dev/pts/9" in text and "safety:      jump_limit 1, overspeed 2" in text
    assert "joints reached 4.36 rad/s, above safety.max_velocity 4; if that is normal motion, allow it: " \
           "--safety max_velocity=4.8" in text
    assert "overspeed:" not in report({**summary, "peak_joint_speed": float("nan")})  # a broken reading: no hint
    many = {**summary, "per_episode": summary["per_episode"] * 11}  # --no-record had been sent to deploy.json
    assert "episodes:    11, each in the summary's per_episode (--json prints it; not recorded, so no deploy.json)" \
        in report(many)
    assert "episodes:    11, each in deploy.json's per_episode and deploy.png" in report({**many, "recording": "r"})
    tighter = {**summary, "task": {**summary["task"], "max_goal_step": 0.2, "safety_max_step": 0.1}}
    assert "goal steps <= 0.1 rad (safety.max_step; trained up to 0.2)" in report(tighter)  # it had said "as trained"
    same = {**tighter, "task": {**tighter["task"], "safety_max_step": 0.2}}
    assert "goal steps <= 0.2 rad (as trained)" in report(same)
    cut = {**summary, "safety": {"max_velocity": 4.0, "enabled": False}, "safety_events": {},
           "per_episode": [*summary["per_episode"], {**summary["per_episode"][0], "interrupted": True}]}
    text = report(cut)  # a recording's cut-short episode is said beside the ended ones; safety off is not "none"
    assert "deployed:    1 episode on /dev/pts/9 (and 1 cut short, kept)" in text
    assert "safety:      off (safety enabled=false)" in text
    assert "overran" not in text
    late = report({**summary, "loop": {**summary["loop"], "overruns": 90}})  # 90 of 100: the arm ran slower than trained
    assert "90% of the periods overran: each step's read, decision and write took longer than 20 ms" in late
    assert "loop:        50 Hz, 100 steps, 1 overrun, jitter" in report({**summary, "loop": {**summary["loop"],
                                                                                "overruns": 1}})  # not "1 overruns"
    slower = report({**summary, "loop": {**summary["loop"], "overruns": 190}})  # steps that skipped periods too
    assert "190 periods overran (late or skipped) in 100 steps: each step's read" in slower  # (it had said "190%")


@pytest.mark.parametrize("kwargs, says", [
    ({"seed": -1}, r"seed \(--seed\) must be a whole number of at least 0, got -1"),
    ({"retries": -1}, r"retries \(--retries\) must be a whole number of at least 0, got -1"),
    ({"safety_overrides": {"ramp_speed": 1e9}}, r"ramp_speed 1e\+09 rad/s is above what the servos move at \(max_speed, else velocity_limit: 4.8 rad/s\)"),
    ({"port": ""}, "--port is empty"),
    ({"safety_overrides": {"position_margin": 1.7}}, r"safety.position_margin 1.7 leaves j2 no range: its limits "
                                                     r"\[-1.7, 1.7\] are 3.4 rad apart"),  # (it had named no joint)
], ids=["seed", "retries", "ramp", "port", "margin"])
def test_deploy_settings_that_would_misbehave_are_refused_before_connecting(run_dir, kwargs, says):
    """Each had connected and moved the robot first (a negative seed failed after torque on; a ramp faster
    than the servos jumped and parked short; an empty port used the config's instead)."""
    with pytest.raises(ValueError, match=says):
        deploy(run_dir, "dxl_arm", **{"port": "/dev/null", **kwargs})


def test_a_robot_config_whose_port_is_empty_is_refused_in_words(run_dir, tmp_path):
    """`port: ""` in the robot YAML had failed at connect as "cannot open : ... No such file or directory: ''"."""
    config = tmp_path / "arm.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(robot_config_path("dxl_arm").read_text()), "port": ""}))
    with pytest.raises(ValueError, match=r"the robot config's port is empty: set it to the serial port"):
        deploy(run_dir, config)

@pytest.mark.parametrize("kwargs, error, says", [
    ({"fmt": "pt"}, ValueError, re.escape("fmt='pt' (--format): choose one of ['onnx', 'torchscript']")),
    ({"safety_overrides": ["max_velocity=6"]}, TypeError,
     r"give a mapping of safety settings, e.g. \{'max_velocity': 6.0\}, got \['max_velocity=6'\] "
     r"\(hardware.safety.parse_overrides makes one of 'key=value' strings\)"),
], ids=["fmt", "overrides"])
def test_deploy_arguments_of_the_wrong_kind_are_said_in_words(run_dir, kwargs, error, says):
    """From Python these had failed as a bare KeyError: 'pt' and "'list' object is not a mapping"."""
    with pytest.raises(error, match=says):
        deploy(run_dir, "dxl_arm", **{"port": "/dev/null", **kwargs})


def test_deploying_with_the_seed_of_the_recording_it_trained_on_is_said(run_dir, make_emulator, tmp_path, monkeypatch):
    """An offline run on an imported deploy, deployed with that deploy's seed, reaches for its training targets."""
    from robolearn.data import DatasetWriter, RandomController, record

    monkeypatch.setenv("ROBOLEARN_DATASETS", str(tmp_path / "datasets"))
    with sims.make_env("arm_reach", 1, seed=0, max_episode_steps=5) as env, \
            DatasetWriter("arm-robot", env.observation_spec, env.action_spec, metadata={"recording": {"seed": 3}}) as w:
        record(RandomController(env), env, w, episodes=1, progress=False)
    write_run_config(run_dir, "dataset=arm-robot", "env.kwargs.max_episode_steps=5")
    emulator = make_emulator()
    with pytest.warns(UserWarning, match="seed 3 draws the targets of the recording this controller trained on"):
        deploy(run_dir, "dxl_arm", port=emulator.port, episodes=1, seed=3, safety=PATIENT, record=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        deploy(run_dir, "dxl_arm", port=emulator.port, episodes=1, seed=4, safety=PATIENT, record=False)
        with sims.make_env("arm_reach", 1, seed=0, max_episode_steps=5) as env, \
                DatasetWriter("arm-fixed", env.observation_spec, env.action_spec,
                              metadata={"recording": {"seed": 3, "target": [0.15, 0.0, 0.15]}}) as w:
            record(RandomController(env), env, w, episodes=1, progress=False)
        write_run_config(run_dir, "dataset=arm-fixed", "env.kwargs.max_episode_steps=5")
        deploy(run_dir, "dxl_arm", port=emulator.port, episodes=1, seed=3, safety=PATIENT, record=False)  # drew none


def test_the_seed_of_a_recording_a_merge_joined_is_said_too(run_dir, make_emulator, tmp_path, monkeypatch):
    """Two deploys of other seeds, merged (as the small-dataset warning advises), keep their recordings' metadata
    per source under ``sources``: deploying with either seed had said nothing of its training targets."""
    from robolearn.data import Dataset, DatasetWriter, RandomController, merge, record

    monkeypatch.setenv("ROBOLEARN_DATASETS", str(tmp_path / "datasets"))
    for seed in (3, 4):
        with sims.make_env("arm_reach", 1, seed=0, max_episode_steps=5) as env, \
                DatasetWriter(f"arm-robot-{seed}", env.observation_spec, env.action_spec,
                              metadata={"recording": {"seed": seed}}) as w:
            record(RandomController(env), env, w, episodes=1, progress=False)
    merge([Dataset.load("arm-robot-3"), Dataset.load("arm-robot-4")], "arm-robots")
    write_run_config(run_dir, "dataset=arm-robots", "env.kwargs.max_episode_steps=5")
    emulator = make_emulator()
    with pytest.warns(UserWarning, match="seed 4 draws the targets of the recording this controller trained on"):
        deploy(run_dir, "dxl_arm", port=emulator.port, episodes=1, seed=4, safety=PATIENT, record=False)


@pytest.mark.parametrize("robot", ["dxl_arm", robot_config_path("dxl_arm")], ids=["name", "path"])
def test_an_arm_takes_its_robot_config_as_deploy_does(robot, make_emulator):
    """DynamixelArm("dxl_arm") had failed as "'str' object has no attribute 'calibration'" where deploy takes the name."""
    from robolearn.runtime import run

    emulator = make_emulator()
    arm = DynamixelArm(robot, port=emulator.port, safety=PATIENT)
    assert arm.joint_names == ["j1", "j2", "j3", "j4"] and arm.config == load_robot_config("dxl_arm")
    with arm:
        assert run(TowardTarget(), arm, steps=3, close_env=False).steps == 3


def test_a_missing_run_is_said_so_from_python_too(tmp_path):
    """Only the CLI had said it; deploy() called it a run 'that stopped before its first [checkpoint]'."""
    with pytest.raises(FileNotFoundError, match=rf"^{tmp_path / 'nope'}: no such run directory \(`robolearn list`"):
        deploy(tmp_path / "nope", "dxl_arm", port="/dev/null")


def test_a_deploy_not_recorded_returns_the_same_keys_with_none_and_still_reports_each_episode(run_dir, make_emulator):
    """record=False had left 'plot' out of the summary: summary['plot'] was a KeyError there alone. And its
    report had no line per episode (per_episode came from the recording alone): --no-record said only the mean."""
    write_run_config(run_dir, "env.kwargs.max_episode_steps=5")
    emulator = make_emulator()
    summary = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=2, safety=PATIENT, record=False)
    recorded = deploy(run_dir, "dxl_arm", port=emulator.port, episodes=2, safety=PATIENT)
    assert set(summary) == set(recorded) and summary["recording"] is summary["plot"] is None
    assert not (run_dir / "deploy").exists() or [recorded["recording"]] == list((run_dir / "deploy").iterdir())
    assert [e["file"] for e in summary["per_episode"]] == [None, None]
    assert [e["steps"] for e in summary["per_episode"]] == [e["steps"] for e in recorded["per_episode"]] == [5, 5]
    assert [e["return"] for e in summary["per_episode"]] == pytest.approx(
        [e["return"] for e in recorded["per_episode"]], abs=0.05)  # the same targets (seed 0); an emulator's timing
    text = report(summary)
    assert "episodes:    0: return" in text and "\n             1: return" in text and "recording:" not in text


def test_an_error_with_json_is_a_json_line_too(run_dir, tmp_path, capsys):
    """deploy --json (and eval's, replay's) had printed nothing on stdout on an error: a script parsing the last
    line saw no JSON at all."""
    for argv in (["deploy", str(run_dir), "--robot", "dxl_arm", "--port", str(tmp_path / "no-such-port"), "--json"],
                 ["eval", str(tmp_path / "no-run"), "--json"],
                 ["replay", str(tmp_path / "episode_00000.npz"), "--robot", "dxl_arm", "--json"]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        said = json.loads(captured.out.strip().splitlines()[-1])["error"]
        assert said and f"error: {said}" in captured.err
    assert main(["eval", str(tmp_path / "no-run")]) == 2 and capsys.readouterr().out == ""  # without --json: stderr only
    # `... --json | head` may have closed stdout: the error still ends the command quietly, status 2
    closed = subprocess.Popen([sys.executable, "-m", "robolearn", "eval", str(tmp_path / "no-run"), "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    closed.stdout.close()
    err = closed.stderr.read()
    assert closed.wait(timeout=120) == 2 and "Traceback" not in err and "no such run directory" in err, err


def test_a_servo_left_limp_outside_its_limits_mid_run_does_not_stop_the_others_parking(emulator):
    """A servo that rebooted and rests past its limits is left limp at the re-arm; every later check had found it
    limp again, re-armed the others anew and restarted the park, until the park was given up and the arm dropped."""
    arm = _arm_out_at_a_pose(emulator)
    emulator.reboot(3)
    emulator.set_joint_positions({3: 2.6})  # j3's limits: [-2.4, 2.4]; it rests there (on a stop, say)
    servo, step = emulator._servos[3], emulator._step

    def resting_there(steps):
        step(steps)
        if not servo.torque:
            emulator.data.qpos[servo.qpos], emulator.data.qvel[servo.dof] = 2.6, 0.0

    emulator._step = resting_there
    with pytest.raises(ServosStopped, match=r"servos \[3\] were left limp: they had fallen outside their limits"):
        try:
            for _ in range(50):
                arm.step(torch.tensor([[0.6, 0.6, -0.6, 0.0]]))
        finally:
            arm.close()
    assert arm.rearms == 1 and _parked(emulator, but=(3,))


def test_a_controller_trained_under_a_fixed_delay_the_robot_does_not_add_is_said_before_connecting(tmp_path):
    """env.delay (a fixed observation delay or action latency in control steps) is part of what the controller
    learned to compensate; the robot adds none, so it acts on observations fresher than it was trained on.
    Evaluation keeps the run's delays; deploy had dropped them without a word."""
    export_controller(TowardTarget(), tmp_path / "export", ("torchscript",),
                      extra={"task": "arm_reach", "control_dt": 0.02})
    write_run_config(tmp_path, "env.delay.obs_delay_steps=2")
    with pytest.warns(UserWarning, match=r"env\.delay.*obs_delay_steps=2"), \
            pytest.raises(NotConnectedError, match="does-not-exist"):
        deploy(tmp_path, "dxl_arm", port="/dev/does-not-exist")  # said before the port is opened


def test_an_export_alone_says_the_delays_its_controller_was_trained_under(tmp_path):
    """controller.json records env.delay and env.randomization: an export folder copied to the robot's computer
    (no config.yaml) had deployed a controller trained under a fixed delay without a word. The export's own
    record wins over a config.yaml beside it; the report says the delays, to hold the robot's latency against."""
    from hardware.deploy import report, trained_dynamics

    cfg = load_config("ppo_arm_reach", ["env.delay.action_latency_steps=1",
                                        "env.randomization.action_latency_s=[0.0,0.03]"])
    export_controller(TowardTarget(), tmp_path / "export", ("torchscript",), extra=task_meta(cfg.env, 0.02))
    with pytest.warns(UserWarning, match=r"env\.delay action_latency_steps=1 \(control steps\)"), \
            pytest.raises(NotConnectedError, match="does-not-exist"):
        deploy(tmp_path, "dxl_arm", port="/dev/does-not-exist")  # no config.yaml: the export alone says it
    write_run_config(tmp_path, "env.delay.obs_delay_steps=3")  # (a config changed after the export)
    with pytest.warns(UserWarning, match=r"env\.delay action_latency_steps=1 \(control steps\)"), \
            pytest.raises(NotConnectedError):
        deploy(tmp_path, "dxl_arm", port="/dev/does-not-exist")
    meta = ExportedController(tmp_path / "export" / "controller.pt").meta
    trained = trained_dynamics(meta)
    assert trained == {"randomization": {"action_latency_s": [0.0, 0.03]}, "delay": {"action_latency_steps": 1}}
    summary = {"episodes": 1, "port": "/dev/pts/9", "return_mean": 1.0, "success_rate": None, "seed": 0,
               "task": {"max_episode_steps": 100, "safety_max_step": 0.2}, "safety": {"max_velocity": 4.0},
               "loop": {"rate_hz": 50, "steps": 100, "overruns": 0, "jitter_ms_p50": 0.0, "jitter_ms_p99": 0.1,
                        "interrupted": False}, "safety_events": {}, "recording": None, "per_episode": []}
    assert "trained:     under action latency 1 step (env.delay), action latency 0-0.03 s (env.randomization)" \
           in report({**summary, "trained_under": trained})
    nominal = trained_dynamics({**meta, "randomization": {}, "delay": {}})
    for said in (nominal, trained_dynamics({}), None):  # trained under none; an older export's controller.json
        assert "trained:" not in report({**summary, "trained_under": said})
    (tmp_path / "config.yaml").unlink()
    with warnings.catch_warnings():  # an export trained without delays, alone: nothing to say of them
        warnings.simplefilter("error")
        export_controller(TowardTarget(), tmp_path / "export", ("torchscript",),
                          extra=task_meta(load_config("ppo_arm_reach", []).env, 0.02))
        with pytest.raises(NotConnectedError):
            deploy(tmp_path, "dxl_arm", port="/dev/does-not-exist")


def test_a_ctrl_c_as_run_takes_the_robots_stop_signals_still_parks_it_and_gives_every_signal_back(make_emulator,
                                                                                                    monkeypatch):
    """run() took a robot's stop signals before its try, and Robot.stop_signals installed its handler in a
    comprehension before its own: a first Ctrl+C that landed among those installs (the handler raises it) had ended
    run() with the arm neither parked nor torqued off by it, and left the handler on SIGINT, every later Ctrl+C
    then said as 'a second stop' and never raised (and deploy's SIGTERM and Ctrl+\\ handlers installed)."""
    from robolearn.runtime import STOP_SIGNALS, run

    class Still(torch.nn.Module):
        decision_period = 1

        def act(self, obs):
            return torch.zeros(obs["policy"].shape[0], 4)

        def reset(self, mask=None):
            pass

    emulator = make_emulator()
    arm = _arm_out_at_a_pose(emulator)
    watched = (*STOP_SIGNALS, *((signal.SIGQUIT,) if hasattr(signal, "SIGQUIT") else ()))
    before = {signum: signal.getsignal(signum) for signum in watched}
    install, landed = signal.signal, []

    def ctrl_c_among_the_installs(signum, handler):
        if getattr(handler, "__name__", "") == "take" and signum != signal.SIGINT:  # the robot's, after SIGINT's
            monkeypatch.setattr(signal, "signal", install)  # (once)
            landed.append(signum)
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # a Ctrl+C lands here: the first stop, raised
        return install(signum, handler)

    monkeypatch.setattr(signal, "signal", ctrl_c_among_the_installs)
    try:
        stats = run(Still(), arm, steps=5)
    except KeyboardInterrupt:  # (raised past run's try: no close)
        stats = None
    finally:
        monkeypatch.setattr(signal, "signal", install)
    assert landed
    assert not arm.connected and _parked(emulator)  # run closed it: parked, torque off
    assert stats is not None and stats.interrupted  # a stop, as one in the loop is
    assert {signum: signal.getsignal(signum) for signum in watched} == before


def test_stops_after_a_kept_second_one_leave_the_arm_torque_off_where_it_stood(make_emulator, monkeypatch, capsys):
    """A second Ctrl+C kept before the close (the loop's clean-up saving) skips the close's park: torque off where
    the arm stands, said as ParkSkipped. It is the close's second: a third, landing as the skip is said (the close
    still parking), had been taken as the second and raised again, out of the stop before its torque-off (the
    ParkSkipped lost, deploy ended as "interrupted", torque off only as the bus closed); it is ignored, as is a
    fourth in the torque-off."""
    from hardware.safety import ParkSkipped

    landed = []

    def stop_lands(where):  # a Ctrl+C landing here: the handler installed then runs, as Python runs it there
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        landed.append(where)  # (not noted where it raised)

    class SaidAsAThirdStopLands(ParkSkipped):
        def __init__(self, *args):
            stop_lands("the skip said")
            super().__init__(*args)

    emulator = make_emulator()
    arm = _arm_out_at_a_pose(emulator)
    torque_off = arm._torque_off_quietly

    def fourth_stop_in_the_torque_off():
        if "the skip said" in landed and "the torque-off" not in landed:
            stop_lands("the torque-off")
        return torque_off()

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with arm.stop_signals():
            with pytest.raises(KeyboardInterrupt, match="SIGINT"):
                stop_lands("the loop")  # the first ends the loop
            stop_lands("the loop's clean-up")  # the second is kept for the close
            monkeypatch.setattr("hardware.robot.ParkSkipped", SaidAsAThirdStopLands)
            monkeypatch.setattr(arm, "_torque_off_quietly", fourth_stop_in_the_torque_off)
            try:
                arm.close()
                raised = None
            except BaseException as err:  # noqa: BLE001 (a KeyboardInterrupt out of a test ends pytest's session)
                raised = err
    finally:
        signal.signal(signal.SIGINT, previous)
    assert isinstance(raised, ParkSkipped) and "parking was skipped" in str(raised), repr(raised)
    assert landed == ["the loop's clean-up", "the skip said", "the torque-off"]
    state = emulator.state()
    assert not any(s.torque_enabled for s in state.values())  # torque off
    assert max(abs(s.position) for s in state.values()) > 0.4  # where the arm stood, not parked at home
    assert not arm.connected
    assert capsys.readouterr().err.count("SIGINT: a second stop: no park to the safe pose") == 1


def test_the_trained_delays_are_said_only_where_they_delay(tmp_path):
    """What deploy keeps and says of a controller's trained delays: a delay key alone is a record; a delay of 0
    steps, a latency range at width 0 and the full width are no delay, no words and no width; and a
    controller.json's own record, no delay included, wins over a config.yaml beside it."""
    from hardware.deploy import _warn_if_trained_with_delay, trained_dynamics, trained_latency

    assert trained_dynamics({"delay": {"obs_delay_steps": 2}}) == {"randomization": {}, "delay": {"obs_delay_steps": 2}}
    assert trained_latency({"delay": {"obs_delay_steps": 0, "action_latency_steps": 2}}) == \
        "action latency 2 steps (env.delay)"
    latency = {"action_latency_s": [0.0, 0.03]}
    assert trained_latency({"randomization": {**latency, "width": 1}}) == "action latency 0-0.03 s (env.randomization)"
    assert trained_latency({"randomization": {**latency, "width": 0.5}}) == \
        "action latency 0-0.03 s (env.randomization at width 0.5)"
    assert trained_latency({"randomization": {**latency, "width": 0}}) is None
    write_run_config(tmp_path, "env.delay.obs_delay_steps=3")
    with pytest.warns(UserWarning, match=r"env\.delay obs_delay_steps=3 \(control steps\)"):
        _warn_if_trained_with_delay(tmp_path, {})  # an export from before controller.json recorded it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_if_trained_with_delay(tmp_path, {"delay": {}})  # the export's own record: none
        _warn_if_trained_with_delay(tmp_path, {"delay": {"obs_delay_steps": 0, "action_latency_steps": 0}})


def test_an_exported_file_given_for_the_run_names_the_run(run_dir, tmp_path):
    """deploy <run>/export/controller.pt had said "no such run directory" of a file that is there."""
    exported = run_dir / "export" / "controller.pt"
    with pytest.raises(FileNotFoundError, match=rf"^{exported}: a file of an export; deploy takes the run's folder: "
                                                rf"robolearn deploy {run_dir} \.\.\."):
        deploy(exported, "dxl_arm", port="/dev/null")
    (other := tmp_path / "notes.txt").touch()
    with pytest.raises(FileNotFoundError, match=rf"^{other}: a file, not a run's folder"):
        deploy(other, "dxl_arm", port="/dev/null")


def test_a_robot_config_path_that_is_not_there_is_said_missing(tmp_path, monkeypatch):
    """A YAML path that does not exist had been told to "give a YAML path", which it was."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=rf"no robot config 'configs/robots/dxl_arm.yaml': no such file \(from "
                                                rf"{tmp_path}\); give a YAML path that exists, or a name in "
                                                r"configs/robots/: dxl_arm"):
        robot_config_path("configs/robots/dxl_arm.yaml")
    with pytest.raises(FileNotFoundError, match=r"no robot config 'dxl_armm': give a YAML path or one of: dxl_arm"):
        robot_config_path("dxl_armm")


def test_a_robot_config_object_given_where_a_name_or_path_goes_is_said_in_words(run_dir):
    """deploy(run, RobotConfig) had failed as pathlib's "expected str, bytes or os.PathLike object, not RobotConfig"."""
    with pytest.raises(TypeError, match=r"a robot config is given as a name in configs/robots/ or a YAML path, got "
                                        r"RobotConfig; write it to a file \(RobotConfig.save\(path\)\)"):
        deploy(run_dir, load_robot_config("dxl_arm"), port="/dev/null")


def test_a_line_lost_while_parking_after_a_ctrl_c_says_the_ctrl_c_came_first(run_dir, make_emulator, monkeypatch,
                                                                             capsys):
    """A Ctrl+C ends the loop and the close parks; the line dies during that park. The error said only
    "connection lost before or during the safe stop", as if the line had ended the run: the Ctrl+C, what
    began the stop, was not said."""
    emulator, arms = make_emulator(realtime=True), _arms_made_by_deploy(monkeypatch)

    def press_then_pull() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        until = time.monotonic() + 60
        while not arms[0].parking and time.monotonic() < until:
            time.sleep(0.005)
        emulator.disconnect()  # a pulled cable, as the arm ramps to its safe pose

    after_recorded_steps(monkeypatch, 10, press_then_pull)
    status = main_with_ctrl_c(["deploy", str(run_dir), "--robot", "dxl_arm", "--port", emulator.port])
    err = capsys.readouterr().err
    assert status == 2, err
    assert re.search(r"^error: connection lost before or during the safe stop.*; the run had been stopped "
                     r"\(SIGINT: Ctrl\+C\) when this was found, during the safe stop; recording", err, re.MULTILINE), err


def test_a_ctrl_c_during_the_park_after_the_last_episode_still_reports_the_episodes(run_dir, make_emulator,
                                                                                    monkeypatch, capsys):
    """Every episode ran, then a Ctrl+C came as the close parked: the park went on, but deploy ended on
    "interrupted" alone, no report, and deploy.json said ``interrupted: false`` beside ``error: KeyboardInterrupt``.
    It is an interrupted deploy like one stopped in the loop: parked, torque off, reported, status 130."""
    write_run_config(run_dir, "env.kwargs.max_episode_steps=20")
    emulator, pressed = make_emulator(realtime=True), []

    class CtrlCInThePark(DynamixelArm):
        def _write(self, goal):
            if self.parking and not pressed:  # (on this thread: the handler runs here, in the park)
                pressed.append(1)
                os.kill(os.getpid(), signal.SIGINT)
            return super()._write(goal)

    monkeypatch.setattr("hardware.deploy.DynamixelArm", CtrlCInThePark)
    status = main_with_ctrl_c(["deploy", str(run_dir), "--robot", "dxl_arm", "--port", emulator.port,
                               "--episodes", "1", "--safety", "watchdog_s=0.5", "--safety", "stop_after_s=2.0"])
    out = capsys.readouterr().out
    assert pressed and status == 130, out
    assert re.search(r"^deployed:    1 episode on .*^episodes:    0: return .* in 20 steps.*"
                     r"^interrupted: the robot was parked and its torque turned off$", out,
                     re.MULTILINE | re.DOTALL), out
    saved = json.loads((next((run_dir / "deploy").iterdir()) / "deploy.json").read_text())
    assert saved["interrupted"] and saved["loop"]["interrupted"] and saved["error"] is None
    assert saved["episodes"] == 1 and len(saved["per_episode"]) == 1
    assert _parked(emulator)  # the park went on to home, then torque off


def test_a_ctrl_c_held_while_a_failed_connect_turns_torque_off_is_said_as_interrupted_with_the_failure(
        run_dir, make_emulator, monkeypatch, capsys):
    """A connect failed (no servo answers), and Ctrl+C, held down, came as it turned torque off: those stops were
    held until the torque-off ended, then dropped, and the deploy ended on the connect's error alone (status 2), as
    if never interrupted. It is interrupted (status 130), and says what failed the connect."""
    from hardware.dynamixel.bus import DynamixelBus

    emulator = make_emulator(realtime=True)
    emulator.faults.drop_reply = 1.0  # no servo answers: the connect fails on its first ping
    torque, pressed = DynamixelBus.enable_torque, []

    def ctrl_c_held_in_the_torque_off(self, on, *args, **kwargs):
        if not on:
            for _ in range(2):  # (a held key repeats)
                os.kill(os.getpid(), signal.SIGINT)
            pressed.append(1)
        return torque(self, on, *args, **kwargs)

    monkeypatch.setattr(DynamixelBus, "enable_torque", ctrl_c_held_in_the_torque_off)
    status = main_with_ctrl_c(["deploy", str(run_dir), "--robot", "dxl_arm", "--port", emulator.port])
    err = capsys.readouterr().err
    assert pressed and status == 130, err
    assert re.search(r"^interrupted: SIGINT; connecting had failed already: CommTimeoutError: no reply from servo 1 "
                     r"to answer a ping", err, re.MULTILINE), err
    assert "error:" not in err and not (run_dir / "deploy").exists()
