"""TaskEnv: the VecEnv contract on every task (shapes, resets, final_obs, time limits, seeding)."""

import math
from pathlib import Path

import pytest
import torch

from robolearn.interfaces import VecEnv
from sims import TASKS, make_env


def _random_actions(env: VecEnv, generator: torch.Generator) -> torch.Tensor:
    low, high = (torch.as_tensor(b) for b in (env.action_spec.low, env.action_spec.high))
    return low + (high - low) * torch.rand(env.num_envs, *env.action_spec.shape, generator=generator)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_step_matches_the_specs(name: str) -> None:
    with make_env(name, num_envs=4, seed=0) as env:
        obs = env.reset(seed=0)
        assert set(obs) == set(env.observation_spec)
        generator = torch.Generator().manual_seed(0)
        for _ in range(5):
            obs, reward, terminated, truncated, info = env.step(_random_actions(env, generator))
            for group, space in env.observation_spec.items():
                assert obs[group].shape == (4, *space.shape) and obs[group].dtype == torch.float32
                assert info["final_obs"][group].shape == obs[group].shape
            assert reward.shape == (4,) and torch.isfinite(reward).all()
            assert terminated.dtype == truncated.dtype == torch.bool
            assert info["log"] and all(math.isfinite(float(v)) for v in info["log"].values())
        assert env.control_dt == pytest.approx(env.task.frame_skip * env.sim.model.opt.timestep)


# Per task: (qpos, qvel) of a world at its goal, then of one away from it (upright and still; hanging or
# spinning; the fingertip, at 0.21 m along x with both arm angles 0, on the target or 20 cm from it)
AT_GOAL_AND_NOT = {
    "pendulum": ([[0.0], [math.pi]], [[0.0], [0.0]]),
    "cartpole": ([[0.0, 0.05], [0.0, 0.05]], [[0.0, 0.0], [0.0, 3.0]]),
    "reacher": ([[0.0, 0.0, 0.21, 0.0], [0.0, 0.0, 0.0, 0.2]], [[0.0] * 4, [0.0] * 4]),
}


@pytest.mark.parametrize("name", AT_GOAL_AND_NOT)
def test_success_is_reported_where_the_goal_is_reached(name: str) -> None:
    qpos, qvel = (torch.tensor(rows, dtype=torch.float64) for rows in AT_GOAL_AND_NOT[name])
    with make_env(name, num_envs=2, seed=0) as env:
        env.reset(seed=0)
        env.sim.set_state(torch.arange(2), qpos, qvel)
        step = env.step(torch.zeros(2, *env.action_spec.shape))
        assert step.info["success"].dtype == torch.bool and step.info["success"].tolist() == [True, False]


def test_truncation_at_max_episode_steps_resets_with_final_obs() -> None:
    with make_env("pendulum", num_envs=3, seed=0, max_episode_steps=7) as env:
        env.reset(seed=0)
        push = torch.full((3, 1), 2.0)
        for _ in range(6):
            step = env.step(push)
            assert not step.truncated.any()
            assert torch.equal(step.info["final_obs"]["policy"], step.obs["policy"])
        step = env.step(push)
        assert step.truncated.all() and not step.terminated.any()
        final, fresh = step.info["final_obs"]["policy"], step.obs["policy"]
        assert not torch.allclose(final, fresh), "final_obs must be the last obs of the old episode"
        assert torch.all(fresh[:, 0] < -0.99), "the new episode starts hanging down (cos ~ -1)"
        assert not env.step(push).truncated.any(), "the step counter restarts"


def test_auto_reset_only_touches_finished_envs() -> None:
    with make_env("hopper", num_envs=16, seed=0) as env:
        generator = torch.Generator().manual_seed(0)
        for _ in range(200):
            step = env.step(_random_actions(env, generator) * 3.0)  # clipped to [-1, 1]
            done = step.terminated | step.truncated
            if done.any() and not done.all():
                break
        else:
            pytest.fail("no step with some envs terminated and others running")
        final, obs = step.info["final_obs"]["policy"], step.obs["policy"]
        assert torch.equal(final[~done], obs[~done])
        assert not torch.isclose(final[done], obs[done]).all(1).any()
        # A fresh hopper stands at qpos0 (+-5e-3 noise): height 1.25, small velocities.
        assert torch.allclose(obs[done, 0], torch.tensor(1.25), atol=6e-3)
        assert torch.all(env.sim.ctrl.abs() <= 1.0)


