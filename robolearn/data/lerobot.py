"""LeRobot v3 datasets (a local directory) in both directions: read as episodes, and written.

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
and ``robolearn dataset import`` names the choice it made. ``next.success``
(as LeRobot's simulation datasets have it), where present, becomes the
episode's ``infos/success``, and an ``infos.<name>`` feature its ``infos/<name>``
(one row per frame).

Writing (:func:`write_lerobot`, ``robolearn dataset export --format lerobot``)
is the same mapping the other way: one frame per step, ``next.done`` set where
an episode terminated (a time limit or a stopped recording leaves it unset:
the default reading above gives the same flags back), ``next.success`` where
the episodes recorded it, our simulators' state of each frame as float64
features ``infos.state``, ``infos.qpos`` and ``infos.qvel`` where every episode
has them (so a replay of the read-back episodes restores the recorded state),
``timestamp`` = frame / fps, one task (the dataset's
task name), and ``meta/stats.json`` and per-episode statistics as lerobot
writes them. Our metadata (task, task settings, reference scores, the state
rows' format) goes to ``meta/robolearn.json``, which lerobot ignores and this
reader takes back. What LeRobot has no place for is left out: an episode's
final observation and state (read back as a copy of the last observation; no
state row), other infos (commanded actions, timestamps), float64 precision of
the other arrays (written as float32).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.embedded_metadata import read_embedded
from robolearn.data.episode import DatasetError, Episode, as_flags, is_positive_number
from robolearn.listing import few

IMAGE_DTYPES = ("image", "video", "string")


DONE_MEANINGS = ("terminal", "truncation")
FRAME_OUTCOMES = ("next.reward", "next.done", "next.success")  # what a frame's action led to
INFOS = "infos."  # a feature holding an episode's info, one row per frame: infos.state, infos.qpos, infos.qvel
SIMULATOR_INFOS = ("state", "qpos", "qvel")  # the infos written: what a replay restores the simulator from
UNJUDGED = "unjudged_episodes"  # meta/robolearn.json: episodes whose next.success is False for want of an outcome


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
    if not isinstance(features, dict):
        raise DatasetError(f"{info_path}: 'features' is a {type(features).__name__}; a mapping of feature names")
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
    for key, spec in features.items():  # a list, a string or shape "three" had been a traceback further on
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if not isinstance(spec, dict) or (shape is not None and not (isinstance(shape, list) and all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape))):
            raise DatasetError(f"{info_path}: feature '{key}' is {spec!r}; a mapping with a 'shape' list of whole "
                               "numbers and a 'dtype'")
    groups = {"observation.state": "policy"} | {
        key: key.removeprefix("observation.") for key, spec in features.items()
        if key.startswith("observation.") and key != "observation.state" and spec.get("dtype") not in IMAGE_DTYPES}
    extras = {key: key.removeprefix(INFOS) for key in features if key.startswith(INFOS)}
    wanted = ["episode_index", "frame_index", *groups, "action", *extras] + [k for k in FRAME_OUTCOMES if k in features]

    columns: dict[str, list[np.ndarray]] = {key: [] for key in wanted}
    for file in files:
        try:
            table = pq.read_table(file)
            names = table.column_names  # (decoded here: a column name's damaged bytes are a UnicodeDecodeError)
        except (pa.ArrowException, OSError, UnicodeDecodeError) as err:
            raise DatasetError(f"{file}: not a readable parquet file (truncated or corrupt: {str(err).splitlines()[0]})") from None
        for key in wanted:
            if key not in names:
                raise DatasetError(f"{file}: missing column '{key}' (info.json lists it; columns: {', '.join(names)})")
            shape = tuple(features[key].get("shape") or ()) if key in features else ()
            columns[key].append(_column(table.column(key), shape, file, key))
    data = {key: np.concatenate(parts) for key, parts in columns.items()}
    for key in ("episode_index", "frame_index", *FRAME_OUTCOMES):  # shape [1] features are per-frame scalars
        if key in data:
            data[key] = data[key].reshape(len(data[key]))

    if not len(data["episode_index"]):
        raise DatasetError(f"{root}: no frames in {', '.join(str(file) for file in files)}")
    for key in ("episode_index", "frame_index"):  # 'ep0', 0.5 or a null would be cast or misread below
        if data[key].dtype.kind not in "iu":
            raise DatasetError(f"{root}: column '{key}' holds {data[key].dtype} values, expected whole numbers")
    _check_frame_count(root, info, data["episode_index"], files)
    order = np.lexsort((data["frame_index"], data["episode_index"]))
    data = {key: value[order] for key, value in data.items()}
    own = _own_metadata(root, has_state=f"{INFOS}state" in features)
    unjudged = set(own.pop(UNJUDGED, None) or [])  # our export's episodes with no outcome: none read back
    episodes, ends_only = [], True  # ends_only: every episode done on its last frame and nowhere else
    for index in np.unique(data["episode_index"]):
        rows = np.flatnonzero(data["episode_index"] == index)
        frames = data["frame_index"][rows]
        where = f"{root}: episode_index {int(index)}"
        if not np.array_equal(frames, np.arange(len(rows))):
            raise DatasetError(f"{where}: frame_index is not 0..{len(rows) - 1} (found {frames[:5].tolist()}...)")
        done = as_flags(data["next.done"][rows], where, "next.done") if "next.done" in data else np.zeros(len(rows), bool)
        rewards = data["next.reward"][rows] if "next.reward" in data else np.zeros(len(rows), np.float32)
        observations = {group: np.concatenate([data[key][rows], data[key][rows[-1:]]]) for key, group in groups.items()}
        ends_only &= bool(done[-1]) and not done[:-1].any()
        terminations = done if done_means == "terminal" else np.zeros(len(rows), bool)
        truncations = np.zeros(len(rows), bool) if done_means == "terminal" else done.copy()
        truncations[-1] |= not done[-1]
        judged = "next.success" in data and int(index) not in unjudged
        infos = {"success": as_flags(data["next.success"][rows], where, "next.success")} if judged else {}
        infos |= {name: data[key][rows] for key, name in extras.items()}  # one row per frame: no final one
        episode = Episode(observations=observations, actions=data["action"][rows], rewards=rewards,
                          terminations=terminations, truncations=truncations, infos=infos)
        episodes.append(episode.check(where))
    meta: dict[str, Any] = own | {"final_observation": "copied", "lerobot_codebase_version": info.get("codebase_version"),
                            "robot_type": info.get("robot_type"), "lerobot_episode_index": np.unique(data["episode_index"]).tolist()}
    if info.get("fps") is not None:  # a rate of 0, -10 or "abc" had become a control period of inf, -0.1 or an error
        fps = info["fps"]
        if not is_positive_number(fps):
            raise DatasetError(f"{info_path}: 'fps' is {fps!r}; a positive number of frames per second, or null")
        meta["control_dt"] = 1.0 / float(fps)
    if "next.reward" not in features:
        meta["rewards"] = "absent"
    if "next.done" in data:
        meta["next_done_read_as"] = done_means
        meta["next_done_on_last_frames_only"] = ends_only  # LeRobot's usual layout: why they ended is not said
    return episodes, meta


def _check_frame_count(root: Path, info: dict[str, Any], episode_index: np.ndarray, files: list[Path]) -> None:
    """Refuse data files that hold other than info.json's ``total_frames``: a data file missing or cut short
    had imported as fewer episodes, or an episode ending early, without a word. Files missing whole, each
    episode read as long as meta/episodes lists it, are a partial download (LeRobot's ``LeRobotDataset(repo,
    episodes=[...])`` fetches only their files): imported, said with the episodes left out."""
    total, frames = info.get("total_frames"), len(episode_index)
    if not isinstance(total, int) or isinstance(total, bool) or total == frames:
        return
    read = ", ".join(file.relative_to(root).as_posix() for file in files)
    lengths = _episode_lengths(root) if frames < total else None
    indices, counts = np.unique(episode_index, return_counts=True)
    if lengths and all(lengths.get(int(i)) == int(n) for i, n in zip(indices, counts)):
        absent = sorted(set(lengths) - set(indices.tolist()))
        shown = few(absent, 10)
        warnings.warn(f"{root}: its data files ({read}) hold {len(indices)} of the {len(lengths)} episodes "
                      f"meta/episodes lists, {frames} of info.json's {total} frames (a partial download?): episodes "
                      f"{shown} are not imported", stacklevel=3)
        return
    which = "missing or cut short" if frames < total else "there that info.json does not count"
    raise DatasetError(f"{root}: meta/info.json's total_frames is {total}, its data files hold {frames} ({read}): "
                       f"a data file is {which}; copy or download the dataset again")


def _episode_lengths(root: Path) -> dict[int, int] | None:
    """Each episode's frame count as meta/episodes/chunk-*/file-*.parquet lists it; None where it is absent or
    unreadable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lengths: dict[int, int] = {}
    for file in sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet")):
        try:
            table = pq.read_table(file, columns=["episode_index", "length"]).to_pydict()
        except (pa.ArrowException, OSError, UnicodeDecodeError, KeyError):
            return None
        lengths.update(zip(table["episode_index"], table["length"]))
    return lengths or None


