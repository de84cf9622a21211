"""D4RL-style HDF5 files in both directions.

A D4RL file holds flat arrays, one row per transition: ``observations``,
``actions``, ``rewards``, ``terminals`` (the MDP ended) and ``timeouts`` (a
time limit ended the episode; absent in old files), optionally
``next_observations`` and ``infos/qpos``, ``infos/qvel``. Episodes end at rows
where ``terminals | timeouts``, and, in a file with ``next_observations``, at
every row whose ``next_observations`` is not the following row's
``observations`` (compared in float32, within 1e-5 relative): the env was
reset there, flagged or not (old files have no ``timeouts``), and
bootstrapping from the reset would cross episodes. Such an end is read as
truncated (terminated where ``terminals`` says so), counted in metadata
``unflagged_resets`` and said; a file where most rows differ (transitions not
stored in order, a shuffled replay buffer) is refused: read as episodes, its
next observations would be replaced by the following rows'. Without ``timeouts`` and ``next_observations`` episodes end only at
terminals, so one that a time limit ended runs on into the next:
:func:`read_d4rl` warns and says so in ``episode_ends``. Rows after the last
end form a final, truncated episode.

Only those per-row keys are read (with ``infos/*``, ``observation_groups/*``
and ``next_observation_groups/*``, below); anything else is skipped unread,
such as the ``metadata/`` group of D4RL's MuJoCo files, which holds the
behaviour policy's weights: its single strings and numbers (``algorithm``,
``iteration``...) become metadata ``d4rl_metadata``. ``rewards``,
``terminals`` and ``timeouts`` may be ``(N,)`` or ``(N, 1)`` (read as
``(N,)``); per-row arrays other than ``infos/*`` must hold numbers. A Minari
``main_data.hdf5`` (``episode_<i>`` groups) is refused, saying where to point
the datasets root to read it in place. So is a file that reads other files (an
external link, a virtual dataset of another file's, data stored in external
raw files): a downloaded file could otherwise import files of this machine's.

Without ``next_observations`` the observation after an episode's last action
is not in the file: :func:`read_d4rl` keeps every transition and repeats the
last observation in its place (metadata ``final_observation: "copied"``;
terminated episodes never bootstrap from it, truncated ones do so
approximately). ``infos/*`` rows are per transition (T per episode).

:func:`write_d4rl` writes ``next_observations`` too, plus what round trips
need and D4RL readers ignore: ``infos/next_<name>`` for per-step infos with a
row for the final observation (our simulator ``state``, ``qpos``, ``qvel``),
``observation_groups/<group>`` and ``next_observation_groups/<group>`` for
groups beside ``policy``, and the dataset's metadata as JSON in the file's
``robolearn_metadata`` attribute. Reading our own export back gives every
array unchanged, but for a step that ended both ways, which comes back
terminated only (:func:`exclusive_timeouts`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from robolearn.checkpoint import usual_mode
from robolearn.data.dataset import Dataset
from robolearn.data.embedded_metadata import read_embedded
from robolearn.data.episode import DatasetError, Episode, as_flags, beyond_float32
from robolearn.data.minari_store import refuse_export_into_a_dataset, refuse_other_files, remove_leftovers, temp_beside
from robolearn.listing import few

REF_SCORES: dict[str, tuple[float, float]] = {
    "halfcheetah": (-280.18, 12135.0),
    "hopper": (-20.27, 3234.3),
    "walker2d": (1.63, 4592.3),
    "ant": (-325.6, 3879.7),
}
"""D4RL's random and expert returns of its MuJoCo locomotion tasks, for normalized scores."""

Flags = TypeVar("Flags")  # a numpy or torch bool array

REQUIRED = ("observations", "actions", "rewards", "terminals")
ROWS = (*REQUIRED, "timeouts", "next_observations")
FLAT = ("rewards", "terminals", "timeouts")  # one value per row: (N,) or (N, 1)
GROUPS, NEXT_GROUPS = "observation_groups", "next_observation_groups"
ROW_GROUPS = ("infos", GROUPS, NEXT_GROUPS)  # groups whose datasets have a row per transition


def ref_scores(task: str | None) -> tuple[float, float] | None:
    """D4RL's (ref_min_score, ref_max_score) for ``task`` (``hopper``, ``half_cheetah``,
    ``gym:Hopper-v5``, ``hopper-medium-v2``...), or None when D4RL has none."""
    if not task:
        return None
    key = re.sub(r"[^a-z0-9]", "", task.lower().removeprefix("gym:").split("-")[0])
    return REF_SCORES.get(key)