def test_reset_with_seed_is_reproducible() -> None:
    with make_env("half_cheetah", num_envs=4) as a, make_env("half_cheetah", num_envs=4) as b:
        first = a.reset(seed=7)["policy"]
        assert torch.equal(first, b.reset(seed=7)["policy"])
        assert not torch.equal(first, a.reset(seed=8)["policy"])
        assert torch.equal(first, a.reset(seed=7)["policy"])
        action = torch.full((4, 6), 0.5)
        assert torch.equal(a.step(action).obs["policy"], b.step(action).obs["policy"])


def test_reacher_targets_lie_in_the_disc() -> None:
    with make_env("reacher", num_envs=256, seed=0) as env:
        target = env.reset(seed=0)["policy"][:, 4:6]
        assert torch.all(target.norm(dim=1) < 0.2)


def test_unknown_task_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="half_cheetah"):
        make_env("half-cheetah", num_envs=1)


def test_bad_actions_are_refused_before_the_physics_steps() -> None:
    """A wrong shape or a NaN is one clear error, not a broadcast failure deep inside or a world
    MuJoCo quietly resets mid-episode; numpy and lists are accepted."""
    with make_env("hopper", num_envs=2, seed=0) as env:
        before = env.get_state()["qpos"].clone()
        for bad in (torch.zeros(3), torch.zeros(1, 3), torch.zeros(2, 4)):
            with pytest.raises(ValueError, match=r"action: expected shape \(2, 3\)"):
                env.step(bad)
        nan = torch.zeros(2, 3)
        nan[1, 0] = float("nan")
        with pytest.raises(ValueError, match=r"NaN or inf in world\(s\) \[1\]"):
            env.step(nan)
        assert torch.equal(env.get_state()["qpos"], before)  # nothing stepped
        assert env.step([[0.0, 0.0, 0.0]] * 2).reward.shape == (2,)
        assert env.step(torch.zeros(2, 3).numpy()).reward.shape == (2,)


@pytest.mark.parametrize("key", ["frame_skip", "max_episode_steps"])
def test_a_task_of_no_physics_steps_or_no_control_steps_is_refused_by_key(key: str) -> None:
    with pytest.raises(ValueError, match=rf"^{key}: must be a whole number of at least 1, got 0"):
        make_env("pendulum", num_envs=1, **{key: 0})


@pytest.mark.parametrize("num_envs", [0, 2.5, True, "4", 2**31])
def test_what_is_no_number_of_worlds_is_refused_in_our_words(num_envs):
    """0 had been MuJoCo's 'nsim must be positive', 2.5 and 2**31 (above a C int) a pybind constructor signature."""
    with pytest.raises(ValueError, match=rf"num_envs: a whole number of worlds, from 1 to 2147483647 .*; got {num_envs!r}"):
        make_env("cartpole", num_envs=num_envs)


@pytest.mark.parametrize("num_threads", [-1, 2.5, "2", True])
def test_what_is_no_number_of_threads_is_refused_in_our_words(num_threads):
    """-1 had run on all the cores unsaid, 2.5 failed as MuJoCo's constructor signatures, '2' as a TypeError of '<'
    (env.num_threads is checked by the config; sims.make_env's argument was not)."""
    with pytest.raises(ValueError, match=rf"^num_threads: a whole number of physics threads, 0 or None for all the "
                                         rf"cores \(env.num_threads\); got {num_threads!r}$"):
        make_env("cartpole", 2, num_threads=num_threads)
    assert make_env("cartpole", 2, num_threads=0).sim._batch is not None  # 0: all the cores, as the config's


def test_a_seed_or_task_of_another_kind_is_refused_by_name():
    """A seed of 'a' or 1.5 had been torch's "manual_seed expected a long"; a task object an AttributeError."""
    for seed in ("a", 1.5, True):
        with pytest.raises(ValueError, match=r"seed: a whole number, or None; got"):
            make_env("cartpole", 1, seed=seed)
    with pytest.raises(ValueError, match=r"task: a name \(ant, .*module:Class, gym:<id>, mjlab:<id>\); got Pendulum"):
        make_env(TASKS["pendulum"](), 1)


