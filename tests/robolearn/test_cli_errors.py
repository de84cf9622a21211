"""User mistakes end in one ``error: ...`` line that names the key, flag or file, and exit status 2."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from robolearn.cli import main
from robolearn.config import ConfigError, config_from_dict, load_config


def error(capsys) -> str:
    """The one stderr line of a failed command."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(tmp_path / "ds"))
    return tmp_path / "ds"


@pytest.fixture
def cartpole_export(tmp_path) -> Path:
    """A TorchScript controller with a cartpole controller.json (5 observations), as `robolearn export` writes."""
    out = tmp_path / "export"
    out.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.script(torch.nn.Linear(5, 1)).save(str(out / "controller.pt"))
    meta = {"obs_groups": ["policy"], "obs_size": 5, "decision_period": 1, "inputs": {"obs": [5]},
            "outputs": ["action"], "task": "cartpole", "control_dt": 0.02}
    (out / "controller.json").write_text(json.dumps(meta))
    return out / "controller.pt"


# -- 1: counts and durations name their key or flag -------------------------------------------

@pytest.mark.parametrize("value", ["-4", "0"])
def test_num_envs_must_be_positive(value, capsys):
    assert main(["train", f"env.num_envs={value}", "--no-wandb"]) == 2
    assert f"env.num_envs: must be at least 1, got {value}" in error(capsys)


@pytest.mark.parametrize("value", ["3000000000", "1e99"])
def test_num_envs_beyond_what_mujoco_takes_is_refused_by_name(value, capsys):
    # had ended in MuJoCo's TypeError "incompatible constructor arguments" and a traceback, after the imports
    assert main(["train", f"env.num_envs={value}", "--no-wandb"]) == 2
    assert "env.num_envs: must be at most 2147483647" in error(capsys)


def test_record_num_envs_beyond_what_mujoco_takes_is_refused(root, capsys):
    assert main(["dataset", "record", "--controller", "random", "--task", "cartpole", "--episodes", "1",
                 "--num-envs", "3000000000"]) == 2
    assert "num_envs: a whole number of worlds, from 1 to 2147483647" in error(capsys)


@pytest.mark.parametrize("value", ["-3", "0"])
def test_eval_episodes_must_be_positive(value, tmp_path, capsys):
    assert main(["eval", str(tmp_path), "--episodes", value]) == 2
    assert "--episodes must be positive" in error(capsys)


@pytest.mark.parametrize("seed, says", [("-5", "seed -5 must be in [0, 2**32 - 1]"),
                                         ("99999999999999999999", "seed 99999999999999999999 must be in"),
                                         ("x", "invalid seed 'x': a whole number")])
@pytest.mark.parametrize("command", ["eval RUN", "play RUN --video v.mp4", "dataset record --controller random "
                                     "--task pendulum"])
def test_a_seed_outside_what_train_takes_is_refused_by_every_command(seed, says, command, tmp_path, capsys):
    """Commands other than train had taken -5, and said only "Overflow when unpacking long long" for a huge one."""
    with pytest.raises(SystemExit) as done:
        main([*command.replace("RUN", str(tmp_path)).split(), "--seed", seed])
    assert done.value.code == 2 and says in capsys.readouterr().err


def test_play_seconds_must_be_positive(tmp_path, capsys):
    assert main(["play", str(tmp_path), "--video", str(tmp_path / "v.mp4"), "--seconds", "-1"]) == 2
    assert "--seconds must be positive" in error(capsys)


@pytest.mark.parametrize("seconds", ["inf", "nan"])
def test_play_seconds_must_be_finite(seconds, tmp_path, capsys):
    # inf had filmed nothing and ended in "OverflowError: cannot convert float infinity to integer"
    assert main(["play", str(tmp_path), "--video", str(tmp_path / "v.mp4"), "--seconds", seconds]) == 2
    assert "--seconds must be a positive, finite number" in error(capsys)


def test_evaluate_refuses_zero_episodes():
    from robolearn.evaluate import evaluate

    with pytest.raises(ValueError, match="at least 1 episode"):
        evaluate(None, SimpleNamespace(num_envs=1), 0)  # type: ignore[arg-type]


@dataclass
class ToyAgentConfig:
    gamma: float = 0.99


@pytest.mark.parametrize("gamma", [1.5, 0, -0.1])
def test_gamma_outside_0_1_is_refused(gamma, monkeypatch):
    import policies

    monkeypatch.setitem(policies.AGENTS, "toy", (ToyAgentConfig, object))
    with pytest.raises(ConfigError, match=r"agent.gamma: the discount must be in \(0, 1\]"):
        config_from_dict({"algo": "toy", "agent": {"gamma": gamma}})
    assert config_from_dict({"algo": "toy", "agent": {"gamma": 1}}).agent.gamma == 1.0


