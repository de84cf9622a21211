"""Recorded sim episodes replay bit for bit from their recorded state; other envs replay open loop."""

from __future__ import annotations

import numpy as np
import pytest

import sims
from robolearn.data import DatasetError
from robolearn.data.replay import replay


@pytest.mark.parametrize("task, kwargs, noise", [
    ("pendulum", {"max_episode_steps": 60}, 0.0),
    ("arm_reach", {}, 0.3),
    ("hopper", {}, 0.0),
])
def test_recorded_episodes_replay_to_the_identical_return(recorded, task, kwargs, noise):
    dataset = recorded(task, 3, num_envs=2, noise=noise, **kwargs)
    with sims.make_env(task, num_envs=1, seed=123, num_threads=1, **kwargs) as env:  # another seed: the state decides
        for episode in dataset:
            result = replay(episode, env)
            assert result.restored and result.exact
            assert result.replayed_return == result.recorded_return
            assert result.steps == len(episode) and not result.ended_early
            assert result.qpos_divergence is not None and len(result.qpos_divergence) == len(episode) + 1
            assert not result.qpos_divergence.any()


def test_a_replay_compares_the_recorded_success_and_says_which_group_diverged(recorded):
    """Recorded datasets keep the task's success test per step (infos/success); a replay compares its own
    with the recording's last, and measures each observation group apart."""
    episode = recorded("arm_reach", 1, num_envs=1, seed=3)[0]
    assert episode.infos["success"].shape == (len(episode),) and episode.infos["success"].dtype == bool
    with sims.make_env("arm_reach", num_envs=1, seed=5, num_threads=1) as env:
        result = replay(episode, env)
        assert result.exact and result.recorded_success == result.replayed_success is not None
        assert result.group_divergence == {"policy": 0.0}
        episode.infos["success"][-1] = not episode.infos["success"][-1]  # a recording that ended otherwise
        episode.observations["policy"][5:, 11:] += 0.5  # its last action, as the recording says it
        result = replay(episode, env)
    assert not result.exact and result.recorded_success != result.replayed_success
    assert result.summary()["group_divergence"] == {"policy": pytest.approx(0.5)}


def test_a_terminated_hopper_episode_replays_to_the_same_termination(recorded):
    dataset = recorded("hopper", 2, num_envs=1)  # random actions make the hopper fall within ~30 steps
    episode = dataset[0]
    assert episode.terminations[-1] and not episode.terminations[:-1].any()
    with sims.make_env("hopper", num_envs=1, num_threads=1) as env:
        result = replay(episode, env)
    assert result.exact and result.steps == len(episode) < env.max_episode_steps


def test_without_the_recorded_state_the_replay_diverges_and_says_so(recorded):
    episode = recorded("pendulum", 1, num_envs=1, max_episode_steps=60)[0]
    with sims.make_env("pendulum", num_envs=1, seed=99, num_threads=1, max_episode_steps=60) as env:
        result = replay(episode, env, restore=False)
    assert not result.restored and not result.exact
    assert result.qpos_divergence[0] > 0 and result.return_diff != 0


def test_state_rows_of_another_model_are_refused(recorded):
    episode = recorded("pendulum", 1, num_envs=1, max_episode_steps=20)[0]
    with sims.make_env("arm_reach", num_envs=1, num_threads=1) as env, pytest.raises(DatasetError, match="another model"):
        replay(episode, env)


def test_replay_on_a_gymnasium_env_applies_the_actions_open_loop(recorded):
    dataset = recorded("gym:Pendulum-v1", 1, name="gym-pendulum", num_envs=1, seed=7)
    episode = dataset[0]
    assert episode.state is None  # Gymnasium envs expose no exact state
    with sims.make_env("gym:Pendulum-v1", num_envs=1) as env:
        result = replay(episode, env, seed=7)  # the same reset seed: deterministic dynamics reproduce it
    assert not result.restored and result.qpos_divergence is None
    assert result.steps == len(episode) == 200
    np.testing.assert_allclose(result.obs_divergence, 0.0, atol=1e-5)
    assert result.replayed_return == pytest.approx(result.recorded_return, abs=1e-3)


def test_replay_films_env_0(recorded, tmp_path):
    episode = recorded("pendulum", 1, num_envs=1, max_episode_steps=20)[0]
    with sims.make_env("pendulum", num_envs=1, num_threads=1, max_episode_steps=20) as env:
        result = replay(episode, env, video=tmp_path / "replay.mp4")
    assert result.exact and result.video.stat().st_size > 1000


def test_an_episode_with_only_d4rls_qpos_and_qvel_starts_from_them(recorded):
    """D4RL files carry infos/qpos and infos/qvel, not our state rows: the replay starts from them."""
    episode = recorded("hopper", 1, num_envs=1)[0]
    del episode.infos["state"]
    episode.infos = {name: value[:-1] for name, value in episode.infos.items()}  # D4RL's T rows
    with sims.make_env("hopper", num_envs=1, seed=5, num_threads=1) as env:
        result = replay(episode, env)
        assert result.start == "qpos/qvel" and result.restored and result.exact  # qpos and qvel are all of it
        episode.infos["qvel"] = episode.infos["qvel"][:, :3]
        with pytest.raises(DatasetError, match=r"recorded qvel rows have shape \(3,\), this env's \(6,\)"):
            replay(episode, env)


def test_without_state_rows_the_task_puts_back_what_the_first_observation_reports(recorded):
    """arm_reach's target is a mocap body the reset draws: an episode with only qpos and qvel (a robot's
    recording) replays towards the target its first observation reports (Task.state_from_observation)."""
    episode = recorded("arm_reach", 1, num_envs=1, seed=3)[0]
    del episode.infos["state"]
    with sims.make_env("arm_reach", num_envs=1, seed=5, num_threads=1) as env:
        result = replay(episode, env)
        assert result.start == "qpos/qvel" and result.from_observation == ("mocap_pos",) and result.restored
        assert result.obs_divergence.max() < 1e-6 and abs(result.return_diff) < 1e-4  # the target's float32 rounding
        episode.observations["policy"] = episode.observations["policy"][:, :11]
        with pytest.raises(DatasetError, match=r"group 'policy' has rows of shape \(11,\), this env's \(14,\)"):
            replay(episode, env)


def test_replay_given_a_dataset_and_an_index_says_what_it_takes():
    """replay(dataset, 0) had been an AttributeError: 'int' object has no attribute 'num_envs'."""
    with pytest.raises(TypeError, match=r"replay\(episode, env\): give one episode \(dataset\[i\]\) and a VecEnv of its "
                                        r"task, got list and int"):
        replay([], 0)


def test_a_replay_film_that_fails_leaves_no_temp_file(tmp_path):
    """The film is written aside (``.NAME.<pid>.tmp.mp4``) and renamed: a write that failed (ffmpeg refusing a
    frame; a Ctrl+C or kill, which `dataset` commands take as one) had left that half film, a new one per process."""
    from robolearn.data.replay import _write_video

    frames = [np.zeros((64, 64, 3), np.uint8), np.zeros((32, 32, 3), np.uint8)]  # a frame of another size
    with pytest.raises(ValueError):
        _write_video(tmp_path / "a.mp4", frames, 0.1)
    assert list(tmp_path.iterdir()) == []
