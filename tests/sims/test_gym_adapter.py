"""Gymnasium adapters both ways, and a round trip through both."""

import sys

import numpy as np
import pytest
import torch
import gymnasium
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from sims import make_env
from sims.adapters.gymnasium import GymVecEnv, VecEnvAsGymVector


def test_gym_env_as_vec_env() -> None:
    with make_env("gym:Pendulum-v1", num_envs=3, seed=0) as env:
        assert isinstance(env, GymVecEnv)
        assert env.control_dt == pytest.approx(0.05) and env.max_episode_steps == 200
        assert env.observation_spec["policy"].shape == (3,) and env.action_spec.shape == (1,)
        obs = env.reset(seed=0)
        assert obs["policy"].shape == (3, 3) and obs["policy"].dtype == torch.float32
        for t in range(200):
            step = env.step(torch.full((3, 1), 5.0))  # clipped to the 2 N m limit
        assert step.truncated.all() and not step.terminated.any()
        final, fresh = step.info["final_obs"]["policy"], step.obs["policy"]
        assert not torch.allclose(final, fresh) and torch.isfinite(final).all()


def test_a_gym_env_takes_actions_as_our_envs_do() -> None:
    """numpy actions had raised AttributeError ('detach'), and a wrong batch "zip() argument 2 is shorter"."""
    with make_env("gym:Pendulum-v1", num_envs=2, seed=0) as env, make_env("gym:Pendulum-v1", num_envs=2, seed=0) as same:
        env.reset(seed=0), same.reset(seed=0)
        torch.testing.assert_close(env.step(np.ones((2, 1), np.float32)).obs["policy"],
                                   same.step(torch.ones(2, 1)).obs["policy"])
        env.step(torch.nn.Linear(3, 1)(env.step(torch.zeros(2, 1)).obs["policy"]))  # an action with a graph
        with pytest.raises(ValueError, match=r"action: expected shape \(2, 1\) \(num_envs, \*action_spec.shape\), got \(3, 1\)"):
            env.step(torch.zeros(3, 1))
        with pytest.raises(ValueError, match=r"action: NaN or inf in world\(s\) \[1\]"):
            env.step(torch.tensor([[0.0], [float("nan")]]))


def test_next_step_vector_envs_are_refused() -> None:
    import gymnasium

    vec = SyncVectorEnv([lambda: gymnasium.make("Pendulum-v1")], autoreset_mode=AutoresetMode.NEXT_STEP)
    with pytest.raises(ValueError, match="SAME_STEP"):
        GymVecEnv(vec)


def test_our_env_as_gymnasium_vector_env() -> None:
    vec = VecEnvAsGymVector(make_env("pendulum", num_envs=4, seed=0, max_episode_steps=5))
    assert vec.single_observation_space.shape == (3,) and vec.action_space.shape == (4, 1)
    obs, _ = vec.reset(seed=0)
    assert isinstance(obs, np.ndarray) and obs.shape == (4, 3)
    for _ in range(5):
        obs, reward, terminated, truncated, info = vec.step(vec.action_space.sample())
    assert reward.shape == (4,) and truncated.all() and not terminated.any()
    assert info["_final_obs"].all() and info["final_obs"].dtype == object
    assert not np.allclose(np.stack(info["final_obs"]), obs)
    assert info["success"].shape == (4,)
    vec.close()


def test_round_trip_preserves_the_env() -> None:
    """ours -> Gymnasium vector -> ours steps exactly like ours."""
    direct = make_env("hopper", num_envs=4, seed=0)
    round_trip = GymVecEnv(VecEnvAsGymVector(make_env("hopper", num_envs=4, seed=0)), max_episode_steps=1000)
    assert round_trip.control_dt == pytest.approx(direct.control_dt)  # read back from metadata["render_fps"]
    torch.testing.assert_close(direct.reset(seed=3)["policy"], round_trip.reset(seed=3)["policy"])
    generator = torch.Generator().manual_seed(0)
    for _ in range(60):
        action = torch.rand(4, 3, generator=generator) * 2 - 1
        a, b = direct.step(action), round_trip.step(action)
        torch.testing.assert_close(a.obs["policy"], b.obs["policy"])
        torch.testing.assert_close(a.info["final_obs"]["policy"], b.info["final_obs"]["policy"])
        torch.testing.assert_close(a.reward, b.reward)
        assert torch.equal(a.terminated, b.terminated) and torch.equal(a.truncated, b.truncated)
    direct.close()
    round_trip.close()