def test_gamma_through_the_cli(capsys):
    assert main(["train", "ppo_cartpole", "agent.gamma=1.5", "--no-wandb"]) == 2
    assert "agent.gamma" in error(capsys)


# -- 2: malformed YAML names the file and line ---------------------------------------------------

def test_malformed_config_file_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algo: ppo\nenv:\n  task: [cartpole\n")
    assert main(["train", str(bad), "--no-wandb"]) == 2
    err = error(capsys)
    assert f"{bad}: line 4" in err and "invalid YAML" in err and "<unicode string>" not in err


@pytest.mark.parametrize("command", [["eval"], ["export"], ["train", "--no-wandb", "--resume"]])
def test_malformed_run_config_names_the_file(command, tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("algo: ppo\nenv: {task: cartpole\n")
    assert main([*command, str(tmp_path)]) == 2
    assert f"{tmp_path / 'config.yaml'}: line 3" in error(capsys)


def test_a_run_config_cut_short_is_refused_and_restored_as_the_error_says(tmp_path, capsys):
    """A config.yaml cut short had resumed with defaults filled in (another task, another budget)."""
    import shlex
    import subprocess
    import sys

    assert main(["train", "ppo_pendulum", f"run_dir={tmp_path}", "--no-wandb", "env.num_envs=4",
                 "runner.total_steps=128", "runner.eval_episodes=0", "runner.video_seconds=0",
                 "logging.progress=false"]) == 0
    run = next(tmp_path.glob("*/*"))
    whole = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text("".join(whole.splitlines(keepends=True)[:4]))  # algo, name, seed, run_dir
    capsys.readouterr()
    for command in (["train", "--no-wandb", "--resume"], ["eval"]):
        assert main([*command, str(run)]) == 2
        err = error(capsys)
        assert f"{run / 'config.yaml'}: incomplete, without env, runner, agent (cut short or edited?)" in err
    (run / "config.yaml").write_text("")  # emptied: it had been told what a config sets, and eval a mapping
    for command in (["train", "--no-wandb", "--resume"], ["eval"]):
        assert main([*command, str(run)]) == 2
        err = error(capsys)
        assert f"{run / 'config.yaml'}: empty (cut short or edited?): a run's config holds every section; its " \
               "checkpoint keeps the config it trained with: python3 -c" in err
    restore = shlex.split(err.split("trained with: ", 1)[1])
    assert restore[:2] == ["python3", "-c"]
    subprocess.run([sys.executable, "-c", restore[2]], check=True)
    assert main(["train", "--no-wandb", "--resume", str(run), "runner.total_steps=256"]) == 0


def test_resuming_a_run_that_stopped_before_its_first_checkpoint_says_to_train_anew(tmp_path, capsys):
    """A Ctrl+C before the first iteration leaves config.yaml and an empty metrics.jsonl: its resume had said
    only 'no such checkpoint file'."""
    import yaml

    from robolearn.config import to_dict

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(to_dict(load_config("ppo_cartpole")), sort_keys=False))
    (tmp_path / "metrics.jsonl").write_text("")
    assert main(["train", "--no-wandb", "--resume", str(tmp_path)]) == 2
    said = error(capsys)
    assert "no checkpoint to resume from: the run stopped before its first one was saved; train it anew" in said
    assert f"(robolearn train {tmp_path / 'config.yaml'}), then remove this folder" in said  # had said '<config>'


def test_a_resume_with_another_algo_is_refused_naming_both(tmp_path, capsys):
    """`train --resume RUN algo=...` had failed on the run's agent section as the other algorithm's unknown keys
    ("unknown key 'agent.actor_hidden' (did you mean 'agent.hidden'?)"), which a resume cannot act on."""
    import yaml

    import robolearn
    from robolearn.config import to_dict

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(to_dict(load_config("ppo_cartpole")), sort_keys=False))
    assert main(["train", "--no-wandb", "--resume", str(tmp_path), "algo=sac", "runner.total_steps=9"]) == 2
    assert f"algo: {tmp_path} trained with 'ppo'; a resume goes on with its algorithm, not 'sac'" in error(capsys)
    with pytest.raises(ConfigError, match="trained with 'ppo'; a resume goes on with its algorithm, not 'sac'"):
        robolearn.train(resume=tmp_path, overrides={"algo": "sac"})


