"""Read LeRobot v3 datasets (a local directory) as episodes.

Layout: ``meta/info.json`` (``fps``, ``features`` with dtype/shape/names),
``data/chunk-*/file-*.parquet`` with one row per frame: ``episode_index``,
``frame_index``, ``observation.state``, ``action``, and optionally
``next.reward`` and ``next.done`` (the reward and end after the frame's
action). Videos and images are not read.

Mapping: ``observation.state`` becomes group ``policy``; other non-image
``observation.<name>`` features become group ``<name>``. Every frame is one
step (its action, its ``next.reward``, its ``next.done``), so every array of
the source is kept unchanged. LeRobot does not store the observation after an
episode's last action, so the final observation repeats the last one (metadata
``final_observation: "copied"``), and an episode whose last frame is not
``next.done`` is marked truncated. Without ``next.reward`` the rewards are
zero (metadata ``rewards: "absent"``).

``next.done`` does not say why an episode ended: recorders set it where the
task was solved or failed (a termination: no bootstrap) and also where the
recording merely stopped (a time limit: a truncation). ``done_means="terminal"``
reads it as the first, ``"truncation"`` as the second; when every
episode is done on its last frame and nowhere else (LeRobot's usual layout,
and what both look like), metadata ``next_done_on_last_frames_only`` says so
and ``robolearn dataset import`` names the choice it made.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.episode import DatasetError, Episode

IMAGE_DTYPES = ("image", "video", "string")


DONE_MEANINGS = ("terminal", "truncation")


def read_lerobot(root: str | Path, done_means: str = "terminal") -> tuple[list[Episode], dict[str, Any]]:
    """Episodes and metadata of the LeRobot v3 dataset in directory ``root``; ``done_means`` says what
    ``next.done`` is (see the module docstring)."""
    if done_means not in DONE_MEANINGS:
        raise ValueError(f"done_means must be one of {', '.join(DONE_MEANINGS)}, got {done_means!r}")
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(root)
    if not root.is_dir():
        what = "a file" if root.exists() else "no such directory"
        raise DatasetError(f"{root}: not a LeRobot dataset ({what}): lerobot expects a directory holding "
                           "meta/info.json and data/chunk-*/ (a D4RL .hdf5 file imports with --format d4rl)")
    info_path = root / "meta" / "info.json"
    try:
        info = json.loads(info_path.read_text())
        features: dict[str, Any] = info["features"]
    except FileNotFoundError:
        raise DatasetError(f"{root}: not a LeRobot dataset (no meta/info.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
        raise DatasetError(f"{info_path}: unreadable LeRobot metadata ({type(err).__name__}: {err})") from None
    for key in ("observation.state", "action"):
        if key not in features:
            raise DatasetError(f"{info_path}: missing feature '{key}' (features: {', '.join(sorted(features))})")
    files = sorted((root / "data").glob("chunk-*/file-*.parquet"))
    version = str(info.get("codebase_version", ""))
    if not files and (version.startswith("v2") or any((root / "data").glob("chunk-*/episode_*.parquet"))):
        raise DatasetError(f"{root}: a LeRobot {version or 'v2'} dataset (one parquet file per episode); only v3 is "
                           "read: convert it with lerobot's convert_dataset_v21_to_v30 (lerobot/datasets/v30/)")
    if not files:
        raise DatasetError(f"{root}: no data/chunk-*/file-*.parquet files")
    groups = {"observation.state": "policy"} | {
        key: key.removeprefix("observation.") for key, spec in features.items()
        if key.startswith("observation.") and key != "observation.state" and spec.get("dtype") not in IMAGE_DTYPES}
    wanted = ["episode_index", "frame_index", *groups, "action"] + [k for k in ("next.reward", "next.done") if k in features]

    columns: dict[str, list[np.ndarray]] = {key: [] for key in wanted}
    for file in files:
        try:
            table = pq.read_table(file)
        except (pa.ArrowException, OSError) as err:
            raise DatasetError(f"{file}: not a readable parquet file (truncated or corrupt: {str(err).splitlines()[0]})") from None
        for key in wanted:
            if key not in table.column_names:
                raise DatasetError(f"{file}: missing column '{key}' (info.json lists it; columns: {', '.join(table.column_names)})")
            shape = tuple(features[key].get("shape") or ()) if key in features else ()
            columns[key].append(_column(table.column(key), shape, file, key))
    data = {key: np.concatenate(parts) for key, parts in columns.items()}
    for key in ("episode_index", "frame_index", "next.reward", "next.done"):  # shape [1] features are per-frame scalars
        if key in data:
            data[key] = data[key].reshape(len(data[key]))

    order = np.lexsort((data["frame_index"], data["episode_index"]))
    data = {key: value[order] for key, value in data.items()}
    episodes, ends_only = [], True  # ends_only: every episode done on its last frame and nowhere else
    for index in np.unique(data["episode_index"]):
        rows = np.flatnonzero(data["episode_index"] == index)
        frames = data["frame_index"][rows]
        where = f"{root}: episode_index {int(index)}"
        if not np.array_equal(frames, np.arange(len(rows))):
            raise DatasetError(f"{where}: frame_index is not 0..{len(rows) - 1} (found {frames[:5].tolist()}...)")
        done = data["next.done"][rows].astype(bool) if "next.done" in data else np.zeros(len(rows), bool)
        rewards = data["next.reward"][rows] if "next.reward" in data else np.zeros(len(rows), np.float32)
        observations = {group: np.concatenate([data[key][rows], data[key][rows[-1:]]]) for key, group in groups.items()}
        ends_only &= bool(done[-1]) and not done[:-1].any()
        terminations = done if done_means == "terminal" else np.zeros(len(rows), bool)
        truncations = np.zeros(len(rows), bool) if done_means == "terminal" else done.copy()
        truncations[-1] |= not done[-1]
        episode = Episode(observations=observations, actions=data["action"][rows], rewards=rewards,
                          terminations=terminations, truncations=truncations)
        episodes.append(episode.check(where))
    meta: dict[str, Any] = {"final_observation": "copied", "lerobot_codebase_version": info.get("codebase_version"),
                            "robot_type": info.get("robot_type"), "lerobot_episode_index": np.unique(data["episode_index"]).tolist()}
    if info.get("fps"):
        meta["control_dt"] = 1.0 / float(info["fps"])
    if "next.reward" not in features:
        meta["rewards"] = "absent"
    if "next.done" in data:
        meta["next_done_read_as"] = done_means
        meta["next_done_on_last_frames_only"] = ends_only  # LeRobot's usual layout: why they ended is not said
    return episodes, meta


def _column(column: Any, shape: tuple[int, ...], file: Path, key: str) -> np.ndarray:
    """A parquet column as ``(rows, *shape)`` numpy; list columns are unpacked."""
    import pyarrow as pa

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type) or pa.types.is_large_list(column.type):
        lengths = np.asarray(column.value_lengths()) if not pa.types.is_fixed_size_list(column.type) else None
        values = np.asarray(column.flatten())
        width = int(np.prod(shape)) if shape else (values.size // max(len(column), 1))
        if (lengths is not None and (lengths != width).any()) or values.size != len(column) * width:
            found = sorted(set(lengths.tolist())) if lengths is not None else values.size // max(len(column), 1)
            raise DatasetError(f"{file}: column '{key}' rows hold {found} values, info.json says shape {list(shape)}")
        return values.reshape(len(column), *(shape or (width,)))
    values = np.asarray(column)
    if shape and int(np.prod(shape)) != 1:
        raise DatasetError(f"{file}: column '{key}' holds scalars, info.json says shape {list(shape)}")
    return values.reshape(len(column), *shape) if shape else values
