"""Runs you can trust: exact resume, Ctrl+C, NaN, off-policy runs, W&B offline files."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
import yaml

import robolearn.runner as runner_module
from robolearn import load_config, train
from robolearn.checkpoint import CheckpointError, load_checkpoint, load_replay
from robolearn.cli import main as cli
from robolearn.evaluate import FiniteWatch, NonFiniteError
from robolearn.interfaces import ContractError, SimulationFailed, Step
from robolearn.logger import read_metrics
from robolearn.config import ConfigError
from robolearn.run_lock import RunLock
from robolearn.config import TrainConfig, load_run_config, to_dict, validated
from robolearn.runs import saved_progress, trained_env_config
from robolearn.runner import CtrlC, Runner


def tiny(tmp_path, algo: str = "ppo", *extra: str):
    base = "ppo_cartpole" if algo == "ppo" else "sac_pendulum"
    return load_config(base, [
        f"run_dir={tmp_path / 'runs'}", "env.num_envs=8", "logging.wandb=disabled", "logging.progress=false",
        "runner.eval_episodes=2", "runner.video_seconds=0", "runner.checkpoint_every=1", *extra,
    ])


# a SAC run's one iteration (~1000 env steps, whatever runner.total_steps says under it) in 45 updates of a small
# network, not 450 of the config's 256-unit ones, for tests of what a run keeps or refuses, not of what it learns
FEW_SMALL_UPDATES = ("runner.utd_ratio=0.05", "agent.batch_size=32", "agent.hidden=[32,32]")


def flat_params(agent) -> torch.Tensor:
    return torch.cat([t.flatten().float() for t in _tensors(agent.state_dict())])


def _tensors(state):
    for value in state.values() if isinstance(state, dict) else state:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (dict, list)):
            yield from _tensors(value)


def test_resume_restores_iteration_optimizer_lr_normalizer_and_rng(tmp_path):
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=768")  # 3 iterations of 8 envs x 32 steps
    first = Runner(cfg)
    first.train()
    first.close()
    saved = load_checkpoint(first.checkpoint_path)
    assert saved["progress"]["iteration"] == 3

    cfg.runner.total_steps = 1024
    resumed = Runner(cfg, resume=first.run_dir)
    assert resumed.progress.iteration == 3 and resumed.progress.env_steps == 768
    lr = first.agent.learning_rate  # adaptive (the KL schedule): moved off the config's by now
    assert lr != cfg.agent.learning_rate and resumed.agent.learning_rate == lr
    assert [group["lr"] for group in resumed.agent.optimizer.param_groups] == [lr]
    torch.testing.assert_close(flat_params(resumed.agent), flat_params(first.agent))
    assert torch.equal(torch.get_rng_state(), saved["progress"]["rng"]["torch"])
    resumed.train()
    resumed.close()
    assert load_checkpoint(resumed.checkpoint_path)["progress"]["iteration"] == 4
    lines = [json.loads(line) for line in (first.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["env_steps"] for line in lines] == [256, 512, 768, 1024]
    for line in lines:  # where an iteration's time went, as RSL-RL logs it: both parts measured, within the whole
        assert 0 < line["collect_time"] and 0 < line["update_time"]
        assert line["collect_time"] + line["update_time"] <= line["iteration_time"]


def test_a_checkpoint_whose_learning_rate_is_a_number_resumes(tmp_path):
    """PPO's learning rate was a Python float in checkpoints before it lived on the device (session 54):
    those still resume, evaluate and export, the rate taken from the file."""
    from robolearn.checkpoint import save_checkpoint

    cfg = tiny(tmp_path, "ppo", "runner.total_steps=512")
    first = Runner(cfg)
    first.train()
    first.close()
    saved = load_checkpoint(first.checkpoint_path)
    saved["agent"]["learning_rate"] = float(saved["agent"]["learning_rate"]) * 0.5  # as older runs wrote it
    save_checkpoint(first.checkpoint_path, config=saved["config"], agent=saved["agent"], progress=saved["progress"])
    cfg.runner.total_steps = 768
    resumed = Runner(cfg, resume=first.run_dir)
    assert resumed.agent.learning_rate == saved["agent"]["learning_rate"]
    assert all(group["lr"] is resumed.agent.lr for group in resumed.agent.optimizer.param_groups)
    resumed.train()
    resumed.close()
    assert load_checkpoint(first.checkpoint_path)["progress"]["iteration"] == 3


def test_ctrl_c_saves_a_checkpoint_that_resumes(tmp_path, monkeypatch, capsys):
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=2560", "runner.checkpoint_every=100")
    runner = Runner(cfg)
    update = runner.agent.update
    calls = {"n": 0}

    def interrupted_update(batch):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return update(batch)

    monkeypatch.setattr(runner.agent, "update", interrupted_update)
    result = runner.train()
    runner.close()
    assert result.interrupted
    assert load_checkpoint(runner.checkpoint_path)["progress"]["iteration"] == 2
    assert result.trained == {"env_steps": load_checkpoint(runner.checkpoint_path)["progress"]["env_steps"]}
    steps = read_metrics(runner.run_dir)[-1]["env_steps"]
    assert cli(["list", "--runs", str(runner.run_dir.parents[1])]) == 0  # says how far it got and how to go on
    assert f"incomplete: {steps:,} of 2,560 env_steps; robolearn train --resume {runner.run_dir}" in capsys.readouterr().out
    lock = RunLock(runner.run_dir)  # as if another terminal were training it now
    try:
        assert cli(["list", "--runs", str(runner.run_dir.parents[1])]) == 0
        assert f"{runner.run_dir}  training now (pid {os.getpid()} on " in capsys.readouterr().out
        with pytest.raises(ConfigError, match="being trained now"):
            runner_module.train(cfg, resume=runner.run_dir)
    finally:
        lock.release()
    resumed = Runner(cfg, resume=runner.run_dir)
    assert resumed.progress.iteration == 2
    resumed.close()


class NaNAfter:
    """Wraps a VecEnv so that its rewards turn NaN after ``steps`` steps."""

    def __init__(self, env, steps: int) -> None:
        self.env, self.steps = env, steps

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, action):
        self.steps -= 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.steps < 0:
            reward = torch.full_like(reward, float("nan"))
        return Step(obs, reward, terminated, truncated, info)


@pytest.mark.parametrize("deferred", [False, True], ids=["checked-each-step", "checked-per-iteration-as-on-gpu"])
def test_nan_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, deferred):
    make_env = runner_module.make_env
    monkeypatch.setattr(runner_module, "make_env", lambda *a, **k: NaNAfter(make_env(*a, **k), steps=32 * 2 + 5))
    runner = Runner(tiny(tmp_path, "ppo", "runner.total_steps=100000"))
    runner._finite = FiniteWatch("cpu", deferred=deferred)
    update = runner.agent.update
    monkeypatch.setattr(runner.agent, "update", lambda batch: update(batch) if torch.isfinite(batch["reward"]).all()
                        else pytest.fail("an update saw the NaN reward"))
    said = (r"reward contains NaN or inf \(envs 0, 1, 2, 3, 4 and 3 more of 8\); training stopped at "
            r"env_steps=552," if not deferred else r"reward contained NaN or inf during this iteration; training "
            r"stopped at env_steps=768,")  # each step checked: the step after 69 (8 envs); else its iteration's end
    with pytest.raises(NonFiniteError, match=said + r" last good checkpoint \(env_steps=512\) kept at .*latest.pt; "
                       "the env produced it: check task 'cartpole'"):
        runner.train()
    runner.close()
    assert load_checkpoint(runner.checkpoint_path)["progress"]["iteration"] == 2


def test_a_nan_reward_term_is_named_with_its_env_and_the_step(tmp_path):
    """A task's reward term that goes inf in one world: the error names the term, the world and how far the
    run got (it had said only 'reward contains NaN or inf', leaving the task's author to bisect)."""
    runner = Runner(tiny(tmp_path, "ppo", "runner.total_steps=100000"))
    env = runner.env
    while not hasattr(env, "task"):  # under the wrappers make_env adds
        env = env.env
    rewards, calls = env.task.rewards, {"n": 0}

    def inf_in_world_3(sim, action):
        calls["n"] += 1
        terms = rewards(sim, action)
        if calls["n"] > 32 * 2 + 5:
            terms["swingup"] = terms["swingup"].clone().index_fill_(0, torch.tensor([3]), float("inf"))
        return terms

    env.task.rewards = inf_in_world_3
    with pytest.raises(NonFiniteError, match=r"^reward contains NaN or inf \(env 3 of 8\) in reward/swingup; training "
                       r"stopped at env_steps=552, last good checkpoint \(env_steps=512\) kept at"):
        runner.train()
    runner.close()


def test_a_nan_first_observation_is_blamed_on_the_task_as_a_later_one(tmp_path):
    """A task whose observations are NaN from the reset had stopped the run with the bare 'observation['policy']
    contains NaN or inf', naming no task and leaving its logs open."""
    runner = Runner(tiny(tmp_path, "ppo", "runner.total_steps=100000"))
    env = runner.env
    while not hasattr(env, "task"):  # under the wrappers make_env adds
        env = env.env
    observations = env.task.observations
    env.task.observations = lambda sim: {name: value * float("nan") for name, value in observations(sim).items()}
    with pytest.raises(NonFiniteError, match=r"^observation\['policy'\] contains NaN or inf \(envs .* of 8\); training "
                       r"stopped at the start before its first checkpoint .*: the env produced it: check task 'cartpole'"):
        runner.train()
    runner.close()


class FailsAfter(NaNAfter):
    """Wraps a VecEnv whose physics fails after ``steps`` steps (MuJoCo's stack memory full, say)."""

    def step(self, action):
        self.steps -= 1
        if self.steps < 0:
            raise SimulationFailed("the physics could not step: MuJoCo raised in 1 of 8 simulations (3)")
        return self.env.step(action)


def test_physics_that_cannot_step_stops_the_run_as_a_nan_does(tmp_path, monkeypatch, capsys):
    """It had gone up as MuJoCo's traceback, saying nothing of the checkpoint kept; now one line says it."""
    make_env = runner_module.make_env
    monkeypatch.setattr(runner_module, "make_env", lambda *a, **k: FailsAfter(make_env(*a, **k), steps=32 * 2 + 5))
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=100000")
    with pytest.raises(SimulationFailed, match=r"^the physics could not step: .*; training stopped at env_steps=552, "
                       r"last good checkpoint \(env_steps=512\) kept at .*latest.pt; change the model of task 'cartpole'"):
        train(cfg)
    monkeypatch.setattr(runner_module, "make_env", lambda *a, **k: FailsAfter(make_env(*a, **k), steps=5))
    assert cli(["train", "ppo_cartpole", *[f"{key}={value}" for key, value in (
        ("run_dir", tmp_path / "cli"), ("env.num_envs", 8), ("logging.wandb", "disabled"),
        ("logging.progress", "false"))]]) == 2
    assert re.match(r"error: the physics could not step: .*before its first checkpoint", capsys.readouterr().err)


class NaNFinalObs(NaNAfter):
    """Wraps a VecEnv so that, after ``steps`` steps, the last observation of each episode that ends is NaN
    (a task that terminates a world whose physics diverged): next_obs, the new episodes' first, stays finite."""

    def step(self, action):
        self.steps -= 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        done = terminated | truncated
        if self.steps < 0 and done.any():
            final = {name: value.clone() for name, value in info["final_obs"].items()}
            for value in final.values():
                value[done] = float("nan")
            info = {**info, "final_obs": final}
        return Step(obs, reward, terminated, truncated, info)


def test_a_step_stores_the_ended_episodes_last_observation_and_resets_the_agent_where_any_ended():
    """The transition's next_obs is ``info["final_obs"]``: where a time limit cut an episode, its V(s_T) is
    bootstrapped from there, not from the next episode's first observation that the env returns. The agent's
    acting state (a GRU's memory, a chunk queue) is reset wherever an episode ended, by time limit too."""

    class Env:
        def step(self, action):  # env 1 hit its time limit, env 2 terminated; both were reset to 0
            final = {"policy": torch.tensor([[1.0], [7.0], [9.0]])}
            return Step({"policy": torch.tensor([[1.0], [0.0], [0.0]])}, torch.ones(3),
                        torch.tensor([False, False, True]), torch.tensor([False, True, False]), {"final_obs": final})

    class Agent:
        def __init__(self):
            self.resets = []

        def reset(self, mask=None):
            self.resets.append(mask.clone())

    agent = Agent()
    obs = {"policy": torch.zeros(3, 1)}
    stats = runner_module.EpisodeStats(3, [])
    next_obs, transition = runner_module.step_envs(Env(), agent, obs, torch.zeros(3, 1), stats, FiniteWatch("cpu"))
    assert next_obs["policy"][:, 0].tolist() == [1.0, 0.0, 0.0]  # acting goes on from the new episodes
    assert transition["next_obs"]["policy"][:, 0].tolist() == [1.0, 7.0, 9.0]
    assert transition["obs"] is obs and transition["truncated"].tolist() == [False, True, False]
    assert [mask.tolist() for mask in agent.resets] == [[False, True, True]]


@pytest.mark.parametrize("deferred", [False, True], ids=["checked-each-step", "checked-per-iteration-as-on-gpu"])
def test_a_nan_final_observation_stops_the_run_as_the_envs(tmp_path, monkeypatch, deferred):
    """An ended episode's last observation (info['final_obs']) is stored and bootstrapped from: a NaN there had
    passed the check (next_obs holds the new episode's first), reached the update, and the run was stopped by
    its NaN loss with the learner blamed ('check the config's learning rate')."""
    make_env = runner_module.make_env
    monkeypatch.setattr(runner_module, "make_env", lambda *a, **k: NaNFinalObs(make_env(*a, **k), steps=32 * 2 + 5))
    runner = Runner(tiny(tmp_path, "ppo", "runner.total_steps=100000"))
    runner._finite = FiniteWatch("cpu", deferred=deferred)
    update = runner.agent.update
    monkeypatch.setattr(runner.agent, "update", lambda batch: update(batch) if all(
        torch.isfinite(value).all() for value in batch["next_obs"].values()) else pytest.fail("an update saw the NaN"))
    with pytest.raises(NonFiniteError, match=r"final observation\['policy'\] contain.*; training stopped at .*, last good "
                       r"checkpoint \(.*\) kept at .*latest.pt; the env produced it: check task 'cartpole'"):
        runner.train()
    runner.close()
    assert load_checkpoint(runner.checkpoint_path)["progress"]["iteration"] == 2


def test_a_deferred_check_names_the_bad_values_and_forgets_them_once_verified():
    watch = FiniteWatch("cpu", deferred=True)
    watch("action", torch.ones(3))
    watch("observation", {"policy": torch.ones(2), "critic": torch.tensor([1.0, float("inf")])})
    watch("observation", {"policy": torch.tensor([float("nan")]), "critic": torch.ones(2)})
    with pytest.raises(NonFiniteError, match=r"^observation\['policy'\], observation\['critic'\] contained NaN or inf"):
        watch.verify()
    watch.verify()  # verified: nothing left
    assert FiniteWatch("cuda").deferred and not FiniteWatch("cpu").deferred


def test_off_policy_run_resumes_with_its_replay_buffer(tmp_path):
    cfg = tiny(tmp_path, "sac", "runner.total_steps=2000", "runner.random_steps=1000", "agent.batch_size=32",
               "agent.buffer_size=5000", "agent.hidden=[32,32]", "runner.utd_ratio=0.1")  # (what is kept, not learnt)
    runner = Runner(cfg)
    result = runner.train()
    runner.close()
    assert result.evaluation is not None and (runner.run_dir / "export" / "controller.onnx").is_file()
    assert (runner.checkpoint_path.parent / "replay.pt").is_file()
    cfg.runner.total_steps = 3000
    resumed = Runner(cfg, resume=runner.run_dir)
    assert resumed.replay.size == 2000 and resumed.progress.env_steps == 2000
    # the envs restart here: the last step's rows end their episodes, so no window (a skill's, an n-step
    # return's) runs on into the new ones; the saved file keeps them as they were
    n, saved = cfg.env.num_envs, torch.load(runner.checkpoint_path.with_name("replay.pt"), weights_only=True)
    truncated, was = resumed.replay.data["truncated"][:2000], saved["data"]["truncated"]
    assert truncated[-n:].all() and not was[-n:].any() and torch.equal(truncated[:-n], was[:-n])
    resumed.train()
    resumed.close()
    assert resumed.replay.size == 3000

    # a run saved before the two were written as one, or killed between their renames: the stamps differ,
    # and the resume says so
    replay_path = runner.checkpoint_path.with_name("replay.pt")
    state = torch.load(replay_path, weights_only=True)
    assert state["env_steps"] == 3000
    torch.save({**state, "env_steps": 3500}, replay_path)
    cfg.runner.total_steps = 4000
    with pytest.warns(UserWarning, match=r"replay buffer of env step 3500 but the checkpoint is of step 3000"):
        Runner(cfg, resume=runner.run_dir).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the other ranks of a distributed resume: rank 0 says it, once
        load_replay(replay_path, resumed.replay, 3000, "cpu", warn=False)
    assert resumed.replay.size == 3000


def test_a_finished_run_whose_replay_is_lost_is_told_first_that_it_is_finished(tmp_path, capsys):
    """`train --resume RUN` of a finished SAC run without replay.pt had said to restore the buffer (or, with
    --fresh-replay, warned of the empty one) and only then that the run was finished: raise runner.total_steps."""
    run = train(tiny(tmp_path, "sac", "runner.total_steps=200", "runner.random_steps=100", *FEW_SMALL_UPDATES)).run_dir
    (run / "checkpoints" / "replay.pt").unlink()
    capsys.readouterr()
    for flags in ([], ["--fresh-replay"]):
        assert cli(["train", "--resume", str(run), *flags]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "already finished" in err and "replay" not in err, err


def test_a_run_whose_replay_is_lost_resumes_with_fresh_replay_refilling_before_it_updates(tmp_path, capsys):
    """A lost or damaged replay.pt (left behind in a copy of the run) had left an off-policy run un-resumable."""
    cfg = tiny(tmp_path, "sac", "runner.total_steps=2000", "runner.random_steps=1000", "agent.batch_size=32",
               "agent.buffer_size=5000", "runner.eval_episodes=0", "agent.hidden=[32,32]", "runner.utd_ratio=0.125")
    runner = Runner(cfg)
    runner.train()
    runner.close()
    runner.checkpoint_path.with_name("replay.pt").unlink()
    with pytest.raises(CheckpointError, match=r"replay.pt: missing; .* or resume with --fresh-replay"):
        train(resume=runner.run_dir, overrides={"runner.total_steps": 4000})
    calls = []
    with pytest.warns(UserWarning, match=r"resuming without .*replay.pt: the replay buffer starts empty and the "
                                         r"agent's own actions refill it for 1,000 env steps"):
        resumed = Runner(load_config(runner.run_dir / "config.yaml", ["runner.total_steps=4000"]),
                         resume=runner.run_dir, fresh_replay=True)
    update = resumed.agent.update
    resumed.agent.update = lambda batch: (calls.append(resumed.progress.env_steps), update(batch))[1]
    resumed.train()
    resumed.close()
    # the first updates are owed by the refill's last step (8 envs, 2992 -> 3000), as by runner.random_steps' last
    owed = resumed.cfg.runner.utd_ratio * (4000 - 2992)
    assert resumed.replay.size == 2000 and min(calls) == 3000 and len(calls) == owed
    assert load_checkpoint(runner.checkpoint_path)["progress"]["refill_until"] == 3000
    assert cli(["train", "sac_pendulum", "--fresh-replay"]) == 2
    assert "--fresh-replay goes with --resume RUN" in capsys.readouterr().err
    from robolearn.preflight import check_fresh_replay

    with pytest.raises(ConfigError, match="algo 'ppo' learns on-policy and keeps no replay buffer"):
        check_fresh_replay(load_config("ppo_cartpole"), runner.run_dir)
    with pytest.raises(ConfigError, match="algo 'iql' trains offline on its dataset"):
        check_fresh_replay(load_config("iql_hopper"), runner.run_dir)


def test_a_run_of_no_steps_says_it_has_no_curves_not_that_it_is_no_run(tmp_path, capsys):
    """runner.total_steps=0 (allowed) had said 'curves skipped: ValueError: ... not a run directory'."""
    runner = Runner(tiny(tmp_path, "ppo", "runner.total_steps=0", "runner.eval_episodes=0"))
    result = runner.train()
    runner.close()
    assert "no curves: nothing was trained (runner.total_steps=0)" in capsys.readouterr().out
    assert result.curves is None and not (result.run_dir / "curves.png").exists()
    assert (result.run_dir / "export" / "controller.onnx").is_file()


def test_wandb_offline_writes_run_files(tmp_path):
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=256", "logging.wandb=offline", "runner.eval_episodes=0")
    runner = Runner(cfg)
    runner.train()
    runner.close()
    offline_runs = list((runner.run_dir / "wandb").glob("offline-run-*"))
    assert offline_runs and any(p.suffix == ".wandb" for p in offline_runs[0].iterdir())


@pytest.fixture
def wandb_exit_codes(monkeypatch) -> list[int]:
    """wandb.init replaced by a run that keeps the exit code each finish gives it."""
    import wandb

    finished: list[int] = []

    class Started:
        def log(self, *args, **kwargs): ...
        def finish(self, exit_code: int = 0) -> None:
            finished.append(exit_code)

    monkeypatch.setattr(wandb, "init", lambda **kwargs: Started())
    return finished


@pytest.mark.parametrize("error", ["full disk", "nan"])
def test_a_run_stopped_by_an_error_is_a_failed_wandb_run(tmp_path, monkeypatch, error, wandb_exit_codes):
    """A full disk at a checkpoint (any error) had left the W&B run open, for the exit to finish it as
    'finished' (exit code 0) while failed.txt and `list` called it failed; a NaN stop finished it so too."""
    import errno

    cfg = tiny(tmp_path, "ppo", "runner.total_steps=768", "logging.wandb=offline")
    if error == "nan":
        make_env = runner_module.make_env
        monkeypatch.setattr(runner_module, "make_env", lambda *a, **k: NaNAfter(make_env(*a, **k), steps=32 + 5))
    else:
        saves = []

        def full_disk(self):
            saves.append(1)
            if len(saves) == 2:
                raise OSError(errno.ENOSPC, "No space left on device", str(self.checkpoint_path))

        monkeypatch.setattr(Runner, "save", full_disk)
    with pytest.raises(NonFiniteError if error == "nan" else OSError):
        train(cfg)
    assert wandb_exit_codes == [1]


class NaNFromTheStart(NaNAfter):
    """An evaluation env (entered as a context manager) whose every reward is NaN."""

    def __init__(self, env) -> None:
        super().__init__(env, steps=0)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.env.close()


def test_a_nan_in_the_final_evaluation_closes_the_logs_and_keeps_the_finished_training(tmp_path, monkeypatch,
                                                                                      wandb_exit_codes):
    """A NaN reward met by the evaluation that ends the run (evaluate's own check): Runner.train() had raised
    evaluate's bare error, with metrics.jsonl still open and the W&B run never finished, and nothing said that
    the training had finished and its checkpoint was fine."""
    make_env = runner_module.make_env  # the training env as it is; the evaluation's (num_envs given) NaN
    monkeypatch.setattr(runner_module, "make_env", lambda *a, **k: NaNFromTheStart(make_env(*a, **k))
                        if "num_envs" in k else make_env(*a, **k))
    runner = Runner(tiny(tmp_path, "ppo", "runner.total_steps=512", "logging.wandb=offline"))
    run = runner.run_dir
    with pytest.raises(NonFiniteError, match=re.escape(
            "reward contains NaN or inf (envs 0, 1 of 2) at step 0 of the evaluation (counted from 0): the env "
            "produced it (check the task's observations and rewards, or physics that diverged); training finished "
            f"(at env_steps=512), its checkpoint kept at {run / 'checkpoints' / 'latest.pt'}, but the final evaluation "
            f"stopped: evaluate it again with robolearn eval {run} (robolearn train --resume {run} also writes "
            "eval.json, curves and video)")) as err:
        runner.train()
    runner.close()
    assert err.value.sources == ("reward",)
    assert runner.run_logger._file.closed and wandb_exit_codes == [1]  # failed, as a NaN in training is
    assert load_checkpoint(runner.checkpoint_path)["progress"]["env_steps"] == 512
    assert (run / "export" / "controller.json").is_file() and not (run / "eval.json").exists()


class FilledUp:
    """metrics.jsonl on a disk that fills after ``lines`` lines: the line that failed stays buffered and fails
    again at close, as a real file's does."""

    def __init__(self, file, lines: int) -> None:
        self.file, self.lines, self.stuck = file, lines, False

    def write(self, text: str) -> int:
        import errno

        if self.lines <= 0:
            self.stuck = True
            raise OSError(errno.ENOSPC, "No space left on device")
        self.lines -= 1
        return self.file.write(text)

    def close(self) -> None:
        self.file.close()
        if self.stuck:
            self.write("")


def test_a_full_disk_at_a_metrics_line_names_the_file_and_fails_the_wandb_run(tmp_path, monkeypatch,
                                                                              wandb_exit_codes):
    """Python's error for the write names no file ('a file being written', the command line said), and the
    metrics file's close failed again, before W&B was told: the W&B run ended as finished."""
    from robolearn.logger import RunLogger

    start = RunLogger.__init__

    def on_a_small_disk(self, *args, **kwargs):
        start(self, *args, **kwargs)
        self._file = FilledUp(self._file, lines=1)

    monkeypatch.setattr(RunLogger, "__init__", on_a_small_disk)
    with pytest.raises(OSError, match="No space left") as said:
        train(tiny(tmp_path, "ppo", "runner.total_steps=768", "logging.wandb=offline"))
    assert Path(said.value.filename).name == "metrics.jsonl"
    assert wandb_exit_codes == [1]


def test_wandb_files_on_a_full_disk_do_not_fail_a_run_that_ended(tmp_path, monkeypatch):
    """wandb.finish raised ENOSPC closing its debug.log: a run trained, exported and evaluated to its end
    exited with 'No space left on device: a file being written' and a failed.txt, while `list` said done."""
    import errno

    import wandb

    class Started:
        summary: dict = {}

        def log(self, *args, **kwargs): ...
        def finish(self, exit_code: int = 0) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(wandb, "init", lambda **kwargs: Started())
    with pytest.warns(UserWarning, match=r"W&B's files in .*wandb could not be completed \(No space left on device\)"):
        result = train(tiny(tmp_path, "ppo", "runner.total_steps=256", "logging.wandb=offline"))
    assert result.evaluation and not (result.run_dir / "failed.txt").exists()


def test_runs_started_in_the_same_second_get_their_own_directories(tmp_path, monkeypatch):
    """Parallel benchmark runs of one config start together; none may write into another's directory."""
    import robolearn.runs as runs_module

    frozen = runs_module.datetime(2026, 1, 2, 3, 4, 5)
    monkeypatch.setattr(runs_module, "datetime", type("FrozenClock", (), {"now": staticmethod(lambda: frozen)}))
    cfg = tiny(tmp_path)
    dirs = [runs_module.new_run_dir(cfg) for _ in range(3)]
    assert [d.name for d in dirs] == ["20260102-030405", "20260102-030405-1", "20260102-030405-2"]
    assert all(d.is_dir() for d in dirs)


class CallAfter:
    """Wraps a VecEnv so that ``call()`` runs before its step number ``steps`` (counted from 1)."""

    def __init__(self, env, steps: int, call) -> None:
        self.env, self.steps, self.call = env, steps, call

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, action):
        self.steps -= 1
        if self.steps == 0:
            self.call()
        return self.env.step(action)


def _raise_keyboard_interrupt():
    raise KeyboardInterrupt


@pytest.fixture
def ctrl_c_catchable():
    """SIGINT as in a terminal (a background shell starts processes ignoring it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_mid_rollout_saves_the_last_whole_iteration_and_the_resume_logs_on(tmp_path, monkeypatch, capsys):
    """PPO: a Ctrl+C inside the third rollout discards it; the checkpoint is the end of iteration 2
    (its steps, RNG and returns), and the resumed run's metrics.jsonl goes on without a jump."""
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=1024", "runner.checkpoint_every=100")
    make_env = runner_module.make_env
    def slow_then_ctrl_c():  # a long iteration: its seconds count in the run's time, though its steps are redone
        time.sleep(1.0)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner_module, "make_env",
                        lambda *a, **k: CallAfter(make_env(*a, **k), 2 * 32 + 10, slow_then_ctrl_c))
    runner = Runner(cfg)
    after_two = {}
    update = runner.agent.update

    def remember(batch):
        out = update(batch)
        after_two.update(params=flat_params(runner.agent), rng=torch.get_rng_state())
        return out

    monkeypatch.setattr(runner.agent, "update", remember)
    assert runner.train().interrupted
    runner.close()
    assert "interrupted: checkpoint saved at 512 env steps (the interrupted iteration is redone)" in capsys.readouterr().out
    monkeypatch.setattr(runner_module, "make_env", make_env)
    saved = load_checkpoint(runner.checkpoint_path)["progress"]
    assert (saved["iteration"], saved["env_steps"]) == (2, 2 * 256)
    assert torch.equal(saved["rng"]["torch"], after_two["rng"])  # as the end of iteration 2 left it
    before = read_metrics(runner.run_dir)[-1]["time"]
    assert saved["seconds"] >= before + 1.0  # the seconds since the last line are kept (they had been lost)

    resumed = Runner(cfg, resume=runner.run_dir)
    assert resumed.progress.env_steps == 512
    torch.testing.assert_close(flat_params(resumed.agent), after_two["params"])
    resumed.train()
    resumed.close()
    lines = read_metrics(runner.run_dir)
    assert [line["env_steps"] for line in lines] == [256, 512, 768, 1024]
    assert all(a["time"] <= b["time"] for a, b in zip(lines, lines[1:]))  # time goes on across the resume
    assert lines[2]["time"] > saved["seconds"]  # from the checkpoint's seconds


