"""Fixtures for the dataset tests: a private datasets root and small recorded datasets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
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


@pytest.fixture
def link_out(tmp_path: Path) -> Callable[[h5py.Group, str], Path]:
    """``link_out(group, how)``: make HDF5 ``group``'s ``infos`` reach into ``secret.hdf5`` (returned: a file of
    this machine's, its dataset ``data`` ten float32s), ``how`` a downloaded file could: "external link", "soft
    link" (to an external link beside it), "virtual dataset" or "external storage" (raw bytes, at any path)."""
    secret = tmp_path / "secret.hdf5"
    with h5py.File(secret, "w") as f:
        f["data"] = np.arange(10, dtype=np.float32)

    def link(group: h5py.Group, how: str) -> Path:
        if how == "external link":
            group["infos"] = h5py.ExternalLink(str(secret), "/")
        elif how == "soft link":  # a path inside the file, to a group that is elsewhere
            group["elsewhere"] = h5py.ExternalLink(secret.name, "/")
            group["infos"] = h5py.SoftLink(f"{group.name.rstrip('/')}/elsewhere")
        elif how == "virtual dataset":
            layout = h5py.VirtualLayout(shape=(10,), dtype=np.float32)
            layout[:] = h5py.VirtualSource(str(secret), "data", shape=(10,))
            group.create_virtual_dataset("infos/data", layout)
        else:  # raw storage in an external file, read at any path as bytes
            group.create_dataset("infos/data", shape=(10,), dtype=np.uint8, external=[(str(secret), 0, 10)])
        return secret

    return link
