"""Every algorithm resumes exactly: a run stopped at a checkpoint and resumed logs the metrics.jsonl lines (less
the clock's) and ends with the agent, progress and replay buffer of the run it continues.

Offline runs, and runs stopped in a phase that reads a dataset (a fine-tune's offline updates, a skill agent's
pretraining), are compared with a run trained in one go. Online, a resume starts every env on a new episode
(README: "envs start new episodes"; staggered where their clocks can be set), which a run trained in one go
does not: a stopped online run is compared with the same runner trained on in its own process, its envs
restarted as a resume restarts them, so that only what the checkpoint must carry is compared. BC is left to
test_offline_runner.py's test_resume_continues_exactly. Iterations are shortened to ``ITERATION`` updates or
env steps (1000 in runs), so that each algorithm takes a few seconds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

import robolearn.finetune_runner as finetune_runner
import robolearn.offline_runner as offline_runner
import robolearn.runner as runner_module
import sims
from robolearn import load_config
from robolearn.checkpoint import load_checkpoint, mark_resume_seam, set_rng_state
from robolearn.data import DatasetWriter, record
from robolearn.finetune_runner import FinetuneRunner, is_finetune
from robolearn.offline_runner import OfflineRunner, is_offline
from robolearn.runner import Runner

pytestmark = pytest.mark.filterwarnings("ignore:dataset .* holds only")  # tiny on purpose

ITERATION = 100
PENDULUM = ["dataset=pendulum-tiny", "env.task=pendulum", "agent.hidden=[16,16]", "agent.batch_size=32"]
MAZE = ["dataset=maze-tiny", "agent.hidden=[16,16]", "agent.batch_size=16"]
FINETUNE = [*PENDULUM, "env.num_envs=1", "runner.utd_ratio=0.125", "agent.num_critics=4", "agent.n_actions=2",
            "agent.online_batch_size=32", "agent.pretrain_updates=20", "runner.total_steps=300"]
SKILLS = ["dataset=maze-tiny", "env.num_envs=2", "env.kwargs.max_episode_steps=60", "runner.random_steps=50",
          "runner.utd_ratio=0.1", "agent.pretrain_batch_size=8", "agent.batch_size=8", "agent.buffer_size=400",
          "agent.hidden=[8]", "agent.prior_hidden=[8]", "agent.decoder_hidden=[8]", "agent.encoder_hidden=8"]
OFF_POLICY = ["runner.random_steps=50", "runner.utd_ratio=0.25", "agent.batch_size=16", "agent.buffer_size=400",
              "runner.total_steps=300"]

# algorithm: config, overrides, and where the first run stops: (phase, counter, count); phase None: any
CASES: dict[str, tuple[str, list[str], tuple[str | None, str, int]]] = {
    "ppo": ("ppo_pendulum", ["env.num_envs=4", "agent.num_steps=25", "agent.actor_hidden=[16,16]",
                             "agent.critic_hidden=[16,16]", "runner.total_steps=300"], (None, "env_steps", 200)),
    "sac": ("sac_pendulum", ["env.num_envs=2", "agent.hidden=[16,16]", *OFF_POLICY], (None, "env_steps", 200)),
    "srl": ("srl_gym_pendulum_j2", ["agent.hidden=[16,16]", *OFF_POLICY], (None, "env_steps", 200)),
    "sac_as": ("sac_as_gym_pendulum", ["agent.hidden=[16,16]", *OFF_POLICY], (None, "env_steps", 200)),
    "hrac": ("hrac_point_maze_medium", ["env.num_envs=2", "env.kwargs.max_episode_steps=50", "agent.hidden=[16,16]",
                                        "agent.adjacency_every=20", "agent.adjacency_updates=2", *OFF_POLICY],
             (None, "env_steps", 200)),
    "td3bc": ("td3bc_hopper", [*PENDULUM, "runner.total_steps=200"], (None, "updates", 100)),
    "iql": ("iql_hopper", [*PENDULUM, "runner.total_steps=200"], (None, "updates", 100)),
    "cql": ("cql_hopper", [*PENDULUM, "agent.n_actions=2", "runner.total_steps=200"], (None, "updates", 100)),
    "calql": ("calql_hopper", [*PENDULUM, "agent.n_actions=2", "runner.total_steps=200"], (None, "updates", 100)),
    "gcbc": ("gcbc_point_maze_medium", [*MAZE, "runner.total_steps=200"], (None, "updates", 100)),
    "gciql": ("gciql_point_maze_medium", [*MAZE, "runner.total_steps=200"], (None, "updates", 100)),
    "hiql": ("hiql_point_maze_medium", [*MAZE, "runner.total_steps=200"], (None, "updates", 100)),
    "ota": ("ota_point_maze_medium", [*MAZE, "runner.total_steps=200"], (None, "updates", 100)),
    "wsrl": ("wsrl_hopper", [*FINETUNE, "agent.pretrain_updates=200", "agent.warmup_steps=50"],
             ("offline", "updates", 100)),
    # an episode of 150 steps is cut at the stop (its rows get their Monte-Carlo returns at the resume)
    "calql_finetune": ("calql_finetune_hopper", [*FINETUNE, "env.kwargs.max_episode_steps=150"],
                       ("online", "env_steps", 200)),
    "jsrl": ("jsrl_hopper", [*FINETUNE, "env.kwargs.max_episode_steps=50", "agent.jsrl_window=1",
                             "agent.jsrl_step=10"], ("online", "env_steps", 200)),
    "spirl": ("spirl_point_maze_medium", [*SKILLS, "agent.pretrain_updates=200", "runner.total_steps=200"],
              ("pretrain", "pretrain_updates", 100)),
    "skill_critic": ("skill_critic_point_maze_medium", [*SKILLS, "agent.pretrain_updates=20",
                                                        "agent.critic_warmup_updates=3", "agent.low_start_updates=6",
                                                        "runner.total_steps=300"], (None, "env_steps", 200)),
}
CLOCK = ("time", "fps", "updates_per_s")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory, swing_up, maze_datasets) -> Path:
    """The scripted pendulum swing-up (4 episodes) and undirected point-maze navigation (conftest's maze-tiny)."""
    root = tmp_path_factory.mktemp("datasets")
    with sims.make_env("pendulum", num_envs=4, seed=0, num_threads=1) as env:
        meta = {"task": "pendulum", "task_kwargs": {}, "ref_min_score": 0.0, "ref_max_score": 400.0}
        with DatasetWriter("pendulum-tiny", env.observation_spec, env.action_spec, metadata=meta, root=root) as writer:
            record(swing_up, env, writer, 4, noise=0.2, seed=0, progress=False)
    for dataset in maze_datasets.glob("maze-tiny*"):  # (only it: other tests may write beside it)
        shutil.copytree(dataset, root / dataset.name)
    return root


@pytest.fixture(autouse=True)
def short_iterations(datasets, monkeypatch) -> None:
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(datasets))
    monkeypatch.setattr(offline_runner, "UPDATES_PER_ITERATION", ITERATION)
    monkeypatch.setattr(runner_module, "OFF_POLICY_STEPS_PER_ITERATION", ITERATION)
    monkeypatch.setattr(finetune_runner, "OFF_POLICY_STEPS_PER_ITERATION", ITERATION)
    for module in (runner_module, offline_runner, finetune_runner):  # export, curves: not what is compared
        monkeypatch.setattr(module, "finish_run", lambda *args, **kwargs: None)