def test_a_second_ctrl_c_during_the_save_says_which_checkpoint_is_kept(tmp_path, monkeypatch, capsys):
    """It had printed only "interrupted", the save silently abandoned; then no resume line (a double Ctrl+C's
    end) and a bare "interrupted" after the words that said it."""
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=1024", "runner.checkpoint_every=1")
    pressed = []

    def ctrl_c():
        pressed.append(True)
        raise KeyboardInterrupt

    make_env = runner_module.make_env
    monkeypatch.setattr(runner_module, "make_env", lambda *a, **k: CallAfter(make_env(*a, **k), 2 * 32 + 10, ctrl_c))
    runner = Runner(cfg)
    save = runner.save
    monkeypatch.setattr(runner, "save", lambda: _raise_keyboard_interrupt() if pressed else save())  # pressed again
    with pytest.raises(KeyboardInterrupt) as stop:
        runner.train()
    runner.close()
    assert (f"interrupted again while saving: this checkpoint was not written; the last one, {runner.checkpoint_path}, "
            f"is kept; continue from it with: robolearn train --resume {runner.run_dir}\n") in capsys.readouterr().err
    assert stop.value.said  # the command line's own "interrupted" is not added
    assert load_checkpoint(runner.checkpoint_path)["progress"]["iteration"] == 2 and pressed


