"""Replay a recorded episode on a robot: slow ramp to its first pose, then its actions.

The recording is one ``episode_*.npz`` of :mod:`robolearn.recording` (a
deployment, or anything recorded with a ``joint_state`` observation group). The
robot first ramps to the recorded initial joint positions at the safety layer's
ramp speed, then sends the recorded (sent) actions one per control tick,
through the same safety layer as deployment. It reports how far the joints
strayed from the recording, step by step. :func:`replay` is ``robolearn replay``
for a Dynamixel arm; :func:`replay_on_robot` replays on any connected robot.
"""

from __future__ import annotations

import json
import signal
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hardware.dxl_arm import DynamixelArm, load_robot_config, safety_settings
from hardware.robot import Robot
from hardware.safety import add_to_message
from robolearn.config import build_dataclass
from robolearn.recording import load_episode
from robolearn.runtime import StepSink, say_what_the_stop_left, stops_as_ctrl_c
from sims.tasks.arm_reach import ArmReach


class ReplayError(ValueError):
    """A recording that cannot be replayed on this robot; the message names the file and key."""


def recorded_task_settings(path: str | Path, task: str = "arm_reach") -> dict[str, Any]:
    """The settings of ``task`` a deployment recorded beside episode ``path`` (its folder's ``metadata.json``:
    ``frame_skip``, episode length...), so a replay runs at the recording's control rate; {} without them.
    As an import of the recording reads them (:func:`robolearn.data.recordings.recorded_task_settings`)."""
    import json

    from robolearn.data.recordings import recorded_task_settings as split_settings

    try:
        meta = json.loads((Path(path).parent / "metadata.json").read_text())
    except (OSError, ValueError):
        return {}
    return split_settings({"recording": meta}, task)[0] if isinstance(meta, dict) else {}


def recorded_control_dt(path: str | Path) -> float | None:
    """The control period a recording beside episode ``path`` ran at (its ``metadata.json``), or None."""
    try:
        dt = json.loads((Path(path).parent / "metadata.json").read_text()).get("control_dt")
    except (OSError, ValueError, AttributeError):
        return None
    return float(dt) if isinstance(dt, (int, float)) and not isinstance(dt, bool) and dt > 0 else None


def read_replayable(path: str | Path, joints: int) -> tuple[np.ndarray, np.ndarray]:
    """The recorded joint positions (T+1, joints) and actions (T, joints) of ``path``, validated."""
    path = Path(path)
    if path.is_dir() or path.suffix != ".npz":  # a recording's folder, its deploy.json...: say what to give
        episodes = sorted((path if path.is_dir() else path.parent).glob("episode_*.npz"))
        hint = f", e.g. {episodes[0]}" if episodes else " (a recording is the folder `robolearn deploy` writes)"
        raise ReplayError(f"{path}: give one episode_*.npz of a recording{hint}")
    if not path.exists():  # (had been "not a readable episode file (missing, truncated or corrupt: [Errno 2] ...")
        from robolearn.listing import few

        episodes = sorted(file.name for file in path.parent.glob("episode_*.npz"))
        there = (f"{path.parent} holds {few(episodes)}" if episodes else f"{path.parent} holds no episode_*.npz"
                 if path.parent.is_dir() else f"no folder {path.parent}")
        raise ReplayError(f"{path}: no such episode file; {there}")
    try:
        episode = load_episode(path)
    except ValueError as err:
        raise ReplayError(str(err)) from None
    for key in ("actions", "obs/joint_state"):
        if key not in episode:
            raise ReplayError(f"{path}: missing '{key}' (record with a robot that reports joint_state)")
    actions, state = episode["actions"], episode["obs/joint_state"]
    if actions.ndim != 2 or actions.shape[1] != joints:
        raise ReplayError(f"{path}: 'actions' has shape {actions.shape}, this robot takes (T, {joints})")
    if state.shape != (len(actions) + 1, 2 * joints):
        raise ReplayError(f"{path}: 'obs/joint_state' has shape {state.shape}, expected ({len(actions) + 1}, {2 * joints})")
    if not len(actions):  # (a replay had ramped the arm to its start, then failed on max() of no divergences)
        raise ReplayError(f"{path}: holds no steps, nothing to replay")
    if not (np.isfinite(actions).all() and np.isfinite(state).all()):
        raise ReplayError(f"{path}: NaN or inf in 'actions' or 'obs/joint_state'")
    return state[:, :joints].astype(np.float64), actions.astype(np.float64)


def runs_at(config: Any, dt: float | None) -> bool:
    """Whether robot config ``config`` replays a recording of control period ``dt`` (None: unknown) at its rate: it
    has no ``control_dt`` of its own (it then runs at the recording's), or that one."""
    return dt is None or config.control_dt is None or abs(config.control_dt - dt) <= 1e-9