def build(algo: str, where: Path, resume: Path | None = None) -> Any:
    config, overrides, _ = CASES[algo]
    cfg = load_config(config, [f"run_dir={where}", "logging.wandb=disabled", "logging.progress=false",
                               "runner.video_seconds=0", "runner.eval_episodes=0", "runner.checkpoint_every=1",
                               *overrides])
    kind = FinetuneRunner if is_finetune(cfg) else OfflineRunner if is_offline(cfg) else Runner
    return kind(cfg, resume=resume)


def stop_at_split(runner: Any, algo: str) -> None:
    """Train ``runner`` to its case's stop, where it checkpoints."""
    phase, counter, count = CASES[algo][2]
    if phase == "pretrain":  # pretraining asks no stop: a Ctrl+C, taken between updates
        update = runner.agent.pretrain_update

        def pressed() -> dict[str, Any]:
            metrics = update()
            runner.ctrl_c.pending = runner.progress.pretrain_updates + 1 == count
            return metrics

        runner.agent.pretrain_update = pressed
        assert runner.train().interrupted
        runner.agent.pretrain_update = update
    else:
        runner.train(stop=lambda m: m.get("phase", phase) == phase and m[counter] >= count)


def resumed(algo: str, where: Path) -> Path:
    first = build(algo, where)
    try:
        stop_at_split(first, algo)
    finally:
        first.close()
    second = build(algo, where, resume=first.run_dir)
    try:
        second.train()
    finally:
        second.close()
    assert second.progress.run_id == first.progress.run_id  # one run: its export is told as its own
    return first.run_dir


