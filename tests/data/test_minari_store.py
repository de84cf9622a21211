"""The dataset store: a kill stops a write as Ctrl+C does, leftovers of dead writers go, Minari's namespaced
ids work, and a path given where a dataset name is expected says how to import it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import warnings
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from gymnasium import spaces

from robolearn.runtime import stops_as_ctrl_c
from robolearn.cli import main as cli
from robolearn.data import Dataset, DatasetError, DatasetWriter, Episode, dataset_id, list_datasets
from robolearn.data.minari_store import _HOST, KEEPS_PARTIAL, WRITING, hold_lock, interrupts_deferred

REPO = Path(__file__).resolve().parents[2]

# Runs `robolearn ARGS...`, pausing in the writer after its first episode (FLAG then exists), so a signal
# is sent while a dataset is half written.
DRIVER = """
import sys, time
from pathlib import Path
import robolearn.data.minari_store as store
from robolearn.cli import main

flag, add = Path(sys.argv[1]), store.DatasetWriter.add

def add_then_wait(self, *args, **kwargs):
    add(self, *args, **kwargs)
    flag.touch()
    time.sleep(60)

store.DatasetWriter.add = add_then_wait
sys.exit(main(sys.argv[2:]))
"""


def _killed_mid_write(tmp_path: Path, root: Path, argv: list[str], signum: int) -> tuple[int, str, list[str]]:
    """Run the CLI with ``argv`` in a subprocess, send it ``signum`` once its first episode is written;
    its exit status, stderr, and what its temp directory was called."""
    flag = tmp_path / "first-episode"
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": str(REPO), "ROBOLEARN_DATASETS": str(root), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), str(flag), *argv], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # guards against a hung child, not bounds on its speed: beside other runs on 2 cores its first episode
        # took 29 s (imports, then 500 steps) and its end after the signal 9 s, of the 60 s and 30 s allowed before
        deadline = time.monotonic() + 300
        while not flag.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no episode written in 300 s"
            time.sleep(0.05)
        temps = [p.name for p in root.rglob(".*.tmp-*")]
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err, temps


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


def test_two_writers_of_one_name_keep_both_datasets(root):
    """Both pass the name check when they start; the one that finished second had replaced the first's."""
    first = DatasetWriter("same", *SPECS, root=root)
    second = DatasetWriter("same", *SPECS, root=root)
    first.add(_episode(3))
    second.add(_episode(7))
    first.commit()
    with pytest.warns(UserWarning, match="dataset 'same-v0' is kept: it was written by another process while this "
                                         "one was; this one is saved as 'same-v1'"):
        second.commit()
    assert (Dataset.load("same", root).num_steps, Dataset.load("same-v1", root).num_steps) == (3, 7)


def test_a_pathlib_path_to_a_dataset_folder_is_told_what_to_give_as_its_str_is(root):
    """Dataset.load(Path(folder)) had raised re's "expected string or bytes-like object, got 'PosixPath'"."""
    folder = _write("mine", root)
    for given in (folder, str(folder)):
        with pytest.raises(DatasetError, match=f"is a dataset folder, not a dataset name: set ROBOLEARN_DATASETS={root} "
                                               ".* use the name 'mine-v0'"):
            Dataset.load(given)
    assert dataset_id(Path("mine")) == "mine-v0"


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("observations", [np.arange(60, dtype=np.uint8).reshape(20, 3) % 7,
                                          np.arange(60).reshape(20, 3) % 3 == 0], ids=["uint8", "bool"])
def test_integer_and_bool_observations_import_and_train_as_floats(tmp_path, root, observations):
    """gymnasium's Box had refused their unbounded spec ("unsigned int dtype don't support -np.inf"), not in our
    words; bool observations, once stored, reached the networks as bools."""
    path = _d4rl_file(tmp_path / "ints.hdf5")
    with h5py.File(path, "a") as f:
        del f["observations"]
        f["observations"] = observations
    assert cli(["dataset", "import", str(path), "--format", "d4rl", "--name", "ints"]) == 0
    dataset = Dataset.load("ints")
    assert dataset.observation_spec["policy"].dtype == observations.dtype  # the file's own, in the spec
    data = dataset.transitions("cpu")
    assert data["obs"]["policy"].dtype == torch.float32 and data["terminated"].dtype == torch.bool
    np.testing.assert_array_equal(data["obs"]["policy"].numpy(), observations.astype(np.float32))


def test_integer_actions_are_refused_as_discrete(tmp_path, root, capsys):
    """They had imported with the int64 range as bounds (a scale of 9.2e18 in training)."""
    path = _d4rl_file(tmp_path / "discrete.hdf5")
    with h5py.File(path, "a") as f:
        del f["actions"]
        f["actions"] = np.arange(20).reshape(20, 1) % 3
    assert cli(["dataset", "import", str(path), "--format", "d4rl"]) == 2
    assert "actions of dtype int64: robolearn's agents act in continuous" in capsys.readouterr().err
    assert not root.exists() or list(root.iterdir()) == []


# ---- SIGTERM and SIGHUP stop a write as Ctrl+C does --------------------------------------------


def test_sigterm_during_an_import_exits_130_and_leaves_nothing(tmp_path, root):
    """It had killed the import outright, leaving its hidden temp directory for ever."""
    argv = ["dataset", "import", str(_d4rl_file(tmp_path / "hop.hdf5")), "--format", "d4rl", "--name", "hop"]
    status, err, temps = _killed_mid_write(tmp_path, root, argv, signal.SIGTERM)
    assert status == 130 and "interrupted" in err
    assert len(temps) == 1 and temps[0].startswith(".hop-v0.tmp-") and f"@{_HOST}-" in temps[0]  # pid and host named
    assert list(root.iterdir()) == []


def test_sighup_during_a_record_keeps_the_complete_episodes(tmp_path, root):
    """A closed ssh session had lost every episode recorded; Ctrl+C keeps them, and so does SIGHUP now."""
    argv = ["dataset", "record", "--controller", "random", "--task", "pendulum", "--episodes", "5", "--name", "rec",
            "--no-progress"]
    status, err, _ = _killed_mid_write(tmp_path, root, argv, signal.SIGHUP)
    assert status == 130, err
    assert [p.name for p in root.iterdir()] == ["rec-v0"]
    assert len(Dataset.load("rec", root)) == 1


