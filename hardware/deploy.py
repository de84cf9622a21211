"""``robolearn deploy``: an exported controller on a real (or emulated) robot, recorded.

Loads ``<run>/export/controller.onnx`` (or ``.pt``) and builds the robot's task
as it was trained (``controller.json``'s ``task_kwargs``, else the run's
``config.yaml``: the episode length, goal-step limit and success distance), checks the controller was
trained for the robot's task, observation and control rate, connects, runs the
fixed-rate loop for the requested episodes, records every step under
``<run>/deploy/<time>/`` (``<time>-1``, ``-2``... when taken; ``metadata.json`` and
``deploy.json`` record the seed that sampled the targets and the safety settings, ``deploy.json``
each episode's results, ``deploy.png`` draws the joints' commands and motion) and always ends
with the robot parked and torque off. Once connected, ``deploy.json`` is written
on every exit, with the error if one ended the run, and that error's message
names the recording. Ctrl+C ends the run safely; Ctrl+\\ (SIGQUIT) is the
emergency stop.
"""

from __future__ import annotations

import json
import math
import numbers
import signal
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import torch

from hardware.dxl_arm import DynamixelArm, load_robot_config, safety_settings
from hardware.safety import ParkSkipped, SafetyConfig, add_to_message
from robolearn import strict_json
from robolearn.checkpoint import atomic_write_bytes
from robolearn.config import ConfigError, build_dataclass, load_run_config
from robolearn.export import FILENAMES, ExportedController
from robolearn.listing import counted, few
from robolearn.recording import EpisodeRecorder, unique_directory
from robolearn.runtime import LoopStats, run, stops_as_ctrl_c, stops_held
from robolearn.run_lock import holder
from robolearn.runs import export_behind
from robolearn.shell import shell
from sims.tasks.arm_reach import ArmReach

TASK_KEYS = ("max_episode_steps", "max_goal_step", "success_distance", "frame_skip")
"""The task settings that must be positive and finite on a robot (the rest are reward weights and the like)."""


def run_task(run_dir: Path, meta: dict[str, Any]) -> ArmReach:
    """The arm-reach task as the controller was trained on it, so the robot runs the trained episode
    length, goal-step limit, success distance and rewards: from the export's own ``controller.json``
    (``meta``: ``task_kwargs``), or, for exports that predate it, from the run's ``config.yaml``."""
    if "task_kwargs" in meta:
        source, task_name, kwargs = Path(run_dir) / "export" / "controller.json", meta.get("task"), meta["task_kwargs"]
    else:
        source = Path(run_dir) / "config.yaml"
        if not source.is_file():
            raise FileNotFoundError(f"{run_dir}: neither the export's controller.json nor a config.yaml says the task "
                                    "settings the controller was trained with; export it again (`robolearn export RUN`)")
        env = load_run_config(run_dir).env
        task_name, kwargs = env.task, env.kwargs
    if task_name not in (None, "arm_reach"):
        raise ValueError(f"{source}: trained on task '{task_name}', but this robot does arm_reach")
    try:
        task = build_dataclass(ArmReach, kwargs, "env.kwargs.")
    except (ConfigError, TypeError, AttributeError) as err:
        raise ValueError(f"{source}: the task settings cannot build the arm_reach task for the robot: {err}") from None
    for key in TASK_KEYS:
        value = getattr(task, key)
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{source}: env.kwargs.{key} must be positive and finite to run on the robot, got {value}")
    return task


def check_controller_fits_robot(controller: ExportedController, robot: DynamixelArm, source: Path) -> None:
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