def _own_metadata(root: Path, has_state: bool) -> dict[str, Any]:
    """What our export kept beside lerobot's files (``meta/robolearn.json``: task, task settings, reference
    scores...), its ``state`` format only where the dataset ``has_state`` rows (``infos.state``); empty for
    other datasets, or where it is unreadable (said)."""
    path = root / "meta" / "robolearn.json"
    if not path.is_file():
        return {}
    try:
        text = path.read_bytes()
    except OSError as err:
        warnings.warn(f"{path}: unreadable ({type(err).__name__}), left out: the task and its settings are not "
                      "known from it", stacklevel=3)
        return {}
    meta = read_embedded(text, str(path))
    return meta if has_state else _without_state(meta)  # (an export from before the state rows were written)


def _without_state(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` less ``state`` (the simulator state rows' format), for a dataset without state rows: metadata
    that names them had a replay of the read-back dataset and ``dataset info`` promise what it lacks."""
    return {key: value for key, value in meta.items() if key != "state"}


def _column(column: Any, shape: tuple[int, ...], file: Path, key: str) -> np.ndarray:
    """A parquet column as ``(rows, *shape)`` numpy; list columns are unpacked."""
    import pyarrow as pa

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    nested = any(kind(column.type) for kind in (pa.types.is_list, pa.types.is_fixed_size_list, pa.types.is_large_list))
    missing = column.null_count + (column.flatten().null_count if nested else 0)
    if missing:  # (a null had read as NaN, or as a frame or width mismatch: refused, but the reason indirect)
        where = f"rows {np.flatnonzero(np.asarray(column.is_null()))[:5].tolist()}" if column.null_count else \
            "inside its rows' lists"
        raise DatasetError(f"{file}: column '{key}' has {missing} null value(s) ({where}); every frame needs one")
    if nested:
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


# -- writing ------------------------------------------------------------------------------------------------
# Our own writer, not lerobot's LeRobotDataset.create: the lerobot package pins an older torch (0.4.x: < 2.8;
# its current releases: < 2.12 and Python >= 3.12) than this stack runs. The files follow what lerobot 0.4.0 writes and were checked by
# loading them with its LeRobotDataset (see the README's "Datasets" section).

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
STATISTICS = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")


def write_lerobot(dataset: Any, out: str | Path, fps: float | None = None, overwrite: bool = False) -> Path:
    """Write ``dataset`` (a :class:`~robolearn.data.Dataset`) as the LeRobot v3.0 dataset directory ``out``
    (one frame per step: its observation, its action, ``next.reward``, ``next.done`` where the episode
    terminated, ``next.success`` where recorded), built beside ``out`` and renamed into place: an
    interrupted export leaves nothing half-written. ``fps`` defaults to 1 / the dataset's ``control_dt``.
    With ``overwrite``, only a LeRobot dataset (one with ``meta/info.json``) is replaced."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from robolearn.checkpoint import usual_mode
    from robolearn.data.minari_store import (WRITING, interrupts_deferred, refuse_export_into_a_dataset,
                                             remove_leftovers, set_aside_name, temp_beside)

    out = Path(out)
    if out.is_symlink():  # the folder it points to is replaced; the swap below would have replaced the link itself
        out = out.resolve()
    refuse_export_into_a_dataset(out)
    # an export killed outright: its temp folder, and the copy its swap set aside put back
    remove_leftovers(out.parent, legacy=False)
    if blocked := next((parent for parent in out.parents if parent.exists() and not parent.is_dir()), None):
        raise DatasetError(f"{out}: {blocked} is a file, not a folder; give a directory for the dataset")
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):  # an empty folder made for it is taken
        if not (out / "meta" / "info.json").is_file():  # said first: --overwrite would not replace it either
            what = "a file" if not out.is_dir() else "a folder that is not a LeRobot dataset (no meta/info.json)"
            raise DatasetError(f"{out}: exists and is {what}: not replaced; give a new directory")
        if not overwrite:
            raise FileExistsError(f"{out}: a LeRobot dataset exists there; pass --overwrite to replace it")
    fps = _frames_per_second(dataset, fps)
    dataset.need_episodes("export")
    episodes = [e.check(f"{dataset.path}: episode {i}") for i, e in enumerate(dataset.episodes)]  # (written elsewhere)
    columns, features = _frames(episodes, fps)
    written = {"success", *(key[len(INFOS):] for key in columns if key.startswith(INFOS))}
    if left_out := sorted(set().union(*(e.infos for e in episodes)) - written):  # a robot's safety flags, say
        warnings.warn(f"{out}: infos {', '.join(left_out)} of '{dataset.id}' left out: a LeRobot dataset has no "
                      "place for them (a D4RL export keeps them)", stacklevel=2)
    task = str(dataset.task or dataset.id)
    starts = np.cumsum([0] + [len(e) for e in episodes])
    per_episode = {key: [_statistics(columns[key][a:b]) for a, b in zip(starts, starts[1:])] for key in features}
    robot = dataset.info.get("robot_type") or (dataset.info.get("recording") or {}).get("robot")
    tables = {
        DATA_PATH.format(chunk_index=0, file_index=0): pa.table({key: _arrow(columns[key]) for key in features}),
        "meta/episodes/chunk-000/file-000.parquet": pa.table({
            "episode_index": pa.array(range(len(episodes)), pa.int64()),
            "tasks": pa.array([[task]] * len(episodes), pa.list_(pa.string())),
            "length": pa.array([len(e) for e in episodes], pa.int64()),
            "data/chunk_index": pa.array([0] * len(episodes), pa.int64()),
            "data/file_index": pa.array([0] * len(episodes), pa.int64()),
            "dataset_from_index": pa.array(starts[:-1], pa.int64()),
            "dataset_to_index": pa.array(starts[1:], pa.int64()),
            **{f"stats/{key}/{stat}": pa.array([stats[stat] for stats in per_episode[key]])
               for key in features for stat in STATISTICS},
            "meta/episodes/chunk_index": pa.array([0] * len(episodes), pa.int64()),
            "meta/episodes/file_index": pa.array([0] * len(episodes), pa.int64()),
        }),
        # pandas' layout: lerobot reads this with pandas.read_parquet and looks tasks up by the index
        "meta/tasks.parquet": pa.table({"task_index": pa.array([0], pa.int64()), "__index_level_0__": [task]})
        .replace_schema_metadata({"pandas": json.dumps(_PANDAS_TASKS)}),
    }
    info = {"codebase_version": CODEBASE_VERSION, "robot_type": robot,
            "total_episodes": len(episodes), "total_frames": int(starts[-1]), "total_tasks": 1, "chunks_size": 1000,
            "data_files_size_in_mb": 100, "video_files_size_in_mb": 500, "fps": fps,
            "splits": {"train": f"0:{len(episodes)}"}, "data_path": DATA_PATH, "video_path": None, "features": features}
    own = dataset.writer_metadata(exported_from=dataset.id)
    own = own if f"{INFOS}state" in columns else _without_state(own)
    if "next.success" in columns and (unjudged := [i for i, e in enumerate(episodes) if "success" not in e.infos]):
        own[UNJUDGED] = unjudged
        warnings.warn(f"episode(s) {few(unjudged)} of {dataset.id} have no outcome (cut short): LeRobot's "
                      "next.success column reads False for them; meta/robolearn.json lists them "
                      f"({UNJUDGED}), and robolearn reads them back without one", stacklevel=2)
    texts = {"meta/info.json": info, "meta/stats.json": {key: _statistics(columns[key]) for key in features},
             "meta/robolearn.json": own}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp, lock = temp_beside(out)
    except OSError as err:
        raise DatasetError(f"{out}: cannot write there ({err.strerror})") from None
    old = None
    try:
        for name, table in tables.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, tmp / name)
        for name, content in texts.items():
            (tmp / name).write_text(json.dumps(content, indent=4))
        os.chmod(tmp, usual_mode(0o777))  # mkdtemp's 0700 would keep the dataset from others
        with interrupts_deferred():  # what is there now, not at the start (a build takes minutes)
            if out.exists() and overwrite and (out / "meta" / "info.json").is_file():  # swap whole directories
                old = set_aside_name(out)
                out.rename(old)
            try:
                tmp.rename(out)  # onto anything else there, refused by the file system: nothing is replaced
            except OSError as err:
                if old is not None:
                    old.rename(out)  # the one replaced stays
                    old = None
                if out.exists():
                    raise FileExistsError(f"{out}: appeared while the export was written ({err.strerror}); "
                                          "not replaced: give a new directory") from None
                raise
            (out / WRITING).unlink(missing_ok=True)  # the lock, held until the export is in place
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if lock is not None:
            os.close(lock)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return out


def _frames_per_second(dataset: Any, fps: float | None) -> int | float:
    """``fps``, else 1 / the dataset's control period; whole numbers as ints (lerobot's ``fps`` is one)."""
    dt, given = dataset.info.get("control_dt"), fps is not None
    if fps is None:
        if not dt:
            raise DatasetError(f"dataset '{dataset.id}' does not say its control period (no control_dt): LeRobot "
                               "datasets need one; pass --fps")
        fps = 1.0 / float(dt)
    if not is_positive_number(fps):  # before any warning about what it would write
        raise ValueError(f"--fps must be a positive number, got {fps:g}")
    if given and dt and abs(fps * float(dt) - 1.0) > 1e-6:
        warnings.warn(f"--fps {fps:g}: dataset '{dataset.id}' was recorded at {1.0 / float(dt):g} frames per second "
                      f"(control_dt {float(dt):g} s); its timestamps will say {fps:g}", stacklevel=3)
    if round(fps) >= 1 and abs(fps - round(fps)) < 1e-6 * fps:
        return int(round(fps))
    warnings.warn(f"{fps:g} frames per second is not a whole number, which lerobot's fps is meant to be; written "
                  "as it is", stacklevel=3)
    return float(fps)


def _frames(episodes: list[Episode], fps: int | float) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Every frame's columns, and their features as info.json states them (in column order)."""
    def vectors(name: str, parts: list[np.ndarray]) -> np.ndarray:
        value = np.concatenate(parts)
        if value.ndim > 2:
            raise DatasetError(f"'{name}' has shape {list(value.shape[1:])} per step: the LeRobot export writes "
                               "vectors only")
        return value.reshape(len(value), -1).astype(np.float32)

    groups = list(episodes[0].observations)
    columns = {("observation.state" if g == "policy" else f"observation.{g}"): vectors(g, [e.observations[g][:-1] for e in episodes])
               for g in groups}
    columns["action"] = vectors("actions", [e.actions for e in episodes])
    columns["next.reward"] = np.concatenate([e.rewards for e in episodes]).astype(np.float32)
    columns["next.done"] = np.concatenate([e.terminations for e in episodes]).astype(bool)
    if any("success" in e.infos for e in episodes):  # after each step: the last T rows (of T or T + 1)
        # A column for every frame: an episode without an outcome (a recording cut short) is False in it, and
        # listed in meta/robolearn.json (unjudged_episodes); dropping the column had lost the others' outcomes
        columns["next.success"] = np.concatenate([np.asarray(e.infos["success"])[-len(e):].reshape(len(e))
                                                  if "success" in e.infos else np.zeros(len(e), bool)
                                                  for e in episodes]).astype(bool)
    for name in SIMULATOR_INFOS:  # each frame's state, in float64 (exact): a replay restores the simulator from it
        if all(name in e.infos for e in episodes):  # (an episode's last row, after its last action, has no frame)
            columns[INFOS + name] = np.concatenate([np.asarray(e.infos[name])[:len(e)].reshape(len(e), -1)
                                                    for e in episodes]).astype(np.float64)
    frame = np.concatenate([np.arange(len(e)) for e in episodes])
    columns["timestamp"] = (frame / fps).astype(np.float32)
    columns["frame_index"] = frame.astype(np.int64)
    columns["episode_index"] = np.concatenate([np.full(len(e), i) for i, e in enumerate(episodes)]).astype(np.int64)
    columns["index"] = np.arange(len(frame), dtype=np.int64)
    columns["task_index"] = np.zeros(len(frame), np.int64)
    dtypes = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64", np.dtype(np.int64): "int64",
              np.dtype(bool): "bool"}
    features = {key: {"dtype": dtypes[value.dtype], "shape": list(value.shape[1:]) or [1], "names": None}
                for key, value in columns.items()}
    return columns, features


def _arrow(values: np.ndarray) -> Any:
    """A column as lerobot stores it: vectors as fixed-size lists, one-number features as plain scalars."""
    import pyarrow as pa

    if values.ndim == 1 or values.shape[1] == 1:  # shape [1]: lerobot reads a scalar column, not a list of one
        return pa.array(values.reshape(-1))
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])


def _statistics(values: np.ndarray) -> dict[str, list]:
    """lerobot's per-feature statistics, one entry per dimension (min and max in the feature's type)."""
    rows = values.reshape(len(values), -1)
    numbers = rows.astype(np.float64)
    stats = {"min": rows.min(0).tolist(), "max": rows.max(0).tolist(), "mean": numbers.mean(0).tolist(),
             "std": numbers.std(0).tolist(), "count": [len(rows)]}
    for q in (1, 10, 50, 90, 99):
        stats[f"q{q:02d}"] = np.quantile(numbers, q / 100, axis=0).tolist()
    return stats


_PANDAS_TASKS = {  # pandas' metadata for a frame of one int64 column indexed by strings (the task texts)
    "index_columns": ["__index_level_0__"],
    "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                        "metadata": {"encoding": "UTF-8"}}],
    "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
                 "metadata": None},
                {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode", "numpy_type": "object",
                 "metadata": None}],
    "attributes": {}, "creator": {"library": "pyarrow", "version": "0"}, "pandas_version": "2.0.0",
}
