"""The dataset store: Minari's namespaced ids work, and a path given where a dataset name is expected says how
to import it."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from gymnasium import spaces

from robolearn.cli import main as cli
from robolearn.data import Dataset, DatasetError, DatasetWriter, Episode, dataset_id, list_datasets


def _d4rl_file(path: Path, rows: int = 20) -> Path:
    rng = np.random.default_rng(0)
    timeouts = np.zeros(rows, bool)
    timeouts[4::5] = True  # four episodes of 5 steps
    with h5py.File(path, "w") as f:
        f["observations"] = rng.normal(size=(rows, 3)).astype(np.float32)
        f["actions"] = rng.uniform(-1, 1, (rows, 1)).astype(np.float32)
        f["rewards"] = rng.normal(size=rows).astype(np.float32)
        f["terminals"] = np.zeros(rows, bool)
        f["timeouts"] = timeouts
    return path


def _episode(steps: int = 5) -> Episode:
    return Episode(observations={"policy": np.zeros((steps + 1, 3), np.float32)}, actions=np.zeros((steps, 1), np.float32),
                   rewards=np.ones(steps, np.float32), terminations=np.zeros(steps, bool),
                   truncations=np.r_[np.zeros(steps - 1, bool), True])


SPECS = ({"policy": spaces.Box(-np.inf, np.inf, (3,), np.float32)}, spaces.Box(-1.0, 1.0, (1,), np.float32))


def _write(name: str, root: Path, **kwargs) -> Path:
    with DatasetWriter(name, *SPECS, root=root, **kwargs) as writer:
        writer.add(_episode())
    return writer.target


# ---- Minari's namespaced ids ----------------------------------------------------------------


def test_namespaced_ids():
    assert dataset_id("mujoco/hopper/expert") == "mujoco/hopper/expert-v0"
    assert dataset_id("mujoco/hopper/expert-v2") == "mujoco/hopper/expert-v2"
    for bad in ("/abs/x", "a//b", "a/../b", "a/", "../x", "a/.hidden", "a b", "x\n"):
        with pytest.raises(DatasetError, match="bad dataset name"):
            dataset_id(bad)


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")  # Minari's nags for author, description...
def test_datasets_minari_downloads_are_listed_and_load(root, monkeypatch, capsys):
    """`minari download mujoco/hopper/expert-v0` stores <root>/mujoco/hopper/expert-v0: it had been 'bad dataset
    name' for `dataset info`, and skipped by `dataset list`."""
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    buffers = [EpisodeBuffer(observations=e.observations["policy"], actions=e.actions, rewards=e.rewards,
                             terminations=e.terminations, truncations=e.truncations) for e in (_episode(), _episode(7))]
    minari.create_dataset_from_buffers("mujoco/hopper/expert-v0", buffers, observation_space=SPECS[0]["policy"],
                                       action_space=SPECS[1], algorithm_name="sac")
    _write("flat", root)
    assert list_datasets(root) == ["flat-v0", "mujoco/hopper/expert-v0"]
    ds = Dataset.load("mujoco/hopper/expert")
    assert ds.path == root / "mujoco" / "hopper" / "expert-v0" and len(ds) == 2 and ds.num_steps == 12
    assert ds.transitions()["obs"]["policy"].shape == (12, 3)
    assert cli(["dataset", "info", "mujoco/hopper/expert-v0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 2
    assert cli(["dataset", "list"]) == 0 and "mujoco/hopper/expert-v0" in capsys.readouterr().out


def test_a_namespaced_dataset_is_written_where_minari_reads_it(root, monkeypatch):
    import minari

    target = _write("robot/arm/reach", root)
    assert target == root / "robot" / "arm" / "reach-v0"
    assert [p.name for p in target.parent.iterdir()] == ["reach-v0"]  # no temp directory left beside it
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    assert list(minari.list_local_datasets()) == ["robot/arm/reach-v0"]
    _write("robot/arm/reach", root, overwrite=True)  # the swap with the replaced copy, inside the namespace
    assert list_datasets(root) == ["robot/arm/reach-v0"] and [p.name for p in target.parent.iterdir()] == ["reach-v0"]


def test_a_namespace_and_a_dataset_are_not_mistaken_for_one_another(root):
    _write("flat", root)
    _write("robot/arm-v0/reach", root)
    with pytest.raises(DatasetError, match="'flat-v0' is a dataset, not a namespace"):
        _write("flat-v0/inner", root)
    with pytest.raises(DatasetError, match="'robot/arm-v0' is a namespace of datasets.*choose another name"):
        _write("robot/arm-v0", root, overwrite=True)
    assert list_datasets(root) == ["flat-v0", "robot/arm-v0/reach-v0"]


# ---- a path where a dataset name is expected ------------------------------------------------


def test_a_file_path_given_as_a_dataset_name_says_to_import_it(tmp_path, root, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h5").mkdir()
    _d4rl_file(tmp_path / "h5" / "hop_std.hdf5")
    for name in ("h5/hop_std.hdf5", "missing/walker.h5"):
        with pytest.raises(DatasetError, match=rf"robolearn dataset import {name} --format d4rl --task TASK") as err:
            Dataset.load(name)
        assert "\n" not in str(err.value)
    with pytest.raises(DatasetError, match="then use the name 'hop_std'"):
        Dataset.load("h5/hop_std.hdf5")


def test_a_lerobot_or_recording_folder_given_as_a_dataset_name_says_to_import_it(tmp_path, root, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "so100" / "meta").mkdir(parents=True)
    (tmp_path / "so100" / "meta" / "info.json").write_text("{}")
    (tmp_path / "deploy.1").mkdir()
    (tmp_path / "deploy.1" / "episode_000.npz").write_bytes(b"")
    with pytest.raises(DatasetError, match="robolearn dataset import so100 --format lerobot"):  # also a valid name
        Dataset.load("so100")
    with pytest.raises(DatasetError, match="robolearn dataset import ./deploy.1 --format recording"):
        Dataset.load("./deploy.1")


def test_a_dataset_folder_outside_the_root_says_to_point_the_root_at_it(tmp_path, root, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    _write("hop", elsewhere)
    _write("mujoco/hopper/expert", elsewhere)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetError, match=rf"set ROBOLEARN_DATASETS={elsewhere} .*use the name 'hop-v0'"):
        Dataset.load("elsewhere/hop-v0")
    with pytest.raises(DatasetError, match=rf"set ROBOLEARN_DATASETS={elsewhere} .*'mujoco/hopper/expert-v0'"):
        Dataset.load(str(elsewhere / "mujoco" / "hopper" / "expert-v0"))