def test_an_interrupt_that_splits_an_update_saves_the_iteration_before(tmp_path, monkeypatch):
    """A KeyboardInterrupt raised inside the update (a second Ctrl+C, or one outside the main thread)
    leaves a half-updated agent: the checkpoint is the start of that iteration, agent included (weights,
    optimizer moments, learning rate: the copy the runner takes into buffers it reuses every iteration)."""
    from torch.utils._pytree import tree_leaves

    cfg = tiny(tmp_path, "ppo", "runner.total_steps=2560", "runner.checkpoint_every=100")
    runner = Runner(cfg)
    update, states = runner.agent.update, []

    def update_then_interrupt(batch):
        out = update(batch)
        states.append([leaf.clone() if isinstance(leaf, torch.Tensor) else leaf
                       for leaf in tree_leaves(runner.agent.state_dict())])
        if len(states) == 3:  # the copy before this third update is the first to reuse buffers
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(runner.agent, "update", update_then_interrupt)
    assert runner.train().interrupted
    runner.close()
    saved = load_checkpoint(runner.checkpoint_path)
    assert (saved["progress"]["iteration"], saved["progress"]["env_steps"]) == (2, 512)
    leaves, before, interrupted = tree_leaves(saved["agent"]), states[1], states[2]
    assert len(leaves) == len(before) and float(leaves[-1]) != cfg.agent.learning_rate  # the lr had moved
    assert sum(not torch.equal(a, b) for a, b in zip(interrupted, before) if isinstance(a, torch.Tensor)) > 10
    for got, expected in zip(leaves, before):  # the interrupted update moved the agent; the checkpoint is before it
        assert torch.equal(got, expected) if isinstance(got, torch.Tensor) else got == expected
    assert all(torch.equal(a, b) for a, b in zip(tree_leaves(runner.agent.state_dict()), before)
               if isinstance(a, torch.Tensor))  # the live agent was put back too


def test_real_ctrl_c_waits_for_the_update_in_flight(tmp_path, monkeypatch, ctrl_c_catchable):
    """A SIGINT during PPO's update is taken after it: the checkpoint is that whole iteration."""
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=2560", "runner.checkpoint_every=100")
    runner = Runner(cfg)
    update, calls = runner.agent.update, []

    def update_then_press(batch):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # lands inside this update, which must still finish
        return update(batch)

    monkeypatch.setattr(runner.agent, "update", update_then_press)
    assert runner.train().interrupted
    runner.close()
    assert len(calls) == 2
    saved = load_checkpoint(runner.checkpoint_path)
    assert (saved["progress"]["iteration"], saved["progress"]["env_steps"]) == (2, 512)
    torch.testing.assert_close(flat_params(runner.agent), torch.cat(
        [t.flatten().float() for t in _tensors(saved["agent"])]))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handed back


def test_ranks_stop_together_at_the_end_of_an_iteration(tmp_path, monkeypatch):
    """With several ranks a Ctrl+C never stops one rank mid-iteration (the others would wait in a
    gradient all-reduce): it is reported with the iteration's metrics, and every rank stops there.
    Here another rank reports it (its share of the averaged 'ctrl_c' metric) during iteration 2."""
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=2560", "runner.checkpoint_every=100")
    runner = Runner(cfg)
    runner.ctrl_c.deferred = True
    seen = []

    def mean_metrics(metrics):
        seen.append(metrics.get("ctrl_c"))
        return {**metrics, "ctrl_c": 0.5} if len(seen) == 2 else metrics

    monkeypatch.setattr(runner_module.distributed, "mean_metrics", mean_metrics)
    assert runner.train().interrupted
    runner.close()
    assert seen == [0.0, 0.0]  # this rank had not pressed
    saved = load_checkpoint(runner.checkpoint_path)["progress"]
    assert (saved["iteration"], saved["env_steps"]) == (2, 512)
    assert "ctrl_c" not in read_metrics(runner.run_dir)[-1]


def test_a_deferred_ctrl_c_waits_for_the_ranks_to_agree_and_says_so(ctrl_c_catchable, capfd):
    with CtrlC(deferred=True) as ctrl_c:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # (Python takes it at the next bytecode)
        assert ctrl_c.pending
        ctrl_c.check()  # no KeyboardInterrupt mid-iteration
        assert "stopping at the end of this iteration, where every rank can save together (Ctrl+C again to stop " \
               "at once)" in capfd.readouterr().err  # an iteration can take minutes: not silence until then
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        assert ctrl_c.forced
        ctrl_c.pending = ctrl_c.forced = False
        os.kill(os.getpid(), signal.SIGTERM)  # torchrun's, also when another rank failed: no save together then
        time.sleep(0.1)
        assert "SIGTERM: stopping at the end of this iteration, where every rank can save together (Ctrl+C again " \
               "to stop at once); if torchrun sent it because a rank failed (its error is above), the ranks cannot " \
               "save together and a resume goes on from the last checkpoint" in capfd.readouterr().err
        ctrl_c.deferred = False
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.check()


def test_off_policy_ctrl_c_keeps_its_steps_and_the_resume_finishes_that_iteration(tmp_path, monkeypatch, capsys,
                                                                                   ctrl_c_catchable):
    """SAC: the replay holds every step counted, and the resumed run's first iteration is the rest of
    the one cut short, so the logged steps stay on the 1000-step grid."""
    cfg = tiny(tmp_path, "sac", "runner.total_steps=3000", "runner.random_steps=2500", "agent.batch_size=32",
               "agent.buffer_size=5000")
    make_env = runner_module.make_env
    press = lambda: os.kill(os.getpid(), signal.SIGINT)  # noqa: E731
    monkeypatch.setattr(runner_module, "make_env", lambda *a, **k: CallAfter(make_env(*a, **k), 125 + 60, press))
    runner = Runner(cfg)
    assert runner.train().interrupted
    runner.close()
    assert "interrupted: checkpoint saved at 1,480 env steps; continue with" in capsys.readouterr().out  # all kept
    monkeypatch.setattr(runner_module, "make_env", make_env)
    saved = load_checkpoint(runner.checkpoint_path)["progress"]
    assert (saved["iteration"], saved["env_steps"]) == (1, 8 * 185)

    resumed = Runner(cfg, resume=runner.run_dir)
    assert resumed.replay.size == 8 * 185
    resumed.train()
    resumed.close()
    assert [line["env_steps"] for line in read_metrics(runner.run_dir)] == [1000, 2000, 3000]


def test_a_resume_from_an_older_checkpoint_sets_the_later_lines_aside(tmp_path):
    """A crash after logging past the last checkpoint: the resumed run logs those steps again, and
    the lines it replaces move to metrics.superseded.jsonl, so metrics.jsonl is one trajectory."""
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=768", "runner.checkpoint_every=2", "runner.eval_episodes=0")
    first = Runner(cfg)
    first.train()
    first.close()
    lines = read_metrics(first.run_dir)
    (first.run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines + [{**lines[-1], "env_steps": 1024}]))
    checkpoint = load_checkpoint(first.checkpoint_path)
    checkpoint["progress"].update(env_steps=512, iteration=2)  # as if the run died after its 2nd-iteration save
    torch.save(checkpoint, first.checkpoint_path)
    cfg.runner.total_steps = 1024
    resumed = Runner(cfg, resume=first.run_dir)
    resumed.train()
    resumed.close()
    assert [x["env_steps"] for x in read_metrics(first.run_dir)] == [256, 512, 768, 1024]
    superseded = [json.loads(x) for x in (first.run_dir / "metrics.superseded.jsonl").read_text().splitlines()]
    assert [x["env_steps"] for x in superseded] == [768, 1024]


