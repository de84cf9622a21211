"""Fixtures for the dataset tests: a private datasets root and small recorded datasets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import sims
from robolearn.data import Dataset, DatasetWriter
from robolearn.data.record import RandomController, record
from robolearn.data.recording_env import has_exact_state


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty datasets root, also the default one ($ROBOLEARN_DATASETS) for the test."""
    path = tmp_path / "datasets"
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(path))
    return path


@pytest.fixture
def recorded(root: Path) -> Callable[..., Dataset]:
    """``recorded(task, episodes, name=..., num_envs=..., noise=..., **task_kwargs)``: a dataset of
    random-controller episodes recorded on our simulator, as the CLI records them."""

    def make(task: str, episodes: int, *, name: str | None = None, num_envs: int = 2, noise: float = 0.0,
             seed: int = 0, controller: Any = None, metadata: dict[str, Any] | None = None, **task_kwargs: Any) -> Dataset:
        with sims.make_env(task, num_envs=num_envs, seed=seed, num_threads=1, **task_kwargs) as env:
            meta = {"task": task, "task_kwargs": task_kwargs, "controller": "random", **(metadata or {})}
            if has_exact_state(env):
                meta["state"] = {"format": "mjSTATE_INTEGRATION", "size": int(env.get_state()["state"].shape[1])}
            with DatasetWriter(name or task, env.observation_spec, env.action_spec, metadata=meta, root=root,
                               keep_partial=True) as writer:
                record(controller or RandomController(env, seed), env, writer, episodes, noise=noise, seed=seed,
                       progress=False)
        return Dataset.load(name or task, root)

    return make