def warm_up(controller: ExportedController, robot: DynamixelArm, source: Path | None = None, calls: int = 20) -> None:
    """Run the controller a few times before connecting: TorchScript and ONNX Runtime optimize on their
    first calls (tens to hundreds of ms), which must not land in the loop. An action of another shape than
    the robot's is refused here, before the robot moves (the safety layer would hold every step of it), and so
    is one that is not finite (NaN or inf from an observation of zeros: broken weights, which had connected and
    ramped the arm to its start only to stop at the first step), and so is a file that fails on the observation
    its controller.json describes (another export's file: a traceback from inside onnxruntime or TorchScript had
    said it)."""
    zeros = {name: torch.zeros(1, *space.shape) for name, space in robot.observation_spec.items()}
    try:
        for _ in range(max(1, calls)):
            action = controller.act(zeros)
    except Exception as err:  # noqa: BLE001 (onnxruntime's and TorchScript's own types: a traceback had said it)
        said = (str(err).strip().splitlines() or [type(err).__name__])[-1]  # (TorchScript's cause is its last line)
        raise ValueError(f"{source or 'the controller'}: fails ({type(err).__name__}) on an observation of the size "
                         f"its controller.json gives ({controller.obs_size}): {said}; is the file another export's? "
                         "(an older controller.json has no digest to tell); export the run again") from err
    expected = (1, *robot.action_spec.shape)
    if tuple(action.shape) != expected:
        raise ValueError(f"{source or 'the controller'}: its action has shape {tuple(action.shape)}, the robot takes "
                         f"{expected} (one goal per joint: {', '.join(robot.joint_names)}); export a controller "
                         "trained for this robot")
    if not torch.isfinite(action).all():
        raise ValueError(f"{source or 'the controller'}: its action for an observation of zeros is not finite "
                         f"({action.flatten().tolist()}): its weights are broken; export it again from a good "
                         "checkpoint")


