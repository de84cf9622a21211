"""D4RL HDF5 in and out: round trips keep every array; bad files are one-line errors that damage nothing."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from gymnasium import spaces

from robolearn.cli import main
from robolearn.data import Dataset
from robolearn.data.d4rl import REF_SCORES, read_d4rl, ref_scores, write_d4rl
from robolearn.data.episode import DatasetError, Episode


def _assert_same_episodes(a: Dataset, b: Dataset) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.observations.keys() == y.observations.keys() and x.infos.keys() == y.infos.keys()
        pairs = [(x.actions, y.actions), (x.rewards, y.rewards), (x.terminations, y.terminations),
                 (x.truncations, y.truncations), *((x.observations[k], y.observations[k]) for k in x.observations),
                 *((x.infos[k], y.infos[k]) for k in x.infos)]
        for p, q in pairs:
            assert p.dtype == q.dtype
            np.testing.assert_array_equal(p, q)


def test_minari_to_d4rl_to_minari_keeps_every_array(recorded, tmp_path):
    ds = recorded("hopper", 3, num_envs=2, noise=0.2, metadata={"ref_min_score": -20.27, "ref_max_score": 3234.3})
    out = write_d4rl(ds, tmp_path / "hopper.hdf5")
    with h5py.File(out) as f:
        n = ds.num_steps
        assert f["observations"].shape == f["next_observations"].shape == (n, 11)
        assert f["actions"].shape == (n, 3) and f["rewards"].shape == f["terminals"].shape == f["timeouts"].shape == (n,)
        assert f["infos/qpos"].shape == (n, 6) and f["infos/qvel"].shape == (n, 6)
        assert int(f["terminals"][()].sum()) == 3
    episodes, meta = read_d4rl(out)
    back = Dataset.create("hopper-back", episodes, ds.observation_spec, ds.action_spec, metadata=meta)
    _assert_same_episodes(ds, back)
    assert back.task == "hopper" and back.normalized_score(3234.3) == pytest.approx(1.0)


def _write(path: Path, **arrays: np.ndarray) -> Path:
    with h5py.File(path, "w") as f:
        for name, value in arrays.items():
            f.create_dataset(name, data=value)
    return path


def _d4rl_arrays(rows: int = 10, obs: int = 11, act: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    terminals, timeouts = np.zeros(rows, bool), np.zeros(rows, bool)
    terminals[3], timeouts[7] = True, True  # episodes: rows 0-3 (fell), 4-7 (time limit), 8-9 (file ends)
    return {"observations": rng.normal(size=(rows, obs)).astype(np.float32),
            "actions": rng.uniform(-1, 1, (rows, act)).astype(np.float32),
            "rewards": rng.normal(size=rows).astype(np.float32), "terminals": terminals, "timeouts": timeouts,
            "infos/qpos": rng.normal(size=(rows, 6)), "infos/qvel": rng.normal(size=(rows, 6))}


def test_a_d4rl_file_without_next_observations_imports_with_copied_final_observations(tmp_path):
    arrays = _d4rl_arrays()
    episodes, meta = read_d4rl(_write(tmp_path / "hopper-medium-v2.hdf5", **arrays))
    assert [len(e) for e in episodes] == [4, 4, 2] and meta["final_observation"] == "copied"
    assert [(bool(e.terminations[-1]), bool(e.truncations[-1])) for e in episodes] == [(True, False), (False, True), (False, True)]
    np.testing.assert_array_equal(np.concatenate([e.actions for e in episodes]), arrays["actions"])
    np.testing.assert_array_equal(np.concatenate([e.observations["policy"][:-1] for e in episodes]), arrays["observations"])
    np.testing.assert_array_equal(episodes[0].observations["policy"][-1], arrays["observations"][3])
    np.testing.assert_array_equal(np.concatenate([e.infos["qpos"] for e in episodes]), arrays["infos/qpos"])
    assert ref_scores("hopper-medium-v2") == (-20.27, 3234.3) and ref_scores("gym:HalfCheetah-v5") == (-280.18, 12135.0)


def test_an_export_through_a_symlink_replaces_the_file_it_points_to(recorded, tmp_path):
    """The atomic rename had replaced the link with a file, leaving the old file where it pointed."""
    (tmp_path / "disk").mkdir()
    target, link = tmp_path / "disk" / "pendulum.hdf5", tmp_path / "pendulum.hdf5"
    with h5py.File(target, "w") as f:  # an older export (a file that is not HDF5 is not replaced)
        f["older"] = 1
    link.symlink_to(target)
    write_d4rl(recorded("pendulum", 2), link)
    assert link.is_symlink() and h5py.is_hdf5(target)
    assert [p.name for p in (tmp_path / "disk").iterdir()] == ["pendulum.hdf5"]


def test_what_an_export_killed_outright_left_goes_with_the_next_export_and_a_running_ones_stays(recorded, tmp_path):
    """kill -9 during an export had left its hidden temp file beside the output for good."""
    import subprocess

    from robolearn.data.minari_store import _HOST, WRITING

    dead = subprocess.Popen(["true"])
    dead.wait()
    out = tmp_path / "out" / "pendulum.hdf5"
    killed = out.with_name(f".{out.name}.tmp-{dead.pid}@{_HOST}-k1ll3d")  # as a killed export leaves its folder
    running = out.with_name(f".{out.name}.tmp-{os.getpid()}@{_HOST}-runn1n")  # one still writing
    for folder in (killed, running):
        folder.mkdir(parents=True)
        (folder / WRITING).touch()
        (folder / out.name).write_bytes(b"half a file")
    write_d4rl(recorded("pendulum", 2), out)
    assert h5py.is_hdf5(out) and sorted(p.name for p in out.parent.iterdir()) == sorted([out.name, running.name])


def test_an_export_leaves_a_users_own_folders_that_look_like_an_old_set_aside_copy_alone(recorded, tmp_path):
    """An export's folder is the user's (a home, a project): a hidden folder named as robolearn's set-aside copies
    were before they carried the host (``.<name>.old-<pid>``) is not robolearn's to judge there; an export had
    moved one onto ``<name>`` where that was missing, and removed it where ``<name>`` was there."""
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    out = tmp_path / "home" / "pendulum.hdf5"
    backup = tmp_path / "home" / f".notes.old-{dead.pid}"  # a user's backup of notes/ beside it
    renamed = tmp_path / "home" / f".thesis.old-{dead.pid}"  # ... and of a thesis/ that is not there
    for folder in (backup, renamed, tmp_path / "home" / "notes"):
        folder.mkdir(parents=True)
        (folder / "keep.txt").write_text("mine")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (nothing to say about them either)
        write_d4rl(recorded("pendulum", 2), out)
    assert sorted(p.name for p in out.parent.iterdir()) == sorted([backup.name, renamed.name, "notes", out.name])
    assert (backup / "keep.txt").read_text() == (renamed / "keep.txt").read_text() == "mine"


def test_a_step_that_ends_both_ways_is_exported_as_terminal_only(tmp_path, root):
    """D4RL readers (d3rlpy asserts it) need terminals and timeouts never set on the same row."""
    arrays = _d4rl_arrays()
    arrays["timeouts"][3] = True  # the fall on row 3 also hit the time limit
    episodes, meta = read_d4rl(_write(tmp_path / "in.hdf5", **arrays))
    assert bool(episodes[0].terminations[-1]) and bool(episodes[0].truncations[-1])
    ds = Dataset.create("both-ways", episodes, {"policy": spaces.Box(-np.inf, np.inf, (11,), np.float32)},
                        spaces.Box(-1.0, 1.0, (3,), np.float32), metadata=meta)
    with h5py.File(write_d4rl(ds, tmp_path / "out.hdf5")) as f:
        terminals, timeouts = f["terminals"][()], f["timeouts"][()]
    assert not (terminals & timeouts).any()
    np.testing.assert_array_equal(terminals, arrays["terminals"])
    expected = arrays["timeouts"] & ~arrays["terminals"]
    expected[-1] = True  # the file's unflagged last episode was read as truncated
    np.testing.assert_array_equal(timeouts, expected)


def test_import_and_export_through_the_cli(tmp_path, root, capsys):
    path = _write(tmp_path / "hopper-medium-v2.hdf5", **_d4rl_arrays())
    assert main(["dataset", "import", str(path), "--format", "d4rl", "--name", "taskless"]) == 0
    assert "task:        not named (the file says none): import with --task NAME" in capsys.readouterr().out
    assert main(["dataset", "import", str(path), "--format", "d4rl", "--task", "hopper"]) == 0
    ds = Dataset.load("hopper-medium-v2")
    assert len(ds) == 3 and ds.task == "hopper" and (ds.ref_min_score, ds.ref_max_score) == (-20.27, 3234.3)
    assert main(["dataset", "export", "hopper-medium-v2", "--out", str(tmp_path / "out.hdf5")]) == 0
    with h5py.File(tmp_path / "out.hdf5") as f:
        np.testing.assert_array_equal(f["actions"][()], _d4rl_arrays()["actions"])
    assert "exported:" in capsys.readouterr().out
    assert main(["dataset", "export", "hopper-medium-v2", "--out", str(tmp_path / "out.hdf5")]) == 2  # kept
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert main(["dataset", "export", "hopper-medium-v2", "--out", str(tmp_path / "out.hdf5"), "--overwrite"]) == 0
    (tmp_path / "folder").mkdir()  # had said "exists; pass --overwrite", and then failed in a traceback
    for extra in ([], ["--overwrite"]):
        err = _error(capsys, "export", "hopper-medium-v2", "--out", str(tmp_path / "folder"), *extra)
        assert f"{tmp_path / 'folder'}: a directory; give the .hdf5 file to write" in err
    err = _error(capsys, "export", "hopper-medium-v2", "--out", "/proc/nope.hdf5")
    assert err.startswith("error: /proc/nope.hdf5: cannot write there")  # not the temp file's name


def test_an_export_into_a_datasets_own_folder_is_refused_and_the_dataset_kept(recorded, root, capsys):
    """`export NAME --out <root>/<id>/data/main_data.hdf5 --overwrite` had replaced the dataset's episodes with a
    D4RL file: the dataset, the one exported from included, no longer loaded."""
    ds = recorded("pendulum", 2, name="pend")
    inside = [ds.path / "data" / "main_data.hdf5", ds.path / "data" / "pend.hdf5", ds.path / "pend.hdf5"]
    for out in inside:
        for extra in ([], ["--overwrite"]):
            err = _error(capsys, "export", "pend", "--out", str(out), *extra)
            assert f"inside the dataset folder {ds.path}" in err and "--overwrite" not in err
        with pytest.raises(DatasetError, match="inside the dataset folder"):
            write_d4rl(ds, out)
    assert _error(capsys, "export", "pend", "--format", "lerobot", "--out", str(ds.path / "le"))
    assert sorted(p.name for p in (ds.path / "data").iterdir()) == ["main_data.hdf5", "metadata.json"]
    assert [p.name for p in ds.path.iterdir()] == ["data"]
    assert Dataset.load("pend").num_episodes == 2


def test_an_export_does_not_replace_a_file_that_is_not_hdf5(recorded, root, tmp_path, capsys):
    """`export NAME --out notes.txt --overwrite` had replaced the text file with the export (a LeRobot export
    replaces only a LeRobot dataset); an empty file, one made for it, is taken."""
    ds = recorded("pendulum", 1, name="pend")
    notes = tmp_path / "notes.txt"
    notes.write_text("precious")
    for extra in ([], ["--overwrite"]):
        err = _error(capsys, "export", "pend", "--out", str(notes), *extra)
        assert err == f"error: {notes}: exists and is not an HDF5 file: not replaced; give the .hdf5 file to write"
    with pytest.raises(DatasetError, match="not an HDF5 file"):
        write_d4rl(ds, notes)
    assert notes.read_text() == "precious"
    (tmp_path / "made.hdf5").touch()
    assert h5py.is_hdf5(write_d4rl(ds, tmp_path / "made.hdf5"))


def _import_naming(tmp_path, capsys, metadata: str) -> str:
    """What `dataset import` prints of a D4RL file whose robolearn metadata is ``metadata`` (JSON)."""
    path = _write(tmp_path / "elsewhere.hdf5", **_d4rl_arrays())
    with h5py.File(path, "a") as f:
        f.attrs["robolearn_metadata"] = metadata
    assert main(["dataset", "import", str(path), "--format", "d4rl", "--name", "elsewhere"]) == 0
    return capsys.readouterr().out


def test_a_file_whose_task_cannot_be_made_here_is_not_said_to_name_none(tmp_path, root, capsys):
    out = _import_naming(tmp_path, capsys, '{"task": "gym:NotRegisteredHere-v0"}')
    assert "task:        not named (the file's gym:NotRegisteredHere-v0 cannot be made here): import with --task" in out
    assert "the file says none" not in out and "NotRegisteredHere-v0 cannot be made here (" in out


def test_a_file_whose_task_is_no_task_here_is_imported_without_it_and_said(tmp_path, root, capsys):
    """A file naming a task this install lacks (a typo, another install's) had been imported in silence with that
    task, its shapes unchecked, and runs on it then told to add env.task=<that name>."""
    out = _import_naming(tmp_path, capsys, '{"task": "hoper", "task_kwargs": {"frame_skip": 2}}')
    assert "task:        not named (the file's hoper cannot be made here): import with --task" in out
    assert "its task 'hoper' is no task here (did you mean 'hopper'?)" in out
    ds = Dataset.load("elsewhere")
    assert ds.task is None and ds.info["recorded_task"] == "hoper" and "task_kwargs" not in ds.info



def _error(capsys, *argv: str) -> str:
    assert main(["dataset", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    return err


def test_bad_d4rl_files_are_one_line_errors_naming_file_key_and_shapes(tmp_path, root, capsys):
    good = _write(tmp_path / "good.hdf5", **_d4rl_arrays())
    assert main(["dataset", "import", str(good), "--format", "d4rl", "--name", "keep"]) == 0
    before = sorted(p.name for p in root.rglob("*"))

    truncated = tmp_path / "truncated.hdf5"
    truncated.write_bytes(good.read_bytes()[:3000])
    assert "truncated.hdf5: not a readable HDF5 file" in _error(capsys, "import", str(truncated), "--format", "d4rl")
    garbage = tmp_path / "garbage.hdf5"
    garbage.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 8)
    assert "garbage.hdf5: not a readable HDF5 file" in _error(capsys, "import", str(garbage), "--format", "d4rl")

    arrays = _d4rl_arrays()
    del arrays["rewards"]
    err = _error(capsys, "import", str(_write(tmp_path / "norewards.hdf5", **arrays)), "--format", "d4rl")
    assert "norewards.hdf5: missing key 'rewards'" in err

    arrays = _d4rl_arrays()
    arrays["actions"] = arrays["actions"][:-1]
    err = _error(capsys, "import", str(_write(tmp_path / "short.hdf5", **arrays)), "--format", "d4rl")
    assert "short.hdf5: 'actions' has shape (9, 3), expected 10 rows like 'observations' (10, 11)" in err

    err = _error(capsys, "import", str(_write(tmp_path / "wide.hdf5", **_d4rl_arrays(obs=12))), "--format", "d4rl",
                 "--task", "hopper")
    assert "wide.hdf5: episode 0: 'observations/policy' rows have shape (12,), the task's (hopper) are (11,)" in err
    err = _error(capsys, "import", str(_write(tmp_path / "act.hdf5", **_d4rl_arrays(act=2))), "--format", "d4rl",
                 "--task", "hopper")
    assert "act.hdf5: episode 0: 'actions' rows have shape (2,), the task's (hopper) are (3,)" in err
    with pytest.raises(DatasetError, match=r"^x: observation groups \['policy'\] lack 'critic', one of the task's "
                       r"\(hopper\)$"):  # (had said 'which the task needs', whoever's spec it was)
        Episode(observations={"policy": np.zeros((3, 2), np.float32)}, actions=np.zeros((2, 1), np.float32),
                rewards=np.zeros(2, np.float32), terminations=np.zeros(2, bool), truncations=np.ones(2, bool)
                ).check_spec("x", {"critic": spaces.Box(-1, 1, (2,))}, spaces.Box(-1, 1, (1,)), "the task's (hopper)")

    arrays = _d4rl_arrays()
    arrays["rewards"][5] = np.nan
    err = _error(capsys, "import", str(_write(tmp_path / "nan.hdf5", **arrays)), "--format", "d4rl")
    assert err.endswith("nan.hdf5: 'rewards' holds NaN or inf (first at row 5)")  # the file's row, not episode 1's
    arrays = _d4rl_arrays()
    arrays["rewards"] = arrays["rewards"].astype(np.float64)
    arrays["rewards"][5] = 1e39
    err = _error(capsys, "import", str(_write(tmp_path / "huge.hdf5", **arrays)), "--format", "d4rl")
    assert err.endswith("huge.hdf5: 'rewards' holds 1e+39 at row 5, beyond float32's range (what training reads)")

    arrays = _d4rl_arrays()
    arrays["terminals"] = np.full(10, 2.0)  # a label column, not flags: it had read as ten 1-step episodes
    err = _error(capsys, "import", str(_write(tmp_path / "labels.hdf5", **arrays)), "--format", "d4rl")
    assert "labels.hdf5: 'terminals' holds 2.0 at row 0: its flags are 0 or 1" in err
    arrays = _with_next(_d4rl_arrays(), ends=(3, 7))
    arrays["next_observations"][4, 2] = np.nan  # said as such, not first as an episode end (NaN equals nothing)
    err = _error(capsys, "import", str(_write(tmp_path / "nan_next.hdf5", **arrays)), "--format", "d4rl")
    assert err.endswith("nan_next.hdf5: 'next_observations' holds NaN or inf (first at row 4)")

    err = _error(capsys, "import", str(good), "--format", "d4rl", "--name", "keep", "--overwrite", "--task", "pendulum")
    assert "the task's (pendulum) are" in err  # a failed overwrite leaves the old dataset as it was
    assert sorted(p.name for p in root.rglob("*")) == before and len(Dataset.load("keep")) == 3


def _with_broken_header(path: Path, name: str) -> Path:
    """``path`` with the object header of its dataset ``name`` damaged (its version byte), as a bad sector or a
    copy cut off mid-block leaves a file whose superblock is still whole."""
    with h5py.File(path) as f:
        address = h5py.h5o.get_info(f[name].id).addr
    data = bytearray(path.read_bytes())
    data[address + 4] = 0xFF  # after the "OHDR" signature (libver latest)
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("name", ["rewards", "infos/qpos"])
def test_a_damaged_object_header_is_a_one_line_error(tmp_path, root, capsys, name):
    """h5py raises KeyError opening a damaged dataset and RuntimeError visiting a group holding one: both had
    been tracebacks instead of saying the file is corrupt."""
    path = tmp_path / "damaged.hdf5"
    with h5py.File(path, "w", libver="latest") as f:
        for key, value in _d4rl_arrays().items():
            f[key] = value
    _with_broken_header(path, name)
    err = _error(capsys, "import", str(path), "--format", "d4rl")
    assert "damaged.hdf5: not a readable HDF5 file (truncated or corrupt: " in err and "bad object header" in err


@pytest.mark.parametrize("how, says", [
    ("external link", "'infos' is an external link to '/' in {secret}, another file, which robolearn does not "
                      "follow; copy what it points to into the file itself"),
    ("soft link", "'elsewhere' is an external link to '/' in secret.hdf5, another file"),
    ("virtual dataset", "'infos/data' is a virtual dataset of 'data' in another file, {secret}, which robolearn "
                        "does not read; store its data in the file itself"),
    ("external storage", "'infos/data' is stored in other files ({secret}), which robolearn does not read"),
], ids=["external", "soft", "virtual", "raw"])
def test_a_file_that_reads_other_files_is_refused_naming_the_link_and_its_target(tmp_path, root, capsys, link_out,
                                                                                 how, says):
    """An import had followed external links (and soft links through them) and read virtual and externally
    stored datasets: a downloaded file could read a file of this machine's into its dataset's infos."""
    path = tmp_path / "linked.hdf5"
    with h5py.File(path, "w") as f:
        for key, value in _d4rl_arrays().items():
            if not key.startswith("infos/"):
                f[key] = value
        secret = link_out(f, how)
    err = _error(capsys, "import", str(path), "--format", "d4rl", "--name", "linked")
    assert err.startswith(f"error: {path}: {says.format(secret=secret)}")
    assert not root.exists() or not any(root.iterdir())


def test_rows_never_written_and_sizes_beyond_memory_are_one_line_errors(tmp_path, root, capsys, monkeypatch):
    """A dataset whose writer stopped before writing all its rows reads as zeros where they are missing: it had
    imported as data; a size the file claims but never wrote (10^11 rows) had been numpy's MemoryError."""
    arrays = _d4rl_arrays()
    path = tmp_path / "stopped.hdf5"
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            if key == "observations":  # its first 4 of 10 rows written, then the writer stopped
                f.create_dataset(key, shape=value.shape, dtype=value.dtype, chunks=(2, value.shape[1]))
                f[key][:4] = value[:4]
            else:
                f[key] = value
    err = _error(capsys, "import", str(path), "--format", "d4rl")
    assert err.endswith("stopped.hdf5: 'observations' (10, 11) has rows that were never written (its writer stopped "
                        "before writing them, or the file claims more rows than it holds); write the file again")

    path = tmp_path / "claims.hdf5"
    rows = 10**11
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f.create_dataset(key, shape=(rows, *value.shape[1:]), dtype=value.dtype, chunks=True)
    assert "claims.hdf5: 'observations' (100000000000, 11) has rows that were never written" in \
        _error(capsys, "import", str(path), "--format", "d4rl")

    def no_memory(self, key):
        raise MemoryError
    monkeypatch.setattr(h5py.Dataset, "__getitem__", no_memory)  # a file as large as it says, beyond this machine
    err = _error(capsys, "import", str(_write(tmp_path / "large.hdf5", **arrays)), "--format", "d4rl")
    assert "large.hdf5: 'observations' (10, 11) takes 0.0 GiB, more than this machine's memory holds" in err


def test_flags_and_rewards_written_only_where_nonzero_import(tmp_path):
    """A writer may create the columns and set only their nonzero rows (the episode ends, a sparse reward), HDF5
    reading the rest as the zeros they are: such a file is whole, not one whose writer stopped."""
    arrays = _d4rl_arrays(rows=4000)
    arrays["rewards"] = np.zeros(4000, np.float32)
    arrays["rewards"][[3, 2500]] = 1.0
    path = tmp_path / "sparse.hdf5"
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            if key in ("terminals", "timeouts", "rewards"):  # chunked: the untouched chunks are never allocated
                f.create_dataset(key, shape=value.shape, dtype=value.dtype, chunks=(500,))
                f[key][np.flatnonzero(value)] = value[np.flatnonzero(value)]
            else:
                f[key] = value
    episodes, _ = read_d4rl(path)
    assert [len(e) for e in episodes] == [4, 4, 3992]
    np.testing.assert_array_equal(np.concatenate([e.rewards for e in episodes]), arrays["rewards"])


def test_float64_files_train_as_float32(tmp_path, root):
    """Many D4RL and Minari MuJoCo files store float64: the training batch is float32 (a float64 batch had failed
    deep inside the first update with 'mat1 and mat2 must have the same dtype'). Imported for a task, they are
    stored as its spaces declare (float64 under float32 spaces, which Minari's readers check data against)."""
    arrays = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in _d4rl_arrays().items()}
    assert main(["dataset", "import", str(_write(tmp_path / "f64.hdf5", **arrays)), "--format", "d4rl",
                 "--task", "hopper"]) == 0
    ds = Dataset.load("f64")
    assert ds.observation_spec["policy"].dtype == ds[0].observations["policy"].dtype == np.float32
    assert ds.action_spec.contains(ds[0].actions[0])
    batch = ds.transitions()
    assert batch["obs"]["policy"].dtype == batch["action"].dtype == batch["reward"].dtype == torch.float32
    np.testing.assert_allclose(batch["action"].numpy(), arrays["actions"], rtol=1e-6)