def test_the_warp_fallback_is_what_the_run_records(tmp_path, monkeypatch):
    """backend=warp device=cuda without a GPU runs MuJoCo on the CPU: config.yaml says so, and the
    end-of-run evaluation env is built that way too (it had warned a second time)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="falling back") as warned:
        runner = Runner(tiny(tmp_path, "ppo", "env.backend=warp", "env.device=cuda", "runner.total_steps=256"))
        runner.train()
        runner.close()
    assert len([w for w in warned if "falling back" in str(w.message)]) == 1
    env = load_run_config(runner.run_dir).env
    assert (env.backend, env.device) == ("mujoco", "cpu")


def test_a_failed_resume_leaves_the_runs_config_alone(tmp_path):
    """An override the checkpoint cannot take is refused before config.yaml is rewritten."""
    first = Runner(tiny(tmp_path, "ppo", "runner.total_steps=256", "runner.eval_episodes=0"))
    first.train()
    first.close()
    config = (first.run_dir / "config.yaml").read_bytes()
    with pytest.raises(CheckpointError, match=r"this model expects \(128, "):
        Runner(tiny(tmp_path, "ppo", "agent.actor_hidden=[128,128]"), resume=first.run_dir)
    assert (first.run_dir / "config.yaml").read_bytes() == config
    cfg = load_run_config(first.run_dir)
    cfg.runner.total_steps = 512
    Runner(cfg, resume=first.run_dir).close()  # a plain resume (to go on: it had finished) still works


@pytest.mark.parametrize("override", ["env.task=cartpol", "env.kwargs.nope=1"])
def test_a_fresh_run_that_fails_to_build_leaves_no_run_directory(tmp_path, override):
    cfg = tiny(tmp_path, "ppo", override)
    with pytest.raises(ValueError):
        Runner(cfg)
    assert not list((tmp_path / "runs").glob("*/*"))


def test_truncated_files_are_refused_in_one_line(tmp_path, capsys):
    """Checkpoint, replay buffer and exports cut short (a full disk, a copy interrupted) give the
    CLI's one-line error naming the file and the way out, not a traceback."""
    runner = Runner(tiny(tmp_path, "sac", "runner.total_steps=1000", "runner.random_steps=1000",
                         "runner.eval_episodes=0"))
    runner.train()
    runner.close()
    run = runner.run_dir

    def cut(name: str, size: int = 5000) -> None:
        path = run / name
        path.write_bytes(path.read_bytes()[:size])

    cut("checkpoints/replay.pt")
    with pytest.raises(CheckpointError, match="replay.pt: not a readable replay buffer .*restore it from a copy"):
        Runner(load_run_config(run), resume=run)
    for name, fix in (("export/controller.onnx", "export it again"), ("export/controller.pt", "export it again")):
        cut(name, 3000)
        fmt = "onnx" if name.endswith("onnx") else "torchscript"
        assert cli(["eval", str(run), "--episodes", "1", "--exported", fmt]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {run / name}: not a loadable exported controller") and fix in err
        assert "\n" not in err
    cut("checkpoints/latest.pt")
    for command in (["eval", str(run), "--episodes", "1"], ["export", str(run)], ["train", "--resume", str(run)]):
        assert cli(command) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {run / 'checkpoints/latest.pt'}: not a readable robolearn checkpoint")
        assert "\n" not in err


def test_a_resume_that_drops_a_normalizer_names_the_setting(tmp_path, capsys):
    """agent.normalize_obs=false on a resume builds an Identity where the checkpoint holds a normalizer's mean, var
    and count: torch's strict load had ended the resume in a RuntimeError traceback."""
    result = train(tiny(tmp_path, "ppo", "runner.total_steps=256", "runner.eval_episodes=0", "agent.actor_hidden=[32]",
                        "agent.critic_hidden=[32]"))
    capsys.readouterr()
    assert cli(["train", "--resume", str(result.run_dir), "runner.total_steps=512", "agent.normalize_obs=false"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the checkpoint does not load into this model (") and "Traceback" not in err
    assert "agent settings changed since the checkpoint: agent.normalize_obs True -> False" in err
    config = result.run_dir / "config.yaml"  # eval of a run whose config.yaml was edited so: a traceback too
    config.write_text(config.read_text().replace("normalize_obs: true", "normalize_obs: false"))
    assert cli(["eval", str(result.run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the checkpoint does not load into this model (") and "Traceback" not in err
    assert f"agent.normalize_obs True -> False ({config} was changed since: put those settings back" in err
    config.write_text(config.read_text().replace("normalize_obs: false", "normalize_obs: true")
                      .replace("activation: elu", "activation: relu"))  # (it had evaluated under relu, silently)
    assert cli(["eval", str(result.run_dir)]) == 2
    assert f"{config} was changed since its checkpoint: agent.activation 'elu' -> 'relu'" in capsys.readouterr().err


def test_a_resume_below_what_the_run_trained_says_it_trains_no_more(tmp_path, capsys):
    """A resume with a budget under its checkpoint's steps had said "runner.total_steps 500 runs to 1,024 env
    steps: whole iterations of 256", as if it went on training to there."""
    def cut(metrics: dict) -> bool:  # a stop that raises leaves the run checkpointed, not ended
        if metrics["env_steps"] >= 1024:
            raise RuntimeError("cut")
        return False

    with pytest.raises(RuntimeError, match="cut"):
        train(tiny(tmp_path, "ppo", "runner.total_steps=5000", "agent.actor_hidden=[32]", "agent.critic_hidden=[32]"),
              stop=cut)
    run = next((tmp_path / "runs" / "ppo_cartpole").iterdir())
    capsys.readouterr()
    assert cli(["train", "--resume", str(run), "runner.total_steps=500"]) == 0
    out = capsys.readouterr().out
    assert "runner.total_steps 500: the run has trained 1,024 env steps already; it trains no more and ends" in out
    assert "whole iterations" not in out and (run / "eval.json").is_file()


@pytest.mark.parametrize("algo, total, planned", [("ppo", 1000, 1024), ("sac", 1500, 2000)])
def test_the_run_ends_where_it_says(tmp_path, algo, total, planned, capsys):
    """Iterations are never cut short: the progress bar's total is the step count the run really ends at,
    and the rounding is said."""
    small = ["agent.batch_size=32", "agent.hidden=[32,32]"] if algo == "sac" else ["agent.actor_hidden=[32]",
                                                                                  "agent.critic_hidden=[32]"]
    runner = Runner(tiny(tmp_path, algo, f"runner.total_steps={total}", "runner.random_steps=100", *small))
    try:
        assert runner.planned_steps() == planned
        runner.train()
        assert f"runner.total_steps {total:,} runs to {planned:,} env steps: whole iterations of " in capsys.readouterr().out
        assert runner.progress.env_steps == planned
        # resumed off the grid (another number of ranks had other iterations): the run ends where it said
        runner.progress.env_steps, runner.cfg.runner.total_steps = planned + 4, planned + 300
        said = runner.planned_steps()
        runner.train()
        assert runner.progress.env_steps == said
    finally:
        runner.close()


def test_an_off_policy_run_whose_warm_up_covers_it_all_is_said_to_learn_nothing(tmp_path):
    with pytest.warns(UserWarning, match=r"runner.random_steps=4,000 covers the whole run \(3,000 env steps\): every "
                                         r"action is random and the agent updates at most on the last step"):
        Runner(tiny(tmp_path, "sac", "runner.total_steps=3000", "runner.random_steps=4000")).close()


def test_a_resume_whose_warm_up_covers_the_rest_says_the_checkpoints_controller_is_kept(tmp_path):
    """A resume of a SAC run that had trained past its warm-up, with runner.random_steps raised over the rest, had been
    told its exported controller is untrained: it is the checkpoint's, which the rest of the run leaves as it is."""
    cfg = tiny(tmp_path, "sac", "runner.total_steps=600", "runner.random_steps=300", "runner.eval_episodes=0",
               "agent.batch_size=32", "agent.hidden=[16]")
    first = Runner(cfg)
    first.train()
    first.close()
    cfg.runner.total_steps, cfg.runner.random_steps = 1200, 5000
    with pytest.warns(UserWarning) as said:
        Runner(cfg, resume=first.run_dir).close()
    warm_up = [str(w.message) for w in said if "covers the whole run" in str(w.message)]
    assert len(warm_up) == 1 and "untrained" not in warm_up[0], warm_up
    assert re.search(r"every action from here is random .*the controller it exports is the one its checkpoint holds "
                     r"\(\d[\d,]* env steps\)", warm_up[0]), warm_up


def test_a_resume_whose_network_changed_names_the_setting(tmp_path):
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=256")
    first = Runner(cfg)
    first.train()
    first.close()
    cfg.runner.total_steps, cfg.agent.actor_hidden = 512, (32,)
    with pytest.raises(CheckpointError, match=r"changed since the checkpoint: agent.actor_hidden \[64, 64\] -> \[32\] "
                                              r"\(one of them changed the network: resume without that override\)"):
        Runner(cfg, resume=first.run_dir)


@pytest.mark.parametrize("config, small, sequence_length, refusal", [
    # SRL's networks do not depend on J: a resume with another sequence_length had gone on quietly with critics and
    # a model that learnt J-step sequences (the same for a skill's horizon and HRAC's subgoal period)
    ("srl_gym_pendulum_j4", ["env.num_envs=2", "agent.hidden=[16,16]", "agent.gru_hidden=16",  # small networks: the
                             "agent.model_hidden=[16,16]"], 8,  # refusal reads the saved J, not the weights
     r"agent.sequence_length 4 -> 8: SRL learnt its controller with the saved value.*resume without that override"),
    # sac_as's K also sizes its critic's input: the shape check had been reached first and said a tensor's shape,
    # where SRL's resume (same setting, no weight depends on it) says the refusal
    ("sac_as_gym_pendulum", ["agent.buffer_size=1000", "agent.hidden=[16,16]", "agent.gru_hidden=16"], 2,
     r"^agent.sequence_length 4 -> 2: SequenceCriticSAC learnt its controller with the saved value.*resume without "
     r"that override"),
], ids=["srl", "sac_as"])
def test_a_resume_that_changes_a_sequence_controllers_length_is_refused_by_name(tmp_path, config, small,
                                                                                sequence_length, refusal):
    cfg = load_config(config, [f"run_dir={tmp_path / 'runs'}", "logging.wandb=disabled", "logging.progress=false",
                               "runner.eval_episodes=0", "runner.video_seconds=0", "runner.total_steps=200",
                               "runner.random_steps=100", "runner.utd_ratio=0.05", "agent.batch_size=16", *small])
    first = Runner(cfg)  # (an off-policy iteration is ~1000 env steps: 45 updates, not 900; none is what is refused)
    first.train()
    first.close()
    cfg.runner.total_steps, cfg.agent.sequence_length = 400, sequence_length
    with pytest.raises(CheckpointError, match=refusal):
        Runner(cfg, resume=first.run_dir)


def test_a_resume_that_changes_the_activation_is_refused(tmp_path):
    """An activation has no weights: agent.activation=relu on a resume of an elu-trained PPO had loaded without a
    word and run the weights through another function (only listed among the changed settings)."""
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=256", "runner.eval_episodes=0", "agent.actor_hidden=[16]",
               "agent.critic_hidden=[16]")
    first = Runner(cfg)
    first.train()
    first.close()
    cfg.runner.total_steps, cfg.agent.activation = 512, "relu"
    with pytest.raises(CheckpointError, match=r"agent.activation 'elu' -> 'relu': PPO learnt its controller with the "
                                              r"saved value.*resume without that override"):
        Runner(cfg, resume=first.run_dir)


def test_a_resume_may_raise_min_std_above_the_runs_init_std(tmp_path):
    """agent.min_std=1.5 on a resume of a run started at init_std 1.0 had been refused (min_std must not exceed
    init_std), and init_std=1.5 with it is refused on a resume (a starting value): the floor could not be raised at
    all. A new run's start outside its bounds is still refused; a resume's floor applies from its first rollout."""
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=256", "runner.eval_episodes=0", "agent.actor_hidden=[16]",
               "agent.critic_hidden=[16]", "agent.min_std=0.5")
    first = Runner(cfg)
    first.train()
    first.close()
    resumed = load_config(first.run_dir / "config.yaml", ["agent.min_std=1.5", "runner.total_steps=512"])  # as --resume
    with pytest.raises(ConfigError, match=r"agent.min_std \(1.5\) must not exceed agent.init_std \(1.0\)"):
        Runner(resumed)  # a new run's
    second = Runner(resumed, resume=first.run_dir)
    assert second.agent.std.min().item() == pytest.approx(1.5)  # the checkpoint's std, under the raised floor
    second.close()
    assert load_run_config(first.run_dir).agent.min_std == 1.5  # its config.yaml loads (eval, the next resume)


@pytest.mark.parametrize("command_line", [True, False])
def test_a_plain_resume_takes_the_checkpoints_settings_a_stopped_resume_recorded(tmp_path, capsys, command_line):
    """An older resume with agent.init_std=0.5 (or another activation), stopped before it saved, had recorded them in
    config.yaml; every plain resume was then refused ('agent.init_std 1.0 -> 0.5 ... resume without that override')
    though it gave none. It goes on with the checkpoint's, says so, and its config.yaml records them."""
    from robolearn import cli

    cfg = tiny(tmp_path, "ppo", "runner.total_steps=256", "runner.eval_episodes=0", "agent.actor_hidden=[16]",
               "agent.critic_hidden=[16]")
    first = Runner(cfg)
    first.train()
    first.close()
    config = first.run_dir / "config.yaml"
    config.write_text(config.read_text().replace("init_std: 1.0", "init_std: 0.5").replace("activation: elu",
                                                                                         "activation: relu"))
    with pytest.warns(UserWarning, match=r"config.yaml records agent.activation='relu', agent.init_std=0.5, its "
                                         r"checkpoint agent.activation='elu', agent.init_std=1.0 .*goes on with the "
                                         r"checkpoint's"):
        if command_line:
            assert cli.main(["train", "--resume", str(first.run_dir), "runner.total_steps=512"]) == 0
        else:
            assert not train(resume=first.run_dir, overrides=["runner.total_steps=512"]).interrupted
    agent = load_run_config(first.run_dir).agent
    assert (agent.init_std, agent.activation) == (1.0, "elu")
    # no step trained with config.yaml's values: not said as the settings the steps so far trained with, nor kept
    assert "resumed with changed settings" not in capsys.readouterr().out
    assert not list(first.run_dir.glob("config.superseded-*"))


def test_a_setting_put_back_to_the_checkpoints_hides_no_change_of_a_longer_key(tmp_path, capsys):
    """A stopped resume recorded agent.target_noise=0.3 (its checkpoint: 0.2); the next resume puts it back and
    changes agent.target_noise_clip. Left out as a prefix, target_noise had hidden target_noise_clip's change: it
    went unsaid, and the config the steps so far trained with was not kept."""
    from robolearn.checkpoint import save_checkpoint
    from robolearn.runs import keep_replaced_config

    cfg = validated(TrainConfig(algo="td3bc"))
    trained = to_dict(cfg)
    save_checkpoint(tmp_path / "checkpoints" / "latest.pt", config=trained, agent={}, progress={})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**trained, "agent": {**trained["agent"],
                                                                               "target_noise": 0.3}}))
    cfg.agent.target_noise_clip = 0.9
    keep_replaced_config(tmp_path, cfg)
    said = capsys.readouterr().out
    assert f"agent.target_noise_clip {trained['agent']['target_noise_clip']!r} -> 0.9" in said
    assert "agent.target_noise " not in said  # (put back to the checkpoint's: no step trained with 0.3)
    assert (tmp_path / "config.superseded-1.yaml").is_file()


def test_a_copied_run_resumed_takes_its_own_run_id_a_moved_or_linked_one_keeps_it(tmp_path, capsys):
    """A run folder copied whole kept its run_id, so once both were resumed an export of one swapped into the other
    was not told apart. A resume of a checkpoint saved in another folder that still holds the run takes an id of its
    own; a moved run (its old folder gone) and the same folder by another path (a link) keep theirs."""
    import shutil

    cfg = tiny(tmp_path, "ppo", "runner.total_steps=256", "runner.eval_episodes=0", "agent.actor_hidden=[16]",
               "agent.critic_hidden=[16]")
    first = Runner(cfg)
    first.train()
    first.close()
    own_id = saved_progress(first.run_dir)["run_id"]
    moved = first.run_dir.rename(tmp_path / "moved")
    linked = tmp_path / "linked"
    linked.symlink_to(moved)
    for run, steps in ((moved, 512), (linked, 768)):
        train(resume=run, overrides=[f"runner.total_steps={steps}"])
        assert saved_progress(run)["run_id"] == own_id and "is a copy of" not in capsys.readouterr().out
    copy = tmp_path / "copy"
    shutil.copytree(moved, copy)
    train(resume=copy, overrides=["runner.total_steps=1024"])
    assert f"{copy} is a copy of {moved}, which still holds the run: it takes a run id of its own" in \
        capsys.readouterr().out
    assert saved_progress(copy)["run_id"] != own_id == saved_progress(moved)["run_id"]
    assert json.loads((copy / "export" / "controller.json").read_text())["run_id"] == saved_progress(copy)["run_id"]


def test_a_copied_run_resumed_starts_a_wandb_run_of_its_own(tmp_path, capsys):
    """A copy that took a run id of its own still took its W&B id from the original's W&B files copied with it, so
    both logged into one W&B run. The copy sets those aside (out of `wandb sync`'s reach) and logs under a new id,
    which its next resume keeps; the original keeps its own."""
    import shutil

    from robolearn.logger import wandb_sessions

    def wandb_ids(run):
        return {session.stem for session in wandb_sessions(run)}

    cfg = tiny(tmp_path, "ppo", "runner.total_steps=256", "runner.eval_episodes=0", "agent.actor_hidden=[16]",
               "agent.critic_hidden=[16]", "logging.wandb=offline")
    original = train(cfg).run_dir
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    train(resume=copy, overrides=["runner.total_steps=512"])
    assert f"and a W&B run of its own (the original's W&B files copied with it are in {copy / 'wandb' / 'copied'})" \
        in capsys.readouterr().out
    assert len(wandb_ids(copy)) == 1 and wandb_ids(copy) != wandb_ids(original)
    train(resume=copy, overrides=["runner.total_steps=768"])
    train(resume=original, overrides=["runner.total_steps=512"])
    assert len(wandb_ids(copy)) == len(wandb_ids(original)) == 1 and wandb_ids(copy) != wandb_ids(original)
    assert len(wandb_sessions(copy)) == len(wandb_sessions(original)) == 2
    assert list((copy / "wandb" / "copied").glob("*/*.wandb"))  # kept, one level down


def test_a_copy_resumed_again_after_a_failed_resume_keeps_its_own_wandb_run(tmp_path, capsys, monkeypatch):
    """A copy's first resume that failed before saving left it a copy, whose next resume set that attempt's own W&B
    session aside as the original's, in wandb/copied/, and started another W&B run: only the original's go there."""
    from robolearn.logger import wandb_sessions

    cfg = tiny(tmp_path, "ppo", "runner.total_steps=256", "runner.eval_episodes=0", "agent.actor_hidden=[16]",
               "agent.critic_hidden=[16]", "logging.wandb=offline")
    original = train(cfg).run_dir
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    def fail(*_) -> None:
        raise RuntimeError("a failure before any save")

    with monkeypatch.context() as patch, pytest.raises(RuntimeError, match="a failure before any save"):
        patch.setattr(runner_module, "check_finite", fail)  # (the first observation's check: W&B has started)
        train(resume=copy, overrides=["runner.total_steps=512"])
    own = wandb_sessions(copy)
    assert len(own) == 1 and own[0].stem not in {session.stem for session in wandb_sessions(original)}
    capsys.readouterr()
    train(resume=copy, overrides=["runner.total_steps=512"])
    said = capsys.readouterr().out
    assert f"{copy} is a copy of {original}" in said and "W&B files copied with it" not in said
    assert {session.stem for session in wandb_sessions(copy)} == {own[0].stem}  # its own W&B run, resumed
    assert [path.stem for path in (copy / "wandb" / "copied").glob("*/*.wandb")] == \
        [session.stem for session in wandb_sessions(original)]  # the original's alone


def test_a_copys_wandb_folder_linked_to_its_originals_is_not_set_aside(tmp_path):
    """A copy whose wandb folder is a link (to its original's, copied as a link) had set aside, through it, the
    original's own W&B files, whose next resume then started a W&B run anew."""
    from robolearn.logger import set_aside_wandb, wandb_sessions

    session = tmp_path / "original" / "wandb" / "offline-run-20260101_000000-abc" / "run-abc.wandb"
    session.parent.mkdir(parents=True)
    session.write_bytes(b"")
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "wandb").symlink_to(tmp_path / "original" / "wandb")
    with pytest.raises(ConfigError, match=r"copy/wandb is a link to .*original/wandb.* make it a folder of the "):
        set_aside_wandb(tmp_path / "copy", tmp_path / "original")
    assert wandb_sessions(tmp_path / "original") == [session]
    (tmp_path / "copy" / "wandb").unlink()
    shutil.copytree(tmp_path / "original" / "wandb", tmp_path / "copy" / "wandb")  # a folder of its own: set aside
    assert set_aside_wandb(tmp_path / "copy", tmp_path / "original") == tmp_path / "copy" / "wandb" / "copied"
    assert not wandb_sessions(tmp_path / "copy") and wandb_sessions(tmp_path / "original") == [session]


def test_a_resume_that_changes_a_starting_value_is_refused_as_changing_nothing(tmp_path):
    """SAC's agent.init_alpha on a resume had been listed among the changed settings (and recorded in config.yaml),
    while the temperature went on from the checkpoint's log_alpha: the override changed nothing."""
    cfg = tiny(tmp_path, "sac", "runner.total_steps=64", "runner.random_steps=32", "runner.eval_episodes=0",
               "agent.batch_size=16", "agent.buffer_size=400", "agent.hidden=[16]")
    first = Runner(cfg)
    first.train()
    first.close()
    config = (first.run_dir / "config.yaml").read_text()
    cfg.runner.total_steps, cfg.agent.init_alpha = 128, 0.05
    with pytest.raises(CheckpointError, match=r"agent.init_alpha 1.0 -> 0.05: a starting value, which only a new SAC "
                                              r"starts from; .*so it would change nothing: resume without that override"):
        Runner(cfg, resume=first.run_dir)
    assert (first.run_dir / "config.yaml").read_text() == config  # nothing recorded as if it applied
    assert not list(first.run_dir.glob("config.superseded-*"))


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_ctrl_c_after_an_unverified_nan_stops_as_a_nan_does(tmp_path, monkeypatch, algo):
    """With checks deferred (a GPU run), a Ctrl+C in the iteration that met a NaN: PPO throws that rollout
    away and checkpoints its start; SAC keeps its steps, so the NaN stops the run, with no checkpoint of it."""
    make_env = runner_module.make_env
    monkeypatch.setattr(runner_module, "make_env", lambda *a, **k: NaNAfter(make_env(*a, **k), steps=32 + 5))
    extra = ("runner.random_steps=1000", "agent.batch_size=32") if algo == "sac" else ()  # random actions: no NaN ones
    runner = Runner(tiny(tmp_path, algo, "runner.total_steps=100000", *extra))
    runner._finite = FiniteWatch("cpu", deferred=True)
    step, calls = runner._step, {"n": 0}

    def interrupted_step(*args):
        calls["n"] += 1
        if calls["n"] == 32 + 10:  # after the NaN, within its iteration
            raise KeyboardInterrupt
        return step(*args)

    monkeypatch.setattr(runner, "_step", interrupted_step)
    if algo == "ppo":
        assert runner.train().interrupted
        assert load_checkpoint(runner.checkpoint_path)["progress"]["iteration"] == 1
    else:
        with pytest.raises(NonFiniteError, match="reward contained NaN or inf during this iteration; training stopped"):
            runner.train()
        assert not runner.checkpoint_path.is_file()
    runner.close()


def test_the_last_iteration_is_logged_whatever_log_every_so_list_sees_the_run_done(tmp_path, capsys):
    runner = Runner(tiny(tmp_path, "ppo", "runner.total_steps=768", "runner.log_every=2"))  # 3 iterations
    runner.train()
    runner.close()
    assert [line["env_steps"] for line in read_metrics(runner.run_dir)] == [512, 768]
    assert cli(["list", "--runs", str(runner.run_dir.parents[1])]) == 0
    assert f"{runner.run_dir}  done" in capsys.readouterr().out


def test_a_run_trained_on_after_it_ended_is_not_done_until_evaluated_again(tmp_path, monkeypatch, capsys):
    """A Ctrl+C in the evaluation of a run resumed past its first end had left the first end's eval.json
    beside the new export: `list` called it done, and the resume that would evaluate it was refused."""
    first = Runner(tiny(tmp_path, "ppo", "runner.total_steps=256"))
    first.train()
    first.close()
    run = first.run_dir
    evaluation = (run / "eval.json").read_text()

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner_module, "evaluate", ctrl_c)
    longer = Runner(tiny(tmp_path, "ppo", "runner.total_steps=512"), resume=run)
    assert not (run / "eval.json").exists()  # set aside as the resume that trains on starts (a kill mid-way:
    with pytest.raises(KeyboardInterrupt):  # `list` had called it "ended early")
        longer.train()
    longer.close()
    assert not (run / "eval.json").exists() and (run / "eval.superseded.json").read_text() == evaluation
    capsys.readouterr()
    assert cli(["list", "--runs", str(run)]) == 0
    assert "trained (512 env_steps), not yet evaluated" in capsys.readouterr().out  # exported (this export's)
    monkeypatch.undo()
    finished = Runner(tiny(tmp_path, "ppo", "runner.total_steps=512"), resume=run)  # not refused: it finishes
    finished.train()
    finished.close()
    assert json.loads((run / "eval.json").read_text())["episodes"] == 2


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["kill", "terminal-closed"])
def test_sigterm_and_sighup_save_a_checkpoint_as_ctrl_c_does(tmp_path, monkeypatch, signum):
    """A preempted or `docker stop`ped run (SIGTERM), or one whose terminal closed (SIGHUP), had ended on the
    spot with nothing saved."""
    runner = Runner(tiny(tmp_path, "ppo", "runner.total_steps=2560", "runner.checkpoint_every=100"))
    update, calls = runner.agent.update, {"n": 0}

    def terminated_update(batch):
        calls["n"] += 1
        if calls["n"] == 3:
            os.kill(os.getpid(), signum)  # lands inside the update: taken after it
        return update(batch)

    monkeypatch.setattr(runner.agent, "update", terminated_update)
    result = runner.train()
    runner.close()
    assert result.interrupted and load_checkpoint(runner.checkpoint_path)["progress"]["iteration"] == 3
    assert signal.getsignal(signum) is signal.SIG_DFL  # given back


