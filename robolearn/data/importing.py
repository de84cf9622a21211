"""Files of other formats made datasets: a D4RL HDF5 file, a LeRobot directory, a deploy recording.

:func:`import_dataset` is what ``robolearn dataset import`` runs, for Python too: the episodes read, given
their task's observation groups, action bounds and settings (a recording's as the robot ran them, our own
export's as it was recorded with), reference scores (D4RL's, or given), and written as a dataset. What a
person should know about the result (actions outside the task's bounds, another control rate) is warned.
"""

from __future__ import annotations

import difflib
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.dataset import Dataset
from robolearn.data.episode import DatasetError, Episode
from robolearn.runtime import say_what_the_stop_left

FORMATS = ("d4rl", "lerobot", "recording")


@dataclass
class Imported:
    """What :func:`import_dataset` made, and how it read the file."""

    dataset: Dataset
    returns: list[float]
    successes: list[bool]  # of the episodes that say
    task_from_file: bool = False  # the task came from the file's own metadata (our export), not ``task``
    settings: dict[str, Any] = field(default_factory=dict)  # the task's settings the dataset keeps (task_kwargs)
    other_settings: dict[str, Any] = field(default_factory=dict)  # a recording's that are not the task's


def import_dataset(path: str | Path, format: str, task: str | None = None, name: str | None = None,
                   root: str | Path | None = None, overwrite: bool = False, done: str = "terminal",
                   ref_min: float | None = None, ref_max: float | None = None,
                   progress: bool | None = None) -> Imported:
    """Import ``path`` (``format``: one of :data:`FORMATS`) as dataset ``name`` (default: the file's or
    folder's name) under ``root``. ``task`` (a name of ``sims.TASKS`` or ``gym:<id>``) gives the dataset its
    task's specs and bounds, which replay and evaluation need; our own LeRobot export says its task itself.
    ``done``: how a LeRobot dataset's ``next.done`` reads ("terminal" or "truncation"). ``ref_min`` and
    ``ref_max``: random and expert returns for normalized scores (a D4RL task's own by default)."""
    import sims
    from robolearn.data.d4rl import read_d4rl, ref_scores
    from robolearn.data.lerobot import read_lerobot
    from robolearn.data.minari_store import dataset_id, datasets_root, refuse_file_root, specs_of
    from robolearn.data.recordings import read_recordings, recorded_task_settings

    if format not in FORMATS:
        raise ValueError(f"format={format!r}: choose one of {', '.join(FORMATS)}")
    if done not in ("terminal", "truncation"):
        raise ValueError(f"done={done!r}: 'terminal' or 'truncation'")
    if done != "terminal" and format != "lerobot":
        raise ValueError(f"--done (done=) is for LeRobot datasets; {format} files say terminals and timeouts apart")
    refuse_file_root(datasets_root(root))  # before the file is read (the writer would refuse it only after)
    if name is not None:  # said before the file is read too; an empty name had been taken for none given, the
        dataset_id(name)  # file's name used (with overwrite=True, replacing the dataset of that name)
    path = Path(path)
    readers = {"d4rl": read_d4rl, "lerobot": lambda source: read_lerobot(source, done), "recording": read_recordings}
    episodes, meta = readers[format](path)
    if not episodes:
        raise DatasetError(f"{path}: no episodes to import")
    specs = specs_of(episodes[0])
    named = meta.get("task")
    if not task and format != "recording" and (unknown := no_task_here(named)):
        # kept as the dataset's task, it had been imported in silence, its shapes unchecked
        warnings.warn(f"{path}: its task '{named}' {unknown}; imported without the task's bounds and "
                      "settings: give --task to set them", stacklevel=2)
        meta["recorded_task"] = meta.pop("task")  # kept, but not as the dataset's task (as a Gymnasium id's, below)
        meta.pop("task_kwargs", None)
    task_from_file = not task and format != "recording" and _buildable_from_a_file(meta.get("task"))
    if task_from_file:  # our own export's: its task's bounds and settings, as --task would give them
        task = meta["task"]
    # A recording's task settings are what the robot ran, a file's of our own export what it was recorded with
    # (of the same task only)
    settings, others = recorded_task_settings(meta, task) if task and format == "recording" else ({}, {})
    if task and format != "recording" and meta.get("task") == task:
        settings = dict(meta.get("task_kwargs") or {})
    if task:  # the task's groups and bounds; groups the task lacks (a robot's joint_state) kept as recorded
        where = (path / "metadata.json") if format == "recording" else path
        try:
            task_obs, action_spec, control_dt = task_specs(task, meta.get("control_dt"), settings,
                                                           f"{where}: the recorded task settings")
        except Exception as err:  # noqa: BLE001 (Gymnasium's own: an id not registered here, a missing extra)
            if not (task_from_file and task.startswith(sims.GYM_PREFIX)):  # the file's, not asked for
                raise
            warnings.warn(f"{path}: its task {task} cannot be made here ({type(err).__name__}: {err}); imported "
                          "without the task's bounds and settings: give --task to set them", stacklevel=2)
            meta["recorded_task"] = meta.pop("task")  # kept, but not as the dataset's task: its bounds are not in it
            meta.pop("task_kwargs", None)
            task, task_from_file, settings = None, False, {}
        else:
            specs = ({**specs[0], **task_obs}, action_spec)
            if meta.get("control_dt") is None:  # a D4RL file says none: its task's (a LeRobot export's fps)
                meta["control_dt"] = control_dt
    meta |= {"source": f"{format}:{path.resolve()}"}
    if task:
        meta["task"], meta["task_kwargs"] = task, settings
    # D4RL's reference scores for its own files; our export carries the dataset's own (or none: a recording
    # had none, and a round trip must not add D4RL's)
    refs = ref_scores(task or path.stem) if format == "d4rl" and "exported_from" not in meta else None
    for key, given, default in (("ref_min_score", ref_min, refs and refs[0]), ("ref_max_score", ref_max, refs and refs[1])):
        value = given if given is not None else meta.get(key, default)
        if value is not None:
            meta[key] = value
    check_refs(meta.get("ref_min_score"), meta.get("ref_max_score"))
    if task and specs[1].shape == (1,):  # a one-dimensional action stored flat, (N,) as D4RL files often do
        for episode in episodes:
            if episode.actions.ndim == 1:
                episode.actions = episode.actions[:, None]
    name = slug(path.stem if path.is_file() else path.resolve().name) if name is None else name
    from tqdm import tqdm

    writing = tqdm(episodes, desc=f"writing {name}", unit="episode", disable=None if progress is None else not progress,
                   leave=False)  # by default, on a terminal only
    dataset = Dataset.create(name, writing, *specs, metadata=meta, root=root, overwrite=overwrite, source=str(path))
    try:
        _warn_out_of_bounds(episodes, specs[1])
        return Imported(dataset, [e.episode_return for e in episodes],
                        [e.success for e in episodes if e.success is not None], task_from_file, settings, others)
    except KeyboardInterrupt as err:  # written already: said so (`dataset import` says "nothing was imported" before)
        say_what_the_stop_left(err, f"dataset '{dataset.id}' was imported whole ({dataset.path}), its checks after cut "
                                    "short")
        raise