def test_actions_outside_the_tasks_bounds_are_pointed_out(tmp_path, root, capsys):
    arrays = _d4rl_arrays()
    arrays["actions"] = arrays["actions"] * 5  # another scale than hopper's [-1, 1]
    assert main(["dataset", "import", str(_write(tmp_path / "scaled.hdf5", **arrays)), "--format", "d4rl",
                 "--task", "hopper"]) == 0
    assert "of the actions lie outside the task's bounds [-1, 1]" in capsys.readouterr().out
    assert main(["dataset", "import", str(_write(tmp_path / "fine.hdf5", **_d4rl_arrays())), "--format", "d4rl",
                 "--task", "hopper"]) == 0
    assert "warning" not in capsys.readouterr().out


def _with_next(arrays: dict[str, np.ndarray], ends: tuple[int, ...]) -> dict[str, np.ndarray]:
    """``arrays`` with ``next_observations``: the following row's observation, but a final one at ``ends``
    and on the last row (the steps after which the env was reset)."""
    obs = arrays["observations"]
    following = np.concatenate([obs[1:], obs[-1:]]).copy()
    for row in (*ends, len(obs) - 1):
        following[row] = obs[row] + 100  # the state the last action led to, not the reset that followed
    return {**arrays, "next_observations": following}


def test_episodes_end_where_next_observations_are_not_the_following_rows(tmp_path):
    """Without timeouts (old D4RL files) a time-limit end had merged two episodes: the reset observation was
    read as the next observation of the last step, which agents bootstrapped from."""
    arrays = _with_next(_d4rl_arrays(), ends=(3, 7))
    del arrays["timeouts"]
    arrays["observations"][2] = arrays["observations"][1]  # a robot standing still: the same observation, no end
    arrays["next_observations"][1] = arrays["next_observations"][0] = arrays["observations"][1]
    with pytest.warns(UserWarning, match=r"old\.hdf5: 1 episode end\(s\) that terminals \(no timeouts\) do not flag, "
                                         r"read from rows where next_observations is not the next row's observation"):
        episodes, meta = read_d4rl(_write(tmp_path / "old.hdf5", **arrays))
    assert [len(e) for e in episodes] == [4, 4, 2] and "final_observation" not in meta
    assert [(bool(e.terminations[-1]), bool(e.truncations[-1])) for e in episodes] == [(True, False), (False, True), (False, True)]
    assert not any(e.terminations[:-1].any() or e.truncations[:-1].any() for e in episodes)
    for episode, end in zip(episodes, (3, 7, 9)):
        np.testing.assert_array_equal(episode.observations["policy"][-1], arrays["next_observations"][end])
    assert meta["unflagged_resets"] == 1  # row 3 is a terminal

    # next observations stored at another precision are no resets
    arrays["next_observations"] = arrays["next_observations"].astype(np.float64) * (1 + 1e-7)
    with pytest.warns(UserWarning, match="1 episode end"):
        assert [len(e) for e in read_d4rl(_write(tmp_path / "f64.hdf5", **arrays))[0]] == [4, 4, 2]

    # transitions not stored in order (a shuffled buffer): read as episodes, their next observations would be lost
    shuffled = {**arrays, "next_observations": arrays["next_observations"][::-1].copy()}
    with pytest.raises(DatasetError, match=r"shuffled.hdf5: at \d+ of 10 rows next_observations is not the next row's "
                                           r"observation: its transitions are not stored in episode order"):
        read_d4rl(_write(tmp_path / "shuffled.hdf5", **shuffled))