def test_using_a_run_before_its_first_checkpoint_says_why_there_is_none(tmp_path, root, capsys):
    """eval, play, export and record of such a run had said only '.../latest.pt: no such checkpoint file' (and
    deploy had advised `robolearn export`, which then failed the same way)."""
    import yaml

    from hardware.deploy import deploy
    from robolearn.config import to_dict
    from robolearn.run_lock import RunLock

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(to_dict(load_config("ppo_cartpole")), sort_keys=False))
    commands = [["eval", str(tmp_path)], ["play", str(tmp_path), "--video", str(tmp_path / "a.mp4")],
                ["export", str(tmp_path)], ["dataset", "record", "--run", str(tmp_path), "--episodes", "1"]]
    for command in commands:
        assert main(command) == 2
        assert f"{tmp_path}: no checkpoint: the run stopped before its first one was saved; train it anew" in error(capsys)
    with pytest.raises(FileNotFoundError, match="no exported controller, nor a checkpoint to export one from"):
        deploy(tmp_path, "dxl_arm", port="/dev/null", episodes=1)
    lock = RunLock(tmp_path)  # as if another terminal trained it now
    try:
        for command in commands:
            assert main(command) == 2
            assert (f"{tmp_path}: no checkpoint yet: the run is still training (pid {os.getpid()} " in error(capsys))
        with pytest.raises(FileNotFoundError, match=r"still training \(pid .*\) and has saved no checkpoint to export"):
            deploy(tmp_path, "dxl_arm", port="/dev/null", episodes=1)
    finally:
        lock.release()
    assert not (tmp_path / "a.mp4").exists() and not (tmp_path / "export").exists()


def test_malformed_override_value(capsys):
    assert main(["train", "ppo_cartpole", "agent.actor_hidden=[3,", "--no-wandb"]) == 2
    assert "override 'agent.actor_hidden=[3,'" in error(capsys)


def test_a_config_named_after_the_settings_says_it_goes_first(capsys):
    assert main(["train", "runner.total_steps=1000", "ppo_pendulum", "--no-wandb"]) == 2
    assert "a config goes first, as in robolearn train ppo_pendulum runner.total_steps=1000" in error(capsys)
    assert main(["train", "agent.actor_hidden=[64, 64]", "ppo_pendulum", "--no-wandb"]) == 2  # pasted, it runs
    assert "as in robolearn train ppo_pendulum 'agent.actor_hidden=[64, 64]'" in error(capsys)


def test_a_word_after_the_settings_that_names_no_config_is_said_as_a_bad_override(capsys):
    """'64]' of an unquoted agent.actor_hidden=[64, 64] (or a setting missing its '=') had been called a config to
    put first: "as in robolearn train 64] agent.actor_hidden=[64,"."""
    assert main(["train", "runner.total_steps=1000", "runner.seed", "3", "--no-wandb"]) == 2
    said = error(capsys)
    assert "override 'runner.seed' must look like key=value" in said and "a config goes first" not in said


# -- 3: dataset commands ---------------------------------------------------------------------

def test_replay_episode_out_of_range(root, capsys):
    assert main(["dataset", "record", "--controller", "random", "--task", "pendulum", "--episodes", "1"]) == 0
    assert "\r" not in capsys.readouterr().err  # no progress bar when stderr is not a terminal
    assert main(["dataset", "replay", "pendulum-random", "--episode", "99"]) == 2
    assert "--episode 99: dataset 'pendulum-random-v0' has 1 episode " in error(capsys)


def test_lerobot_import_of_a_file(tmp_path, root, capsys):
    file = tmp_path / "x.hdf5"
    file.write_bytes(b"not hdf5")
    assert main(["dataset", "import", str(file), "--format", "lerobot"]) == 2
    assert "lerobot expects a directory" in error(capsys)


def test_record_refuses_a_controller_of_another_task(cartpole_export, root, capsys):
    assert main(["dataset", "record", "--controller", str(cartpole_export), "--task", "pendulum", "--episodes", "1"]) == 2
    err = error(capsys)
    assert "trained on 'cartpole'" in err and "size 5" in err and "'pendulum' gives 3" in err
    assert not root.exists() or not any(root.iterdir())  # nothing written


