"""The Dataset object: Minari storage, transitions, scores, split/merge, atomic writes."""

from __future__ import annotations

import contextlib
import json
import re
import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces

import sims
from robolearn.cli import main as cli
from robolearn.data import Dataset, DatasetError, DatasetWriter, list_datasets, merge, split
from robolearn.data.record import RandomController, record


def test_recorded_dataset_holds_episodes_state_and_metadata(recorded, root):
    ds = recorded("arm_reach", 3, num_envs=2, metadata={"ref_min_score": -80.0, "ref_max_score": 0.0})
    assert ds.id == "arm_reach-v0" and ds.path == root / "arm_reach-v0"
    assert len(ds) == ds.num_episodes == 3 and ds.num_steps == 300
    assert ds.task == "arm_reach" and ds.info["state"]["format"] == "mjSTATE_INTEGRATION"
    episode = ds[1]
    assert episode.observations["policy"].shape == (101, 14) and episode.observations["policy"].dtype == np.float32
    assert episode.actions.shape == (100, 4) and episode.rewards.shape == (100,)
    assert episode.truncations[-1] and not episode.terminations.any()
    state_size = ds.info["state"]["size"]
    assert episode.state.shape == (101, state_size) and episode.state.dtype == np.float64
    assert episode.infos["qpos"].shape == (101, 4) and episode.infos["qvel"].shape == (101, 4)
    np.testing.assert_array_equal(episode.infos["qpos"][:, :4].astype(np.float32), episode.observations["policy"][:, :4])
    stats = ds.episode_stats()
    assert [s["length"] for s in stats] == [100] * 3
    assert stats[1]["return"] == pytest.approx(episode.episode_return)
    assert episode.infos["success"].shape == (100,)  # the task's test after each step; an attribute at the end
    assert [s["success"] for s in stats] == [bool(e.infos["success"][-1]) for e in ds]
    summary = ds.summary()
    assert summary["success_rate"] == pytest.approx(np.mean([s["success"] for s in stats]))
    assert (summary["length_mean"], summary["length_min"], summary["terminated_episodes"]) == (100, 100, 0)
    assert ds.normalized_score(-40.0) == pytest.approx(0.5)
    assert list_datasets() == ["arm_reach-v0"]


def test_minari_reads_our_datasets(recorded, root, monkeypatch):
    import minari

    recorded("pendulum", 2, num_envs=2, max_episode_steps=30, metadata={"ref_min_score": 0.0, "ref_max_score": 30.0})
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    theirs = minari.load_dataset("pendulum-v0")
    assert theirs.total_episodes == 2 and theirs.total_steps == 60
    assert float(minari.get_normalized_score(theirs, np.array(15.0))) == pytest.approx(0.5)


def minari_made(root, monkeypatch, name, episodes, *, corrupt=None):
    """A dataset written by Minari's own API (as users outside robolearn make them): random Pendulum-v1
    episodes; ``corrupt(observations, rewards)`` edits the first one before it is written."""
    import gymnasium as gym
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    env = gym.make("Pendulum-v1", max_episode_steps=20)
    env.action_space.seed(0)
    buffers = []
    for index in range(episodes):
        observations, rewards = [env.reset(seed=index)[0]], []
        for _ in range(20):
            obs, reward, *_ = env.step(env.action_space.sample())
            observations.append(obs)
            rewards.append(reward)
        observations, rewards = np.array(observations), np.array(rewards)
        if corrupt is not None and index == 0:
            observations, rewards = corrupt(observations, rewards)
        buffers.append(EpisodeBuffer(id=index, observations=observations, actions=np.zeros((20, 1), np.float32),
                                     rewards=rewards, terminations=np.zeros(20, bool),
                                     truncations=np.arange(20) == 19, infos={}))
    minari.create_dataset_from_buffers(dataset_id=name, buffer=buffers, env=env, eval_env=env, algorithm_name="random",
                                       author="someone", author_email="someone@example.org",
                                       code_permalink="https://example.org", description="random")
    return Dataset.load(name, root)


def test_a_minari_dataset_made_elsewhere_names_its_task_sums_its_returns_and_is_checked_when_read(root, monkeypatch):
    ds = minari_made(root, monkeypatch, "pendulum-random-v0", 2)
    assert ds.task == "gym:Pendulum-v1"  # from Minari's env_spec: a run on another task is refused
    stats = ds.episode_stats()  # Minari writes no return attribute: summed from the rewards
    assert [s["length"] for s in stats] == [20, 20] and stats[0]["return"] == pytest.approx(ds[0].episode_return)
    assert stats[0]["success"] is None and "success_rate" not in ds.summary()  # no infos/success recorded
    assert ds.summary()["task"] == "gym:Pendulum-v1"  # `dataset info` had shown no task: it is not in our metadata
    assert ds.summary()["return_mean"] == pytest.approx(np.mean([ds[0].episode_return, ds[1].episode_return]))
    assert ds.transitions()["obs"]["policy"].dtype == torch.float32  # Minari stored float64
    assert [part.task for part in split(ds, [0.5, 0.5])] == ["gym:Pendulum-v1"] * 2  # parts keep it: they merge

    def nan_at_step_3(observations, rewards):
        observations[3, 1] = np.nan
        return observations, rewards

    bad = minari_made(root, monkeypatch, "pendulum-nan-v0", 2, corrupt=nan_at_step_3)
    with pytest.raises(DatasetError, match=r"pendulum-nan-v0: episode 0: 'observations/policy' .* NaN or inf \(first at row 3\)"):
        bad.transitions()

    def integers(observations, rewards):
        return (100 * observations).astype(np.int32), rewards

    ints = minari_made(root, monkeypatch, "pendulum-int-v0", 1, corrupt=integers)
    assert ints.transitions()["obs"]["policy"].dtype == torch.float32  # what the networks take


