"""Evaluation counts each env's first episode: its return, length and whether it ended in success."""

import numpy as np
import pytest
import torch
from gymnasium import spaces

from robolearn.evaluate import NonFiniteError, evaluate
from robolearn.interfaces import Step, VecEnv, all_finite
from sims import make_env


class Lanes(VecEnv):
    """Env i's episodes last ``i + 2`` steps; reward 1 a step; an episode succeeds when its last action is > 0
    (``info["success"]`` says so every step, as tasks do: true mid-episode counts for nothing)."""

    def __init__(self, num_envs: int = 4) -> None:
        self.num_envs, self.device, self.control_dt, self.max_episode_steps = num_envs, torch.device("cpu"), 0.1, 99
        self.observation_spec = {"policy": spaces.Box(-np.inf, np.inf, (1,), np.float32)}
        self.action_spec = spaces.Box(-1, 1, (1,), np.float32)
        self.horizon = torch.arange(num_envs) + 2
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.episode = torch.zeros(num_envs, dtype=torch.long)

    def _obs(self):
        return {"policy": self.episode.float().unsqueeze(1)}

    def reset(self, seed=None):
        self.t.zero_(), self.episode.zero_()
        return self._obs()

    def step(self, action):
        self.t += 1
        truncated = self.t >= self.horizon
        success = action[:, 0] > 0
        self.t[truncated] = 0
        self.episode += truncated.long()
        return Step(self._obs(), torch.ones(self.num_envs), torch.zeros_like(truncated), truncated,
                    {"final_obs": self._obs(), "success": success})


class Pattern:
    """Acts ``signs[i]`` in env i during its first episode and the opposite after it."""

    def __init__(self, *signs: float) -> None:
        self.signs = torch.tensor(signs)

    def act(self, obs):
        first = obs["policy"][:, 0] == 0
        return torch.where(first, self.signs, -self.signs).unsqueeze(1)

    def reset(self, mask=None):
        pass


def test_success_is_each_envs_first_episode_ending_in_success():
    assert evaluate(Pattern(1, 1, 1, 1), Lanes(), 4)["success_rate"] == 1.0
    assert evaluate(Pattern(-1, -1, -1, -1), Lanes(), 4)["success_rate"] == 0.0
    result = evaluate(Pattern(1, -1, 1, 1), Lanes(), 4)
    assert result["success_rate"] == 0.75  # env 1 failed its first episode, whatever it did after
    assert result["return_mean"] == pytest.approx(np.mean([2, 3, 4, 5])) and result["length_mean"] == 3.5
    assert evaluate(Pattern(1, -1, -1, -1), Lanes(), 2)["success_rate"] == 0.5  # the first `episodes` envs


def test_episodes_and_env_of_another_kind_are_refused_by_name(tmp_path):
    """evaluate(c, env, 1.5) and load_controller(run, env="cartpole") had been raw TypeError and AttributeError."""
    from robolearn.runs import load_controller

    with make_env("pendulum", 2, seed=0) as env:
        for episodes in (1.5, "2", True):
            with pytest.raises(ValueError, match=r"evaluate at least 1 episode, a whole number \(got"):
                evaluate(lambda obs: torch.zeros(2, 1), env, episodes)
    with pytest.raises(ValueError, match=r"env: a VecEnv \(robolearn.make_env\(cfg\), sims.make_env\(task, n\)\) or "
                                         r"None; got str 'cartpole'"):
        load_controller(tmp_path, env="cartpole")


class NoReset:
    def act(self, obs):
        return torch.zeros(2, 1)


class NumpyActions:
    def act(self, obs):
        return np.zeros((2, 1), np.float32)

    def reset(self, mask=None):
        pass


def test_a_controller_of_ones_own_without_the_calling_convention_is_told_what_it_lacks(tmp_path):
    """A function, a class without reset, and an act returning numpy had failed deep in the loop as "'function' object
    has no attribute 'reset'" and "'numpy.ndarray' object has no attribute 'to'", in evaluate, record and run alike."""
    from robolearn.data import DatasetWriter, record
    from robolearn.runtime import run

    with make_env("pendulum", 2, seed=0) as env:
        writer = lambda: DatasetWriter("x", env.observation_spec, env.action_spec, root=tmp_path, overwrite=True)
        callers = {"evaluate": lambda c: evaluate(c, env, 2), "record": lambda c: record(c, env, writer(), 1, progress=False),
                   "run": lambda c: run(c, env, steps=2, rate_hz=0, close_env=False)}
        for who, call in callers.items():
            with pytest.raises(TypeError, match=who + r".*: the controller must have act\(obs\) and reset\(mask=None\) "
                                                  r"\(a robolearn.Controller.*; function has no act or reset"):
                call(lambda obs: torch.zeros(2, 1))
            with pytest.raises(TypeError, match="; NoReset has no reset"):
                call(NoReset())
            with pytest.raises(TypeError, match=r"NumpyActions.act returned a ndarray; it must return a torch tensor of "
                                                r"shape \(num_envs, \*action_spec.shape\)"):
                call(NumpyActions())