@pytest.mark.parametrize("damage, says", [
    (lambda meta: "{", "not readable JSON"),
    (lambda meta: "[" * 100_000 + "]" * 100_000, "not readable JSON"),  # had been a RecursionError traceback
    (lambda meta: json.dumps({k: v for k, v in meta.items() if k != "obs_groups"}), "'obs_groups' missing"),
    (lambda meta: json.dumps({**meta, "obs_size": "5"}), "'obs_size' '5' is not what an export writes"),
    (lambda meta: json.dumps({**meta, "inputs": {"skill": [2], "obs": [5]}}), "'inputs' {'skill'"),
    (lambda meta: json.dumps({**meta, "control_dt": "0.02"}), "'control_dt' '0.02' is not what an export writes"),
    # a state's shape, and the settings eval compares, had been torch's and an AttributeError's tracebacks
    (lambda meta: json.dumps({**meta, "inputs": {"obs": [5], "h": "abc"}}), "'inputs' {'obs': [5], 'h': 'abc'}"),
    (lambda meta: json.dumps({**meta, "inputs": {"obs": [5], "h": [-1]}}), "'inputs' {'obs': [5], 'h': [-1]}"),
    # a state of a trillion numbers per env had been torch's allocation traceback at the first step
    (lambda meta: json.dumps({**meta, "inputs": {"obs": [5], "h": [10**6, 10**6]}}),
     "'inputs' state 'h' has shape [1000000, 1000000], 1,000,000,000,000 numbers per env, more than the 16,777,216"),
    (lambda meta: json.dumps({**meta, "task_settings": [1]}), "'task_settings' [1] is not what an export writes"),
    (lambda meta: json.dumps({**meta, "obs_size": True}), "'obs_size' True is not what an export writes"),
    # an observation or a chunk of a trillion numbers had been read as it was: the driver's zeros allocate them
    (lambda meta: json.dumps({**meta, "obs_size": 10**12, "inputs": {"obs": [10**12]}}),
     "'obs_size' 1,000,000,000,000 is more than the 16,777,216 numbers an observation may hold"),
    (lambda meta: json.dumps({**meta, "decision_period": 10**12,
                              "chunk": {"length": 10**12, "mode": "open_loop", "decay": 0.0}}),
     "'chunk' length 1,000,000,000,000 is more than the 4,096 actions a chunk may hold"),
], ids=["json", "nested", "key", "type", "order", "rate", "state-text", "state-negative", "state-huge", "settings",
        "size-bool", "obs-huge", "chunk-huge"])
@pytest.mark.parametrize("command", ["record", "eval"])
def test_a_damaged_controller_json_names_the_file_and_key(cartpole_export, root, capsys, damage, says, command):
    """A controller.json without a key had been a KeyError traceback; bad JSON in `record` named no file."""
    meta_path = cartpole_export.parent / "controller.json"
    meta_path.write_text(damage(json.loads(meta_path.read_text())))
    argv = (["dataset", "record", "--controller", str(cartpole_export), "--episodes", "1"] if command == "record" else
            ["eval", str(cartpole_export.parent.parent), "--exported", "torchscript"])
    if command == "eval":  # a run folder around the export
        (cartpole_export.parent.parent / "config.yaml").write_text(json.dumps({"algo": "ppo", "env": {"task": "cartpole"},
                                                                           "runner": {}, "agent": {}}))
    assert main(argv) == 2
    err = error(capsys)
    assert f"{meta_path}: " in err and says in err and "export it again" in err


def test_record_missing_controller_file(root, capsys):
    assert main(["dataset", "record", "--controller", "nope.pt", "--episodes", "1"]) == 2
    assert "--controller nope.pt: no such file" in error(capsys)


# -- 4: a missing dataset says how to make it ------------------------------------------------

@pytest.mark.parametrize("name, command", [
    ("hopper-medium", "make_datasets.py --tasks hopper"),
    ("walker2d-medium-replay-v0", "make_datasets.py --tasks walker2d"),
    ("point_maze_large-navigate", "make_maze_datasets.py --layouts large"),
    ("kitchen-mixed", "make_kitchen_dataset.py"),
    ("my-data", "robolearn dataset record --run RUN --episodes 100 --name my-data"),
    ("hoper-medium", "did you mean 'hopper-medium'? make that one with `python benchmarks/make_datasets.py --tasks hopper`"),
])
def test_missing_dataset_names_its_generator(name, command, root, capsys):
    assert main(["dataset", "info", name]) == 2
    err = error(capsys)
    assert f"no dataset '{name}'" in err and command in err


def test_a_dataset_given_to_an_online_algorithm_lists_those_that_take_one(root, capsys):
    assert main(["train", "hrac_point_maze_medium", "dataset=my-data", "--no-wandb"]) == 2
    err = error(capsys)
    assert "algo 'hrac' learns online and takes no dataset" in err
    assert "pretraining skills on it ['skill_critic', 'spirl']" in err and "offline-to-online ['calql_finetune'" in err
    assert main(["train", "spirl_point_maze_medium", "dataset=", "--no-wandb"]) == 2
    assert "dataset: needs a value (str) (a name from `robolearn dataset list`)" in error(capsys)