@pytest.mark.parametrize("change, says", [
    (lambda e: setattr(e, "rewards", e.rewards[:, None]), r"'rewards' has shape \(10, 1\), expected \(10,\)"),
    (lambda e: setattr(e, "terminations", e.terminations[:, None]), r"'terminations' has shape \(10, 1\)"),
    (lambda e: setattr(e, "rewards", np.array(["1.0"] * 10)), r"'rewards' has dtype <U3, expected numbers"),
    # rewards cut short had been said as observations too long, "expected 9 rows (8 steps + 1)", naming no rewards
    (lambda e: setattr(e, "rewards", e.rewards[:8]), r"'observations/policy' has shape \(11, 3\), expected 9 rows "
                                                     r"\(8 steps \+ 1, as 'rewards' has 8 rows\)"),
])
def test_episodes_refuse_per_step_columns_and_text_where_numbers_belong(recorded, change, says):
    episode = recorded("pendulum", 1, num_envs=1, max_episode_steps=10)[0]
    change(episode)
    with pytest.raises(DatasetError, match=says):
        episode.check("file.hdf5: episode 0")


def test_transitions_are_aligned_tensors(recorded):
    ds = recorded("hopper", 4, num_envs=2)
    batch = ds.transitions("cpu")
    steps = ds.num_steps
    assert batch["obs"]["policy"].shape == batch["next_obs"]["policy"].shape == (steps, 11)
    assert batch["action"].shape == (steps, 3) and batch["reward"].shape == (steps,)
    assert batch["terminated"].dtype == torch.bool and int(batch["terminated"].sum()) == 4  # every random hopper falls
    first = ds[0]
    np.testing.assert_array_equal(batch["next_obs"]["policy"][: len(first)].numpy(), first.observations["policy"][1:])
    np.testing.assert_array_equal(batch["reward"][: len(first)].numpy(), first.rewards)
    episodes = list(ds)  # every row in place, not only the first episode's
    np.testing.assert_array_equal(batch["obs"]["policy"].numpy(),
                                  np.concatenate([e.observations["policy"][:-1] for e in episodes]))
    np.testing.assert_array_equal(batch["action"].numpy(), np.concatenate([e.actions for e in episodes]))
    np.testing.assert_array_equal(batch["truncated"].numpy(), np.concatenate([e.truncations for e in episodes]))


def test_transitions_to_a_gpu_that_is_not_there_are_refused_before_the_read(recorded, monkeypatch):
    """Dataset.transitions("cuda") without a GPU read the whole dataset, then failed as torch's "Torch not compiled
    with CUDA enabled"."""
    ds = recorded("pendulum", 1, num_envs=1, max_episode_steps=5)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # (as on CI; a GPU machine too)
    read = []
    monkeypatch.setattr(type(ds), "_read_transitions", lambda self: read.append(1))
    with pytest.raises(ValueError, match=r"transitions\(device='cuda'\): no CUDA GPU here .*read them to 'cpu'"):
        ds.transitions("cuda")
    assert not read


def test_transitions_refuse_steps_that_disagree_with_the_metadata(recorded):
    ds = recorded("pendulum", 2, num_envs=1, max_episode_steps=10)
    for claimed, says in ((25, "hold 20 steps"), (15, "more steps than")):
        ds.raw_metadata["total_steps"] = claimed
        with pytest.raises(DatasetError, match=f"{says}.*'total_steps'"):
            ds.transitions()
        with pytest.warns(UserWarning, match=f"'total_steps' says {claimed}, the episodes hold 20 \\(shown\\)"):
            assert ds.summary()["steps"] == 20  # `dataset info` shows what the episodes hold


def test_normalized_score_without_references_says_how_to_set_them(recorded):
    ds = recorded("pendulum", 1, num_envs=1, max_episode_steps=10)
    with pytest.raises(DatasetError, match="--ref-min and --ref-max"):
        ds.normalized_score(1.0)


