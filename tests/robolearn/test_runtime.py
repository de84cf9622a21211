"""The fixed-rate loop: drift-free ticks, overrun accounting, safe exits, recording."""

import re
import sys
import time
import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces

import sims
from robolearn.evaluate import NonFiniteError
from robolearn.interfaces import Step, VecEnv
from robolearn.recording import EpisodeRecorder, load_episode, unique_directory
from robolearn.runtime import LoopStats, SlowLoopWarning, Ticker, run


class Zero(torch.nn.Module):
    decision_period = 1

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width, self.resets = width, 0

    def act(self, obs):
        return torch.zeros(obs["policy"].shape[0], self.width)

    def reset(self, mask=None):
        self.resets += 1


class FakeClock:
    """A clock that moves only when slept on (and by 1 us a read, so a spin-wait ends): timing tests that
    read the wall clock failed on a loaded machine, and their wide bounds let a miscount pass."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 1e-6
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    import robolearn.runtime as runtime

    fake = FakeClock()
    monkeypatch.setattr(runtime, "time", type("FakeTime", (), {"sleep": staticmethod(fake.sleep),
                                                                "perf_counter": staticmethod(time.perf_counter)}))
    return fake


def test_ticker_is_drift_free_and_counts_overruns(clock):
    ticker = Ticker(0.01, clock)
    ticker.wait()
    assert ticker.tick == 1 and ticker.overruns == 0
    clock.sleep(0.035)  # miss three ticks: due at 0.02, 0.03 and 0.04 while busy
    ticker.wait()
    assert ticker.overruns == 3 and ticker.tick == 4  # the late tick and the two whole ones gone, skipped
    for _ in range(5):
        ticker.wait()
    assert ticker.overruns == 3 and ticker.tick == 9
    assert clock.now - ticker.start == pytest.approx(ticker.tick * 0.01, abs=1e-4)  # on the phase: no drift
    assert max(ticker.lateness) == pytest.approx(0.005, abs=1e-4)  # the one late wake-up (0.045 for 0.04)
    assert sorted(ticker.lateness)[-2] < 1e-4  # every other tick woke on time


def test_run_paces_a_sim_at_the_requested_rate(clock, monkeypatch):
    import robolearn.runtime as runtime

    monkeypatch.setattr(runtime, "Ticker", lambda period: Ticker(period, clock))
    env = sims.make_env("arm_reach", 1, seed=0)
    start = clock.now
    stats = run(Zero(4), env, rate_hz=100, steps=30)
    assert stats.steps == 30 and stats.overruns == 0 and len(stats.lateness_s) == 30  # one tick a step
    assert clock.now - start == pytest.approx(0.30, abs=1e-3)  # 30 periods of 10 ms, not more, not fewer
    summary = stats.summary()
    assert summary["rate_hz"] == 100 and summary["jitter_ms_p50"] < 0.1


class Slow(Zero):
    """Takes ``pause`` seconds to decide on the steps listed in ``slow_steps`` (all when None)."""

    def __init__(self, width, pause, slow_steps=None, sleep=time.sleep):
        super().__init__(width)
        self.pause, self.slow_steps, self.calls, self.sleep = pause, slow_steps, 0, sleep

    def act(self, obs):
        if self.slow_steps is None or self.calls in self.slow_steps:
            self.sleep(self.pause)
        self.calls += 1
        return super().act(obs)


def test_a_loop_below_its_rate_is_warned_during_the_run_once():
    env = sims.make_env("arm_reach", 1, seed=0)
    with pytest.warns(SlowLoopWarning, match=r"running below its rate: \d+ of the last 250 steps came late "
                                             r"for their 2 ms period") as caught:
        stats = run(Slow(4, 0.003), env, rate_hz=500, steps=520)  # every step overruns its 2 ms period
    mine = [w for w in caught if w.category is SlowLoopWarning]
    assert len(mine) == 1 and mine[0].filename == __file__ and stats.overruns > 250  # said at the caller's line


def test_a_loop_below_its_rate_is_warned_on_lines_of_its_own_under_the_bar(capfd):
    """deploy's warning had been written on to the end of its episode bar's line ("...?episode/s]/path: ...")."""
    env = sims.make_env("arm_reach", 1, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("always", SlowLoopWarning)
        warnings.showwarning = lambda message, *_: sys.stderr.write(f"warning: {message}\n")  # as Python's, one line
        run(Slow(4, 0.003), env, rate_hz=500, steps=260, progress="deploy")
    said = capfd.readouterr().err
    assert "\rwarning: the loop is running below its rate" in said  # the bar cleared first, then drawn again
    assert "\ndeploy:" in said or "\rdeploy:" in said.partition("warning:")[2]


def test_a_single_slow_step_is_not_warned(clock, monkeypatch):
    """On the fake clock: on the wall clock a loaded machine made other steps late too, and the test failed."""
    import robolearn.runtime as runtime

    monkeypatch.setattr(runtime, "Ticker", lambda period: Ticker(period, clock))
    env = sims.make_env("arm_reach", 1, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowLoopWarning)
        stats = run(Slow(4, 0.4, slow_steps={10}, sleep=clock.sleep), env, rate_hz=100, steps=260)  # 400 ms once: 40 periods late
    assert stats.overruns == 40  # more ticks than a tenth of the window, in one late step


def test_run_counts_episodes_and_resets_the_controller():
    env = sims.make_env("arm_reach", 1, seed=0)
    controller = Zero(4)
    stats = run(controller, env, rate_hz=0, episodes=2)
    assert stats.episodes == 2 and stats.steps == 2 * env.max_episode_steps
    assert controller.resets == stats.steps + 1  # once at start, then after every step (done mask)


def test_run_shows_a_bar_of_episodes_with_the_last_return(capsys):
    env = sims.make_env("arm_reach", 1, seed=0)
    stats = run(Zero(4), env, rate_hz=0, episodes=2, progress="deploy")
    shown = capsys.readouterr().err
    assert "deploy" in shown and "2/2" in shown and "episode" in shown
    assert f"return {stats.returns[-1]:.2f}, {stats.steps} steps" in shown
    run(Zero(4), sims.make_env("arm_reach", 1, seed=0), rate_hz=0, steps=5)
    assert capsys.readouterr().err == ""  # silent unless asked


def test_run_builds_no_autograd_graph_for_a_plain_actor():
    """A user's Actor with parameters: its actions must not drag a graph into env.step, a recorder or a robot."""
    class Linear(Zero):
        def __init__(self) -> None:
            super().__init__(4)
            self.layer = torch.nn.Linear(obs_width, 4)

        def act(self, obs):
            assert not torch.is_grad_enabled()
            return self.layer(obs["policy"])

    env = sims.make_env("arm_reach", 1, seed=0)
    obs_width = env.observation_spec["policy"].shape[0]
    assert run(Linear(), env, rate_hz=0, steps=3).steps == 3