def test_a_record_killed_outright_is_recovered_with_its_task(tmp_path, root, capsys):
    """kill -9 (an out-of-memory kill, a power cut) had left the episodes without what they were recorded on, and
    no command made a dataset of them."""
    argv = ["dataset", "record", "--controller", "random", "--task", "pendulum", "--episodes", "5", "--name", "rec",
            "--no-progress"]
    status, _, temps = _killed_mid_write(tmp_path, root, argv, signal.SIGKILL)
    assert status == -signal.SIGKILL and [p.name for p in root.iterdir()] == temps
    assert cli(["dataset", "list"]) == 0
    assert "1 complete episode\n" in capsys.readouterr().out
    assert cli(["dataset", "recover"]) == 0
    assert "recovered:   1 episode, 500 steps" in capsys.readouterr().out
    assert [p.name for p in root.iterdir()] == ["rec-v0"]  # the temp folder went once the dataset was in place
    dataset = Dataset.load("rec", root)
    assert dataset.task == "pendulum" and dataset.info["controller"] == "random" and dataset.info["control_dt"] == 0.02
    assert dataset.info["recovered"]["episodes"] == 1 and dataset.transitions()["action"].shape == (500, 1)
    assert cli(["dataset", "recover"]) == 0 and "nothing to recover" in capsys.readouterr().out


def _dead_recording(name: str, root: Path, episodes: int) -> Path:
    """The temp folder a recording of ``episodes`` episodes leaves when killed: its writer gone, nothing committed."""
    writer = DatasetWriter(name, *SPECS, root=root, keep_partial=True, metadata={"task": "pendulum", "noise": 0.1})
    for _ in range(episodes):
        writer.add(_episode())
    writer._release()  # (its lock, as the kernel drops a killed process's)
    return writer._tmp.rename(writer._tmp.with_name(f".{writer.target.name}.tmp-{_dead_pid()}@{_HOST}-k1ll3d"))


def test_an_episode_being_written_is_left_out_and_a_name_taken_since_gets_the_next_version(root):
    folder = _dead_recording("ns/rec", root, episodes=2)
    with h5py.File(folder / "data" / "main_data.hdf5", "a") as file:  # killed inside the third episode's write
        file.create_group("episode_2")["actions"] = np.zeros((2, 1), np.float32)
    with pytest.warns(UserWarning, match=r"2 recorded episode\(s\) .* `robolearn dataset recover .*k1ll3d` makes"):
        _write("ns/rec", root)  # another recording took the name meanwhile (and its writer said what to recover)
    from robolearn.data.recover import recover

    done = recover(folder)
    assert done.dataset.id == "ns/rec-v1" and len(done.dataset) == 2 and done.left_out == 1
    assert done.dataset.info["noise"] == 0.1 and not folder.exists()
    assert sorted(list_datasets(root)) == ["ns/rec-v0", "ns/rec-v1"]


def test_a_kill_inside_minaris_metadata_rewrite_loses_no_episode(root):
    """Minari rewrites metadata.json in place at each episode: a kill there had left it empty, and the next write to
    the root deleted the folder with every episode it held, without a word."""
    folder = _dead_recording("rec", root, episodes=3)
    (folder / "data" / "metadata.json").write_text("")  # killed while the third episode's count was written
    with pytest.warns(UserWarning, match=r"2 recorded episode\(s\) of dataset 'rec-v0'"):
        _write("other", root)
    from robolearn.data.recover import recover

    done = recover(folder)
    assert len(done.dataset) == 2 and done.left_out == 1
    assert not (done.dataset.path / "data" / "metadata.json.whole").exists()


def test_a_recover_killed_while_removing_its_folder_does_not_offer_it_again(root, monkeypatch):
    """The folder's removal after the dataset is made: a kill -9 inside it (here: the HDF5 file gone, its metadata
    left) had left a folder still named a recording's uncommitted episodes, which a second recover made into a
    duplicate dataset or called damaged."""
    import importlib
    import types

    recovering = importlib.import_module("robolearn.data.recover")  # (the package's `recover` is the function)
    folder = _dead_recording("rec", root, episodes=2)
    cut_short = types.SimpleNamespace(rmtree=lambda path, **_: (Path(path) / "data" / "main_data.hdf5").unlink())
    monkeypatch.setattr(recovering, "shutil", cut_short)
    assert len(recovering.recover(folder).dataset) == 2
    monkeypatch.undo()
    assert recovering.uncommitted_recordings(root) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "recorded episode(s) ... left uncommitted"
        _write("other", root)
    assert not folder.exists() and sorted(list_datasets(root)) == ["other-v0", "rec-v0"]


def test_recovering_several_recordings_warns_about_none_of_them(root, capsys):
    """Each recovered folder's write had warned again that the folders still to come were left uncommitted."""
    for name in ("a", "b", "c"):
        _dead_recording(name, root, episodes=1)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert cli(["dataset", "recover", "--root", str(root)]) == 0
    assert not [w for w in said if "left uncommitted" in str(w.message)], [str(w.message) for w in said]
    assert capsys.readouterr().out.count("recovered:") == 3


def test_recover_refuses_a_running_recording_and_an_imports_folder(root):
    from robolearn.data.recover import recover

    running = DatasetWriter("live", *SPECS, root=root, keep_partial=True)
    running.add(_episode())
    with pytest.raises(DatasetError, match="still writing it"):
        recover(running._tmp)
    running.commit()
    importing = DatasetWriter("imp", *SPECS, root=root)
    with pytest.raises(DatasetError, match="not a recording's temp folder"):
        recover(importing._tmp)
    importing.discard()
    with pytest.raises(DatasetError, match="no complete episode"):
        recover(_dead_recording("empty", root, episodes=0))