def test_split_and_merge(recorded):
    ds = recorded("pendulum", 5, num_envs=1, max_episode_steps=10)
    train, val = split(ds, [0.8, 0.2], seed=1)
    assert (train.id, val.id) == ("pendulum-split0-v0", "pendulum-split1-v0")
    assert (len(train), len(val)) == (4, 1) and train.task == "pendulum"
    returns = sorted(e.episode_return for e in [*train, *val])
    assert returns == sorted(e.episode_return for e in ds)
    both = merge([train, val], "pendulum-again")
    assert len(both) == 5 and both.num_steps == ds.num_steps
    assert both.info["task_kwargs"] == {"max_episode_steps": 10} and "episodes_of_source" not in both.info  # the first's
    assert both.info["sources"] == {part.id: {"episodes_of_source": part.info["episodes_of_source"],
                                              "source": part.info["source"]} for part in (train, val)}
    other = recorded("hopper", 1, num_envs=1)
    with pytest.raises(DatasetError, match="differ in task"):
        merge([ds, other], "mixed")
    longer = recorded("pendulum", 1, name="longer", num_envs=1, max_episode_steps=12)  # had merged, run as 10 steps
    with pytest.raises(DatasetError, match=r"differ in task settings \(max_episode_steps=10 vs max_episode_steps=12\)"):
        merge([ds, longer], "mixed")
    with pytest.raises(DatasetError, match="cannot merge 'pendulum-v0' with itself: its episodes would be stored twice"):
        merge([ds, train, ds], "twice")
    timed = [Dataset.create(f"timed{i}", [ds[i]], ds.observation_spec, ds.action_spec,
                            metadata={**ds.writer_metadata(), **({"control_dt": dt} if dt else {})})
             for i, dt in enumerate((0.02, 0.02 * (1 + 1e-9), None))]  # one period, as floats store it; one unknown
    assert merge(timed, "timed").info["control_dt"] == 0.02  # kept where known, not moved under sources
    unended = ds[0]
    unended.truncations[-1] = False
    with pytest.raises(DatasetError, match="episode 0: its last step is neither terminated nor truncated"):
        Dataset.create("unended", [unended], ds.observation_spec, ds.action_spec)
    with pytest.raises(DatasetError, match="sum to at most 1"):
        split(ds, [0.8, 0.5])


def test_split_and_merge_renumber_the_episodes_a_recording_cut_short(recorded):
    """A robot recording's ``interrupted_episodes`` count from its first episode: a split had copied [1] into
    both parts (one a single whole episode), and a merge of two recordings each cut short in episode 1 kept
    [1], the second's cut episode (3 in the merge) unlisted."""
    first = recorded("pendulum", 2, name="first", num_envs=1, max_episode_steps=10, metadata={"interrupted_episodes": [1]})
    second = recorded("pendulum", 2, name="second", num_envs=1, max_episode_steps=10, metadata={"interrupted_episodes": [1]})
    assert merge([first, second], "both").info["interrupted_episodes"] == [1, 3]
    parts = split(first, [0.5, 0.5], seed=0)
    assert sorted(tuple(p.info["interrupted_episodes"]) for p in parts) == [(), (0,)]
    assert [p.info["interrupted_episodes"] for p in parts] == [[0] if p.info["episodes_of_source"] == [1] else []
                                                               for p in parts]


def test_a_split_stopped_between_its_parts_says_which_it_wrote(recorded, monkeypatch):
    """A Ctrl+C after the first part had said only "interrupted": the first part stayed, and the next split was
    refused as "already exist" with no word of how it came there."""
    ds = recorded("pendulum", 4, num_envs=1, max_episode_steps=10)
    create = Dataset.create.__func__

    def stop_at_the_second(cls, name, *args, **kwargs):
        if name == "b":
            raise KeyboardInterrupt("SIGINT")
        return create(cls, name, *args, **kwargs)

    monkeypatch.setattr(Dataset, "create", classmethod(stop_at_the_second))
    with pytest.raises(KeyboardInterrupt, match=r"^SIGINT; the split of 'pendulum-v0' wrote 'a-v0' before it stopped, "
                                                r"not 'b-v0': split again with --overwrite for all the parts$"):
        split(ds, [0.5, 0.5], ["a", "b"])