def read_d4rl(path: str | Path) -> tuple[list[Episode], dict[str, Any]]:
    """Episodes and metadata of D4RL file ``path``; :class:`DatasetError` names the file,
    key and shapes of anything unusable."""
    import h5py

    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: " + ("a directory; D4RL data is one .hdf5 file" if path.is_dir() else "no such file"))
    try:
        with h5py.File(path, "r") as f:
            refuse_other_files(f, path)
            _check_keys(f, path)
            names = _row_names(f)
            rows = _check_rows(f, names, path)
            arrays = {name: _read(f, name, path) for name in names}
            meta = (read_embedded(f.attrs["robolearn_metadata"], f"{path}: attribute 'robolearn_metadata'")
                    if "robolearn_metadata" in f.attrs else {})
            d4rl_meta = _d4rl_metadata(f)
    except (OSError, KeyError, RuntimeError) as err:  # a corrupt object header: h5py's KeyError or RuntimeError
        reason = str(err).strip("'\"").splitlines()[0]
        raise DatasetError(f"{path}: not a readable HDF5 file (truncated or corrupt: {reason})") from None

    for name in FLAT:
        if name in arrays:
            arrays[name] = arrays[name].reshape(rows)  # (N, 1) -> (N,); _check_rows refused other shapes
    for name in ("terminals", "timeouts"):  # a label column of other values would read as all True
        if name in arrays:
            arrays[name] = as_flags(arrays[name], str(path), name)
    for name in arrays:  # before the resets are read from them (NaN equals nothing), and said at the file's row
        if arrays[name].dtype.kind in "fc" and not (finite := np.isfinite(arrays[name])).all():  # (an episode's had
            # been said as "episode 1 (rows 4-7): ... (first at row 1)", its row 1 the file's row 5)
            row = int(np.argwhere(~finite)[0][0])
            raise DatasetError(f"{path}: '{name}' holds NaN or inf (first at row {row})")
        if not name.startswith("infos/") and (beyond := beyond_float32(arrays[name])):  # at the file's row too
            raise DatasetError(f"{path}: '{name}' holds {beyond[1]:g} at row {beyond[0]}, beyond float32's range "
                               "(what training reads)")
    terminals = arrays["terminals"].astype(bool)
    timeouts = arrays["timeouts"].astype(bool) if "timeouts" in arrays else np.zeros(rows, bool)
    has_next = "next_observations" in arrays
    unflagged = _resets(arrays) & ~(terminals | timeouts) if has_next else np.zeros(rows, bool)
    count = int(unflagged.sum())
    if count > rows // 2:  # not one episode's steps after another: its next observations would be thrown away
        raise DatasetError(f"{path}: at {count} of {rows} rows next_observations is not the next row's observation: "
                           "its transitions are not stored in episode order, and a dataset holds whole episodes, each "
                           "step's next observation the following row's; store the rows episode after episode, in "
                           "step order, as D4RL's files are")
    if count:
        meta["unflagged_resets"] = count
        timeouts |= unflagged  # nothing says the MDP ended there: truncated
        flags = "terminals and timeouts" if "timeouts" in arrays else "terminals (no timeouts)"
        warnings.warn(f"{path}: {count} episode end(s) that {flags} do not flag, read from rows where "
                      f"next_observations is not the next row's observation (the env was reset there; first at row "
                      f"{int(np.argmax(unflagged))}), as truncations", stacklevel=2)
    elif not has_next and "timeouts" not in arrays:
        meta["episode_ends"] = "terminals only (no timeouts or next_observations in the file)"
        warnings.warn(f"{path}: no 'timeouts' or 'next_observations': episodes are split only at terminals, so one "
                      "that a time limit ended runs on into the next (its reset read as the next observation); add "
                      "'timeouts' (True on the last row of each episode no terminal ends) to the file", stacklevel=2)
    ends = np.flatnonzero(terminals | timeouts)
    if rows and (not len(ends) or ends[-1] != rows - 1):
        ends = np.append(ends, rows - 1)
    episodes = []
    start = 0
    for end in ends:
        episode = _episode(arrays, start, end + 1, terminals, timeouts)
        episodes.append(episode.check(f"{path}: episode {len(episodes)} (rows {start}-{end})"))
        start = end + 1
    if not episodes:
        raise DatasetError(f"{path}: no transitions ('observations' has shape {arrays['observations'].shape})")
    if not has_next:
        meta["final_observation"] = "copied"
    if d4rl_meta:
        meta["d4rl_metadata"] = d4rl_meta
    return episodes, meta