def test_a_path_for_a_task_is_told_what_to_pass_instead(tmp_path):
    """make_env(result.run_dir, 4) (a Path, as train's result gives it) had been told only that a task is a name;
    a run directory is robolearn.make_env's, a task's file is named by its module and class."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("{}")
    with pytest.raises(ValueError, match=rf"^task: '{run}' is a run directory: robolearn.make_env\('{run}', num_envs"):
        make_env(run, 4)
    for task in (Path("tasks/my_task.py"), "tasks/my_task.py"):
        with pytest.raises(ValueError, match=r"is named by its module and class, 'my_task:<its Task class>'"):
            make_env(task, 4)
    with pytest.raises(ValueError, match=r"^task: '.*' is a path: sims.make_env takes a task's name \(ant, .*\), "
                                         r"robolearn.make_env a run's$"):
        make_env(tmp_path, 4)


def test_a_seed_too_large_for_torchs_generators_is_refused_in_words():
    """A 128-bit seed (np.random.SeedSequence().entropy) had failed as "Overflow when unpacking long long", from
    make_env and from env.reset alike; one in 64 bits still seeds."""
    for seed in (2**64, -2**63 - 1, 2**127 + 5):
        with pytest.raises(ValueError, match=rf"seed: {seed} does not fit torch's 64-bit generators; give one in "
                                             r"\[0, 2\*\*32 - 1\]"):
            make_env("cartpole", 1, seed=seed)
    env = make_env("cartpole", 1, seed=2**63 - 1)
    with pytest.raises(ValueError, match="does not fit torch's 64-bit generators"):
        env.reset(seed=2**64)
    with pytest.raises(ValueError, match=r"seed: a whole number, or None; got '4'"):
        env.reset(seed="4")
    torch.testing.assert_close(env.reset(seed=-1)["policy"], env.reset(seed=-1)["policy"])


def test_a_numpy_integer_seed_seeds_like_the_same_int():
    """make_env took a numpy integer seed (np.arange's, rng.integers') as a whole number and then failed in torch's
    generator with "an integer is required"; env.reset(seed=np.int64(...)) too, and a gym: env read it as a list."""
    import numpy as np

    for task, settings in (("pendulum", {}), ("pendulum", {"randomization": {"mass_scale": [0.8, 1.2]}}),
                           ("gym:Pendulum-v1", {})):
        with make_env(task, 2, seed=np.int64(3), **settings) as a, make_env(task, 2, seed=3, **settings) as b:
            assert torch.equal(a.reset(seed=np.int64(5))["policy"], b.reset(seed=5)["policy"])


def test_a_pendulum_upright_but_turning_fast_is_no_success() -> None:
    """Success needs the rod slower than 1 rad/s as well as within 18 degrees of upright: spinning through the
    top is not balancing."""
    qpos = torch.tensor([[0.05], [0.05]], dtype=torch.float64)
    qvel = torch.tensor([[0.5], [3.0]], dtype=torch.float64)
    with make_env("pendulum", num_envs=2, seed=0) as env:
        env.reset(seed=0)
        env.sim.set_state(torch.arange(2), qpos, qvel)
        step = env.step(torch.zeros(2, 1))
        assert step.info["success"].tolist() == [True, False]


@pytest.mark.parametrize("name", ["pendulum", "cartpole"])
def test_swing_up_tasks_start_hanging_down_with_small_noise(name: str) -> None:
    """The pole or rod starts at angle pi (hanging), every state entry within U(-0.1, 0.1) of the rest state:
    an upright start would hand the controller the goal."""
    with make_env(name, num_envs=64, seed=0) as env:
        env.reset(seed=0)
        qpos, qvel = env.sim.qpos.double(), env.sim.qvel.double()
    angle = qpos[:, -1]  # pendulum: its one joint; cartpole: the pole hinge after the cart's slider
    assert ((angle - math.pi).abs() <= 0.1 + 1e-6).all()
    rest = qpos.clone()
    rest[:, -1] -= math.pi
    assert (rest.abs() <= 0.1 + 1e-6).all() and (qvel.abs() <= 0.1 + 1e-6).all()
    assert rest.std(0).min() > 0.03 and qvel.std(0).min() > 0.03  # noise drawn for every entry, per world


def test_cartpole_reward_is_upright_times_centered_times_small_control_times_small_velocity() -> None:
    """The swing-up term of the task docstring, with g(z) = 0.1^(z^2): upright = (1 + cos angle) / 2, centered =
    (1 + g(x / 2)) / 2, small_control = (4 + max(0, 1 - a^2)) / 5, small_velocity = (1 + g(angular velocity / 5)) / 2."""
    qpos = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, math.pi / 2]], dtype=torch.float64)
    qvel = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 5.0]], dtype=torch.float64)
    with make_env("cartpole", num_envs=3, seed=0) as env:
        env.sim.set_state(torch.arange(3), qpos, qvel)
        terms = env.task.rewards(env.sim, torch.tensor([[0.0], [0.0], [0.5]]))
    assert list(terms) == ["swingup"]
    expected = [1.0, (1 + 0.1 ** 0.25) / 2, 0.5 * 1.0 * (4 + 0.75) / 5 * (1 + 0.1) / 2]
    assert terms["swingup"].tolist() == pytest.approx(expected, rel=1e-5)


def test_pendulum_reward_wraps_the_angle_and_charges_normalized_effort() -> None:
    """``upright`` reads the angle wrapped to [-pi, pi]: a rod upright after a full turn (2 pi) is paid as upright,
    not (1 - 2^2) = -3; 3 pi / 2 is a quarter turn from upright, as -pi / 2 is. ``effort`` = -0.01 (torque / 2 N m)^2."""
    qpos = torch.tensor([[2 * math.pi], [-math.pi / 2], [3 * math.pi / 2]], dtype=torch.float64)
    qvel = torch.tensor([[0.0], [0.0], [5.0]], dtype=torch.float64)
    with make_env("pendulum", num_envs=3, seed=0) as env:
        env.sim.set_state(torch.arange(3), qpos, qvel)
        terms = env.task.rewards(env.sim, torch.tensor([[2.0], [1.0], [0.0]]))
    assert terms["upright"].tolist() == pytest.approx([1.0, 0.75, 0.75 * (1 + 0.1) / 2], rel=1e-5)
    assert terms["effort"].tolist() == pytest.approx([-0.01, -0.0025, 0.0], abs=1e-8)


class Still(VecEnv):
    """A VecEnv of one's own, with a close of its own that does not mark the env closed."""

    num_envs, device, control_dt, max_episode_steps = 1, torch.device("cpu"), 0.1, 10

    def reset(self, seed=None):
        return {"policy": torch.zeros(1, 1)}

    def step(self, action):
        zeros = torch.zeros(1, dtype=torch.bool)
        return self.reset(), torch.zeros(1), zeros, zeros, {"final_obs": self.reset(), "log": {}}

    def close(self):
        self.released = True