def test_a_merge_made_before_the_renumbering_is_said_to_leave_its_sources_cut_episodes_unlisted(recorded):
    """A merge made before merges numbered their sources' cut episodes kept differing lists under 'sources', each
    counted in its own source: merged or split again, its cut episodes had gone unlisted without a word."""
    legacy = recorded("pendulum", 4, name="legacy", num_envs=1, max_episode_steps=10, metadata={
        "source": "merge of a-v0, c-v0", "sources": {"a-v0": {"interrupted_episodes": [1]},
                                                     "c-v0": {"interrupted_episodes": [0]}}})
    cut = recorded("pendulum", 2, name="cut", num_envs=1, max_episode_steps=10, metadata={"interrupted_episodes": [1]})
    with pytest.warns(UserWarning, match=r"'legacy-v0' is a merge made before .*\(a-v0, c-v0: .* not listed in "
                                         r"the interrupted_episodes of 'both-v0'"):
        assert merge([legacy, cut], "both").info["interrupted_episodes"] == [5]
    with pytest.warns(UserWarning, match="'legacy-v0' is a merge made before"):
        split(legacy, [0.5, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a merge of today's lists says nothing
        merge([cut, recorded("pendulum", 1, name="whole", num_envs=1, max_episode_steps=10)], "today")


def test_a_merge_with_an_import_says_which_episodes_end_in_a_copied_observation(recorded):
    """A D4RL or LeRobot import's last observations are copies (final_observation: copied), which replay leaves
    out of its comparison; merged with a recording, that key had gone under 'sources', naming no episode, so a
    replay of the merge's imported episodes read the copy as a divergence of an exact replay."""
    kept = recorded("pendulum", 2, name="kept", num_envs=1, max_episode_steps=10)
    imported = recorded("pendulum", 2, name="imported", num_envs=1, max_episode_steps=10,
                        metadata={"final_observation": "copied"})
    assert [imported.final_copied(i) for i in range(2)] == [True, True] and not kept.final_copied(0)
    both = merge([kept, imported], "both")
    assert [both.final_copied(i) for i in range(4)] == [False, False, True, True]
    again = merge([imported, both], "again")  # a merge's own list, renumbered in the next
    assert [again.final_copied(i) for i in range(6)] == [True, True, False, False, True, True]
    for part in split(both, [0.5, 0.5], seed=0):
        assert [part.final_copied(i) for i in range(2)] == [e >= 2 for e in part.info["episodes_of_source"]]
    assert "final_observation_copied_episodes" not in merge([imported, recorded(
        "pendulum", 1, name="also", num_envs=1, max_episode_steps=10, metadata={"final_observation": "copied"})],
        "all-copied").info  # all of them: said once, as an import says it


def test_a_merge_compares_task_settings_with_the_defaults_filled_in(recorded):
    """A robot's recording imports with every setting spelled out (task_kwargs {reset_noise_scale: 0.1, ...}),
    a simulated one with the defaults left out ({}): the same task run alike had been refused as "differ in task
    settings", though the size warning tells a user to join robot and simulated data with `dataset merge`."""
    spelled_out = sims.trained_settings("pendulum", {"max_episode_steps": 10})
    plain = recorded("pendulum", 1, name="plain", num_envs=1, max_episode_steps=10)
    spelled = recorded("pendulum", 1, name="spelled", num_envs=1, **spelled_out)
    both = merge([plain, spelled], "both")
    assert len(both) == 2 and both.info["task_kwargs"] == spelled_out  # the one that says every setting
    assert "task_kwargs" not in both.info.get("sources", {}).get("plain-v0", {})
    other = recorded("pendulum", 1, name="other", num_envs=1, **{**spelled_out, "effort_weight": 0.5})
    with pytest.raises(DatasetError, match=r"differ in task settings \(effort_weight=0.01 vs effort_weight=0.5\)"):
        merge([plain, other], "mixed")


def test_a_merge_that_loses_the_reference_scores_says_so(recorded):
    """Merging data with and without reference scores had left a dataset with no normalized score, silently."""
    scored = recorded("pendulum", 1, name="scored", num_envs=1, max_episode_steps=10,
                      metadata={"ref_min_score": 0.0, "ref_max_score": 10.0})
    plain = recorded("pendulum", 1, name="plain", num_envs=1, max_episode_steps=10)
    with pytest.warns(UserWarning, match=r"merged dataset 'both' has no ref_min_score and ref_max_score: its "
                                         r"sources' differ or some have none \(scored-v0: 0.0, plain-v0: None\)"):
        both = merge([scored, plain], "both")
    assert both.ref_min_score is None and both.info["sources"]["scored-v0"]["ref_max_score"] == 10.0


def test_a_split_writes_all_its_parts_or_none_and_never_replaces_its_source(recorded, root):
    """A part named after the source, with --overwrite, had replaced it before the next part read its episodes
    (half the data lost); a name taken by another dataset had stopped the split after writing the parts before it."""
    ds = recorded("pendulum", 4, num_envs=1, max_episode_steps=10)
    with pytest.raises(DatasetError, match="may not replace 'pendulum-v0', which it reads from"):
        split(ds, [0.5, 0.5], ["pendulum", "rest"], overwrite=True)
    with pytest.raises(DatasetError, match="name one dataset twice"):
        split(ds, [0.5, 0.5], ["half", "half-v0"])
    Dataset.create("taken", [ds[0]], ds.observation_spec, ds.action_spec, metadata=ds.writer_metadata())
    with pytest.raises(DatasetError, match=r"'taken-v0' already exist.*nothing was written"):
        split(ds, [0.5, 0.5], ["first", "taken"])
    assert len(Dataset.load("pendulum")) == 4 and not (root / "first-v0").exists()
    assert [len(part) for part in split(ds, [0.5, 0.5], ["first", "taken"], overwrite=True)] == [2, 2]


def test_an_existing_name_is_refused_unless_overwrite(recorded, root):
    first = recorded("pendulum", 1, num_envs=1, max_episode_steps=10)
    with pytest.raises(DatasetError, match=r"already exists.*--overwrite \(overwrite=True\)"):  # (from Python too)
        recorded("pendulum", 2, num_envs=1, max_episode_steps=10)
    assert len(Dataset.load("pendulum")) == 1
    replaced = Dataset.create("pendulum", [first[0], first[0]], first.observation_spec, first.action_spec, overwrite=True)
    assert len(replaced) == 2
    assert sorted(p.name for p in root.iterdir()) == ["pendulum-v0"]  # no temp or old directories left


class _Failing:
    """A controller that raises ``error`` on its ``calls``-th action."""

    def __init__(self, env, calls: int, error: BaseException) -> None:
        self.random, self.calls, self.error = RandomController(env), calls, error

    def act(self, obs):
        self.calls -= 1
        if self.calls == 0:
            raise self.error
        return self.random.act(obs)

    def reset(self, mask=None):
        pass


@pytest.mark.parametrize("error", [KeyboardInterrupt(), RuntimeError("controller broke")])
def test_an_interrupted_recording_keeps_every_completed_episode(root, error):
    with sims.make_env("pendulum", num_envs=1, num_threads=1, max_episode_steps=10) as env:
        failing = _Failing(env, calls=25, error=error)  # dies in episode 3
        with pytest.raises(RuntimeError) if isinstance(error, RuntimeError) else contextlib.nullcontext():
            with DatasetWriter("cut", env.observation_spec, env.action_spec, root=root, keep_partial=True) as writer:
                stats = record(failing, env, writer, episodes=10, progress=False)
                assert stats.interrupted and stats.episodes == 2
    ds = Dataset.load("cut")
    assert len(ds) == 2 and all(len(e) == 10 for e in ds)
    assert [p.name for p in root.iterdir()] == ["cut-v0"]


@pytest.mark.parametrize("error", [KeyboardInterrupt(), RuntimeError("controller broke")])
def test_an_interrupted_recording_replaces_no_dataset(root, error):
    """--overwrite replaces a dataset with a complete recording: one stopped by Ctrl+C at 2 of 10 episodes had
    replaced a whole dataset of 4 with its 2. It is saved beside it, as the name's next version."""
    with sims.make_env("pendulum", num_envs=1, num_threads=1, max_episode_steps=10) as env:
        with DatasetWriter("keep", env.observation_spec, env.action_spec, root=root, keep_partial=True) as writer:
            record(RandomController(env), env, writer, episodes=4, progress=False)
        failing = _Failing(env, calls=25, error=error)
        with pytest.raises(RuntimeError) if isinstance(error, RuntimeError) else contextlib.nullcontext():
            with pytest.warns(UserWarning, match=r"dataset 'keep-v0' is kept: this recording stopped before its end, "
                                                 r"so its 2 episode\(s\) do not replace it .*saved as 'keep-v1'"):
                with DatasetWriter("keep", env.observation_spec, env.action_spec, root=root, overwrite=True,
                                   keep_partial=True) as writer:
                    record(failing, env, writer, episodes=10, progress=False)
    assert (len(Dataset.load("keep-v0", root)), len(Dataset.load("keep-v1", root))) == (4, 2)


def test_a_recording_interrupted_before_any_episode_leaves_nothing(root):
    with sims.make_env("pendulum", num_envs=1, num_threads=1, max_episode_steps=10) as env:
        with pytest.raises(RuntimeError), DatasetWriter("none", env.observation_spec, env.action_spec, root=root,
                                                         keep_partial=True) as writer:
            record(_Failing(env, calls=5, error=RuntimeError("early")), env, writer, episodes=3, progress=False)
    assert list(root.iterdir()) == []


def test_bad_names_and_missing_datasets_are_one_line_errors(root):
    with pytest.raises(DatasetError, match="bad dataset name") as err:
        Dataset.load("a/b c")
    assert "\n" not in str(err.value)
    with pytest.raises(DatasetError, match="no dataset 'nope'.*robolearn dataset list"):
        Dataset.load("nope")
    with pytest.raises(DatasetError, match="make_maze_datasets.py --layouts medium"):  # a maze a generator makes
        Dataset.load("point_maze_medium-navigate")
    with pytest.raises(DatasetError) as err:  # a misspelt layout: the generator's command for the layout meant,
        Dataset.load("point_maze_medum-navigate")  # not one for the typo, which would crash
    assert "did you mean 'point_maze_medium-navigate'? make that one with" in str(err.value)
    assert "--layouts medium`" in str(err.value) and "--layouts medum" not in str(err.value)
    assert "--name point_maze_medum-navigate" in str(err.value)  # (or it is one's own name, to record)
    with pytest.raises(DatasetError) as err:  # a layout nothing is near: recorded, as any name of one's own
        Dataset.load("point_maze_zigzag-navigate")
    assert "make_maze_datasets" not in str(err.value) and "robolearn dataset record" in str(err.value)


def test_a_misspelt_name_suggests_the_dataset_that_is_there(recorded):
    recorded("pendulum", 1, name="pendulum-swing", num_envs=1, max_episode_steps=5)
    with pytest.raises(DatasetError, match="did you mean 'pendulum-swing-v0'"):
        Dataset.load("pendulum-swnig")
    with pytest.raises(DatasetError) as err:  # another dataset of the same kind is no typo of it
        Dataset.load("arm-swing")
    assert "did you mean" not in str(err.value) and "robolearn.data.env_metadata" in str(err.value)


def test_a_corrupt_dataset_file_is_a_one_line_error(recorded, capsys):
    ds = recorded("pendulum", 1, num_envs=1, max_episode_steps=10)
    data = ds.path / "data" / "main_data.hdf5"
    data.write_bytes(data.read_bytes()[:2000])
    with pytest.raises(DatasetError, match="main_data|unreadable dataset") as err:
        list(Dataset.load("pendulum"))
    assert "\n" not in str(err.value)
    recorded("cartpole", 1, num_envs=1, max_episode_steps=10)
    assert cli(["dataset", "list"]) == 0  # the broken one is pointed out; the good one still listed
    listed = capsys.readouterr().out
    assert re.search(r"pendulum-v0 +UNREADABLE: .*unreadable dataset", listed)
    assert re.search(r"cartpole-v0 +cartpole +1 episodes", listed)


def test_a_damaged_group_or_a_size_beyond_memory_is_a_one_line_error(recorded):
    """h5py raises RuntimeError ("Link iteration failed") reading an episode whose group's heap is damaged, and
    numpy MemoryError for an array a file claims is 10^11 rows long: both had been tracebacks from training."""
    import h5py

    ds = recorded("pendulum", 1, num_envs=1, max_episode_steps=5)
    data = ds.path / "data" / "main_data.hdf5"
    original = data.read_bytes()
    damaged = bytearray(original)
    heaps = [at for at in range(len(damaged) - 4) if damaged[at:at + 4] == b"HEAP"]  # groups' local heaps
    for at in heaps[1:]:  # all but the root group's: the file opens, its episodes do not
        damaged[at + 16:at + 24] = (10**6).to_bytes(8, "little")  # the free list's offset, past the heap
    data.write_bytes(bytes(damaged))
    with pytest.raises(DatasetError, match="unreadable dataset .truncated or corrupt: .*bad heap free list"):
        Dataset.load("pendulum").transitions()

    data.write_bytes(original)
    with h5py.File(data, "r+") as f:
        group = f["episode_0/observations"]
        del group["policy"]
        group.create_dataset("policy", shape=(10**11, 3), dtype=np.float32, chunks=True)
    with pytest.raises(DatasetError, match="an array in the dataset is larger than this machine's memory holds"):
        Dataset.load("pendulum").transitions()


def test_metadata_minari_only_asserts_is_said_by_key(recorded):
    """A metadata.json without its action space had been "unreadable dataset (truncated or corrupt:
    AssertionError)", naming no key."""
    ds = recorded("pendulum", 1, num_envs=1, max_episode_steps=5)
    path = ds.path / "data" / "metadata.json"
    meta = json.loads(path.read_text())
    del meta["action_space"]
    path.write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match=re.escape("metadata.json: no 'action_space' (nor an 'env_spec' to build "
                                                     "it from): the dataset's spaces are unknown")):
        list(Dataset.load("pendulum"))


@pytest.mark.parametrize("key, text, said", [
    ("action_space", '{"type": "Bogus"}', "metadata.json: 'action_space' is not a space Minari can read"),
    ("observation_space", "not json", "metadata.json: 'observation_space' is not a space Minari can read"),
    ("observation_space", json.dumps({"type": "Box", "dtype": "float32", "shape": [3], "low": [0, 0, 0],
                                      "high": [1, 1, 1]}),  # the file stores a Dict's groups
     "main_data.hdf5: its episodes are not laid out as metadata.json's observation_space and action_space say"),
])
def test_spaces_that_are_no_space_or_not_the_files_are_said(recorded, key, text, said):
    """Such metadata had been "unreadable dataset (truncated or corrupt: ...)" saying "AssertionError", "missing 1
    required positional argument: 'space_dict'" or "Expecting value": naming neither the key nor the file."""
    ds = recorded("pendulum", 1, num_envs=1, max_episode_steps=5)
    path = ds.path / "data" / "metadata.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: text}))
    with pytest.raises(DatasetError, match=re.escape(said)):
        list(Dataset.load("pendulum"))


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")  # Minari's nags for author, description...
@pytest.mark.parametrize("space, observations, said", [
    (spaces.Dict({"policy": spaces.Box(-1, 1, (3,)), "x": spaces.Dict({"y": spaces.Box(-1, 1, (2,))})}),
     {"policy": np.zeros((5, 3), np.float32), "x": {"y": np.zeros((5, 2), np.float32)}}, "observation_space group 'x' is Dict"),
    (spaces.Discrete(4), np.zeros(5, np.int64), "observation_space is Discrete(4)"),
])
def test_a_minari_observation_space_that_is_no_box_is_said(root, monkeypatch, capsys, space, observations, said):
    """Minari's own datasets may hold nested Dicts or Discrete observations: a nested Dict had been a TypeError in
    `dataset info` and "'observations/x' has shape ()" in training, a Discrete one read as scalars."""
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    buffer = EpisodeBuffer(observations=observations, actions=np.zeros((4, 1), np.float32), rewards=np.ones(4),
                           terminations=np.r_[np.zeros(3, bool), True], truncations=np.zeros(4, bool))
    minari.create_dataset_from_buffers("other-v0", [buffer], observation_space=space,
                                       action_space=spaces.Box(-1, 1, (1,), np.float32))
    with pytest.raises(DatasetError, match=re.escape(said) + ".*robolearn reads a Box, or a Dict of Boxes"):
        Dataset.load("other").transitions()
    assert cli(["dataset", "info", "other"]) == 2
    assert said in capsys.readouterr().err
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(root))  # (`list` reads robolearn's root, here Minari's own)
    assert cli(["dataset", "list"]) == 0
    assert "other-v0" in (listed := capsys.readouterr().out) and f"other-v0{' ' * 24} UNREADABLE: " in listed


@pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None)")  # Minari's nags for author, description...
@pytest.mark.parametrize("space, actions", [(spaces.Discrete(3), np.array([0, 1, 2, 1])),
                                            (spaces.MultiDiscrete([3, 2]), np.array([[0, 1], [2, 0], [1, 1], [0, 0]]))])
def test_a_minari_action_space_that_is_not_continuous_is_refused_as_on_import(root, monkeypatch, capsys, space,
                                                                                actions):
    """Imports refuse discrete actions, but a Minari dataset read in place had a Discrete action space taken: its
    action indices trained as one continuous action (float32, shape (4,)) and `dataset info` said "actions: []".
    It is refused with the import's words, naming the file and the key."""
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    buffer = EpisodeBuffer(observations=np.zeros((5, 3), np.float32), actions=actions, rewards=np.ones(4),
                           terminations=np.r_[np.zeros(3, bool), True], truncations=np.zeros(4, bool))
    minari.create_dataset_from_buffers("other-v0", [buffer], observation_space=spaces.Box(-1, 1, (3,), np.float32),
                                       action_space=space)
    said = (f"metadata.json: action_space is {space}: actions of dtype int64: robolearn's agents act in continuous "
            "(floating-point) action spaces; discrete actions are not supported")
    with pytest.raises(DatasetError, match=re.escape(said)):
        Dataset.load("other").transitions()
    assert cli(["dataset", "info", "other"]) == 2
    assert said in capsys.readouterr().err
    assert cli(["dataset", "list"]) == 0
    assert "other-v0" in (listed := capsys.readouterr().out) and f"UNREADABLE: {root}" in listed and said in listed