def test_a_ctrl_c_in_python_train_returns_the_result_interrupted_as_documented(tmp_path, capsys):
    """robolearn.train()'s docstring and README: a Ctrl+C during training raises no KeyboardInterrupt; the run is
    checkpointed and the result says interrupted (how far it trained; nothing exported or evaluated)."""
    def ctrl_c_at_the_second(metrics):
        if metrics["iteration"] == 2:
            os.kill(os.getpid(), signal.SIGINT)  # taken at the next safe point, in the third iteration
        return False

    result = train(tiny(tmp_path, "ppo", "runner.total_steps=2560", "runner.checkpoint_every=100"),
                   stop=ctrl_c_at_the_second)
    assert result.interrupted and result.trained == {"env_steps": 512}
    assert result.evaluation is None and result.exported == {} and not (result.run_dir / "eval.json").exists()
    assert load_checkpoint(result.run_dir / "checkpoints" / "latest.pt")["progress"]["env_steps"] == 512
    assert f"robolearn.train(resume='{result.run_dir}')" in capsys.readouterr().out


def test_a_stop_after_the_pipe_it_printed_to_died_saves_and_is_no_failure(tmp_path):
    """`robolearn train | tee log` and a Ctrl+C: tee dies of it too, and the run's "interrupted: checkpoint saved"
    (and the progress bar's last draw) raised BrokenPipeError: the run, its checkpoint saved, was marked failed
    (failed.txt, a traceback) and the command ended in that error. Its output goes nowhere instead, and it stops as
    a stop does (130). SIGTERM here: it stops as Ctrl+C does, and is not ignored in a suite run in the background."""
    runs, stderr = tmp_path / "runs", tmp_path / "stderr.txt"
    path = os.pathsep.join(filter(None, [str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH")]))
    with stderr.open("w") as err:  # only stdout piped (`| tee`): the resume line goes to the stderr still read
        child = subprocess.Popen([sys.executable, "-m", "robolearn", "train", "runner.total_steps=5000000",
                                  f"run_dir={runs}", "env.num_envs=16", "--no-wandb"], stdout=subprocess.PIPE,
                                 stderr=err, cwd=tmp_path, env={**os.environ, "PYTHONPATH": path})
    try:
        until = time.monotonic() + 120  # a first metrics line: the loop runs, its stop handlers installed
        while not any(p.stat().st_size for p in runs.glob("*/*/metrics.jsonl")) and time.monotonic() < until \
                and child.poll() is None:
            time.sleep(0.1)
        child.stdout.close()  # the reader dies first (tee, ended by the same Ctrl+C)
        child.send_signal(signal.SIGTERM)
        status = child.wait(timeout=120)
    finally:
        child.kill()
        child.wait()
    said = stderr.read_text()
    assert status == 130, said
    run = next(runs.glob("*/*"))
    assert (run / "checkpoints" / "latest.pt").is_file() and not (run / "failed.txt").exists()
    assert f"continue with: robolearn train --resume {run}" in said


def test_a_resume_goes_on_at_the_randomization_width_it_reached(tmp_path):
    """Automatic domain randomization had started over at width 0 on every resume."""
    cfg = load_config("ppo_arm_reach_auto", [f"run_dir={tmp_path / 'runs'}", "env.num_envs=8", "logging.wandb=disabled",
                                              "logging.progress=false", "runner.eval_episodes=0",
                                              "runner.video_seconds=0", "runner.total_steps=256"])
    first = Runner(cfg)
    first.train()
    first.env.load_adaptation_state({"width": 0.35, "outcomes": [True, False]})  # as if it had widened
    first.save()
    first.close()
    cfg.runner.total_steps = 512
    resumed = Runner(cfg, resume=first.run_dir)
    assert resumed.env.width == pytest.approx(0.35) and resumed.env._outcomes == [True, False]
    resumed.close()


def test_a_resume_under_a_fixed_delay_too_goes_on_at_the_randomization_width_it_reached(tmp_path):
    """With env.delay set the env is a DelayedEnv around the randomized one: its checkpoint had kept no width (the
    runner asks the outer env), so a resume started automatic randomization over at 0 and evaluated it nominal."""
    cfg = load_config("ppo_arm_reach_auto", [f"run_dir={tmp_path / 'runs'}", "env.num_envs=8", "logging.wandb=disabled",
                                              "logging.progress=false", "runner.eval_episodes=0",
                                              "runner.video_seconds=0", "runner.total_steps=256",
                                              "env.delay.action_latency_steps=1"])
    first = Runner(cfg)
    first.train()
    first.env.env.load_adaptation_state({"width": 0.35, "outcomes": [True]})  # the randomized env, as if widened
    first.save()
    first.close()
    assert trained_env_config(first.run_dir, cfg).randomization["width"] == 0.35
    cfg.runner.total_steps = 512
    resumed = Runner(cfg, resume=first.run_dir)
    assert resumed.env.env.width == pytest.approx(0.35) and resumed.env.env._outcomes == [True]
    resumed.close()


def test_an_automatically_randomized_run_is_evaluated_at_the_width_it_reached(tmp_path, capsys):
    """A new env starts automatic randomization at width 0: the run's evaluation, `robolearn eval` and
    robolearn.make_env(run) had all judged the controller on the nominal model only."""
    import robolearn
    from robolearn.cli import main

    cfg = load_config("ppo_arm_reach_auto", [f"run_dir={tmp_path / 'runs'}", "env.num_envs=8", "logging.wandb=disabled",
                                              "logging.progress=false", "runner.eval_episodes=0",
                                              "runner.video_seconds=0", "runner.total_steps=256"])
    first = Runner(cfg)
    first.train()
    first.env.load_adaptation_state({"width": 0.4, "outcomes": []})  # as if it had widened
    first.save()
    first.close()
    env_cfg = trained_env_config(first.run_dir, cfg)
    assert env_cfg.randomization == {**cfg.env.randomization, "auto": False, "width": 0.4}
    with robolearn.make_env(first.run_dir, num_envs=2, seed=0) as env:
        assert env.width == pytest.approx(0.4) and not env.cfg.auto  # fixed there: an evaluation does not widen it
        assert env._range("gain_scale") == pytest.approx((1 + 0.4 * (0.45 - 1), 1 + 0.4 * (1.1 - 1)))
    assert main(["eval", str(first.run_dir), "--episodes", "2"]) == 0
    assert "dynamics randomized at width 0.40 of: " in capsys.readouterr().out

    cfg.runner.total_steps, cfg.runner.eval_episodes = 512, 2  # too few episodes to widen it further
    resumed = Runner(cfg, resume=first.run_dir)
    result = resumed.train()
    resumed.close()
    assert result.evaluation["dynamics"].startswith("randomized at width 0.40 of: ")


def test_a_resumed_run_logs_no_episode_length_until_an_episode_ends():
    """A resume restores the recent returns and successes (its first line had logged a return without the
    success rate) but not the lengths: until an episode ends there is no length to log, not a length of 0."""
    stats = runner_module.EpisodeStats(2, recent=[10.0, 12.0], recent_success=[1.0, 0.0])
    stats.add(torch.ones(2), torch.tensor([False, False]), {})
    assert stats.metrics() == {"return": 11.0, "success_rate": 0.5}
    progress = runner_module.Progress()
    stats.keep(progress)
    assert (progress.recent_returns, progress.recent_success) == ([10.0, 12.0], [1.0, 0.0])
    stats.add(torch.ones(2), torch.tensor([True, False]), {})
    assert stats.metrics()["episode_length"] == 2.0


def test_episode_stats_keep_the_return_length_and_success_of_each_episode_that_ends_in_order():
    stats = runner_module.EpisodeStats(3, recent=[])
    stats.add(torch.ones(3), torch.tensor([True, False, False]), {"success": torch.tensor([True, True, False])})
    stats.add(torch.full((3,), 2.0), torch.tensor([False, True, True]), {"success": torch.tensor([True, False, True])})
    assert stats.metrics() == {"return": pytest.approx(7 / 3), "episode_length": pytest.approx(5 / 3),
                               "success_rate": pytest.approx(2 / 3)}
    assert list(stats.recent) == [1.0, 3.0, 3.0] and list(stats.recent_lengths) == [1, 2, 2]
    assert all(isinstance(length, int) for length in stats.recent_lengths)
    from robolearn.torch_ops import TorchOps

    reward, done = torch.ones(3), torch.tensor([False, True, False])
    with TorchOps() as ops:  # a step's bookkeeping is 5 kernels on a GPU, each step of every iteration
        stats.add(reward, done, {})
    assert ops.total == 5, ops.counts
    stats.add(reward, torch.tensor([True, True, True]), {})  # what add() kept of the first step is not written again
    assert stats.metrics()["return"] == pytest.approx(15 / 7) and list(stats.recent)[-4:] == [1.0, 4.0, 1.0, 2.0]
    with pytest.raises(ContractError, match=r"reward has shape \(3, 1\); a VecEnv returns one number per env, shape \(3,\)"):
        stats.add(reward.unsqueeze(1), done, {})


def test_episode_stats_average_the_env_log_over_the_iteration_whatever_form_each_value_takes():
    """Logged values are kept each step and summed once per iteration: a dict the env reuses, a key present on
    some steps only (averaged over all steps, as a missing value counted 0), floats beside tensors, and one number
    as shape () on one step and (1,) on another all log what adding them every step did."""
    stats = runner_module.EpisodeStats(2, recent=[])
    log = {"reward/a": torch.tensor(1.0), "metrics/b": 2.0}
    stats.add(torch.zeros(2), torch.tensor([False, False]), {"log": log})
    log["reward/a"] = torch.tensor([3.0])  # the env's own dict, refilled
    log["extra"] = torch.tensor(4.0)
    stats.add(torch.zeros(2), torch.tensor([False, False]), {"log": log})
    assert stats.metrics() == {"reward/a": 2.0, "metrics/b": 2.0, "extra": 2.0}
    assert stats.metrics() == {}  # cleared


def test_a_deferred_check_keeps_no_autograd_graph_and_catches_what_the_sum_would_hide():
    watch = FiniteWatch("cpu", deferred=True)
    x = torch.ones(3, requires_grad=True)
    watch("action", x * 2)
    assert not any(total.requires_grad for total in watch._sums.values())
    watch("reward", torch.tensor([float("inf"), float("-inf")]))  # inf - inf: NaN, still not finite
    watch("observation", torch.tensor([3.0e38, 3.0e38]))  # finite float32 values whose float32 sum would not be
    with pytest.raises(NonFiniteError, match=r"^reward contained NaN or inf"):
        watch.verify()


def test_a_nan_is_blamed_on_the_env_the_learner_or_either_as_what_went_bad_says(tmp_path):
    from types import SimpleNamespace

    runner = SimpleNamespace(cfg=SimpleNamespace(env=SimpleNamespace(task="go1_flat")),
                             checkpoint_path=tmp_path / "latest.pt", progress=SimpleNamespace(env_steps=0))
    sources = {"reward": ("reward",), "action": ("action",), "loss/critic": ("update metric",),
               "action, observation['policy']": ("action", "observation")}
    said = {flagged: str(runner_module.stopped_by_nan(runner, None, NonFiniteError(f"{flagged} contained NaN or inf",
                                                                                     sources[flagged])))
            for flagged in ("reward", "action", "loss/critic", "action, observation['policy']")}
    assert "the env produced it: check task 'go1_flat'" in said["reward"]
    assert "learning rate" in said["action"] and "task" not in said["action"] and "learning rate" in said["loss/critic"]
    assert "the env or the learner produced it: check task 'go1_flat'" in said["action, observation['policy']"]
    assert "learning rate" in said["action, observation['policy']"]


def test_a_huge_decision_period_is_refused_before_the_agent_is_built(tmp_path, monkeypatch):
    """A sequence critic's networks grow with K: agent.sequence_length=10**9 had failed on a 2 TB allocation while
    the agent was built, before the decision period was checked against the episode."""
    cfg = load_config("sac_as_gym_pendulum", [f"run_dir={tmp_path / 'runs'}", "agent.sequence_length=1000000000",
                                              "logging.wandb=disabled", "env.num_envs=2"])
    monkeypatch.setattr(runner_module, "make_agent", lambda *args: pytest.fail("the agent was built first"))
    with pytest.raises(ConfigError, match=r"decides every 1000000000 steps \(agent.sequence_length\), more than an "
                                          r"episode's 200 .*lower agent.sequence_length"):
        Runner(cfg)
    assert not (tmp_path / "runs").exists()
    from types import SimpleNamespace

    from robolearn.preflight import check_decision_period

    cfg.agent.execution = "ensemble"  # blended every step: its decision period is 1, whatever K (as it was)
    check_decision_period(cfg, SimpleNamespace(max_episode_steps=200))


def test_an_update_returning_other_than_scalar_metrics_is_told_so_on_every_path():
    """update_metrics guards the on-policy, off-policy, offline and fine-tuning loops alike."""
    assert runner_module.update_metrics({"loss": torch.tensor(1.0), "kl": 0.5}) == {"loss": torch.tensor(1.0), "kl": 0.5}
    with pytest.raises(TypeError, match="update metric 'loss': one number per metric, got 3 values"):
        runner_module.update_metrics({"loss": torch.ones(3)})
    with pytest.raises(TypeError, match="returns a dict of scalar metrics to log, got float"):
        runner_module.update_metrics(1.0)


@pytest.mark.parametrize("config, key", [("srl_gym_pendulum_j4", "sequence_length"),
                                         ("spirl_point_maze_medium", "horizon"),
                                         ("hrac_point_maze_medium", "subgoal_period")])
def test_a_decision_period_longer_than_an_episode_is_refused_by_its_key(tmp_path, config, key):
    cfg = load_config(config, [f"run_dir={tmp_path / 'runs'}", "env.kwargs.max_episode_steps=20", f"agent.{key}=21",
                               "logging.wandb=disabled", "env.num_envs=2"])
    with pytest.raises(ConfigError, match=rf"decides every 21 steps \(agent.{key}\), more than an episode's 20 "
                                          rf"\(env.kwargs.max_episode_steps, or the task's default\): no decision would "
                                          rf"play out; lower agent.{key}"):
        Runner(cfg)
    assert not (tmp_path / "runs").exists()


def test_stop_sees_env_steps_and_a_stop_that_raises_leaves_a_checkpoint_to_resume(tmp_path, capsys):
    """train(stop=...) reads the counters metrics.jsonl logs; a callback that fails (a KeyError on 'return'
    before any episode ended) is re-raised, saying so, after the run is checkpointed."""
    seen = []
    result = train(tiny(tmp_path), stop=lambda m: seen.append(m) or m["env_steps"] >= 2 * seen[0]["env_steps"])
    assert [m["iteration"] for m in seen] == [1, 2] and seen[1]["env_steps"] == 2 * seen[0]["env_steps"]
    assert result.evaluation is not None  # stopped early, then finished as a run does
    assert result.trained == {"env_steps": seen[1]["env_steps"]} and not result.interrupted  # short of its budget
    assert f"ended early: {seen[1]['env_steps']:,} of runner.total_steps=" in capsys.readouterr().out  # said as it ends

    def fails(metrics):
        raise KeyError("return")

    budget = f"runner.total_steps={2 * seen[0]['env_steps']}"
    with pytest.raises(KeyError) as raised:
        train(tiny(tmp_path / "again", "ppo", budget), stop=fails)
    note = "\n".join(raised.value.__notes__)
    run = Path(re.search(r"train\(resume='([^']+)'\)", note)[1])
    assert "raised by train()'s stop callback" in note and (run / "checkpoints").is_dir()
    assert train(tiny(tmp_path / "again", "ppo", budget), resume=run).run_dir == run  # it goes on from there


def test_resume_from_python_takes_the_runs_own_config_and_says_what_a_given_one_changes(tmp_path):
    """train(resume=run, overrides=...) is `robolearn train --resume RUN key=value`; a freshly loaded config
    given with resume= is used, but each setting that differs from the run's is said; robolearn.make_env(run)
    builds the env with the run's task settings, and another task is refused by name."""
    import robolearn
    import sims

    first = train(tiny(tmp_path, "ppo", "runner.total_steps=1", "env.kwargs.max_episode_steps=50", "seed=3"))
    steps = read_metrics(first.run_dir)[-1]["env_steps"]
    again = robolearn.train(resume=first.run_dir, overrides={"runner.total_steps": 2 * steps})
    assert again.run_dir == first.run_dir and read_metrics(first.run_dir)[-1]["env_steps"] == 2 * steps
    with pytest.warns(UserWarning, match=r"differs from its own config.yaml: .*env.kwargs.max_episode_steps 50 -> "
                                         r"None.*seed 3 -> 0"):
        with pytest.raises(ConfigError, match=r"already finished .*\(from Python: robolearn.train\(resume="):
            robolearn.train(tiny(tmp_path, "ppo", f"runner.total_steps={2 * steps}"), resume=first.run_dir)
    with robolearn.make_env(first.run_dir, num_envs=2) as env, sims.make_env("cartpole", 2) as default:
        assert env.max_episode_steps == 50 and default.max_episode_steps == 500  # the task's default: not the run's
    other = load_config("ppo_pendulum", [f"run_dir={tmp_path / 'runs'}", "logging.wandb=disabled"])
    with pytest.raises(ConfigError, match="trained on 'cartpole'; a resume goes on with its task, not 'pendulum'"), \
            pytest.warns(UserWarning, match="env.task 'cartpole' -> 'pendulum'"):
        robolearn.train(other, resume=first.run_dir)  # (refused before anything is built)


@pytest.mark.parametrize("override", ["logging.project=other", "logging.group=seeds"])
def test_a_resume_that_would_move_its_w_and_b_run_is_refused(tmp_path, override):
    """logging.project=other on a resume had started a W&B session of the run's id under the other project (`wandb
    sync` then splits the run over two projects); a run that has not logged to W&B may change it."""
    import robolearn

    cfg = tiny(tmp_path, "ppo", "logging.wandb=offline")
    run = tmp_path / "runs" / "ppo_cartpole" / "20260101-000000"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg)))
    (run / "checkpoints" / "latest.pt").write_bytes(b"not read before the refusal")
    session = run / "wandb" / "offline-run-20260101_000000-id1" / "run-id1.wandb"
    session.parent.mkdir(parents=True)
    session.write_bytes(b"")
    key, _, value = override.partition("=")
    with pytest.raises(ConfigError, match=rf"^{key}: .*20260101-000000 logs to W&B with .*; a resume goes on in that "
                                          rf"W&B run, so it keeps its {key.split('.')[1]}, not '{value}': drop {key}="):
        robolearn.train(resume=run, overrides=[override])
    assert sorted(path.name for path in run.rglob("*")) == sorted(
        ["checkpoints", "latest.pt", "config.yaml", "wandb", session.parent.name, session.name])  # nothing written
    shutil.rmtree(run / "wandb")  # never logged to W&B: no W&B run to keep (refused further on, its checkpoint)
    with pytest.raises(CheckpointError):
        robolearn.train(resume=run, overrides=[override])


