"""The offline runner: BC of a scripted swing-up on a recorded pendulum dataset, evaluation with the
normalized score, export and reload, exact resume, and errors that name the dataset and the env."""

from __future__ import annotations

import json
import re
import time
import warnings
from pathlib import Path

import pytest
import torch

import sims
from robolearn import load_config
from robolearn.checkpoint import CheckpointError, load_checkpoint
from robolearn.cli import main
from robolearn.data import Dataset, DatasetError, DatasetWriter, record
from robolearn.data.record import RandomController
from robolearn.evaluate import evaluate
from robolearn.export import ExportedController
from robolearn.offline_runner import OfflineRunner, check_dataset_fits
from robolearn.config import load_run_config
from robolearn.runner import train

SCRIPTED_RETURN = 405.0  # the swing_up fixture (conftest.py), 10 episodes


@pytest.fixture(scope="module")
def datasets_root(tmp_path_factory, swing_up):
    """A pendulum dataset of the scripted controller (8 episodes, 4000 steps, action noise 0.2)."""
    root = tmp_path_factory.mktemp("datasets")
    with sims.make_env("pendulum", num_envs=8, seed=0, num_threads=1) as env:
        meta = {"task": "pendulum", "task_kwargs": {}, "controller": "scripted swing-up",
                "ref_min_score": 0.0, "ref_max_score": SCRIPTED_RETURN}
        with DatasetWriter("pendulum-scripted", env.observation_spec, env.action_spec, metadata=meta, root=root) as writer:
            record(swing_up, env, writer, 8, noise=0.2, seed=0, progress=False)
    return root


@pytest.fixture
def root(datasets_root, monkeypatch):
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(datasets_root))
    return datasets_root


def tiny(tmp_path, *extra: str):
    return load_config("bc_pendulum", [f"run_dir={tmp_path / 'runs'}", "dataset=pendulum-scripted",
                                       "logging.wandb=disabled", "logging.progress=false", "runner.video_seconds=0",
                                       "runner.eval_episodes=4", "env.num_envs=4", *extra])


def test_bc_of_a_scripted_swing_up_reaches_most_of_its_return_and_exports(root, tmp_path):
    torch.manual_seed(0)
    result = train(tiny(tmp_path, "runner.total_steps=3000"))
    assert result.evaluation["normalized_score"] > 0.7, result.evaluation
    assert result.evaluation["dataset"] == "pendulum-scripted-v0" and result.evaluation["updates"] == 3000
    assert json.loads((result.run_dir / "eval.json").read_text()) == result.evaluation
    lines = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["updates"] for line in lines] == [1000, 2000, 3000]
    assert all("eval/normalized_score" in line and line["updates_per_s"] > 0 for line in lines)
    exported = ExportedController(result.exported["onnx"])
    with sims.make_env("pendulum", num_envs=4, seed=3, num_threads=1) as env:
        reloaded = evaluate(exported, env, 4, seed=3)
    assert reloaded["return_mean"] > 0.7 * SCRIPTED_RETURN


def test_eval_list_and_dataset_info_say_the_normalized_score_on_one_scale(root, tmp_path, capsys):
    """The run's evaluation had a normalized score that `eval` and `list` left out, and `dataset info` said it
    on another scale (0.96 where runs say 96.0)."""
    result = train(tiny(tmp_path, "runner.total_steps=1000", "agent.hidden=[16,16]"))
    capsys.readouterr()
    assert main(["list", "--runs", str(result.run_dir)]) == 0
    score = 100 * result.evaluation["normalized_score"]
    assert f", normalized score {score:.1f}" in capsys.readouterr().out
    assert main(["eval", str(result.run_dir), "--episodes", "2"]) == 0
    assert re.search(r"over 2 episodes, success \d+%, normalized score -?\d+\.\d; dynamics", capsys.readouterr().out)
    assert main(["dataset", "info", "pendulum-scripted"]) == 0
    mean = 100 * Dataset.load("pendulum-scripted").summary()["normalized_score_mean"]
    assert f"normalized_score_mean (x100): {mean:.4g}" in capsys.readouterr().out