@pytest.mark.parametrize("damage, said", [
    (lambda meta: meta.update(robolearn=[1, 2]), "'robolearn' is a list, not a mapping"),
    (lambda meta: meta["robolearn"].update(task={"a": 1}), "'robolearn.task' is {'a': 1}, not a task name"),
    (lambda meta: meta.update(observation_space="{bad"), "'observation_space' is not a space Minari can read"),
], ids=["robolearn-list", "task-mapping", "space-text"])
def test_a_damaged_metadata_json_is_one_unreadable_line_of_dataset_list(recorded, root, capsys, damage, said):
    """A metadata.json from elsewhere: its 'robolearn' a list, its task a mapping or a space that is not JSON
    had stopped `dataset list` (and `info`) in a TypeError or JSONDecodeError traceback, hiding the others."""
    import json

    recorded("pendulum", 1, name="other")
    recorded("pendulum", 1, name="fine")
    file = root / "other-v0" / "data" / "metadata.json"
    meta = json.loads(file.read_text())
    damage(meta)
    file.write_text(json.dumps(meta))
    assert cli(["dataset", "list"]) == 0
    listed = capsys.readouterr().out
    assert f"other-v0{' ' * 24} UNREADABLE: {file}: {said}" in listed and re.search(r"fine-v0 +pendulum", listed)
    assert cli(["dataset", "info", "other"]) == 2
    assert said in capsys.readouterr().err


