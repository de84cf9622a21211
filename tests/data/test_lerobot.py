"""LeRobot v3 import against a small dataset written here in LeRobot's layout with pyarrow."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robolearn.cli import main
from robolearn.data import Dataset, DatasetError
from robolearn.data.episode import Episode
from robolearn.data.lerobot import read_lerobot

FPS = 10
LENGTHS = (5, 3, 4)  # frames per episode; episode 1 ends with next.done


def _frames() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    n = sum(LENGTHS)
    episode = np.repeat(np.arange(len(LENGTHS)), LENGTHS)
    frame = np.concatenate([np.arange(k) for k in LENGTHS])
    done = np.zeros(n, bool)
    done[sum(LENGTHS[:2]) - 1] = True
    return {"observation.state": rng.normal(size=(n, 6)).astype(np.float32),
            "observation.environment_state": rng.normal(size=(n, 2)).astype(np.float32),
            "action": rng.uniform(-1, 1, (n, 6)).astype(np.float32),
            "next.reward": rng.normal(size=n).astype(np.float32), "next.done": done,
            "timestamp": (frame / FPS).astype(np.float32), "frame_index": frame.astype(np.int64),
            "episode_index": episode.astype(np.int64), "index": np.arange(n, dtype=np.int64),
            "task_index": np.zeros(n, np.int64)}


def _table(frames: dict[str, np.ndarray], rows: slice) -> pa.Table:
    columns = {}
    for key, value in frames.items():
        value = value[rows]
        if value.ndim == 2:  # vectors are fixed-size lists, as LeRobot writes them
            columns[key] = pa.FixedSizeListArray.from_arrays(pa.array(value.reshape(-1)), value.shape[1])
        else:
            columns[key] = pa.array(value)
    return pa.table(columns)


def lerobot_source(root: Path, frames: dict[str, np.ndarray] | None = None) -> Path:
    """A LeRobot v3 dataset: meta/info.json, meta/stats.json, meta/tasks.parquet,
    meta/episodes/chunk-000/file-000.parquet and the frames in two data files."""
    frames = frames if frames is not None else _frames()
    features = {key: {"dtype": str(value.dtype), "shape": list(value.shape[1:]) or [1], "names": None}
                for key, value in frames.items()}
    info = {"codebase_version": "v3.0", "robot_type": "so100", "fps": FPS, "total_episodes": len(LENGTHS),
            "total_frames": int(sum(LENGTHS)), "total_tasks": 1, "chunks_size": 1000, "splits": {"train": "0:3"},
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4", "features": features}
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    (root / "data" / "chunk-000").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    stats = {key: {"mean": value.mean(0).tolist(), "std": value.std(0).tolist()}
             for key, value in frames.items() if value.dtype == np.float32}
    (root / "meta" / "stats.json").write_text(json.dumps(stats))
    pq.write_table(pa.table({"task_index": [0], "task": ["pick the cube"]}), root / "meta" / "tasks.parquet")
    pq.write_table(pa.table({"episode_index": list(range(len(LENGTHS))), "length": list(LENGTHS)}),
                   root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    split = LENGTHS[0] + LENGTHS[1]  # files hold whole episodes, several per file
    pq.write_table(_table(frames, slice(0, split)), root / "data" / "chunk-000" / "file-000.parquet")
    pq.write_table(_table(frames, slice(split, None)), root / "data" / "chunk-000" / "file-001.parquet")
    return root


def test_lerobot_import_keeps_every_array_of_the_source(tmp_path, root):
    frames = _frames()
    source = lerobot_source(tmp_path / "so100_pick")
    assert main(["dataset", "import", str(source), "--format", "lerobot"]) == 0
    ds = Dataset.load("so100_pick")
    assert len(ds) == 3 and [len(e) for e in ds] == list(LENGTHS)
    assert ds.info["control_dt"] == pytest.approx(1 / FPS) and ds.info["final_observation"] == "copied"
    episodes = ds.episodes
    for ours, theirs in (("policy", "observation.state"), ("environment_state", "observation.environment_state")):
        np.testing.assert_array_equal(np.concatenate([e.observations[ours][:-1] for e in episodes]), frames[theirs])
        assert episodes[0].observations[ours].dtype == frames[theirs].dtype
    np.testing.assert_array_equal(np.concatenate([e.actions for e in episodes]), frames["action"])
    np.testing.assert_array_equal(np.concatenate([e.rewards for e in episodes]), frames["next.reward"])
    np.testing.assert_array_equal(np.concatenate([e.terminations for e in episodes]), frames["next.done"])
    assert [bool(e.truncations[-1]) for e in episodes] == [True, False, True]  # episode 1 ended by next.done


def test_bad_lerobot_datasets_are_one_line_errors(tmp_path):
    source = lerobot_source(tmp_path / "ds")
    data = source / "data" / "chunk-000" / "file-001.parquet"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(DatasetError, match="file-001.parquet: not a readable parquet file"):
        read_lerobot(source)
    for at in (3, 6):  # a column name in the footer no longer UTF-8: pyarrow's UnicodeDecodeError (reading the
        data = lerobot_source(tmp_path / f"name{at}") / "data" / "chunk-000" / "file-000.parquet"  # file, or its
        damaged = bytearray(data.read_bytes())  # names, by where the byte is) had been a traceback
        damaged[damaged.find(b"environment") + at] = 0xB8
        data.write_bytes(bytes(damaged))
        with pytest.raises(DatasetError, match="file-000.parquet: not a readable parquet file .truncated or corrupt: "
                                               "'utf-8' codec can't decode"):
            read_lerobot(tmp_path / f"name{at}")

    frames = _frames()
    del frames["action"]
    source = lerobot_source(tmp_path / "noaction", frames)
    with pytest.raises(DatasetError, match="info.json: missing feature 'action'"):
        read_lerobot(source)

    source = lerobot_source(tmp_path / "shape")
    info = json.loads((source / "meta" / "info.json").read_text())
    info["features"]["observation.state"]["shape"] = [7]
    (source / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetError, match=r"file-000.parquet: column 'observation.state' rows hold 6 values, info.json says shape \[7\]"):
        read_lerobot(source)

    frames = _frames()
    frames["action"][2, 1] = np.nan
    with pytest.raises(DatasetError, match=r"episode_index 0: 'actions' \(5, 6\) holds NaN or inf \(first at row 2\)"):
        read_lerobot(lerobot_source(tmp_path / "nan", frames))

    with pytest.raises(DatasetError, match="not a LeRobot dataset"):
        read_lerobot(tmp_path)

    v21 = lerobot_source(tmp_path / "v21")  # LeRobot v2.1: one parquet file per episode
    for index, file in enumerate(sorted((v21 / "data" / "chunk-000").iterdir())):
        file.rename(file.with_name(f"episode_{index:06d}.parquet"))
    info = json.loads((v21 / "meta" / "info.json").read_text())
    (v21 / "meta" / "info.json").write_text(json.dumps({**info, "codebase_version": "v2.1"}))
    with pytest.raises(DatasetError, match=r"a LeRobot v2.1 dataset \(one parquet file per episode\); only v3 is "
                                           "read: convert it with lerobot's convert_dataset_v21_to_v30"):
        read_lerobot(v21)


def test_a_missing_or_cut_data_file_is_refused_not_imported_as_fewer_frames(tmp_path):
    """A missing file-001.parquet had imported as episodes 0 and 1 only, a cut one as episode 2 ended early. (One
    missing whole, as meta/episodes tells, is a partial download: imported and said, in the test below.)"""
    source = lerobot_source(tmp_path / "missing")
    (source / "data" / "chunk-000" / "file-001.parquet").unlink()
    (source / "meta" / "episodes" / "chunk-000" / "file-000.parquet").unlink()  # nothing tells whole from cut
    with pytest.raises(DatasetError, match=r"missing: meta/info.json's total_frames is 12, its data files hold 8 "
                                           r"\(data/chunk-000/file-000.parquet\): a data file is missing or cut short"):
        read_lerobot(source)
    frames = _frames()
    source = lerobot_source(tmp_path / "cut", frames)
    pq.write_table(_table(frames, slice(LENGTHS[0] + LENGTHS[1], -2)), source / "data" / "chunk-000" / "file-001.parquet")
    with pytest.raises(DatasetError, match="total_frames is 12, its data files hold 10"):
        read_lerobot(source)


def test_a_partial_download_imports_the_episodes_it_holds_and_says_which_are_left_out(tmp_path):
    """LeRobotDataset(repo, episodes=[...]) downloads only those episodes' data files, beside the whole dataset's
    meta/: its episodes had been refused for info.json's total_frames (the dataset's), though each is whole."""
    source = lerobot_source(tmp_path / "partial")
    (source / "data" / "chunk-000" / "file-001.parquet").unlink()  # episode 2's file, not downloaded
    with pytest.warns(UserWarning, match=r"hold 2 of the 3 episodes meta/episodes lists, 8 of info.json's 12 frames "
                                         r"\(a partial download\?\): episodes 2 are not imported"):
        episodes, meta = read_lerobot(source)
    assert [len(e) for e in episodes] == list(LENGTHS[:2]) and meta["lerobot_episode_index"] == [0, 1]


@pytest.mark.parametrize("column, values, said", [
    ("next.done", np.array(["False"] * sum(LENGTHS)), r"'next.done' holds 'False' at row 0: its flags are 0 or 1"),
    ("next.done", np.where(np.arange(sum(LENGTHS)) == 2, 2.0, 0.0), r"'next.done' holds 2.0 at row 2"),
    ("next.success", np.full(sum(LENGTHS), np.nan), r"'next.success' holds nan at row 0"),
    ("episode_index", np.repeat(np.arange(3), LENGTHS) + 0.5, r"column 'episode_index' holds float64 values, expected "
                                                               r"whole numbers"),
])
def test_lerobot_flags_and_indices_that_are_not_what_they_say_are_refused(tmp_path, column, values, said):
    """'False' strings, 2 and NaN had read as True: every step of an episode terminal, a success count of 2/4."""
    frames = _frames()
    frames[column] = values
    with pytest.raises(DatasetError, match=said):
        read_lerobot(lerobot_source(tmp_path / "ds", frames))


@pytest.mark.parametrize("change, said", [
    ({"fps": 0}, r"info.json: 'fps' is 0; a positive number of frames per second, or null"),
    ({"fps": "abc"}, r"'fps' is 'abc'"),
    ({"features": ["observation.state", "action"]}, r"info.json: 'features' is a list; a mapping of feature names"),
    ({"features": {"observation.state": "float32", "action": {"shape": [6]}}}, r"feature 'observation.state' is "
                                                                                r"'float32'; a mapping with a 'shape'"),
])
def test_lerobot_metadata_that_cannot_be_read_as_said_is_refused(tmp_path, change, said):
    """fps 0 or -10 had become a control period of inf or -0.1 s; a malformed features map, a traceback."""
    source = lerobot_source(tmp_path / "ds")
    info = json.loads((source / "meta" / "info.json").read_text())
    (source / "meta" / "info.json").write_text(json.dumps(info | change))
    with pytest.raises(DatasetError, match=said):
        read_lerobot(source)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the source's stats of no frames)
def test_an_empty_lerobot_dataset_is_said_so(tmp_path):
    frames = {key: value[:0] for key, value in _frames().items()}
    with pytest.raises(DatasetError, match="ds: no frames in "):
        read_lerobot(lerobot_source(tmp_path / "ds", frames))


def test_next_done_on_every_last_frame_is_read_as_said_and_can_be_read_as_a_time_limit(tmp_path, root, capsys):
    """Recorders set next.done where a recording stopped as well as where the task ended: they look alike."""
    frames = _frames()
    ends = np.cumsum(LENGTHS) - 1
    frames["next.done"][:] = False
    frames["next.done"][ends] = True
    source = lerobot_source(tmp_path / "stopped", frames)
    episodes, meta = read_lerobot(source)
    assert all(e.terminations[-1] and not e.truncations.any() for e in episodes)
    assert meta["next_done_on_last_frames_only"] and not read_lerobot(lerobot_source(tmp_path / "mixed"))[1][
        "next_done_on_last_frames_only"]
    assert main(["dataset", "import", str(source), "--format", "lerobot", "--name", "as_terminal"]) == 0
    assert "next.done:   on each episode's last frame, read as the task's end (no bootstrap); --done truncation if " \
           "they are time limits" in capsys.readouterr().out
    assert main(["dataset", "import", str(source), "--format", "lerobot", "--done", "truncation"]) == 0
    episodes = Dataset.load("stopped").episodes
    assert all(e.truncations[-1] and not e.terminations.any() for e in episodes)  # bootstrapped from, as time limits
    assert Dataset.load("stopped").info["next_done_read_as"] == "truncation"
    out = capsys.readouterr().out
    assert "return " in out and "read as a time limit (bootstrapped from); --done terminal if they are the task's end" in out
    assert main(["dataset", "import", str(source), "--format", "d4rl", "--done", "truncation"]) == 2
    assert "--done (done=) is for LeRobot datasets" in capsys.readouterr().err
    for refs, says in ((["--ref-min", "10", "--ref-max", "-5"], r"--ref-max \(-5\) must be above --ref-min \(10\)"),
                       (["--ref-min", "10"], r"--ref-min and --ref-max \(ref_min=, ref_max=\) go together")):
        assert main(["dataset", "import", str(source), "--format", "lerobot", "--done", "truncation", "--name", "refs", *refs]) == 2
        assert re.search(says, capsys.readouterr().err)  # swapped, a random policy would score as an expert


def test_a_recording_at_another_rate_than_the_task_is_said_at_import():
    from robolearn.data.importing import task_specs

    with pytest.warns(UserWarning, match="recorded at a control period of 0.1 s, the env steps 0.02 s"):
        task_specs("pendulum", 1 / FPS)  # LeRobot's fps 10 against the pendulum's 0.02 s steps
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        task_specs("pendulum", 0.02)


# -- export ----------------------------------------------------------------------------------------------------

def _rated(recorded, task: str, episodes: int, name: str | None = None, **settings) -> Dataset:
    """Recorded as ``robolearn dataset record`` records: its control period in the metadata."""
    import sims

    with sims.make_env(task, num_envs=1, **settings) as env:
        control_dt = env.control_dt
    return recorded(task, episodes, name=name, metadata={"control_dt": control_dt}, **settings)


def _exported(dataset: Dataset, out: Path, **kwargs) -> Path:
    from robolearn.data.lerobot import write_lerobot

    return write_lerobot(dataset, out, **kwargs)


@pytest.mark.parametrize("task, settings", [("hopper", {"max_episode_steps": 20}), ("arm_reach", {})])
def test_export_reads_back_with_the_same_arrays_flags_success_and_task(recorded, tmp_path, task, settings):
    """hopper: random episodes that fall (terminated) and that time out; arm_reach: success recorded."""
    source = _rated(recorded, task, 6, **settings)
    out = _exported(source, tmp_path / "out")
    episodes, meta = read_lerobot(out)
    assert len(episodes) == source.num_episodes and meta["task"] == task and meta["control_dt"] == pytest.approx(
        source.info["control_dt"]) and meta["exported_from"] == source.id and meta["task_kwargs"] == settings
    assert meta["state"] == source.info["state"]  # the state rows are there (infos.state): their format too
    ended = {"terminated": 0, "truncated": 0}
    for mine, back in zip(source, episodes):
        np.testing.assert_array_equal(back.actions, mine.actions)
        np.testing.assert_array_equal(back.rewards, mine.rewards)
        np.testing.assert_array_equal(back.observations["policy"][:-1], mine.observations["policy"][:-1])
        np.testing.assert_array_equal(back.terminations, mine.terminations)
        np.testing.assert_array_equal(back.truncations, mine.truncations)
        for name in ("state", "qpos", "qvel"):  # every frame's, exact (float64); no frame after the last action
            np.testing.assert_array_equal(back.infos[name], mine.infos[name][:-1])
        assert back.success == mine.success
        ended["terminated" if mine.terminations[-1] else "truncated"] += 1
    if task == "hopper":
        assert ended["terminated"] and ended["truncated"]  # both kinds of end were written and read back
    else:
        assert all(e.success is not None for e in episodes)


def test_export_has_lerobots_layout(recorded, tmp_path):
    """What lerobot 0.4.0's LeRobotDataset reads (the layout its own writer leaves; loading our export with it
    was checked by hand, as the README says): info's features with the five frame columns, scalars for shape
    [1], tasks indexed by their text (pandas), episodes' row ranges, statistics per feature."""
    source = _rated(recorded, "arm_reach", 3)
    out = _exported(source, tmp_path / "out")
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 50 and info["total_frames"] == source.num_steps
    assert list(info["features"]) == ["observation.state", "action", "next.reward", "next.done", "next.success",
                                      "infos.state", "infos.qpos", "infos.qvel",
                                      "timestamp", "frame_index", "episode_index", "index", "task_index"]
    assert info["features"]["infos.qpos"] == {"dtype": "float64", "shape": [4], "names": None}
    data = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet")
    assert data.column_names == list(info["features"])
    assert pa.types.is_fixed_size_list(data.schema.field("observation.state").type)
    assert data.schema.field("next.reward").type == pa.float32() and data.schema.field("index").type == pa.int64()
    assert np.allclose(data.column("timestamp").to_numpy(), data.column("frame_index").to_numpy() / 50)
    tasks = pq.read_table(out / "meta" / "tasks.parquet")
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["__index_level_0__"]
    assert tasks.column("__index_level_0__").to_pylist() == ["arm_reach"] and tasks.column("task_index").to_pylist() == [0]
    episodes = pq.read_table(out / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pydict()
    lengths = [len(e) for e in source]
    assert episodes["length"] == lengths and episodes["dataset_from_index"] == [0, lengths[0], sum(lengths[:2])]
    assert episodes["dataset_to_index"] == list(np.cumsum(lengths)) and episodes["tasks"] == [["arm_reach"]] * 3
    assert episodes["stats/action/count"] == [[n] for n in lengths]
    stats = json.loads((out / "meta" / "stats.json").read_text())
    actions = np.concatenate([e.actions for e in source])
    assert set(stats) == set(info["features"]) and stats["action"]["count"] == [len(actions)]
    np.testing.assert_allclose(stats["action"]["mean"], actions.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats["action"]["q50"], np.median(actions, 0), rtol=1e-5)


def test_export_replaces_only_a_lerobot_dataset_and_an_interrupted_one_leaves_nothing(recorded, tmp_path, monkeypatch):
    source = _rated(recorded, "pendulum", 2)
    mine = tmp_path / "my_folder"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    for overwrite in (False, True):  # not offered --overwrite: it would not replace this either
        with pytest.raises(DatasetError, match="a folder that is not a LeRobot dataset .* not replaced"):
            _exported(source, mine, overwrite=overwrite)
    with pytest.raises(DatasetError, match="notes.txt is a file, not a folder"):
        _exported(source, mine / "notes.txt" / "out")
    assert (mine / "notes.txt").read_text() == "keep"

    out = _exported(source, tmp_path / "out")
    before = (out / "meta" / "info.json").read_text()
    calls = {"n": 0}
    write_table = pq.write_table

    def failing(*args, **kwargs):  # the disk fills while the second file is written
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        return write_table(*args, **kwargs)

    monkeypatch.setattr(pq, "write_table", failing)
    with pytest.raises(OSError):
        _exported(source, out, overwrite=True)
    assert (out / "meta" / "info.json").read_text() == before  # the old export stays, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["datasets", "my_folder", "out"])  # no temp left
    monkeypatch.setattr(pq, "write_table", write_table)
    with pytest.warns(UserWarning, match="recorded at 50 frames per second"):
        assert _exported(source, out, fps=25, overwrite=True) == out
    assert json.loads((out / "meta" / "info.json").read_text())["fps"] == 25


def test_an_overwrite_killed_between_its_renames_is_put_back_by_the_next_export(recorded, tmp_path):
    """kill -9 between the swap's two renames had left no export at ``out``, the old one in a hidden folder
    nothing named, and the new one's temp folder beside it for good."""
    import subprocess

    from robolearn.data.minari_store import _HOST, WRITING

    source = _rated(recorded, "pendulum", 2)
    out = _exported(source, tmp_path / "out")
    before = (out / "meta" / "info.json").read_text()
    dead = subprocess.Popen(["true"])
    dead.wait()
    set_aside = out.with_name(f".out.old-{dead.pid}@{_HOST}")
    out.rename(set_aside)  # the kill came here: the new export's folder not yet renamed into place
    built = out.with_name(f".out.tmp-{dead.pid}@{_HOST}-k1ll3d")
    built.mkdir()
    (built / WRITING).touch()
    with pytest.warns(UserWarning, match="out is back in place"), pytest.raises(FileExistsError, match="--overwrite"):
        _exported(source, out)  # the old one is back: not replaced without --overwrite
    assert (out / "meta" / "info.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["datasets", "out"]
    assert _exported(source, out, overwrite=True) == out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["datasets", "out"]
    assert sorted(p.name for p in out.iterdir()) == ["data", "meta"]  # (the lock does not stay in it)


def test_an_export_through_a_symlink_replaces_what_it_points_to_and_keeps_the_link(recorded, tmp_path):
    """--overwrite had replaced the link with a folder, leaving the old export where it pointed (a big disk's)."""
    source = _rated(recorded, "pendulum", 2)
    disk = tmp_path / "disk"
    disk.mkdir()
    link = tmp_path / "lerobot"
    link.symlink_to(disk / "pendulum")
    _exported(source, link)
    with pytest.warns(UserWarning, match="recorded at 50 frames per second"):
        _exported(source, link, fps=25, overwrite=True)
    assert link.is_symlink() and json.loads((disk / "pendulum" / "meta" / "info.json").read_text())["fps"] == 25
    assert [p.name for p in disk.iterdir()] == ["pendulum"]  # the replaced export and the temp folder are gone


def test_export_from_the_command_line_and_its_refusals(recorded, root, tmp_path, capsys):
    _rated(recorded, "pendulum", 2, name="pend")
    out = tmp_path / "pend_lerobot"
    assert main(["dataset", "export", "pend", "--format", "lerobot", "--out", str(out)]) == 0
    assert f"2 episodes, 1000 frames -> {out}" in capsys.readouterr().out
    assert main(["dataset", "import", str(out), "--format", "lerobot", "--name", "back"]) == 0
    assert "task:        pendulum (the file's own metadata" in capsys.readouterr().out
    back = Dataset.load("back")  # the task from meta/robolearn.json, with its bounds as --task gives them
    assert back.task == "pendulum" and back.action_spec.high.tolist() == [2.0]  # not [inf]: the task's
    assert main(["dataset", "export", "pend", "--out", str(tmp_path / "p.hdf5"), "--fps", "10"]) == 2
    assert "--fps is for LeRobot datasets" in capsys.readouterr().err
    assert main(["dataset", "export", "pend", "--format", "lerobot", "--out", str(out)]) == 2
    assert "a LeRobot dataset exists there; pass --overwrite" in capsys.readouterr().err


def test_export_without_a_control_period_asks_for_fps_and_an_fps_other_than_the_datas_is_said(recorded, tmp_path):
    from types import SimpleNamespace

    from robolearn.data.lerobot import _frames_per_second

    bare = SimpleNamespace(info={}, id="bare-v0", task=None)
    with pytest.raises(DatasetError, match="no control_dt.*pass --fps"):
        _exported(bare, tmp_path / "out")
    assert _frames_per_second(bare, 50.0) == 50 and isinstance(_frames_per_second(bare, 50.0), int)
    with pytest.warns(UserWarning, match="not a whole number"):
        assert _frames_per_second(bare, 1e-9) == 1e-9  # not rounded to 0 frames per second
    rated = SimpleNamespace(info={"control_dt": 0.02}, id="pend-v0", task="pendulum")
    with pytest.warns(UserWarning, match="recorded at 50 frames per second .* its timestamps will say 25"):
        assert _frames_per_second(rated, 25.0) == 25
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused before warning about what it would have written
        for wrong in 0.0, -10.0, float("nan"):
            with pytest.raises(ValueError, match="--fps must be a positive number"):
                _frames_per_second(rated, wrong)


def test_nulls_in_a_column_are_said_as_nulls():
    """A null episode_index or state row had been refused as a frame or width mismatch (the reason indirect)."""
    from robolearn.data.lerobot import _column

    for column, shape, where in [(pa.array([0, None, 1]), (), "rows [1]"),
                                 (pa.array([[1.0, 2.0], None], pa.list_(pa.float32())), (2,), "rows [1]"),
                                 (pa.array([[1.0, None]], pa.list_(pa.float32())), (2,), "inside its rows' lists")]:
        with pytest.raises(DatasetError, match=re.escape(f"f.parquet: column 'k' has 1 null value(s) ({where}); every "
                                                         "frame needs one")):
            _column(column, shape, Path("f.parquet"), "k")
    assert _column(pa.array([[1.0, 2.0]], pa.list_(pa.float32())), (2,), Path("f.parquet"), "k").shape == (1, 2)


def test_a_d4rl_file_imported_with_its_task_exports_at_the_tasks_rate(tmp_path, root, capsys):
    """A D4RL file says no control period; imported with --task it had recorded none either, so its LeRobot
    export asked for --fps though the task says it (the pendulum's 0.02 s: 50 frames per second)."""
    import h5py

    timeouts = np.zeros(20, bool)
    timeouts[9::10] = True
    with h5py.File(tmp_path / "pend.hdf5", "w") as f:
        f["observations"] = np.zeros((20, 3), np.float32)
        f["actions"] = np.zeros((20, 1), np.float32)
        f["rewards"] = np.ones(20, np.float32)
        f["terminals"], f["timeouts"] = np.zeros(20, bool), timeouts
    assert main(["dataset", "import", str(tmp_path / "pend.hdf5"), "--format", "d4rl", "--task", "pendulum"]) == 0
    assert Dataset.load("pend").info["control_dt"] == pytest.approx(0.02)
    assert main(["dataset", "export", "pend", "--format", "lerobot", "--out", str(tmp_path / "lr")]) == 0
    assert json.loads((tmp_path / "lr" / "meta" / "info.json").read_text())["fps"] == 50


def test_one_wide_actions_are_scalar_columns_as_lerobot_reads_shape_1(recorded, tmp_path):
    """lerobot 0.4.0 casts a shape-[1] feature to a plain number: a list of one failed to load (pendulum)."""
    source = _rated(recorded, "pendulum", 2)
    out = _exported(source, tmp_path / "out")
    info = json.loads((out / "meta" / "info.json").read_text())
    data = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet")
    assert info["features"]["action"]["shape"] == [1] and data.schema.field("action").type == pa.float32()
    episodes, _ = read_lerobot(out)
    np.testing.assert_array_equal(episodes[0].actions, source[0].actions)  # (T, 1) again


def test_a_folder_that_appears_while_the_export_is_written_is_not_replaced(recorded, tmp_path, monkeypatch):
    import robolearn.data.lerobot as lerobot

    source = _rated(recorded, "pendulum", 2)
    out = tmp_path / "out"
    frames = lerobot._frames

    def someone_writes_there(*args):  # another program fills the folder while the export is built
        out.mkdir()
        (out / "precious.txt").write_text("keep")
        return frames(*args)

    monkeypatch.setattr(lerobot, "_frames", someone_writes_there)
    with pytest.raises(FileExistsError, match="appeared while the export was written"):
        _exported(source, out, overwrite=True)  # --overwrite replaces a LeRobot dataset only
    assert (out / "precious.txt").read_text() == "keep" and sorted(p.name for p in out.iterdir()) == ["precious.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["datasets", "out"]  # no temp left


def test_an_episode_without_an_outcome_keeps_the_others_success(recorded, tmp_path):
    """A recording cut short has an episode with no outcome: the export had dropped next.success for every
    episode, the judged ones' outcomes lost. It is written for all (False for the unjudged one, which
    meta/robolearn.json lists and a warning names) and read back as it was: the others' outcomes, that one's none."""
    from robolearn.data import Dataset, DatasetWriter

    source = _rated(recorded, "arm_reach", 3)
    episodes = list(source.episodes)
    cut = episodes[1]
    cut.infos.pop("success")
    writer = DatasetWriter("cut", source.observation_spec, source.action_spec, metadata=dict(source.info))
    with writer:
        for episode in episodes:
            writer.add(episode)
    mixed = Dataset.load("cut")
    assert [e.success is None for e in mixed.episodes] == [False, True, False]
    with pytest.warns(UserWarning, match=r"episode\(s\) 1 of cut-v0 have no outcome"):
        out = _exported(mixed, tmp_path / "out")
    data = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet")
    assert "next.success" in data.column_names
    assert json.loads((out / "meta" / "robolearn.json").read_text())["unjudged_episodes"] == [1]
    back, meta = read_lerobot(out)
    assert [e.success for e in back] == [e.success for e in mixed.episodes] and "unjudged_episodes" not in meta


def test_a_lerobot_export_keeps_the_simulator_state_so_its_episodes_replay_from_it(recorded, tmp_path, root,
                                                                                   monkeypatch, capsys):
    """LeRobot's format had lost the state rows and qpos/qvel (a replay of the read-back dataset started from a
    reset, not the recorded state); they go to infos.state, infos.qpos, infos.qvel, float64 columns lerobot
    loads as any other, and come back as infos: the replay restores the recorded state and reproduces the
    recorded return and every joint position. A dataset without state rows says none."""
    import sims
    from robolearn.data.replay import replay

    source = _rated(recorded, "hopper", 2, max_episode_steps=20)
    assert main(["dataset", "export", source.id, "--format", "lerobot", "--out", str(tmp_path / "out")]) == 0
    assert main(["dataset", "import", str(tmp_path / "out"), "--format", "lerobot", "--name", "back"]) == 0
    back = Dataset.load("back")
    assert back.info["state"] == source.info["state"]
    for mine, theirs in zip(source, back):
        with sims.make_env("hopper", num_envs=1, max_episode_steps=20) as env:
            result = replay(theirs, env)
        assert result.start == "state" and result.restored
        assert result.return_diff == 0.0 and not result.qpos_divergence.any()
        np.testing.assert_array_equal(theirs.infos["qpos"], mine.infos["qpos"][:-1])
        # the last observation is LeRobot's copy of the one before: compared, it read as a divergence
        assert back.info["final_observation"] == "copied" and result.obs_divergence[-1] > 0 and not result.exact
        with sims.make_env("hopper", num_envs=1, max_episode_steps=20) as env:
            assert replay(theirs, env, final_copied=True).exact
    capsys.readouterr()
    assert main(["dataset", "replay", "back", "--episode", "0"]) == 0
    said = capsys.readouterr().out
    assert "restored from the recorded state" in said and "exact replay" in said
    assert "the last observation not compared (the source has none: it is a copy of the one before)" in said
    stateless = [Episode(e.observations, e.actions, e.rewards, e.terminations, e.truncations) for e in source]
    monkeypatch.setattr(Dataset, "episodes", property(lambda self: stateless))
    plain = _exported(source, tmp_path / "plain")
    episodes, meta = read_lerobot(plain)
    assert "state" not in meta and not episodes[0].infos  # no rows: no format promised
    own = plain / "meta" / "robolearn.json"
    assert "state" not in json.loads(own.read_text())
    own.write_text(json.dumps({**json.loads(own.read_text()), "state": source.info["state"]}))  # an older export's
    assert "state" not in read_lerobot(plain)[1]


def test_an_export_says_which_infos_a_lerobot_dataset_has_no_place_for(recorded, tmp_path):
    """A robot's recording keeps commanded actions, goals, metrics and safety flags as infos: the LeRobot export
    dropped them without a word (a D4RL export keeps them)."""
    from robolearn.data import Dataset, DatasetWriter

    source = _rated(recorded, "arm_reach", 2)
    episodes = list(source.episodes)
    for episode in episodes:
        episode.infos["safety/max_step"] = np.zeros(len(episode), bool)
    with DatasetWriter("robot", source.observation_spec, source.action_spec, metadata=dict(source.info)) as writer:
        for episode in episodes:
            writer.add(episode)
    with pytest.warns(UserWarning, match=r"infos safety/max_step of 'robot-v0' left out: a LeRobot dataset has no "
                                         r"place for them"):
        _exported(Dataset.load("robot"), tmp_path / "out")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the simulator's state and success are written: nothing to say
        _exported(source, tmp_path / "plain")