def test_recorder_keeps_every_completed_step_when_the_loop_fails(tmp_path):
    env = sims.make_env("arm_reach", 1, seed=0)

    class Failing(Zero):
        calls = 0

        def act(self, obs):
            self.calls += 1
            if self.calls == env.max_episode_steps + 31:
                raise RuntimeError("controller crashed")
            return super().act(obs) + 0.1

    recorder = EpisodeRecorder(tmp_path, metadata={"task": "arm_reach"})
    with pytest.raises(RuntimeError, match="controller crashed"):
        run(Failing(4), env, rate_hz=0, steps=1000, sink=recorder)
    files = sorted(tmp_path.glob("episode_*.npz"))
    assert [f.name for f in files] == ["episode_00000.npz", "episode_00001.npz"]
    full, partial = load_episode(files[0]), load_episode(files[1])
    assert full["actions"].shape == (100, 4) and full["obs/policy"].shape == (101, 14)
    assert full["truncations"][-1] and not full["interrupted"]
    assert partial["actions"].shape == (30, 4) and partial["obs/policy"].shape == (31, 14)
    assert partial["interrupted"] and partial["truncations"][-1]
    assert "success" in full and "success" not in partial  # a cut-short episode has no outcome
    assert [s["success"] for s in recorder.summaries] == [bool(full["success"]), None]
    np.testing.assert_allclose(full["commanded_actions"], 0.1)
    assert not list(tmp_path.glob(".*"))  # no temp files left behind