@pytest.mark.filterwarnings("ignore:backend=warp device=cpu")
@pytest.mark.parametrize("build", [
    lambda: make_env("pendulum", 2),  # CPU MuJoCo
    lambda: make_env("pendulum", 2, device="cpu", backend="warp"),  # MuJoCo Warp on Warp's CPU device
    lambda: make_env("gym:Pendulum-v1", 2),  # the Gymnasium adapter
    lambda: make_env("pendulum", 2, randomization={"mass_scale": [0.9, 1.1]}, delay={"action_latency_steps": 1}),
    Still,
], ids=["mujoco", "warp-cpu", "gym", "wrapped", "own"])
def test_a_closed_env_refuses_step_and_reset_saying_to_make_a_new_one(build) -> None:
    """A closed CPU MuJoCo env had stepped on as if open, and a closed Gymnasium one had said 'Cannot call
    env.step() before calling env.reset()'; runtime.run closes the env it ran by default."""
    from robolearn.interfaces import EnvClosed

    with build() as env:
        env.reset(seed=0)
        env.step(torch.zeros(env.num_envs, 1))
        assert not env.closed
    assert env.closed and getattr(env, "released", True)  # (its own close ran)
    for call in (lambda: env.step(torch.zeros(env.num_envs, 1)), lambda: env.reset(seed=0)):
        with pytest.raises(EnvClosed, match=r"\.(step|reset)\(\): this env was closed; make a new one with "
                                             r"robolearn.make_env\(run\) or sims.make_env\(task, num_envs\)"):
            call()
    env.close()  # closing again is no error