def deploy(run_dir: Path, robot_config: str | Path, *, port: str | None = None, episodes: int = 1,
           fmt: str | None = None, target: tuple[float, float, float] | None = None, record: bool = True,
           seed: int = 0, safety: SafetyConfig | None = None, safety_overrides: Mapping[str, Any] | None = None,
           retries: int = 3, progress: bool = False) -> dict[str, Any]:
    """Run ``episodes`` episodes of ``run_dir``'s exported controller on the robot; returns a summary, what
    ``deploy.json`` holds (its ``run``, ``recording`` and ``plot`` as Paths there, strings in the file).
    Everything that can be refused (episodes, files, task, target, safety settings) is, before the robot is touched.
    ``seed`` picks the sampled targets (the same seed, the same targets; it is recorded).
    ``safety``: the safety settings, default the robot config's ``safety:``; ``safety_overrides`` (a
    ``safety:`` mapping, e.g. from :func:`hardware.safety.parse_overrides`) changes some of them.
    ``retries``: how often the bus asks again after no reply or a garbled one before a read fails.
    ``progress``: a bar of episodes (last return, steps, rate) on stderr while it runs.
    ``fmt``: ``"onnx"`` or ``"torchscript"``, the exported file that drives the robot; default (None) the run's
    ``controller.onnx``, else its ``controller.pt`` (:func:`default_format`)."""
    if Path(run_dir).is_file():  # (export/controller.pt had been "no such run directory": it is there)
        raise FileNotFoundError(f"{run_dir}: {_file_not_run(Path(run_dir))}")
    if not Path(run_dir).is_dir():  # (from Python it had been "no exported controller, nor a checkpoint")
        raise FileNotFoundError(f"{run_dir}: no such run directory (`robolearn list` shows the runs)")
    if isinstance(episodes, bool) or not isinstance(episodes, numbers.Integral) or episodes < 1:
        raise ValueError(f"episodes must be a whole number of at least 1, got {episodes!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:  # said before the robot moves
        raise ValueError(f"seed (--seed) must be a whole number of at least 0, got {seed!r}")
    if isinstance(retries, bool) or not isinstance(retries, numbers.Integral) or retries < 0:
        raise ValueError(f"retries (--retries) must be a whole number of at least 0, got {retries!r}")
    episodes, seed = int(episodes), int(seed)  # numpy's too (np.arange's, rng.integers'): deploy.json records them
    if fmt is not None and fmt not in FILENAMES:  # (a bare KeyError: 'pt')
        raise ValueError(f"fmt={fmt!r} (--format): choose one of {sorted(FILENAMES)}")
    path = _exported_file(run_dir, fmt or default_format(Path(run_dir)), asked=fmt is not None)
    controller = ExportedController(path)
    if behind := export_behind(Path(run_dir), controller.meta):  # said before the robot moves
        warnings.warn(behind, stacklevel=2)
    task = run_task(run_dir, controller.meta)
    _warn_if_trained_with_delay(run_dir, controller.meta)
    if target is None:
        _warn_if_training_targets(run_dir, seed)
    config = load_robot_config(robot_config)
    if safety_overrides:
        safety = safety_settings(config, safety).updated(safety_overrides)
    robot = DynamixelArm(config, port=port, target=target, safety=safety, task=task, retries=retries)
    if not robot.safety_cfg.enabled:  # said before the arm moves, not only in the summary after it
        warnings.warn("the safety layer is off (safety enabled=false): goals go to the servos unchecked (no speed, "
                      "jump or position limits)", stacklevel=2)
    check_controller_fits_robot(controller, robot, path)
    warm_up(controller, robot, path)
    stats, recorder = LoopStats(), None
    # Ctrl+\ is the emergency stop; a kill (SIGTERM) or a closing terminal or ssh session (SIGHUP, unless under
    # nohup) stops as Ctrl+C does: the safe stop (ramp to the safe pose, torque off) and the episode in progress kept.
    estop = {signal.SIGQUIT: lambda *_: robot.emergency_stop()}
    try:
        try:
            with stops_as_ctrl_c(also=estop):  # (the park in robot.close() takes stop signals its own way)
                robot.connect()
                metadata = {"controller": str(path), "robot": str(robot_config), "port": robot.port,
                            "control_dt": robot.control_dt, "joints": robot.joint_names, "seed": seed,
                            "target": None if target is None else [float(v) for v in target],
                            "task": _task_settings(robot),
                            "safety": _safety_settings(robot)}
                # only once connected: a deploy that cannot start leaves no empty folder; without a recording
                # the recorder keeps each episode's summary alone, for the report
                folder = unique_directory(Path(run_dir) / "deploy" / time.strftime("%Y%m%d-%H%M%S")) \
                    if record else None
                recorder = EpisodeRecorder(folder, metadata)
                try:
                    run(controller, robot, episodes=episodes, sink=recorder, seed=seed, stats=stats,
                        progress="deploy" if progress else None)
                except KeyboardInterrupt as stop:
                    if stats.interrupted or stats.error is not None or robot.connected:
                        raise
                    _stopped_in_the_last_park(stats, stop)
        finally:
            robot.close()  # (run's own close did the safe stop: here only where run was not reached)
    except BaseException as err:
        if recorder is not None and recorder.directory is not None:
            try:
                _write_summary(run_dir, robot, seed, stats, recorder, err, trained_dynamics(controller.meta))
            except (OSError, KeyboardInterrupt):
                pass  # the error that ended the run matters more than its summary (or than a stop once it is written)
        _explain(err, stats, robot.stopped, recorder.directory if recorder is not None else None)
        raise
    return _write_summary(run_dir, robot, seed, stats, recorder, None, trained_dynamics(controller.meta))


def _stopped_in_the_last_park(stats: LoopStats, stop: KeyboardInterrupt) -> None:
    """Every episode ran, and a stop came as ``run``'s close parked the robot (or just before it): that close
    parked at the safe pose and turned torque off before raising ``stop`` (a second stop raises ParkSkipped
    instead), so the deploy is an interrupted one, as one stopped in the loop is: ``stats`` says so, and its
    report and deploy.json follow (it had ended on "interrupted" alone, deploy.json saying ``interrupted: false``
    beside ``error: KeyboardInterrupt``)."""
    stats.interrupted, stats.stopped_by, stats.close_failed = True, str(stop) or "SIGINT", False


def trained_dynamics(meta: dict[str, Any]) -> dict[str, Any] | None:
    """controller.json's ``randomization`` and ``delay`` (the run's ``env.randomization`` and ``env.delay``, off
    their defaults), what deploy.json keeps beside how the robot ran; None for an export from before they were
    recorded."""
    if "randomization" not in meta and "delay" not in meta:
        return None
    return {"randomization": dict(meta.get("randomization") or {}), "delay": dict(meta.get("delay") or {})}


DELAYS = {"obs_delay_steps": "observation delay", "action_latency_steps": "action latency",
          "action_latency_s": "action latency"}
"""The settings of ``env.delay`` (steps) and ranges of ``env.randomization`` that delay what the controller sees
or does, as the report names them."""


def trained_latency(trained: dict[str, Any] | None) -> str | None:
    """The delays a controller was trained under (``trained``: :func:`trained_dynamics`), as the report's line
    says them (``observation delay 2 steps (env.delay), action latency 0-0.03 s (env.randomization)``), to hold
    against the robot's own bus and loop latency; None when it learned under none."""
    trained = trained or {}
    said = [f"{DELAYS[key]} {value} step{'s' * (value != 1)} (env.delay)"
            for key, value in (trained.get("delay") or {}).items() if key in DELAYS and value]
    randomization = trained.get("randomization") or {}
    width = randomization.get("width")
    at = "" if width in (None, 1) else f" at width {width:g}"  # (each range at that fraction)
    for key in ("obs_delay_steps", "action_latency_s"):
        drawn = randomization.get(key)
        if isinstance(drawn, list) and len(drawn) == 2 and all(isinstance(v, (int, float)) for v in drawn) \
                and drawn[1] > 0 and width != 0:
            said.append(f"{DELAYS[key]} {drawn[0]:g}-{drawn[1]:g} {'steps' if key.endswith('steps') else 's'} "
                        f"(env.randomization{at})")
    return ", ".join(said) or None


def default_format(run_dir: Path) -> str:
    """The format deploy plays where none is asked for: ONNX, unless the run's export holds only TorchScript
    (``robolearn export --format torchscript``). ONNX Runtime loads a file without running any of its code,
    where ``torch.jit.load`` runs a module's own ``__setstate__`` (a controller.pt from elsewhere is code), and
    it runs our MLPs in about half TorchScript's time (BENCHMARKS.md, deploy); TorchScript is deprecated upstream."""
    def has(fmt: str) -> bool:  # in export/, or in the folder given (said wrong by _exported_file)
        return any((folder / FILENAMES[fmt]).is_file() for folder in (run_dir / "export", run_dir))

    return "torchscript" if has("torchscript") and not has("onnx") else "onnx"


def _file_not_run(path: Path) -> str:
    """What to give instead of ``path``, a file given where deploy takes a run's folder: the run that holds an
    exported file (``<run>/export/controller.pt``), else a run's folder."""
    if path.parent.name == "export":
        return (f"a file of an export; deploy takes the run's folder: {shell('robolearn', 'deploy', path.parent.parent)}"
                f" ...{_format_flag(path.name)}")
    return "a file, not a run's folder (runs/<name>/<time>, holding export/)"


def _format_flag(name: str) -> str:
    """The ``--format`` that picks exported file ``name`` where deploy's default would pick the other."""
    if name == FILENAMES["torchscript"]:
        return " --format torchscript (to play controller.pt; the default plays controller.onnx where exported)"
    return ""


def _exported_file(run_dir: Path, fmt: str, asked: bool = True) -> Path:
    """``run_dir``'s exported controller file of format ``fmt`` (``export/controller.pt`` or ``.onnx``), or a
    FileNotFoundError saying why there is none and what to do: export/ itself or a copy of its files was given,
    a folder of runs, a run still training, one without a checkpoint, or one not exported yet. ``asked``: the
    format was asked for (``--format``); else runs under a folder of runs count in either format."""
    path = Path(run_dir) / "export" / FILENAMES[fmt]
    if path.is_file():
        return path
    if (Path(run_dir) / FILENAMES[fmt]).is_file():  # the controller's own folder was given
        if Path(run_dir).name == "export":  # a run's
            raise FileNotFoundError(f"{run_dir}: give the folder that holds export/, not export/ itself: "
                                    f"{shell('robolearn', 'deploy', Path(run_dir).parent)} ...")
        raise FileNotFoundError(f"{run_dir}: holds {FILENAMES[fmt]} itself; deploy takes a folder with the "  # a copy
                                f"exported files in export/ (a run's): move them into {Path(run_dir) / 'export'}, "
                                "or give the run they came from")
    _refuse_folder_of_runs(Path(run_dir), (fmt,) if asked else tuple(FILENAMES), fmt if asked else None)
    export = f"`{shell('robolearn', 'export', run_dir)}`"
    for other, name in FILENAMES.items():  # (`robolearn export --format onnx` removes controller.pt)
        if other != fmt and (Path(run_dir) / "export" / name).is_file():
            raise FileNotFoundError(f"{path}: not exported in this format, but export/ holds {name}: deploy that with "
                                    f"--format {other} (Python: fmt={other!r}), or run {export} to write both")
    saved = (Path(run_dir) / "checkpoints" / "latest.pt").is_file()  # else `export` would only fail in turn
    if trainer := holder(Path(run_dir)):
        then = f"exports when it ends; {export} exports its checkpoint so far" if saved else \
            "has saved no checkpoint to export yet"
        raise FileNotFoundError(f"{path}: no exported controller yet: the run is still training ({trainer}) and "
                                f"{then}")
    if not saved:
        raise FileNotFoundError(f"{path}: no exported controller, nor a checkpoint to export one from (a run "
                                "that stopped before its first, or not a run folder)")
    raise FileNotFoundError(f"{path}: no exported controller; run {export} first")


def _warn_if_training_targets(run_dir: Path, seed: int) -> None:
    """A controller trained on a robot recording (an offline run on an imported deploy) and deployed with the
    recording's seed reaches for the very targets it learned from: say so, as its success there tests nothing."""
    try:
        dataset = load_run_config(run_dir).dataset
        if not dataset:
            return
        from robolearn.data import Dataset
        from robolearn.data.recordings import recordings_in

        recordings = recordings_in(Dataset.load(dataset).info)
    except (OSError, ValueError):  # no config, the dataset on another machine: nothing to compare
        return
    # a fixed --target drew nothing
    if any(recording.get("seed") == seed and recording.get("target") is None for recording in recordings):
        warnings.warn(f"seed {seed} draws the targets of the recording this controller trained on (dataset "
                      f"'{dataset}'): reaching them tests little; --seed N draws others", stacklevel=3)


def _warn_if_trained_with_delay(run_dir: Path, meta: dict[str, Any]) -> None:
    """A controller trained under a fixed delay (``env.delay``: observations seen, or actions applied, whole
    control steps late; ``meta``'s ``delay``, its controller.json's, else the run config's) learned to make up
    for it, and evaluation keeps it as part of the task; the robot adds none, so the controller would act on
    fresher observations, or see its actions land sooner, than it learned to: say so before the arm moves."""
    if "delay" in meta:  # the export's own: an export folder alone says it
        delay = meta["delay"]
    else:  # an export from before controller.json recorded it
        try:
            delay = load_run_config(run_dir).env.delay or {}
        except (OSError, ValueError):  # no config.yaml (an export alone): nothing recorded to compare
            return
    steps = {key: value for key, value in dict(delay).items() if value}
    if steps:
        said = ", ".join(f"{key}={value}" for key, value in steps.items())
        warnings.warn(f"the controller was trained under env.delay {said} (control steps), which deploy does not "
                      "add: the robot has only its own bus and loop latency. Unless that delay was this robot's measured "
                      "latency, the controller will see observations and actions land sooner than it learned to "
                      "compensate for; env.randomization's action_latency_s and obs_delay_steps ranges train one "
                      "robust to a range of delays instead", stacklevel=3)


def _task_settings(robot: DynamixelArm) -> dict[str, Any]:
    """Every setting of the task the robot ran (its reward weights too, so an import of the recording scores
    it as the robot did), and the jump limit the safety layer ran with."""
    settings = {f.name: getattr(robot.task, f.name) for f in fields(robot.task) if f.init}
    return {**settings, "safety_max_step": robot.safety_cfg.max_step}


def _safety_settings(robot: DynamixelArm) -> dict[str, Any]:
    """The safety settings the robot ran with (``safe_pose`` None: its home)."""
    settings = asdict(robot.safety_cfg)
    settings["safe_pose"] = None if settings["safe_pose"] is None else [float(q) for q in settings["safe_pose"]]
    return settings


def _refuse_folder_of_runs(folder: Path, formats: tuple[str, ...], asked: str | None = None) -> None:
    """``folder`` holds runs (``robolearn deploy runs/dr_long``), not a run: say so and name the runs
    under it that have an export in one of ``formats``, else the newest run, to export first; the deploy named
    keeps the format ``asked`` for (``--format``), which the default would not play where both are exported."""
    if (folder / "config.yaml").is_file() or not folder.is_dir():
        return
    from robolearn.runs import find_run_dirs

    runs = sorted(find_run_dirs(folder), key=lambda run: run.stat().st_mtime)
    exports = {p.parent.parent: p.stat().st_mtime for fmt in formats for p in folder.rglob(FILENAMES[fmt])
               if p.parent.name == "export"}
    if exports:
        exported = sorted(exports)
        shown = few(exported)
        arm = {run: at for run, at in exports.items() if _exported_task(run) in (None, "arm_reach")}
        if not arm:  # (the newest of them had been named to deploy, which deploy then refused)
            raise FileNotFoundError(f"{folder}: a folder of runs, not a run; its exported runs ({shown}) were trained "
                                    "on other tasks than arm_reach, the task this robot does")
        newest = max(arm, key=arm.get)
        raise FileNotFoundError(f"{folder}: a folder of runs, not a run; its exported runs: {shown}; deploy one "
                                f"(the newest arm_reach export: {shell('robolearn', 'deploy', newest)}"
                                f"{f' --format {asked}' if asked else ''} ...)")
    if runs:
        raise FileNotFoundError(f"{folder}: a folder of runs, not a run, and none of its {len(runs)} runs is exported; "
                                f"the newest is {runs[-1]}: run `{shell('robolearn', 'export', runs[-1])}`, then deploy it")


def _exported_task(run: Path) -> str | None:
    """The task ``run``'s ``export/controller.json`` says its controller was trained on (None: unsaid or unreadable)."""
    try:
        task = json.loads((run / "export" / "controller.json").read_text()).get("task")
    except (OSError, ValueError, AttributeError):
        return None
    return task if isinstance(task, str) else None


def _write_summary(run_dir: Path, robot: DynamixelArm, seed: int, stats: LoopStats,
                   recorder: EpisodeRecorder | None, error: BaseException | None,
                   trained: dict[str, Any] | None = None) -> dict[str, Any]:
    """The deployment's summary, written to ``deploy.json`` when recording; ``error`` is what ended it, if anything;
    ``trained``: the randomization and delays the controller was trained under (:func:`trained_dynamics`)."""
    loop = stats.summary()
    summary: dict[str, Any] = {
        "run": Path(run_dir), "port": robot.port, "seed": seed, "episodes": stats.episodes,
        "return_mean": loop["return_mean"], "success_rate": loop["success_rate"],
        "safety_events": dict(robot.safety.events), "peak_joint_speed": robot.safety.peak_speed,
        "bus": vars(robot.bus.stats), "loop": loop,
        "task": _task_settings(robot), "safety": _safety_settings(robot), "trained_under": trained,
        "recording": recorder.directory if recorder else None, "plot": None,
        "error": None if error is None else f"{type(error).__name__}: {error}".rstrip(": "),
        "interrupted": stats.interrupted, "per_episode": recorder.summaries if recorder else [],
    }
    if recorder is not None and recorder.directory is not None:
        def write() -> None:  # a stop while it is written waits for it (a second Ctrl+C had lost it), then stops
            text = strict_json.dumps(summary, indent=2, default=str).encode()
            with stops_held() as held:
                atomic_write_bytes(recorder.directory / "deploy.json", lambda f: f.write(text))
            if held:
                raise KeyboardInterrupt(signal.Signals(held[0]).name)

        write()  # before the drawing, which takes a second or two: a stop during it keeps the summary
        summary["plot"] = _plot(recorder)
        if summary["plot"]:
            write()
    return summary


def report(summary: dict[str, Any], fixed_target: bool = False) -> str:
    """What ``robolearn deploy`` prints: the outcome, the task and seed, the loop's timing, the safety layer's
    interventions (overspeed with the peak speed against its limit, and the override that would allow it),
    the delays the controller was trained under (where it was: the robot's own latency is held against them),
    each episode (up to 10) with how near it came, and where the recording and plot are."""
    loop, task, episodes = summary["loop"], summary["task"], summary["per_episode"]
    count = summary["episodes"]
    line = f"deployed:    {count} episode{'s' * (count != 1)} on {summary['port']}"
    if cut := sum(bool(e.get("interrupted")) for e in episodes):  # kept in the recording, not counted as ended
        line += f" (and {cut} cut short, kept)"
    if summary["return_mean"] is not None:
        line += f": return {summary['return_mean']:.2f}"
    if summary["success_rate"] is not None:
        line += f", success {100 * summary['success_rate']:.0f}%"
    held, trained = task["safety_max_step"], task.get("max_goal_step")
    # a --safety max_step below the trained goal-step limit had been said "(as trained)" too
    steps = (f"(safety.max_step; trained up to {trained:g})" if trained is not None and held < trained
             else "(as trained)")
    lines = [line,
             f"task:        {task['max_episode_steps']} steps per episode, goal steps <= {held} rad {steps}",
             f"seed:        {summary['seed']} " + ("(a fixed --target)" if fixed_target else
                                                    "(it draws the targets; --seed N draws others)"),
             f"loop:        {loop['rate_hz']:.0f} Hz, {counted(loop['steps'], 'step')}, "
             f"{counted(loop['overruns'], 'overrun')}, "
             f"jitter p50 {loop['jitter_ms_p50']:.2f} ms p99 {loop['jitter_ms_p99']:.2f} ms"]
    if latency := trained_latency(summary.get("trained_under")):  # what the robot's own latency is held against
        lines.append(f"trained:     under {latency}")
    if loop["steps"] and loop["overruns"] > 0.1 * loop["steps"]:  # the robot ran slower than it was trained to
        share = loop["overruns"] / loop["steps"]  # (overruns count the periods a late step skipped too)
        said = (f"{100 * share:.0f}% of the periods overran" if share <= 1 else
                f"{loop['overruns']} periods overran (late or skipped) in {loop['steps']} steps")
        lines.append(f"             {said}: each step's "
                     f"read, decision and write took longer than {1000 / loop['rate_hz']:.0f} ms, so goals came late "
                     "and fewer than trained; train at a slower rate (env.kwargs.frame_skip) or give the loop a "
                     "faster machine or bus (baud rate)")
    events = summary["safety_events"]
    said = ", ".join(f"{rule} {n}" for rule, n in sorted(events.items())) or "no interventions"
    lines.append("safety:      " + (said if summary["safety"].get("enabled", True) else "off (safety enabled=false)"))
    peak = summary.get("peak_joint_speed")  # what the overspeed rule compared, recorded or not
    if events.get("overspeed") and peak is not None and math.isfinite(peak):
        limit = summary["safety"]["max_velocity"]
        lines.append(f"             overspeed: joints reached {peak:.2f} rad/s, above safety.max_velocity {limit:g}; if "
                     f"that is normal motion, allow it: --safety max_velocity={math.ceil(peak * 11) / 10:g}")
    if len(episodes) > 10:
        where = ("deploy.json's per_episode and deploy.png" if summary["recording"] else  # (--no-record wrote neither)
                 "the summary's per_episode (--json prints it; not recorded, so no deploy.json)")
        lines.append(f"episodes:    {len(episodes)}, each in {where}")
    for number, episode in enumerate(episodes if len(episodes) <= 10 else []):
        outcome = {True: "success", False: "missed", None: ""}[episode["success"]]
        notes = [outcome] * bool(outcome) + ["cut short"] * episode["interrupted"]
        if episode.get("min_distance_m") is not None and math.isfinite(episode.get("final_distance_m", math.nan)):
            notes.append(f"ended {100 * episode['final_distance_m']:.1f} cm away, nearest "
                         f"{100 * episode['min_distance_m']:.1f} cm")
        notes += [f"{n} {rule}" for rule, n in episode["safety_events"].items()]
        lines.append(f"{'episodes:' if number == 0 else '':<13}{number}: return {episode['return']:.2f} in "
                     f"{episode['steps']} steps" + (f" ({', '.join(notes)})" if notes else ""))
    if summary["recording"]:
        lines.append(f"recording:   {summary['recording']}")
    if summary.get("plot"):
        lines.append(f"plot:        {summary['plot']}")
    if loop["interrupted"]:
        lines.append("interrupted: the robot was parked and its torque turned off")
    return "\n".join(lines)


def _plot(recorder: EpisodeRecorder) -> Path | None:
    """``deploy.png`` of the recorded episodes (joint commands, sent goals, measured positions, safety events,
    rewards, the task's metrics such as the distance to the target), or None without any; a drawing that fails is a warning, never the deploy's failure."""
    if not recorder.episodes_written:
        return None
    from robolearn.recording_plot import plot_recording

    try:
        with stops_as_ctrl_c():  # the robot is parked: a stop now skips the picture, not the report
            return plot_recording(recorder.directory, recorder.directory / "deploy.png")
    except KeyboardInterrupt:
        print(f"deploy.png not drawn (stopped): `{shell('robolearn', 'plot', recorder.directory)}` draws it", file=sys.stderr)
        return None
    except Exception as err:  # noqa: BLE001 (matplotlib's, a full disk's...: the robot's run is what matters)
        warnings.warn(f"deploy.png not drawn: {type(err).__name__}: {err}", stacklevel=2)
        return None


STOPS = {"SIGINT": "SIGINT: Ctrl+C", "SIGTERM": "SIGTERM: a kill", "SIGHUP": "SIGHUP: a closed terminal"}
"""The stop signals that end a deployment's loop, as its errors name them."""


def _explain(err: BaseException, stats: LoopStats, robot_stop: BaseException | None, recording: Path | None) -> None:
    """Complete ``err``'s own message (the CLI prints ``error: <message>``): what ended the loop, when
    the error raised is a later one (the safe stop failing after the bus died); that a stop signal had ended the
    loop, when the safe stop then failed (a lost line had read as what ended the run), unless a stop of the
    robot's own (``robot_stop``: its watchdog's) or a second stop signal (ParkSkipped) says what happened itself;
    and where the recording is."""
    extra = []
    if stats.error and stats.error.partition(": ")[2] not in str(err):
        extra.append(f"it began with {stats.error}")
    if stats.interrupted and stats.close_failed and robot_stop is None \
            and not isinstance(err, (KeyboardInterrupt, ParkSkipped)):
        extra.append(f"the run had been stopped ({STOPS.get(stats.stopped_by, stats.stopped_by)}) when this was "
                     "found, during the safe stop")
    if recording is not None:
        extra.append(f"recording (every episode, the one in progress too, and deploy.json): {recording}")
    for line in extra:
        add_to_message(err, line)