def test_stats_passed_in_survive_a_failed_run():
    class Failing(Zero):
        calls = 0

        def act(self, obs):
            if self.calls == 7:
                raise RuntimeError("controller crashed")
            self.calls += 1
            return super().act(obs)

    stats = LoopStats()
    with pytest.raises(RuntimeError, match="controller crashed"):
        run(Failing(4), sims.make_env("arm_reach", 1, seed=0), rate_hz=0, steps=100, stats=stats)
    assert stats.steps == 7 and stats.error == "RuntimeError: controller crashed"


def test_recorders_started_together_never_share_a_folder(tmp_path):
    first = EpisodeRecorder(unique_directory(tmp_path / "20250101-120000"))
    second = EpisodeRecorder(unique_directory(tmp_path / "20250101-120000"))
    third = EpisodeRecorder(unique_directory(tmp_path / "20250101-120000"))
    assert [r.directory.name for r in (first, second, third)] == ["20250101-120000", "20250101-120000-1",
                                                                  "20250101-120000-2"]
    assert all((r.directory / "metadata.json").is_file() for r in (first, second, third))
    (first.directory / "episode_00000.npz").write_bytes(b"")  # a recording there already: not overwritten
    with pytest.raises(FileExistsError, match="holds a recording already; record into a new folder"):
        EpisodeRecorder(first.directory)


def test_run_needs_a_stopping_rule():
    with pytest.raises(ValueError, match="steps or episodes"):
        run(Zero(4), sims.make_env("arm_reach", 1), rate_hz=0)


def test_a_nan_action_stops_the_loop_before_the_env_steps():
    class NaNAfter3(Zero):
        calls = 0

        def act(self, obs):
            self.calls += 1
            action = super().act(obs)
            return action.fill_(float("nan")) if self.calls > 3 else action

    stats = LoopStats()
    with pytest.raises(NonFiniteError, match=r"action contains NaN or inf.* at step 3 of episode 0 \(both counted from 0"):
        run(NaNAfter3(4), sims.make_env("arm_reach", 1, seed=0), rate_hz=0, steps=100, stats=stats)
    assert stats.steps == 3
    later = NaNAfter3(4)
    later.calls = -102  # NaN from the run's 106th step: the 100-step first episode ended, the second's 6th
    with pytest.raises(NonFiniteError, match=r"at step 5 of episode 1 \(both counted from 0"):  # the step in its file
        run(later, sims.make_env("arm_reach", 1, seed=0), rate_hz=0, steps=200)


def test_nan_observations_are_said_as_the_envs_before_the_controller_acts():
    from sims.tasks.pendulum import Pendulum

    class Broken(Pendulum):
        def observations(self, sim):
            obs = super().observations(sim)
            return {"policy": obs["policy"] * (torch.nan if self.broken else 1.0)}

    task = Broken()
    task.broken = False
    env = sims.TaskEnv(task, sims.make_backend("mujoco", task, 1, "cpu", 1))
    task.broken = True
    with pytest.raises(NonFiniteError, match=r"^observation\['policy'\] contains NaN or inf"):
        run(Zero(1), env, rate_hz=0, steps=3)


def test_a_controller_of_ones_own_that_forgets_its_setup_is_told_what_to_set():
    from robolearn.interfaces import Controller

    class NoSize(Controller):
        def forward(self, x):
            return x

    class NoSuper(Controller):
        def __init__(self):
            self.obs_size = 3

        def forward(self, x):
            return x

    obs = {"policy": torch.zeros(2, 3)}
    with pytest.raises(TypeError, match="NoSize must set obs_size in __init__"):
        NoSize().act(obs)
    with pytest.raises(TypeError, match=r"NoSuper.__init__ must call super\(\).__init__\(\)"):
        NoSuper().act(obs)


def test_exporting_a_controller_without_obs_size_says_so(tmp_path):
    from robolearn.export import export_controller
    from robolearn.interfaces import Controller

    class NoSize(Controller):
        def forward(self, x):
            return x

    with pytest.raises(TypeError, match="NoSize must set obs_size in __init__"):
        export_controller(NoSize(), tmp_path)


def test_a_controller_exported_at_another_rate_is_warned_about():
    class FromFile(Zero):
        meta = {"control_dt": 0.01}  # as ExportedController reads from controller.json

    env = sims.make_env("arm_reach", 1, seed=0)  # 50 Hz
    with pytest.warns(UserWarning, match="trained at 100 Hz, the env steps at 50 Hz"):
        run(FromFile(4), env, rate_hz=0, steps=2)