def test_missing_dataset_with_root_passes_it_on(tmp_path, capsys):
    assert main(["dataset", "info", "hopper-medium", "--root", str(tmp_path)]) == 2
    assert f"make_datasets.py --tasks hopper --root {tmp_path}`" in error(capsys)


def test_a_misspelt_dataset_next_to_one_there_is_asked_about_once(root, capsys):
    """A dataset there is, close to the name, is the question; the generator's guess is not asked as well."""
    (root / "hopper-medium-v0" / "data").mkdir(parents=True)
    (root / "hopper-medium-v0" / "data" / "metadata.json").write_text("{}")  # (listed; not read)
    assert main(["dataset", "info", "hoper-medium"]) == 2
    err = error(capsys)
    assert err.count("did you mean") == 1 and "did you mean 'hopper-medium-v0'?" in err


# -- 5: --resume with a config; int literals; one override string -----------------------------

def test_a_setting_without_a_value_is_said_so(tmp_path, capsys):
    """`train runner.total_steps` (its =value forgotten) had been 'no config ...' and, after --resume RUN,
    'give a config or --resume, not both'."""
    assert main(["train", "runner.total_steps"]) == 2
    assert "'runner.total_steps': a setting without a value; give it as key=value" in error(capsys)
    assert main(["train", "--resume", str(tmp_path), "agent.gamma"]) == 2
    assert "'agent.gamma': a setting without a value; give it as key=value" in error(capsys)


def test_config_and_resume_together_are_refused(tmp_path, capsys):
    assert main(["train", "ppo_pendulum", "--resume", str(tmp_path), "--no-wandb"]) == 2
    assert "give a config or --resume, not both" in error(capsys)


@pytest.mark.parametrize("literal, steps", [("1e4", 10_000), ("2.5e6", 2_500_000), ("1.0e+4", 10_000)])
def test_integral_float_literals_fill_int_fields(literal, steps):
    assert load_config("ppo_cartpole", [f"runner.total_steps={literal}"]).runner.total_steps == steps


def test_fractional_float_is_not_an_int():
    with pytest.raises(ConfigError, match="runner.total_steps: expected int, got 1.5"):
        load_config("ppo_cartpole", ["runner.total_steps=1.5"])


def test_a_single_override_string():
    assert load_config("ppo_cartpole", "runner.total_steps=1").runner.total_steps == 1
    with pytest.raises(TypeError, match="key=value"):
        load_config("ppo_cartpole", [("runner.total_steps", 1)])  # type: ignore[list-item]


# -- 6: summaries and deploy ------------------------------------------------------------------

def test_train_summary_prints_the_success_rate(monkeypatch, capsys):
    evaluation = {"episodes": 10, "return_mean": -494.7, "return_std": 15.9, "length_mean": 500.0, "success_rate": 0.3}
    from robolearn.runner import RunResult

    result = RunResult(run_dir=Path("runs/x"), evaluation=evaluation)
    monkeypatch.setattr("robolearn.runner.train", lambda cfg, resume=None, fresh_replay=False: result)
    assert main(["train", "ppo_cartpole", "--no-wandb"]) == 0
    assert "evaluation:  return -494.7 ± 15.9, success 30% over 10 episodes" in capsys.readouterr().out


def test_deploy_of_a_missing_run(tmp_path, capsys):
    assert main(["deploy", str(tmp_path / "nope"), "--robot", "dxl_arm"]) == 2
    err = error(capsys)
    assert f"{tmp_path / 'nope'}: no such run directory" in err and "robolearn export" not in err


# -- a second walkthrough: nproc, devices, filming, finished runs ----------------------------------

@pytest.mark.parametrize("argv, message", [
    (["train", "--nproc", "0"], "--nproc must be at least 1, got 0"),
    (["train", "hrac_point_maze_medium", "--nproc", "2"], "--nproc 2: algo 'hrac' does not average its gradients"),
    (["train", "env.device=gpu"], "device 'gpu' (env.device) is not a torch device"),
    (["train", "env.task=cartpol"], "unknown task 'cartpol' (env.task); did you mean 'cartpole'? known: "),
])
def test_refused_before_any_rank_or_env_starts(argv, message, capsys):
    assert main([*argv, "--no-wandb"]) == 2
    assert message in error(capsys)


