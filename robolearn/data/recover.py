"""Make a dataset of the episodes a recording left uncommitted when it was killed.

A recording (``DatasetWriter(keep_partial=True)``, as ``robolearn dataset record`` makes it) writes into a
hidden temp folder beside its dataset and renames that into place when it ends, also on Ctrl+C or an error.
``kill -9``, an out-of-memory kill, a power cut or a crash of the interpreter leave the folder behind: its
complete episodes, counted in Minari's metadata as each is written, and the recording's metadata (task,
settings, controller), written when it started. :func:`recover` copies those episodes through a new
:class:`DatasetWriter` (so they are checked, and the dataset appears whole or not at all) as the dataset the
recording was writing, then removes the folder. An episode the writer was in the middle of is left out.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tqdm import tqdm

from robolearn.data.dataset import Dataset, minari_episode
from robolearn.data.episode import DatasetError, Episode
from robolearn.data.minari_store import (KEEPS_PARTIAL, abandoned, dataset_id, datasets_root, hold_lock,
                                        read_storage, restore_metadata, uncommitted_episodes)


@dataclass
class Recovered:
    """What :func:`recover` made of a folder."""

    dataset: Dataset
    folder: Path  # the temp folder it came from (now removed)
    left_out: int  # episodes the recording had begun to write but not finished


def uncommitted_recordings(root: str | Path | None = None) -> list[Path]:
    """The temp folders of recordings under the root (at any depth: namespaces) whose writer is gone and that
    hold complete episodes, sorted."""
    found: list[Path] = []
    folders = [datasets_root(root)]
    while folders:
        folder = folders.pop()
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                if abandoned(entry) is not None and uncommitted_episodes(entry):
                    found.append(entry)
            elif entry.is_dir() and not entry.is_symlink() and not (entry / "data").is_dir():  # a namespace
                folders.append(entry)
    return sorted(found)


def recover(folder: str | Path, name: str | None = None, root: str | Path | None = None,
            overwrite: bool = False) -> Recovered:
    """Commit the complete episodes in recording temp folder ``folder`` as a dataset and remove the folder.

    Without ``name`` the dataset is the one the recording was writing, beside the folder (its next free
    version where that name has been taken since); with ``name``, that dataset under ``root``."""
    folder = Path(folder).expanduser().resolve()
    if not (folder / KEEPS_PARTIAL).is_file():
        raise DatasetError(f"{folder}: not a recording's temp folder (.<dataset>.tmp-<pid>@<host>-..., holding "
                           f"{KEEPS_PARTIAL}); `robolearn dataset list` names those left uncommitted (an import's, "
                           "split's or merge's temp folder is not kept: do that again)")
    match = abandoned(folder)
    if match is None:
        raise DatasetError(f"{folder}: its recording is still writing it, or ran on another machine (the folder "
                           "names its pid and host); recover it once it has stopped, on that machine")
    lock = hold_lock(folder)  # a second recover of it is refused as above; writers' cleanups pass it by
    try:
        restore_metadata(folder)
        source = Dataset(folder)  # the episodes Minari's metadata counts: each counted once wholly written
        if source.num_episodes == 0:
            raise DatasetError(f"{folder}: no complete episode to recover; remove the folder")
        if "robolearn" not in source.raw_metadata:
            warnings.warn(f"{folder}: written by a robolearn that kept a recording's metadata only at its end: "
                          "the dataset will not say its task, settings or controller", stacklevel=2)
        left_out = max(len(_episode_groups(folder)) - source.num_episodes, 0)
        metadata = source.writer_metadata(recovered={"episodes": source.num_episodes, "left_out": left_out,
                                                     "at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        if name is None:
            name, root = _where_it_was_going(folder, match["name"], root)
        with tqdm(total=source.num_episodes, desc=f"recovering {name}", unit="episode", disable=None,
                  leave=False) as bar:
            dataset = Dataset.create(name, _complete_episodes(source, bar), source.observation_spec, source.action_spec,
                                     metadata=metadata, root=root, overwrite=overwrite, source=str(folder))
        # no longer a recording's first, in one step: a kill inside the removal leaves a plain temp folder, which the
        # next writer removes, not a part of the episodes offered for a second (duplicate or "damaged") recover
        (folder / KEEPS_PARTIAL).unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        if lock is not None:
            os.close(lock)
    return Recovered(dataset, folder, left_out)


def _where_it_was_going(folder: Path, name: str, root: str | Path | None) -> tuple[str, Path]:
    """The name and root of the dataset the recording in ``folder`` was writing: its namespaces where the folder
    is under the root, and the next free version where that name has been taken since."""
    base, parent = datasets_root(root), folder.parent
    if parent.is_relative_to(base):
        prefix = "" if parent == base else f"{parent.relative_to(base).as_posix()}/"
    else:  # a folder outside the root: the dataset goes beside it, as the recording's would have
        prefix, base = "", parent
    stem, _, version = dataset_id(name).rpartition("-v")
    while (parent / f"{stem}-v{version}").exists():
        version = str(int(version) + 1)
    return f"{prefix}{stem}-v{version}", base


def _complete_episodes(source: Dataset, bar: tqdm) -> Iterator[Episode]:
    """The episodes Minari's metadata counts, read from the storage itself: Minari's dataset class wants the
    dataset id a commit writes."""
    try:
        for data in read_storage(source.path / "data").get_episodes(range(source.num_episodes)):
            yield minari_episode(data)
            bar.update(1)
    except DatasetError:  # (one of ValueError's) the file reads other files: said as such
        raise
    except (OSError, KeyError, ValueError, RuntimeError) as err:  # RuntimeError: h5py's on a damaged group
        raise DatasetError(f"{source.path}: its HDF5 file was damaged when the recording stopped "
                           f"({str(err).splitlines()[0] if str(err) else type(err).__name__}); nothing recovered, "
                           "the folder is left as it was") from None


def _episode_groups(folder: Path) -> list[str]:
    """The episode groups in the folder's HDF5 file: one more than counted where the writer died inside one."""
    import h5py

    try:
        with h5py.File(folder / "data" / "main_data.hdf5", "r") as file:
            return list(file.keys())
    except (OSError, KeyError):
        return []