def test_export_and_replay_refuse_episodes_a_dataset_written_elsewhere_holds_as_objects(recorded, root, tmp_path,
                                                                                       capsys):
    """Training checks every episode it reads, but `dataset export` had written a Minari file's variable-length
    (object) rewards into the D4RL file as they were, and `dataset replay` had failed in numpy's words."""
    import h5py

    recorded("pendulum", 1, name="other")
    with h5py.File(root / "other-v0" / "data" / "main_data.hdf5", "a") as f:
        rows = len(f["episode_0/rewards"])
        del f["episode_0/rewards"]
        f.create_dataset("episode_0/rewards", (rows,), dtype=h5py.vlen_dtype(np.float32))
    said = f"{root / 'other-v0'}: episode 0: 'rewards' has dtype object, expected numbers"
    for argv in (["export", "other", "--format", "d4rl", "--out", str(tmp_path / "out.hdf5")],
                 ["export", "other", "--format", "lerobot", "--out", str(tmp_path / "out_lerobot"), "--fps", "50"],
                 ["replay", "other", "--episode", "0"]):
        assert cli(["dataset", *argv]) == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "out.hdf5").exists() and not (tmp_path / "out_lerobot").exists()


def test_ctrl_c_during_a_write_waits_for_the_write_to_finish():
    import os
    import signal

    from robolearn.data.minari_store import interrupts_deferred

    finished = False
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        finished = True
    assert finished


