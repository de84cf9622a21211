"""Datasets on disk in the Minari format, written so that no reader ever sees half of one.

Layout (Minari's own, so ``MINARI_DATASETS_PATH=<root> minari list local`` and
``minari.load_dataset(id)`` read our datasets)::

    <root>/<id>/data/metadata.json   dataset metadata (Minari's keys + "robolearn")
    <root>/<id>/data/main_data.hdf5  episode_<i>/{observations/<group>, actions, rewards,
                                     terminations, truncations, infos/<name>}

``<root>`` is the ``root`` argument, else ``$ROBOLEARN_DATASETS``, else
``~/.robolearn/datasets``. A dataset id is a name of letters and digits of any
alphabet, ``-`` and ``_``, with Minari's version suffix ``-v<N>`` (``-v0`` is
added when missing): ``Dataset.load("pendulum-expert")`` finds ``pendulum-expert-v0``.
Minari's namespaces come before it, separated by ``/``: what ``minari download
mujoco/hopper/expert-v0`` stores is ``<root>/mujoco/hopper/expert-v0``.

What Minari cannot hold natively is kept where Minari allows extras: per-step
arrays that are not observations or actions (our full simulator state rows,
``qpos``/``qvel``, commanded actions) go in each episode's ``infos`` (with
T+1 or T rows, unlike Minari's collector, which always writes T+1); episode
statistics (``return``, ``length``, ``terminated``, and ``success``, the last
``infos/success``, where the episode has it) are episode attributes; everything about
the dataset as a whole that Minari has no key for (task, task arguments,
control period, state layout, noise, source) sits under ``metadata["robolearn"]``.
The normalization references use Minari's own ``ref_min_score`` /
``ref_max_score`` keys, so ``minari.get_normalized_score`` works too.

A dataset is read from its own folder only (:func:`read_storage`): a symlink in it that leads out of it, or an
HDF5 file that reads other files, is refused, for a dataset from elsewhere could read this machine's files into
its episodes.

:class:`DatasetWriter` builds a dataset in a hidden temp directory beside the
target and renames it into place when done, so a crash, Ctrl+C or bad input
never leaves a half-written dataset, and replacing one (``overwrite``) swaps
whole directories. The temp directory's name holds its writer's pid and host
(``.<id>.tmp-<pid>@<host>-xxxx``): what a writer killed outright (``kill -9``,
a power cut) left is removed by the next writer in that folder, except a recording's complete episodes
(``keep_partial``), which are kept there and said; the metadata is written when a writer starts, so
:func:`robolearn.data.recover.recover` makes them the dataset the recording was writing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from robolearn.checkpoint import usual_mode
from robolearn.data.episode import DatasetError, Episode
from robolearn.listing import few
from robolearn.shell import shell
from robolearn.runtime import STOP_SIGNALS

ROOT_ENV = "ROBOLEARN_DATASETS"
DATA_FORMAT = "hdf5"
# namespaces/name, as Minari's mujoco/hopper/expert-v0. \w is Unicode's (ümlaut, 名前), as Minari's own id check
# (minari.dataset.minari_dataset.DATASET_ID_RE): an ASCII-only rule would refuse datasets Minari writes and loads,
# and those named so before; a folder's name on disk takes any of them
_ID = re.compile(r"(?:[-\w]+/)*[-\w]+?(-v\d+)?")
# This machine, in the names of a writer's temp folders: a leftover is removed only by the host that made it
_HOST = re.sub(r"[^-.\w]", "_", socket.gethostname()) or "localhost"
# What a writer leaves beside its target while it runs: its temp directory (mkdtemp's suffix is \w), and during
# an overwrite the replaced copy (named ``.<name>.old-<pid>`` before the host was added)
_LEFTOVER = re.compile(r"\.(?P<name>.+)\.(?:tmp-(?P<pid>\d+)@(?P<host>.+)-\w+"
                       r"|old-(?P<old_pid>\d+)(?:@(?P<old_host>.+))?)")


def datasets_root(root: str | Path | None = None) -> Path:
    """Where datasets live: ``root``, else ``$ROBOLEARN_DATASETS``, else ``~/.robolearn/datasets``; absolute
    (Minari's storage joins a relative root onto itself: ``myroot/.tmp/data/myroot/.tmp/data``)."""
    if root is not None:
        return Path(root).expanduser().resolve()
    return Path(os.environ.get(ROOT_ENV) or Path.home() / ".robolearn" / "datasets").expanduser().resolve()


def refuse_file_root(base: Path) -> None:
    """Refuse a datasets root (:func:`datasets_root`) that is a file: writing into it had been mkdir's "[Errno 17]
    File exists", and a lookup in it "no dataset ... (there: none)" with a command to make one, which fails in turn."""
    if base.exists() and not base.is_dir():
        raise DatasetError(f"{base}: the datasets folder is a file; give a folder (${ROOT_ENV}, or the dataset "
                           "commands' --root)")  # (train has no --root: its datasets come from the variable alone)


def dataset_id(name: str) -> str:
    """The Minari id of ``name``: itself when it ends in ``-v<N>``, else ``name-v0``; ``/`` separates
    namespaces (``mujoco/hopper/expert`` is ``mujoco/hopper/expert-v0``)."""
    name = os.fspath(name)  # a pathlib.Path to a dataset's folder is told what to do, as its str is (not re's TypeError)
    match = _ID.fullmatch(name)
    if not match:
        raise DatasetError(_path_hint(name) or f"bad dataset name {name!r}: use letters and digits (of any "
                           "alphabet), '-' and '_', with '/' between namespaces (as in mujoco/hopper/expert-v0), "
                           "optionally ending in -v<N>")
    return name if match.group(1) else f"{name}-v0"


def dataset_dir(name: str, root: str | Path | None = None) -> Path:
    """The directory of dataset ``name`` (it may not exist); a ``name`` that is no dataset there but a path
    to data to import (``runs/lerobot_set``, also a valid name) is refused saying how to import it."""
    name = os.fspath(name)
    path = datasets_root(root) / dataset_id(name)
    if not path.exists() and (hint := _path_hint(name)):
        raise DatasetError(hint)
    return path


def own_id(folder: Path, metadata: Any) -> str:
    """The id of the dataset in ``folder``: its stored ``dataset_id``, namespaces included
    (``mujoco/hopper/expert-v0``), where the folders above it match them; else the folder's name."""
    stored = metadata.get("dataset_id") if isinstance(metadata, dict) else None
    if not isinstance(stored, str) or not _ID.fullmatch(stored):
        return folder.name
    parts = tuple(stored.split("/"))
    return stored if Path(folder).parts[-len(parts):] == parts else folder.name


def _path_hint(name: str) -> str | None:
    """How to use ``name`` when it is a path to data (a D4RL file, a LeRobot dataset, a recording, a
    dataset folder outside the root) given where a dataset name is expected, as in ``dataset=h5/hop.hdf5``."""
    path = Path(name).expanduser()
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except (OSError, ValueError):  # a name too long, or with a NUL, for a path
        return None
    if is_dir and (path / "data" / "metadata.json").is_file():
        folder = path.resolve()
        try:
            own = own_id(folder, json.loads((folder / "data" / "metadata.json").read_text()))
        except (OSError, ValueError):
            own = folder.name
        parent = folder.parents[own.count("/")]
        return (f"'{name}' is a dataset folder, not a dataset name: set {ROOT_ENV}={parent} (the folder it is in) "
                f"and use the name '{own}'")
    suffix = path.suffix.lower() in (".hdf5", ".h5")
    kind = ("lerobot" if is_dir and (path / "meta" / "info.json").is_file() else
            "recording" if is_dir and any(path.glob("episode_*.npz")) else
            "d4rl" if suffix or (is_file and not _ID.fullmatch(name)) else None)  # a file named as a dataset is not one
    if kind is None:
        return None
    what = {"lerobot": "a LeRobot dataset", "recording": "a deploy recording", "d4rl": "a file"}[kind]
    imported = re.sub(r"[^-\w]+", "-", path.stem if kind == "d4rl" else path.resolve().name).strip("-") or "dataset"
    return (f"'{name}' is {what}, not a dataset name: import it first with `{shell('robolearn', 'dataset', 'import', name)} "
            f"--format {kind}` (and `--task TASK`, unless it is our own export, which names its task), "
            f"then use the name '{imported}'")


def refuse_export_into_a_dataset(out: Path) -> None:
    """Refuse an export's ``out`` that lies in a dataset's folder (``<id>/data/metadata.json`` beside it or
    above it): ``--out <root>/<id>/data/main_data.hdf5 --overwrite`` had replaced that dataset's episodes
    with a D4RL file, leaving it unreadable, the dataset exported from included."""
    out = Path(os.path.abspath(out))
    for folder in (out, *out.parents):
        if (folder / "data" / "metadata.json").is_file():
            raise DatasetError(f"{out}: inside the dataset folder {folder}, whose files an export there would "
                               "replace or mix with: write the export outside it (a dataset is exported from its "
                               "name, and imported back with `robolearn dataset import`)")


def list_datasets(root: str | Path | None = None) -> list[str]:
    """Ids of the datasets under the root at any depth (``mujoco/hopper/expert-v0``: Minari's namespaces are
    folders), sorted. Hidden folders (writes in progress) are skipped, and a dataset's own folder is not searched."""
    base = datasets_root(root)
    found: list[str] = []
    seen: set[Path] = set()

    def search(folder: Path, prefix: str) -> None:
        if folder.resolve() in seen:  # a symlink loop
            return
        seen.add(folder.resolve())
        try:
            entries = sorted(folder.iterdir())
        except OSError:  # not there, or unreadable
            return
        for entry in entries:
            try:
                if entry.name.startswith(".") or not entry.is_dir():
                    continue
                if (entry / "data" / "metadata.json").is_file():
                    found.append(prefix + entry.name)
                elif not (entry / "data").is_dir():  # a namespace (a dataset without its metadata is not searched)
                    search(entry, f"{prefix}{entry.name}/")
            except OSError:  # unreadable: not ours to list
                continue

    search(base, "")
    return sorted(found)


def read_metadata(path: Path) -> dict[str, Any]:
    """A dataset directory's metadata.json, or a :class:`DatasetError` saying what is wrong (a symlink out of
    the directory among them: :func:`refuse_links_out`)."""
    file = path / "data" / "metadata.json"
    refuse_links_out(path, [file])
    try:
        return json.loads(file.read_text())
    except FileNotFoundError:
        raise DatasetError(f"{path}: not a dataset (no data/metadata.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DatasetError(f"{file}: corrupt metadata ({err})") from None


def refuse_other_files(f: Any, path: Path, groups: Iterable[str] | None = None) -> None:
    """Refuse HDF5 file ``f`` (open, from ``path``) where it reads other files: an external link (whose target
    HDF5 opens, relative to the file or at any absolute path), a virtual dataset mapped from another file, or a
    dataset stored in external raw files. A file from elsewhere (a D4RL import, a downloaded Minari dataset)
    could otherwise read what it names from this machine's disk into its episodes. A soft link is a path inside
    the file: with no external link anywhere, it stays inside. Links are looked at, never followed, each object
    once (hard links may form cycles), through h5py's low-level calls: 1.0 s on a Minari file of 3,000 episodes
    (30,000 links) whose episodes take 2.7 s to read, where h5py's objects took 1.6 s.

    ``groups``: the top-level groups (``episode_<i>``) to check alone, all that reading them reaches: the visits
    follow hard links, in the group or out of it, and a soft link or a virtual dataset mapped from the file itself
    met has the whole file checked, for either may lead anywhere in it (through an external link there too).
    `dataset list` reads one episode of each dataset, so pays for one, not for the file."""
    import h5py

    soft = False  # whether a soft link, or a virtual dataset of the file's own, was met: a path anywhere in the file

    # Each visit stops at the first problem its callback returns (h5py's low-level visits cannot raise through)
    def external(loc: Any, name: bytes, prefix: str) -> str:
        file, target = loc.links.get_val(name)
        return (f"'{prefix}{name.decode(errors='replace')}' is an external link to '{target.decode(errors='replace')}' "
                f"in {os.fsdecode(file)}, another file, which robolearn does not follow; copy what it points to into "
                "the file itself")

    def elsewhere(dataset: Any, shown: str) -> str | None:
        nonlocal soft
        dcpl = dataset.get_create_plist()
        if count := dcpl.get_external_count():
            files = [os.fsdecode(dcpl.get_external(i)[0]) for i in range(count)]
            return (f"'{shown}' is stored in other files ({few(files)}), which robolearn does not read; store its "
                    "data in the file itself")
        if dcpl.get_layout() == h5py.h5d.VIRTUAL:
            for i in range(dcpl.get_virtual_count()):
                if (file := dcpl.get_virtual_filename(i)) == ".":  # the file itself: a path in it, as a soft link
                    soft = True
                else:
                    return (f"'{shown}' is a virtual dataset of '{dcpl.get_virtual_dsetname(i)}' in another file, "
                            f"{file}, which robolearn does not read; store its data in the file itself")
        return None

    def check(loc: Any, prefix: str) -> str | None:
        """What in the file or group ``loc`` reads another file, its names after ``prefix``."""
        def link(name: bytes, info: Any) -> str | None:
            nonlocal soft
            soft |= info.type == h5py.h5l.TYPE_SOFT
            return external(loc, name, prefix) if info.type == h5py.h5l.TYPE_EXTERNAL else None

        def dataset(name: bytes, info: Any) -> str | None:
            if info.type != h5py.h5o.TYPE_DATASET:
                return None
            return elsewhere(h5py.h5d.open(loc, name), prefix + name.decode(errors="replace"))

        # links first: the objects' visit must not reach another file
        return loc.links.visit(link, info=True) or h5py.h5o.visit(loc, dataset, info=True)

    problem = None
    for group in () if groups is None else groups:
        key = group.encode()
        if not f.id.links.exists(key):  # (Minari's own error, when it is read)
            continue
        kind = f.id.links.get_info(key).type
        soft |= kind == h5py.h5l.TYPE_SOFT
        if kind == h5py.h5l.TYPE_EXTERNAL:
            problem = external(f.id, key, "")
        elif kind == h5py.h5l.TYPE_HARD:
            found = h5py.h5o.open(f.id, key)
            problem = (check(found, f"{group}/") if isinstance(found, h5py.h5g.GroupID) else
                       elsewhere(found, group) if isinstance(found, h5py.h5d.DatasetID) else None)
        if problem or soft:
            break
    if groups is None or (soft and not problem):
        problem = check(f.id, "")
    if problem:
        raise DatasetError(f"{path}: {problem}")


def refuse_links_out(folder: Path, paths: Iterable[Path] | None = None) -> None:
    """Refuse a symlink in dataset ``folder`` that leads out of it, naming the link and its target: one on the way
    to ``paths`` (files in the folder), else one anywhere in the folder. Minari's HDF5 reader and pyarrow (an arrow
    or parquet dataset's episode folders and files, and folders inside those) follow symlinks, so a dataset from
    elsewhere (a tarball, a copy) that links to this machine's files had read them into its episodes. A link to a
    place inside the folder stays inside; the folder itself, and the root and namespaces above it, may be links
    (where the user keeps datasets is the user's choice). Links are looked at, not followed: a linked folder is not
    searched, its target being inside the folder, searched itself. 30 ms for an arrow dataset of 3,000 episodes."""
    home = folder.resolve()

    def leads_out(link: Path) -> None:
        try:
            resolved = link.resolve()
        except (OSError, RuntimeError):  # a link to itself or a chain back to it (RuntimeError before Python 3.13):
            return  # nothing is read through it (pyarrow skips it, HDF5 cannot open it)
        if not resolved.is_relative_to(home):
            target = os.readlink(link)
            shown = f"'{target}'" + ("" if Path(target) == resolved else f" ({resolved})")
            raise DatasetError(f"{link}: a symlink to {shown}, outside the dataset's folder {folder}, which robolearn "
                               "does not follow (a dataset from elsewhere could read this machine's files into its "
                               "episodes); copy what it points to in its place, or link the dataset's folder itself")

    if paths is not None:
        for path in paths:
            at = folder
            for part in path.relative_to(folder).parts:
                at = at / part
                if at.is_symlink():
                    leads_out(at)
        return
    folders = [folder]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    leads_out(Path(entry.path))
                elif entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)


def read_storage(data: Path, episodes: Iterable[int] | None = None, folder_checked: bool = False) -> Any:
    """Minari's storage of a dataset's ``data`` folder, checked first: no symlink in the dataset's folder leads out
    of it (:func:`refuse_links_out`: an arrow or parquet dataset's only way to read other files), and its HDF5 file
    reads no other file (:func:`refuse_other_files`), all of it, or what reading ``episodes`` reaches where they are
    given (then read only those). Minari reads whatever they point to, and a dataset from elsewhere (``minari
    download``, a copy) had read this machine's files into its episodes. An arrow or parquet dataset's episode
    folders (those of ``episodes``) hold one data file each (:func:`refuse_stray_files`).

    ``folder_checked``: an earlier read of this folder walked it for links (the walk covers every episode), so
    only ``episodes``' files are checked: a dataset read one episode at a time (``ds[i]``) had walked its whole
    folder for each, 0.25 s an episode on an arrow dataset of 20,000 episodes."""
    import h5py
    from minari.dataset.minari_storage import MinariStorage

    if not folder_checked:
        refuse_links_out(data.parent)
    storage = MinariStorage.read(data)
    if (file := data / "main_data.hdf5").is_file():  # (an arrow or parquet dataset's episodes are folders)
        with h5py.File(file, "r") as f:
            refuse_other_files(f, file, None if episodes is None else (f"episode_{i}" for i in episodes))
    if storage.FORMAT in ARROW_FORMATS:
        refuse_stray_files(data, storage.FORMAT, range(storage.total_episodes) if episodes is None else episodes)
    return storage


ARROW_FORMATS = ("arrow", "parquet")  # Minari's storages that pair episodes with what pyarrow reads by position
# What pyarrow skips in an episode folder (Minari's ignore_prefixes): any file or folder named so
_PYARROW_SKIPS = ("_", ".", "metadata.json")
# The most rows pyarrow was seen to read as one record batch of an episode Minari wrote (its writer cuts
# batches there): an episode of more steps (rows: steps + 1) is read as several
ARROW_BATCH_ROWS = 32768


def refuse_stray_files(data: Path, data_format: str, episodes: Iterable[int]) -> None:
    """Refuse an arrow or parquet dataset whose episode folder (``data/<i>``, of ``episodes``) holds other files
    than the one Minari writes (``part-0.<format>``): Minari reads the episodes' folders as one pyarrow dataset
    and pairs episode i with the i-th record batch read, so a stray file (a copy, a partial write), anywhere in
    the folder, had episode i and every one after it read another episode's steps, silently where the lengths
    agree. One directory listing per episode (a folder missing is left to Minari's own error)."""
    for index in episodes:
        folder = data / str(index)
        try:  # real paths looked up only where a link is met (on every folder: 3/4 of the check on 20,000 episodes)
            files = _pyarrow_reads(folder, resolve=False)
            if files is None:
                files = _pyarrow_reads(folder, resolve=True) or []
        except (FileNotFoundError, NotADirectoryError):
            continue
        if len(files) == 1:
            continue
        found = [Path(f) for f in files]
        own = folder / f"part-0.{data_format}"
        names = sorted(str(f.relative_to(folder)) for f in found)
        what = ("no data file, where Minari writes one" if not found else
                f"{len(found)} files pyarrow reads as the episode ({few(names)}), where Minari writes one")
        fix = (f"remove all but {own.name}, what Minari wrote (the others are strays: copies, partial writes)"
               if own in found else "rewrite the dataset with Minari")
        raise DatasetError(f"{folder}: episode {index}'s folder holds {what}; Minari pairs the episodes with the record "
                           "batches pyarrow reads, in order, so this episode and every one after it would read another episode's "
                           f"steps; {fix}")


def _pyarrow_reads(folder: Path, resolve: bool) -> list[str] | None:
    """The files pyarrow reads as the episode in ``folder``. ``resolve``: each folder's real path is kept, so that
    a link back up (inside the dataset: :func:`refuse_links_out`) is not walked again; without it, None where a
    symlink is met (a tree without links has no way back up)."""
    if not resolve and folder.is_symlink():
        return None
    found: list[str] = []
    folders, seen = [os.fspath(folder)], set()
    while folders:
        at = folders.pop()
        if resolve:
            if (real := os.path.realpath(at)) in seen:
                continue
            seen.add(real)
        with os.scandir(at) as entries:
            for entry in entries:
                if entry.name.startswith(_PYARROW_SKIPS):
                    continue
                if not resolve and entry.is_symlink():
                    return None
                try:  # (a link that leads nowhere, or to itself, is neither: pyarrow skips it)
                    kind = "dir" if entry.is_dir() else "file" if entry.is_file() else None
                except OSError:  # ELOOP
                    continue
                if kind == "dir":
                    folders.append(entry.path)
                elif kind == "file":
                    found.append(entry.path)
    return found


def refuse_misread_episode(data: Path, episode: dict[str, Any]) -> None:
    """Refuse an episode Minari read from an arrow or parquet dataset ``data`` (its dict, as ``get_episodes`` gives
    it) whose steps are not as many as its folder's metadata.json says (``total_steps``, which Minari writes): a
    file split into record batches (an episode of more than 32,767 steps, whose rows Minari then spreads over the
    episodes after it) or one not written by Minari had it read another episode's steps. Nothing where the
    metadata says no count."""
    index = episode["id"]
    try:
        steps = json.loads((data / str(index) / "metadata.json").read_text()).get("total_steps")
    except (OSError, ValueError, AttributeError):
        return
    read = len(episode["rewards"])
    if not isinstance(steps, int) or isinstance(steps, bool) or read == steps:
        return
    folder = data / str(index)
    if steps + 1 > ARROW_BATCH_ROWS:
        raise DatasetError(f"{folder}: episode {index} has {steps:,} steps (its metadata.json), more than the "
                           f"{ARROW_BATCH_ROWS - 1:,} Minari reads right from an arrow or parquet dataset (pyarrow "
                           f"reads it in pieces, and Minari gave this episode {read:,} steps and the rest to the "
                           "episodes after it); robolearn refuses it: write the dataset in Minari's hdf5 format "
                           "(data_format='hdf5'), or cut the episode into shorter ones")
    raise DatasetError(f"{folder}: episode {index} reads as {read:,} steps, its metadata.json says {steps:,}: its "
                       "file holds more than one record batch, or another episode's steps (Minari pairs the episodes "
                       "with what pyarrow reads in order); rewrite the dataset with Minari")


def refuse_discrete_actions(dtype: Any, where: str = "") -> None:
    """Refuse actions that are not floating point: integer or bool ones are discrete (they had imported with the
    int64 range as bounds), and a space of no dtype (Dict, Tuple) holds no one action array. ``where`` begins the
    message: what holds them. Imports check an episode's actions, a dataset read in place its action_space."""
    if dtype is None or not np.issubdtype(dtype, np.floating):
        of = f" of dtype {np.dtype(dtype)}" if dtype is not None else " of no one array"
        raise DatasetError(f"{where}actions{of}: robolearn's agents act in continuous (floating-point) action "
                           "spaces; discrete actions are not supported")


def specs_of(episode: Episode) -> tuple[dict[str, spaces.Box], spaces.Box]:
    """Unbounded observation and action specs with ``episode``'s shapes and dtypes (for imports); integer and
    bool observations span their dtype's range; integer or bool actions (discrete ones) are refused."""
    refuse_discrete_actions(episode.actions.dtype)

    def unbounded(array: np.ndarray) -> spaces.Box:
        if array.dtype == np.bool_:  # (gymnasium's Box takes no infinite bounds for these: their own range)
            return spaces.Box(0, 1, array.shape[1:], dtype=np.bool_)
        if np.issubdtype(array.dtype, np.integer):
            info = np.iinfo(array.dtype)
            return spaces.Box(info.min, info.max, array.shape[1:], dtype=array.dtype)
        return spaces.Box(-np.inf, np.inf, array.shape[1:], dtype=array.dtype)

    return {g: unbounded(v) for g, v in episode.observations.items()}, unbounded(episode.actions)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl+C, SIGTERM and SIGHUP until the block ends, so a write is never cut in half; the first one
    caught is then handled as it would have been (a SIGTERM nothing handles still ends the process). Main
    thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, Any]] = []
    previous: dict[int, Any] = {}
    for signum in STOP_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is not None and handler != signal.SIG_IGN:  # None: set outside Python, left alone
            previous[signum] = signal.signal(signum, lambda sig, frame: caught.append((sig, frame)))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if caught:
            signum, frame = caught[0]
            if callable(previous[signum]):
                previous[signum](signum, frame)
            else:  # SIG_DFL: what the signal does by itself (SIGTERM, SIGHUP: end the process)
                os.kill(os.getpid(), signum)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (someone else's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


WRITING = ".writing"  # in a writer's temp directory: a file it holds an exclusive lock on while it runs
KEEPS_PARTIAL = ".keeps-partial"  # ... and in a recording's (keep_partial): its episodes outlive its writer


def hold_lock(folder: Path) -> int | None:
    """Lock ``folder``'s :data:`WRITING` file for as long as the returned descriptor stays open: the pid and
    host in a temp name cannot tell a live writer in another container (another pid namespace) on this
    machine, its kernel lock can. None where the filesystem has no locks (Lustre ``noflock``, NFS without
    lockd): the pid and host decide alone there."""
    fd = os.open(folder / WRITING, os.O_CREAT | os.O_RDONLY, 0o644)
    for _ in range(200):  # another process's probe (_lock_state) holds it for an instant: taken after it, not
        try:  # given up (a writer that ran unlocked was judged dead a minute later, and its folder removed)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            time.sleep(0.005)
        except OSError:  # no locks on this filesystem
            break
    os.close(fd)
    return None


def _lock_state(folder: Path) -> str | None:
    """"held" where a running writer holds ``folder``'s :data:`WRITING` lock; "free" where nobody has held it for
    a minute, whatever process now has the pid in the folder's name (pids restart low after a reboot: a folder
    then looked live for ever); None where there is no lock to go by (no file, no locks on this filesystem, or
    one just made, which its writer is about to take)."""
    path = folder / WRITING
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return "free" if time.time() - os.fstat(fd).st_mtime > 60 else None
    except BlockingIOError:  # EWOULDBLOCK: held
        return "held"
    except OSError:  # no locks on this filesystem
        return None
    finally:
        os.close(fd)


def remove_leftovers(folder: Path, legacy: bool = True) -> None:
    """Remove what writers on this machine that are no longer running (``kill -9``, a crash, a power cut)
    left in ``folder``: their temp directories, and the replaced copy of an overwrite cut short once the
    new dataset is in place. Those of running writers, or of other machines (a shared root), are kept;
    a replaced copy whose dataset is missing (killed between the swap's two renames) is the only one left,
    so it is put back in its place and said (pointed out where it cannot be; left while its writer's temp
    folder is still locked: that writer runs, between the renames, in a pid namespace of its own). Exports use
    it too: what they write is a dataset, a D4RL file or a LeRobot folder (:func:`temp_beside`).
    ``legacy=False`` for a folder that is not a datasets root (an export's, /tmp): only names that carry this
    host are taken there, as the host-less ``.<name>.old-<pid>`` of earlier versions may as well be a user's
    own backup folder."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for entry in entries:
        match = abandoned(entry)
        if match is None or (not legacy and match["old_pid"] and not match["old_host"]):
            continue
        if match["old_pid"]:
            target = entry.with_name(match["name"])
            if not target.exists() and not target.is_symlink():
                building = f".{match['name']}.tmp-{match['old_pid']}@{match['old_host'] or _HOST}-"
                if any(other.name.startswith(building) and _lock_state(other) == "held" for other in entries):
                    continue  # its writer runs, between its renames, where its pid says nothing (another container)
                try:  # (onto nothing: refused where another writer has just put something there)
                    os.rename(entry, target)
                    warnings.warn(f"{target} is back in place: an overwrite of it was cut short (killed) after it had "
                                  "been set aside, before its replacement was put in its place")
                except OSError as err:
                    warnings.warn(f"{entry} is the only copy of '{match['name']}' (an overwrite was cut short) and "
                                  f"could not be put back ({err.strerror}); restore it with `mv {entry} {target}`")
                continue
        elif episodes := uncommitted_episodes(entry):
            recover = shell("robolearn", "dataset", "recover", entry)
            warnings.warn(f"{entry}: {episodes} recorded episode(s) of dataset '{match['name']}' that a recording "
                          f"left uncommitted when it was killed or crashed: kept; `{recover}` makes them a dataset "
                          "(or remove the folder if they are not wanted)")
            continue
        shutil.rmtree(entry, ignore_errors=True)


def temp_beside(target: Path) -> tuple[Path, int | None]:
    """A new temp directory beside ``target`` to build it in (a :class:`DatasetWriter`'s, an export's), named and
    locked (``.<name>.tmp-<pid>@<host>-xxxx``, :func:`hold_lock`), and the lock's descriptor (close it when done):
    the next writer there removes it if this one is killed outright (:func:`remove_leftovers`, which the caller
    runs first). An export killed so had left its temp file or folder beside the output for good."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}@{_HOST}-", dir=target.parent))
    return tmp, hold_lock(tmp)


