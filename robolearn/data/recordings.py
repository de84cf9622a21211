"""Read a deployment recording (a directory of ``episode_*.npz`` from
:class:`robolearn.recording.EpisodeRecorder`) as episodes.

Each file already holds an episode's ``obs/<group>`` (T+1), ``actions`` (what
the robot was sent), ``rewards``, ``terminations`` and ``truncations``;
``commanded_actions`` and ``timestamps`` become ``infos``. The directory's
``metadata.json`` (controller, robot, control period) is kept under
``recording``; episodes cut short by the end of a run (``interrupted``) are
kept and listed in ``interrupted_episodes``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.episode import DatasetError, Episode
from robolearn.recording import load_episode

REQUIRED = ("actions", "rewards", "terminations", "truncations")
INFOS = ("commanded_actions", "timestamps")


def read_recordings(directory: str | Path) -> tuple[list[Episode], dict[str, Any]]:
    """Episodes and metadata of the recording in ``directory``."""
    directory = Path(directory)
    if not directory.is_dir():
        what = "a file" if directory.exists() else "not there"
        raise DatasetError(f"{directory}: {what}; a recording is a directory of episode_*.npz files "
                           "(<run>/deploy/<time> from `robolearn deploy`)")
    files = sorted(directory.glob("episode_*.npz"))
    if not files:
        raise DatasetError(f"{directory}: no episode_*.npz files (a recording directory from `robolearn deploy`)")
    episodes, interrupted = [], []
    for file in files:
        arrays = _load(file)
        missing = [key for key in REQUIRED if key not in arrays]
        groups = {key[len("obs/"):]: value for key, value in arrays.items() if key.startswith("obs/")}
        if missing or not groups:
            absent = missing[0] if missing else "obs/policy"
            raise DatasetError(f"{file}: missing key '{absent}' (found {', '.join(sorted(arrays))})")
        episode = Episode(observations=groups, actions=arrays["actions"], rewards=arrays["rewards"],
                          terminations=arrays["terminations"].astype(bool), truncations=arrays["truncations"].astype(bool),
                          infos={key: arrays[key] for key in INFOS if key in arrays})
        episodes.append(episode.check(str(file)))
        if bool(arrays.get("interrupted", False)):
            interrupted.append(len(episodes) - 1)
    meta: dict[str, Any] = {"interrupted_episodes": interrupted}
    meta_file = directory / "metadata.json"
    if meta_file.is_file():
        try:
            meta["recording"] = json.loads(meta_file.read_text())
        except json.JSONDecodeError as err:
            raise DatasetError(f"{meta_file}: corrupt metadata ({err})") from None
        if "control_dt" in meta["recording"]:
            meta["control_dt"] = meta["recording"]["control_dt"]
        if "controller" in meta["recording"]:
            meta["controller"] = meta["recording"]["controller"]
    return episodes, meta


def _load(file: Path) -> dict[str, np.ndarray]:
    try:
        return load_episode(file)
    except ValueError as err:
        raise DatasetError(str(err)) from None