def test_eval_scores_a_run_on_the_reference_returns_it_trained_under(root, tmp_path, monkeypatch, capsys):
    """eval had rescored a run on whatever dataset now has its dataset's name (replaced, or gone: no score);
    the run's eval.json keeps the reference returns it was scored on."""
    result = train(tiny(tmp_path, "runner.total_steps=1000", "agent.hidden=[16,16]"))
    assert (result.evaluation["ref_min_score"], result.evaluation["ref_max_score"]) == (0.0, SCRIPTED_RETURN)
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(tmp_path / "elsewhere"))  # the dataset is gone
    capsys.readouterr()
    assert main(["eval", str(result.run_dir), "--episodes", "2", "--json"]) == 0
    evaluation = json.loads(capsys.readouterr().out)
    assert evaluation["normalized_score"] == pytest.approx(evaluation["return_mean"] / SCRIPTED_RETURN)


def test_resume_continues_exactly(root, tmp_path):
    cfg = tiny(tmp_path, "runner.total_steps=2000", "runner.eval_episodes=0", "agent.hidden=[32,32]",
               "agent.batch_size=32")
    straight = OfflineRunner(cfg)
    straight.train()
    straight.close()

    cfg = tiny(tmp_path, "runner.total_steps=1000", "runner.eval_episodes=0", "agent.hidden=[32,32]",
               "agent.batch_size=32")
    first = OfflineRunner(cfg)
    first.train()
    first.close()
    cfg.runner.total_steps = 2000
    resumed = OfflineRunner(cfg, resume=first.run_dir)
    assert resumed.progress.updates == 1000
    resumed.train()
    resumed.close()
    a, b = (load_checkpoint(r.checkpoint_path) for r in (straight, resumed))
    assert b["progress"]["updates"] == 2000
    for key, value in a["agent"]["actor"].items():
        torch.testing.assert_close(b["agent"]["actor"][key], value, rtol=0, atol=0)


def test_a_failed_resume_or_build_writes_nothing(root, tmp_path):
    """A resume whose override the checkpoint cannot take leaves the run's config as it was; a
    fresh config that fails to build leaves no run directory."""
    first = OfflineRunner(tiny(tmp_path, "runner.total_steps=1000", "runner.eval_episodes=0", "agent.hidden=[32,32]"))
    first.train()
    first.close()
    config = (first.run_dir / "config.yaml").read_bytes()
    with pytest.raises(CheckpointError, match="this model expects"):
        OfflineRunner(tiny(tmp_path, "agent.hidden=[64,64]"), resume=first.run_dir)
    assert (first.run_dir / "config.yaml").read_bytes() == config
    with pytest.raises(ValueError):
        OfflineRunner(tiny(tmp_path, "env.kwargs.nope=1"))  # fails while building, after the config loaded
    assert [path.parent for path in (tmp_path / "runs").glob("*/*/config.yaml")] == [first.run_dir]


def test_a_config_that_cannot_be_written_leaves_no_run_and_closes_the_env(root, tmp_path, monkeypatch):
    import robolearn.runner as runner_module

    closed = []
    monkeypatch.setattr(OfflineRunner, "close", lambda self: closed.append(self.env.close()))

    def full_disk(run_dir, cfg):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner_module, "write_config", full_disk)
    with pytest.raises(OSError, match="No space left"):
        OfflineRunner(tiny(tmp_path))
    assert closed and not list((tmp_path / "runs").glob("*/*"))