def set_aside_name(target: Path) -> Path:
    """Where an overwrite moves ``target`` while its replacement is renamed into place: a name
    :func:`remove_leftovers` knows, so a swap killed half way is undone by the next writer there."""
    return target.with_name(f".{target.name}.old-{os.getpid()}@{_HOST}")


def abandoned(entry: Path) -> re.Match[str] | None:
    """The name's parts (``name``, the writer's ``pid``...) where ``entry`` is what a writer on this machine that is
    no longer running left behind (a temp directory, an overwrite's replaced copy); else None."""
    match = _LEFTOVER.fullmatch(entry.name)
    if not match or entry.is_symlink() or not entry.is_dir():
        return None
    pid, host = (match["pid"], match["host"]) if match["pid"] else (match["old_pid"], match["old_host"])
    if (host or _HOST) != _HOST:
        return None
    lock = _lock_state(entry)
    if lock == "held" or (_alive(int(pid)) and lock != "free"):
        return None
    return match


# Minari rewrites metadata.json in place (not atomically) at each episode: a recording killed then left it cut
# short, and with it every episode it counted. The writer keeps the last whole one beside it, under this name.
METADATA_COPY = "metadata.json.whole"


def keep_metadata_copy(data: Path) -> None:
    """Copy ``data``'s metadata.json, atomically, to where :func:`restore_metadata` finds it. Not fsynced (a
    kill is what it is for; an fsync per episode would slow recordings of short episodes)."""
    temp = data / f".{METADATA_COPY}.tmp"
    temp.write_bytes((data / "metadata.json").read_bytes())
    os.replace(temp, data / METADATA_COPY)