def test_a_sigterm_during_an_episode_write_waits_for_it():
    finished = False
    with stops_as_ctrl_c():
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"), interrupts_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)
            finished = True
    assert finished and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_deferred_sigterm_nothing_handles_still_ends_the_process():
    """Outside the CLI (a script writing datasets) SIGTERM is not swallowed: it ends the process after the write."""
    code = ("import os, signal\nfrom robolearn.data.minari_store import interrupts_deferred\n"
            "with interrupts_deferred():\n    os.kill(os.getpid(), signal.SIGTERM)\n    print('written', flush=True)\n"
            "print('after')\n")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == -signal.SIGTERM and out.stdout == "written\n"


def test_nohup_keeps_sighup_ignored():
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with stops_as_ctrl_c(), interrupts_deferred():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, previous)


# ---- leftovers of writers that died ---------------------------------------------------------


def test_a_writer_removes_the_temp_directories_of_dead_writers_only(root):
    root.mkdir()
    dead, live = _dead_pid(), os.getppid()
    stale = root / f".big-v0.tmp-{dead}@{_HOST}-abc_12"
    running = root / f".other-v0.tmp-{live}@{_HOST}-xyz"
    elsewhere = root / f".far-v0.tmp-{dead}@another-host.example-q1"  # on a shared root: not ours to judge
    legacy = root / ".old-format-v0.tmp-k3j4h5g6"  # no pid: whose it is cannot be told
    for folder in (stale, running, elsewhere, legacy):
        (folder / "data").mkdir(parents=True)
    _write("new", root)
    assert sorted(p.name for p in root.iterdir()) == sorted([running.name, elsewhere.name, legacy.name, "new-v0"])


def test_episodes_a_dead_writer_left_uncommitted_are_kept_and_said(root):
    """A recording killed mid-write (or crashed by a full disk) holds complete episodes in its temp folder; the
    next writer in that root had deleted them without a word."""
    root.mkdir()
    stopped = root / f".rec-v0.tmp-{_dead_pid()}@{_HOST}-abc_12"
    imported = root / f".imp-v0.tmp-{_dead_pid()}@{_HOST}-def_34"  # an import's: done again, not kept
    for folder in (stopped, imported):
        (folder / "data").mkdir(parents=True)
        (folder / "data" / "metadata.json").write_text('{"total_episodes": 8}')
    (stopped / KEEPS_PARTIAL).touch()
    with pytest.warns(UserWarning, match=r"8 recorded episode\(s\) of dataset 'rec-v0' that a recording left "
                                         r"uncommitted when it was killed or crashed: kept"):
        _write("new", root)
    assert stopped.is_dir() and not imported.exists()
    (stopped / KEEPS_PARTIAL).unlink()  # (as if removed by hand: said no more)
    assert not (_write("recorded", root, keep_partial=True) / KEEPS_PARTIAL).exists()  # (a temp folder's mark only)


def test_a_temp_directory_whose_writer_holds_its_lock_is_kept_whatever_its_pid_says(root):
    """Another container on this machine: its pid means nothing in ours, its kernel lock does."""
    root.mkdir()
    other = root / f".shared-v0.tmp-{_dead_pid()}@{_HOST}-c0ntainer"
    (other / "data").mkdir(parents=True)
    lock = hold_lock(other)
    _write("first", root)
    assert other.is_dir()
    os.close(lock)  # that writer is gone
    _write("second", root)
    assert not other.exists()
    assert not (root / "second-v0" / WRITING).exists()  # the lock does not stay in the dataset


def test_the_replaced_copy_of_a_cut_overwrite_goes_when_the_new_one_is_in_place_else_is_put_back(root):
    """Killed between the swap's two renames, an overwrite had left the dataset missing, its only copy hidden."""
    _write("swapped", root)
    dead = _dead_pid()
    replaced = root / f".swapped-v0.old-{dead}@{_HOST}"
    legacy = root / f".gone-v0.old-{dead}"  # the name before pid@host; its dataset is missing: the only copy
    for folder in (replaced, legacy):
        (folder / "data").mkdir(parents=True)
    with pytest.warns(UserWarning, match=r"gone-v0 is back in place: an overwrite of it was cut short"):
        _write("another", root)
    assert sorted(p.name for p in root.iterdir()) == ["another-v0", "gone-v0", "swapped-v0"]
    (root / "swapped-v0").rename(root / f".swapped-v0.old-{dead}@{_HOST}")  # an import of it killed so
    with pytest.warns(UserWarning, match="back in place"), pytest.raises(DatasetError, match="already exists"):
        _write("swapped", root)  # the same import rerun without --overwrite: the one put back is not replaced
    assert sorted(p.name for p in root.iterdir()) == ["another-v0", "gone-v0", "swapped-v0"]


def test_the_set_aside_copy_of_a_writer_in_another_container_between_its_renames_stays_set_aside(root):
    """A writer in another pid namespace on this host (its pid means nothing here) between its swap's two renames:
    its dataset is set aside and missing, its new one still in its locked temp folder. The next writer had put the
    set-aside copy back, and the other's rename of its new dataset into place then failed (not empty), its
    recording left in a temp folder that the next writer removes."""
    root.mkdir()
    other = _dead_pid()  # (dead here, alive in its own namespace)
    set_aside = root / f".busy-v0.old-{other}@{_HOST}"
    building = root / f".busy-v0.tmp-{other}@{_HOST}-c0ntainer"
    for folder in (set_aside, building):
        (folder / "data").mkdir(parents=True)
    lock = hold_lock(building)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (nothing to say: it is not cut short)
            _write("another", root)
        assert set_aside.is_dir() and building.is_dir() and not (root / "busy-v0").exists()
        building.rename(root / "busy-v0")  # that writer's second rename: in place
    finally:
        os.close(lock)
    _write("third", root)  # the set-aside copy, its dataset now in place, goes
    assert sorted(p.name for p in root.iterdir()) == ["another-v0", "busy-v0", "third-v0"]


# ---- Minari's namespaced ids ----------------------------------------------------------------