def test_a_copy_may_file_its_own_wandb_run_under_another_project(tmp_path, capsys):
    """A copied run resumed with another logging.project had been refused as moving its W&B run, though the W&B
    files it held were its original's, which it sets aside to start a W&B run of its own; once it has one, that one
    keeps its project."""
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=256", "runner.eval_episodes=0", "agent.actor_hidden=[16]",
               "agent.critic_hidden=[16]", "logging.wandb=offline")
    original = train(cfg).run_dir
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    train(resume=copy, overrides=["runner.total_steps=512", "logging.project=other"])
    assert "and a W&B run of its own" in capsys.readouterr().out
    assert load_run_config(copy).logging.project == "other"
    with pytest.raises(ConfigError, match=r"^logging.project: .*copy logs to W&B with project 'other' .*, not 'third'"):
        train(resume=copy, overrides=["runner.total_steps=768", "logging.project=third"])


def test_a_resume_with_changed_settings_says_which_and_keeps_the_config_it_replaces(tmp_path, capsys):
    """config.yaml had been rewritten without a word: the settings the steps so far trained with were lost."""
    import robolearn

    first = robolearn.train(tiny(tmp_path, "ppo", "runner.total_steps=256"))
    gamma = yaml.safe_load((first.run_dir / "config.yaml").read_text())["agent"]["gamma"]
    capsys.readouterr()
    with pytest.raises(ConfigError, match="already finished"):  # refused: nothing kept, nothing said
        robolearn.train(resume=first.run_dir, overrides={"agent.gamma": 0.5})
    assert not list(first.run_dir.glob("config.superseded*")) and "resumed with" not in capsys.readouterr().out
    robolearn.train(resume=first.run_dir, overrides={"runner.total_steps": 512})  # a budget raised: no change said
    assert not list(first.run_dir.glob("config.superseded*")) and "resumed with" not in capsys.readouterr().out
    robolearn.train(resume=first.run_dir, overrides={"runner.total_steps": 768, "agent.gamma": 0.5})
    kept = first.run_dir / "config.superseded-1.yaml"
    assert f"resumed with changed settings: agent.gamma {gamma!r} -> 0.5; the steps so far trained with the " \
           f"earlier ones, whose config is kept as {kept}" in capsys.readouterr().out
    assert yaml.safe_load(kept.read_text())["agent"]["gamma"] == gamma
    assert yaml.safe_load((first.run_dir / "config.yaml").read_text())["agent"]["gamma"] == 0.5
    robolearn.train(resume=first.run_dir, overrides={"runner.total_steps": 1024, "logging.group": "again",
                                                     "runner.eval_episodes": 3})  # how it logs and ends: no change
    assert not (first.run_dir / "config.superseded-2.yaml").exists() and "resumed with" not in capsys.readouterr().out