def restore_metadata(folder: Path) -> None:
    """Put back the metadata a recording's temp ``folder`` held before the episode whose rewrite a kill cut
    short (an unreadable metadata.json); nothing where it reads."""
    data = folder / "data"
    try:
        json.loads((data / "metadata.json").read_text())
    except (OSError, ValueError):
        if (data / METADATA_COPY).is_file():
            os.replace(data / METADATA_COPY, data / "metadata.json")


def uncommitted_episodes(folder: Path) -> int:
    """How many complete episodes a recording's temp folder holds (Minari's metadata counts them once written);
    0 for a folder that is not a recording's (an import's is done again, not kept)."""
    if not (folder / KEEPS_PARTIAL).exists():
        return 0
    restore_metadata(folder)
    try:
        count = json.loads((folder / "data" / "metadata.json").read_text()).get("total_episodes", 0)
    except (OSError, ValueError, AttributeError):
        return 0
    return count if isinstance(count, int) else 0


class DatasetWriter:
    """Write episodes into a new dataset; it appears under its name only when closed.

    ``observation_spec`` and ``action_spec`` describe one step (group -> Box,
    Box); ``metadata`` goes under ``metadata["robolearn"]`` except
    ``ref_min_score``, ``ref_max_score``, ``algorithm_name`` and
    ``description``, which are Minari's own keys. Used as a context manager,
    the dataset is committed on a clean exit and, when ``keep_partial``
    (recordings), also on an exception or Ctrl+C if it holds an episode;
    otherwise it is discarded and nothing on disk changes. A recording cut
    short (an exception, or ``cut_short`` set, as :func:`record` sets it on
    Ctrl+C) never replaces the dataset ``overwrite`` was to replace: it is
    saved as that name's next free version, and the old one is kept whole.
    """

    MINARI_KEYS = ("ref_min_score", "ref_max_score", "algorithm_name", "description")

    def __init__(self, name: str, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, *,
                 metadata: dict[str, Any] | None = None, root: str | Path | None = None,
                 overwrite: bool = False, keep_partial: bool = False) -> None:
        from minari.dataset.minari_dataset import parse_dataset_id
        from minari.dataset.minari_storage import MinariStorage

        self.id = dataset_id(name)
        try:  # its ids are narrower than ours: 'a/x-v0' had been written, and minari.load_dataset refused it
            parse_dataset_id(self.id)
        except ValueError:
            raise DatasetError(f"dataset name '{self.id}' is not one Minari reads (its namespaces, the part before the "
                               "last '/', are two characters or more, starting and ending in a letter, digit, '-' or "
                               "'_'); choose another name") from None
        base = datasets_root(root)
        refuse_file_root(base)
        self.target = base / self.id
        for folder in {base, self.target.parent}:  # first: a dataset a cut overwrite set aside is back for the checks
            remove_leftovers(folder)
        for folder in list(self.target.parents)[:self.id.count("/")]:  # the namespaces: none may be a dataset
            if (folder / "data" / "metadata.json").is_file():
                raise DatasetError(f"'{folder.relative_to(base).as_posix()}' is a dataset, not a namespace of "
                                   f"datasets; choose another name than '{self.id}'")
        if self.target.is_dir() and not (self.target / "data").is_dir() and list_datasets(self.target):
            raise DatasetError(f"'{self.id}' is a namespace of datasets ({self.target}), which --overwrite would "
                               "delete with them; choose another name")
        if self.target.exists() and not overwrite:
            raise DatasetError(f"dataset '{self.id}' already exists at {self.target}; choose another name (--name) "
                               "or pass --overwrite (overwrite=True) to replace it")  # (split's --names: its own check)
        self.observation_spec, self.action_spec = observation_spec, action_spec
        self.metadata = dict(metadata or {})
        self.overwrite, self.keep_partial = overwrite, keep_partial
        self.cut_short = False  # set by a recording that stopped before its end (Ctrl+C): replaces nothing
        self.episodes = 0
        self.steps = 0
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self._tmp, self._lock = temp_beside(self.target)
        if keep_partial:
            (self._tmp / KEEPS_PARTIAL).touch()
        self._closed = False
        try:
            (self._tmp / "data").mkdir()
            self._storage = MinariStorage.new(self._tmp / "data", observation_space=spaces.Dict(observation_spec),
                                              action_space=action_spec, data_format=DATA_FORMAT)
            # Written now, not only at the commit: a recording killed outright leaves its episodes with what
            # they were recorded on (`robolearn dataset recover`), and metadata Minari refuses fails here
            self._storage.update_metadata(self._metadata_as_stored())
        except BaseException:  # a spec or metadata Minari refuses: nothing left behind, no descriptor kept
            self.discard()
            raise

    def add(self, episode: Episode, where: str | None = None) -> None:
        """Check ``episode`` against the specs and append it."""
        from minari.data_collector.episode_buffer import EpisodeBuffer

        where = where or f"episode {self.episodes}"
        task = self.metadata.get("task")  # (an import with --task hopper: a wrong task is said as such)
        episode.check(where).check_spec(where, self.observation_spec, self.action_spec,
                                        f"the task's ({task})" if isinstance(task, str) else "the dataset's")
        if not (episode.terminations[-1] or episode.truncations[-1]):  # learners would bootstrap across episodes
            raise DatasetError(f"{where}: its last step is neither terminated nor truncated; an episode ends in one "
                               "(set truncations[-1] = True for one cut short, terminations[-1] where the task ended)")
        extra = sorted(set(episode.observations) - set(self.observation_spec))
        if extra:  # Minari would store them beside a space without them: a dataset nothing can read back
            raise DatasetError(f"{where}: observation group(s) {extra} are not in the dataset's observation spec "
                               f"({sorted(self.observation_spec)}); add them to it or drop them")
        self._check_room(episode)
        # numpy's text (dtype <U) has no HDF5 type (h5py had crashed on a recording's text metrics): stored as UTF-8
        infos = {key: np.char.encode(value, "utf-8") if np.asarray(value).dtype.kind == "U" else value
                 for key, value in episode.infos.items()}
        # as the spaces declare them (Minari's readers check data against them): a float64 D4RL file imported
        # for a task had been stored as float64 under the task's float32 spaces
        observations = {g: np.asarray(o, self.observation_spec[g].dtype) for g, o in episode.observations.items()}
        buffer = EpisodeBuffer(observations=observations, actions=np.asarray(episode.actions, self.action_spec.dtype),
                               rewards=episode.rewards, terminations=episode.terminations,
                               truncations=episode.truncations, infos=infos or None)
        with interrupts_deferred():  # the episode and its count land together, or not at all
            if self.keep_partial:  # (a kill is not deferred: the count before this episode is kept whole)
                keep_metadata_copy(self._tmp / "data")
            self._storage.update_episodes([buffer])
            success = {} if episode.success is None else {"success": episode.success}
            self._storage.update_episode_metadata(
                [{"return": episode.episode_return, "length": len(episode),
                  "terminated": bool(episode.terminations[-1]), **success}], [self.episodes])
            self.episodes += 1
            self.steps += len(episode)

    def _metadata_as_stored(self) -> dict[str, Any]:
        """``metadata`` as metadata.json holds it: Minari's own keys at the top, the rest under "robolearn"."""
        minari = {key: value for key in self.MINARI_KEYS if (value := self.metadata.get(key)) is not None}
        return {**minari, "robolearn": {k: v for k, v in self.metadata.items() if k not in self.MINARI_KEYS}}

    ROOM = 4 << 20  # bytes kept free for the metadata a commit writes

    def _check_room(self, episode: Episode) -> None:
        """Refuse ``episode`` unless the disk has room for it (twice its arrays) and the commit: HDF5 on a full
        disk had crashed the process (a segmentation fault) with the episodes recorded so far uncommitted."""
        arrays = [*episode.observations.values(), episode.actions, episode.rewards, *episode.infos.values()]
        needed = 2 * sum(np.asarray(a).nbytes for a in arrays) + self.ROOM
        free = shutil.disk_usage(self._tmp).free
        if free < needed:
            kept = f"the {self.episodes} before it are kept" if self.keep_partial and self.episodes else \
                "nothing was saved"
            raise OSError(errno.ENOSPC, f"No space left on device (an episode needs about {needed >> 10:,} KiB, "
                                        f"{free >> 10:,} KiB are free; {kept})", str(self.target))

    def commit(self) -> Path:
        """Finish the metadata and move the dataset into place; returns its directory."""
        if self.episodes == 0:
            self.discard()
            raise DatasetError(f"dataset '{self.id}': no complete episode to write; nothing was saved")
        if self.target.exists() and (not self.overwrite or self.cut_short):  # another process wrote this name
            # while this one wrote (the check in __init__ was before that one ended), or this one stopped before its
            # end: saved as its next free version, neither lost nor over the other
            taken, base, _, version = self.id, *self.id.rpartition("-v")
            while self.target.exists():
                version = str(int(version) + 1)
                self.id = f"{base}-v{version}"
                self.target = self.target.with_name(self.id.rsplit("/", 1)[-1])
            why = (f"this recording stopped before its end, so its {self.episodes} episode(s) do not replace it "
                   "(--overwrite replaces a dataset with a complete recording)" if self.overwrite and self.cut_short
                   else "it was written by another process while this one was")
            warnings.warn(f"dataset '{taken}' is kept: {why}; this one is saved as '{self.id}'", stacklevel=2)
        self.metadata.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
        from minari import __version__ as minari_version

        with interrupts_deferred():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._storage.update_metadata({"dataset_id": self.id, "minari_version": minari_version,
                                               **self._metadata_as_stored()})
            old = None
            if self.target.exists():  # overwrite: swap whole directories
                old = set_aside_name(self.target)
                self.target.rename(old)
            os.chmod(self._tmp, usual_mode(0o777))  # mkdtemp's 0700 would keep the dataset from others
            self._tmp.rename(self.target)
            (self.target / WRITING).unlink(missing_ok=True)  # the lock, held until the dataset is in place
            (self.target / KEEPS_PARTIAL).unlink(missing_ok=True)
            (self.target / "data" / METADATA_COPY).unlink(missing_ok=True)
            self._release()
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.target

    def discard(self) -> None:
        """Remove the temp directory (all of it: a Ctrl+C or SIGTERM waits); the target is untouched."""
        with interrupts_deferred():
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._release()

    def _release(self) -> None:
        if not self._closed:
            if self._lock is not None:
                os.close(self._lock)
            self._closed = True

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if self._closed:
            return
        if kind is None or (self.keep_partial and self.episodes > 0):
            self.cut_short |= kind is not None
            self.commit()
        else:
            self.discard()