def test_datasets_and_exports_get_the_usual_permissions(recorded, tmp_path):
    """Written aside (mkdtemp, mkstemp) and renamed: they had kept 0700 / 0600, unreadable on a shared root."""
    import os

    old = os.umask(0o022)
    try:
        ds = recorded("pendulum", 1, num_envs=1, max_episode_steps=5)
        assert cli(["dataset", "export", "pendulum", "--out", str(tmp_path / "p.hdf5")]) == 0
    finally:
        os.umask(old)
    assert ds.path.stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "p.hdf5").stat().st_mode & 0o777 == 0o644


def test_an_episodes_flags_and_numbers_beyond_float32_are_refused():
    """Terminations of 2 (Minari data written elsewhere) had read as True; 1e39 in float64 had passed, then
    become inf where training reads float32, failing later as a NaN loss."""
    from robolearn.data.episode import Episode

    def episode(**changes):
        arrays = dict(observations={"policy": np.zeros((4, 3))}, actions=np.zeros((3, 1)), rewards=np.zeros(3),
                      terminations=np.zeros(3), truncations=np.array([0.0, 0.0, 1.0]))
        return Episode(**(arrays | changes))

    episode().check("ep")
    with pytest.raises(DatasetError, match=r"ep: 'terminations' holds 2.0 at row 1: its flags are 0 or 1"):
        episode(terminations=np.array([0.0, 2.0, 0.0])).check("ep")
    huge = np.zeros((4, 3))
    huge[2, 1] = 1e39
    with pytest.raises(DatasetError, match=r"ep: 'observations/policy' holds 1e\+39 at row 2, beyond float32's range"):
        episode(observations={"policy": huge}).check("ep")
    with pytest.raises(DatasetError, match=r"'rewards' holds -1e\+39 at row 0"):
        episode(rewards=np.array([-1e39, 0.0, 0.0])).check("ep")

    episode(infos={"label": np.array(["a", "b", "c"])}).check("ep")  # text infos are data, not refused


def test_text_infos_are_stored_as_utf8(tmp_path):
    """A recording's text metrics (numpy dtype <U) had crashed the writer inside h5py."""
    from gymnasium import spaces

    from robolearn.data.episode import Episode

    spec, actions = {"policy": spaces.Box(-np.inf, np.inf, (3,), np.float32)}, spaces.Box(-1, 1, (1,), np.float32)
    episode = Episode(observations={"policy": np.zeros((4, 3), np.float32)}, actions=np.zeros((3, 1), np.float32),
                      rewards=np.zeros(3, np.float32), terminations=np.zeros(3, bool),
                      truncations=np.array([False, False, True]), infos={"label": np.array(["é", "b", "c"])})
    with DatasetWriter("texts", spec, actions, root=tmp_path) as writer:
        writer.add(episode)
    assert Dataset.load("texts", root=tmp_path).episodes[0].infos["label"].tolist() == ["é".encode(), b"b", b"c"]


@pytest.mark.parametrize("fractions", [[float("nan")], [0.5, float("nan")], [float("inf")]])
def test_a_split_fraction_that_is_not_a_number_is_refused_as_one(fractions, recorded):
    # nan had passed the check (nan <= 0 is False), printed numpy's "invalid value encountered in cast" and then
    # said a part would be empty: "use larger fractions"
    ds = recorded("pendulum", 2, num_envs=1, max_episode_steps=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DatasetError, match=r"must be positive and sum to at most 1"):
            split(ds, fractions)


def test_metadata_counts_that_are_no_counts_or_beyond_memory_are_said_by_file_and_key(recorded):
    """A dataset's metadata.json may come from anywhere: total_steps sizes the arrays transitions() fills, and
    10**13 had been numpy's MemoryError (a traceback), 'abc' int()'s "invalid literal", neither naming the file."""
    ds = recorded("pendulum", 2, num_envs=1, max_episode_steps=10)
    where = str(ds.path / "data" / "metadata.json")
    for key, claimed, says in (("total_steps", "abc", "'abc', not a count"), ("total_steps", -5, "-5, not a count"),
                               ("total_episodes", 2.5, "2.5, not a count"), ("total_episodes", None, "missing")):
        original = ds.raw_metadata[key]
        if claimed is None:
            del ds.raw_metadata[key]
        else:
            ds.raw_metadata[key] = claimed
        with pytest.raises(DatasetError, match=re.escape(f"{where}: '{key}' {says}")):
            ds.transitions()
        ds.raw_metadata[key] = original
    ds.raw_metadata["total_steps"] = 10**15
    with pytest.raises(DatasetError, match=re.escape(f"{where}: 'total_steps' says {10**15:,} steps, more than")):
        ds.transitions()


def test_random_controller_given_an_action_space_says_to_pass_the_env():
    """RandomController(env.action_spec) had raised a raw AttributeError: 'Box' object has no attribute 'num_envs'."""
    with pytest.raises(TypeError, match=r"^RandomController\(env\) takes the VecEnv it acts in .*got a Box, which has "
                                        r"no num_envs, device, action_spec: pass the env itself, not its action_spec"):
        RandomController(spaces.Box(-1.0, 1.0, (2,), np.float32))