def tiny_run(tmp_path, config="ppo_cartpole", *extra):
    return main(["train", config, f"run_dir={tmp_path / 'runs'}", "--no-wandb", "env.num_envs=4",
                 "runner.total_steps=256", "runner.eval_episodes=1", "runner.video_seconds=0", "logging.progress=false",
                 *extra])


def test_play_without_the_renderers_dependency_is_one_line(tmp_path, monkeypatch, capsys):
    from gymnasium.error import DependencyNotInstalled

    assert tiny_run(tmp_path) == 0
    run = next((tmp_path / "runs").glob("*/*"))
    assert " over 1 episode\n" in capsys.readouterr().out  # (runner.eval_episodes=1: it had said "1 episodes")

    def no_pygame(*args, **kwargs):
        raise DependencyNotInstalled('pygame is not installed, run `pip install "gymnasium[classic-control]"`')

    monkeypatch.setattr("robolearn.evaluate.record_video", no_pygame)
    assert main(["play", str(run), "--video", str(tmp_path / "v.mp4")]) == 2
    assert "cannot film cartpole: pygame is not installed" in error(capsys)

    from robolearn.interfaces import VecEnv
    from sims.task import TaskEnv

    monkeypatch.undo()  # the real record_video, on an env that cannot render (mjlab's): one line too
    monkeypatch.setattr(TaskEnv, "render", VecEnv.render)
    assert main(["play", str(run), "--video", str(tmp_path / "v.mp4")]) == 2
    assert "cannot film cartpole: TaskEnv cannot render frames" in error(capsys)


def test_resuming_a_finished_run_is_refused_and_changes_nothing(tmp_path, capsys):
    assert tiny_run(tmp_path) == 0
    run = next((tmp_path / "runs").glob("*/*"))
    config, onnx = (run / "config.yaml").read_bytes(), (run / "export" / "controller.onnx").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "agent.entropy_coef=0.5", "--no-wandb"]) == 2
    assert "already finished (256 of runner.total_steps=256 env_steps) and exported" in error(capsys)
    assert (run / "config.yaml").read_bytes() == config
    assert (run / "export" / "controller.onnx").stat().st_mtime_ns == onnx
    assert main(["train", "--resume", str(run), "runner.total_steps=100", "--no-wandb"]) == 2
    assert "raise it: robolearn train --resume" in (said := error(capsys)) and "runner.total_steps=360 (from Python: " in said
    assert main(["train", "--resume", str(run), "runner.total_steps=512", "--no-wandb"]) == 0  # raising it goes on


def test_a_ctrl_c_that_python_wraps_in_another_error_is_said_as_interrupted(tmp_path, monkeypatch, capsys):
    """Python 3.11 turns a Ctrl+C that lands while a class is defined (torch importing torch._dynamo as a run
    starts) into a RuntimeError ('Error calling __set_name__'): a Ctrl+C at start-up had ended in its traceback."""
    import robolearn.runner as runner_module

    def wrapped(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as err:
            raise RuntimeError("Error calling __set_name__ on '_Sentinel' instance 'ExceptionStack'") from err

    monkeypatch.setattr(runner_module, "make_agent", wrapped)
    assert tiny_run(tmp_path) == 130
    assert capsys.readouterr().err.strip().endswith("interrupted")
    monkeypatch.setenv("RANK", "1")  # a later torchrun rank: rank 0 says it (each had, the line once per rank)
    assert tiny_run(tmp_path / "rank1") == 130
    assert "interrupted" not in capsys.readouterr().err
    monkeypatch.delenv("RANK")
    monkeypatch.setattr(runner_module, "make_agent", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("ours")))
    with pytest.raises(RuntimeError, match="ours"):  # any other error is still raised
        tiny_run(tmp_path / "other")