class NaNRewardLanes(Lanes):
    """Lanes whose env 3 is paid NaN at step 3, in its first episode (a task's reward term that divides by zero)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps == 4:
            reward = reward.clone().index_fill_(0, torch.tensor([3]), float("nan"))
        return Step(obs, reward, terminated, truncated, info)


def test_a_nan_reward_stops_the_evaluation_naming_the_env_and_step():
    """It had been summed into the return: 'return nan ± nan', and eval.json's return_mean a NaN that strict
    JSON readers refuse."""
    with pytest.raises(NonFiniteError, match=r"^reward contains NaN or inf \(env 3 of 4\) at step 3 of the evaluation "
                                             r"\(counted from 0\): the env produced it"):
        evaluate(Pattern(1, 1, 1, 1), NaNRewardLanes(), 4)


@pytest.mark.parametrize("values, finite", [
    ([1.0, float("nan")], False),
    ([float("inf"), -float("inf")], False),  # the sum is NaN
    ([1.0, float("inf")], False),
    ([3e38, 3e38], True),  # the float32 sum overflows: looked at value by value
    ([0.0, -1.0], True),
])
def test_all_finite_reads_the_sum_and_falls_back_on_an_overflow(values, finite):
    assert all_finite(torch.tensor(values, dtype=torch.float32)) is finite
    assert all_finite(torch.tensor(values, dtype=torch.float64)) is finite


def test_a_setting_is_compared_as_json_gives_it_back_and_skipped_where_json_would_not():
    """Tuples read back from controller.json as lists, so both are one value; an array, a tensor, a mapping
    keyed by numbers (read back keyed by strings) or a NaN (equal to nothing) would differ at every
    comparison: not recorded or compared (None)."""
    from robolearn.evaluate import plain_setting

    assert plain_setting(((-1.0, 1), (0.0, 0.0))) == [[-1.0, 1], [0.0, 0.0]] == plain_setting([[-1.0, 1.0], [0, 0]])
    assert plain_setting({"feet_air_time": 0.0, "ranges": ("a", [True])}) == {"feet_air_time": 0.0, "ranges": ["a", [True]]}
    assert plain_setting(()) == [] and plain_setting({}) == {} and plain_setting(0.5) == 0.5
    for skipped in (np.zeros(2), torch.zeros(2), {1: 0.5}, [0.5, None], None, float("nan"), [float("nan")], len):
        assert plain_setting(skipped) is None, skipped


def test_an_envs_fixed_delays_are_found_under_wrappers_and_a_mapping_delay_refuses_is_kept_as_written():
    """env_delay finds a sims.delay.DelayedEnv under wrappers of one's own (what evaluation compares a
    controller's recorded env.delay with); off_defaults keeps a mapping the dataclass refuses (a hand-edited
    controller.json's) as its plain settings rather than dropping it."""
    import warnings

    from robolearn.evaluate import env_delay, off_defaults, warn_if_trained_elsewhere
    from sims.delay import Delay
    from sims.randomization import Randomization

    class Wrapped(VecEnv):  # a wrapper of one's own: .env, and the wrapped env's settings
        def __init__(self, env):
            self.env, self.num_envs, self.control_dt = env, env.num_envs, env.control_dt

        def reset(self, seed=None):
            return self.env.reset(seed)

        def step(self, action):
            return self.env.step(action)

    delayed = make_env("arm_reach", 1, seed=0, delay={"obs_delay_steps": 2})
    assert env_delay(Wrapped(Wrapped(delayed))) == {"obs_delay_steps": 2}
    assert env_delay(Wrapped(make_env("arm_reach", 1, seed=0))) == {} and env_delay(Lanes()) is None

    class FromFile(Pattern):
        meta = {"delay": {}}  # trained under none (an export that recorded it)

    with pytest.warns(UserWarning, match="trained under env.delay none, the env has obs_delay_steps=2"):
        warn_if_trained_elsewhere(FromFile(), delayed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_trained_elsewhere(FromFile(), make_env("arm_reach", 1, seed=0))
    assert off_defaults(Delay, {"obs_delay_steps": -1}) == {"obs_delay_steps": -1}
    assert off_defaults(Randomization, {"mass_scale": [2.0, 1.0], "auto": None}) == {"mass_scale": [2.0, 1.0]}
