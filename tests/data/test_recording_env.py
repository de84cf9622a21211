"""RecordingEnv: whatever drives an env (a training run included) leaves whole, replayable episodes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

import sims
from robolearn import load_config
from robolearn.data import Dataset, DatasetWriter
from robolearn.data.recording_env import RecordingEnv
from robolearn.data.replay import replay
from robolearn.interfaces import Step, VecEnv
from robolearn.runner import Runner


def _writer(env, root, name: str = "rec") -> DatasetWriter:
    return DatasetWriter(name, env.observation_spec, env.action_spec, root=root,
                         metadata={"task": "pendulum", "task_kwargs": {"max_episode_steps": 20}})


def test_driven_steps_become_whole_episodes_with_applied_actions_that_replay(root):
    generator = torch.Generator().manual_seed(0)
    driver_returns = np.zeros(3)
    finished: list[float] = []
    with sims.make_env("pendulum", num_envs=3, seed=0, num_threads=1, max_episode_steps=20) as env:
        with _writer(env, root) as writer:
            recorder = RecordingEnv(env, writer)
            recorder.reset(seed=0)
            for _ in range(5):  # an episode in progress at a reset is dropped, not stored cut short
                recorder.step(torch.zeros(3, 1))
            recorder.reset(seed=1)
            for _ in range(50):
                action = 6 * torch.randn(3, 1, generator=generator)  # often outside the bounds [-2, 2]: the env clips
                step = recorder.step(action)
                driver_returns += step.reward.numpy()
                for i in (step.terminated | step.truncated).nonzero().flatten().tolist():
                    finished.append(float(driver_returns[i]))
                    driver_returns[i] = 0.0
    dataset = Dataset.load("rec", root)
    assert len(dataset) == len(finished) == 6  # 50 steps: two whole episodes of 20 per env, the rest dropped
    assert sorted(e.episode_return for e in dataset) == sorted(np.float32(finished))
    with sims.make_env("pendulum", num_envs=1, num_threads=1, max_episode_steps=20) as env:
        bound = env.action_spec.high[0]
        for episode in dataset:
            assert len(episode) == 20 and np.abs(episode.actions).max() == bound
            result = replay(episode, env)
            assert result.exact and result.replayed_return == result.recorded_return


def test_max_episodes_caps_what_is_stored(root):
    with sims.make_env("pendulum", num_envs=4, seed=0, num_threads=1, max_episode_steps=10) as env:
        with _writer(env, root) as writer:
            recorder = RecordingEnv(env, writer, max_episodes=5)
            recorder.reset(seed=0)
            for _ in range(30):
                recorder.step(torch.zeros(4, 1))
            assert recorder.full
    assert len(Dataset.load("rec", root)) == 5


def test_a_training_run_through_it_leaves_its_replay_buffer_as_a_dataset(tmp_path, root):
    """D4RL's medium-replay: every episode the learner collected, in order."""
    cfg = load_config("ppo_pendulum", [f"run_dir={tmp_path}", "env.num_envs=4", "env.kwargs={max_episode_steps: 50}",
                                       "runner.total_steps=2000", "runner.eval_episodes=0", "runner.video_seconds=0",
                                       "logging.wandb=disabled", "logging.progress=false"])
    runner = Runner(cfg)
    with _writer(runner.env, root, "pendulum-replay") as writer:
        runner.env = RecordingEnv(runner.env, writer)
        try:
            runner.train()
        finally:
            runner.close()
    dataset = Dataset.load("pendulum-replay", root)
    steps = runner.progress.env_steps
    assert len(dataset) == steps // 50 and all(len(e) == 50 for e in dataset)
    assert dataset.summary()["steps"] == steps - steps % 50
    # What the runner counted as its training returns is exactly what was stored.
    recorded = sorted(float(e.episode_return) for e in dataset)
    assert recorded == pytest.approx(sorted(runner.progress.recent_returns), rel=1e-5)


