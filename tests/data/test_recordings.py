"""Deployment recordings (robolearn.recording's episode_*.npz) import as datasets."""

from __future__ import annotations

import numpy as np
import pytest

import sims
from robolearn.cli import main
from robolearn.data import Dataset, DatasetError
from robolearn.data.record import RandomController
from robolearn.recording import EpisodeRecorder, load_episode
from robolearn.runtime import run


def test_a_deployment_recording_imports_with_every_array(tmp_path, root):
    out = tmp_path / "deploy"
    with sims.make_env("arm_reach", num_envs=1, num_threads=1, max_episode_steps=20) as env:
        run(RandomController(env), env, rate_hz=0, episodes=2, close_env=False,
            sink=EpisodeRecorder(out, metadata={"controller": "random", "control_dt": env.control_dt}))
    assert main(["dataset", "import", str(out), "--format", "recording", "--task", "arm_reach", "--name", "arm-deploy"]) == 0
    ds = Dataset.load("arm-deploy")
    assert len(ds) == 2 and ds.info["controller"] == "random" and ds.info["control_dt"] == pytest.approx(0.02)
    for i, episode in enumerate(ds):
        source = load_episode(out / f"episode_{i:05d}.npz")
        np.testing.assert_array_equal(episode.observations["policy"], source["obs/policy"])
        np.testing.assert_array_equal(episode.actions, source["actions"])
        np.testing.assert_array_equal(episode.rewards, source["rewards"])
        np.testing.assert_array_equal(episode.infos["commanded_actions"], source["commanded_actions"])
        assert episode.truncations[-1]


def test_a_corrupt_episode_file_is_a_one_line_error(tmp_path):
    from robolearn.data.recordings import read_recordings

    (tmp_path / "episode_00000.npz").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(DatasetError, match="episode_00000.npz: not a readable episode file"):
        read_recordings(tmp_path)
    np.savez(tmp_path / "episode_00000.npz", actions=np.zeros((3, 1)))
    with pytest.raises(DatasetError, match="episode_00000.npz: missing key 'rewards'"):
        read_recordings(tmp_path)


def test_a_robot_recording_with_groups_the_task_lacks_imports_readable_with_them(tmp_path, root):
    """A real robot's recording also holds joint_state; with --task it had written a dataset nothing could read."""
    out = tmp_path / "deploy"
    with sims.make_env("arm_reach", num_envs=1, num_threads=1, max_episode_steps=10) as env:
        run(RandomController(env), env, rate_hz=0, episodes=1, close_env=False,
            sink=EpisodeRecorder(out, metadata={"controller": "random"}))
    file = out / "episode_00000.npz"
    arrays = dict(np.load(file))
    arrays["obs/joint_state"] = np.arange(len(arrays["obs/policy"]) * 8, dtype=np.float32).reshape(-1, 8)
    np.savez(file, **arrays)
    assert main(["dataset", "import", str(out), "--format", "recording", "--task", "arm_reach", "--name", "robot"]) == 0
    ds = Dataset.load("robot")
    assert set(ds.observation_spec) == {"policy", "joint_state"}
    np.testing.assert_array_equal(ds[0].observations["joint_state"], arrays["obs/joint_state"])
    np.testing.assert_array_equal(ds[0].infos["qvel"], arrays["obs/joint_state"][:, 4:])  # a sim replay starts there
    assert ds.transitions()["obs"]["joint_state"].shape == (10, 8)
    from robolearn.offline_runner import check_dataset_fits

    with sims.make_env("arm_reach", num_envs=1, num_threads=1) as env:
        check_dataset_fits(ds, "arm_reach", env)  # its extra group kept, not trained on: README's loop trains on it


def test_a_recording_missing_an_episode_file_says_which(tmp_path):
    from robolearn.data.recordings import read_recordings

    out = tmp_path / "deploy"
    with sims.make_env("arm_reach", num_envs=1, num_threads=1, max_episode_steps=5) as env:
        run(RandomController(env), env, rate_hz=0, episodes=4, close_env=False, sink=EpisodeRecorder(out, metadata={}))
    (out / "episode_00001.npz").unlink()
    (out / "deploy.json").write_text('{"episodes": 5}')  # and the last was never written
    with pytest.warns(UserWarning, match=r"episode_00001.npz, episode_00004.npz missing \(2 of 5\); the others"):
        episodes, _ = read_recordings(out)
    assert len(episodes) == 3
