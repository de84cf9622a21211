"""Configs: unknown keys and bad values are one-line errors naming the key."""

import math
import re
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from robolearn.config import ConfigError, EnvConfig, RunnerConfig, TrainConfig, check_value, config_from_dict, load_config


@dataclass
class ToyAgentConfig:
    learning_rate: float = 1e-3
    hidden: tuple[int, ...] = (64, 64)
    num_steps: int = 24


@pytest.fixture(autouse=True)
def toy_algorithm(monkeypatch):
    """``algo: toy``, an algorithm whose settings are ToyAgentConfig (its agent is never built here)."""
    import policies

    monkeypatch.setitem(policies.AGENTS, "toy", (ToyAgentConfig, object))


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_yaml_and_overrides_are_typed(tmp_path):
    path = write(tmp_path, "algo: toy\nenv:\n  task: pendulum\n  num_envs: 8\nagent:\n  learning_rate: 3e-4\n")
    cfg = load_config(path, ["runner.total_steps=5000", "agent.hidden=[32, 16]", "env.kwargs={a: 1}"])
    assert cfg.env.task == "pendulum" and cfg.env.num_envs == 8
    assert cfg.runner.total_steps == 5000
    assert cfg.agent.learning_rate == pytest.approx(3e-4)
    assert cfg.agent.hidden == (32, 16)
    assert cfg.env.kwargs == {"a": 1}
    assert cfg.run_name == "c"  # named after its file; without one, after algo and task
    assert TrainConfig(algo="toy", env=EnvConfig(task="gym:Pendulum-v1")).run_name == "toy_gym_Pendulum-v1"
    assert load_config(path, ["name=mine"]).run_name == "mine"
    assert load_config(path, ["env.task=gym:Pendulum-v1"]).run_name == "c_gym_Pendulum-v1"  # task overridden


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"algo": "toy", "envv": {}}, "unknown key 'envv'"),
        ({"algo": "toy", "env": {"num_env": 3}}, "unknown key 'env.num_env'"),
        ({"algo": "toy", "agent": {"lr": 1.0}}, "unknown key 'agent.lr'; allowed keys here: hidden, learning_rate, num_steps"),
        ({"algo": "toy", "env": {"num_envs": "many"}}, "env.num_envs: expected int, got 'many'"),
        ({"algo": "toy", "env": {"num_envs": 2.5}}, "env.num_envs: expected int"),
        ({"algo": "toy", "logging": {"wandb": "maybe"}}, "logging.wandb: 'maybe' is not allowed; choose one of ['offline', 'online', 'disabled']"),
        ({"algo": "nope"}, "algo: 'nope' is not known; choose one of ['bc', "),
        ({"algo": "toy", "agent": {"hidden": 5}}, "agent.hidden: expected a list"),
    ],
)
def test_bad_config_names_the_key(raw, message):
    with pytest.raises(ConfigError, match=None) as err:
        config_from_dict(raw)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_override_syntax_and_missing_config(tmp_path):
    path = write(tmp_path, "algo: toy\n")
    with pytest.raises(ConfigError, match="must look like key=value"):
        load_config(path, ["runner.total_steps"])
    with pytest.raises(ConfigError, match="no config 'does_not_exist'"):
        load_config("does_not_exist", [])
    with pytest.raises(ConfigError, match="no config 'ppo_cartpol': did you mean 'ppo_cartpole'"):
        load_config("ppo_cartpol", [])
    with pytest.raises(ConfigError, match=r"unknown key 'agent.gama' \(did you mean 'agent.gamma'\?\); allowed keys"):
        load_config("ppo_cartpole", ["agent.gama=0.9"])
    with pytest.raises(ConfigError, match=r"override 'env.num_envs': 'env' is 5 here, not a section of keys \(set so "
                                          r"by the file or an override before this one\)"):  # (it had blamed 'env')
        load_config("ppo_cartpole", ["env=5", "env.num_envs=2"])
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00algo")
    with pytest.raises(ConfigError, match=r"bin.yaml: not a UTF-8 text file \(byte 0\)"):
        load_config(binary, [])


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_every_shipped_config_loads_and_names_a_known_task(path):
    import sims

    cfg = load_config(path, [])
    task = cfg.env.task
    assert task in sims.TASKS or task.startswith((sims.GYM_PREFIX, sims.MJLAB_PREFIX)), task


def test_a_config_changed_in_python_is_checked_again(tmp_path) -> None:
    """Runners re-validate: a wrong type set from Python is the same one-line error as in YAML."""
    from robolearn.config import validated
    from robolearn.runner import Runner

    cfg = load_config("ppo_pendulum", [f"run_dir={tmp_path}"])
    cfg.env.num_envs = "many"
    with pytest.raises(ConfigError, match="env.num_envs: expected int, got .many."):
        Runner(cfg)
    cfg.env.num_envs = 8
    cfg.run_dir = tmp_path  # a Path, not a string
    with pytest.raises(ConfigError, match="plain data"):
        validated(cfg)
    cfg.run_dir = str(tmp_path)
    cfg.agent = load_config("sac_pendulum").agent  # another algorithm's settings
    with pytest.raises(ConfigError, match="unknown key 'agent."):
        validated(cfg)
    assert not any(tmp_path.iterdir())  # nothing written


