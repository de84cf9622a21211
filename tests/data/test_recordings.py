"""Deployment recordings (robolearn.recording's episode_*.npz) import as datasets."""

from __future__ import annotations

import gc
import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

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


def test_a_robots_safety_events_metrics_and_successes_import_as_per_step_infos(tmp_path, root, capsys):
    """Nothing a recording holds per step is dropped: each rule that overruled a step anywhere becomes a flag
    of every episode, metrics and the success test after each step become infos, and all round-trip."""
    out = tmp_path / "deploy"
    with sims.make_env("arm_reach", num_envs=1, num_threads=1, max_episode_steps=6) as env:
        run(RandomController(env), env, rate_hz=0, episodes=2, close_env=False, sink=EpisodeRecorder(out))
    events = ["", "max_step", "max_step,overspeed", "", "", "max_step"]
    for i in range(2):  # what a Robot's info adds (a sim TaskEnv reports no safety events or per-step metrics)
        file = out / f"episode_{i:05d}.npz"
        arrays = dict(np.load(file))
        assert arrays["successes"].shape == (6,) and bool(arrays["success"]) == bool(arrays["successes"][-1])
        arrays["metrics/distance_m"] = np.linspace(0.3, 0.1 * i, 6)
        arrays["metrics/gappy"] = np.array([np.nan, 1, 2, 3, 4, 5])  # a step without a value (the recorder's NaN)
        arrays["safety_events"] = np.asarray(events if i == 0 else [""] * 6, dtype=str)
        if i == 1:  # as a run's end cuts an episode short: no outcome
            arrays["interrupted"] = np.asarray(True)
            del arrays["success"]
        np.savez(file, **arrays)
    assert main(["dataset", "import", str(out), "--format", "recording", "--task", "arm_reach", "--name", "flags"]) == 0
    assert "metrics/gappy left out: steps without a value" in "".join(capsys.readouterr())  # said with the summary
    for i, episode in enumerate(Dataset.load("flags")):
        assert "metrics/gappy" not in episode.infos
        source = load_episode(out / f"episode_{i:05d}.npz")
        if i == 0:
            np.testing.assert_array_equal(episode.infos["success"], source["successes"])
        else:  # success_rate, import's "success k/n" and replay's outcome count only ended episodes
            assert "success" not in episode.infos and episode.success is None
        np.testing.assert_array_equal(episode.infos["metrics/distance_m"], source["metrics/distance_m"])
        overruled = events if i == 0 else [""] * 6
        for rule in ("max_step", "overspeed"):
            np.testing.assert_array_equal(episode.infos[f"safety/{rule}"], [rule in e.split(",") for e in overruled])


def test_a_run_or_its_deploy_folder_names_the_recordings_in_it(tmp_path):
    """`dataset import <run>/deploy` (or the run) had said only that it held no episode files: it names one to import."""
    import os

    from robolearn.data.recordings import read_recordings

    older, newest = tmp_path / "deploy" / "20260101-000000", tmp_path / "deploy" / "20260101-000100"
    for folder, mtime in ((older, 1_000_000), (newest, 2_000_000)):
        folder.mkdir(parents=True)
        (folder / "episode_00000.npz").write_bytes(b"")
        os.utime(folder, (mtime, mtime))
    for given in tmp_path, tmp_path / "deploy":
        with pytest.raises(DatasetError) as err:
            read_recordings(given)
        assert str(err.value).endswith(f"; it holds recordings: import one, e.g. the newest, {newest}; also {older}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError) as err:  # no recordings in it: nothing more said
        read_recordings(tmp_path / "empty")
    assert str(err.value).endswith("no episode_*.npz files (a recording directory from `robolearn deploy`)")


def test_a_corrupt_episode_file_is_a_one_line_error(tmp_path):
    from robolearn.data.recordings import read_recordings

    (tmp_path / "episode_00000.npz").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(DatasetError, match="episode_00000.npz: not a readable episode file"):
        read_recordings(tmp_path)
    np.savez(tmp_path / "episode_00000.npz", actions=np.zeros((3, 1)))
    with pytest.raises(DatasetError, match="episode_00000.npz: missing key 'rewards'"):
        read_recordings(tmp_path)


def test_a_corrupt_episode_file_is_closed_and_an_npy_one_is_said(tmp_path):
    """Given the path, numpy's np.load left a file that begins as a zip file and is none open, for the garbage
    collector to close with a ResourceWarning; a .npy array under an episode's name had been a TypeError."""
    path = tmp_path / "episode_00000.npz"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="episode_00000.npz: not a readable episode file"):
            load_episode(path)
        gc.collect()
    assert not [str(w.message) for w in said if issubclass(w.category, ResourceWarning)]
    np.save(tmp_path / "array.npy", np.zeros(3))
    (tmp_path / "array.npy").rename(path)
    with pytest.raises(ValueError, match=r"episode_00000.npz: one array of shape \(3,\) \(a .npy file\), not an "
                                         "episode file's named arrays"):
        load_episode(path)


