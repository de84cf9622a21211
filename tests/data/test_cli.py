"""`robolearn dataset ...` end to end: record from an exported controller or a run, inspect, split, merge, replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from robolearn import load_config
from robolearn.cli import main
from robolearn.data import Dataset
from robolearn.export import export_controller
from robolearn.interfaces import Controller
from robolearn.runner import train


class Swing(Controller):
    """Pendulum: push along the angular velocity (pumps energy)."""

    def __init__(self) -> None:
        super().__init__()
        self.obs_size = 3

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return 2.0 * torch.tanh(4.0 * obs[:, 2:3])


def test_record_info_split_merge_replay(tmp_path, root, capsys):
    export_controller(Swing(), tmp_path / "export", ("torchscript",), extra={"task": "pendulum"})
    controller = str(tmp_path / "export" / "controller.pt")
    argv = ["dataset", "record", "--controller", controller, "--episodes", "3", "--num-envs", "2", "--noise", "0.1",
            "--name", "swing", "--ref-min", "0", "--ref-max", "500", "--no-progress"]
    assert main(argv) == 0
    assert "recorded:    3 episodes, 1500 steps" in capsys.readouterr().out
    assert main(argv) == 2 and "already exists" in (said := capsys.readouterr().err)
    assert "choose another name (--name) or pass --overwrite" in said  # (split's --names had been named too)
    ds = Dataset.load("swing")
    assert ds.info["controller"] == controller and ds.info["noise"] == 0.1 and ds.task == "pendulum"
    assert ds[0].infos["commanded_actions"].shape == (500, 1)

    assert main(["dataset", "info", "swing", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["episodes"] == 3 and 0 < info["normalized_score_mean"] < 1
    assert main(["dataset", "list"]) == 0 and "swing-v0" in capsys.readouterr().out

    assert main(["dataset", "split", "swing", "--fractions", "0.67", "0.33", "--names", "train", "val"]) == 0
    assert main(["dataset", "merge", "train", "val", "--name", "whole"]) == 0
    assert len(Dataset.load("whole")) == 3
    capsys.readouterr()

    assert main(["dataset", "replay", "swing", "--episode", "2", "--json"]) == 0
    out = capsys.readouterr().out
    assert "restored from the recorded state" in out and "exact replay" in out
    result = json.loads(out.splitlines()[-1])
    assert result["return_diff"] == 0 and result["exact"] and len(result["qpos_divergence"]) == 501
    assert main(["dataset", "replay", "swing", "--episode", "-1", "--json"]) == 0  # the last: episode 2 again
    out = capsys.readouterr().out
    assert out.startswith("episode 2:") and json.loads(out.splitlines()[-1])["episode"] == 2


def test_record_runs_the_task_as_the_controller_was_trained(tmp_path, root, capsys):
    """controller.json's task settings (here 200-step episodes) build the recording env."""
    export_controller(Swing(), tmp_path / "export", ("torchscript",),
                      extra={"task": "pendulum", "task_kwargs": {"max_episode_steps": 200}})
    argv = ["dataset", "record", "--controller", str(tmp_path / "export" / "controller.pt"), "--episodes", "2",
            "--num-envs", "2", "--name", "short", "--no-progress"]
    assert main(argv) == 0
    assert "recorded:    2 episodes, 400 steps" in capsys.readouterr().out
    assert Dataset.load("short").info["task_kwargs"] == {"max_episode_steps": 200}


def test_record_says_the_delay_and_randomization_a_controller_trained_with_are_left_out(tmp_path, root, capsys):
    """controller.json records the run's env.delay and env.randomization; recording an exported controller (on the
    nominal task, as a run's is) had left them out without a word. An older controller.json without them, or one
    trained without, says nothing."""
    import warnings

    from robolearn.config import EnvConfig
    from robolearn.export import task_meta

    trained = EnvConfig(task="pendulum", delay={"action_latency_steps": 2}, randomization={"obs_noise_std": 0.1})
    export_controller(Swing(), tmp_path / "export", ("torchscript",), extra=task_meta(trained, 0.05))
    meta_path = tmp_path / "export" / "controller.json"
    argv = ["dataset", "record", "--controller", str(tmp_path / "export" / "controller.pt"), "--episodes", "1",
            "--no-progress", "--overwrite"]
    with pytest.warns(UserWarning, match=r"trained with env.randomization obs_noise_std=0.1 and env.delay "
                                         r"action_latency_steps=2 \(.*controller.json\), which the recording leaves out"):
        assert main(argv) == 0
    meta = json.loads(meta_path.read_text())
    for nominal in ({**meta, "randomization": {}, "delay": {}},
                    {k: v for k, v in meta.items() if k not in ("randomization", "delay")}):  # an older export's
        meta_path.write_text(json.dumps(nominal))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert main(argv) == 0


