"""Runs you can trust: exact resume, Ctrl+C, NaN, off-policy runs, W&B offline files."""

from __future__ import annotations

import json

import pytest
import torch

import robolearn.runner as runner_module
from robolearn import load_config
from robolearn.checkpoint import load_checkpoint
from robolearn.evaluate import NonFiniteError
from robolearn.interfaces import Step
from robolearn.runner import Runner


def tiny(tmp_path, algo: str = "ppo", *extra: str):
    base = "ppo_cartpole" if algo == "ppo" else "sac_pendulum"
    return load_config(base, [
        f"run_dir={tmp_path / 'runs'}", "env.num_envs=8", "logging.wandb=disabled", "logging.progress=false",
        "runner.eval_episodes=2", "runner.video_seconds=0", "runner.checkpoint_every=1", *extra,
    ])


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
    torch.testing.assert_close(flat_params(resumed.agent), flat_params(first.agent))
    assert torch.equal(torch.get_rng_state(), saved["progress"]["rng"]["torch"])
    resumed.train()
    resumed.close()
    assert load_checkpoint(resumed.checkpoint_path)["progress"]["iteration"] == 4
    lines = (first.run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["env_steps"] for line in lines] == [256, 512, 768, 1024]


def test_ctrl_c_saves_a_checkpoint_that_resumes(tmp_path, monkeypatch):
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


def test_nan_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    make_env = runner_module.make_env
    monkeypatch.setattr(runner_module, "make_env", lambda *a, **k: NaNAfter(make_env(*a, **k), steps=32 * 2 + 5))
    runner = Runner(tiny(tmp_path, "ppo", "runner.total_steps=100000"))
    with pytest.raises(NonFiniteError, match=r"reward contains NaN or inf; training stopped, last good checkpoint kept"):
        runner.train()
    runner.close()
    assert load_checkpoint(runner.checkpoint_path)["progress"]["iteration"] == 2


def test_off_policy_run_resumes_with_its_replay_buffer(tmp_path):
    cfg = tiny(tmp_path, "sac", "runner.total_steps=2000", "runner.random_steps=1000", "agent.batch_size=32",
               "agent.buffer_size=5000")
    runner = Runner(cfg)
    result = runner.train()
    runner.close()
    assert result.evaluation is not None and (runner.run_dir / "export" / "controller.onnx").is_file()
    assert (runner.checkpoint_path.parent / "replay.pt").is_file()
    cfg.runner.total_steps = 3000
    resumed = Runner(cfg, resume=runner.run_dir)
    assert resumed.replay.size == 2000 and resumed.progress.env_steps == 2000
    resumed.train()
    resumed.close()
    assert resumed.replay.size == 3000


def test_wandb_offline_writes_run_files(tmp_path):
    cfg = tiny(tmp_path, "ppo", "runner.total_steps=256", "logging.wandb=offline", "runner.eval_episodes=0")
    runner = Runner(cfg)
    runner.train()
    runner.close()
    offline_runs = list((runner.run_dir / "wandb").glob("offline-run-*"))
    assert offline_runs and any(p.suffix == ".wandb" for p in offline_runs[0].iterdir())


def test_runs_started_in_the_same_second_get_their_own_directories(tmp_path, monkeypatch):
    """Parallel benchmark runs of one config start together; none may write into another's directory."""
    frozen = runner_module.datetime(2026, 1, 2, 3, 4, 5)
    monkeypatch.setattr(runner_module, "datetime", type("FrozenClock", (), {"now": staticmethod(lambda: frozen)}))
    cfg = tiny(tmp_path)
    dirs = [runner_module.new_run_dir(cfg) for _ in range(3)]
    assert [d.name for d in dirs] == ["20260102-030405", "20260102-030405-1", "20260102-030405-2"]
    assert all(d.is_dir() for d in dirs)