def test_namespaced_ids():
    assert dataset_id("mujoco/hopper/expert") == "mujoco/hopper/expert-v0"
    assert dataset_id("mujoco/hopper/expert-v2") == "mujoco/hopper/expert-v2"
    for bad in ("/abs/x", "a//b", "a/../b", "a/", "../x", "a/.hidden", "a b", "x\n"):
        with pytest.raises(DatasetError, match="bad dataset name"):
            dataset_id(bad)


def test_names_of_any_alphabet_are_taken_and_said_so():
    """A name of non-ASCII letters is an id (Minari's own check takes it too), and the refusal of a bad name says
    so: it had said 'letters, digits' while taking ümlaut."""
    from minari.dataset.minari_dataset import parse_dataset_id

    for name in ("ümlaut", "mujoco/名前/expert"):
        assert parse_dataset_id(dataset_id(name))[1] == name.split("/")[-1]
    with pytest.raises(DatasetError, match=r"use letters and digits \(of any alphabet\), '-' and '_'"):
        dataset_id("a b")


def _made_by_minari(dataset_id: str, root: Path, monkeypatch: pytest.MonkeyPatch, *episodes: Episode,
                    data_format: str = "hdf5") -> Path:
    """A dataset of ``episodes`` written by Minari's own API under ``root`` (as `minari download` leaves one), in
    ``data_format`` (Minari's "hdf5", "arrow" or "parquet"); its folder."""
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    buffers = [EpisodeBuffer(observations=e.observations["policy"], actions=e.actions, rewards=e.rewards,
                             terminations=e.terminations, truncations=e.truncations) for e in episodes]
    minari.create_dataset_from_buffers(dataset_id, buffers, observation_space=SPECS[0]["policy"],
                                       action_space=SPECS[1], algorithm_name="sac", data_format=data_format)
    return root / dataset_id


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")  # Minari's nags for author, description...
def test_datasets_minari_downloads_are_listed_and_load(root, monkeypatch, capsys):
    """`minari download mujoco/hopper/expert-v0` stores <root>/mujoco/hopper/expert-v0: it had been 'bad dataset
    name' for `dataset info`, and skipped by `dataset list`."""
    _made_by_minari("mujoco/hopper/expert-v0", root, monkeypatch, _episode(), _episode(7))
    _write("flat", root)
    assert list_datasets(root) == ["flat-v0", "mujoco/hopper/expert-v0"]
    ds = Dataset.load("mujoco/hopper/expert")
    assert ds.path == root / "mujoco" / "hopper" / "expert-v0" and len(ds) == 2 and ds.num_steps == 12
    assert ds.id == "mujoco/hopper/expert-v0"  # in full: info, split's part names and run results show it
    with pytest.raises(DatasetError, match="did you mean 'mujoco/hopper/expert-v0'"):
        Dataset.load("mujoco/hopper/expret")
    shutil.copytree(ds.path, root / "expert-v0")  # out of its namespaces: named as the folder it is in
    assert Dataset.load("expert").id == "expert-v0"
    assert ds.transitions()["obs"]["policy"].shape == (12, 3)
    assert cli(["dataset", "info", "mujoco/hopper/expert-v0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 2
    assert cli(["dataset", "list"]) == 0 and "mujoco/hopper/expert-v0" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")  # Minari's nags for author, description...
def test_info_of_a_dataset_minari_wrote_shows_its_read_on_a_terminal(root, monkeypatch):
    """`dataset info` of a dataset Minari's collector wrote (no episode statistics stored) reads every episode, and
    had said nothing meanwhile (13 s for 20,000 episodes): a terminal is shown a bar, as a run's read is."""
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    _made_by_minari("collected-v0", root, monkeypatch, _episode(), _episode(7))
    ds = Dataset.load("collected")
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert [s["length"] for s in ds.episode_stats()] == [5, 7]
    assert "reading collected-v0" in sys.stderr.getvalue()


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")  # Minari's nags for author, description...
def test_a_minari_id_given_without_its_namespace_is_named_in_full(root, monkeypatch):
    """`dataset=expert` (or `hopper/expert-v0`) for a downloaded mujoco/hopper/expert-v0 had been told only to
    record or import one: difflib finds no typo in a name that short of the id."""
    _made_by_minari("mujoco/hopper/expert-v0", root, monkeypatch, _episode())
    for name in "expert", "expert-v0", "hopper/expert-v0":
        with pytest.raises(DatasetError, match=f"no dataset '{name}' in .*; did you mean "
                                               r"'mujoco/hopper/expert-v0'\? or"):
            Dataset.load(name, root)
    with pytest.raises(DatasetError) as err:  # another name suggests nothing
        Dataset.load("medium", root)
    assert "did you mean" not in str(err.value)


def test_a_missing_namespaced_dataset_is_said_missing_from_the_root_whose_datasets_it_lists(root):
    """`dataset=mujoco/hopper/expert-v0` with nothing downloaded had said "no dataset ... in <root>/mujoco/hopper
    (there: <the root's datasets>)": a folder that does not exist, beside a list of another folder's datasets."""
    _write("flat", root)
    with pytest.raises(DatasetError) as err:
        Dataset.load("mujoco/hopper/expert-v0")
    assert f"no dataset 'mujoco/hopper/expert-v0' in {root.resolve()} (there: flat-v0)" in str(err.value)


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")
@pytest.mark.parametrize("how, where, says", [
    ("external link", "episode_1/infos", "is an external link to '/' in {secret}, another file, which robolearn does "
                                         "not follow; copy what it points to into the file itself"),
    ("soft link", "episode_1/elsewhere", "is an external link to '/' in secret.hdf5, another file"),
    ("virtual dataset", "episode_1/infos/data", "is a virtual dataset of 'data' in another file, {secret}"),
    ("external storage", "episode_1/infos/data", "is stored in other files ({secret}), which robolearn does not read"),
], ids=["external", "soft", "virtual", "raw"])
def test_a_minari_dataset_that_reads_other_files_is_refused_naming_the_link(root, monkeypatch, capsys, link_out,
                                                                            how, where, says):
    """Minari reads whatever a dataset's HDF5 file links to: a downloaded dataset read a file of this machine's
    into an episode's infos (the D4RL import refuses such files). `dataset list`, which reads the last episode,
    says it unreadable, and why."""
    folder = _made_by_minari("mujoco/hopper/linked-v0", root, monkeypatch, _episode(10), _episode(7))
    file = folder / "data" / "main_data.hdf5"
    with h5py.File(file, "a") as f:
        secret = link_out(f["episode_1"], how)
    said = f"{file}: '{where}' {says.format(secret=secret)}"
    with pytest.raises(DatasetError) as refused:
        Dataset.load("mujoco/hopper/linked")[-1]
    assert str(refused.value).startswith(said)
    assert cli(["dataset", "list"]) == 0 and f"UNREADABLE: {said}" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")
@pytest.mark.parametrize("how, says", [
    ("in the first episode", None),
    ("the episode's own link", "'episode_1' is an external link to '/' in {secret}"),
    ("a soft link out of the episode", "'stash' is an external link to '/' in {secret}"),
    ("a virtual dataset of the file's own", "'stash' is an external link to '/' in {secret}"),
    ("an episode that is a soft link", "'moved/infos' is an external link to '/' in {secret}"),
])
def test_dataset_list_checks_the_episode_it_reads_and_training_the_whole_file(root, tmp_path, monkeypatch, capsys,
                                                                              how, says):
    """`dataset list` reads each dataset's last episode, and had checked the whole file for other files it reads
    first: 1 s per 3,000 episodes, for every dataset listed. It checks what that episode reaches (a soft link,
    which may lead anywhere in the file, has the whole file checked), so a link in another episode is found by
    what reads that episode: training, `dataset info`. A virtual dataset mapped from the file itself names a path
    anywhere in it, as a soft link does: it had passed the episode's check and read another file."""
    secret = tmp_path / "secret.hdf5"
    with h5py.File(secret, "w") as f:
        f["data"] = np.arange(10, dtype=np.float32)
    folder = _made_by_minari("linked-v0", root, monkeypatch, _episode(10), _episode(7))
    file = folder / "data" / "main_data.hdf5"
    with h5py.File(file, "a") as f:
        if how == "in the first episode":
            f["episode_0/infos"] = h5py.ExternalLink(str(secret), "/")
        elif how == "the episode's own link":
            f.move("episode_1", "moved")
            f["episode_1"] = h5py.ExternalLink(str(secret), "/")
        elif how == "an episode that is a soft link":  # to a group whose own link leads out
            f.move("episode_1", "moved")
            f["moved/infos"] = h5py.ExternalLink(str(secret), "/")
            f["episode_1"] = h5py.SoftLink("/moved")
        else:
            f["stash"] = h5py.ExternalLink(str(secret), "/")
            if how == "a soft link out of the episode":
                f["episode_1/infos"] = h5py.SoftLink("/stash")
            else:  # mapped from "." (the file itself), through the external link: it read the secret's numbers
                layout = h5py.VirtualLayout(shape=(10,), dtype=np.float32)
                layout[:] = h5py.VirtualSource(".", "/stash/data", shape=(10,))
                f["episode_1"].create_virtual_dataset("infos/data", layout)
    assert cli(["dataset", "list"]) == 0
    listed = capsys.readouterr().out
    if says is None:
        assert "UNREADABLE" not in listed and "2 episodes" in listed
    else:
        assert f"linked-v0{' ' * 23} UNREADABLE: {file}: {says.format(secret=secret)}" in listed
    with pytest.raises(DatasetError, match="is an external link to '/' in .*, another file"):
        Dataset.load("linked").transitions()
    assert cli(["dataset", "info", "linked"]) == 2 and "another file" in capsys.readouterr().err


def test_a_dataset_whose_data_folder_links_out_is_refused_before_its_metadata_is_read(root, tmp_path):
    """Dataset.load reads data/metadata.json before any episode: the links on the way to it are checked there,
    a data folder linked out of the dataset refused (not read as its own) before an episode is asked for."""
    folder = _write("linked", root)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(folder, elsewhere)
    shutil.rmtree(folder / "data")
    (folder / "data").symlink_to(elsewhere / "data")
    with pytest.raises(DatasetError, match=f"{folder / 'data'}: a symlink to '{elsewhere / 'data'}', outside"):
        Dataset.load("linked")


def test_a_relative_symlink_out_is_named_as_written_and_where_it_leads(root, tmp_path):
    """A link's target as written (relative, here) says little where it leads: the message gives both."""
    folder = _write("linked", root)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(folder, elsewhere)
    link = folder / "data" / "main_data.hdf5"
    link.unlink()
    target = os.path.relpath(elsewhere / "data" / "main_data.hdf5", link.parent)
    link.symlink_to(target)
    with pytest.raises(DatasetError) as refused:
        Dataset.load("linked").transitions()
    assert str(refused.value).startswith(f"{link}: a symlink to '{target}' "
                                         f"({(elsewhere / 'data' / 'main_data.hdf5').resolve()}), outside")


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")
def test_each_episode_read_is_checked_not_only_the_first_read(root, monkeypatch, link_out):
    """The checks follow the episodes read (one episode's read checks what it reaches): an episode read after
    another, through the same loaded dataset, is checked in its turn, and a read of one already checked is not
    checked again."""
    import robolearn.data.dataset as dataset_module

    folder = _made_by_minari("linked-v0", root, monkeypatch, _episode(10), _episode(7))
    with h5py.File(folder / "data" / "main_data.hdf5", "a") as f:
        secret = link_out(f["episode_1"], "external link")
    checked = []
    read_storage = dataset_module.read_storage

    def spy(data, episodes=None, **kwargs):
        checked.append(None if episodes is None else list(episodes))
        return read_storage(data, episodes, **kwargs)

    monkeypatch.setattr(dataset_module, "read_storage", spy)
    ds = Dataset.load("linked")
    assert len(ds[0].rewards) == 10 and len(ds[0].rewards) == 10
    assert checked == [[0]]  # the first episode's, once
    with pytest.raises(DatasetError, match=f"'episode_1/infos' is an external link to '/' in {secret}"):
        ds[1]
    assert checked == [[0], [1]]
    _made_by_minari("clean-v0", root, monkeypatch, _episode(10), _episode(7))
    checked.clear()
    clean = Dataset.load("clean")
    assert clean.transitions()["reward"].shape == (17,) and len(clean[1].rewards) == 7
    assert checked == [None]  # the whole file, once: no episode is checked again


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")
def test_a_dataset_read_episode_by_episode_walks_its_folder_once(root, monkeypatch):
    """Each episode read after the first checks its own files, not the whole folder's links again: ds[i] in a loop
    had walked an arrow dataset's every episode folder for each i (0.25 s an episode of 20,000)."""
    import robolearn.data.minari_store as store

    _made_by_minari("walked-v0", root, monkeypatch, _episode(10), _episode(7), _episode(5), data_format="arrow")
    walks = []
    refuse_links_out = store.refuse_links_out

    def spy(folder, paths=None):
        walks.append(paths is None)
        return refuse_links_out(folder, paths)

    monkeypatch.setattr(store, "refuse_links_out", spy)
    ds = Dataset.load("walked")
    assert [len(ds[i].rewards) for i in range(3)] == [10, 7, 5] and ds.transitions()["reward"].shape == (22,)
    assert walks.count(True) == 1


def test_recover_refuses_a_folder_whose_file_reads_other_files(root, link_out):
    """A recording's temp folder is read through Minari's storage too: it is refused as a dataset is, and kept."""
    from robolearn.data.recover import recover

    folder = _dead_recording("rec", root, episodes=2)
    with h5py.File(folder / "data" / "main_data.hdf5", "a") as f:
        secret = link_out(f["episode_1"], "external link")
    with pytest.raises(DatasetError, match=f"'episode_1/infos' is an external link to '/' in {secret}, another file"):
        recover(folder)
    assert folder.is_dir() and list_datasets(root) == []


def test_recover_of_a_file_with_a_damaged_object_header_is_one_line(root):
    """Checking every object before the episodes are read meets a damaged header first, where h5py raises
    RuntimeError ("Link visitation failed"), not the KeyError of reading it: still the one-line error."""
    from robolearn.data.recover import recover

    folder = _dead_recording("rec", root, episodes=2)
    path = folder / "data" / "main_data.hdf5"
    with h5py.File(path) as f:
        address = h5py.h5o.get_info(f["episode_1/actions"].id).addr
    data = bytearray(path.read_bytes())
    data[address] = 0xFF  # its version byte (a version 1 header, as Minari writes)
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="its HDF5 file was damaged when the recording stopped .*bad object header"):
        recover(folder)
    assert folder.is_dir()


@pytest.mark.parametrize("linked", ["data/main_data.hdf5", "data", "data/metadata.json"])
def test_a_symlink_out_of_a_dataset_is_refused_naming_it_and_its_target(root, tmp_path, capsys, linked):
    """Minari follows symlinks: a dataset from elsewhere (a tarball keeps them) whose file, data folder or metadata
    linked to a file of this machine's read it as its own. Refused, naming the link and its target, whatever the
    target holds (here the dataset's own copy); `dataset list` says so."""
    folder = _write("linked", root)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(folder, elsewhere)
    link = folder / linked
    shutil.rmtree(link) if link.is_dir() else link.unlink()
    link.symlink_to(elsewhere / linked)
    said = (f"{link}: a symlink to '{elsewhere / linked}', outside the dataset's folder {folder}, which robolearn "
            "does not follow")
    with pytest.raises(DatasetError) as refused:
        Dataset.load("linked").transitions()
    assert str(refused.value).startswith(said)
    assert cli(["dataset", "list"]) == 0 and f"UNREADABLE: {said}" in capsys.readouterr().out


def test_a_linked_dataset_folder_and_links_that_stay_inside_it_are_read(root, tmp_path):
    """Where datasets are kept is the user's choice: a dataset's folder may be a link to another disk, and a link
    inside the folder to a place inside it (here relative, through the linked folder) stays inside."""
    kept = _write("kept", tmp_path / "big_disk")
    (kept / "stash").mkdir()
    (kept / "data" / "main_data.hdf5").rename(kept / "stash" / "main_data.hdf5")
    (kept / "data" / "main_data.hdf5").symlink_to(Path("..") / "stash" / "main_data.hdf5")
    root.mkdir()
    (root / "kept-v0").symlink_to(kept)
    assert Dataset.load("kept").transitions()["reward"].shape == (5,)


def _valued(steps: int, value: float) -> Episode:
    """An episode of ``steps`` steps whose observations are all ``value``: which file it came from is seen."""
    episode = _episode(steps)
    episode.observations["policy"][:] = value
    return episode


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")
@pytest.mark.parametrize("data_format", ["arrow", "parquet"])
@pytest.mark.parametrize("linked, target", [("1", "1"), ("0/part-0.{ext}", "0/part-0.{ext}"), ("0/more", "1")],
                         ids=["episode-folder", "episode-file", "folder-in-episode"])
def test_an_arrow_dataset_that_links_out_is_refused_naming_the_link(root, tmp_path, monkeypatch, capsys, data_format,
                                                                    linked, target):
    """An arrow or parquet dataset's episodes are folders of files that pyarrow reads, following symlinks (files in
    folders inside them too): one whose episode folder, episode file or a folder in an episode linked out had read
    another dataset's episodes (any arrow or parquet file of this machine's) as its own. Refused as HDF5 links are."""
    other = _made_by_minari("other-v0", tmp_path / "other", monkeypatch, _valued(5, 9), _valued(5, 9),
                            data_format=data_format)
    folder = _made_by_minari("linked-v0", root, monkeypatch, _valued(5, 1), _valued(5, 1), data_format=data_format)
    link, target = (folder / "data" / linked.format(ext=data_format), other / "data" / target.format(ext=data_format))
    shutil.rmtree(link) if link.is_dir() else link.unlink(missing_ok=True)
    link.symlink_to(target)
    said = f"{link}: a symlink to '{target}', outside the dataset's folder {folder}, which robolearn does not follow"
    with pytest.raises(DatasetError) as refused:
        Dataset.load("linked").transitions()
    assert str(refused.value).startswith(said)
    assert cli(["dataset", "list"]) == 0 and f"UNREADABLE: {said}" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")
@pytest.mark.parametrize("data_format", ["arrow", "parquet"])
@pytest.mark.parametrize("stray", ["part-0 (copy).{ext}", "more/part-0.{ext}"], ids=["copy", "in-a-folder"])
def test_an_arrow_episode_folder_with_a_stray_file_is_refused_naming_it(root, monkeypatch, capsys, data_format, stray):
    """Minari reads an arrow or parquet dataset's episode folders as one pyarrow dataset and pairs the episodes with
    its record batches in order: a copy of a part file left in episode 0's folder (or a folder in it) had episode 1
    read episode 0's steps and episode 2 episode 1's, silently where the lengths agree, and a run trained on them."""
    folder = _made_by_minari("strayed-v0", root, monkeypatch, _valued(5, 1), _valued(5, 2), _valued(5, 3),
                             data_format=data_format)
    episode = folder / "data" / "0"
    extra = episode / stray.format(ext=data_format)
    extra.parent.mkdir(exist_ok=True)
    shutil.copy(episode / f"part-0.{data_format}", extra)
    said = (f"{episode}: episode 0's folder holds 2 files pyarrow reads as the episode "
            f"({', '.join(sorted([f'part-0.{data_format}', str(extra.relative_to(episode))]))}), where Minari writes "
            f"one; Minari pairs the episodes with the record batches pyarrow reads, in order, so this episode and "
            f"every one after it would read another episode's steps; remove all but part-0.{data_format}")
    for read in (lambda ds: ds.transitions(), lambda ds: list(ds), lambda ds: ds[0]):
        with pytest.raises(DatasetError) as refused:
            read(Dataset.load("strayed"))
        assert str(refused.value).startswith(said)
    assert Dataset.load("strayed")[-1].observations["policy"][0, 0] == 3  # its own folder: read right (`dataset list`)
    extra.unlink()
    np.testing.assert_array_equal(Dataset.load("strayed").transitions()["obs"]["policy"][:, 0].numpy(),
                                  np.repeat([1, 2, 3], 5))


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")
@pytest.mark.parametrize("data_format", ["arrow", "parquet"])
def test_an_arrow_episode_pyarrow_reads_in_pieces_is_refused(root, monkeypatch, data_format):
    """pyarrow reads an episode of Minari's of more than 32,767 steps (rows: steps + 1) in record batches of 32,768
    rows, which Minari paired with the episodes in order: episode 0 had read 32,767 of its 32,768 steps, and the
    episode after it its last step. The longest episode read whole reads."""
    _made_by_minari("long-v0", root, monkeypatch, _valued(32_768, 1), _valued(5, 2), data_format=data_format)
    episode = root / "long-v0" / "data" / "0"
    said = (f"{episode}: episode 0 has 32,768 steps (its metadata.json), more than the 32,767 Minari reads right "
            f"from an arrow or parquet dataset")
    for read in (lambda ds: ds.transitions(), lambda ds: ds[0]):
        with pytest.raises(DatasetError) as refused:
            read(Dataset.load("long"))
        assert str(refused.value).startswith(said) and "Minari gave this episode 32,767 steps" in str(refused.value)
    assert len(Dataset.load("long")[-1]) == 5
    _made_by_minari("longest-v0", root, monkeypatch, _valued(32_767, 1), _valued(5, 2), data_format=data_format)
    assert Dataset.load("longest").transitions()["reward"].shape == (32_772,)


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")
def test_the_stray_file_check_looks_up_real_paths_only_where_an_episode_folder_holds_a_link(root, monkeypatch):
    """The check had looked up each episode folder's real path (3/4 of its time on 20,000 episodes), needed only
    to stop at a link back up: an episode folder without links is listed alone, one with a link still walked once."""
    from robolearn.data.minari_store import refuse_stray_files

    data = _made_by_minari("walked-v0", root, monkeypatch, _valued(5, 1), _valued(5, 2), data_format="arrow") / "data"
    (data / "1" / "up").symlink_to(".")  # a link back up: walked once, its file not counted twice
    looked_up = []
    real_path, resolve = os.path.realpath, Path.resolve
    monkeypatch.setattr(os.path, "realpath",
                        lambda path, **kw: looked_up.append(os.fspath(path)) or real_path(path, **kw))
    monkeypatch.setattr(Path, "resolve", lambda self, **kw: looked_up.append(str(self)) or resolve(self, **kw))
    refuse_stray_files(data, "arrow", [0])
    assert looked_up == []
    refuse_stray_files(data, "arrow", [1])
    assert looked_up and all(path.startswith(str(data / "1")) for path in looked_up)
    shutil.copy(data / "1" / "part-0.arrow", data / "1" / "stray.arrow")
    with pytest.raises(DatasetError, match="episode 1's folder holds 2 files pyarrow reads"):
        refuse_stray_files(data, "arrow", [1])


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")
def test_a_symlink_that_never_ends_leaves_the_dataset_readable(root, monkeypatch):
    """A link to itself has no target to judge, and nothing is read through it (pyarrow skips it): the dataset
    reads as it did before links were checked, not "Symlink loop" from inside the check."""
    folder = _made_by_minari("looped-v0", root, monkeypatch, _valued(5, 1), data_format="arrow")
    (folder / "data" / "0" / "loop").symlink_to("loop")
    np.testing.assert_array_equal(Dataset.load("looped").transitions()["reward"].numpy(), np.ones(5, np.float32))


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")
def test_a_parquet_file_whose_footer_names_another_file_reads_itself(root, tmp_path, monkeypatch):
    """What an arrow or parquet dataset can name outside its folder besides symlinks: Arrow's IPC files name no
    other file, and a parquet footer may name one per column chunk (ColumnChunk.file_path), which pyarrow ignores,
    reading the file's own bytes. Pins that: were it followed, a parquet dataset would read files past the check."""
    import io
    import struct

    import pyarrow.parquet as pq

    other = _made_by_minari("other-v0", tmp_path / "other", monkeypatch, _valued(5, 9), data_format="parquet")
    folder = _made_by_minari("named-v0", root, monkeypatch, _valued(5, 1), data_format="parquet")
    file, secret = folder / "data" / "0" / "part-0.parquet", other / "data" / "0" / "part-0.parquet"
    raw = file.read_bytes()
    footer = pq.read_metadata(file)
    footer.set_file_path(str(secret))  # every column chunk's
    written = io.BytesIO()
    footer.write_metadata_file(written)  # PAR1, footer, its length, PAR1
    new_footer = written.getvalue()[4:-8]
    file.write_bytes(raw[:-8 - struct.unpack("<i", raw[-8:-4])[0]] + new_footer
                     + struct.pack("<i", len(new_footer)) + b"PAR1")
    assert pq.read_metadata(file).row_group(0).column(0).file_path == str(secret)
    np.testing.assert_array_equal(Dataset.load("named")[0].observations["policy"], np.ones((6, 3), np.float32))


def test_a_namespaced_dataset_is_written_where_minari_reads_it(root, monkeypatch):
    import minari

    target = _write("robot/arm/reach", root)
    assert target == root / "robot" / "arm" / "reach-v0"
    assert [p.name for p in target.parent.iterdir()] == ["reach-v0"]  # no temp directory left beside it
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    assert list(minari.list_local_datasets()) == ["robot/arm/reach-v0"]
    _write("robot/arm/reach", root, overwrite=True)  # the swap with the replaced copy, inside the namespace
    assert list_datasets(root) == ["robot/arm/reach-v0"] and [p.name for p in target.parent.iterdir()] == ["reach-v0"]


def test_a_name_minari_cannot_read_is_refused_before_anything_is_written(root, monkeypatch):
    """Minari's namespaces are two characters or more: 'a/reach-v0' had been written, and minari.load_dataset then
    said 'Malformed dataset ID'."""
    import minari

    for name in ("a/reach", "_/reach", "a/-v0"):
        with pytest.raises(DatasetError, match=f"dataset name '{name}(-v0)?' is not one Minari reads"):
            _write(name, root)
    assert list_datasets(root) == [] and not any(root.rglob("*-v0"))
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    _write("ab/reach", root)
    assert len(minari.load_dataset("ab/reach-v0")) == 1


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
        with pytest.raises(DatasetError, match=rf"robolearn dataset import {name} --format d4rl` \(and `--task TASK`, "
                                                  r"unless it is our own export, which names its task\)") as err:
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


def test_a_filesystem_without_locks_still_takes_datasets_and_a_refused_spec_leaves_nothing(root, monkeypatch):
    import fcntl

    from robolearn.data import DatasetWriter

    def no_locks(fd, operation):
        raise OSError(38, "Function not implemented")  # Lustre mounted noflock

    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert _write("unlocked", root).is_dir()
    monkeypatch.undo()
    opened = len(os.listdir("/proc/self/fd"))
    with pytest.raises(TypeError, match="not an instance of Space"):
        DatasetWriter("refused", {"policy": "no space"}, SPECS[1], root=root)  # not a space: refused
    assert len(os.listdir("/proc/self/fd")) == opened and sorted(p.name for p in root.iterdir()) == ["unlocked-v0"]


def test_a_recording_that_would_fill_the_disk_stops_keeping_its_episodes(tmp_path, monkeypatch):
    """HDF5 on a full disk had crashed the process (a segmentation fault), the episodes so far uncommitted."""
    import errno
    import shutil
    from collections import namedtuple

    usage, free = namedtuple("usage", "total used free"), [1 << 30]
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 31, 0, free[0]))
    with pytest.raises(OSError) as said:
        with DatasetWriter("rec", *SPECS, root=tmp_path, keep_partial=True) as writer:
            writer.add(_episode())
            free[0] = 1 << 20  # a megabyte left: less than the room kept for the commit
            writer.add(_episode())
    assert said.value.errno == errno.ENOSPC and said.value.filename == str(tmp_path / "rec-v0")
    assert "KiB are free; the 1 before it are kept" in said.value.strerror
    monkeypatch.undo()
    assert len(Dataset.load("rec", root=tmp_path)) == 1


