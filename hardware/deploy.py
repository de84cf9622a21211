"""``robolearn deploy``: an exported controller on a real (or emulated) robot, recorded.

Loads ``<run>/export/controller.pt`` (or ``.onnx``), checks it was trained for
the robot's task, observation and control rate, connects, runs the fixed-rate
loop for the requested episodes, records every step under
``<run>/deploy/<time>/`` and always ends with the robot parked and torque off.
Ctrl+C ends the run safely; Ctrl+\\ (SIGQUIT) is the emergency stop.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import torch

from hardware.dxl_arm import DynamixelArm, load_robot_config
from hardware.safety import SafetyConfig
from robolearn.checkpoint import atomic_write_bytes
from robolearn.export import FILENAMES, ExportedController
from robolearn.recording import EpisodeRecorder
from robolearn.runtime import run


def check_compatible(controller: ExportedController, robot: DynamixelArm, source: Path) -> None:
    """Refuse a controller trained for another task, observation or rate, naming the mismatch."""
    meta = controller.meta
    if meta.get("task") not in (None, "arm_reach"):
        raise ValueError(f"{source}: trained on task '{meta['task']}', but this robot does arm_reach")
    size = int(robot.observation_spec["policy"].shape[0])
    if meta.get("obs_size") != size or tuple(meta.get("obs_groups", ())) != ("policy",):
        raise ValueError(f"{source}: expects observation {meta.get('obs_groups')} of size {meta.get('obs_size')}, "
                         f"the robot gives ['policy'] of size {size}")
    dt = meta.get("control_dt")
    if dt is not None and abs(dt - robot.control_dt) > 1e-9:
        raise ValueError(f"{source}: trained at control_dt {dt} s, the robot runs at {robot.control_dt} s")


def warm_up(controller: ExportedController, robot: DynamixelArm, calls: int = 20) -> None:
    """Run the controller a few times before connecting: TorchScript and ONNX Runtime
    optimize on their first calls (tens to hundreds of ms), which must not land in the loop."""
    zeros = {name: torch.zeros(1, *space.shape) for name, space in robot.observation_spec.items()}
    for _ in range(calls):
        controller.act(zeros)


def deploy(run_dir: Path, robot_config: str | Path, *, port: str | None = None, episodes: int = 1,
           fmt: str = "torchscript", target: tuple[float, float, float] | None = None, record: bool = True,
           seed: int = 0, safety: SafetyConfig | None = None, retries: int = 3) -> dict[str, Any]:
    """Run ``episodes`` episodes of ``run_dir``'s exported controller on the robot; returns a summary."""
    path = Path(run_dir) / "export" / FILENAMES[fmt]
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no exported controller; run `robolearn export {run_dir}` first")
    controller = ExportedController(path)
    config = load_robot_config(robot_config)
    robot = DynamixelArm(config, port=port, target=target, safety=safety, retries=retries)
    check_compatible(controller, robot, path)
    out = Path(run_dir) / "deploy" / time.strftime("%Y%m%d-%H%M%S")
    recorder = EpisodeRecorder(out, metadata={"controller": str(path), "robot": str(robot_config),
                                              "port": robot.port, "control_dt": robot.control_dt}) if record else None
    warm_up(controller, robot)
    previous = signal.signal(signal.SIGQUIT, lambda *_: robot.emergency_stop())
    try:
        robot.connect()
        stats = run(controller, robot, episodes=episodes, sink=recorder, seed=seed)
    finally:
        signal.signal(signal.SIGQUIT, previous)
        robot.close()
    loop = stats.summary()
    summary: dict[str, Any] = {
        "run": str(run_dir), "port": robot.port, "episodes": stats.episodes,
        "return_mean": loop["return_mean"], "success_rate": loop["success_rate"],
        "safety_events": dict(robot.safety.events), "bus": vars(robot.bus.stats), "loop": loop,
        "recording": str(out) if record else None,
    }
    if record:
        atomic_write_bytes(out / "deploy.json", lambda f: f.write(json.dumps(summary, indent=2, default=str).encode()))
    return summary