def test_record_from_a_run_directory(tmp_path, root, capsys):
    cfg = load_config("ppo_cartpole", [f"run_dir={tmp_path / 'runs'}", "env.num_envs=4", "logging.wandb=disabled",
                                       "logging.progress=false", "runner.total_steps=256", "runner.eval_episodes=0",
                                       "runner.video_seconds=0"])
    run = train(cfg).run_dir
    assert main(["dataset", "record", "--run", str(run), "--episodes", "1", "--no-progress"]) == 0
    assert "recorded:    1 episode," in capsys.readouterr().out
    ds = Dataset.load("cartpole-ppo")
    assert ds.raw_metadata["algorithm_name"] == "ppo"
    assert ds.info["controller"] == f"run:{run}"
    assert main(["dataset", "replay", "cartpole-ppo"]) == 0 and "exact replay" in capsys.readouterr().out
    # another task of other shapes: said as what was asked, not as a checkpoint tensor's shape
    assert main(["dataset", "record", "--run", str(run), "--task", "pendulum", "--episodes", "1", "--no-progress"]) == 2
    assert f"--task pendulum: run {run} trained on 'cartpole', whose observations or actions differ; leave --task " \
           "out" in capsys.readouterr().err
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "env": {**config["env"], "delay": {"obs_delay_steps": 1}}}))
    with pytest.warns(UserWarning, match=r"env.delay of the run left out: the episodes are recorded on the nominal"):
        assert main(["dataset", "record", "--run", str(run), "--episodes", "1", "--name", "nominal", "--no-progress"]) == 0
    for noise in "-1", "nan":  # a negative standard deviation had been recorded as noise -1, adding none
        assert main(["dataset", "record", "--run", str(run), "--episodes", "1", "--noise", noise, "--name", "n"]) == 2
        assert f"--noise is a standard deviation (in half action ranges), at least 0; got {noise}" in \
               capsys.readouterr().err


def test_missing_task_and_dataset_are_one_line_errors(tmp_path, root, capsys):
    assert main(["dataset", "record", "--controller", "random", "--episodes", "1"]) == 2
    # said as what random needs, not as a trained controller's missing record (random trained on nothing)
    assert "--task is needed with --controller random: which task's episodes to record, e.g. --task arm_reach" in \
           capsys.readouterr().err
    assert main(["dataset", "replay", "nothing"]) == 2
    assert "no dataset 'nothing'" in capsys.readouterr().err
    assert main(["dataset", "import", str(Path(tmp_path)), "--format", "lerobot"]) == 2
    assert "not a LeRobot dataset" in capsys.readouterr().err


def test_a_mistyped_task_is_said_as_the_task_flag_given(tmp_path, root, recorded, capsys):
    """`dataset import|record|replay --task hoper` had been told "unknown task 'hoper' (env.task)", a config key
    these commands do not take: the flag the user typed is named."""
    recorded("pendulum", 1, num_envs=1, max_episode_steps=10)
    for argv in (["record", "--controller", "random", "--episodes", "1"], ["replay", "pendulum"],
                 ["import", str(tmp_path / "x.hdf5"), "--format", "d4rl"]):
        assert main(["dataset", *argv, "--task", "hoper"]) == 2
        err = capsys.readouterr().err
        assert "error: unknown task 'hoper' (--task); did you mean 'hopper'?" in err and "env.task" not in err
    assert main(["dataset", "replay", "pendulum", "--task", "no_such_module_here:Task"]) == 2
    assert "error: --task no_such_module_here:Task: no module 'no_such_module_here'" in capsys.readouterr().err


def test_split_merge_export_and_replay_lines_count_one_episode_as_one(tmp_path, root, recorded, capsys):
    """Record's line says '1 episode' (listing.counted); split, merge, export and replay's had said '1 episodes'."""
    recorded("pendulum", 2, num_envs=1, max_episode_steps=10)
    assert main(["dataset", "split", "pendulum", "--fractions", "0.5", "0.5", "--names", "a", "b"]) == 0
    assert capsys.readouterr().out.splitlines() == ["a-v0:                   1 episode, 10 steps",
                                                    "b-v0:                   1 episode, 10 steps"]
    with pytest.warns(UserWarning, match=r"^merging one dataset: 'c-v0' will be a copy of 'a-v0'; to merge, name "):
        assert main(["dataset", "merge", "a", "--name", "c"]) == 0  # (it had copied without a word)
    from robolearn.data import DatasetError, merge
    with pytest.raises(DatasetError, match=r"merge into 'none': no datasets given"):  # (an IndexError from Python)
        merge([], "none")
    assert capsys.readouterr().out == "c-v0:                   1 episode, 10 steps\n"
    assert main(["dataset", "export", "a", "--format", "lerobot", "--out", str(tmp_path / "a_lerobot"), "--fps", "50"]) == 0
    assert f"exported:    1 episode, 10 frames -> {tmp_path / 'a_lerobot'}" in capsys.readouterr().out
    assert main(["dataset", "replay", "a", "--episode", "3"]) == 2
    assert "dataset 'a-v0' has 1 episode (0 to 0;" in capsys.readouterr().err


