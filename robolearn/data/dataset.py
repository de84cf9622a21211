"""A dataset of episodes as one object: load it, iterate it, turn it into transitions, score against it.

::

    ds = Dataset.load("pendulum-expert")          # <root>/pendulum-expert-v0
    for episode in ds: ...                         # Episode objects, read lazily
    batch = ds.transitions("cuda")                 # obs, action, reward, next_obs, terminated, truncated
    ds.normalized_score(312.0)                     # (R - ref_min) / (ref_max - ref_min)

Datasets are stored in the Minari format (see :mod:`robolearn.data.minari_store`);
:meth:`Dataset.create`, :func:`split` and :func:`merge` write new ones atomically.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from tqdm import tqdm

from robolearn.data.episode import DatasetError, Episode
from robolearn.data.minari_store import (ARROW_FORMATS, DatasetWriter, dataset_dir, dataset_id, datasets_root,
                                        list_datasets, own_id, read_metadata, read_storage, refuse_discrete_actions,
                                        refuse_file_root, refuse_misread_episode)
from robolearn.runtime import say_what_the_stop_left
from robolearn.shell import shell
from robolearn.storage import map_batch, write_batch


# The datasets the generator scripts in benchmarks/ make: name pattern -> script and its arguments.
GENERATORS = (
    (r"(?P<task>\w+)-(random|medium|medium-replay|expert)", "make_datasets.py --tasks {task}"),
    (r"point_maze_(?P<layout>\w+)-navigate", "make_maze_datasets.py --layouts {layout}"),
    (r"kitchen-mixed", "make_kitchen_dataset.py"),
)
# Lists of episodes in a dataset's metadata, renumbered by split and merge: a recording's episodes cut short, and
# in a merge whose sources differ in final_observation, those whose last observation is a copy (Dataset.final_copied)
COPIED_FINALS = "final_observation_copied_episodes"
EPISODE_LISTS = ("interrupted_episodes", COPIED_FINALS)


def no_dataset_hint(task: str) -> str:
    """Where a dataset for ``task`` comes from, for a run that needs one and was given none."""
    from robolearn.data.importing import slug

    record = shell("robolearn", "dataset", "record", "--run", "RUN", "--episodes", "100", "--name", f"{slug(task)}-expert")
    return (f"`robolearn dataset list` shows those there are; make one of a trained run's episodes with `{record}` "
            "(--controller random --task TASK for random ones), or import one: `robolearn dataset import --help`")


def how_to_make(name: str, root: str | Path | None = None, guess: bool = True) -> str:
    """The command that makes dataset ``name``: its generator script, else ``robolearn dataset record``; a
    generator's name with a typo in its task or layout (``hoper-medium``) is asked about, not told to be recorded
    (unless not ``guess``: the caller has asked about a dataset there is)."""
    base = re.sub(r"-v\d+$", "", name)
    scripts = Path(__file__).resolve().parents[2] / "benchmarks"
    where = str(scripts) if scripts.is_dir() else "benchmarks"  # benchmarks/ of the robolearn repository
    if Path.cwd() in scripts.parents:
        where = os.path.relpath(scripts)
    root_flag = f" --root {shell(root)}" if root is not None else ""
    for pattern, command in GENERATORS:
        match = re.fullmatch(pattern, base)
        if not match:
            continue
        groups = match.groupdict()  # (a pattern names one part at most: its task or its maze layout)
        for key, value in groups.items():
            if value not in (made := _made_values(key)):
                close = difflib.get_close_matches(value, made, n=1)
                if not close or not guess:
                    break  # a name of one's own that looks like a generator's: recorded, as any other
                fixed = base[:match.start(key)] + close[0] + base[match.end(key):]
                return (f"did you mean '{fixed}'? make that one with `python {where}/"
                        f"{command.format(**{key: close[0]})}{root_flag}`, or record '{base}' with "
                        f"`robolearn dataset record --run RUN --episodes 100 --name {base}{root_flag}`")
        else:
            return f"make it with `python {where}/{command.format(**groups)}{root_flag}`"
    return (f"record it with `robolearn dataset record --run RUN --episodes 100 --name {base}{root_flag}` "
            "(from Python: robolearn.data.record into a DatasetWriter given robolearn.data.env_metadata) "
            "or import one (`robolearn dataset import PATH --format d4rl|lerobot|recording`)")


def _made_values(group: str) -> list[str]:
    """What a generator's ``task`` (a task with a PPO config to train its expert) or ``layout`` (a point maze)
    can be: a name with another makes nothing."""
    from robolearn.config import CONFIG_DIR

    if group == "task":
        return sorted(path.stem.removeprefix("ppo_") for path in CONFIG_DIR.glob("ppo_*.yaml"))
    import sims

    return sorted(task.removeprefix("point_maze_") for task in sims.TASKS if task.startswith("point_maze_"))


def normalized_score(returns: float | np.ndarray, reference_scores: dict[str, Any]) -> float | np.ndarray:
    """``(R - ref_min_score) / (ref_max_score - ref_min_score)`` on ``reference_scores`` (a dataset's, or those
    a run's ``eval.json`` or checkpoint kept of it, which score the run when the dataset is gone or replaced)."""
    low, high = float(reference_scores["ref_min_score"]), float(reference_scores["ref_max_score"])
    return (returns - low) / (high - low)


class Dataset:
    """The dataset stored in directory ``path`` (``<root>/<id>``); open one with :meth:`load`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.raw_metadata = read_metadata(self.path)
        self.id = own_id(self.path, self.raw_metadata)  # Minari's namespaced ids (mujoco/hopper/expert-v0) in full
        self._minari: Any = None
        self._checked: set[int] | None = set()  # the episodes whose files read_storage checked; None: all of them

    # ---- opening and creating -------------------------------------------------------------

    @classmethod
    def load(cls, name: str, root: str | Path | None = None) -> Dataset:
        """Dataset ``name`` (``-v0`` implied) under the datasets root."""
        path = dataset_dir(name, root)
        if not path.is_dir():
            refuse_file_root(datasets_root(root))
            known = list_datasets(root)
            close = difflib.get_close_matches(dataset_id(name), known, n=1, cutoff=0.8)  # a typo, not a shared '-expert-v0'
            # or a Minari id without its namespace (`expert` for a downloaded mujoco/hopper/expert-v0)
            close = close or [known_id for known_id in known if known_id.endswith(f"/{dataset_id(name)}")]
            hint = f"did you mean {' or '.join(repr(c) for c in close[:3])}? or " if close else ""
            # in the root, whose datasets `known` lists: a namespaced name's folder (mujoco/hopper) may not exist
            raise DatasetError(f"no dataset '{name}' in {datasets_root(root)} (there: {', '.join(known) or 'none'}); "
                               f"{hint}{how_to_make(name, root, guess=not close)}; see `robolearn dataset list`")
        return cls(path)

    @classmethod
    def create(cls, name: str, episodes: Iterable[Episode], observation_spec: dict[str, spaces.Box],
               action_spec: spaces.Box, *, metadata: dict[str, Any] | None = None,
               root: str | Path | None = None, overwrite: bool = False, source: str | None = None) -> Dataset:
        """Write ``episodes`` as dataset ``name``: all of them, or (on any error) nothing.
        Errors name ``source`` (the file they came from) and the episode."""
        with DatasetWriter(name, observation_spec, action_spec, metadata=metadata, root=root,
                           overwrite=overwrite) as writer:
            for i, episode in enumerate(episodes):
                writer.add(episode, where=f"{source}: episode {i}" if source else None)
        return cls(writer.target)

    def check_readable(self) -> None:
        """Read the spaces and the last episode now (the file is opened and its end reached): a truncated or
        corrupt file, or observations or actions no agent of ours reads, is a :class:`DatasetError` here
        (``dataset list``), not when a run first reads it. Of the files the episodes read (:func:`read_storage`),
        those the last one reads are checked: the whole file's check, which a run makes, takes 1 s per 3,000
        episodes, and ``dataset list`` had made it for every dataset."""
        self.observation_spec, self.action_spec
        if self.num_episodes:
            self[-1]

    # ---- metadata -------------------------------------------------------------------------

    @property
    def info(self) -> dict[str, Any]:
        """robolearn's metadata: ``task``, ``task_kwargs``, ``controller``, ``source``, ``state``..."""
        info = self.raw_metadata.get("robolearn", {})
        if not isinstance(info, dict):  # (dict() of a list had been a TypeError traceback in `dataset list`)
            raise DatasetError(f"{self.path / 'data' / 'metadata.json'}: 'robolearn' is a {type(info).__name__}, "
                               "not a mapping of robolearn's metadata (a damaged or hand-edited file)")
        return dict(info)

    @property
    def task(self) -> str | None:
        """Our task name or ``gym:<id>`` the data comes from, when known: robolearn's metadata, else the
        Gymnasium env a Minari dataset made elsewhere was collected in (its ``env_spec``)."""
        if self.info.get("task"):
            if not isinstance(self.info["task"], str):  # (a mapping had been a TypeError in `dataset list`)
                raise DatasetError(f"{self.path / 'data' / 'metadata.json'}: 'robolearn.task' is "
                                   f"{self.info['task']!r}, not a task name")
            return self.info["task"]
        try:
            env_id = json.loads(self.raw_metadata.get("env_spec") or "{}").get("id")
        except (json.JSONDecodeError, TypeError, AttributeError):
            return None
        return f"gym:{env_id}" if isinstance(env_id, str) and env_id else None

    @property
    def ref_min_score(self) -> float | None:
        return self.raw_metadata.get("ref_min_score")

    @property
    def ref_max_score(self) -> float | None:
        return self.raw_metadata.get("ref_max_score")

    @property
    def num_episodes(self) -> int:
        return self._count("total_episodes")

    @property
    def num_steps(self) -> int:
        return self._count("total_steps")

    def _count(self, key: str) -> int:
        """Metadata ``key``, a whole number of 0 or more: a dataset's metadata.json may come from anywhere, and
        "abc" had been int()'s "invalid literal" naming neither file nor key, a missing one a bare KeyError."""
        value = self.raw_metadata.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            said = "missing" if key not in self.raw_metadata else f"{value!r}, not a count (a whole number, 0 or more)"
            raise DatasetError(f"{self.path / 'data' / 'metadata.json'}: '{key}' {said}")
        return value

    @property
    def observation_spec(self) -> dict[str, spaces.Box]:
        """Group -> Box: a Box observation space is group ``policy``, a Dict's keys are the groups. Any other
        space (a nested Dict, Discrete) is refused by name: a nested Dict had been a TypeError in `dataset info`
        and "'observations/x' has shape ()" in training."""
        space = self._space("observation_space")
        groups = dict(space.spaces) if isinstance(space, spaces.Dict) else {"policy": space}
        for group, box in groups.items():
            if not isinstance(box, spaces.Box):
                where = "" if group == "policy" and not isinstance(space, spaces.Dict) else f" group '{group}'"
                raise DatasetError(f"{self.path / 'data' / 'metadata.json'}: observation_space{where} is {box}; "
                                   "robolearn reads a Box, or a Dict of Boxes (one per observation group)")
        return groups

    @property
    def action_spec(self) -> spaces.Box:
        """The action Box. A space of other than floating-point actions (Discrete, MultiDiscrete, an integer Box,
        a Dict) is refused by name, as imports refuse such actions: a Minari dataset's Discrete actions had
        trained as one continuous action, its indices."""
        space = self._space("action_space")
        arrays = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)  # (all but a Box: integers)
        refuse_discrete_actions(space.dtype if isinstance(space, arrays) else None,
                                f"{self.path / 'data' / 'metadata.json'}: action_space is {space}: ")
        return space

    def _space(self, key: str) -> Any:
        from minari.serialization import deserialize_space

        return self._read(lambda: deserialize_space(self.raw_metadata[key]))  # its errors name the file and key

    def writer_metadata(self, **changes: Any) -> dict[str, Any]:
        """This dataset's metadata as :class:`DatasetWriter` takes it, with ``changes``: for derived datasets."""
        meta = {key: self.raw_metadata[key] for key in DatasetWriter.MINARI_KEYS if key in self.raw_metadata}
        task = {"task": self.task} if self.task else {}  # a Minari dataset's, from env_spec: kept by its parts
        return {**meta, **task, **{k: v for k, v in self.info.items() if k != "created"}, **changes}

    def final_copied(self, episode: int) -> bool:
        """Whether ``episode``'s last observation is a copy of the one before (a D4RL file or a LeRobot dataset has
        no final one): all of an import's episodes (``final_observation: "copied"``), or in a merge of one with
        other sources, its episodes (``COPIED_FINALS``); a replay does not compare that row."""
        return self.info.get("final_observation") == "copied" or episode in (self.info.get(COPIED_FINALS) or ())

    def episode_stats(self) -> list[dict[str, Any]]:
        """Per-episode ``return``, ``length``, ``terminated`` and ``success`` (the last ``infos/success``;
        None without), from the episode attributes we write (no array is read); a dataset written elsewhere
        (Minari's own collector) has none: its episodes are read."""
        storage = self._dataset().storage  # (every episode's attributes: the whole file checked)
        attributes = self._read(lambda: list(storage.get_episode_metadata(range(self.num_episodes))))
        if all("return" in m for m in attributes):
            return [{"return": float(m["return"]), "length": int(m["length"]), "terminated": bool(m["terminated"]),
                     "success": bool(m["success"]) if "success" in m else None} for m in attributes]
        # a bar on a terminal only, as transitions' (20,000 episodes of Minari's arrow format take 13 s to read)
        read = tqdm(self, total=self.num_episodes, desc=f"reading {self.id}", unit="episode", disable=None, leave=False)
        return [{"return": e.episode_return, "length": len(e), "terminated": bool(e.terminations[-1]),
                 "success": e.success} for e in read]

    def score(self, episode_return: float) -> float | None:
        """:meth:`normalized_score` of one return, or None where the dataset has no reference returns."""
        if self.ref_min_score is None or self.ref_max_score is None:
            return None
        return float(self.normalized_score(episode_return))

    def reference_scores(self) -> dict[str, float]:
        """``ref_min_score`` and ``ref_max_score``, or {} where the dataset has none: a run's ``eval.json``
        keeps them, so that its return is scored later on the scale it was trained under."""
        if self.ref_min_score is None or self.ref_max_score is None:
            return {}
        return {"ref_min_score": float(self.ref_min_score), "ref_max_score": float(self.ref_max_score)}

    def normalized_score(self, returns: float | np.ndarray) -> float | np.ndarray:
        """``(R - ref_min_score) / (ref_max_score - ref_min_score)``: 0 random, 1 expert
        (D4RL's tables print it times 100)."""
        if self.ref_min_score is None or self.ref_max_score is None:
            raise DatasetError(f"dataset '{self.id}' has no ref_min_score/ref_max_score to normalize with; "
                               "record or import it with --ref-min and --ref-max")
        return normalized_score(returns, self.reference_scores())

    # ---- episodes -------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.num_episodes

    def __iter__(self) -> Iterator[Episode]:
        return self.iterate()

    def __getitem__(self, index: int) -> Episode:
        if not -len(self) <= index < len(self):
            raise IndexError(f"episode {index} out of range: dataset '{self.id}' has {len(self)} episodes")
        return next(self.iterate([index % len(self)]))

    @property
    def episodes(self) -> list[Episode]:
        """Every episode, read into memory."""
        return list(self)

    def need_episodes(self, to: str) -> None:
        """Refuse a dataset of no episode (Minari's own API writes one) for what needs some, by name."""
        if self.num_episodes == 0:
            raise DatasetError(f"dataset '{self.id}' ({self.path}) holds no episode: nothing to {to}")

    def iterate(self, indices: Sequence[int] | None = None) -> Iterator[Episode]:
        """Episodes ``indices`` (all by default), read one at a time."""
        storage = self._dataset(indices).storage
        chosen = range(self.num_episodes) if indices is None else indices
        episodes = storage.get_episodes(chosen)
        positional = storage.FORMAT in ARROW_FORMATS  # (episodes paired with pyarrow's batches in order)
        while True:
            data = self._read(lambda: next(episodes, None))
            if data is None:
                return
            if positional:
                refuse_misread_episode(self.path / "data", data)
            yield minari_episode(data)

    def transitions(self, device: str | torch.device = "cpu") -> dict[str, Any]:
        """Every step as one batch of tensors on ``device``: ``obs`` and ``next_obs`` (dicts of
        groups), ``action``, ``reward`` (float32, whatever the file stores), ``terminated``,
        ``truncated``; what offline agents train on.

        Read on a worker thread, which glibc gives a malloc arena of its own: reading thousands of
        episodes leaves the heap it reads on fragmented (short-lived arrays of every size between
        h5py's objects), and on the main thread's heap that made every later tensor allocation slow
        enough to halve IQL's updates/s on a 2,764-episode dataset (BENCHMARKS.md, offline section).
        """
        device = torch.device(device)
        if device.type == "cuda" and not torch.cuda.is_available():  # before the read (minutes on a big dataset),
            # not torch's "Torch not compiled with CUDA enabled" after it
            raise ValueError(f"transitions(device={str(device)!r}): no CUDA GPU here (torch.cuda.is_available() is "
                             "False); read them to 'cpu'")
        with ThreadPoolExecutor(1) as reader:
            arrays = reader.submit(self._read_transitions).result()
        return map_batch(arrays, lambda a: torch.as_tensor(a, device=device))

    def _read_transitions(self) -> dict[str, Any]:
        """:meth:`transitions` as numpy arrays, filled episode by episode into arrays sized from
        the metadata (no second copy of the dataset)."""
        self.need_episodes("train or read on")
        steps, filled = self.num_steps, 0
        specs = self.observation_spec, self.action_spec  # (a space that is no Box refused before any episode)
        arrays: dict[str, Any] = {}
        # A bar on a terminal only, gone when done: a million steps take seconds before the first update
        bar = tqdm(total=steps, desc=f"reading {self.id}", unit="step", unit_scale=True, disable=None, leave=False)
        for index, episode in enumerate(self):
            where = f"{self.path}: episode {index}"  # datasets written elsewhere were never checked
            episode.check(where).check_spec(where, *specs, "the dataset's")  # (its metadata's spaces, not a task's)
            end = filled + len(episode)
            if end > steps:
                raise DatasetError(f"{self.path}: the episodes hold more steps than metadata 'total_steps' ({steps})")
            rows = {"obs": {g: o[:-1] for g, o in episode.observations.items()}, "action": episode.actions,
                    "reward": episode.rewards, "next_obs": {g: o[1:] for g, o in episode.observations.items()},
                    "terminated": episode.terminations.astype(bool), "truncated": episode.truncations.astype(bool)}
            if not arrays:  # numbers as float32, what the networks take (Minari's MuJoCo datasets store float64;
                # an imported file's integer or bool observations too); the episode-end flags as bools
                try:
                    arrays = map_batch(rows, lambda a: np.empty((steps, *a.shape[1:]), np.float32))
                    arrays["terminated"], arrays["truncated"] = np.empty(steps, bool), np.empty(steps, bool)
                except MemoryError:  # sized from the metadata, which may claim anything: numpy's error named no file
                    raise DatasetError(f"{self.path / 'data' / 'metadata.json'}: 'total_steps' says {steps:,} steps, "
                                       "more than this machine's memory holds (its first episode has "
                                       f"{len(episode):,}); if the dataset is not that large, its metadata is "
                                       "wrong") from None
            write_batch(arrays, rows, slice(filled, end))
            filled = end
            bar.update(len(episode))
        bar.close()
        if filled != steps:
            raise DatasetError(f"{self.path}: the episodes hold {filled} steps, metadata 'total_steps' says {steps}")
        return arrays

    def summary(self) -> dict[str, Any]:
        """What ``robolearn dataset info`` prints."""
        stats = self.episode_stats()
        returns = [s["return"] for s in stats]
        judged = [s["success"] for s in stats if s["success"] is not None]
        summary: dict[str, Any] = {
            "id": self.id, "path": str(self.path), "episodes": self.num_episodes, "steps": self.num_steps,
            "observations": {g: list(b.shape) for g, b in self.observation_spec.items()},
            "actions": list(self.action_spec.shape),
            **{k: self.raw_metadata[k] for k in DatasetWriter.MINARI_KEYS if k in self.raw_metadata},
            "task": self.task,  # a Minari dataset's own, from its env_spec
            **self.info,
        }
        if stats:
            lengths = [s["length"] for s in stats]
            if sum(lengths) != self.num_steps:  # a file written elsewhere: its episodes are what a run reads
                warnings.warn(f"{self.path / 'data' / 'metadata.json'}: 'total_steps' says {self.num_steps}, the "
                              f"episodes hold {sum(lengths)} (shown): training refuses the dataset until the "
                              "metadata says so")
                summary["steps"] = sum(lengths)
            summary |= {"length_mean": float(np.mean(lengths)), "length_min": min(lengths), "length_max": max(lengths),
                        "terminated_episodes": sum(s["terminated"] for s in stats)}
        if returns:
            summary |= {"return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
                        "return_min": float(np.min(returns)), "return_max": float(np.max(returns))}
            if self.ref_min_score is not None and self.ref_max_score is not None:
                summary["normalized_score_mean"] = float(self.normalized_score(np.mean(returns)))
        if judged:  # of the episodes that record the task's success test
            summary["success_rate"] = float(np.mean(judged))
        return summary

    # ---- Minari access, with errors that name the file -----------------------------------

    def _dataset(self, episodes: Iterable[int] | None = None) -> Any:
        """Minari's dataset, its files checked for reading ``episodes`` (None: all, and their attributes) first,
        where not yet (:func:`read_storage`)."""
        from minari import MinariDataset

        todo = set() if self._checked is None else None if episodes is None else set(episodes) - self._checked
        if self._minari is None or todo != set():
            self._minari = self._read(lambda: MinariDataset(read_storage(self.path / "data", todo and sorted(todo),
                                                                          folder_checked=self._minari is not None)))
            self._checked = None if todo is None or self._checked is None else self._checked | todo
        return self._minari

    def _read(self, read: Any) -> Any:
        try:
            return read()
        except MemoryError:  # an array the file claims is larger than memory: numpy's error named no file
            raise DatasetError(f"{self.path / 'data'}: an array in the dataset is larger than this machine's memory "
                               "holds (a file that claims more than it holds is corrupt)") from None
        except (OSError, KeyError, ValueError, AssertionError, TypeError, RuntimeError) as err:  # RuntimeError: h5py's
            # on a damaged group ("Link iteration failed")
            if isinstance(err, DatasetError):
                raise
            if problem := metadata_problem(self.path / "data"):  # (Minari's own asserts say nothing)
                raise DatasetError(f"{self.path / 'data' / 'metadata.json'}: {problem}") from None
            if isinstance(err, AssertionError):  # Minari asserts each group is what the spaces say it is
                raise DatasetError(f"{self.path / 'data' / 'main_data.hdf5'}: its episodes are not laid out as "
                                   "metadata.json's observation_space and action_space say (a Dict space's "
                                   "groups, a Box's one array), or the file is damaged") from None
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise DatasetError(f"{self.path / 'data'}: unreadable dataset (truncated or corrupt: {reason})") from None