def straight(algo: str, where: Path) -> Path:
    runner = build(algo, where)
    try:
        runner.train()
    finally:
        runner.close()
    return runner.run_dir


def trained_on(algo: str, where: Path) -> Path:
    """Stopped where the resumed run stops, then trained on in this process, its envs restarted as a resume
    restarts them: new episodes (the replay's newest rows end theirs, Cal-QL's get their returns), the agent's
    acting state cleared (PPO's per-env discounted returns too, which its reward normalizer tracks per episode)."""
    runner = build(algo, where)
    try:
        stop_at_split(runner, algo)
        # the run's end after the stop drew from torch's stream (a fine-tune's agent.controller() for its export):
        # the run's own draws are the checkpoint's
        set_rng_state(load_checkpoint(runner.checkpoint_path)["progress"]["rng"])
        num_envs = runner.cfg.env.num_envs
        replay = runner.online if isinstance(runner, FinetuneRunner) else runner.replay
        if replay is not None:
            mark_resume_seam(replay, runner.agent, num_envs, num_envs)
        if getattr(runner, "_online_bound", False):
            runner._settle_saved_rows(num_envs)
        runner.agent.reset()
        if hasattr(runner.agent, "running_return"):
            runner.agent.running_return = None
        runner.train()
    finally:
        runner.close()
    return runner.run_dir


def lines_after_stop(run_dir: Path, algo: str) -> list[dict[str, Any]]:
    phase, counter, count = CASES[algo][2]
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    at = next(i for i, line in enumerate(lines) if line.get("phase", phase) == phase and line.get(counter) == count)
    return [{key: value for key, value in line.items() if key not in CLOCK and not key.endswith("_time")}
            for line in lines[at + 1:]]


def saved(run_dir: Path) -> dict[str, Any]:
    checkpoint = load_checkpoint(run_dir / "checkpoints" / "latest.pt")
    replay = run_dir / "checkpoints" / "replay.pt"
    # (seconds: its clock; run_id: each run's own, drawn at random)
    return {"agent": checkpoint["agent"], "progress": {k: v for k, v in checkpoint["progress"].items()
                                                       if k not in ("seconds", "run_id")},
            "replay": torch.load(replay, weights_only=True) if replay.is_file() else None}


def assert_same(got: Any, expected: Any, where: str = "") -> None:
    """Equal to the bit, through nested dicts, lists and tensors."""
    if isinstance(expected, dict):
        assert got.keys() == expected.keys(), where
        for key in expected:
            assert_same(got[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected), where
        for i, (a, b) in enumerate(zip(got, expected)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{where}: {m}")
    else:
        assert got == expected, where


@pytest.mark.parametrize("algo", CASES)
def test_a_run_stopped_at_a_checkpoint_and_resumed_is_the_run_it_continues(algo, tmp_path):
    online = CASES[algo][2][1] == "env_steps"  # stopped online: its envs restart (module docstring)
    expected = (trained_on if online else straight)(algo, tmp_path / "expected")
    got = resumed(algo, tmp_path / "resumed")
    lines = lines_after_stop(got, algo)
    assert lines and lines == lines_after_stop(expected, algo)
    assert_same(saved(got), saved(expected))