def _check_keys(f: Any, path: Path) -> None:
    """Refuse a file without D4RL's keys, naming a Minari dataset as one (its episodes are groups)."""
    keys = sorted(f.keys())
    missing = [key for key in REQUIRED if key not in f]
    episodes = [key for key in keys if re.fullmatch(r"episode_\d+", key)]
    if missing and episodes:
        folder = path.parent.parent if path.parent.name == "data" else None
        where = (f"point ROBOLEARN_DATASETS (or --root) at {folder.parent}, the folder that holds its folder "
                 f"{folder.name}/, and use its name (dataset={folder.name})" if folder else
                 "put it at <root>/<id>/data/main_data.hdf5 beside its metadata.json, point ROBOLEARN_DATASETS "
                 "(or --root) at <root> and use its name (dataset=<id>)")
        count = f"{len(episodes)} episode{'s' * (len(episodes) != 1)}"
        raise DatasetError(f"{path}: a Minari dataset ({count}), not a D4RL file; it is read in place, not imported: "
                           f"{where}")
    if missing:
        raise DatasetError(f"{path}: missing key '{missing[0]}' (D4RL files need {', '.join(REQUIRED)}; "
                           f"found {few(keys)})")
    groups = [key for key in REQUIRED if not hasattr(f[key], "shape")]
    if groups:
        raise DatasetError(f"{path}: '{groups[0]}' is a group (of {few(sorted(f[groups[0]].keys()))}), expected "
                           "one array with a row per transition")


def _row_names(f: Any) -> list[str]:
    """The file's per-row datasets (:data:`ROWS` and the datasets under :data:`ROW_GROUPS`); the rest
    (D4RL's ``metadata/`` with the policy's weights) is never read."""
    names = [name for name in ROWS if name in f and hasattr(f[name], "shape")]
    for group in ROW_GROUPS:
        if group in f and not hasattr(f[group], "shape"):
            found: list[str] = []
            f[group].visititems(lambda name, obj: found.append(name) if hasattr(obj, "shape") else None)
            names += [f"{group}/{name}" for name in found]
    return names


def _check_rows(f: Any, names: list[str], path: Path) -> int:
    """The number of rows; refuse datasets with another, numbers stored as text, next observations
    shaped unlike the observations, columns (rewards, terminals, timeouts) wider than one, and rows
    never written (read as zeros: a writer that stopped early, or a claimed size the file lacks). A column
    is exempt: a writer may set only its nonzero rows (the ends, a sparse reward), zeros being its fill."""
    import h5py

    obs = f["observations"]
    if not obs.shape:
        raise DatasetError(f"{path}: 'observations' has shape (), expected a row per transition")
    rows = obs.shape[0]
    for name in names:
        shape, dtype = f[name].shape, f[name].dtype
        if not shape or shape[0] != rows:
            raise DatasetError(f"{path}: '{name}' has shape {shape}, expected {rows} rows like 'observations' {obs.shape}")
        if dtype.kind not in "biuf" and not name.startswith("infos/"):
            raise DatasetError(f"{path}: '{name}' has dtype {dtype.str}, expected numbers (shape {shape}); "
                               "write it as floats or ints")
        current = re.sub(r"^(infos/)?next_", r"\1", name)
        if current != name and current in names and f[current].shape != shape:
            raise DatasetError(f"{path}: '{name}' has shape {shape}, expected {f[current].shape} like '{current}'")
        if name in FLAT and shape not in ((rows,), (rows, 1)):
            raise DatasetError(f"{path}: '{name}' has shape {shape}, expected ({rows},) or ({rows}, 1): "
                               "one value per transition")
        if (name not in FLAT and f[name].size and not f[name].is_virtual  # (a column's zeros are False and 0)
                and f[name].id.get_space_status() != h5py.h5d.SPACE_STATUS_ALLOCATED):  # HDF5 reads them as zeros
            raise DatasetError(f"{path}: '{name}' {shape} has rows that were never written (its writer stopped "
                               "before writing them, or the file claims more rows than it holds); write the file "
                               "again")
    return rows