def test_a_run_cut_short_while_evaluating_resumes_to_finish(tmp_path, monkeypatch, capsys):
    """A Ctrl+C during the end-of-run evaluation says how to finish; the resume trains no further and
    writes eval.json (it was refused as 'already finished', and nothing else wrote eval.json)."""
    import robolearn.runner as runner_module
    from robolearn.logger import read_metrics

    evaluate = runner_module.evaluate

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner_module, "evaluate", interrupted)
    assert tiny_run(tmp_path) == 130
    run = next((tmp_path / "runs").glob("*/*"))
    said = capsys.readouterr().err
    assert f"interrupted after the training ended: its checkpoint and export are saved; robolearn train --resume {run}" \
        in said and "\ninterrupted\n" not in said  # no bare "interrupted" after it (a walk saw both)
    assert (run / "export" / "controller.json").is_file() and not (run / "eval.json").exists()
    monkeypatch.setattr(runner_module, "evaluate", evaluate)
    assert main(["train", "--resume", str(run), "--no-wandb"]) == 0
    assert (run / "eval.json").is_file() and read_metrics(run)[-1]["env_steps"] == 256
    monkeypatch.setattr(runner_module, "record_video", interrupted)  # cut short while filming: evaluated already
    assert tiny_run(tmp_path / "filmed", "ppo_cartpole", "runner.video_seconds=1") == 130
    run = next((tmp_path / "filmed" / "runs").glob("*/*"))
    assert f"saved; robolearn play {run} --video {run / 'video.mp4'} films it" in capsys.readouterr().err
    monkeypatch.setattr(runner_module, "export_controller", interrupted)  # cut short while exporting
    assert tiny_run(tmp_path / "exporting") == 130
    run = next((tmp_path / "exporting" / "runs").glob("*/*"))
    assert (f"interrupted after the training ended: its checkpoint is saved; robolearn train --resume {run} exports, "
            "evaluates and films it") in capsys.readouterr().err


def test_a_kill_while_a_run_ends_stops_as_ctrl_c_does(tmp_path, monkeypatch, capsys):
    """A SIGTERM during the end's evaluation had ended the process on the spot: no word, run.lock left."""
    import os
    import signal
    import time

    import robolearn.runner as runner_module

    def killed(*args, **kwargs):
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # the kill would end pytest itself, without a report
            raise AssertionError("the run's end does not take SIGTERM as Ctrl+C")
        os.kill(os.getpid(), signal.SIGTERM)  # as a job scheduler does; Python takes it between bytecodes
        time.sleep(5)
        raise AssertionError("the kill was not taken")

    monkeypatch.setattr(runner_module, "evaluate", killed)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # (else the run would not take SIGTERM itself)
    assert tiny_run(tmp_path) == 130
    run = next((tmp_path / "runs").glob("*/*"))
    assert f"interrupted after the training ended: its checkpoint and export are saved; robolearn train --resume {run}" \
        in capsys.readouterr().err
    assert not (run / "run.lock").exists() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


@pytest.mark.parametrize("argv, message", [
    (["export", "RUN", "--out", "my.onnx"], "--out my.onnx: give a directory"),
    (["eval", "RUN", "--fas-shift", "10"], "--fas-shift applies to --fas"),
])
def test_flags_that_cannot_mean_what_they_say(argv, message, tmp_path, capsys):
    assert main([str(tmp_path) if word == "RUN" else word for word in argv]) == 2
    assert message in error(capsys)


def test_a_gpu_run_is_looked_at_and_resumed_on_a_machine_without_one(tmp_path, monkeypatch, capsys):
    """eval, play and export of a device=cuda run had refused with 'use env.device=cpu', a key they do not take;
    a resume of a one-GPU warp run had been called a multi-node run."""
    import torch
    import yaml

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tiny_run(tmp_path, "ppo_cartpole", "runner.checkpoint_every=1") == 0
    run = next((tmp_path / "runs").glob("*/*"))
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["env"]["device"] = "cuda"  # as `ppo_half_cheetah --nproc 4 env.device=cuda` records it
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    capsys.readouterr()
    with pytest.warns(UserWarning, match=r"trained on backend=mujoco device=cuda; no CUDA GPU here: its env runs on "
                                         r"backend=mujoco device=cpu"):
        assert main(["eval", str(run), "--episodes", "1"]) == 0
        assert main(["eval", str(run), "--episodes", "1", "--nominal"]) == 0
        assert main(["export", str(run), "--out", str(tmp_path / "exported")]) == 0
    assert (tmp_path / "exported" / "controller.onnx").is_file()
    config["env"]["backend"] = "warp"  # one GPU's MuJoCo Warp run
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.warns(UserWarning, match=r"falling back to backend=mujoco device=cpu, which a run's config.yaml then "
                                         r"records \(on a GPU, resume it with env.backend=warp env.device=cuda\)"):
        assert main(["train", "--resume", str(run), "runner.total_steps=512"]) == 0
    assert "multi-node" not in capsys.readouterr().err