@pytest.mark.parametrize("task, kwargs, message", [
    ("gym:NoSuchEnv-v0", {}, r"gym:NoSuchEnv-v0: Environment `NoSuchEnv` doesn't exist"),
    ("gym:CartPole-v1", {}, r"only Box \(continuous\) observation and action spaces are supported.*Discrete\(2\)"),
    ("gym:Pendulum-v1", {"gravit": 5}, r"gym:Pendulum-v1: .*unexpected keyword argument 'gravit'.*check env.kwargs"),
    ("gym:dm_control/cartpole-swingup-v0", {},
     r"\(installing it would not help yet: dm_control through shimmy does not run on MuJoCo 4; README"),
])
def test_gym_envs_that_cannot_train_here_are_one_line_errors(task, kwargs, message):
    """Each had been a traceback from Gymnasium or the adapter."""
    with pytest.raises(ValueError, match=message):
        make_env(task, num_envs=1, **kwargs)


def test_a_gym_setting_of_the_wrong_type_is_named_when_the_env_is_built():
    """env.kwargs.g=abc reached Pendulum unchecked and ended the first rollout in a TypeError traceback. It is
    named as the caller gave it: a config's key where a config's env is built, make_env's keyword from Python."""
    from robolearn.config import EnvConfig
    from robolearn.registry import make_env as make_config_env

    with pytest.raises(ValueError, match=r"gym:Pendulum-v1: env.kwargs.g='abc' \(its default: 10.0\) failed in the "
                                         r"env's first step, where Gymnasium said: TypeError: unsupported operand"):
        make_config_env(EnvConfig(task="gym:Pendulum-v1", num_envs=2, kwargs={"g": "abc"}))
    with pytest.raises(ValueError, match=r"gym:Pendulum-v1: g='abc' \(its default: 10.0\) failed"):
        make_env("gym:Pendulum-v1", num_envs=2, g="abc")
    make_env("gym:Pendulum-v1", num_envs=2, g=9.81).close()  # a right one builds


def test_a_gym_setting_refused_leaves_no_env_open(monkeypatch):
    """The refusal of a setting of the wrong type had left the vector env's envs, built before the probe, open."""
    from gymnasium.envs.classic_control.pendulum import PendulumEnv

    opened, closed, init = [], [], PendulumEnv.__init__
    monkeypatch.setattr(PendulumEnv, "__init__", lambda self, *a, **k: (opened.append(self), init(self, *a, **k))[1])
    monkeypatch.setattr(PendulumEnv, "close", lambda self: closed.append(self))
    with pytest.raises(ValueError, match="g='abc'"):
        make_env("gym:Pendulum-v1", num_envs=2, g="abc")
    assert len(opened) == 3 and set(map(id, closed)) == set(map(id, opened))  # (the spare one too)


@pytest.mark.parametrize("space, limit, said", [
    ("dict", 10, "the observation space is a Dict"), ("discrete", 10, "discrete space"),
    ("box", None, "no time limit")])
def test_every_refusal_of_a_gym_env_closes_its_envs(space, limit, said):
    """The refusals of the env's spaces and time limit had left the vector env built for them open."""
    closed = []

    class Refused(gymnasium.Env):
        observation_space = {"dict": spaces.Dict({"a": spaces.Box(-1, 1, (3,))})}.get(space, spaces.Box(-1, 1, (3,)))
        action_space = spaces.Box(-1, 1, (2,), dtype=np.int64 if space == "discrete" else np.float32)

        def close(self) -> None:
            closed.append(self)

    with pytest.raises(ValueError, match=said):
        GymVecEnv(Refused, 2, max_episode_steps=limit)
    assert len(closed) == 2