def metadata_problem(data: Path) -> str | None:
    """What is wrong with a Minari dataset's ``metadata.json`` that Minari only asserts (a key missing, or of
    another kind), in words; None when nothing is found there."""
    try:
        meta = json.loads((data / "metadata.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"not readable JSON ({type(err).__name__})"
    if not isinstance(meta, dict):
        return f"a JSON {type(meta).__name__}, not an object"
    for key in ("observation_space", "action_space"):
        if key in meta and not isinstance(meta[key], str):
            return f"'{key}' is {type(meta[key]).__name__}, not a serialized space (text)"
        if key not in meta and not isinstance(meta.get("env_spec"), str):
            return f"no '{key}' (nor an 'env_spec' to build it from): the dataset's spaces are unknown"
    from minari.serialization import deserialize_space

    for key in (key for key in ("observation_space", "action_space") if key in meta):
        try:  # (text that is no space had said "missing 1 required positional argument" or "Expecting value")
            deserialize_space(meta[key])
        except Exception as err:  # whatever Minari's parser raises, it is this key's text
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            return f"'{key}' is not a space Minari can read ({reason})"
    return None


def minari_episode(data: dict[str, Any]) -> Episode:
    """A Minari episode dict as an :class:`Episode`; a plain Box observation becomes group ``policy``."""
    observations = data["observations"]
    if not isinstance(observations, dict):
        observations = {"policy": observations}
    return Episode(observations=dict(observations), actions=data["actions"], rewards=data["rewards"],
                   terminations=data["terminations"], truncations=data["truncations"],
                   infos=_flat(data.get("infos") or {}))


def _flat(infos: dict[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for key, value in infos.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}/")
        else:
            out[f"{prefix}{key}"] = np.asarray(value)
    return out


def split(dataset: Dataset, fractions: Sequence[float], names: Sequence[str] | None = None, *, seed: int = 0,
          root: str | Path | None = None, overwrite: bool = False) -> list[Dataset]:
    """Shuffle ``dataset``'s episodes (with ``seed``) and write consecutive parts of them, sized by
    ``fractions`` (summing to at most 1), as new datasets ``names`` (default ``<id>-split<i>``)."""
    if not fractions or any(not f > 0 for f in fractions) or not sum(fractions) <= 1 + 1e-9:  # (nan: both False)
        raise DatasetError(f"split fractions {list(fractions)} must be positive and sum to at most 1")
    base = dataset.id.rsplit("-v", 1)[0]
    names = list(names) if names else [f"{base}-split{i}" for i in range(len(fractions))]
    if len(names) != len(fractions):
        raise DatasetError(f"split into {len(fractions)} parts needs {len(fractions)} names, got {len(names)}")
    order = np.random.default_rng(seed).permutation(len(dataset))
    bounds = np.round(np.cumsum([0.0, *fractions]) * len(dataset)).astype(int)
    parts = [sorted(order[a:b].tolist()) for a, b in zip(bounds[:-1], bounds[1:])]
    empty = [n for n, part in zip(names, parts) if not part]
    if empty:
        raise DatasetError(f"split of '{dataset.id}' ({len(dataset)} episodes) leaves '{empty[0]}' empty; use larger fractions")
    # Every part is checked before any is written: a split does all or nothing, and never replaces the
    # dataset it reads from (the parts after the first would read the first part's file)
    targets = [dataset_dir(name, root) for name in names]
    if len(set(targets)) < len(targets):
        raise DatasetError(f"split names {list(names)} name one dataset twice; give each part its own name")
    if dataset.path.resolve() in {target.resolve() for target in targets}:
        raise DatasetError(f"a part of the split may not replace '{dataset.id}', which it reads from; give the parts "
                           "other names (then `robolearn dataset list`, and remove the original yourself if you want)")
    if not overwrite and (there := [dataset_id(n) for n, t in zip(names, targets) if t.exists()]):
        raise DatasetError(f"dataset(s) {', '.join(map(repr, there))} already exist in {datasets_root(root)}; "
                           "choose other --names or pass --overwrite to replace them (nothing was written)")
    out = []
    _warn_of_unnumbered_cuts([dataset], names)
    listed = {key: set(dataset.info[key]) for key in EPISODE_LISTS if key in dataset.info}  # renumbered in each part
    try:
        for name, part in zip(names, parts):
            meta = dataset.writer_metadata(source=f"split of {dataset.id}", episodes_of_source=part, split_seed=seed,
                                           **{key: [i for i, e in enumerate(part) if e in episodes]
                                              for key, episodes in listed.items()})
            out.append(Dataset.create(name, dataset.iterate(part), dataset.observation_spec, dataset.action_spec,
                                      metadata=meta, root=root, overwrite=overwrite))
    except KeyboardInterrupt as err:  # each part is written whole or not at all, but not the split: the parts
        if out:  # written stay, said (a bare "interrupted" left the next split's "already exist" unexplained)
            written = ", ".join(repr(d.id) for d in out)
            unwritten = ", ".join(repr(dataset_id(n)) for n in names[len(out):])
            say_what_the_stop_left(err, f"the split of '{dataset.id}' wrote {written} before it stopped, not "
                                        f"{unwritten}: split again with --overwrite for all the parts")
        raise
    return out


def merge(datasets: Sequence[Dataset], name: str, *, root: str | Path | None = None, overwrite: bool = False) -> Dataset:
    """One dataset holding every episode of ``datasets``, in order. They must share task, task settings (our
    tasks' defaults filled in: the fullest written form is kept), control period (where known) and shapes;
    metadata they differ in (controller, source, a LeRobot import's readings, reference scores) is kept per
    dataset under ``sources``, not taken from the first."""
    ids = [d.id for d in datasets]
    if not ids:  # (it had failed as an IndexError)
        raise DatasetError(f"merge into '{name}': no datasets given; name two or more")
    if twice := next((i for i in ids if ids.count(i) > 1), None):
        raise DatasetError(f"cannot merge '{twice}' with itself: its episodes would be stored twice")
    if len(ids) == 1:  # said, not refused: a list that holds one (a script's) still writes its dataset
        warnings.warn(f"merging one dataset: '{dataset_id(name)}' will be a copy of '{ids[0]}'; to merge, name the "
                      "datasets to merge with it too", stacklevel=2)
    first = datasets[0]
    for other in datasets[1:]:
        dts = first.info.get("control_dt"), other.info.get("control_dt")
        same_dt = None in dts or math.isclose(*dts, rel_tol=1e-6)  # unknown on one side: not a difference
        differ = _differing_task_settings(first, other) if first.task == other.task else {}
        for what, a, b in (("task", first.task, other.task),
                           ("task settings", *(", ".join(f"{key}={pair[side]}" for key, pair in differ.items())
                                               for side in (0, 1))),
                           ("control period", *((None, None) if same_dt else dts)),
                           ("observation shapes", _shapes(first.observation_spec), _shapes(other.observation_spec)),
                           ("action shape", first.action_spec.shape, other.action_spec.shape)):
            if a != b:
                raise DatasetError(f"cannot merge '{first.id}' and '{other.id}': they differ in {what} ({a} vs {b})")
    def episodes() -> Iterator[Episode]:
        for dataset in datasets:
            yield from dataset

    # settings equal once defaults are filled in: the fullest kept, which still says what ran if a default changes
    fullest = max((d.info.get("task_kwargs") or {} for d in datasets), key=len)
    metas = {d.id: d.writer_metadata(**({"task_kwargs": fullest} if "task_kwargs" in d.info else {}))
             for d in datasets}
    # a recording's episodes cut short, numbered in the merge (each source's count from 0; equal lists had been
    # kept as one, as if the later sources' were the first's)
    _warn_of_unnumbered_cuts(datasets, [name])
    offsets = np.cumsum([0] + [len(d) for d in datasets]).tolist()
    cut = [offset + i for d, offset in zip(datasets, offsets)
           for i in metas[d.id].pop("interrupted_episodes", None) or []]
    copied = [offset + i for d, offset in zip(datasets, offsets)  # (a source's own list, or all its episodes)
              for i in metas[d.id].pop(COPIED_FINALS, None) or [i for i in range(len(d)) if d.final_copied(i)]]
    keys = {key for meta in metas.values() for key in meta}

    def agreed(key: str) -> bool:  # the physics' keys hold where known: one source's unknown period is no other
        having = [m[key] for m in metas.values() if key in m]
        if len(having) < len(metas) and key not in ("control_dt", "state"):
            return False
        if key == "control_dt":
            return all(math.isclose(v, having[0], rel_tol=1e-6) for v in having)
        return all(v == having[0] for v in having)

    shared = {key for key in keys if agreed(key)}
    meta = {key: next(m[key] for m in metas.values() if key in m) for key in shared}
    meta |= {"source": "merge of " + ", ".join(ids)}
    if any("interrupted_episodes" in d.info for d in datasets):
        meta["interrupted_episodes"] = cut
    if copied and "final_observation" not in shared:  # some sources' alone: which episodes, for replay
        meta[COPIED_FINALS] = copied
    if own := sorted((keys - shared) | ({"source"} & keys)):  # each one's source, which the merge's replaces
        meta["sources"] = {i: {key: m[key] for key in own if key in m} for i, m in metas.items()}
    if refs := [key for key in ("ref_min_score", "ref_max_score") if key in own]:  # no normalized score then: said
        warnings.warn(f"merged dataset '{name}' has no {' and '.join(refs)}: its sources' differ or some have none "
                      f"({', '.join(f'{i}: {metas[i].get(refs[0])}' for i in ids)}); they are kept per source under "
                      "'sources', and its runs report no normalized score", stacklevel=2)
    return Dataset.create(name, episodes(), first.observation_spec, first.action_spec, metadata=meta,
                          root=root, overwrite=overwrite)


def _warn_of_unnumbered_cuts(datasets: Sequence[Dataset], names: Sequence[str]) -> None:
    """Warn of a dataset among ``datasets`` merged before merges numbered its sources' episodes cut short in the
    merge: lists that differed were kept under ``sources``, each counted in its own source, whose lengths the merge
    did not keep, so they cannot be numbered in ``names``' ``interrupted_episodes``. (Lists that were equal had been
    kept as one, which no metadata tells apart.) The episodes themselves end in a truncation, what training reads."""
    for dataset in datasets:
        sources = dataset.info.get("sources")
        if "interrupted_episodes" in dataset.info or not isinstance(sources, dict):
            continue
        if cut := sorted(i for i, meta in sources.items() if isinstance(meta, dict) and "interrupted_episodes" in meta):
            warnings.warn(f"'{dataset.id}' is a merge made before merges numbered the episodes its sources cut short "
                          f"({', '.join(cut)}: under 'sources', each counted in its own source): they are not listed "
                          f"in the interrupted_episodes of {', '.join(repr(dataset_id(n)) for n in names)}; merge "
                          "its sources again to list them", stacklevel=3)


def _differing_task_settings(first: Dataset, other: Dataset) -> dict[str, tuple[Any, Any]]:
    """The task settings two datasets of one task were recorded with that differ, ``{key: (first's, other's)}``.
    Our own tasks' defaults are filled in first: a robot's recording imports with every setting spelled out, a
    simulated one leaves the defaults out, and the two ran the same task. A task of one's own is compared as
    written (filling its defaults would import the code a dataset's metadata names)."""
    import sims

    def settings(dataset: Dataset) -> dict[str, Any]:
        written = dataset.info.get("task_kwargs") or {}
        if dataset.task not in sims.TASKS:
            return written
        return {**written, **sims.trained_settings(dataset.task, written)}

    ours, theirs = settings(first), settings(other)
    return {key: (ours.get(key), theirs.get(key)) for key in sorted(ours.keys() | theirs.keys())
            if ours.get(key) != theirs.get(key)}


def _shapes(spec: dict[str, spaces.Box]) -> dict[str, tuple[int, ...]]:
    return {g: tuple(b.shape) for g, b in spec.items()}