def test_a_gpu_run_built_from_python_is_said_at_the_callers_line(tmp_path, monkeypatch):
    """robolearn.make_env(run) of a GPU run on a machine without one: the warning had pointed at
    robolearn/__init__.py (a fixed stacklevel), not at the line of the script that built the env."""
    import robolearn
    import yaml

    assert tiny_run(tmp_path, "ppo_cartpole") == 0
    run = next((tmp_path / "runs").glob("*/*"))
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["env"]["device"] = "cuda"
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="no CUDA GPU here: its env runs on backend=mujoco device=cpu") as said:
        robolearn.make_env(run).close()
    assert [w.filename for w in said if "no CUDA GPU here" in str(w.message)] == [__file__]


def test_an_interrupt_that_carries_what_it_left_is_printed_with_it(monkeypatch, capsys):
    """A stop whose cleanup added to it (a robot's torque-off not confirmed) had printed only "interrupted"."""
    from robolearn import cli

    def stopped(args):
        raise KeyboardInterrupt("SIGTERM; the torque-off was not confirmed: cut their power")

    monkeypatch.setitem(cli.COMMANDS, "list", stopped)
    assert main(["list"]) == 130
    assert "interrupted: SIGTERM; the torque-off was not confirmed: cut their power" in capsys.readouterr().err
    monkeypatch.setitem(cli.COMMANDS, "list", lambda args: (_ for _ in ()).throw(KeyboardInterrupt("SIGTERM")))
    assert main(["list"]) == 130 and capsys.readouterr().err.strip() == "interrupted"


def test_plot_out_under_a_file_names_the_file(tmp_path, capsys):
    # had said only "[Errno 17] File exists: '.../a_file'", after drawing the curves
    (tmp_path / "a_file").write_text("x")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"env_steps": s, "time": s, "return": s}) + "\n" for s in (1, 2)))
    out = tmp_path / "a_file" / "curves.png"
    assert main(["plot", str(run), "--out", str(out)]) == 2
    assert error(capsys) == f"error: --out {out}: {tmp_path / 'a_file'} is a file, not a folder"


@pytest.mark.parametrize("command", ["eval", "play", "export", "plot", "list"])
def test_a_kill_of_a_command_that_writes_stops_as_ctrl_c_does(command, tmp_path, monkeypatch, capsys):
    """A SIGTERM had ended play, export, eval --fas and plot on the spot, past the clean-up a Ctrl+C runs: a
    film's hidden temp file (.video.tmp.mp4) and the export's and fas.json's temp files were left behind."""
    import signal
    import time

    import robolearn.cli as cli

    def killed(args):
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # the kill would end pytest itself, without a report
            raise AssertionError(f"{command} does not take SIGTERM as Ctrl+C")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        raise AssertionError("the kill was not taken")

    monkeypatch.setitem(cli.COMMANDS, command, killed)
    argv = {"eval": ["eval", "RUN"], "play": ["play", "RUN", "--video", "v.mp4"], "export": ["export", "RUN"],
            "plot": ["plot", "RUN"], "list": ["list"]}[command]
    assert main(argv) == 130
    assert capsys.readouterr().err.strip() == "interrupted"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # given back


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_backend_warp_without_its_packages_is_one_line_saying_what_to_install(device, monkeypatch, tmp_path, capsys):
    """A missing mujoco-warp had ended `train env.backend=warp` in an ImportError traceback (on a GPU machine too)."""
    import sys

    for name in ("warp", "mujoco_warp"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    monkeypatch.delitem(sys.modules, "sims.warp_backend", raising=False)
    if device == "cuda":
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert main(["train", "ppo_pendulum", "env.backend=warp", f"env.device={device}", "--no-wandb",
                 f"run_dir={tmp_path}"]) == 2
    assert "backend=warp needs the packages mujoco-warp and warp-lang" in error(capsys)
    assert not list(tmp_path.iterdir())


def test_an_argument_error_with_json_is_a_json_line_too(tmp_path, capsys):
    """`eval RUN --episodes abc --json` had printed argparse's usage alone: a script parsing stdout's last line saw
    nothing, where every error after the arguments are read is an {"error": ...} line."""
    for argv, said in ((["eval", str(tmp_path), "--episodes", "abc", "--json"], "invalid int value: 'abc'"),
                       (["eval", str(tmp_path), "--epsiodes", "3", "--json"], "--epsiodes: did you mean --episodes?"),
                       (["eval", str(tmp_path), "--episodes", "abc", "--js"], "invalid int value: 'abc'")):  # argparse
        # takes --js for --json, and so is it taken here
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        out, err = capsys.readouterr()
        assert said in json.loads(out.splitlines()[-1])["error"] and said in err
    with pytest.raises(SystemExit):
        main(["eval", str(tmp_path), "--episodes", "abc"])
    assert capsys.readouterr().out == ""  # without --json: stderr alone, as before