def test_a_resume_killed_before_its_config_leaves_the_run_as_it_was(tmp_path, monkeypatch):
    """A resume that trains on had set the run's eval.json aside before writing its config: killed in between, a
    finished run was listed as never evaluated, under its old budget; resumed again with the same changed setting,
    it kept the earlier config a second time."""
    import robolearn
    from robolearn.runs import run_status

    first = robolearn.train(tiny(tmp_path, "ppo", "runner.total_steps=256"))
    config = (first.run_dir / "config.yaml").read_text()
    write_config = runner_module.write_config

    def killed(run_dir, cfg):
        raise KeyboardInterrupt  # where a kill -9 would stop it (no handler runs: the same files are left)

    monkeypatch.setattr(runner_module, "write_config", killed)
    changed = {"runner.total_steps": 512, "agent.gamma": 0.5}
    with pytest.raises(KeyboardInterrupt):
        robolearn.train(resume=first.run_dir, overrides=changed)
    assert (first.run_dir / "eval.json").is_file() and not (first.run_dir / "eval.superseded.json").exists()
    assert (first.run_dir / "config.yaml").read_text() == config and run_status(first.run_dir) == "done"
    monkeypatch.setattr(runner_module, "write_config", write_config)
    robolearn.train(resume=first.run_dir, overrides=changed)  # resumes as if the first had not been
    assert sorted(path.name for path in first.run_dir.glob("config.superseded*")) == ["config.superseded-1.yaml"]
    assert (first.run_dir / "config.superseded-1.yaml").read_text() == config
    assert (first.run_dir / "eval.superseded.json").is_file() and run_status(first.run_dir) == "done"
    assert read_metrics(first.run_dir)[-1]["env_steps"] == 512


def test_a_resume_calls_only_training_settings_changes():
    """The budget, the end's evaluation and film, save and log cadence, logging and the run's folder are no
    change of how the steps so far trained; the agent, env and seed are."""
    from robolearn.runs import NOT_TRAINING, config_changes

    kept = {"runner.total_steps": 1000, "runner.max_minutes": None, "agent.total_updates": 10, "run_dir": "a",
            "runner.eval_episodes": 10, "runner.video_seconds": 8.0, "runner.checkpoint_every": 5,
            "runner.log_every": 1, "logging.wandb": "offline", "logging.group": None}
    moved = {"runner.total_steps": 2000, "runner.max_minutes": 3.0, "agent.total_updates": 20, "run_dir": "b",
             "runner.eval_episodes": 3, "runner.video_seconds": 0.0, "runner.checkpoint_every": 1,
             "runner.log_every": 4, "logging.wandb": "disabled", "logging.group": "g"}
    assert config_changes(kept, moved, NOT_TRAINING) == ""
    trained = {"agent.gamma": 0.99, "env.num_envs": 8, "seed": 0, "runner.num_steps": 24}
    assert config_changes({**kept, **trained}, {**kept, "agent.gamma": 0.9, "env.num_envs": 16, "seed": 1,
                                                "runner.num_steps": 24}, NOT_TRAINING) == \
        "agent.gamma 0.99 -> 0.9, env.num_envs 8 -> 16, seed 0 -> 1"


def test_resuming_with_the_config_a_run_fell_back_from_is_no_difference(tmp_path):
    """config.yaml records what ran (warp on a missing GPU: MuJoCo on the CPU); the config asked for is not
    a change of settings."""
    import robolearn

    cfg = tiny(tmp_path, "ppo", "runner.total_steps=1", "env.backend=warp", f"env.device={'cpu' if torch.cuda.is_available() else 'cuda'}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = robolearn.train(cfg).run_dir
    with warnings.catch_warnings(record=True) as said, pytest.raises(ConfigError, match="already finished"):
        warnings.simplefilter("always")
        robolearn.train(cfg, resume=run)
    assert not [w for w in said if "differs from its own config.yaml" in str(w.message)]


def test_the_python_entry_points_given_a_name_where_a_config_or_run_goes_say_what_to_give(tmp_path):
    """train("ppo_cartpole") had been an AttributeError five frames down; train(resume=missing) had offered the
    list of configs; make_env("cartpole") had said only "no such run directory"."""
    import robolearn

    with pytest.raises(TypeError, match=r"train\(\) takes a TrainConfig, got str: give it load_config\('ppo_cartpole'\)"):
        robolearn.train("ppo_cartpole")
    with pytest.raises(TypeError, match=r"got dict: give it robolearn.config.config_from_dict"):
        robolearn.train({"algo": "ppo"})
    with pytest.raises(FileNotFoundError, match=rf"^{tmp_path / 'nope'}: no such run directory$"):
        robolearn.train(resume=tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match=r"'cartpole' is a task: sims.make_env\('cartpole', num_envs\) builds"):
        robolearn.make_env("cartpole")  # (the call whole, num_envs too: sims.make_env('cartpole') alone fails)
    with pytest.raises(FileNotFoundError, match=r"'cartpole' is a task: sims.make_env\('cartpole', num_envs=4\) "):
        robolearn.make_env("cartpole", 4)
    with pytest.raises(TypeError, match=r"make_env\(run\): a run directory or a config from load_config; got int 3"):
        robolearn.make_env(3)  # (pathlib's "expected str, bytes or os.PathLike object, not int")


def test_a_ctrl_c_pending_between_updates_stops_before_the_next_and_the_debt_carries_over():
    """Several updates per env step (a UTD ratio above 1): a Ctrl+C during one is taken before the next,
    and the updates still owed stay in the checkpointed debt, so a resume makes them."""
    from types import SimpleNamespace
    from robolearn.runner import UpdateSums, pay_update_debt

    progress, ctrl_c, made = SimpleNamespace(update_debt=0.5), CtrlC(), []

    def update():
        made.append(1)
        ctrl_c.pending = True  # pressed during this update
        return {"loss": torch.tensor(1.0)}

    sums = UpdateSums()
    with pytest.raises(KeyboardInterrupt):
        pay_update_debt(progress, 3.0, update, sums, ctrl_c)
    assert len(made) == 1 and progress.update_debt == 2.5 and float(sums.sums["loss"]) == 1.0
    ctrl_c.pending = False
    assert pay_update_debt(progress, 0.25, lambda: {"loss": 2.0}, sums, ctrl_c) == 2
    assert progress.update_debt == 0.75 and sums.means() == {"loss": 5.0 / 3}


def test_the_sums_of_an_iteration_a_ctrl_c_cut_short_go_into_the_progress_and_the_resume_goes_on_from_them():
    """A Ctrl+C mid-iteration keeps the updates done (offline, pretraining, off policy online), and the resume
    finishes the iteration: their metrics' sums go into the progress a checkpoint saves, as plain numbers (a
    weights_only load), and the resumed iteration's begin from them; its line had averaged the updates after
    the resume alone."""
    import io
    from types import SimpleNamespace
    from robolearn.runner import iteration_sums, pay_update_debt

    progress, ctrl_c = SimpleNamespace(update_debt=0.0, update_sums={}), CtrlC()
    with pytest.raises(KeyboardInterrupt), iteration_sums(progress) as sums:
        pay_update_debt(progress, 2.0, lambda: {"loss": torch.tensor(1.0), "q": 3.0}, sums, ctrl_c)
        ctrl_c.pending = True
        pay_update_debt(progress, 1.0, lambda: {"loss": torch.tensor(9.0)}, sums, ctrl_c)  # not made
    assert progress.update_sums == {"sums": {"loss": 2.0, "q": 6.0}, "counts": {"loss": 2, "q": 2}}
    buffer = io.BytesIO()
    torch.save(vars(progress), buffer)
    progress = SimpleNamespace(**torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))  # the resume's
    ctrl_c.pending = False
    with iteration_sums(progress) as sums:
        assert not progress.update_sums  # taken: the iteration's end holds none
        pay_update_debt(progress, 0.0, lambda: {"loss": torch.tensor(4.0)}, sums, ctrl_c)  # the one still owed
    assert sums.means() == {"loss": 2.0, "q": 3.0} and not progress.update_sums


def test_more_minibatches_than_a_rollout_holds_are_refused_by_key(tmp_path):
    with pytest.raises(ConfigError, match=r"agent.num_minibatches \(1000\) is more than a rollout's 256 samples "
                                          r"\(env.num_envs 8 x agent.num_steps 32\)"):
        Runner(tiny(tmp_path, "ppo", "agent.num_minibatches=1000", "agent.num_steps=32"))
    with pytest.raises(ConfigError, match=r"more than a rollout's 8 envs \(a recurrent policy's minibatches"):
        Runner(tiny(tmp_path, "ppo", "agent.num_minibatches=16", "agent.recurrent=true", "agent.rnn_hidden=8"))


def test_a_resume_on_fewer_ranks_than_trained_says_how_the_batch_changes(tmp_path):
    """'each update now sees 1/2 of the batch' (and '2/1' the other way) now reads as a factor."""
    from robolearn.checkpoint import save_checkpoint

    run = train(tiny(tmp_path, "ppo", "runner.total_steps=256")).run_dir
    payload = load_checkpoint(run / "checkpoints" / "latest.pt")
    save_checkpoint(run / "checkpoints" / "latest.pt", config=payload["config"], agent=payload["agent"],
                    progress={**payload["progress"], "world_size": 2})  # as two ranks would have left it
    with pytest.warns(UserWarning, match=r"trained on 2 rank\(s\) and resumes on 1: each update now sees 0.5 times "
                                         r"the batch it did \(resume with --nproc 2"):
        train(resume=run, overrides={"runner.total_steps": 512})


def test_a_run_ended_by_an_error_ends_its_progress_bar_first(tmp_path, capfd):
    """The error had been printed on the bar's line: '0%|...| [00:00<?, ?step/s]error: rank 0 lost ...'."""
    def crash(metrics):
        raise RuntimeError("the lab's power went out")

    with pytest.raises(RuntimeError):
        train(tiny(tmp_path, "ppo", "runner.total_steps=512", "logging.progress=true"), stop=crash)
    err = capfd.readouterr().err
    assert "|" in err and err.endswith("\n"), repr(err[-200:])  # the bar was drawn, and its line is ended