def test_a_recording_from_elsewhere_with_text_or_without_its_commands_is_a_one_line_error(tmp_path, root, capsys):
    """A recording someone sent: text where numbers belong had been numpy's TypeError traceback from `dataset
    import` and `plot`, and an episode without commanded_actions plot's KeyError."""
    steps = 4
    arrays = {"obs/policy": np.zeros((steps + 1, 3), np.float32), "actions": np.zeros((steps, 1), np.float32),
              "commanded_actions": np.zeros((steps, 1), np.float32), "rewards": np.zeros(steps),
              "terminations": np.zeros(steps, bool), "truncations": np.r_[np.zeros(steps - 1, bool), True],
              "safety_events": np.array(["", "jump_limit", "", ""]), "metrics/distance_m": np.array(["a"] * steps)}
    np.savez(tmp_path / "episode_00000.npz", **arrays)
    said = f"{tmp_path / 'episode_00000.npz'}: 'metrics/distance_m' has dtype <U1, expected numbers"
    for argv in (["dataset", "import", str(tmp_path), "--format", "recording", "--task", "pendulum"],
                 ["plot", str(tmp_path), "--out", str(tmp_path / "r.png")]):
        assert main(argv) == 2
        assert said in capsys.readouterr().err
    del arrays["metrics/distance_m"], arrays["commanded_actions"]
    np.savez(tmp_path / "episode_00000.npz", **arrays)
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "r.png")]) == 2
    assert f"{tmp_path / 'episode_00000.npz'}: missing 'commanded_actions'" in capsys.readouterr().err
    assert load_episode(tmp_path / "episode_00000.npz")["safety_events"][1] == "jump_limit"  # its text is kept