def test_a_relative_root_works(tmp_path, monkeypatch):
    """--root and $ROBOLEARN_DATASETS relative to the working folder (Minari's storage had doubled them)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ROBOLEARN_DATASETS", "rel")
    assert main(["dataset", "record", "--controller", "random", "--task", "pendulum", "--episodes", "1",
                 "--no-progress", "--root", "./mine"]) == 0
    assert main(["dataset", "record", "--controller", "random", "--task", "pendulum", "--episodes", "1",
                 "--no-progress"]) == 0
    assert (tmp_path / "mine" / "pendulum-random-v0").is_dir() and (tmp_path / "rel" / "pendulum-random-v0").is_dir()
    assert len(Dataset.load("pendulum-random")) == 1


def test_list_of_a_root_that_is_no_folder_says_so(tmp_path, root, capsys):
    # a mistyped --root (or a file given as it) had said "none yet", as if the datasets were gone
    (tmp_path / "a_file").write_text("x")
    for given, says in ((tmp_path / "datsets", "no such folder"), (tmp_path / "a_file", "a file, not a folder")):
        assert main(["dataset", "list", "--root", str(given)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: --root {given}: {says}") and len(err.splitlines()) == 1, err
    assert main(["dataset", "list", "--root", str(tmp_path)]) == 0  # an empty folder: none yet, as before
    assert "none yet" in capsys.readouterr().out


def test_a_datasets_root_that_is_a_file_is_said_so_by_record_and_list(tmp_path, monkeypatch, capsys):
    """record and import into a root that is a file had said only "[Errno 17] File exists: '<root>'", naming no
    setting; list, with $ROBOLEARN_DATASETS a file, had said "none yet"."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    record = ["dataset", "record", "--controller", "random", "--task", "pendulum", "--episodes", "1", "--no-progress"]
    assert main([*record, "--root", str(a_file)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {a_file}: the datasets folder is a file; give a folder " \
                                              "($ROBOLEARN_DATASETS, or the dataset commands' --root)"
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(a_file))
    assert main(record) == 2 and "the datasets folder is a file" in capsys.readouterr().err
    assert main(["dataset", "list"]) == 2
    assert capsys.readouterr().err.startswith(f"error: $ROBOLEARN_DATASETS {a_file}: a file, not a folder")
    # info, replay and a run's dataset= look a dataset up there: 'no dataset ... (there: none); make it with ...',
    # whose writer then refused the file, had been said
    for argv in (["dataset", "info", "hopper-medium"], ["dataset", "replay", "hopper-medium"],
                 ["train", "iql_hopper", f"run_dir={tmp_path / 'runs'}", "--no-wandb"]):
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == f"error: {a_file}: the datasets folder is a file; give a folder " \
                                                  "($ROBOLEARN_DATASETS, or the dataset commands' --root)", argv


def test_record_names_a_controller_path_that_is_a_folder(tmp_path, root, capsys):
    """A folder (the export folder, say) had been said to be no such file."""
    assert main(["dataset", "record", "--controller", str(tmp_path), "--episodes", "1", "--name", "x"]) == 2
    assert f"--controller {tmp_path}: a folder, not a file; give an exported controller.pt" in capsys.readouterr().err
    assert main(["dataset", "record", "--controller", str(tmp_path / "nope.pt"), "--episodes", "1", "--name", "x"]) == 2
    assert "nope.pt: no such file" in capsys.readouterr().err


def test_a_dataset_naming_a_task_this_install_lacks_is_not_said_to_name_code(root, recorded, capsys):
    """A dataset whose metadata names a task that is no code and no task here (a typo, another install's task)
    had been replayed with "which names code to import; a file does not get to run code: if you trust it, pass
    --task hoper", a --task that fails in turn."""
    ds = recorded("pendulum", 1, name="fetched")
    meta_path = ds.path / "data" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["robolearn"]["task"] = "pendulm"
    meta_path.write_text(json.dumps(meta))
    assert main(["dataset", "replay", "fetched"]) == 2
    err = capsys.readouterr().err
    assert "says its task is 'pendulm', which is no task here (did you mean 'pendulum'?): pass --task" in err
    assert "names code" not in err
    assert main(["dataset", "replay", "fetched", "--task", "pendulum"]) == 0  # the user's --task replays it


def test_a_task_that_names_code_is_not_built_from_a_dataset_or_a_controller_json(tmp_path, root, recorded, capsys,
                                                                                   monkeypatch):
    """A dataset's metadata and a controller.json come from anywhere: `dataset replay` and `dataset record
    --controller` had built the task they name, importing (and calling) what it names with the file's task_kwargs,
    where `dataset import` refuses to. The user's --task still may."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "ran"
    (tmp_path / "evil_task_xyz.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ds = recorded("pendulum", 1, name="fetched")
    meta_path = ds.path / "data" / "metadata.json"
    for task, kwargs in (("os:system", {"command": f"touch {marker}"}), ("evil_task_xyz:Task", {}),
                         ("gym:evil_task_xyz:Thing-v0", {})):
        meta = json.loads(meta_path.read_text())
        meta["robolearn"] |= {"task": task, "task_kwargs": kwargs}
        meta_path.write_text(json.dumps(meta))
        assert main(["dataset", "replay", "fetched"]) == 2
        assert f"says its task is '{task}', which names code to import" in capsys.readouterr().err
        assert not marker.exists()
    exported = tmp_path / "export"
    exported.mkdir()
    (exported / "controller.onnx").write_bytes(b"not read")
    (exported / "controller.json").write_text(json.dumps({
        "obs_groups": ["policy"], "obs_size": 3, "decision_period": 1, "inputs": {"obs": [3]},
        "task": "os:system", "task_kwargs": {"command": f"touch {marker}"}}))
    assert main(["dataset", "record", "--controller", str(exported / "controller.onnx"), "--episodes", "1",
                 "--no-progress"]) == 2
    assert "says its task is 'os:system', which names code to import" in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.parametrize("overwrite", [False, True])
def test_an_import_stopped_by_ctrl_c_says_nothing_was_imported(tmp_path, monkeypatch, capsys, overwrite):
    """A Ctrl+C during an import had printed 'interrupted' alone: nothing is written (a dataset is written whole or
    not at all), and an --overwrite keeps the dataset it would have replaced."""
    import robolearn.data.importing as importing

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt("SIGINT")

    monkeypatch.setattr(importing, "import_dataset", stopped)
    argv = ["dataset", "import", str(tmp_path / "d.hdf5"), "--format", "d4rl", "--root", str(tmp_path)]
    assert main(argv + ["--overwrite"] * overwrite) == 130
    err = capsys.readouterr().err.strip()
    kept = "; the dataset it would have replaced is kept" if overwrite else ""
    assert err == f"interrupted: SIGINT; nothing was imported: a dataset is written whole or not at all{kept}"


def test_replay_says_a_video_path_it_cannot_write_before_replaying_and_by_its_own_name(recorded, monkeypatch, capsys):
    """`dataset replay --video /proc/ep.mp4` replayed the episode, then failed naming the temp file beside the video
    ("[Errno 2] No such file or directory: '/proc/.ep.1234.tmp.mp4'")."""
    import importlib

    recorded("pendulum", 1)
    monkeypatch.setattr(importlib.import_module("robolearn.data.replay"), "replay",
                        lambda *a, **k: pytest.fail("replayed before the video check"))
    assert main(["dataset", "replay", "pendulum", "--video", "/proc/ep.mp4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: video /proc/ep.mp4: cannot write there (") and ".tmp" not in err


def test_an_empty_name_is_refused_not_taken_for_the_default_one(recorded, root, tmp_path, capsys):
    """`--name "$NAME"` with NAME unset had imported under the file's name, with --overwrite replacing that dataset."""
    from robolearn.data.d4rl import write_d4rl

    source = write_d4rl(recorded("pendulum", 1, name="src"), tmp_path / "pendulum.hdf5")
    recorded("pendulum", 2)  # the dataset the default name would have replaced
    for argv in (["import", str(source), "--format", "d4rl", "--overwrite"],
                 ["record", "--controller", "random", "--task", "pendulum", "--episodes", "1", "--overwrite"],
                 ["recover"]):
        with pytest.raises(SystemExit) as stop:
            main(["dataset", *argv, "--name", ""])
        assert stop.value.code == 2
        assert "argument --name: empty: give the dataset's name" in capsys.readouterr().err
    from robolearn.data.episode import DatasetError
    from robolearn.data.importing import import_dataset

    with pytest.raises(DatasetError, match="bad dataset name ''"):  # in Python too, before the file is read
        import_dataset(source, "d4rl", name="", overwrite=True)
    assert Dataset.load("pendulum").num_episodes == 2


def test_a_replay_on_an_env_that_takes_no_simulator_state_does_not_say_there_is_none(recorded, capsys):
    """A hopper recording replayed on gym:Hopper-v5 (no state to restore there) had said "(no recorded state)",
    though every step's state is in the dataset."""
    recorded("hopper", 1, num_envs=1)
    assert main(["dataset", "replay", "hopper", "--task", "gym:Hopper-v5"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("from the env's own reset (the recorded simulator state is not one gym:Hopper-v5 takes)")