def test_an_unflagged_reset_ends_an_episode_in_a_file_with_timeouts_too(tmp_path):
    arrays = _with_next(_d4rl_arrays(), ends=(3, 5, 7))  # row 5: a reset that neither terminals nor timeouts flag
    with pytest.warns(UserWarning, match=r"flags\.hdf5: 1 episode end\(s\) that terminals and timeouts do not flag.*"
                                         r"first at row 5\), as truncations"):
        episodes, meta = read_d4rl(_write(tmp_path / "flags.hdf5", **arrays))
    assert [len(e) for e in episodes] == [4, 2, 2, 2] and meta["unflagged_resets"] == 1
    assert [(bool(e.terminations[-1]), bool(e.truncations[-1])) for e in episodes] == [
        (True, False), (False, True), (False, True), (False, True)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        episodes, meta = read_d4rl(_write(tmp_path / "flagged.hdf5", **_with_next(_d4rl_arrays(), ends=(3, 7))))
    assert [len(e) for e in episodes] == [4, 4, 2] and "unflagged_resets" not in meta

    arrays = _with_next(_d4rl_arrays(), ends=(3, 7))
    joints = np.arange(20.0).reshape(10, 2)
    following = np.concatenate([joints[1:], joints[-1:] + 1])
    following[1] += 0.5  # only the joint_state group shows this reset
    with pytest.warns(UserWarning, match="first at row 1"):
        episodes, meta = read_d4rl(_write(tmp_path / "groups.hdf5", **arrays, **{
            "observation_groups/joint_state": joints, "next_observation_groups/joint_state": following}))
    assert [len(e) for e in episodes] == [2, 2, 4, 2] and meta["unflagged_resets"] == 1

    near_zero = _with_next(_d4rl_arrays(), ends=(3, 7))  # a reset to all zeros from a state near them is a reset
    near_zero["observations"][:] = 0.0
    near_zero["next_observations"][:] = 0.0
    near_zero["next_observations"][5] = 9e-7
    with pytest.warns(UserWarning, match="first at row 5"):
        assert [len(e) for e in read_d4rl(_write(tmp_path / "zero.hdf5", **near_zero))[0]] == [4, 2, 2, 2]


def test_next_observations_shaped_unlike_the_observations_are_refused(tmp_path):
    arrays = {**_d4rl_arrays(), "next_observations": np.zeros((10, 12), np.float32)}
    with pytest.raises(DatasetError, match=r"next\.hdf5: 'next_observations' has shape \(10, 12\), expected \(10, 11\) "
                       "like 'observations'"):
        read_d4rl(_write(tmp_path / "next.hdf5", **arrays))


def test_a_file_without_timeouts_or_next_observations_says_episodes_end_only_at_terminals(tmp_path):
    arrays = _d4rl_arrays()
    del arrays["timeouts"]
    with pytest.warns(UserWarning, match=r"old\.hdf5: no 'timeouts' or 'next_observations'.* only at terminals.*add"):
        episodes, meta = read_d4rl(_write(tmp_path / "old.hdf5", **arrays))
    assert [len(e) for e in episodes] == [4, 6] and meta["episode_ends"].startswith("terminals only")


def _write_d4rl_metadata(path: Path) -> Path:
    """``path`` with the ``metadata/`` group of D4RL's MuJoCo files: strings, numbers and the policy's weights."""
    with h5py.File(path, "a") as f:
        f["metadata/algorithm"] = b"SAC"
        f["metadata/iteration"] = np.int64(1000000)
        f["metadata/policy/nonlinearity"] = "relu"
        f["metadata/policy/fc0/weight"] = np.zeros((256, 11), np.float32)
        f["metadata/policy/fc0/bias"] = np.zeros(256, np.float32)
        f["stray"] = np.zeros(3)  # anything else a writer left is skipped too
    return path


def test_d4rl_metadata_group_is_kept_as_metadata_not_refused(tmp_path, root):
    """Real D4RL MuJoCo files carry ``metadata/`` (the policy's weights, shaped per layer): they had been
    refused as ``'metadata/algorithm' has shape (), expected 10 rows``."""
    path = _write_d4rl_metadata(_write(tmp_path / "hopper-medium-v2.hdf5", **_d4rl_arrays()))
    episodes, meta = read_d4rl(path)
    assert [len(e) for e in episodes] == [4, 4, 2] and set(episodes[0].infos) == {"qpos", "qvel"}
    assert meta["d4rl_metadata"] == {"algorithm": "SAC", "iteration": 1000000, "policy/nonlinearity": "relu"}
    assert main(["dataset", "import", str(path), "--format", "d4rl", "--task", "hopper"]) == 0
    assert Dataset.load("hopper-medium-v2").info["d4rl_metadata"]["algorithm"] == "SAC"


def test_rewards_terminals_and_timeouts_shaped_n_by_1_are_read_flat(tmp_path, root, capsys):
    """(N, 1) columns had been stored 2-D and broadcast to (B, B) targets in training."""
    arrays = _d4rl_arrays()
    column = {k: arrays[k][:, None] for k in ("rewards", "terminals", "timeouts")}
    episodes, _ = read_d4rl(_write(tmp_path / "column.hdf5", **{**arrays, **column}))
    assert [len(e) for e in episodes] == [4, 4, 2]
    assert all(e.rewards.shape == e.terminations.shape == e.truncations.shape == (len(e),) for e in episodes)
    np.testing.assert_array_equal(np.concatenate([e.rewards for e in episodes]), arrays["rewards"])
    wide = {**arrays, "rewards": np.stack([arrays["rewards"]] * 2, axis=1)}
    err = _error(capsys, "import", str(_write(tmp_path / "wide.hdf5", **wide)), "--format", "d4rl")
    assert "wide.hdf5: 'rewards' has shape (10, 2), expected (10,) or (10, 1)" in err


def test_a_minari_file_is_named_as_one_with_where_to_point_the_datasets_root(tmp_path, root, capsys):
    path = tmp_path / "minari" / "hopper-expert-v0" / "data" / "main_data.hdf5"
    path.parent.mkdir(parents=True)
    with h5py.File(path, "w") as f:
        for i in range(100):
            f[f"episode_{i}/rewards"] = np.zeros(3)
    err = _error(capsys, "import", str(path), "--format", "d4rl")
    assert "main_data.hdf5: a Minari dataset (100 episodes), not a D4RL file" in err
    assert f"ROBOLEARN_DATASETS (or --root) at {tmp_path / 'minari'}" in err and "dataset=hopper-expert-v0" in err
    assert "episode_57" not in err

    arrays = {**_d4rl_arrays(), **{f"extra_{i}": np.zeros(10) for i in range(50)}}
    del arrays["rewards"]
    err = _error(capsys, "import", str(_write(tmp_path / "many.hdf5", **arrays)), "--format", "d4rl")
    assert "many.hdf5: missing key 'rewards'" in err and "and 50 more" in err and len(err) < 400


def test_strings_where_numbers_belong_are_refused_naming_the_key_and_dtype(tmp_path, root, capsys):
    arrays = _d4rl_arrays()
    arrays["rewards"] = np.array([b"1.0"] * 10, dtype="S5")
    err = _error(capsys, "import", str(_write(tmp_path / "text.hdf5", **arrays)), "--format", "d4rl")
    assert "text.hdf5: 'rewards' has dtype |S5, expected numbers" in err
    arrays = _d4rl_arrays()
    arrays["actions"] = np.array(["left"] * 10, dtype=h5py.string_dtype())
    err = _error(capsys, "import", str(_write(tmp_path / "words.hdf5", **arrays)), "--format", "d4rl")
    assert "words.hdf5: 'actions' has dtype |O, expected numbers" in err


def test_infos_only_some_episodes_have_are_said_to_be_left_out_of_an_export(recorded, tmp_path):
    """A merge of our recording (state rows) with an import (none): the D4RL file had silently held no infos."""
    ds = recorded("pendulum", 2, num_envs=1, max_episode_steps=10)
    with_state, without = ds[0], ds[1]
    without.infos = {}
    mixed = Dataset.create("mixed", [with_state, without], ds.observation_spec, ds.action_spec)
    with pytest.warns(UserWarning, match=r"out.hdf5: infos qpos, qvel, state, success left out: 1 of 2 episodes of 'mixed-v0' "
                                         r"have qpos"):
        write_d4rl(mixed, tmp_path / "out.hdf5")


def test_an_export_of_ours_imports_with_its_task_settings(recorded, tmp_path, root, capsys):
    """`import --task` had dropped the task settings the file's own metadata holds (10-step episodes here):
    a run on it then trained and evaluated on the default task without a word."""
    write_d4rl(recorded("pendulum", 2, num_envs=1, max_episode_steps=10), tmp_path / "short.hdf5")
    assert main(["dataset", "import", str(tmp_path / "short.hdf5"), "--format", "d4rl", "--task", "pendulum",
                 "--name", "back"]) == 0
    assert "task:        pendulum as recorded: max_episode_steps=10" in capsys.readouterr().out
    assert Dataset.load("back").info["task_kwargs"] == {"max_episode_steps": 10}


def test_import_from_python_gives_the_dataset_its_task_as_the_cli_does(tmp_path, root):
    """Only the CLI's private function had set the task, its bounds and D4RL's reference scores: a dataset
    made from Python with read_d4rl and Dataset.create had none (unbounded actions, no normalized score)."""
    from robolearn.data import import_dataset

    arrays = _d4rl_arrays()
    arrays["actions"] = arrays["actions"] * 5
    with pytest.warns(UserWarning, match="of the actions lie outside the task's bounds"):
        imported = import_dataset(_write(tmp_path / "hopper-medium-v2.hdf5", **arrays), "d4rl", task="hopper")
    ds = Dataset.load("hopper-medium-v2")
    assert imported.dataset.path == ds.path and ds.task == "hopper" and ds.num_episodes == len(imported.returns)
    assert ds.action_spec.high.tolist() == [1.0, 1.0, 1.0]  # the task's bounds, not the file's infinite ones
    assert (ds.ref_min_score, ds.ref_max_score) == REF_SCORES["hopper"]  # D4RL's hopper references
    with pytest.raises(ValueError, match="format='minari': choose one of d4rl, lerobot, recording"):
        import_dataset(tmp_path / "hopper-medium-v2.hdf5", "minari")


@pytest.mark.parametrize("stored, says", [
    ("[1, 2]", "a JSON list, not an object, left out"),
    ("{not json", "not readable JSON (JSONDecodeError), left out"),
    ('{"task": "pendulum", "task_kwargs": "oops"}', "'task_kwargs' is 'oops', not a mapping of task settings; left out"),
    ('{"ref_min_score": "a", "ref_max_score": 1.0}', "'ref_min_score' is 'a', not a finite number; left out"),
])
def test_embedded_metadata_of_the_wrong_kind_is_warned_and_left_out(recorded, tmp_path, root, stored, says):
    """Our export's own metadata, edited or from elsewhere, had ended the import in a traceback ('list' object has
    no attribute 'get', must be real number) or an error naming neither file nor key."""
    from robolearn.data import import_dataset

    path = write_d4rl(recorded("pendulum", 1, num_envs=1, max_episode_steps=10), tmp_path / "edited.hdf5")
    with h5py.File(path, "a") as f:
        f.attrs["robolearn_metadata"] = stored
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        imported = import_dataset(path, "d4rl", name="edited")
    assert any(f"edited.hdf5: attribute 'robolearn_metadata': {says}" in str(w.message) for w in said), said
    assert imported.dataset.num_steps == 10


def test_an_info_named_next_something_survives_a_d4rl_round_trip(recorded, tmp_path):
    """`infos/next_<name>` is the final row of `infos/<name>`; an info of that name of its own had been dropped
    unread on import."""
    ds = recorded("pendulum", 2, num_envs=1, max_episode_steps=10)
    episodes = list(ds)
    for e in episodes:
        e.infos = {"next_waypoint": np.arange(2 * len(e), dtype=np.float32).reshape(len(e), 2)}
    mine = Dataset.create("waypoints", episodes, ds.observation_spec, ds.action_spec)
    back, _ = read_d4rl(write_d4rl(mine, tmp_path / "waypoints.hdf5"))
    for x, y in zip(episodes, back):
        np.testing.assert_array_equal(x.infos["next_waypoint"], y.infos["next_waypoint"])
    for rows in (1, 0):  # beside an info of the name without the prefix (with or without a final row): refused
        for e in episodes:
            e.infos["waypoint"] = np.zeros((len(e) + rows, 2), np.float32)
        both = Dataset.create(f"both{rows}", episodes, ds.observation_spec, ds.action_spec)
        with pytest.raises(DatasetError, match="infos waypoint and next_waypoint: a D4RL file keeps an info's final "
                                               "rows as infos/next_<name>"):
            write_d4rl(both, tmp_path / "both.hdf5")


def test_an_episode_flagged_ended_before_its_last_step_is_said_to_read_back_split(recorded, tmp_path):
    """Stored as one episode (a LeRobot source's next.done may be), it came back from a D4RL file as two,
    without a word."""
    ds = recorded("pendulum", 1, num_envs=1, max_episode_steps=6)
    episode = ds[0]
    episode.terminations = episode.terminations.copy()
    episode.terminations[2] = True
    early = Dataset.create("ends-early", [episode], ds.observation_spec, ds.action_spec)
    with pytest.warns(UserWarning, match=r"episodes \[0\] of 'ends-early-v0' are flagged ended before their last "
                                         "step .* they read back split there"):
        back, _ = read_d4rl(write_d4rl(early, tmp_path / "early.hdf5"))
    assert [len(e) for e in back] == [3, 3]


def test_a_round_trip_keeps_a_gym_tasks_bounds_and_adds_no_reference_scores(recorded, tmp_path, root):
    """A `gym:` task's action bounds had come back as +-inf (only our own tasks were taken from the file), and a
    recording without reference scores had come back with D4RL's."""
    from robolearn.data import import_dataset

    gym = recorded("gym:Pendulum-v1", 1, num_envs=1, name="gym-pendulum")
    imported = import_dataset(write_d4rl(gym, tmp_path / "gym.hdf5"), "d4rl", name="gym-back")
    assert imported.task_from_file and imported.dataset.action_spec.high.tolist() == [2.0]
    hopper = recorded("hopper", 1, num_envs=1, max_episode_steps=5)
    back = import_dataset(write_d4rl(hopper, tmp_path / "hopper.hdf5"), "d4rl", name="hopper-back").dataset
    assert back.ref_min_score is None and back.ref_max_score is None


def test_flat_actions_of_a_one_dimensional_task_import(tmp_path, root):
    """D4RL files often store a 1-D action as (N,): refused as "rows have shape (), the task's are (1,)"."""
    from robolearn.data import import_dataset

    arrays = _d4rl_arrays(obs=3, act=1)
    arrays["actions"] = arrays["actions"][:, 0]
    ds = import_dataset(_write(tmp_path / "flat.hdf5", **arrays), "d4rl", task="pendulum").dataset
    assert ds[0].actions.shape == (4, 1)


def test_an_import_stopped_by_ctrl_c_says_whether_it_wrote_the_dataset(tmp_path, root, capsys, monkeypatch):
    """A Ctrl+C while the episodes are written leaves nothing and keeps the dataset an --overwrite would replace; one
    after they are written (the action-bounds check) had been said as 'nothing was imported' too."""
    import robolearn.data.importing as importing
    from robolearn.data import DatasetWriter

    first = ["dataset", "import", str(_write(tmp_path / "hopper.hdf5", **_d4rl_arrays())), "--format", "d4rl",
             "--task", "hopper", "--name", "hop"]
    assert main(first) == 0 and Dataset.load("hop").num_steps == 10
    argv = [*first[:2], str(_write(tmp_path / "longer.hdf5", **_d4rl_arrays(rows=20))), *first[3:]]
    add = DatasetWriter.add

    def stopped_at_the_second(writer, episode, where=None):
        if writer.episodes:  # (one written)
            raise KeyboardInterrupt("SIGINT")
        return add(writer, episode, where=where)

    monkeypatch.setattr(DatasetWriter, "add", stopped_at_the_second)
    capsys.readouterr()
    assert main(argv + ["--overwrite"]) == 130
    assert capsys.readouterr().err.strip() == ("interrupted: SIGINT; nothing was imported: a dataset is written whole "
                                               "or not at all; the dataset it would have replaced is kept")
    assert Dataset.load("hop").num_steps == 10  # kept as it was
    monkeypatch.setattr(DatasetWriter, "add", add)

    def stopped_after(*args):
        raise KeyboardInterrupt("SIGINT")

    monkeypatch.setattr(importing, "_warn_out_of_bounds", stopped_after)
    assert main(argv + ["--overwrite"]) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("interrupted: SIGINT; dataset 'hop-v0' was imported whole (") and "nothing" not in err
    assert Dataset.load("hop").num_steps == 20