def test_dataset_of_another_env_is_refused_naming_both(root, tmp_path):
    cfg = load_config("bc_hopper", [f"run_dir={tmp_path / 'runs'}", "dataset=pendulum-scripted", "logging.wandb=disabled"])
    with pytest.raises(DatasetError, match=r"dataset 'pendulum-scripted-v0' does not fit the config's env 'hopper': "
                                           r"task 'pendulum' vs 'hopper'; observations .*\(3,\).*\(11,\).*"
                                           r"\(dataset vs env\); to train on it, add env.task=pendulum$"):
        OfflineRunner(cfg)
    assert not (tmp_path / "runs").exists()  # nothing written for a refused run
    # a goal-conditioned learner reads a goal on any task: the dataset's own task would be refused in turn
    cfg = load_config("hiql_point_maze_medium", [f"run_dir={tmp_path / 'runs'}", "dataset=pendulum-scripted",
                                                 "logging.wandb=disabled"])
    with pytest.raises(DatasetError) as err:
        OfflineRunner(cfg)
    assert str(err.value).endswith("(dataset vs env); the learner reads observation groups ['policy', 'goal'] on any "
                                   "task, and the dataset has no ['goal']: give it a dataset of a goal-conditioned "
                                   "task (`robolearn dataset list`)")


def test_skills_transferred_from_a_task_this_install_lacks_say_it_is_none(tmp_path):
    """The skill transfer's warning had said "recorded on task 'pendulm'" as if that were another task, where it is
    a typo or another install's task: it says so, with the nearest task."""
    with sims.make_env("pendulum", num_envs=1, seed=0, num_threads=1) as env:
        with DatasetWriter("typo", env.observation_spec, env.action_spec, root=tmp_path,
                           metadata={"task": "pendulm"}) as writer:
            record(RandomController(env, 0), env, writer, 1, seed=0, progress=False)
        with pytest.warns(UserWarning, match=r"recorded on task 'pendulm', which is no task here \(did you mean "
                                             r"'pendulum'\?\), and its skills are used on 'pendulum'"):
            check_dataset_fits(Dataset.load("typo", tmp_path), "pendulum", env, transfer=True)


def test_a_dataset_of_a_task_this_install_lacks_is_not_told_to_train_on_it(tmp_path):
    """Data whose metadata names a task that is no task here (a typo, another install's) had been told "to train
    on it, add env.task=pendulm", an override that fails in turn."""
    with sims.make_env("pendulum", num_envs=1, seed=0, num_threads=1) as env:
        with DatasetWriter("typo", env.observation_spec, env.action_spec, root=tmp_path,
                           metadata={"task": "pendulm"}) as writer:
            record(RandomController(env, 0), env, writer, 1, seed=0, progress=False)
        with pytest.raises(DatasetError) as err:
            check_dataset_fits(Dataset.load("typo", tmp_path), "pendulum", env)
    assert "task 'pendulm' vs 'pendulum'" in str(err.value) and "add env.task" not in str(err.value)
    # written here, not imported: exported then imported (import's formats are d4rl, lerobot, recording)
    assert str(err.value).endswith("its task 'pendulm' is no task here (did you mean 'pendulum'?): robolearn dataset "
                                   "export typo-v0 --format d4rl --out FILE.hdf5, then import that with --task and "
                                   "the task it was recorded on")
    typo = Dataset.load("typo", tmp_path)
    typo.raw_metadata["robolearn"]["source"] = "d4rl:/data/typo.hdf5"  # (as an import writes it)
    with sims.make_env("pendulum", num_envs=1, seed=0, num_threads=1) as env, pytest.raises(DatasetError) as err:
        check_dataset_fits(typo, "pendulum", env)
    assert str(err.value).endswith("(did you mean 'pendulum'?): import it again with --task and the task it was "
                                   "recorded on")