def _d4rl_metadata(f: Any) -> dict[str, Any]:
    """The single strings and numbers of the file's ``metadata/`` group (D4RL's ``algorithm``,
    ``iteration``...), read one by one; its arrays (the policy's weights) are never read."""
    group = f.get("metadata")
    if group is None or hasattr(group, "shape"):
        return {}
    found: dict[str, Any] = {}

    def keep(name: str, obj: Any) -> None:
        if not hasattr(obj, "shape") or obj.shape != () or obj.dtype.kind not in "SUObiuf":
            return
        try:
            value = obj[()]
        except (OSError, TypeError, ValueError):
            return  # unreadable metadata costs the file nothing
        value = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        value = value.item() if isinstance(value, np.generic) else value
        if isinstance(value, (str, bool, int)) or (isinstance(value, float) and np.isfinite(value)):
            found[name] = value

    group.visititems(keep)
    return found


def _resets(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """Rows whose next observation (in any group the file has both of) is not the following row's
    observation, in float32 within 1e-5 relative (files store the two at other precisions): the env was
    reset after them. Never the last row."""
    rows = len(arrays["observations"])
    resets = np.zeros(rows, bool)
    if rows < 2:
        return resets
    pairs = [("observations", "next_observations"), *((name, f"{NEXT_GROUPS}/{name[len(GROUPS) + 1:]}")
                                                      for name in arrays if name.startswith(GROUPS + "/"))]
    for current, following in pairs:
        if following in arrays:
            differs = ~np.isclose(arrays[following][:-1].astype(np.float32), arrays[current][1:].astype(np.float32),
                                  rtol=1e-5, atol=1e-12)  # float32 and rtol absorb storage precision; a reset near 0 shows
            resets[:-1] |= differs.any(axis=tuple(range(1, differs.ndim)))
    return resets


def _read(f: Any, name: str, path: Path) -> np.ndarray:
    try:
        return np.asarray(f[name][()])
    except (OSError, KeyError) as err:
        raise DatasetError(f"{path}: cannot read '{name}' {f[name].shape} (truncated or corrupt: {err})") from None
    except MemoryError:  # numpy's error had named neither file nor key
        size = f[name].size * f[name].dtype.itemsize
        raise DatasetError(f"{path}: '{name}' {f[name].shape} takes {size / 2**30:,.1f} GiB, more than this "
                           "machine's memory holds") from None


def _episode(arrays: dict[str, np.ndarray], start: int, stop: int, terminals: np.ndarray,
             timeouts: np.ndarray) -> Episode:
    """Rows ``start:stop`` as an episode with T+1 observations (the last from ``next_observations`` where the
    file has it, else the last row's own)."""
    def observations(current: np.ndarray, following: np.ndarray | None) -> np.ndarray:
        last = following[stop - 1] if following is not None else current[stop - 1]
        return np.concatenate([current[start:stop], last[None]])

    obs = {"policy": observations(arrays["observations"], arrays.get("next_observations"))}
    for name in arrays:
        if name.startswith(GROUPS + "/"):
            group = name[len(GROUPS) + 1:]
            obs[group] = observations(arrays[name], arrays.get(f"{NEXT_GROUPS}/{group}"))
    infos = {}
    for name, value in arrays.items():
        if name.startswith("infos/") and not _companion(name, arrays):
            key = name[len("infos/"):]
            following = arrays.get(f"infos/next_{key}")
            infos[key] = value[start:stop] if following is None else np.concatenate([value[start:stop], following[stop - 1][None]])
    truncations = timeouts[start:stop].copy()
    if not (terminals[stop - 1] or truncations[-1]):
        truncations[-1] = True  # the file ended mid-episode
    return Episode(observations=obs, actions=arrays["actions"][start:stop], rewards=arrays["rewards"][start:stop],
                   terminations=terminals[start:stop].copy(), truncations=truncations, infos=infos)


def _companion(name: str, arrays: dict[str, np.ndarray]) -> bool:
    """Whether ``infos/next_<key>`` holds the rows after ``infos/<key>``'s (which must be there): an info of
    its own name ``next_...`` is kept as one (it had been dropped unread)."""
    return name.startswith("infos/next_") and f"infos/{name[len('infos/next_'):]}" in arrays


def exclusive_timeouts(terminations: Flags, truncations: Flags) -> Flags:
    """D4RL's ``timeouts`` from Gymnasium's flags (numpy or torch booleans).

    A step may end both ways (a fall on the time limit's last step); D4RL's files never flag
    both and readers such as d3rlpy refuse it, and the termination is what a learner must see
    (no bootstrap), so the timeout flag gives way.
    """
    return truncations & ~terminations


def refuse_replacing_other_files(out: Path) -> None:
    """Refuse an export over a file that is not HDF5 (an empty one is taken), as a LeRobot export replaces only a
    LeRobot dataset: ``--out notes.txt --overwrite`` (or a config, by a slip of the hand) had replaced it."""
    import h5py

    if out.is_file() and out.stat().st_size and not h5py.is_hdf5(out):
        raise DatasetError(f"{out}: exists and is not an HDF5 file: not replaced; give the .hdf5 file to write")


def write_d4rl(dataset: Dataset, out: str | Path) -> Path:
    """Write ``dataset`` as a D4RL file ``out`` (atomically: a temp file renamed into place)."""
    import h5py

    out = Path(out)
    if out.is_dir():
        raise DatasetError(f"{out}: a directory; give the .hdf5 file to write, e.g. {out / (dataset.id + '.hdf5')}")
    if out.is_symlink():  # the file it points to is replaced; the rename would have replaced the link itself
        out = out.resolve()
    refuse_export_into_a_dataset(out)
    refuse_replacing_other_files(out)
    dataset.need_episodes("export")
    episodes = [e.check(f"{dataset.path}: episode {i}") for i, e in enumerate(dataset.episodes)]  # (written elsewhere)
    columns: dict[str, list[np.ndarray]] = {}
    def add(name: str, value: np.ndarray) -> None:
        columns.setdefault(name, []).append(value)

    info_keys = set.intersection(*(set(e.infos) for e in episodes))
    if partial := sorted(set.union(*(set(e.infos) for e in episodes)) - info_keys):  # a merge of another source's
        having = sum(partial[0] in e.infos for e in episodes)
        warnings.warn(f"{out}: infos {', '.join(partial)} left out: {having} of {len(episodes)} episodes of "
                      f"'{dataset.id}' have {partial[0]}, and a D4RL file's columns run over every row", stacklevel=2)
    with_final_row = {key for key in info_keys if all(len(e.infos[key]) == len(e) + 1 for e in episodes)}
    # read back, a file's infos/next_<x> beside infos/<x> is taken for <x>'s final rows
    if clash := sorted(key for key in info_keys if f"next_{key}" in info_keys):
        raise DatasetError(f"{out}: infos {', '.join(clash)} and {', '.join('next_' + c for c in clash)}: a D4RL "
                           "file keeps an info's final rows as infos/next_<name>, so the two would be read back as "
                           "one: rename one of them")
    ends = [e.terminations[:-1].astype(bool) | e.truncations[:-1].astype(bool) for e in episodes]
    if early := [i for i, flagged in enumerate(ends) if flagged.any()]:
        warnings.warn(f"{out}: episodes {early[:5]}{' ...' if len(early) > 5 else ''} of '{dataset.id}' are flagged "
                      "ended before their last step (as a LeRobot source's next.done can be): a D4RL file ends "
                      "episodes at its flags, so they read back split there", stacklevel=2)
    for episode in episodes:
        steps = len(episode)
        for group, value in episode.observations.items():
            prefix = ("observations", "next_observations") if group == "policy" else (f"{GROUPS}/{group}", f"{NEXT_GROUPS}/{group}")
            add(prefix[0], value[:-1])
            add(prefix[1], value[1:])
        add("actions", episode.actions)
        add("rewards", episode.rewards)
        terminated = episode.terminations.astype(bool)
        add("terminals", terminated)
        add("timeouts", exclusive_timeouts(terminated, episode.truncations.astype(bool)))
        for key in sorted(info_keys):
            value = episode.infos[key]
            add(f"infos/{key}", value[:steps])
            if key in with_final_row:
                add(f"infos/next_{key}", value[1:])
    remove_leftovers(out.parent, legacy=False)  # what exports killed outright (kill -9) left there
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        folder, lock = temp_beside(out)  # a folder, named and locked as a dataset writer's: cleaned up after a kill
    except OSError as err:  # said of the file asked for, not of the temp folder beside it
        raise DatasetError(f"{out}: cannot write there ({err.strerror})") from None
    tmp = folder / out.name
    try:
        with h5py.File(tmp, "w") as f:
            for name, parts in columns.items():
                f.create_dataset(name, data=np.concatenate(parts), compression="gzip", compression_opts=4)
            f.attrs["robolearn_metadata"] = json.dumps(dataset.writer_metadata(exported_from=dataset.id))
        os.chmod(tmp, usual_mode())
        os.replace(tmp, out)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if lock is not None:
            os.close(lock)
    return out