def test_overrides_from_python_as_a_mapping_and_null_sections(tmp_path) -> None:
    path = write(tmp_path, "algo: toy\nenv:\n  task: pendulum\n  randomization: {mass: [0.9, 1.1]}\n")
    cfg = load_config(path, {"runner.total_steps": 1e5, "env.device": "cpu", "agent.hidden": (8, 8),
                             "env.randomization": None, "run_dir": tmp_path, "agent.learning_rate": 0.25})
    assert cfg.runner.total_steps == 100_000 and cfg.agent.hidden == (8, 8) and cfg.env.randomization == {}
    assert cfg.run_dir == str(tmp_path) and cfg.agent.learning_rate == 0.25
    with pytest.raises(ConfigError, match="runner.total_steps: must not be negative, got -5"):
        load_config(path, ["runner.total_steps=-5"])


def test_numpy_and_torch_values_in_a_mapping_become_plain_ones(tmp_path) -> None:
    """np.array([0.8, 1.2]) as a randomization range had been kept as it was: the run then failed to write its
    config.yaml, 'Object of type ndarray is not JSON serializable'."""
    import numpy as np
    import torch

    from robolearn.runs import write_config

    cfg = load_config("ppo_arm_reach", {"env.randomization": {"mass_scale": np.array([0.8, 1.2]),
                                                              "gain_scale": (np.float32(0.5), torch.tensor(1.0))},
                                        "runner.total_steps": np.int64(1000)})
    assert cfg.env.randomization == {"mass_scale": [0.8, 1.2], "gain_scale": (0.5, 1.0)}
    assert type(cfg.env.randomization["gain_scale"][0]) is float and cfg.runner.total_steps == 1000
    write_config(tmp_path, cfg)
    assert load_config(tmp_path / "config.yaml").env.randomization == {"mass_scale": [0.8, 1.2], "gain_scale": [0.5, 1.0]}


@pytest.mark.parametrize("override, message", [
    ("runner.checkpoint_every=0", "runner.checkpoint_every: must be at least 1"),
    ("runner.log_every=0", "runner.log_every: must be at least 1"),
    ("runner.eval_episodes=-1", "runner.eval_episodes: must not be negative"),
    ("agent.batch_size=0", "agent.batch_size: must be at least 1"),
    ("agent.actor_lr=.nan", "agent.actor_lr: got nan"),
])
def test_values_that_would_fail_later_are_refused_naming_the_key(override, message) -> None:
    """Each of these had failed after the first iteration: a ZeroDivisionError, a NaN loss, torch's own message."""
    with pytest.raises(ConfigError, match=message):
        load_config("sac_pendulum", [override])