def test_a_controller_trained_with_other_task_settings_is_warned_about():
    """An env built with the task's defaults for a run trained with env.kwargs evaluates another task."""
    from robolearn.evaluate import evaluate

    class FromFile(Zero):
        meta = {"control_dt": 0.02, "task_kwargs": {"max_episode_steps": 50, "success_distance": 0.02}}

        def act(self, obs):
            assert not torch.is_grad_enabled()  # evaluate and run act without autograd, whatever the controller
            return super().act(obs)

    env = sims.make_env("arm_reach", 2, seed=0, randomization={"mass_scale": [0.9, 1.1]})  # under a wrapper
    with pytest.warns(UserWarning, match=r"trained with task settings max_episode_steps=50, the env has "
                                         r"max_episode_steps=100: build the env as the run did \(robolearn.make_env"):
        evaluate(FromFile(4), env, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the settings it was trained with: nothing to say
        run(FromFile(4), sims.make_env("arm_reach", 1, seed=0, max_episode_steps=50), rate_hz=0, steps=2)


def test_a_controller_trained_with_other_command_ranges_is_warned_about():
    """Go1's command_ranges (tuples in the task, lists as controller.json and YAML give them back) were no
    plain setting and were skipped: a run trained to stand still evaluated on an env commanding it to walk
    passed unwarned. The same ranges as lists and as tuples are no difference."""
    still = [[-1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]

    class FromFile(Zero):
        meta = {"control_dt": 0.02, "task_kwargs": {"command_ranges": still}}  # as a run's env.kwargs recorded them

    with pytest.warns(UserWarning, match=re.escape("trained with task settings command_ranges=[[-1.0, 1.0], [0.0, 0.0], "
                                                   "[0.0, 0.0]], the env has command_ranges=[[-1.0, 1.0], [-1.0, 1.0], "
                                                   "[-1.0, 1.0]]: build the env as the run did")):
        run(FromFile(12), sims.make_env("go1_flat", 1, seed=0, num_threads=1), rate_hz=0, steps=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the ranges it was trained with, as the task's tuples: nothing to say
        run(FromFile(12), sims.make_env("go1_flat", 1, seed=0, num_threads=1,
                                        command_ranges=tuple(map(tuple, still))), rate_hz=0, steps=1)


def test_an_export_records_every_setting_so_an_env_off_the_defaults_is_warned_about(tmp_path):
    """A run left at its task's defaults records no env.kwargs: an env built with other settings had passed
    unwarned. The export records every plain setting (task_settings), and the warning names the caller's line."""
    from robolearn.config import EnvConfig
    from robolearn.evaluate import evaluate
    from robolearn.export import task_meta

    meta = task_meta(EnvConfig(task="arm_reach"), 0.02)
    assert meta["task_kwargs"] == {} and meta["task_settings"]["max_goal_step"] == 0.2
    assert meta["task_settings"]["max_episode_steps"] == 100 and meta["task_settings"]["frame_skip"] == 10
    assert task_meta(EnvConfig(task="gym:Pendulum-v1"), 0.05).get("task_settings") is None

    class FromFile(Zero):
        pass

    controller = FromFile(4)
    controller.meta = meta
    with pytest.warns(UserWarning, match=r"trained with task settings max_goal_step=0.2, the env has max_goal_step=0.1") \
            as caught:
        evaluate(controller, sims.make_env("arm_reach", 2, seed=0, max_goal_step=0.1), 2)
    assert caught[0].filename == __file__  # the caller's line, not torch's no_grad wrapper
    with pytest.warns(UserWarning, match=r"max_goal_step=0.1") as caught:
        run(controller, sims.make_env("arm_reach", 1, seed=0, max_goal_step=0.1), rate_hz=0, steps=1)
    assert caught[0].filename == __file__  # run's too


def test_an_export_records_go1s_command_ranges_and_reward_weights_so_other_ones_are_warned_about(tmp_path):
    """Go1's command_ranges (tuples) and reward_weights (a dict) were no plain settings, so task_settings left
    them out: a run left at the default ranges, its export evaluated on an env of other ranges, passed unwarned.
    Recorded as JSON gives them back (lists), the export's own task is no difference; an older controller.json
    without them says nothing of them."""
    import json

    from robolearn.config import EnvConfig
    from robolearn.export import ExportedController, export_controller, task_meta
    from robolearn.interfaces import Controller

    class Still(Controller):
        def __init__(self) -> None:
            super().__init__()
            self.obs_size = 45  # go1_flat's policy observation

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return 0.0 * obs[:, :12]

    export_controller(Still(), tmp_path, ("torchscript",), extra=task_meta(EnvConfig(task="go1_flat"), 0.02))
    controller = ExportedController(tmp_path / "controller.pt")
    settings = controller.meta["task_settings"]
    assert settings["command_ranges"] == [[-1.0, 1.0]] * 3 and settings["reward_weights"]["feet_air_time"] == 1.0

    def go1(**settings):
        return sims.make_env("go1_flat", 1, seed=0, num_threads=1, **settings)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the task it was exported from: its tuples are the lists read back
        run(controller, go1(), rate_hz=0, steps=1)
    with pytest.warns(UserWarning, match=re.escape("trained with task settings command_ranges=[[-1.0, 1.0], [-1.0, 1.0], "
                                                   "[-1.0, 1.0]], the env has command_ranges=[[-1.0, 1.0], [0.0, 0.0], "
                                                   "[0.0, 0.0]]")):
        run(controller, go1(command_ranges=((-1.0, 1.0), (0.0, 0.0), (0.0, 0.0))), rate_hz=0, steps=1)
    with pytest.warns(UserWarning, match=r'trained with task settings reward_weights=\{"tracking_lin_vel": 1.0, .*'
                                         r'"feet_air_time": 1.0\}, the env has reward_weights=\{"feet_air_time": 0.0\}'):
        run(controller, go1(reward_weights={"feet_air_time": 0.0}), rate_hz=0, steps=1)
    meta = json.loads((tmp_path / "controller.json").read_text())  # as an export from before they were recorded
    for key in ("command_ranges", "reward_weights"):
        del meta["task_settings"][key]
    (tmp_path / "controller.json").write_text(json.dumps(meta))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(ExportedController(tmp_path / "controller.pt"), go1(command_ranges=((0.0, 0.0),) * 3), rate_hz=0, steps=1)


def test_a_controller_trained_under_other_fixed_delays_is_warned_about():
    """controller.json records the run's env.delay: an env built without it (sims.make_env(task)) had evaluated a
    controller that learned to make up for observations and actions steps late, without a word. Randomization
    (evaluated nominal or randomized by choice) is no warning; neither is an older export without the key, nor
    an env not of sims' (a robot: deploy says it its own way)."""
    from robolearn.config import EnvConfig
    from robolearn.evaluate import evaluate
    from robolearn.export import task_meta

    meta = task_meta(EnvConfig(task="arm_reach", delay={"obs_delay_steps": 2},
                               randomization={"mass_scale": [0.8, 1.2]}), 0.02)
    assert (meta["delay"], meta["randomization"]) == ({"obs_delay_steps": 2}, {"mass_scale": [0.8, 1.2]})

    class FromFile(Zero):
        pass

    controller = FromFile(4)
    controller.meta = meta
    with pytest.warns(UserWarning, match=re.escape('trained under env.delay obs_delay_steps=2, the env has none: ') +
                      r".*" + re.escape('sims.make_env(task, delay={"obs_delay_steps": 2})')) as caught:
        evaluate(controller, sims.make_env("arm_reach", 2, seed=0), 2)
    assert caught[0].filename == __file__
    with pytest.warns(UserWarning, match=r"env.delay obs_delay_steps=2, the env has obs_delay_steps=1, "
                                         r"action_latency_steps=1"):
        run(controller, sims.make_env("arm_reach", 1, seed=0, delay={"obs_delay_steps": 1, "action_latency_steps": 1}),
            rate_hz=0, steps=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its own delays, under nominal dynamics; an older export; not a sim
        run(controller, sims.make_env("arm_reach", 1, seed=0, delay={"obs_delay_steps": 2, "action_latency_steps": 0}),
            rate_hz=0, steps=1)
        controller.meta = {key: value for key, value in meta.items() if key != "delay"}
        run(controller, sims.make_env("arm_reach", 1, seed=0, delay={"action_latency_steps": 3}), rate_hz=0, steps=1)
        controller = FromFile(1)
        controller.meta = {"control_dt": 0.01, "delay": {"obs_delay_steps": 2}}
        run(controller, Scripted(), rate_hz=0, steps=1)


def test_an_export_records_automatic_randomization_at_the_width_it_reached(tmp_path):
    """An auto run is evaluated at the width its training reached (a new env would restart at 0, nominal); its
    export records that width too, not the auto setting that says nothing of it."""
    from robolearn.config import EnvConfig
    from robolearn.runs import export_meta

    env = EnvConfig(task="arm_reach", randomization={"mass_scale": [0.8, 1.2], "auto": True})
    meta = export_meta(tmp_path, env, 0.02, {"env_adaptation": {"width": 0.55}, "env_steps": 100})
    assert meta["randomization"] == {"mass_scale": [0.8, 1.2], "width": 0.55} and meta["delay"] == {}
    assert export_meta(tmp_path, env, 0.02, {})["randomization"] == {"mass_scale": [0.8, 1.2], "auto": True}


def test_an_export_writes_infinite_settings_as_strict_json_and_reads_them_back_as_before(tmp_path):
    """Hopper's healthy_z_range ends at infinity, which json.dumps had written as Infinity: not JSON to jq or
    JavaScript. The export writes "inf" and reads it back as the float, and a file of an older export, with
    Infinity, reads back the same: the export's own task is no difference either way."""
    import json

    from robolearn.config import EnvConfig
    from robolearn.export import ExportedController, export_controller, task_meta
    from robolearn.interfaces import Controller

    class Still(Controller):
        def __init__(self) -> None:
            super().__init__()
            self.obs_size = 11  # hopper's policy observation

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return 0.0 * obs[:, :3]

    export_controller(Still(), tmp_path, ("torchscript",), extra=task_meta(EnvConfig(task="hopper"), 0.008))
    text = (tmp_path / "controller.json").read_text()

    def refuse(name):
        raise ValueError(f"{name} is not strict JSON")

    strict = json.loads(text, parse_constant=refuse)  # as jq or JavaScript read it
    assert strict["task_settings"]["healthy_z_range"] == [0.7, "inf"]
    old = json.dumps({**strict, "task_settings": {**strict["task_settings"], "healthy_z_range": [0.7, float("inf")]}})
    assert "Infinity" in old
    for written in (text, old):  # this export's, and an older one's
        (tmp_path / "controller.json").write_text(written)
        controller = ExportedController(tmp_path / "controller.pt")
        assert controller.meta["task_settings"]["healthy_z_range"] == [0.7, float("inf")]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the task it was exported from: nothing to say
            run(controller, sims.make_env("hopper", 1, seed=0), rate_hz=0, steps=1)


def test_an_export_records_settings_not_the_state_a_task_fills_in_when_built():
    """Reacher's body ids (init=False fields, 0 until the model is bound) were recorded as settings, so
    `eval --exported` of every reacher run warned it was trained with _fingertip=0, _target=0."""
    from robolearn.config import EnvConfig
    from robolearn.evaluate import evaluate
    from robolearn.export import task_meta

    meta = task_meta(EnvConfig(task="reacher"), 0.02)
    assert "_fingertip" not in meta["task_settings"] and meta["task_settings"]["max_episode_steps"] == 50

    class FromFile(Zero):
        pass

    controller = FromFile(2)
    controller.meta = meta
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the settings it was trained with: nothing to say
        evaluate(controller, sims.make_env("reacher", 1, seed=0), 1)


def test_a_simulated_recording_summarizes_its_episodes_and_draws_without_joint_state(tmp_path):
    """An env that reports no safety layer or goals records none; its summaries still give each episode's
    return and success, and the plot draws the actions alone."""
    from robolearn.recording_plot import plot_recording

    env = sims.make_env("arm_reach", 1, seed=0)
    recorder = EpisodeRecorder(tmp_path, metadata={"control_dt": env.control_dt})
    run(Zero(4), env, rate_hz=0, episodes=2, sink=recorder)
    first = load_episode(tmp_path / "episode_00000.npz")
    assert "goals" not in first and "safety_events" not in first
    assert [s["file"] for s in recorder.summaries] == ["episode_00000.npz", "episode_00001.npz"]
    assert recorder.summaries[0]["return"] == pytest.approx(float(first["rewards"].sum()))
    assert recorder.summaries[0]["success"] is bool(first["success"]) and recorder.summaries[0]["safety_events"] == {}
    out = plot_recording(tmp_path)
    assert out == tmp_path / "recording.png" and out.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="no episode_.*npz files"):
        plot_recording(tmp_path / "elsewhere")
    episode = tmp_path / "episode_00000.npz"  # had been told it held "no episode_*.npz files"
    with pytest.raises(ValueError, match=re.escape(f"{episode}: a file; a recording is the folder of its episodes: "
                                                   f"give {tmp_path}")):
        plot_recording(episode)
    with pytest.raises(ValueError, match=r"recording.txt': plots are PNG images; give a .png path"):
        plot_recording(tmp_path, tmp_path / "recording.txt")  # had written a PNG under that name
    assert not (tmp_path / "recording.txt").exists()


def test_kill_and_hangup_stop_as_ctrl_c_unless_ignored_and_are_given_back():
    """deploy and the dataset commands: SIGTERM and SIGHUP stop as Ctrl+C does; under `nohup` (SIGHUP ignored)
    a closed terminal goes on; `also` installs deploy's emergency stop; all are given back after."""
    import os
    import signal

    from robolearn.runtime import stops_as_ctrl_c

    pressed = []
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts a process
    try:
        with stops_as_ctrl_c(also={signal.SIGUSR1: lambda *_: pressed.append(True)}):
            os.kill(os.getpid(), signal.SIGHUP)  # ignored: nothing happens
            os.kill(os.getpid(), signal.SIGUSR1)
            with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
                os.kill(os.getpid(), signal.SIGTERM)
        assert pressed == [True]
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_stops_held_notes_stop_signals_until_the_block_ends():
    """A deploy's summary is written after the robot parked; a Ctrl+C pressed again then (a user mashing it) had
    cut the write short and lost deploy.json."""
    import os
    import signal

    from robolearn.runtime import stops_held

    before = signal.getsignal(signal.SIGINT)
    with stops_held() as held:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        written = True  # the block went on to its end
    assert written and held == [signal.SIGINT, signal.SIGTERM]
    assert signal.getsignal(signal.SIGINT) is before and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_hang_up_points_terminal_output_at_dev_null_and_leaves_files_alone(tmp_path):
    """Writes to a closed terminal raise EIO, which had cut short the save or the safe stop they reported."""
    import os
    import pty
    import subprocess
    import sys

    code = ("import os, signal, sys\n"
            "from robolearn.runtime import hung_up\n"
            "hung_up(signal.SIGTERM)\n"  # not a hang-up: nothing changes
            "assert os.isatty(1)\n"
            "hung_up(signal.SIGHUP)\n"
            "assert not os.isatty(1) and not os.isatty(2) and os.path.samefile(f'/proc/self/fd/1', os.devnull)\n"
            "open(sys.argv[1], 'w').write('ok')\n")
    leader, follower = pty.openpty()
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ok")], stdout=follower, stderr=follower,
                          timeout=60)
    os.close(leader)
    os.close(follower)
    assert done.returncode == 0 and (tmp_path / "ok").read_text() == "ok"


def test_a_recordings_safety_marks_go_on_the_joints_the_rule_overruled(tmp_path, monkeypatch):
    """A position limit of one joint had been marked on every joint's row, at goals nowhere near their limits."""
    import matplotlib.pyplot as plt

    from robolearn.recording_plot import RULE_MARKERS, plot_recording

    goals = np.zeros((3, 4), dtype=np.float32)
    goals[1, 3] = -1.9  # past j4's limit: the layer sent -1.75
    sent = goals.copy()
    sent[1, 3] = -1.75
    np.savez(tmp_path / "episode_00000.npz", actions=sent, commanded_actions=goals, goals=goals, rewards=np.zeros(3),
             safety_events=np.array(["", "position_limit", ""]), **{"obs/joint_state": np.zeros((4, 8))})
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_recording(tmp_path)
    color = RULE_MARKERS["position_limit"][1]
    marked = [sum(len(line.get_xdata()) for line in ax.get_lines() if line.get_color() == color)
              for ax in figures[0].axes[:4]]
    assert marked == [0, 0, 0, 1]
    assert "safety: position_limit" in [text.get_text() for text in figures[0].legends[0].get_texts()]


@pytest.mark.parametrize("kwargs, error, says", [
    ({"steps": -1}, ValueError, r"steps must be a whole number of at least 0 \(or None\), got -1"),  # had run nothing
    ({"steps": 2.5}, ValueError, "steps must be a whole number of at least 0 .*, got 2.5"),  # had run three
    ({"episodes": "2"}, ValueError, "episodes must be a whole number of at least 0 .*, got '2'"),
    ({"rate_hz": -5}, ValueError, r"rate_hz is ticks per second, >= 0 \(0: as fast as it can"),  # had run unpaced
    ({"seed": "1"}, ValueError, "seed must be a whole number .*, got '1'"),  # torch's 'manual_seed expected a long'
    ({"env": "runs/x"}, TypeError, r"env must be a VecEnv \(robolearn.make_env\(run\), a connected Robot\), got str"),
    ({"controller": "runs/x"}, TypeError, r"the controller must have act\(obs\) and reset\(mask=None\) .*; str has no act "
                                          "or reset"),
    ({"sink": "recording/"}, TypeError, r"sink must have add and close \(robolearn.recording.EpisodeRecorder"),
], ids=["negative", "fraction", "text", "rate", "seed", "env", "controller", "sink"])
def test_run_says_what_it_cannot_mean(kwargs, error, says):
    """Each had run (something else than asked) or failed as "'str' object has no attribute 'close'"."""
    with sims.make_env("arm_reach", 1, seed=0) as env:
        given = {"controller": Zero(4), "env": env, "rate_hz": 0, "steps": 3, **kwargs}
        with pytest.raises(error, match=says):
            run(given.pop("controller"), given.pop("env"), **given)


class Scripted(VecEnv):
    """One env whose episodes last 3 steps, paid 1, 2 and 3 (a return of 6 each); episodes 0, 2, 4... succeed."""

    def __init__(self) -> None:
        self.num_envs, self.device, self.control_dt, self.max_episode_steps = 1, torch.device("cpu"), 0.01, 3
        self.observation_spec = {"policy": spaces.Box(-np.inf, np.inf, (1,), np.float32)}
        self.action_spec = spaces.Box(-1, 1, (1,), np.float32)
        self.t = self.episode = 0

    def reset(self, seed=None):
        self.t = self.episode = 0
        return {"policy": torch.zeros(1, 1)}

    def step(self, action):
        self.t += 1
        reward, done = torch.tensor([float(self.t)]), torch.tensor([self.t == 3])
        success = torch.tensor([self.episode % 2 == 0])
        if self.t == 3:
            self.t, self.episode = 0, self.episode + 1
        obs = {"policy": torch.zeros(1, 1)}
        return Step(obs, reward, torch.zeros(1, dtype=torch.bool), done, {"final_obs": obs, "success": success})


def test_run_reports_each_episodes_own_return_and_success():
    """What a deploy's report says (return_mean, success_rate) is per episode: each return starts again at 0, and
    success is read where the episode ends."""
    stats = run(Zero(1), Scripted(), rate_hz=0, episodes=3)
    assert stats.returns == [6.0, 6.0, 6.0] and stats.successes == [True, False, True]
    summary = stats.summary()
    assert (summary["steps"], summary["episodes"]) == (9, 3)
    assert summary["return_mean"] == 6.0 and summary["success_rate"] == pytest.approx(2 / 3)


def test_a_stop_while_the_loop_winds_down_still_closes_the_env(monkeypatch):
    """A first Ctrl+C that lands after a failed loop, as its progress bar closes or its timing is kept, had skipped
    the env's close: a robot's park and torque-off, for a script that runs one without ``with robot:``."""
    import robolearn.runtime as runtime

    closed = []

    class Closing(Scripted):
        def close(self) -> None:
            closed.append(True)

    def interrupted(*args, **kwargs) -> None:
        raise KeyboardInterrupt("SIGINT")

    class Failing(Zero):
        def act(self, obs):
            raise RuntimeError("controller crashed")

    monkeypatch.setattr(runtime, "_keep_timing", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(Failing(1), Closing(), rate_hz=0, steps=10)
    assert closed == [True]