def test_an_episode_length_other_than_the_recordings_is_said_even_from_default_settings(tmp_path):
    """A recording at the task's defaults keeps no task_kwargs: an env with another episode length had not been
    told, though its metadata says how long the recorded episodes ran."""
    from robolearn.data import env_metadata

    with sims.make_env("pendulum", num_envs=1, seed=0, num_threads=1) as env:
        with DatasetWriter("defaults", env.observation_spec, env.action_spec, root=tmp_path,
                           metadata=env_metadata(env, "pendulum")) as writer:
            record(RandomController(env, 0), env, writer, 1, seed=0, progress=False)
    dataset = Dataset.load("defaults", tmp_path)
    assert dataset.info["task_kwargs"] == {} and dataset.info["max_episode_steps"] == 500
    with sims.make_env("pendulum", num_envs=1, seed=0, num_threads=1, max_episode_steps=200) as env:
        with pytest.warns(UserWarning, match=r"recorded with task settings max_episode_steps=500, the env has "
                                             r"max_episode_steps=200; .* add env.kwargs.max_episode_steps=500"):
            check_dataset_fits(dataset, "pendulum", env)


def test_other_command_ranges_than_the_recordings_are_said_with_an_override_that_pastes(tmp_path):
    """Lists in a recording's task_kwargs (Go1's command_ranges) were not compared; compared, the override said
    for them must survive a shell and read back as the recorded ranges."""
    import shlex

    from robolearn.data import env_metadata

    still = ((-1.0, 1.0), (0.0, 0.0), (0.0, 0.0))
    with sims.make_env("go1_flat", num_envs=1, seed=0, num_threads=1, max_episode_steps=3, command_ranges=still) as env:
        metadata = env_metadata(env, "go1_flat", {"max_episode_steps": 3, "command_ranges": still})
        with DatasetWriter("still", env.observation_spec, env.action_spec, root=tmp_path, metadata=metadata) as writer:
            record(RandomController(env, 0), env, writer, 1, seed=0, progress=False)
    dataset = Dataset.load("still", tmp_path)
    with sims.make_env("go1_flat", num_envs=1, seed=0, num_threads=1, max_episode_steps=3) as env:
        with pytest.warns(UserWarning, match=re.escape("recorded with task settings command_ranges=[[-1.0, 1.0], [0.0, "
                                                       "0.0], [0.0, 0.0]], the env has command_ranges=[[-1.0, 1.0], "
                                                       "[-1.0, 1.0], [-1.0, 1.0]]")) as said:
            check_dataset_fits(dataset, "go1_flat", env)
    override = str(said[0].message).rpartition("add ")[2]
    assert override == "'env.kwargs.command_ranges=[[-1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]'"
    cfg = load_config("ppo_go1_flat", shlex.split(override))
    with sims.make_env("go1_flat", 1, seed=0, num_threads=1, **cfg.env.kwargs) as env:
        assert env.task.command_ranges == still


def test_data_that_fits_only_by_shape_is_doubted_aloud(tmp_path):
    """No task recorded, another control period, no rewards: each said when the run starts, then trained on."""
    with sims.make_env("pendulum", num_envs=1, seed=0, num_threads=1) as env:
        writer = DatasetWriter("unsure", env.observation_spec, env.action_spec, root=tmp_path,
                               metadata={"control_dt": 2 * env.control_dt, "rewards": "absent"})
        with writer:
            record(RandomController(env, 0), env, writer, 1, seed=0, progress=False)
        dataset = Dataset.load("unsure", tmp_path)
        with pytest.warns(UserWarning) as said:
            check_dataset_fits(dataset, "pendulum", env)
        with pytest.warns(UserWarning) as said_to_bc:
            check_dataset_fits(dataset, "pendulum", env, reads_rewards=False)
    doubts = " | ".join(str(w.message) for w in said)
    assert "does not say which task" in doubts and "--task pendulum" in doubts
    assert "control period of 0.04 s, the env steps 0.02 s" in doubts and "no rewards (they are all 0)" in doubts
    assert len(said_to_bc) == 2 and "no rewards" not in " | ".join(str(w.message) for w in said_to_bc)