def test_plot_draws_the_readable_episodes_and_names_each_unreadable_one_while_import_refuses(tmp_path, root, capsys):
    """One corrupt episode file (a copy cut short) had refused the plot of the whole recording; an import
    stays strict, and a recording with no readable episode is still an error saying why of each."""
    steps = 4
    arrays = {"obs/policy": np.zeros((steps + 1, 3), np.float32), "actions": np.zeros((steps, 1), np.float32),
              "commanded_actions": np.zeros((steps, 1), np.float32), "rewards": np.ones(steps),
              "terminations": np.zeros(steps, bool), "truncations": np.r_[np.zeros(steps - 1, bool), True]}
    for i in range(3):
        np.savez(tmp_path / f"episode_{i:05d}.npz", **arrays)
    corrupt, keyless = tmp_path / "episode_00001.npz", tmp_path / "episode_00002.npz"
    corrupt.write_bytes(corrupt.read_bytes()[:100])
    np.savez(keyless, actions=np.zeros((steps, 1)))
    out = tmp_path / "r.png"
    with pytest.warns(UserWarning) as said:
        assert main(["plot", str(tmp_path), "--out", str(out)]) == 0
    assert [str(w.message) for w in said if w.category is UserWarning] == [
        f"{corrupt}: not a readable episode file (missing, truncated or corrupt: File is not a zip file); left out "
        "of the plot",
        f"{keyless}: missing 'commanded_actions' (found actions); not an episode a recording writes; left out of the plot"]
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert main(["dataset", "import", str(tmp_path), "--format", "recording", "--task", "pendulum"]) == 2
    assert f"{corrupt}: not a readable episode file" in capsys.readouterr().err
    (tmp_path / "episode_00000.npz").write_bytes(b"PK\x03\x04 not really a zip")
    assert main(["plot", str(tmp_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"error: {tmp_path}: no readable episode file, nothing to draw: {tmp_path / 'episode_00000.npz'}: not a " \
           "readable episode file" in err and str(corrupt) in err and f"{keyless}: missing 'commanded_actions'" in err


def test_plot_leaves_out_an_episode_whose_actions_do_not_fit_naming_it(tmp_path):
    """Actions of another row count than the rewards, or another width than the first episode's, had been numpy's
    reshape or index error for the whole plot: such an episode is unreadable like a corrupt one."""
    def episode(index: int, actions: tuple[int, ...] = (4, 2), commanded: tuple[int, ...] | None = None) -> Path:
        path = tmp_path / f"episode_{index:05d}.npz"
        np.savez(path, actions=np.zeros(actions, np.float32), commanded_actions=np.zeros(commanded or actions, np.float32),
                 rewards=np.ones(4))
        return path

    episode(0)
    rows, wide, flat = episode(1, (5, 2)), episode(2, (4, 3)), episode(3, (8,))  # (8,) had been drawn as (4, 2)
    out = tmp_path / "r.png"
    with pytest.warns(UserWarning) as said:
        assert main(["plot", str(tmp_path), "--out", str(out)]) == 0
    assert [str(w.message) for w in said if w.category is UserWarning] == [
        f"{rows}: 'actions' has shape (5, 2), not a row per step ('rewards' has 4); left out of the plot",
        f"{wide}: 'actions' has 3 columns, the first episode drawn 2 (a row of the plot each); left out of the plot",
        f"{flat}: 'actions' has shape (8,), not a row per step ('rewards' has 4); left out of the plot"]
    assert out.read_bytes()[:4] == b"\x89PNG"
    first = episode(0, commanded=(4, 3))
    with pytest.warns(UserWarning) as said:  # the 3-wide episode is the first drawn now
        assert main(["plot", str(tmp_path), "--out", str(out)]) == 0
    assert str(said[0].message) == (f"{first}: 'commanded_actions' has 3 columns, its 'actions' 2 (a row of the plot "
                                    "each); left out of the plot")


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


ROBOT_TASK = {"max_episode_steps": 120, "max_goal_step": 0.2, "success_distance": 0.03, "frame_skip": 10,
              "safety_max_step": 0.2}  # metadata.json's task section, as `robolearn deploy` writes it


def _robot_recording(out, task: dict | None = None) -> np.ndarray:
    """One episode as deploy records a Dynamixel arm (a joint_state group, the task settings it ran: 120-step
    episodes where the task's default is 100), played by the simulated arm; returns its policy observations."""
    with sims.make_env("arm_reach", num_envs=1, num_threads=1, seed=1, max_episode_steps=120) as env:
        run(RandomController(env, seed=1), env, rate_hz=0, episodes=1, close_env=False,
            sink=EpisodeRecorder(out, metadata={"controller": "random", "control_dt": env.control_dt,
                                                "task": ROBOT_TASK if task is None else task}))
    file = out / "episode_00000.npz"
    arrays = dict(np.load(file))
    arrays["obs/joint_state"] = arrays["obs/policy"][:, :8]  # [q, qd] as the robot reads them (float32)
    np.savez(file, **arrays)
    return arrays["obs/policy"]


def test_a_robot_recording_replays_in_sim_towards_its_own_target_with_its_task_settings(tmp_path, root, capsys):
    """The import keeps the settings the robot ran (not safety_max_step, which is no task setting), and the
    replay puts back the recorded target (a mocap body the env's reset would draw anew) with the joints:
    the replayed observations and return then match the recording's."""
    policy = _robot_recording(tmp_path / "deploy")
    with sims.make_env("arm_reach", num_envs=1, num_threads=1) as env:  # what the replay's reset draws
        assert np.abs(env.reset(seed=0)["policy"][0, 8:11].numpy() - policy[0, 8:11]).max() > 0.01
    assert main(["dataset", "import", str(tmp_path / "deploy"), "--format", "recording", "--task", "arm_reach",
                 "--name", "robot"]) == 0
    out = capsys.readouterr().out
    assert "max_episode_steps=120, max_goal_step=0.2, success_distance=0.03, frame_skip=10" in out
    assert "kept under recording only: safety_max_step=0.2" in out
    ds = Dataset.load("robot")
    assert ds.info["task_kwargs"] == {key: v for key, v in ROBOT_TASK.items() if key != "safety_max_step"}

    assert main(["dataset", "replay", "robot", "--json"]) == 0
    out = capsys.readouterr().out
    assert "as the env's reset drew it" not in out  # the target, said of a replay that does not put it back
    result = json.loads(out.strip().splitlines()[-1])
    assert result["steps"] == result["recorded_steps"] == 120 and not result["ended_early"]  # not the default 100
    assert result["start"] == "qpos/qvel" and result["from_observation"] == ["mocap_pos"]
    assert result["obs_divergence_max"] < 1e-4  # float32 joints to start from; a target drawn anew is cm off
    assert set(result["group_divergence"]) == {"policy"} and "not compared: joint_state (the env has no" in out
    assert abs(result["return_diff"]) < 1e-3
    said = {True: "succeeded", False: "failed"}
    assert result["recorded_success"] is not None and result["recorded_success"] == result["replayed_success"]
    assert f"success:     recorded {said[result['recorded_success']]}, replayed {said[result['recorded_success']]}" in out


def test_recorded_task_settings_that_do_not_fit_the_task_are_refused_naming_the_file(tmp_path, root, capsys):
    _robot_recording(tmp_path / "deploy", task={"max_episode_steps": "long"})
    assert main(["dataset", "import", str(tmp_path / "deploy"), "--format", "recording", "--task", "arm_reach"]) == 2
    assert ("metadata.json: the recorded task settings (max_episode_steps=long) do not build task arm_reach: "
            "env.kwargs.max_episode_steps: expected int") in capsys.readouterr().err


def test_training_on_a_recording_says_when_the_env_runs_other_task_settings(tmp_path, root):
    from robolearn.offline_runner import check_dataset_fits

    _robot_recording(tmp_path / "deploy")
    assert main(["dataset", "import", str(tmp_path / "deploy"), "--format", "recording", "--task", "arm_reach",
                 "--name", "robot"]) == 0
    ds = Dataset.load("robot")
    with sims.make_env("arm_reach", num_envs=1, num_threads=1) as env, \
            pytest.warns(UserWarning, match=r"max_episode_steps=120, success_distance=0.03, the env has "
                                            r"max_episode_steps=100, success_distance=0.02; .* add "
                                            r"env.kwargs.max_episode_steps=120 env.kwargs.success_distance=0.03"):
        check_dataset_fits(ds, "arm_reach", env)


def test_a_recordings_flags_rate_and_metadata_that_cannot_be_read_as_said_are_refused(tmp_path):
    """Terminations of the strings 'False' had ended every step; a control_dt of -0.1 or a metadata list had
    been taken (or a traceback)."""
    from robolearn.data.recordings import read_recordings

    out = tmp_path / "deploy"
    with sims.make_env("arm_reach", num_envs=1, num_threads=1, max_episode_steps=5) as env:
        run(RandomController(env), env, rate_hz=0, episodes=1, close_env=False,
            sink=EpisodeRecorder(out, metadata={"controller": "random", "control_dt": env.control_dt}))
    episode = out / "episode_00000.npz"
    arrays = dict(np.load(episode))
    np.savez(episode, **(arrays | {"terminations": np.array(["False"] * 5)}))
    with pytest.raises(DatasetError, match=r"episode_00000.npz: 'terminations' has dtype <U5, expected numbers"):
        read_recordings(out)
    np.savez(episode, **arrays)
    metadata = json.loads((out / "metadata.json").read_text())
    for wrong, said in (({**metadata, "control_dt": -0.1}, r"'control_dt' is -0.1; the control period, a positive"),
                        ([metadata], r"metadata.json: a list; a recording's metadata is a mapping")):
        (out / "metadata.json").write_text(json.dumps(wrong))
        with pytest.raises(DatasetError, match=said):
            read_recordings(out)


def test_an_episode_not_judged_at_its_end_imports_without_an_outcome(tmp_path, root):
    """The recorder leaves `success` out where the last step had no success test: the import had read the
    filler False of that step as a miss."""
    out = tmp_path / "deploy"
    with sims.make_env("arm_reach", num_envs=1, num_threads=1, max_episode_steps=5) as env:
        run(RandomController(env), env, rate_hz=0, episodes=1, close_env=False, sink=EpisodeRecorder(out))
    file = out / "episode_00000.npz"
    arrays = dict(np.load(file))
    del arrays["success"]
    np.savez(file, **arrays)
    assert main(["dataset", "import", str(out), "--format", "recording", "--task", "arm_reach", "--name", "unjudged"]) == 0
    assert Dataset.load("unjudged")[0].success is None


def test_a_recorder_writing_nothing_keeps_only_what_its_summaries_read(tmp_path):
    """EpisodeRecorder(None) (deploy --no-record) sums each episode as a writing recorder does, without copying
    each step's other observation groups, actions and timestamps: it had kept all of them, to stack and drop."""
    def step(t: int, done: bool) -> SimpleNamespace:
        flags = torch.tensor([done])
        return SimpleNamespace(reward=torch.tensor([0.5 * t]), terminated=flags, truncated=torch.tensor([False]),
                               obs=obs(t + 1), info={"goal_action": torch.ones(1, 2), "success": flags,
                                                     "metrics": {"distance_m": torch.tensor([1.0 / (t + 1)])}})

    def obs(t: int) -> dict[str, torch.Tensor]:
        return {"camera": torch.full((1, 8, 8), float(t)), "joint_state": torch.tensor([[0.1, t, 0.0, -2.0 * t]])}

    writing, summing = EpisodeRecorder(tmp_path / "rec"), EpisodeRecorder(None)
    for recorder in writing, summing:
        for t in range(4):
            recorder.add(obs(t), torch.zeros(1, 2), torch.zeros(1, 2), step(t, done=t == 3))
        recorder.add(obs(0), torch.zeros(1, 2), torch.zeros(1, 2), step(0, done=False))
        if recorder is summing:
            assert set(summing._obs) == {"joint_state"} and summing._columns["actions"] == []
        recorder.close()
    assert [s | {"file": None} for s in writing.summaries] == summing.summaries
    assert summing.summaries[0]["peak_joint_speed"] == 8.0 and summing.summaries[1]["interrupted"]
    assert summing.episodes_written == 2 and summing.steps_written == 5


def test_a_recording_imported_without_a_task_is_said_to_name_none_as_a_recording(tmp_path, root, capsys):
    """A recording (a folder) that names no task had been said as 'the file says none'."""
    out = tmp_path / "deploy"
    with sims.make_env("arm_reach", num_envs=1, num_threads=1, max_episode_steps=5) as env:
        run(RandomController(env), env, rate_hz=0, episodes=1, close_env=False, sink=EpisodeRecorder(out))
    assert main(["dataset", "import", str(out), "--format", "recording", "--name", "untold"]) == 0
    assert "task:        not named (the recording says none): import with --task NAME" in capsys.readouterr().out