def test_a_dataset_of_no_episode_is_refused_by_name_not_a_traceback(root, tmp_path, monkeypatch, capsys):
    """Minari's own API writes one; training on it had ended in KeyError 'obs', its exports in a TypeError and an
    IndexError."""
    import minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (Minari's about the missing env spec)
        minari.create_dataset_from_buffers("none-v0", [], observation_space=SPECS[0]["policy"],
                                           action_space=SPECS[1])
    dataset = Dataset.load("none", root)
    from robolearn.data.d4rl import write_d4rl
    from robolearn.data.lerobot import write_lerobot

    for attempt in (dataset.transitions, lambda: write_d4rl(dataset, tmp_path / "none.hdf5"),
                    lambda: write_lerobot(dataset, tmp_path / "none", fps=50)):
        with pytest.raises(DatasetError, match=r"dataset 'none-v0' \(.*\) holds no episode: nothing to"):
            attempt()
    # `dataset replay` had said "--episode 0: dataset 'none-v0' has 0 episodes (0 to -1; ...)"
    assert cli(["dataset", "replay", "none", "--episode", "0", "--task", "pendulum"]) == 2
    assert "holds no episode: nothing to replay" in capsys.readouterr().err


def test_a_killed_recording_whose_pid_was_taken_since_is_still_recovered(root):
    """Pids restart low after a reboot: a folder named after a pid that another process now has had looked live for
    ever (never listed, recover refused it). Its writer's lock, free for over a minute, says it is not."""
    folder = _dead_recording("rec", root, episodes=1)
    folder = folder.rename(folder.with_name(folder.name.replace(folder.name.split("tmp-")[1].split("@")[0], "1")))
    from robolearn.data.recover import recover, uncommitted_recordings

    assert uncommitted_recordings(root) == []  # a lock just made is its writer's to take
    old = time.time() - 120
    os.utime(folder / WRITING, (old, old))
    assert uncommitted_recordings(root) == [folder]
    assert len(recover(folder).dataset) == 1
