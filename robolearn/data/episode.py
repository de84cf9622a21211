"""One episode of a dataset, and the checks every episode passes before it is stored.

An :class:`Episode` is what every source (our recorder, D4RL HDF5, LeRobot
parquet, deployment recordings) turns into and what every consumer (offline
RL, replay, export) reads. ``T`` is the number of steps:

- ``observations``: group name -> ``(T+1, *shape)``: ``policy`` at least; the
  last row is the observation the final action led to
- ``actions`` ``(T, *action_shape)``, ``rewards`` ``(T,)``
- ``terminations`` ``(T,)`` bool: the MDP ended (no bootstrap)
- ``truncations`` ``(T,)`` bool: a time limit or an interruption ended it
- ``infos``: per-step extras, name -> ``(T+1, ...)`` (one row per
  observation) or ``(T, ...)`` (one row per action). Known names:
  ``state`` (our simulators' full ``mjSTATE_INTEGRATION`` rows: restoring
  row 0 and replaying the actions reproduces the episode bit for bit),
  ``qpos`` and ``qvel`` (as D4RL's ``infos/qpos``, ``infos/qvel``),
  ``commanded_actions`` (what the controller asked for before noise or a
  robot's safety layer), ``timestamps``, ``success`` (the task's success test after each step;
  its last row is the episode's outcome, :attr:`Episode.success`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces


class DatasetError(ValueError):
    """Data that cannot be used; the one-line message names the file, the key and the shapes."""


def is_positive_number(value: Any) -> bool:
    """Whether ``value`` is a finite number above 0 (not a bool, a string or NaN): a rate or a period."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value < float("inf")


def as_flags(values: Any, where: str, key: str) -> np.ndarray:
    """``values`` as bools, refused unless each is 0 or 1 (False or True): other numbers, strings or NaN would
    read as True (an "is done" column of the strings 'False' had ended every step) and a null as False."""
    array = np.asarray(values)
    ok = np.isin(array, (0, 1)) if array.dtype.kind in "biuf" else np.zeros(array.shape, bool)
    if not ok.all():
        row = int(np.argmin(ok.reshape(len(array), -1).all(1))) if array.ndim else 0
        found = np.asarray(array[row] if array.ndim else array).tolist()
        raise DatasetError(f"{where}: '{key}' holds {found!r} at row {row}: its flags are 0 or 1")
    return array.astype(bool)


def beyond_float32(value: np.ndarray) -> tuple[int, float] | None:
    """The first row of float64 ``value`` holding a number beyond float32's range, and that number (training
    reads float32: it would be inf there); None where every number fits."""
    if value.dtype.kind != "f" or value.dtype.itemsize <= 4:
        return None
    beyond = np.abs(value) > np.finfo(np.float32).max
    if not beyond.any():
        return None
    row = int(np.argwhere(beyond)[0][0])
    return row, float(np.asarray(value[row]).flat[np.argmax(np.asarray(beyond[row]))])


@dataclass
class Episode:
    """One episode's arrays (numpy, on the CPU); see the module docstring."""

    observations: dict[str, np.ndarray]
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def episode_return(self) -> float:
        """Undiscounted return, summed in float64."""
        return float(np.sum(self.rewards, dtype=np.float64))

    @property
    def success(self) -> bool | None:
        """Whether the episode ended in the task's success: its last ``infos/success``; None without one."""
        return bool(self.infos["success"][-1]) if "success" in self.infos else None

    @property
    def state(self) -> np.ndarray | None:
        """Full simulator state rows, when the episode was recorded in our simulator."""
        return self.infos.get("state")

    def check(self, where: str) -> Episode:
        """Raise :class:`DatasetError` (naming ``where``, the key and the shapes) unless every array
        has its documented length, rewards and flags one number per step, and every number is finite;
        returns self."""
        steps = len(self.rewards)
        if steps == 0:
            raise DatasetError(f"{where}: empty episode (0 steps)")
        if "policy" not in self.observations:
            raise DatasetError(f"{where}: no 'policy' observation group (groups: {sorted(self.observations)})")
        expected = {f"observations/{g}": (v, steps + 1) for g, v in self.observations.items()}
        expected |= {"actions": (self.actions, steps), "rewards": (self.rewards, steps),
                     "terminations": (self.terminations, steps), "truncations": (self.truncations, steps)}
        for key, (value, rows) in expected.items():
            if np.ndim(value) == 0 or len(value) != rows:
                raise DatasetError(f"{where}: '{key}' has shape {np.shape(value)}, expected {rows} rows "  # (steps
                                   # are counted from the rewards: short rewards had read as long observations)
                                   f"({steps} steps{' + 1' if rows > steps else ''}, as 'rewards' has {steps} rows)")
        for key in ("rewards", "terminations", "truncations"):  # (T, 1) would broadcast targets into (B, B)
            if np.ndim(expected[key][0]) != 1:
                raise DatasetError(f"{where}: '{key}' has shape {np.shape(expected[key][0])}, expected ({steps},): "
                                   "one number per step")
        for key, (value, _) in expected.items():
            if np.asarray(value).dtype.kind not in "biuf":  # strings or objects: numpy's errors would not say which
                raise DatasetError(f"{where}: '{key}' has dtype {np.asarray(value).dtype}, expected numbers")
        for key in ("terminations", "truncations"):  # 2 or NaN would read as True
            as_flags(getattr(self, key), where, key)
        for key, value in self.infos.items():
            if np.ndim(value) == 0 or len(value) not in (steps, steps + 1):
                raise DatasetError(f"{where}: 'infos/{key}' has shape {np.shape(value)}, "
                                   f"expected {steps + 1} or {steps} rows ({steps} steps)")
        for key, value in (*((f"observations/{g}", v) for g, v in self.observations.items()),
                           ("actions", self.actions), ("rewards", self.rewards),
                           *((f"infos/{k}", v) for k, v in self.infos.items())):
            value = np.asarray(value)
            if value.dtype.kind in "fc" and not np.isfinite(value).all():
                row = int(np.argwhere(~np.isfinite(value))[0][0])
                raise DatasetError(f"{where}: '{key}' {tuple(value.shape)} holds NaN or inf (first at row {row})")
            if not key.startswith("infos/") and (beyond := beyond_float32(value)):
                raise DatasetError(f"{where}: '{key}' holds {beyond[1]:g} at row {beyond[0]}, beyond float32's range "
                                   "(what training reads)")
        return self

    def check_spec(self, where: str, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box,
                   owner: str = "the task's") -> Episode:
        """Raise :class:`DatasetError` unless the shapes fit a task's specs (``owner``'s, as the message says
        whose: ``the task's (hopper)``); returns self."""
        for group, space in observation_spec.items():
            if group not in self.observations:
                raise DatasetError(f"{where}: observation groups {sorted(self.observations)} lack '{group}', "
                                   f"one of {owner}")
            found = self.observations[group].shape[1:]
            if found != space.shape:
                raise DatasetError(f"{where}: 'observations/{group}' rows have shape {found}, {owner} are {space.shape}")
        if self.actions.shape[1:] != action_spec.shape:
            raise DatasetError(f"{where}: 'actions' rows have shape {self.actions.shape[1:]}, {owner} are {action_spec.shape}")
        return self