def test_a_dataset_of_a_few_episodes_is_said_to_be_small(root, tmp_path):
    """A handful of robot episodes trains a policy that rarely does well beyond them: said when the run starts."""
    from robolearn.offline_runner import size_doubt

    def two_episodes(name: str, into: Path) -> None:
        with sims.make_env("pendulum", num_envs=1, seed=0, num_threads=1) as env:
            meta = {"task": "pendulum", "task_kwargs": {}}
            with DatasetWriter(name, env.observation_spec, env.action_spec, root=into, metadata=meta) as writer:
                record(RandomController(env, 0), env, writer, 2, seed=0, progress=False)

    two_episodes("few", root)
    with pytest.warns(UserWarning, match=r"dataset 'few-v0': it holds only 2 episode\(s\), under 5 and 1000 "
                                         r"transitions, under 10 minibatches of agent.batch_size=256.*dataset merge"):
        OfflineRunner(tiny(tmp_path, "dataset=few", "runner.total_steps=1000")).close()
    two_episodes("few-cut", tmp_path)  # cut short: its error alone, not a warning that it is small
    data = tmp_path / "few-cut-v0" / "data" / "main_data.hdf5"
    data.write_bytes(data.read_bytes()[:2000])
    with warnings.catch_warnings(record=True) as said, pytest.MonkeyPatch.context() as patch:
        warnings.simplefilter("always")
        patch.setenv("ROBOLEARN_DATASETS", str(tmp_path))
        with pytest.raises(DatasetError, match="unreadable dataset|main_data"):
            OfflineRunner(tiny(tmp_path, "dataset=few-cut", "runner.total_steps=1000")).close()
    assert not [w for w in said if "holds only" in str(w.message)]
    assert size_doubt(4000, 8, 256) is None  # the fixture's 8 scripted episodes: enough
    # only what falls short is said (20 episodes had been called "under 5 episodes or 10 minibatches")
    assert size_doubt(2000, 20, 256).startswith("it holds only 2000 transitions, under 10 minibatches of agent.batch")
    # robolearn deploy runs on a robot: named for a robot's recording, not for a hopper's simulated data
    assert "robolearn deploy" not in size_doubt(2000, 20, 256) and "robolearn dataset record" in size_doubt(2000, 20, 256)
    # and not dataset record: the sim's recordings lack the robot's joint_state, and merge refuses to join them
    robot = size_doubt(2000, 20, 256, from_robot=True)
    assert "(robolearn deploy --episodes N, then robolearn dataset import) and join them" in robot
    assert "dataset record" not in robot


def test_a_merge_or_split_of_robot_recordings_is_still_told_to_deploy_for_more(tmp_path):
    """The small-dataset warning names `robolearn deploy` for a robot's recording, as told by its source: a merge of
    two (which that warning advises) is the merge's source, so it had been told to `dataset record` alone."""
    from robolearn.data import merge, split
    from robolearn.offline_runner import from_robot

    made = []
    for i in range(2):
        with sims.make_env("pendulum", num_envs=1, seed=0, num_threads=1) as env:
            meta = {"task": "pendulum", "task_kwargs": {}, "source": f"recording:/runs/x/deploy/{i}",
                    "recording": {"seed": i}}
            with DatasetWriter(f"robot{i}", env.observation_spec, env.action_spec, root=tmp_path, metadata=meta) as w:
                record(RandomController(env, 0), env, w, 2, seed=0, progress=False)
        made.append(Dataset.load(f"robot{i}", root=tmp_path))
    both = merge(made, "robots", root=tmp_path)
    assert both.info["source"].startswith("merge of") and from_robot(both.info)
    assert all(from_robot(part.info) for part in split(both, [0.5, 0.5], root=tmp_path))
    with sims.make_env("pendulum", num_envs=1, seed=0, num_threads=1) as env:
        with DatasetWriter("sim", env.observation_spec, env.action_spec, root=tmp_path,
                           metadata={"task": "pendulum", "task_kwargs": {}}) as w:
            record(RandomController(env, 0), env, w, 2, seed=0, progress=False)
    assert not from_robot(Dataset.load("sim", root=tmp_path).info)