@pytest.mark.parametrize("override, message", [
    ("agent.subgoal_steps=0", r"agent.subgoal_steps: must be at least 1"),  # had crashed mid-training (no subgoal)
    ("agent.subgoal_steps=-3", r"agent.subgoal_steps: must be at least 1"),  # had drawn subgoals from the past
    ("agent.expectile=1.5", r"agent.expectile: an expectile is in \(0, 1\)"),
    ("agent.high_beta=-1", r"agent.high_beta: a weight, must be >= 0"),
    ("agent.rep_dim=0", r"agent.rep_dim: must be at least 1"),
])
def test_goal_agent_settings_outside_their_meaning_are_refused(override, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("hiql_point_maze_medium", [override])


@pytest.mark.parametrize("config, override, message", [
    ("ppo_cartpole", "agent.num_minibatches=0", "agent.num_minibatches: must be at least 1"),  # had been a torch.chunk error
    ("ppo_cartpole", "agent.num_steps=0", "agent.num_steps: must be at least 1"),  # a ZeroDivisionError
    ("ppo_cartpole", "agent.num_epochs=0", "agent.num_epochs: must be at least 1"),  # an empty torch.stack
    ("ppo_cartpole", "agent.learning_rate=-1e-3", "agent.learning_rate: a learning rate, must be >= 0"),  # Adam's, unnamed
    ("sac_pendulum", "agent.buffer_size=0", "agent.buffer_size: must be at least 1"),
    ("sac_pendulum", "agent.critic_lr=-1", "agent.critic_lr: a learning rate"),
])
def test_counts_and_learning_rates_that_cannot_train_are_refused_naming_the_key(config, override, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(config, [override])


@pytest.mark.parametrize("override, side", [("agent.learning_rate=1.0", "above"), ("agent.learning_rate=1e-7", "below")])
def test_an_adaptive_learning_rate_outside_min_lr_max_lr_is_refused(override, side) -> None:
    """Had trained: 1.0 a dozen Adam steps above max_lr (the KL at thousands), 1e-7 at 1e-7 all run (the KL read
    0, no information to the schedule); see config._check_adaptive_lr. A fixed schedule ignores the bounds."""
    with pytest.raises(ConfigError) as err:
        load_config("ppo_cartpole", [override])
    said = str(err.value)
    value = override.partition("=")[2]
    assert f"agent.learning_rate ({float(value)!r}) is {side} [agent.min_lr, agent.max_lr] = [1e-05, 0.01]" in said
    for fix in ("set agent.learning_rate inside it", "widen agent.min_lr/agent.max_lr", "agent.schedule=fixed"):
        assert fix in said
    assert load_config("ppo_cartpole", [override, "agent.schedule=fixed"]).agent.schedule == "fixed"
    assert load_config("ppo_cartpole", [override, "agent.min_lr=1e-7", "agent.max_lr=1.0"]).agent.max_lr == 1.0


def test_a_pair_given_three_values_is_refused_naming_the_key():
    """It had been Python's 'too many values to unpack (expected 2)'."""
    from robolearn.config import build_dataclass
    from sims.randomization import Randomization

    with pytest.raises(ConfigError, match=r"env.randomization.mass_scale: expected 2 values, got 3"):
        build_dataclass(Randomization, {"mass_scale": [0.8, 1.2, 1.4]}, "env.randomization.")


def test_a_mappings_values_are_checked_against_its_type():
    """Go1's reward_weights (dict[str, float]) took env.kwargs.reward_weights.feet_air_time=abc, and the first
    step failed as "can't multiply sequence by non-int of type 'float'"."""
    import sims

    with pytest.raises(ConfigError, match=r"^reward_weights.feet_air_time: expected float, got 'abc'"):
        sims.make_env("go1_flat", num_envs=1, reward_weights={"feet_air_time": "abc"})
    assert check_value({"a": 2, "b": "1e-3"}, dict[str, float], "w") == {"a": 2.0, "b": 0.001}
    assert check_value({"a": [1]}, dict[str, Any], "w") == {"a": [1]}


def test_an_override_whose_hash_yaml_would_take_for_a_comment_is_refused_with_the_quoting():
    # (the quoting had been name='odd name #1', which a shell passes on as name=odd name #1: the same error again)
    with pytest.raises(ConfigError, match=r"' #' starts a comment in YAML.*quote the value: \"name='odd name #1'\" "):
        load_config("ppo_cartpole", ["name=odd name #1"])
    assert load_config("ppo_cartpole", ["name='odd name #1'"]).name == "odd name #1"
    for name in ("cost $5 #1", "it's #1", 'say "hi" #1', "a\\b `c` #1!"):  # what a shell or YAML reads in quotes
        with pytest.raises(ConfigError) as said:  # (it had said "name='cost $5 #1'", which bash makes 'cost  #1')
            load_config("ppo_cartpole", [f"name={name}"])
        quoted = str(said.value).partition("quote the value: ")[2].partition(" (the outer")[0]
        pasted = subprocess.run(["bash", "-c", f"printf '%s\\0' {quoted}"], capture_output=True, text=True,
                                check=True).stdout.split("\0")[:-1]  # (the words bash makes of it pasted)
        assert load_config("ppo_cartpole", pasted).name == name
    assert load_config("ppo_cartpole", ["name=run#1"]).name == "run#1"  # no space before it: not a comment
    assert load_config("ppo_cartpole", ['logging.tags=["run #1"]']).logging.tags == ("run #1",)  # quoted in a list
    # a '#' at the start had been "logging.group: needs a value (str), got none", and one in a list "expected ',' or
    # ']' ... (quote strings, close brackets)", though its bracket is closed: both are the comment, said as such
    with pytest.raises(ConfigError, match=r"'#' at the start starts a comment in YAML.*\"logging.group='#1'\""):
        load_config("ppo_cartpole", ["logging.group=#1"])
    with pytest.raises(ConfigError, match=r"' #' starts a comment in YAML, which cut off the rest of the value, "
                                          r"its closing brackets too; quote the item .*"
                                          r"\(e.g. \"logging.tags=\['run #1'\]\"\)"):
        load_config("ppo_cartpole", ["logging.tags=[a, b #1]"])
    with pytest.raises(ConfigError, match=r"invalid YAML: expected ',' or '\]'.*close brackets"):
        load_config("ppo_cartpole", ["logging.tags=['b #1'"])  # (a bracket left open: not the comment's doing)


def test_an_override_yaml_1_1_reads_as_octal_or_base_60_is_refused():
    """seed=010 (a loop's zero-padded seeds: `seq -w 0 100`) had trained seed 8, as 008 does, and
    runner.max_minutes=1:30 had been 90 minutes: YAML 1.1's octal and base-60 numbers."""
    with pytest.raises(ConfigError, match=r"override 'seed=010': YAML reads a number with a leading 0 as octal, 010 as "
                                          r"8; write it without the 0s \(seed=10\)"):
        load_config("ppo_cartpole", ["seed=010"])
    with pytest.raises(ConfigError, match=r"override 'runner.max_minutes=1:30': YAML reads a number with colons in "
                                          r"base 60, 1:30 as 90"):
        load_config("ppo_cartpole", ["runner.max_minutes=1:30"])
    assert [load_config("ppo_cartpole", [f"seed={s}"]).seed for s in ("007", "08", "00", "0x10")] == [7, 8, 0, 16]
    assert load_config("ppo_cartpole", ["name='010'"]).name == "010"
    for override in ("name=12:30", "name=010"):  # text: quoted past a shell (name='12:30' reaches Python unquoted)
        with pytest.raises(ConfigError, match=rf"or quote it for text \(\"name='{override[5:]}'\" on a command line\)"):
            load_config("ppo_cartpole", [override])  # (12:30 had been told only "write the number itself")
    assert load_config("ppo_cartpole", ["env.device=cuda:0"]).env.device == "cuda:0"  # text, not base 60
    with pytest.raises(ConfigError, match=r"override 'agent.actor_hidden=\[064, 064\]': YAML reads a number with a "
                                          r"leading 0 as octal, 064 as 52; write it without the 0s \(64\)"):
        load_config("ppo_cartpole", ["agent.actor_hidden=[064, 064]"])  # (in a list it had been [52, 52], silently)
    with pytest.raises(ConfigError, match=r"12:30 as 750; write the number itself, or quote it for text \('12:30'\)"):
        load_config("ppo_cartpole", ["logging.tags=[run, 12:30]"])
    assert load_config("ppo_cartpole", ["logging.tags=['010', run]"]).logging.tags == ("010", "run")


def test_a_text_setting_yaml_reads_as_a_number_says_to_quote_it():
    """name=64 (a sweep naming each folder by its value) had been "name: expected str, got 64", and name='64' in a
    shell passes the same: the error says YAML read a number and how to quote it past the shell."""
    with pytest.raises(ConfigError, match=r"name: expected str, got 64: YAML reads 64 as a number; quote the value for "
                                          r"text \(\"name='64'\" on a command line\)"):
        load_config("ppo_cartpole", ["name=64"])
    with pytest.raises(ConfigError, match=r"logging.group: expected str, got 0.99: YAML reads 0.99 as a number"):
        load_config("ppo_cartpole", ["logging.group=0.99"])
    with pytest.raises(ConfigError, match=r"name: expected str, got True: YAML reads yes/no/on/off/true/false as a "
                                          r"boolean; quote the value for text \(\"name='...'\" on a command line"):
        load_config("ppo_cartpole", ["name=yes"])  # (a shell's quotes alone had been the same error again)
    assert load_config("ppo_cartpole", ["name='64'"]).name == "64"


def test_an_override_a_shell_split_at_its_spaces_says_to_quote_it_whole():
    """agent.actor_hidden=[64, 64] unquoted reaches Python as two words; the first had been told to "close
    brackets", which the user had done."""
    with pytest.raises(ConfigError, match=r"a shell split it at its spaces: quote the whole override, "
                                          r"'agent.actor_hidden=\[64, 64\]'"):
        load_config("ppo_cartpole", ["agent.actor_hidden=[64,", "64]", "seed=1"])
    with pytest.raises(ConfigError, match=r"\(quote strings, close brackets\)"):  # nothing after it closes it
        load_config("ppo_cartpole", ["agent.actor_hidden=[64,", "seed=1"])
    with pytest.raises(ConfigError, match=r"override 'run' must look like key=value .*a shell split that at its "
                                          r"space: quote the whole override, 'name=my run'"):  # `name=my run`
        load_config("ppo_cartpole", ["seed=1", "name=my", "run"])
    with pytest.raises(ConfigError, match=r"quote the whole override, 'name=my new run'$"):  # (had said 'name=my new')
        load_config("ppo_cartpole", ["name=my", "new", "run", "seed=1"])
    with pytest.raises(ConfigError, match=r"quote the whole override, 'name=my run.v2'$"):  # (its dot had passed for
        load_config("ppo_cartpole", ["name=my", "run.v2", "seed=1"])  # a dotted key's, and no hint was given)
    for key in ("runner.seed", "seed"):  # a setting missing its '=', not a value split off the one before
        with pytest.raises(ConfigError) as said:
            load_config("ppo_cartpole", ["runner.total_steps=1000", key, "3"])
        assert "a shell split" not in str(said.value)


def test_an_override_mapping_with_a_colon_and_no_space_is_refused_with_the_spacing():
    """{obs_noise_std:0.01} is YAML's one key 'obs_noise_std:0.01' of no value: it had been 'unknown key
    ...obs_noise_std:0.01 (did you mean ...obs_noise_std?)', and in env.kwargs 'no such setting' of one it takes."""
    with pytest.raises(ConfigError, match=r"YAML reads 'obs_noise_std:0.01' as one key with no value .*: write "
                                          r"\{obs_noise_std: 0.01\}"):
        load_config("ppo_cartpole", ["env.randomization={mass_scale: [0.8, 1.2], obs_noise_std:0.01}"])
    with pytest.raises(ConfigError, match=r"'target:0.3' as one key"):
        load_config("ppo_cartpole", ["env.kwargs={sub: [{target:0.3}]}"])
    cfg = load_config("ppo_cartpole", ["env.randomization={mass_scale:[0.8,1.2], obs_noise_std: 0.01}",
                                       "env.kwargs={'gym:id': null}"])  # ':[' YAML reads apart; a quoted key stays
    assert cfg.env.randomization["obs_noise_std"] == 0.01 and cfg.env.kwargs == {"gym:id": None}


def test_a_config_files_colon_without_a_space_is_refused_naming_the_file_and_line(tmp_path):
    """{gamma:0.9} in a file had been "unknown key 'agent.gamma:0.9'", and in env.randomization loaded without a
    word (one range of no value); a block section's `gamma:0.9` had been "agent: must be a mapping" alone."""
    path = write(tmp_path, "algo: ppo\nenv:\n  task: pendulum\n  randomization: {mass_scale: [0.8, 1.2], "
                           "obs_noise_std:0.01}\nagent: {gamma: 0.9}\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: line 4, column 43: invalid YAML: "
                                          r"'obs_noise_std:0.01' is read as one key with no value \(a mapping's colon "
                                          r"needs a space after it\): write 'obs_noise_std: 0.01'"):
        load_config(path)
    path = write(tmp_path, "algo: ppo\nenv: {task: pendulum}\nagent:\n  gamma:0.9\n")
    with pytest.raises(ConfigError, match=r"agent: must be a mapping of the algorithm's settings \(YAML reads "
                                          r"'gamma:0.9' as one piece of text: .* 'gamma: 0.9'\)"):
        load_config(path)
    path = write(tmp_path, "algo: ppo\nenv: gym:Pendulum-v1\n")  # a task where the section goes: no key of env's
    with pytest.raises(ConfigError, match=r"env: expected a section of keys, got 'gym:Pendulum-v1'$"):
        load_config(path)
    path = write(tmp_path, "algo: ppo\nenv: {task: pendulum, kwargs: {'a:b': null, c:d: 1}}\nagent: {gamma: 0.9}\n")
    assert load_config(path).env.kwargs == {"a:b": None, "c:d": 1}  # quoted, or of a value: a key written so
    path = write(tmp_path, "algo: ppo\nenv: {task: pendulum, kwargs: {e:f: , ? g:h, i:j:}}\nagent: {gamma: 0.9}\n")
    assert load_config(path).env.kwargs == {"e:f": None, "g:h": None, "i:j": None}  # a colon of its own, or '?':
    # a key of no value written so on purpose (they had been refused as 'write e: f')


def test_a_run_given_where_a_config_is_expected_says_to_resume_it(tmp_path):
    (tmp_path / "config.yaml").write_text("algo: ppo\n")
    with pytest.raises(ConfigError, match=rf"{tmp_path} is a run: continue it with robolearn train --resume {tmp_path}"):
        load_config(str(tmp_path))


@pytest.mark.parametrize("config, override, said", [
    ("ppo_pendulum", "agent.max_grad_norm=-1", "agent.max_grad_norm: must be above 0"),  # flipped the gradients
    ("ppo_pendulum", "agent.clip_ratio=-0.2", "agent.clip_ratio: must be above 0"),
    ("ppo_pendulum", "agent.lam=1.5", "agent.lam: GAE's lambda must be in [0, 1]"),
    ("ppo_pendulum", "agent.entropy_coef=-1", "agent.entropy_coef: a weight, must be >= 0"),
    ("ppo_pendulum", "agent.min_lr=0.1", "agent.min_lr (0.1) must not exceed agent.max_lr (0.01)"),
    ("ppo_pendulum", "agent.max_std=0.001", "agent.min_std (0.01) must not exceed agent.max_std (0.001)"),
    ("ppo_pendulum", "agent.actor_hidden=[64,0]", "agent.actor_hidden: layer sizes, each at least 1"),
    ("ppo_pendulum", "agent.learning_rate=.inf", "agent.learning_rate: got inf; give a finite number"),
    ("ppo_pendulum", "seed=-1", "seed: must be in [0, 2**32 - 1]"),
    ("ppo_pendulum", "env.num_threads=-3", "env.num_threads: threads, must be >= 0"),
    ("sac_pendulum", "agent.init_alpha=0", "agent.init_alpha: a scale, must be above 0"),  # log(0): no key named
    ("sac_pendulum", "agent.num_critics=0", "agent.num_critics: must be at least 1"),
    ("sac_pendulum", "agent.tau=2", "agent.tau: a target network's update rate is in (0, 1]"),
    ("sac_pendulum", "agent.buffer_size=3", "agent.batch_size (256) must not exceed agent.buffer_size (3)"),
    ("ppo_pendulum", "logging.wandb=off", "YAML reads off/no/false as a boolean: write 'disabled'"),
    ("ppo_pendulum", "algo=sac", "'actor_hidden' is a setting of ppo: the agent section is for algo 'sac'"),
    ("ppo_pendulum", "name=../../etc", "would put the run outside run_dir"),
    # a fine-tune's: 1.5 had crashed after the pretraining on a negative-size tensor, the others trained silently
    ("calql_finetune_hopper", "agent.offline_ratio=1.5", "agent.offline_ratio: the share of each online batch"),
    ("calql_finetune_hopper", "agent.offline_ratio=-0.5", "agent.offline_ratio: the share of each online batch"),
    ("wsrl_hopper", "agent.warmup_steps=-5", "agent.warmup_steps: must be >= 0"),
    ("wsrl_hopper", "agent.pretrain_updates=-1", "agent.pretrain_updates: must be >= 0"),
    ("jsrl_hopper", "agent.jsrl_step=0", "agent.jsrl_step: must be at least 1"),  # h never shrank
    ("jsrl_hopper", "agent.jsrl_window=0", "agent.jsrl_window: must be at least 1"),
    ("jsrl_hopper", "agent.jsrl_horizon=-3", "agent.jsrl_horizon: must be >= 0"),
    ("wsrl_hopper", "agent.target_critics=-1", "agent.target_critics: must be >= 0"),  # had been read as "all"
])
def test_settings_outside_their_meaning_are_refused_by_key(config, override, said):
    with pytest.raises(ConfigError) as err:
        load_config(config, [override])
    assert said in str(err.value)


@pytest.mark.parametrize("overrides", [{"logging.wandb": False}, {"logging": {"wandb": False}}, "validated"])
def test_a_false_wandb_setting_from_python_is_not_told_of_yaml(overrides):
    """False given in Python had been told 'YAML reads off/no/false as a boolean', as logging.wandb=off is."""
    from robolearn.config import validated

    with pytest.raises(ConfigError) as err:
        if overrides == "validated":
            cfg = load_config("ppo_pendulum")
            cfg.logging.wandb = False
            validated(cfg)
        else:
            load_config("ppo_pendulum", overrides)
    assert str(err.value) == ("logging.wandb: False is not allowed; choose one of ['offline', 'online', 'disabled'] "
                              "(to log nothing: 'disabled')")


@pytest.mark.parametrize("overrides, said", [
    (["logging.tags=a"], "logging.tags: expected a list, got 'a' (a list of one: [a])"),
    ({"logging.tags": "a"}, "logging.tags: expected a list, got 'a' (a list of one: ['a'])"),
    (["agent.actor_hidden=64"], "agent.actor_hidden: expected a list, got 64 (a list of one: [64])"),
    (["logging.tags=null"], "logging.tags: expected a list, got None"),  # no item: nothing to suggest
])
def test_one_item_where_a_list_goes_is_shown_the_list_of_it(overrides, said):
    """logging.tags=a had been told 'expected a list' without the [a] to write."""
    with pytest.raises(ConfigError) as err:
        load_config("ppo_pendulum", overrides)
    assert str(err.value) == said


def test_an_empty_config_a_key_given_twice_and_a_folder_are_refused_an_empty_section_is_the_defaults(tmp_path):
    (tmp_path / "empty.yaml").write_text("# only a comment\n")
    with pytest.raises(ConfigError, match="empty; a config sets at least algo and env"):
        load_config(str(tmp_path / "empty.yaml"))
    (tmp_path / "twice.yaml").write_text("algo: ppo\nenv:\n  task: pendulum\nalgo: sac\n")
    with pytest.raises(ConfigError, match=r"'algo' is given twice \(lines 1 and 4\); keep one"):
        load_config(str(tmp_path / "twice.yaml"))
    with pytest.raises(ConfigError, match="a folder; give a config's YAML file"):
        load_config(str(tmp_path))
    (tmp_path / "merged.yaml").write_text("algo: ppo\nbase: &base {num_steps: 24}\nenv:\n  task: pendulum\n"
                                          "agent:\n  <<: *base\n  gamma: 0.98\n")  # YAML's merge key still merges
    with pytest.raises(ConfigError, match="unknown key 'base'"):  # (the anchor's own key is no setting)
        load_config(str(tmp_path / "merged.yaml"))
    (tmp_path / "merged.yaml").write_text("algo: ppo\nenv:\n  task: pendulum\nagent:\n  <<: {num_steps: 24}\n"
                                          "  gamma: 0.98\n")
    assert load_config(str(tmp_path / "merged.yaml")).agent.num_steps == 24
    (tmp_path / "bare.yaml").write_text("algo: ppo\nenv:\n  task: pendulum\nrunner:\n")
    assert load_config(str(tmp_path / "bare.yaml"), ["runner.total_steps=100"]).runner.total_steps == 100
    assert load_config(str(tmp_path / "bare.yaml")).runner == RunnerConfig()


def test_a_files_own_mistake_names_the_file_and_an_overrides_mistake_does_not_blame_it(tmp_path):
    """A resumed run's config.yaml with a misspelt key said only the key: which file had it went unsaid."""
    config = tmp_path / "config.yaml"
    config.write_text("algo: ppo\nenv:\n  task: pendulum\nagent:\n  learning_rat: 0.001\n")
    with pytest.raises(ConfigError, match=rf"^{config}: unknown key 'agent.learning_rat' \(did you mean"):
        load_config(str(config), ["runner.total_steps=100"])
    config.write_text("algo: ppo\nenv:\n  task: pendulum\n")
    with pytest.raises(ConfigError, match=r"^unknown key 'agent.lrr'"):
        load_config(str(config), ["agent.lrr=3"])
    config.write_text("algo: ppo\nenv:\n  task: pendulum\nagent:\n  gamma: 2\n")  # an override that mends it
    assert load_config(str(config), ["agent.gamma=0.9"]).agent.gamma == 0.9


def test_noise_may_be_turned_off_by_setting_it_to_zero_and_a_range_must_be_finite():
    """``obs_noise_std=0`` (randomization's own default: no noise) was refused as 'a scale, must be above 0'."""
    from robolearn.config import build_dataclass
    from sims.randomization import Randomization

    said = load_config("ppo_arm_reach_dr", ["env.randomization.obs_noise_std=0"]).env.randomization
    assert build_dataclass(Randomization, said, "env.randomization.").obs_noise_std == 0
    with pytest.raises(ConfigError, match=r"env.randomization.obs_noise_std: noise, must be >= 0"):
        build_dataclass(Randomization, {**said, "obs_noise_std": -0.1}, "env.randomization.")
    with pytest.raises(ConfigError, match=r"env.randomization.mass_scale: got \(nan, 1.2\); give finite numbers"):
        build_dataclass(Randomization, {**said, "mass_scale": [math.nan, 1.2]}, "env.randomization.")  # was torch's


def test_a_mapping_given_for_a_section_sets_the_keys_it_names():
    """{"env": {"num_envs": 8}} had replaced the file's whole env section: a pendulum config trained cartpole (the
    default task) under the folder ppo_pendulum_None, and {"agent": {"gamma": 0.9}} reset every other agent key."""
    cfg = load_config("ppo_pendulum", {"env": {"num_envs": 8}})
    assert (cfg.env.task, cfg.env.num_envs, cfg.name) == ("pendulum", 8, "ppo_pendulum")
    cfg = load_config("ppo_pendulum", ["agent={gamma: 0.9}"])
    assert cfg.agent.gamma == 0.9 and cfg.agent == load_config("ppo_pendulum", ["agent.gamma=0.9"]).agent


@pytest.mark.parametrize("section", ["env", "runner", "agent", "logging"])
def test_a_whole_section_set_to_null_is_refused_not_reset_to_its_defaults(section):
    """runner=null had put every runner setting back to its default (ppo_cartpole's 2.5M steps became 1M) without
    a word: a section is not a setting, and null for it means nothing a user asks for."""
    example = {"env": "num_envs", "runner": "total_steps", "agent": "gamma", "logging": "wandb"}[section]
    for overrides in ([f"{section}=null"], {section: None}):
        with pytest.raises(ConfigError, match=rf"override '{section}=null': a section cannot be null .*set the keys "
                                              rf"to change instead, {section}\.<key>=\.\.\. \(e\.g\. {section}\.{example}="):
            load_config("ppo_cartpole", overrides)


@pytest.mark.parametrize("override, setting", [
    ("seed.x=1", "seed"), ("name.v2=a", "name"), ("algo.foo=1", "algo"),  # top level: absent from the file, or in it
    ("runner.total_steps.x=1", "runner.total_steps"), ("runner.utd_ratio.x=1", "runner.utd_ratio"),
    ("agent.gamma.x=1", "agent.gamma"), ("agent.num_steps.x=1", "agent.num_steps"), ("logging.tags.a=1", "logging.tags"),
])
def test_keys_under_a_setting_of_one_value_are_refused_naming_it_a_setting(override, setting):
    """seed.x=1 had been "seed: expected int, got {'x': 1}" (the dotted key made a mapping for it), and a key the
    file sets, "'runner.total_steps' is 2500000 here, not a section of keys"; a mapping setting takes keys."""
    key = override.partition("=")[0]
    with pytest.raises(ConfigError, match=rf"^{re.escape(setting)}: a setting, not a section: it takes one value "
                                          rf"\({re.escape(setting)}=\.\.\.\), no keys under it \({re.escape(key)}\)$"):
        load_config("ppo_cartpole", [override])
    assert load_config("ppo_cartpole", ["env.kwargs.x=1"]).env.kwargs == {"x": 1}  # (refused later by the task)


def test_overrides_of_another_kind_are_refused_naming_the_kinds_taken():
    with pytest.raises(TypeError, match=r"overrides: 'key=value' strings \(a list, or one\) or a mapping"):
        load_config("ppo_pendulum", 5)


def test_no_overrides_as_none_is_the_config_as_written(tmp_path):
    """load_config(name, None) passed the kind check, then failed as "'NoneType' object is not iterable", and so did
    train(resume=run, overrides=None) (an `overrides=None` default of one's own passed on)."""
    from robolearn.config import refuse_algo_change

    assert load_config("ppo_pendulum", None) == load_config("ppo_pendulum")
    refuse_algo_change(tmp_path, None)


def test_a_section_mapping_sets_nested_keys_too_and_an_empty_one_turns_them_off():
    """{"env": {"randomization": {"obs_noise_std": 0.01}}} had dropped every other randomization range."""
    ranges = load_config("ppo_arm_reach_dr").env.randomization
    merged = load_config("ppo_arm_reach_dr", {"env": {"randomization": {"obs_noise_std": 0.01}}}).env.randomization
    assert merged == {**ranges, "obs_noise_std": 0.01} and len(ranges) > 1
    assert not load_config("ppo_arm_reach_dr", {"env": {"randomization": {}}}).env.randomization


def test_torch_settings_kept_keeps_denormal_flushing_under_a_float64_default_dtype():
    """Flushing is read from a float32 denormal: under a float64 default dtype the probe's 1e-38 is a normal number,
    so flushing read as off, and a run (train()) turned the caller's flushing off on leaving."""
    import torch

    from robolearn.config import torch_settings_kept

    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        if not torch.set_flush_denormal(True):
            pytest.skip("this CPU cannot flush denormals")
        with torch_settings_kept():
            torch.set_flush_denormal(False)
        assert (torch.tensor([1e-38], dtype=torch.float32) * 0.5).item() == 0.0
    finally:
        torch.set_default_dtype(dtype)
        torch.set_flush_denormal(False)


def test_a_folder_inside_a_run_given_for_the_run_names_the_run(tmp_path):
    """`dataset record --run RUN/export` (or RUN/deploy/<time>) had been told only 'not a run directory'."""
    from robolearn.config import run_config_path

    run = tmp_path / "runs" / "ppo_arm_reach" / "20260101-000000"
    (run / "deploy" / "20260101-000100").mkdir(parents=True)
    (run / "config.yaml").write_text("algo: ppo\n")
    (run / "metrics.jsonl").write_text("")
    assert run_config_path(run) == run / "config.yaml"
    for inside in (run / "deploy", run / "deploy" / "20260101-000100"):
        with pytest.raises(FileNotFoundError, match=f"a folder inside the run {re.escape(str(run.resolve()))} "
                                                    r"\(deploy.*\); give the run's folder itself"):
            run_config_path(inside)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "config.yaml").write_text("a project's own\n")
    with pytest.raises(FileNotFoundError, match="not a run directory"):  # in no run (a config.yaml alone is none)
        run_config_path(tmp_path / "elsewhere")


def test_a_file_inside_a_run_given_for_the_run_names_the_run(tmp_path):
    """`eval RUN/export/controller.onnx` had been told only 'a file, not a run's folder', not which run to give."""
    from robolearn.config import run_config_path

    run = tmp_path / "runs" / "ppo_cartpole" / "20260101-000000"
    (run / "export").mkdir(parents=True)
    (run / "config.yaml").write_text("algo: ppo\n")
    (run / "metrics.jsonl").write_text("")
    (run / "export" / "controller.onnx").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=f"a file in the run {re.escape(str(run))} "
                                                r"\(export/controller.onnx\); give the run's folder itself"):
        run_config_path(run / "export" / "controller.onnx")
    (other := tmp_path / "notes.txt").touch()
    with pytest.raises(FileNotFoundError, match="a file, not a run's folder"):  # in no run
        run_config_path(other)
    (config := tmp_path / "my_ppo.yaml").write_text("algo: ppo\n")  # had been "a file" alone
    with pytest.raises(FileNotFoundError, match=r"a config file, not a run's folder .*train\(load_config\(path\)\)"):
        run_config_path(config)