def _buildable_from_a_file(task: Any) -> bool:
    """Whether a task a file names may be built on import: ours, or a Gymnasium id (``gym:Hopper-v5``, whose
    bounds had come back as +-inf). Not ``module:Class``, nor a Gymnasium ``module:id``: a file does not get
    to import code."""
    import sims

    if not isinstance(task, str):
        return False
    return task in sims.TASKS or (task.startswith(sims.GYM_PREFIX) and ":" not in task[len(sims.GYM_PREFIX):])


def no_task_here(task: Any) -> str | None:
    """Where a file names a plain task name that is no task here (a typo, another install's task): ``"is no task
    here"`` with the nearest task asked about, for its message; None for ours, a prefixed one (``gym:``,
    ``module:Class``) or none. Such a task had been offered as env.task= and taken as code to trust."""
    import sims

    if not isinstance(task, str) or not task or ":" in task or task in sims.TASKS:
        return None
    close = difflib.get_close_matches(task, sims.TASKS, n=1)
    return "is no task here" + (f" (did you mean '{close[0]}'?)" if close else "")


def task_specs(task: str, control_dt: float | None = None, kwargs: dict[str, Any] | None = None,
               where: str = "") -> tuple[dict, Any, float]:
    """The specs and control period of the task built with ``kwargs`` (settings from ``where``, which a refusal
    names); a recording's ``control_dt`` that is not the task's is warned."""
    import sims
    from robolearn.offline_runner import rate_doubt

    try:
        env = sims.make_env(task, num_envs=1, num_threads=1, **(kwargs or {}))
    except (ValueError, TypeError) as err:
        if not kwargs:
            raise
        raise ValueError(f"{where} ({settings_said(kwargs)}) do not build task {task}: {err}") from None
    with env:
        if doubt := rate_doubt(control_dt, env.control_dt):
            warnings.warn(f"{doubt} ({task})", stacklevel=3)
        return env.observation_spec, env.action_spec, float(env.control_dt)


def _warn_out_of_bounds(episodes: list[Episode], action_spec: Any) -> None:
    """Warn when imported actions lie outside the task's bounds (another scale, or the wrong task): the env
    clips such actions, while offline agents learn them as given."""
    low, high = np.asarray(action_spec.low), np.asarray(action_spec.high)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        return
    actions = np.concatenate([e.actions for e in episodes])
    outside = float(((actions < low - 1e-6) | (actions > high + 1e-6)).any(axis=-1).mean())
    if outside > 0:
        warnings.warn(f"{100 * outside:.1f}% of the actions lie outside the task's bounds [{low.min():g}, "
                      f"{high.max():g}] (seen {actions.min():.3g} to {actions.max():.3g}); the env clips them, offline "
                      "agents learn them as given: rescale them, or check --task", stacklevel=3)


def check_refs(low: float | None, high: float | None) -> None:
    """Normalized scores divide by ``high - low``: swapped references turn a random policy into an expert."""
    if low is None or high is None:
        if (low is None) != (high is None):
            raise ValueError("--ref-min and --ref-max (ref_min=, ref_max=) go together: a normalized score needs both")
        return
    if not (math.isfinite(low) and math.isfinite(high) and high > low):
        raise ValueError(f"--ref-max ({high:g}) must be above --ref-min ({low:g}) (ref_max=, ref_min=): they are the "
                         "returns of an expert and of a random policy")


def settings_said(settings: dict[str, Any]) -> str:
    """``max_episode_steps=10, ...``: task settings as a person reads them."""
    return ", ".join(f"{key}={value}" for key, value in settings.items())


def slug(text: str) -> str:
    """A dataset-name-safe version of ``text``."""
    return re.sub(r"[^-\w]+", "-", text).strip("-") or "dataset"