def test_a_dict_observation_space_is_told_to_be_flattened():
    """A goal env's Dict observation (continuous Boxes) had been told "our agents act in continuous spaces"."""
    import gymnasium
    from gymnasium import spaces

    from sims.adapters.gymnasium import GymVecEnv

    class Goals(gymnasium.Env):
        observation_space = spaces.Dict({"observation": spaces.Box(-1, 1, (3,)), "desired_goal": spaces.Box(-1, 1, (2,))})
        action_space = spaces.Box(-1, 1, (2,))

    with pytest.raises(ValueError, match=r"the observation space is a Dict, and our agents read one Box: flatten it "
                                         r"with gymnasium.wrappers.FlattenObservation"):
        GymVecEnv(Goals, 1, max_episode_steps=10)


def test_a_frame_keeps_its_proportions_when_fitted_to_the_size_asked():
    """Pendulum-v1's 500 x 500 frame squeezed to 320 x 240 had drawn its rod a third longer lying than standing."""
    from sims.adapters.gymnasium import _resize

    square = np.zeros((500, 500, 3), np.uint8)
    square[:, :, 0] = 9  # the frame's background
    square[200:300, 200:300] = 255  # a white square in the middle
    fitted = _resize(square, 240, 320)
    rows, cols = np.nonzero(fitted[..., 1] == 255)
    assert fitted.shape == (240, 320, 3)
    assert rows.max() - rows.min() == cols.max() - cols.min() == 47  # still a square (100 px at 240/500)
    assert (fitted[:, :40, 0] == 9).all() and (fitted[:, -40:, 0] == 9).all()  # the sides: its background


def test_max_episode_steps_is_the_limit_the_episodes_keep() -> None:
    """env.kwargs.max_episode_steps had only been reported: Pendulum-v1 told 50 and truncated at 200."""
    import gymnasium

    from sims.adapters.gymnasium import GymVecEnv

    for env in (make_env("gym:Pendulum-v1", num_envs=2, seed=0, max_episode_steps=5),
                GymVecEnv(lambda: gymnasium.make("Pendulum-v1").unwrapped, 2, max_episode_steps=5)):  # no limit of its own
        assert env.max_episode_steps == 5
        env.reset(seed=0)
        ends = [bool(env.step(torch.zeros(2, 1)).truncated.all()) for _ in range(10)]
        assert ends == [False] * 4 + [True] + [False] * 4 + [True]
        env.close()


def test_video_recorders_play_our_envs_in_real_time() -> None:
    """metadata had no render_fps: Gymnasium's and SB3's video recorders took 30, so hopper (125 steps a
    second) played four times slower than it moved; and a round trip through Gymnasium had lost its control_dt."""
    from sims.adapters.stable_baselines3 import VecEnvAsSB3

    env = make_env("hopper", num_envs=1)
    assert env.control_dt == pytest.approx(0.008)
    assert VecEnvAsGymVector(env).metadata["render_fps"] == pytest.approx(125)
    assert VecEnvAsGymVector.metadata.get("render_fps") is None  # the instance's, not the class's: envs differ
    assert VecEnvAsSB3(env).metadata["render_fps"] == pytest.approx(125)
    env.close()


def test_a_list_of_seeds_is_refused_in_words() -> None:
    """Gymnasium's VectorEnv.reset takes one seed per env; ours had failed in torch: 'manual_seed expected a long'."""
    vec = VecEnvAsGymVector(make_env("pendulum", num_envs=2))
    with pytest.raises(ValueError, match=r"one int seeds the whole batch; got a list of 2 \(pass seed=3"):
        vec.reset(seed=[3, 4])
    assert vec.reset(seed=[None, None])[0].shape == (2, 3)  # no seeds: as seed=None
    vec.close()


def test_an_env_that_takes_no_render_mode_trains_without_frames() -> None:
    """Every gym: env was made with render_mode='rgb_array': one whose constructor takes none (an env of one's
    own) had been refused, its TypeError read as a wrong env.kwargs."""
    import gymnasium
    from gymnasium import spaces

    class NoRender(gymnasium.Env):
        observation_space, action_space = spaces.Box(-1, 1, (2,)), spaces.Box(-1, 1, (1,))
        metadata = {"render_modes": [], "render_fps": 10}

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(2, np.float32), {}

        def step(self, action):
            return np.zeros(2, np.float32), -float(action[0] ** 2), False, False, {}

    gymnasium.register("RobolearnTestNoRender-v0", entry_point=NoRender, max_episode_steps=3)
    try:
        with make_env("gym:RobolearnTestNoRender-v0", num_envs=2) as env:
            env.reset(seed=0)
            assert env.step(torch.full((2, 1), 0.5)).reward.tolist() == [-0.25, -0.25]
            with pytest.raises(NotImplementedError, match="renders no frames"):
                env.render()
    finally:
        del gymnasium.registry["RobolearnTestNoRender-v0"]