@pytest.mark.parametrize("task, setting, said", [
    ("arm_reach", {"success_distance": 0.0}, r"arm_reach success_distance=0.0: must be > 0"),
    ("reacher", {"success_distance": -1.0}, r"reacher success_distance=-1.0: must be > 0"),
    ("arm_reach", {"reset_noise": -0.1}, r"arm_reach reset_noise=-0.1: must be >= 0"),
    ("kitchen", {"start_noise": -0.1}, r"kitchen start_noise=-0.1: must be >= 0"),
    ("pendulum", {"reset_noise_scale": -0.1}, r"Pendulum reset_noise_scale=-0.1: must be >= 0"),
    ("cartpole", {"reset_noise_scale": -0.1}, r"Cartpole reset_noise_scale=-0.1: must be >= 0"),
    ("hopper", {"reset_noise_scale": -0.1}, r"Hopper reset_noise_scale=-0.1: must be >= 0"),
    ("half_cheetah", {"reset_noise_scale": -0.1}, r"HalfCheetah reset_noise_scale=-0.1: must be >= 0"),
    ("ant", {"reset_noise_scale": -0.1}, r"Ant reset_noise_scale=-0.1: must be >= 0"),
    ("ant_maze_medium", {"reset_noise_scale": -0.1}, r"AntMaze reset_noise_scale=-0.1: must be >= 0"),
    ("go1_flat", {"reset_joint_noise": -0.1}, r"Go1Velocity reset_joint_noise=-0.1: must be >= 0"),
    ("go1_flat", {"reset_velocity": -0.1}, r"Go1Velocity reset_velocity=-0.1: must be >= 0"),
])
def test_a_reach_that_can_never_succeed_or_a_negative_noise_is_refused_by_name(task, setting, said):
    """As point_maze's: a success_distance of 0 or less had trained with no success ever, silently, and a negative
    noise failed at the first reset as torch's "uniform_ expects to return a [from, to) range"."""
    with pytest.raises(ValueError, match=said):
        make_env(task, num_envs=1, **setting)


@pytest.mark.parametrize("settings, from_python, from_a_config", [
    ({"max_episode_step": 5}, "max_episode_step: task 'pendulum' has no such setting (did you mean "
     "'max_episode_steps'?)", "env.kwargs.max_episode_step: task 'pendulum' has no such setting (did you mean "
     "'env.kwargs.max_episode_steps'?)"),
    ({"randomization": {"mass_scal": [0.9, 1.1]}}, "unknown key 'randomization.mass_scal' (did you mean "
     "'randomization.mass_scale'?)", "unknown key 'env.randomization.mass_scal' (did you mean "
     "'env.randomization.mass_scale'?)"),
    ({"delay": {"action": 1}}, "unknown key 'delay.action'; allowed", "unknown key 'env.delay.action'; allowed"),
    # the checks of the settings' ranges, and of the env they wrap (these had said env.randomization and env.delay)
    ({"randomization": {"mass_scale": [2.0, 1.0]}}, "randomization.mass_scale: scales multiply",
     "env.randomization.mass_scale: scales multiply"),
    ({"delay": {"obs_delay_steps": -1}}, "delay.obs_delay_steps must be >= 0", "env.delay.obs_delay_steps must be"),
    ({"randomization": {"torso_com_m": [-0.1, 0.1]}}, "randomization.torso_com_m: the task's model has no "
     "floating-base body", "env.randomization.torso_com_m: the task's model has no floating-base body"),
    ({"delay": {"obs_delay_steps": 5000}}, "delay.obs_delay_steps: a delay of 5000 control steps is not shorter",
     "env.delay.obs_delay_steps: a delay of 5000 control steps is not shorter"),
])
def test_a_wrong_setting_is_named_as_the_caller_gave_it(settings, from_python, from_a_config) -> None:
    """sims.make_env(..., max_episode_step=5) had been told of env.kwargs.max_episode_step, the config's key."""
    import robolearn
    from robolearn.config import load_config

    with pytest.raises(ValueError) as err:
        make_env("pendulum", num_envs=1, **settings)
    assert str(err.value).startswith(from_python), err.value
    section, value = next(iter(settings.items()))
    key = f"env.{section}" if section in ("randomization", "delay") else f"env.kwargs.{section}"
    with pytest.raises(ValueError) as err:
        robolearn.make_env(load_config("ppo_pendulum", {key: value}), num_envs=1)
    assert str(err.value).startswith(from_a_config), err.value
