"""Read a deployment recording (a directory of ``episode_*.npz`` from
:class:`robolearn.recording.EpisodeRecorder`) as episodes.

Each file already holds an episode's ``obs/<group>`` (T+1), ``actions`` (what
the robot was sent), ``rewards``, ``terminations`` and ``truncations``;
``commanded_actions``, ``goals`` (a robot's goal before its safety layer),
``timestamps``, ``metrics/<name>`` (a reach's ``distance_m``) and ``successes``
(as ``success``, the task's test after each step, as Minari's goal datasets
keep it; not for an episode the run cut short, nor one not judged at its last step, which have no outcome) become
``infos``; ``safety_events`` becomes one ``safety/<rule>`` flag
per step for each rule that overruled a step anywhere in the recording; a
robot's ``joint_state`` group (``[q, qd]``) also gives ``infos/qpos`` and
``infos/qvel``, so ``dataset replay`` starts the simulation where the robot
started. Nothing else a recording holds per step is dropped. The directory's
``metadata.json`` (controller, robot, control period) is kept under
``recording``; episodes cut short by the end of a run (``interrupted``) are
kept and listed in ``interrupted_episodes``. Its ``task`` settings (episode
length, goal-step limit, success distance, frame skip) are what the robot ran:
:func:`recorded_task_settings` picks those the named task takes, which an
import with ``--task`` stores as the dataset's ``task_kwargs``.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.episode import DatasetError, Episode, as_flags, is_positive_number
from robolearn.recording import load_episode, overruled_rules

REQUIRED = ("actions", "rewards", "terminations", "truncations")
INFOS = {"commanded_actions": "commanded_actions", "goals": "goals", "timestamps": "timestamps", "successes": "success"}


def read_recordings(directory: str | Path) -> tuple[list[Episode], dict[str, Any]]:
    """Episodes and metadata of the recording in ``directory``."""
    directory = Path(directory)
    if not directory.is_dir():
        what = "a file" if directory.exists() else "not there"
        raise DatasetError(f"{directory}: {what}; a recording is a directory of episode_*.npz files "
                           "(<run>/deploy/<time> from `robolearn deploy`)")
    files = sorted(directory.glob("episode_*.npz"))
    if not files:
        raise DatasetError(f"{directory}: no episode_*.npz files (a recording directory from `robolearn deploy`)"
                           + _recordings_inside(directory))
    _warn_if_files_missing(directory, files)
    loaded = [_load(file) for file in files]
    overruled = [overruled_rules(arrays) for arrays in loaded]
    rules = sorted(set().union(*(step for steps in overruled for step in steps)))  # every episode gets every rule's
    # flags: exports keep the infos all episodes share
    episodes, interrupted = [], []
    for file, arrays, steps in zip(files, loaded, overruled):
        missing = [key for key in REQUIRED if key not in arrays]
        groups = {key[len("obs/"):]: value for key, value in arrays.items() if key.startswith("obs/")}
        if missing or not groups:
            absent = missing[0] if missing else "obs/policy"
            raise DatasetError(f"{file}: missing key '{absent}' (found {', '.join(sorted(arrays))})")
        infos = {name: arrays[key] for key, name in INFOS.items() if key in arrays}
        if bool(arrays.get("interrupted", False)) or "success" not in arrays:  # cut short by the run's end, or not
            infos.pop("success", None)  # judged at its last step: no outcome, as the recorder says
        metrics = {key: arrays[key] for key in arrays if key.startswith("metrics/")}
        if gaps := sorted(key for key, value in metrics.items() if not np.isfinite(value).all()):
            warnings.warn(f"{file}: {', '.join(gaps)} left out: steps without a value (NaN; a dataset's infos hold a "
                          "number on every step)", stacklevel=3)
        infos |= {key: value for key, value in metrics.items() if key not in gaps}
        if "safety_events" in arrays:
            infos |= {f"safety/{rule}": np.array([rule in step for step in steps]) for rule in rules}
        joint_state = groups.get("joint_state")  # a robot's [q, qd]: where a replay in simulation starts from
        if joint_state is not None and joint_state.ndim == 2 and joint_state.shape[1] % 2 == 0:
            half = joint_state.shape[1] // 2
            infos |= {"qpos": joint_state[:, :half].astype(np.float64), "qvel": joint_state[:, half:].astype(np.float64)}
        episode = Episode(observations=groups, actions=arrays["actions"], rewards=arrays["rewards"],
                          terminations=as_flags(arrays["terminations"], str(file), "terminations"),
                          truncations=as_flags(arrays["truncations"], str(file), "truncations"), infos=infos)
        episodes.append(episode.check(str(file)))
        if bool(arrays.get("interrupted", False)):
            interrupted.append(len(episodes) - 1)
    meta: dict[str, Any] = {"interrupted_episodes": interrupted}
    meta_file = directory / "metadata.json"
    if meta_file.is_file():
        try:
            meta["recording"] = json.loads(meta_file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise DatasetError(f"{meta_file}: corrupt metadata ({err})") from None
        if not isinstance(meta["recording"], dict):
            raise DatasetError(f"{meta_file}: a {type(meta['recording']).__name__}; a recording's metadata is a mapping")
        if meta["recording"].get("control_dt") is not None:
            dt = meta["recording"]["control_dt"]
            if not is_positive_number(dt):
                raise DatasetError(f"{meta_file}: 'control_dt' is {dt!r}; the control period, a positive number of seconds")
            meta["control_dt"] = dt
        if "controller" in meta["recording"]:
            meta["controller"] = meta["recording"]["controller"]
    return episodes, meta


def recordings_in(info: dict[str, Any]) -> list[dict[str, Any]]:
    """The robot recordings' metadata a dataset's ``info`` holds: its own ``recording`` (an import's, kept by a
    split), and those of the datasets a merge joined (kept per source under ``sources`` where they differ, such
    as two deploys' seeds)."""
    found = [info["recording"]] if isinstance(info.get("recording"), dict) else []
    for source in (info.get("sources") or {}).values():
        if isinstance(source, dict):
            found += recordings_in(source)
    return found


def recorded_task_settings(meta: dict[str, Any], task: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The task settings of a recording's ``metadata.json`` (in ``meta`` from :func:`read_recordings`), split
    into those ``task`` takes (its ``env.kwargs``, so a replay or an evaluation runs the task as the robot
    did) and the rest (the robot's own, such as ``safety_max_step``)."""
    import sims

    settings = (meta.get("recording") or {}).get("task")
    if not isinstance(settings, dict):
        return {}, {}
    takes = set(sims.task_settings(task))
    return ({key: value for key, value in settings.items() if key in takes},
            {key: value for key, value in settings.items() if key not in takes})


def _recordings_inside(directory: Path) -> str:
    """For the error of a folder without episodes: the recordings it or its ``deploy/`` holds (a run's
    ``deploy/``, or the run itself, given for one of its recordings), the newest named to import; "" for none."""
    from robolearn.listing import few

    folders = {f.parent for pattern in ("*/episode_*.npz", "deploy/*/episode_*.npz") for f in directory.glob(pattern)}
    if not folders:
        return ""
    # newest first, by time: by name `<time>-10` sorts before `<time>-2`
    newest, *others = sorted(folders, key=lambda folder: folder.stat().st_mtime, reverse=True)
    also = f"; also {few(others)}" if others else ""
    return f"; it holds recordings: import one, e.g. the newest, {newest}{also}"


def _warn_if_files_missing(directory: Path, files: list[Path]) -> None:
    """Say which episode files a recording lacks (numbered 0, 1, ... as written, or fewer than its
    ``deploy.json`` counts): an import of the rest would otherwise look whole."""
    numbers = {int(m[1]) for f in files if (m := re.fullmatch(r"episode_(\d+)\.npz", f.name))}
    missing = sorted(set(range(max(numbers, default=-1) + 1)) - numbers)
    try:
        counted = int(json.loads((directory / "deploy.json").read_text()).get("episodes") or 0)
    except (OSError, ValueError, AttributeError, TypeError):
        counted = 0
    missing += list(range(max(numbers, default=-1) + 1, counted))
    if missing:
        warnings.warn(f"{directory}: episode file(s) {', '.join(f'episode_{i:05d}.npz' for i in missing[:5])}"
                      f"{' ...' if len(missing) > 5 else ''} missing ({len(missing)} of {len(numbers) + len(missing)}); "
                      "the others are imported", stacklevel=3)


def _load(file: Path) -> dict[str, np.ndarray]:
    try:
        return load_episode(file)
    except ValueError as err:
        raise DatasetError(str(err)) from None