def test_a_dataset_recorded_from_python_with_env_metadata_says_its_task(root):
    """record() from Python with env_metadata: the dataset names its task and settings, control period and
    state layout as `robolearn dataset record` writes them, so an offline run has nothing to doubt."""
    from robolearn.data import env_metadata, record
    from robolearn.data.record import RandomController
    from robolearn.offline_runner import _doubts

    with sims.make_env("pendulum", num_envs=2, seed=0, num_threads=1, max_episode_steps=20) as env:
        metadata = env_metadata(env, "pendulum", {"max_episode_steps": 20}, controller="random")
        with DatasetWriter("py", env.observation_spec, env.action_spec, root=root, metadata=metadata) as writer:
            record(RandomController(env), env, writer, episodes=2, progress=False)
        dataset = Dataset.load("py", root)
        assert dataset.task == "pendulum" and dataset.info["task_kwargs"] == {"max_episode_steps": 20}
        assert dataset.info["control_dt"] == env.control_dt and dataset.info["controller"] == "random"
        assert dataset.info["state"]["size"] == env.get_state()["state"].shape[1]
        assert _doubts(dataset, "pendulum", env, reads_rewards=True) == []
        bare = DatasetWriter("bare", env.observation_spec, env.action_spec, root=root)
        with bare as writer:
            record(RandomController(env), env, writer, episodes=2, progress=False)
        said = _doubts(Dataset.load("bare", root), "pendulum", env, reads_rewards=True)
        assert "metadata=robolearn.data.env_metadata(env, 'pendulum')" in said[0]


class TwoPaces(VecEnv):
    """Two envs: the first's episodes last 2 steps, the second's 6 (its observation is its env index)."""

    num_envs, device, control_dt, max_episode_steps = 2, torch.device("cpu"), 0.02, 10
    observation_spec = {"policy": spaces.Box(-np.inf, np.inf, (1,), np.float32)}
    action_spec = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self) -> None:
        self.t = torch.zeros(2)

    def _obs(self):
        return {"policy": torch.tensor([[0.0], [1.0]])}

    def reset(self, seed=None):
        self.t.zero_()
        return self._obs()

    def step(self, action):
        self.t += 1
        done = self.t == torch.tensor([2.0, 6.0])
        self.t[done] = 0
        return Step(self._obs(), torch.ones(2), done, torch.zeros(2, dtype=torch.bool), {"final_obs": self._obs()})


def test_max_episodes_are_shared_among_the_envs_not_taken_as_they_finish(root):
    """The first four to finish had all been the short env's: a policy's long episodes, often its good ones, were
    under-represented in every recording with several envs."""
    env = TwoPaces()
    with _writer(env, root) as writer:
        recorder = RecordingEnv(env, writer, max_episodes=4)
        recorder.reset()
        while not recorder.full:
            recorder.step(torch.zeros(2, 1))
    assert sorted(len(e) for e in Dataset.load("rec", root)) == [2, 2, 6, 6]


def test_an_episode_stored_as_a_stop_signal_came_is_counted_by_the_caller_too(root):
    """A Ctrl+C deferred over the write is raised after it: the record summary had left out the episode kept."""
    env, seen = TwoPaces(), []
    with pytest.raises(KeyboardInterrupt), _writer(env, root) as writer:
        store = writer.add

        def add_then_interrupted(episode):
            store(episode)
            raise KeyboardInterrupt

        writer.add = add_then_interrupted
        recorder = RecordingEnv(env, writer, on_episode=seen.append)
        recorder.reset()
        for _ in range(2):
            recorder.step(torch.zeros(2, 1))
    assert len(seen) == writer.episodes == 1


def test_a_second_recording_into_one_writer_adds_its_own_episodes(root):
    """The recorder had judged itself full by the writer's count: a second record() into it stored none."""
    from robolearn.data import record
    from robolearn.data.record import RandomController

    env = TwoPaces()
    with _writer(env, root) as writer:
        for _ in range(2):
            record(RandomController(env), env, writer, episodes=2, progress=False)
        assert writer.episodes == 4