SCALAR_ENV = '''
import gymnasium as gym
import sys

import numpy as np


class Scalar(gym.Env):
    """Observes one number and takes one, each as a Box of shape ()."""

    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(), dtype=np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, shape=(), dtype=np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.float32(0.0), {}

    def step(self, action):
        self.t += 1
        assert np.shape(action) == (), action  # the env's own scalar, not our vector of one
        return np.float32(self.t / 10), float(action), self.t >= 3, False, {}


gym.register("Scalar-v0", entry_point=Scalar, max_episode_steps=10)
'''


def test_a_module_named_in_a_gym_id_is_found_in_the_current_directory_and_scalars_are_vectors(tmp_path, monkeypatch):
    """gym:my_envs:Scalar-v0 had found my_envs only under `python -m robolearn` (a traceback under the robolearn
    script), a scalar observation had failed deep in PPO (IndexError in flatten_obs), and a scalar action had been
    refused ("expects a flat action_spec, got shape ()")."""
    (tmp_path / "scalar_envs_of_mine.py").write_text(SCALAR_ENV)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    env = make_env("gym:scalar_envs_of_mine:Scalar-v0", 2, seed=0)
    assert env.observation_spec["policy"].shape == (1,) and env.reset()["policy"].shape == (2, 1)
    assert env.action_spec.shape == (1,)
    step = env.step(torch.full((2, 1), 0.5))
    assert step.obs["policy"].shape == step.info["final_obs"]["policy"].shape == (2, 1)
    assert step.reward.tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match=r"gym:no_such_module_here:X-v0: no module 'no_such_module_here' on the "
                                         r"Python path or in "):
        make_env("gym:no_such_module_here:X-v0", 1)


def test_an_integer_action_box_is_refused_not_truncated() -> None:
    """A Box of integers had been accepted: our float actions reached the env cast toward zero (2.9 -> 2, -0.9 -> 0)."""
    class IntegerActions(gymnasium.Env):
        observation_space = spaces.Box(-1, 1, (1,), np.float32)
        action_space = spaces.Box(-3, 3, (1,), np.int64)
        metadata = {"render_fps": 10}

        def reset(self, seed=None, options=None):
            return np.zeros(1, np.float32), {}

        def step(self, action):
            return np.zeros(1, np.float32), 0.0, False, False, {}

    with pytest.raises(ValueError, match=r"a Box of int64 values: a discrete space.*truncated"):
        GymVecEnv(IntegerActions, 1, max_episode_steps=10)


def test_observations_are_not_the_buffer_a_no_copy_vector_env_reuses() -> None:
    """A ready VectorEnv made with copy=False returns one buffer each step: the observations handed out had been
    views of it, so the next step rewrote the last one and every stored transition's obs was its next_obs."""
    class Clock(gymnasium.Env):
        observation_space = spaces.Box(0, 100, (1,), np.float32)
        action_space = spaces.Box(-1, 1, (1,), np.float32)
        metadata = {"render_fps": 10}

        def reset(self, seed=None, options=None):
            self.t = 0
            return np.zeros(1, np.float32), {}

        def step(self, action):
            self.t += 1
            return np.full(1, self.t, np.float32), 0.0, False, self.t >= 3, {}

    vec = SyncVectorEnv([Clock, Clock], autoreset_mode=AutoresetMode.SAME_STEP, copy=False)
    env = GymVecEnv(vec, max_episode_steps=3)
    seen = [env.reset(seed=0)["policy"]]
    for _ in range(3):
        step = env.step(torch.zeros(2, 1))
        seen.append(step.obs["policy"])
    assert [float(obs[0, 0]) for obs in seen] == [0.0, 1.0, 2.0, 0.0]  # (each had read 0.0: the last step's reset)
    assert step.truncated.all() and step.info["final_obs"]["policy"][:, 0].tolist() == [3.0, 3.0]