def replay(path: str | Path, robot_config: str | Path, *, port: str | None = None,
           safety_overrides: Mapping[str, Any] | None = None, sink: StepSink | None = None) -> dict[str, Any]:
    """``robolearn replay``: episode ``path`` on the Dynamixel arm of ``robot_config`` (a name in
    ``configs/robots/`` or a YAML path) at the recording's rate and task settings, behind the robot config's
    safety settings with ``safety_overrides`` on top; a bad file is refused before the robot is touched, and a
    kill or a closed terminal stops safely as Ctrl+C does (Ctrl+\\: the emergency stop). Returns what
    :func:`replay_on_robot` does; ``sink`` records the replay as there."""
    settings = recorded_task_settings(path)  # at the recording's rate (a 100 Hz one ran at 50 Hz)
    task = build_dataclass(ArmReach, settings, "metadata.json task.") if settings else None
    config = load_robot_config(robot_config)
    dt = recorded_control_dt(path)
    if not runs_at(config, dt):  # (the arm had refused it as a controller's: "deploy a controller trained at the
        # config's rate", of a replay)
        raise ReplayError(f"{path}: recorded at control_dt {dt:g} s, the robot config {robot_config} runs at "
                          f"{config.control_dt:g} s (its control_dt): replay it with a robot config of the "
                          "recording's rate, or one without control_dt, which runs at the recording's")
    safety = safety_settings(config).updated(safety_overrides or {})
    robot = DynamixelArm(config, port=port, task=task, safety=safety)
    read_replayable(path, len(robot.home))
    connected = False
    try:
        with stops_as_ctrl_c(also={signal.SIGQUIT: lambda *_: robot.emergency_stop()}), robot:
            connected = True
            return replay_on_robot(path, robot, sink)
    except KeyboardInterrupt as err:
        if connected:  # the close parked and turned torque off (what cuts that short raises its own error instead):
            say_what_the_stop_left(err, "the robot was parked and its torque turned off")  # as deploy's report
        raise
    except Exception as err:
        _say_what_began_it(err)
        raise


def _say_what_began_it(err: Exception) -> None:
    """Add to ``err`` the error that ended the replay, where ``err`` is a later one (the safe stop failing after
    the line died): Python keeps that one as the context alone, which the CLI's one-line error leaves out."""
    began = err.__context__
    if isinstance(began, Exception) and not err.__suppress_context__ and str(began) and str(began) not in str(err):
        add_to_message(err, f"it began with {type(began).__name__}: {began}")


def replay_on_robot(path: str | Path, robot: Robot, sink: StepSink | None = None) -> dict[str, Any]:
    """Replay ``path`` on a connected ``robot``; returns the joint divergence from the recording. A robot
    at another rate than the recording's (its ``metadata.json``'s ``control_dt``) is refused. ``sink`` (a
    :class:`robolearn.recording.EpisodeRecorder`) records the replay as a deploy's episodes are, so that
    ``plot_recording`` draws the joints it moved (a replay shorter than the robot's episode is kept as cut short);
    once the robot starts moving it is closed on every exit."""
    joints = len(robot.home)
    recorded, actions = read_replayable(path, joints)
    dt = recorded_control_dt(path)
    if dt is None:  # an episode copied without its folder's metadata.json: its rate is not known
        warnings.warn(f"{path}: no metadata.json beside it gives the control rate it was recorded at: replayed at the "
                      f"robot's {1 / robot.control_dt:g} Hz, each goal held {robot.control_dt:g} s (copy the "
                      "recording's metadata.json beside it to replay at its own rate)", stacklevel=2)
    elif abs(dt - robot.control_dt) > 1e-9:  # else each goal is held for another time than recorded
        raise ReplayError(f"{path}: recorded at control_dt {dt:g} s, the robot runs at {robot.control_dt:g} s: build "
                          "it with the recording's task settings (hardware.replay.recorded_task_settings), or replay "
                          "with hardware.replay.replay, which does")
    if len(actions) > robot.max_episode_steps:
        raise ReplayError(f"{path}: {len(actions)} steps, longer than the robot's episode ({robot.max_episode_steps})")
    divergence = []
    try:
        obs = robot.start_at(recorded[0])
        start_error = float(np.abs(obs["joint_state"][0, :joints].numpy() - recorded[0]).max())
        for t, action in enumerate(actions):
            command = torch.as_tensor(action, dtype=torch.float32).unsqueeze(0)
            step = robot.step(command)
            if sink is not None:
                sink.add(obs, command, step.info.get("sent_action", command), step)
            obs = step.obs
            reached = step.info["final_obs"]["joint_state"][0, :joints].numpy()
            divergence.append(float(np.abs(reached - recorded[t + 1]).max()))
    finally:
        if sink is not None:
            sink.close()
    return {"recording": Path(path), "steps": len(actions), "start_error_rad": start_error,
            "divergence_rad_max": max(divergence), "divergence_rad_mean": float(np.mean(divergence)),
            "divergence_rad_final": divergence[-1], "safety_events": dict(robot.safety.events)}