def test_cli_errors_are_one_line(root, tmp_path, capsys):
    base = ["train", "bc_pendulum", f"run_dir={tmp_path / 'runs'}", "--no-wandb"]
    assert main(base + ["dataset=pendulum-scripted", "runner.total_steps=0"]) == 2  # had exported an untrained one
    assert "runner.total_steps: an offline run counts updates, at least 1; got 0" in capsys.readouterr().err
    assert main(base + ["dataset=nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no dataset 'nope'" in err and "pendulum-scripted-v0" in err
    assert main(base + ["dataset=''"]) == 2
    assert "give dataset=<name> (`robolearn dataset list` shows those there are; make one of a trained run's " \
           "episodes with `robolearn dataset record --run RUN --episodes 100 --name pendulum-expert`" \
           in capsys.readouterr().err  # it had said only where to list the (none) there are
    assert main(["train", "sac_pendulum", "dataset=pendulum-scripted", f"run_dir={tmp_path / 'runs'}", "--no-wandb"]) == 2
    assert "learns online" in capsys.readouterr().err


def test_ctrl_c_stops_between_updates_and_the_resume_is_exact(root, tmp_path):
    """Ctrl+C mid-iteration saves exactly the updates the agent holds; the resume finishes that
    iteration (logged updates stay on the 1000 grid) and ends where an uninterrupted run ends, its line
    averaging all that iteration's updates as that run's does (it had averaged only those after the resume)."""
    def cfg(total):
        return tiny(tmp_path, f"runner.total_steps={total}", "runner.eval_episodes=0", "agent.hidden=[32,32]")

    straight = OfflineRunner(cfg(2000))
    straight.train()
    straight.close()

    first = OfflineRunner(cfg(2000))
    update, calls = first.agent.update, [0]

    def press_at_1500(batch):
        calls[0] += 1
        if calls[0] == 1500:
            time.sleep(1.0)  # a slow stretch: its seconds are the run's too, though after its last logged line
            first.ctrl_c.pending = True  # what the first SIGINT does; the loop raises at its next safe point
        return update(batch)

    first.agent.update = press_at_1500
    assert first.train().interrupted
    first.close()
    saved = load_checkpoint(first.checkpoint_path)
    assert saved["progress"]["updates"] == calls[0] == 1500
    last_line = json.loads((first.run_dir / "metrics.jsonl").read_text().splitlines()[-1])  # at 1000 updates
    assert saved["progress"]["seconds"] > last_line["time"]  # the time to 1500 is kept for the resume's lines
    resumed = OfflineRunner(cfg(2000), resume=first.run_dir)
    resumed.train()
    resumed.close()
    logged = [json.loads(line) for line in (first.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["updates"] for line in logged] == [1000, 2000]
    assert logged[-1]["time"] > saved["progress"]["seconds"]  # time goes on from the checkpoint's
    clock = ("time", "updates_per_s", "iteration_time")
    one_go = [json.loads(line) for line in (straight.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in line.items() if k not in clock} for line in logged] == \
        [{k: v for k, v in line.items() if k not in clock} for line in one_go]
    assert saved["progress"]["update_sums"]["counts"]["bc_loss"] == 500  # those of the 500 before the Ctrl+C
    assert not resumed.progress.update_sums  # taken at the resume: an iteration's end holds none
    a, b = (load_checkpoint(r.checkpoint_path)["agent"]["actor"] for r in (straight, resumed))
    for key, value in a.items():
        torch.testing.assert_close(b[key], value, rtol=0, atol=0)


def test_raising_total_steps_on_resume_stretches_iqls_schedule(root, tmp_path):
    """IQL's actor cosine spans the run (agent.total_updates 0 = auto); a finished run resumed with more
    steps trains its actor on, rather than at the finished schedule's zero learning rate."""
    def cfg(total):
        return load_config("iql_hopper", [f"run_dir={tmp_path / 'runs'}", "dataset=pendulum-scripted", "env.task=pendulum",
                                          "logging.wandb=disabled", "logging.progress=false", "runner.video_seconds=0",
                                          "runner.eval_episodes=0", f"runner.total_steps={total}", "agent.hidden=[16,16]"])

    first = OfflineRunner(cfg(1000))
    first.train()
    first.close()
    assert load_run_config(first.run_dir).agent.total_updates == 0  # auto, as given
    before = load_checkpoint(first.checkpoint_path)["agent"]["actor"]
    resumed = OfflineRunner(cfg(2000), resume=first.run_dir)
    resumed.train()
    resumed.close()
    after = load_checkpoint(resumed.checkpoint_path)["agent"]["actor"]
    assert any(not torch.equal(before[k], after[k]) for k in before)

    # a run saved by the earlier code carries the auto horizon as a number (its total_steps): stretched too
    config = first.run_dir / "config.yaml"
    config.write_text(config.read_text().replace("total_updates: 0", "total_updates: 2000"))
    resumed = OfflineRunner(cfg(3000), resume=first.run_dir)
    assert resumed.cfg.agent.total_updates == 0
    resumed.close()


def test_an_offline_stop_reads_updates_and_one_that_raises_leaves_a_checkpoint(root, tmp_path):
    small = ["runner.eval_episodes=0", "agent.hidden=[16,16]", "agent.batch_size=32"]  # (what stop sees is counts)
    seen = []
    train(tiny(tmp_path, "runner.total_steps=3000", *small),
          stop=lambda m: seen.append((m["updates"], m["iteration"])) or m["updates"] >= 2000)
    assert seen == [(1000, 1), (2000, 2)]  # iteration as an online run's stop has it

    def fails(metrics):
        raise KeyError("env_steps")  # an online run's counter, asked of an offline one

    with pytest.raises(KeyError) as raised:
        train(tiny(tmp_path / "again", "runner.total_steps=3000", *small), stop=fails)
    note = "\n".join(raised.value.__notes__)
    assert "raised by train()'s stop callback (metrics: " in note and "updates" in note
    run = Path(re.search(r"train\(resume='([^']+)'\)", note)[1])
    assert (run / "checkpoints" / "latest.pt").is_file()


def test_an_offline_stop_is_asked_at_the_last_iteration_too_as_an_online_one(root, tmp_path):
    """An online run asks stop after every iteration, its last included; an offline one had skipped its last, whose
    metrics hold the last evaluation, so a stop that also records what it sees had missed it."""
    seen = []
    train(tiny(tmp_path, "runner.total_steps=2000", "runner.eval_episodes=1", "runner.checkpoint_every=2",
               "agent.hidden=[16,16]", "agent.batch_size=32"),
          stop=lambda m: seen.append((m["updates"], m["iteration"], "eval/return" in m)) or False)
    assert seen == [(1000, 1, False), (2000, 2, True)]


def test_an_offline_runner_built_by_hand_gives_torch_settings_back_when_its_train_returns(root, tmp_path):
    """As the online Runner: only robolearn.train() had put the caller's threads and matmul precision back."""
    threads, precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
    torch.set_num_threads(2)
    torch.set_float32_matmul_precision("high")
    try:
        runner = OfflineRunner(tiny(tmp_path, "runner.total_steps=1000", "runner.eval_episodes=0", "agent.hidden=[16,16]",
                                    "runner.torch_threads=1", "runner.matmul_precision=medium"))
        assert (torch.get_num_threads(), torch.get_float32_matmul_precision()) == (1, "medium")
        runner.train()
        assert (torch.get_num_threads(), torch.get_float32_matmul_precision()) == (2, "high")
        runner.close()
    finally:
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(precision)


def test_max_minutes_ends_an_offline_run_early_and_still_evaluates(root, tmp_path):
    """runner.max_minutes was ignored offline: a run given minutes trained to its whole runner.total_steps."""
    result = train(tiny(tmp_path, "runner.total_steps=5000", "runner.max_minutes=0.005", "agent.hidden=[16,16]"))
    lines = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert 0 < result.trained["updates"] == lines[-1]["updates"] < 5000  # whole iterations, begun within the budget
    assert result.evaluation["updates"] == result.trained["updates"] and (result.run_dir / "eval.json").is_file()


def test_a_dataset_whose_groups_have_other_names_says_its_own():
    """A Minari goal dataset (observation, achieved_goal, desired_goal) had been refused as 'observations {} vs ...',
    the dataset's groups filtered away before they were said."""
    from types import SimpleNamespace

    from gymnasium import spaces

    box = lambda n: spaces.Box(-1.0, 1.0, (n,))  # noqa: E731
    dataset = SimpleNamespace(id="pointmaze/gc-v0", task=None, action_spec=box(2),
                              observation_spec={"observation": box(4), "achieved_goal": box(2), "desired_goal": box(2)})
    env = SimpleNamespace(observation_spec={"policy": box(4), "goal": box(2)}, action_spec=box(2))
    with pytest.raises(DatasetError, match=r"observation groups \['goal', 'policy'\] missing: the dataset's groups are "
                                           r"\{'observation': \(4,\), 'achieved_goal': \(2,\), 'desired_goal': \(2,\)\}, "
                                           r"the env's \{'policy': \(4,\), 'goal': \(2,\)\}; the groups must have"):
        check_dataset_fits(dataset, "point_maze", env)


def test_an_iteration_is_logged_before_its_checkpoint(root, tmp_path, monkeypatch):
    """Saved first, a kill between the two had lost the iteration's metrics row and its evaluation for good (a resume
    goes on after the checkpoint); logged first, a row past the checkpoint is set aside and done again."""
    from robolearn.logger import read_metrics

    seen = []
    real_save = OfflineRunner.save

    def save(runner):
        if runner.progress.updates:
            seen.append(read_metrics(runner.run_dir)[-1]["updates"] == runner.progress.updates)
        real_save(runner)

    monkeypatch.setattr(OfflineRunner, "save", save)
    train(tiny(tmp_path, "runner.total_steps=2000", "runner.checkpoint_every=1", "agent.hidden=[16,16]",
               "agent.batch_size=32"))
    assert len(seen) >= 2 and all(seen)  # both iterations' rows, with their evaluations, before the checkpoints


def test_a_replay_of_another_env_is_refused_naming_the_remedy(tmp_path):
    """A replay.pt copied from another task's run had loaded, then failed the first write with torch's shape error."""
    from types import SimpleNamespace

    from gymnasium import spaces

    from robolearn.checkpoint import load_replay
    from robolearn.storage import ReplayBuffer

    path = tmp_path / "replay.pt"
    torch.save({"data": {"obs": {"policy": torch.zeros(8, 5)}, "action": torch.zeros(8, 1)}, "position": 8,
                "size": 8, "env_steps": 8}, path)
    env = SimpleNamespace(observation_spec={"policy": spaces.Box(-1, 1, (3,))}, action_spec=spaces.Box(-1, 1, (1,)))
    with pytest.raises(CheckpointError, match=r"holds transitions of another env \(obs 'policy' of shape \(5,\), "
                                              r"this env's \(3,\)\), not this run's; restore it from a copy"):
        load_replay(path, ReplayBuffer(16, "cpu"), 8, "cpu", env=env)


def test_a_replay_with_actions_of_another_size_is_refused(tmp_path):
    from types import SimpleNamespace

    from gymnasium import spaces

    from robolearn.checkpoint import load_replay
    from robolearn.storage import ReplayBuffer

    path = tmp_path / "replay.pt"
    torch.save({"data": {"obs": {"policy": torch.zeros(8, 3)}, "action": torch.zeros(8, 2)}, "position": 8,
                "size": 8, "env_steps": 8}, path)
    env = SimpleNamespace(observation_spec={"policy": spaces.Box(-1, 1, (3,))}, action_spec=spaces.Box(-1, 1, (1,)))
    with pytest.raises(CheckpointError, match=r"another env \(actions of shape \(2,\), this env's \(1,\)\)"):
        load_replay(path, ReplayBuffer(16, "cpu"), 8, "cpu", env=env)
