"""Record what a controller did on an env, one file per episode, never half-written.

:class:`EpisodeRecorder` is a :mod:`robolearn.runtime` sink. It keeps env 0's
episode in memory and writes it as ``episode_NNNNN.npz`` (atomically: a temp
file renamed into place) the moment it ends, so a crash, a lost connection or
Ctrl+C loses at most the episode in progress, and :meth:`close` writes even
that one (marked ``interrupted``, its last step truncated). Arrays per file:

- ``obs/<group>`` (T+1, ...): observations, the last one the episode's final
- ``actions`` (T, A): the actions actually sent (after a robot's safety layer)
- ``commanded_actions`` (T, A): what the controller asked for
- ``rewards`` (T,), ``terminations`` (T,), ``truncations`` (T,)
- ``timestamps`` (T,): seconds since the recording started, at each step's end
  (an automatic reset's ramp, ``info["reset_s"]``, is not part of the step)
- ``interrupted`` (): whether the episode was cut short by the end of the run

and, where the env reports them (a :class:`~hardware.robot.Robot` does):

- ``goals`` (T, A): the goal the task's own rule made of the commanded action,
  before the safety layer (``info["goal_action"]``): what simulation would have applied
- ``safety_events`` (T,): the safety rules that overruled each step, comma-separated
  (``""`` where none did; ``info["safety"]``)
- ``metrics/<name>`` (T,): the task's numbers of each step (``info["metrics"]``: a reach's
  ``distance_m`` to its target)
- ``successes`` (T,): the task's success test after each step (``info["success"]``; False on a step
  where it was undefined)
- ``success`` (): whether the episode ended in success (``successes``' last; not
  for an interrupted one, which did not end, nor where the test was undefined at the end)

:attr:`EpisodeRecorder.summaries` holds one line per written episode
(:func:`episode_summary`: steps, return, success, safety interventions by rule,
each metric's final and smallest value, a robot's peak joint speed): a
deployment's per-episode results.

These are the episode fields of robolearn's datasets (observations T+1,
actions, rewards, terminations, truncations), so recordings import as datasets.
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robolearn.checkpoint import atomic_write_bytes
from robolearn.interfaces import Obs


SUMMARY_OBS = "joint_state"  # the observation group episode_summary reads (a robot's peak joint speed)


class EpisodeRecorder:
    """Sink that writes env 0's episodes under ``directory`` (``unique_directory`` makes a fresh one,
    so that two recordings never share a folder). ``directory=None`` writes nothing and keeps only
    :attr:`summaries` (a deployment run with ``--no-record`` still reports each episode)."""

    def __init__(self, directory: str | Path | None, metadata: dict[str, Any] | None = None) -> None:
        self.directory = None if directory is None else Path(directory)
        self.metadata = metadata or {}
        self.episodes_written = 0
        self.steps_written = 0
        self.summaries: list[dict[str, Any]] = []
        self._start = time.perf_counter()
        self._clear()
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        if any(self.directory.glob("episode_*.npz")):  # its episode_00000 would replace the other's
            raise FileExistsError(f"{self.directory}: holds a recording already; record into a new folder "
                                  "(robolearn.recording.unique_directory makes one)")
        atomic_write_bytes(self.directory / "metadata.json",
                           lambda f: f.write(json.dumps(self.metadata, indent=2, default=str).encode()))

    def _clear(self) -> None:
        self._judged_last = False
        self._obs: dict[str, list[np.ndarray]] = {}
        self._columns: dict[str, list[Any]] = {k: [] for k in
                                               ("actions", "commanded_actions", "rewards", "terminations",
                                                "truncations", "timestamps")}
        self._last_obs: Obs | None = None

    def add(self, obs: Obs, commanded: torch.Tensor, sent: torch.Tensor, step: Any) -> None:
        # Writing nothing, only what episode_summary reads is kept: a --no-record deploy had copied every
        # observation group (a camera's too), action and timestamp of each step, and stacked them at its end
        writes = self.directory is not None
        for name, value in obs.items():
            if writes or name == SUMMARY_OBS:
                self._obs.setdefault(name, []).append(_row0(value))
        columns, info = self._columns, step.info
        if writes:
            columns["actions"].append(_row0(sent))
            columns["commanded_actions"].append(_row0(commanded))
            columns["timestamps"].append(time.perf_counter() - self._start - float(info.get("reset_s", 0.0)))
        columns["rewards"].append(float(step.reward[0]))
        columns["terminations"].append(bool(step.terminated[0]))
        columns["truncations"].append(bool(step.truncated[0]))
        if writes and "goal_action" in info:
            columns.setdefault("goals", []).append(_row0(info["goal_action"]))
        if "safety" in info:
            columns.setdefault("safety_events", []).append(",".join(info["safety"]))
        some = {f"metrics/{name}": float(value) for name, value in info.get("metrics", {}).items()}
        if "success" in info:
            some["successes"] = bool(info["success"][0])
        self._judged_last = "success" in info  # (an episode whose end was not judged has no outcome)
        self._add_some(some)
        if bool(step.terminated[0] | step.truncated[0]):
            self._write(info.get("final_obs", step.obs), interrupted=False)
        else:
            self._last_obs = step.obs

    def _add_some(self, values: dict[str, Any]) -> None:
        """Columns a step may lack (a robot's success test, undefined on some steps; a metric): kept one row per
        step, False (successes) or NaN (metrics) where a step had none, so they line up with the others."""
        steps = len(self._columns["rewards"])
        for name, value in values.items():
            self._columns.setdefault(name, [])
        for name, rows in self._columns.items():
            if name == "successes" or name.startswith("metrics/"):
                missing = False if name == "successes" else float("nan")
                rows.extend([missing] * (steps - 1 - len(rows)))
                rows.append(values.get(name, missing))

    def _write(self, final_obs: Obs, interrupted: bool) -> None:
        arrays: dict[str, np.ndarray] = {}
        for name, rows in self._obs.items():
            arrays[f"obs/{name}"] = np.stack([*rows, _row0(final_obs[name])])
        for name, rows in self._columns.items():
            arrays[name] = np.asarray(rows, dtype=str) if name == "safety_events" else np.asarray(rows)
        if interrupted:
            arrays["truncations"][-1] = True
        arrays["interrupted"] = np.asarray(interrupted)
        if "successes" in arrays and not interrupted and self._judged_last:  # a cut-short episode did not end,
            arrays["success"] = arrays["successes"][-1]  # and one whose last step was not judged: no outcome
        file = None
        if self.directory is not None:
            buffer = io.BytesIO()
            np.savez(buffer, **arrays)
            file = f"episode_{self.episodes_written:05d}.npz"
            atomic_write_bytes(self.directory / file, lambda f: f.write(buffer.getvalue()))
        self.summaries.append(episode_summary(file, arrays))
        self.episodes_written += 1
        self.steps_written += len(self._columns["rewards"])
        self._clear()

    def close(self) -> None:
        """Write the episode in progress, if it has any step."""
        if self._columns["rewards"] and self._last_obs is not None:
            self._write(self._last_obs, interrupted=True)


def unique_directory(path: str | Path) -> Path:
    """Create and return ``path``, or the first free ``path-1``, ``path-2``...; atomic
    (``mkdir`` fails on a taken name), so concurrent callers never get the same folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    while True:
        candidate = path if n == 0 else path.with_name(f"{path.name}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1


def load_episode(path: str | Path) -> dict[str, np.ndarray]:
    """One recorded episode's arrays (``obs/<group>``, ``actions``, ...); no pickles.
    A missing, truncated or corrupt file is a ValueError naming it. The file is opened here, in a ``with``: given
    the path, numpy left it open (closed by the garbage collector, a ResourceWarning) where it began as a zip
    file and was none."""
    try:
        with open(path, "rb") as file:
            data = np.load(file, allow_pickle=False)
            if isinstance(data, np.lib.npyio.NpzFile):
                with data:
                    arrays = {key: data[key] for key in data.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as err:
        raise ValueError(f"{path}: not a readable episode file (missing, truncated or corrupt: {err})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):  # (a `with` of it had been a TypeError traceback)
        raise ValueError(f"{path}: one array of shape {data.shape} (a .npy file), not an episode file's named arrays")
    # numbers, but safety_events' text: a file from elsewhere with text had been numpy's tracebacks in plot and import
    if text := next((key for key, value in arrays.items() if value.dtype.kind not in "biuf"
                     and key != "safety_events"), None):
        raise ValueError(f"{path}: '{text}' has dtype {arrays[text].dtype}, expected numbers")
    return arrays


def overruled_rules(arrays: dict[str, np.ndarray]) -> list[set[str]]:
    """Each step's safety rules that overruled it, from an episode's ``safety_events`` (comma-separated,
    ``""`` where none did); no steps without them."""
    return [{rule for rule in str(step).split(",") if rule} for step in arrays.get("safety_events", ())]


def episode_summary(file: str | None, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """One episode's results from its arrays: file (None where none was written), steps, return, success
    (None where the env does not say), whether it was interrupted, the safety interventions by rule, each
    recorded metric's final and smallest value (a reach's distance: how near it came, not only where it
    ended), and a robot's peak joint speed (rad/s, from its ``joint_state`` group: what the overspeed rule
    compares)."""
    events = Counter(rule for step in overruled_rules(arrays) for rule in step)
    summary = {"file": file, "steps": int(len(arrays["rewards"])), "return": float(np.sum(arrays["rewards"])),
               "success": bool(arrays["success"]) if "success" in arrays else None,
               "interrupted": bool(arrays.get("interrupted", False)), "safety_events": dict(sorted(events.items()))}
    for key, values in arrays.items():
        if key.startswith("metrics/") and len(values):
            name = key[len("metrics/"):]
            finite = np.asarray(values, dtype=np.float64)[np.isfinite(values)]
            summary |= {f"final_{name}": float(values[-1]), f"min_{name}": float(finite.min()) if len(finite) else None}
    state = arrays.get(f"obs/{SUMMARY_OBS}")
    if state is not None and state.ndim == 2 and state.shape[1] % 2 == 0 and len(state):
        speeds = np.abs(state[:, state.shape[1] // 2:])
        summary["peak_joint_speed"] = float(np.nanmax(speeds)) if np.isfinite(speeds).any() else None
    return summary


def _row0(value: torch.Tensor) -> np.ndarray:
    return value[0].detach().cpu().numpy().copy()