def test_load_config_of_a_dict_or_a_config_says_what_takes_it() -> None:
    """A dict of settings had been looked up as a config's name and refused with every config's name."""
    with pytest.raises(TypeError, match=r"a dict of settings is robolearn\.config\.config_from_dict"):
        load_config({"algo": "ppo", "env": {"task": "pendulum"}})
    with pytest.raises(TypeError, match="already a TrainConfig"):
        load_config(load_config("ppo_pendulum"))
    assert load_config(Path(__file__).parents[2] / "configs" / "ppo_pendulum.yaml").env.task == "pendulum"


@pytest.mark.parametrize("section", ["env", "runner", "logging"])
def test_a_section_set_to_none_in_python_is_refused_as_its_null_override_is(section, tmp_path):
    """cfg.runner = None, then train(cfg), had trained every runner setting at its default without a word
    (ppo_pendulum's budget became 1M steps), where runner=null as an override is refused; with resume= the
    resume had listed every setting of it as changed, and cfg.env = None failed on 'NoneType' ... 'task'."""
    import yaml

    import robolearn
    from robolearn.config import to_dict, validated

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(to_dict(load_config("ppo_pendulum"))))
    cfg = load_config("ppo_pendulum")
    setattr(cfg, section, None)
    said = rf"^cfg\.{section} is None: a section cannot be None .* as in cfg\.{section}\."
    with pytest.raises(ConfigError, match=said):
        validated(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (the resume's 'differs from its own config.yaml' is not said first)
        with pytest.raises(ConfigError, match=said):
            robolearn.train(cfg, resume=tmp_path)
        cfg = load_config("ppo_pendulum")
        cfg.agent = None  # TrainConfig's own default (the algorithm's defaults), not a resume's: a TypeError
        with pytest.raises(ConfigError, match=r"^cfg.agent is None: a resume goes on with the run's agent settings"):
            robolearn.train(cfg, resume=tmp_path)
    cfg = load_config("ppo_pendulum")
    cfg.agent = None  # TrainConfig's own default: the algorithm's defaults
    assert validated(cfg).agent == type(load_config("ppo_pendulum").agent)()