def test_a_run_folder_moved_while_training_stops_the_run_instead_of_making_a_new_one(tmp_path, moving_the_run_once):
    """Checkpoints, export and evaluation had gone into a new folder of the old name, without config or metrics,
    and the run had ended as if nothing had happened."""
    moved, runs = tmp_path / "moved", []
    with pytest.raises(FileNotFoundError) as said:
        train(tiny(tmp_path, "ppo", "runner.total_steps=1024"), stop=moving_the_run_once(tmp_path / "runs", moved, runs))
    assert str(said.value).startswith(f"{runs[0]} was moved or deleted while the run trained: stopped before writing "
                                      "into a new folder of that name")
    assert not runs[0].exists() and (moved / "config.yaml").is_file() and read_metrics(moved)


def truncation_steps(runner: Runner) -> list[int]:
    """Train ``runner`` and return the steps (counted from where it starts) on which some world was truncated."""
    step, ends = runner.env.step, []

    def spy(action):
        out = step(action)
        ends.append(bool(out[3].any()))  # truncated worlds
        return out

    runner.env.step = spy
    runner.train()
    runner.close()
    return [t for t, truncated in enumerate(ends) if truncated]


def test_random_episode_start_staggers_the_first_time_limits(tmp_path):
    """env.random_episode_start (legged_gym's init_at_random_ep_len): episodes that began together had all been
    truncated on one step, a whole episode apart, so PPO's training return moved as a step curve."""
    steps = {}
    for stagger in ("false", "true"):
        cfg = tiny(tmp_path, "ppo", "runner.total_steps=1024", "env.kwargs.max_episode_steps=100",
                   "runner.eval_episodes=0", f"env.random_episode_start={stagger}")
        steps[stagger] = truncation_steps(Runner(cfg))
    assert steps["false"] == [99]  # every world on the 100th step
    assert len(steps["true"]) > 4 and steps["true"][0] < 99  # spread over the first episode


@pytest.mark.parametrize("task", ["cartpole", "gym:Pendulum-v1"])
def test_a_resume_staggers_the_episodes_it_restarts(tmp_path, task):
    """A resume resets every world at once, but the run it continues had episodes of every age: its clocks
    start at random steps (env.random_episode_start or not), not all truncated on one step an episode apart;
    an env that keeps its own time limit resumes as it is."""
    gym = task.startswith("gym:")
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=1024", f"env.task={task}", "runner.eval_episodes=0",
               "env.random_episode_start=false", *([] if gym else ["env.kwargs.max_episode_steps=100"]))
    first = Runner(cfg)
    assert truncation_steps(first) == ([] if gym else [99])  # a fresh run's: all on one step
    cfg.runner.total_steps = 1024 + 8 * 224  # 224 more steps of the 8 worlds: past Pendulum's 200
    steps = truncation_steps(Runner(cfg, resume=first.run_dir))
    if gym:
        assert steps == [199]  # Pendulum-v1's own 200-step limit, as a fresh run's
    else:
        assert len(steps) > 4 and steps[0] < 99  # spread over the first episode


def test_random_episode_start_is_refused_for_an_env_that_keeps_its_own_time_limit(tmp_path):
    with pytest.raises(ValueError, match="env.random_episode_start: GymVecEnv keeps its own episode time limit"):
        Runner(tiny(tmp_path, "ppo", "env.task=gym:Pendulum-v1", "env.random_episode_start=true"))
    assert not (tmp_path / "runs").exists()


def test_what_a_resume_cannot_go_on_with_is_refused_or_said(tmp_path, capsys):
    """From a runs audit: another task of the same shapes had been resumed (its curves mixing two tasks); another
    algorithm's checkpoint was said as ~35 changed settings; a lost checkpoints folder advised removing a trained
    run; a finished run without metrics lines was 'incomplete' to list and 'finished' to resume."""
    run = train(tiny(tmp_path, "sac", "runner.total_steps=200", "runner.random_steps=100", *FEW_SMALL_UPDATES)).run_dir
    with pytest.raises(ConfigError, match=r"env.task: .* trained on 'pendulum'; a resume goes on with its task, not "
                                          r"'gym:Pendulum-v1'"):
        train(resume=run, overrides=["env.task=gym:Pendulum-v1", "runner.total_steps=3000"])
    other = train(tiny(tmp_path, "ppo", "runner.total_steps=64", "name=other")).run_dir
    own = (run / "checkpoints" / "latest.pt").read_bytes()
    (run / "checkpoints" / "latest.pt").write_bytes((other / "checkpoints" / "latest.pt").read_bytes())
    with pytest.raises(CheckpointError, match=r"the checkpoint was saved by algo 'ppo', this run is 'sac'"):
        train(resume=run, overrides=["runner.total_steps=3000"])
    (run / "checkpoints" / "latest.pt").write_bytes(own)
    (run / "metrics.jsonl").unlink()
    assert cli(["list", "--runs", str(run)]) == 0 and "done (no metrics lines)" in capsys.readouterr().out
    for path in (run / "checkpoints").iterdir():
        path.unlink()
    (run / "checkpoints").rmdir()
    (other / "checkpoints" / "latest.pt").unlink()
    with pytest.raises(CheckpointError, match=r"checkpoints/latest.pt is missing, though the run trained and ended: "
                                              r"restore it from a copy \(its exported files still evaluate"):
        train(resume=other, overrides=["runner.total_steps=400"])


def test_no_updates_are_said_and_a_window_agent_does_not_divide_by_zero(tmp_path):
    """runner.utd_ratio=0 ("0 turns it off") had trained nothing without a word, and failed sac_as's preflight
    with ZeroDivisionError."""
    with pytest.warns(UserWarning, match=r"runner.utd_ratio=0: the agent makes no update"):
        train(tiny(tmp_path, "sac", "runner.total_steps=100", "runner.random_steps=50", "runner.utd_ratio=0"))
    cfg = load_config("sac_as_gym_pendulum", [f"run_dir={tmp_path / 'runs'}", "logging.wandb=disabled",
                                             "logging.progress=false", "runner.utd_ratio=0", "runner.total_steps=50",
                                             "runner.eval_episodes=1", "runner.video_seconds=0"])
    with pytest.warns(UserWarning, match="runner.utd_ratio=0"):
        train(cfg)


def test_train_gives_torch_settings_back_to_the_caller(tmp_path):
    """A run computes on runner.torch_threads threads at runner.matmul_precision with denormals flushed; a script that
    went on after train() had kept all three (one thread, bf16 matmuls) for the rest of its work."""
    from robolearn.config import denormals_flushed

    threads, precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
    torch.set_num_threads(2)
    torch.set_float32_matmul_precision("high")
    torch.set_flush_denormal(False)
    try:
        train(tiny(tmp_path, "ppo", "runner.total_steps=256", "runner.torch_threads=1", "runner.matmul_precision=medium",
                   "runner.flush_denormal=true"))
        assert (torch.get_num_threads(), torch.get_float32_matmul_precision(), denormals_flushed()) == (2, "high", False)
    finally:
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(precision)
        torch.set_flush_denormal(False)


@pytest.mark.parametrize("trains", [True, False], ids=["trained", "closed-untrained"])
def test_a_runner_built_by_hand_gives_torch_settings_back_when_its_train_returns(tmp_path, trains):
    """README's RecordingEnv recipe builds a Runner itself and calls runner.train(): only robolearn.train() had put
    the caller's threads, matmul precision and denormal flushing back, so such a script went on on one thread at
    bf16 matmuls. The run computes under its own from the Runner's construction to the end of its train() (or to
    close(), where it never trains); a close() after train() leaves what the caller set since alone."""
    from robolearn.config import denormals_flushed

    def settings():
        return torch.get_num_threads(), torch.get_float32_matmul_precision(), denormals_flushed()

    threads, precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
    runs = (1, "medium", torch.set_flush_denormal(True))  # (flushing where the CPU can)
    torch.set_num_threads(2)
    torch.set_float32_matmul_precision("high")
    torch.set_flush_denormal(False)
    seen = []
    try:
        runner = Runner(tiny(tmp_path, "ppo", "runner.total_steps=256", "runner.torch_threads=1",
                             "runner.matmul_precision=medium", "runner.flush_denormal=true"))
        assert settings() == runs
        if trains:
            runner.train(stop=lambda metrics: seen.append(settings()) or False)
            assert seen == [runs] and settings() == (2, "high", False)
            torch.set_num_threads(3)  # the caller's own after the run: close() keeps it
        runner.close()
        assert settings() == ((3 if trains else 2), "high", False)
    finally:
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(precision)
        torch.set_flush_denormal(False)


def test_train_gives_the_global_random_streams_back_to_the_caller(tmp_path):
    """A run seeds torch's and numpy's global generators with its seed and draws from them; a script's own draws after
    train() had come from the run's streams (numpy's reseeded to the run's seed), the same numbers after every run."""
    import numpy as np

    torch.manual_seed(1234)
    np.random.seed(1234)
    expected = torch.rand(3), np.random.rand(3)
    torch.manual_seed(1234)
    np.random.seed(1234)
    train(tiny(tmp_path, "ppo", "runner.total_steps=256"))
    torch.testing.assert_close(torch.rand(3), expected[0])
    np.testing.assert_array_equal(np.random.rand(3), expected[1])


def test_a_stop_that_is_no_function_is_refused_before_the_run_starts(tmp_path):
    """train(stop=100_000) had trained an iteration in a new run folder, then failed as "'int' object is not
    callable", said as raised by the stop callback with a resume line."""
    with pytest.raises(TypeError, match=r"stop: a function of an iteration's metrics .* got int 100000"):
        train(tiny(tmp_path, "ppo", "runner.total_steps=256"), stop=100_000)
    assert not (tmp_path / "runs").exists()


def test_a_metric_an_agent_reports_every_few_updates_is_averaged_over_those_updates(tmp_path):
    """TD3's delayed actor and HRAC's high level report some losses every few updates; the online runner had
    divided their sums by all of the iteration's updates, logging them that many times too small."""
    runner = Runner(tiny(tmp_path, "sac", "runner.total_steps=2000", "runner.random_steps=1000", "env.num_envs=1",
                         "runner.eval_episodes=0", *FEW_SMALL_UPDATES))  # (the mean of its reports, not their values)
    update, calls = runner.agent.update, []

    def every_third(batch):
        calls.append(1)
        return {**update(batch), **({"rare": torch.tensor(3.0)} if len(calls) % 3 == 0 else {})}

    runner.agent.update = every_third
    runner.train()
    runner.close()
    logged = [json.loads(line) for line in (runner.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["rare"] for line in logged if "rare" in line] == [3.0]


def test_the_goal_warning_names_only_group_lists_among_an_own_agents_settings_of_any_dataclass():
    """An own algorithm's *obs_groups setting may be None (its default: the controller's own) or text: the goal
    warning had failed on it ("argument of type 'NoneType' is not iterable"), ending the run it warns of; and on
    a config dataclass of slots=True, which has no vars()."""
    from dataclasses import dataclass
    from types import SimpleNamespace

    from robolearn.preflight import warn_if_goal_unread

    @dataclass(slots=True)
    class Mine:
        critic_obs_groups: tuple[str, ...] | None = None
        text_obs_groups: str = "policy"
        actor_obs_groups: tuple[str, ...] = ("policy",)

    cfg = SimpleNamespace(algo="mine:Agent", env=SimpleNamespace(task="point_maze_medium"), agent=Mine())
    agent = SimpleNamespace(controller=lambda: SimpleNamespace(obs_groups=("policy",)))
    env = SimpleNamespace(observation_spec={"policy": 4, "goal": 2})  # (no task of ours: not one goal)
    with pytest.warns(UserWarning, match=r"Feed it the goal \(agent.actor_obs_groups=\[policy,goal\]\), or train"):
        warn_if_goal_unread(cfg, agent, env)


@pytest.mark.parametrize("config", ["sac_point_maze_medium", "ppo_pendulum"])
def test_a_flat_agent_that_cannot_see_a_changing_goal_is_warned_and_the_fix_it_names_feeds_the_goal(tmp_path,
                                                                                                   config):
    """The mazes' goal is a group of its own, which PPO and SAC read only when their groups name it: with goals
    that change per episode a flat controller had trained blind to them without a word. One goal
    (sac_point_maze_medium's goals: fixed, its published runs) needs no goal input and is not warned of."""
    base = [f"run_dir={tmp_path / 'runs'}", "logging.wandb=disabled", "env.num_envs=2", "env.task=point_maze_medium"]
    with pytest.warns(UserWarning, match=r"'goal' observation group that changes from episode to episode, and "
                                         r"algo '(sac|ppo)' reads only \['policy'\]: its controller cannot know the "
                                         r"goal") as said:
        Runner(load_config(config, [*base, "env.kwargs={goals: eval}"])).close()
    feed = re.search(r"Feed it the goal \(([^)]+)\)", str(said[0].message))[1].split()
    assert "gciql" in str(said[0].message) and "hrac" in str(said[0].message)  # the goal-conditioned algorithms
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runner = Runner(load_config(config, [*base, "env.kwargs={goals: train}", *feed]))
        try:
            assert runner.agent.controller().obs_groups == ("policy", "goal")
        finally:
            runner.close()
        Runner(load_config(config, [*base, "env.kwargs={goals: fixed}"])).close()
        Runner(load_config("hrac_point_maze_medium", base[:-1])).close()  # goal-conditioned: reads it


def test_a_finished_runs_refusal_writes_its_counts_with_thousands_separators(tmp_path):
    """'already finished (3072 env_steps ...)' had been the one count written without the separators others use."""
    from robolearn.runs import refuse_finished

    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "controller.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"already finished \(3,072 of runner.total_steps=3,000 env_steps\) and "
                                          r"exported; to train on, raise it: .* runner.total_steps=6100 "):
        refuse_finished(tmp_path, "env_steps", 3072, 3000, eval_episodes=0)
