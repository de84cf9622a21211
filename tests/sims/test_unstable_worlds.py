"""A world whose physics blows up ends its episode (terminated, reward 0), on both backends and both reset paths:
not a teleport (CPU MuJoCo's autoreset) or NaN (MuJoCo Warp) handed to the learner."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import sims
from robolearn import interfaces
from robolearn.interfaces import UNSTABLE_LOG
from robolearn.runner import EpisodeStats

PUSH = math.inf  # a push no physics survives: MuJoCo resets the world, MuJoCo Warp turns it NaN


@pytest.mark.parametrize("backend, by_mask", [("mujoco", False), ("warp", False), ("warp", True)])
def test_a_world_whose_physics_blows_up_ends_its_episode_and_no_other(monkeypatch, backend, by_mask):
    if by_mask:  # the GPU's code path: resets by mask, no host reads
        monkeypatch.setattr(interfaces, "HOST_READS_FREE_ON", set())
    env = sims.make_env("half_cheetah", 4, backend=backend, device="cpu", seed=0)  # half_cheetah never terminates
    action = torch.full((4, 6), 0.3)
    for _ in range(5):
        env.step(action)
    assert not env.sim.unstable().any()
    nv = env.sim.model.nv
    env.sim.add_qvel(torch.tensor([1]), torch.full((1, nv), PUSH))
    step = env.step(action)
    assert step.terminated.tolist() == [False, True, False, False] and not step.truncated.any()
    assert step.reward[1] == 0 and (step.reward[[0, 2, 3]] != 0).all()
    assert float(step.info["log"][UNSTABLE_LOG]) == 1
    assert all(math.isfinite(float(v)) for v in step.info["log"].values())
    for name in step.obs:
        assert torch.isfinite(step.obs[name]).all() and torch.isfinite(step.info["final_obs"][name]).all()
        assert torch.equal(step.info["final_obs"][name][1], step.obs[name][1])  # its next episode's first
    assert env.episode_step[1] == 0 and (env.episode_step[[0, 2, 3]] == 6).all()
    assert env.sim.time[1] == 0 and torch.isfinite(env.sim.qvel).all()  # reset whole, from the task's start
    after = env.step(action)  # and on it goes, a world like the others
    assert not after.terminated.any() and float(after.info["log"][UNSTABLE_LOG]) == 0


@pytest.mark.parametrize("backend", ["mujoco", "warp"])
def test_the_final_state_of_a_world_that_blew_up_matches_its_final_obs(backend):
    """With ``keep_final_state`` (recordings, replays), ``final_state`` is the state ``final_obs`` was observed in:
    for a world whose physics blew up, its next episode's first, as its ``final_obs`` is. It had been the state the
    blow-up left: NaN on MuJoCo Warp (a recording then refused the episode: 'infos/state ... holds NaN or inf'), and
    MuJoCo's own reset on the CPU, which matches no observation the env returned."""
    env = sims.make_env("half_cheetah", 4, backend=backend, device="cpu", seed=0)
    env.keep_final_state = True
    action = torch.full((4, 6), 0.3)
    for _ in range(5):
        env.step(action)
    env.sim.add_qvel(torch.tensor([1]), torch.full((1, env.sim.model.nv), PUSH))
    step = env.step(action)
    assert step.terminated.tolist() == [False, True, False, False]
    now = env.get_state()  # world 1 at its next episode's first state, the others where the step left them
    for name, value in step.info["final_state"].items():
        assert torch.isfinite(value).all() and torch.equal(value, now[name]), name


def test_the_cpu_backend_names_the_worlds_mujoco_reset_once():
    env = sims.make_env("hopper", 3, seed=0)
    for _ in range(3):
        env.sim.step(torch.zeros(3, 3), 4)
    env.sim.add_qvel(torch.tensor([2]), torch.full((1, env.sim.model.nv), 1e30))  # huge, not inf: MuJoCo's limit
    env.sim.step(torch.zeros(3, 3), 4)
    assert env.sim.unstable().tolist() == [False, False, True]
    assert not env.sim.unstable().any()  # said once


def test_the_warp_backend_names_worlds_beyond_mujocos_bound_as_the_cpu_backend_does():
    """Huge but finite (beyond ``mjMAXVAL``, 1e10) is blown up on MuJoCo Warp too: CPU MuJoCo resets such a world,
    and Warp had gone on stepping it (and everything it touches in a contact) until it turned NaN, if ever."""
    env = sims.make_env("hopper", 3, backend="warp", device="cpu", seed=0)
    env.sim.add_qvel(torch.tensor([1]), torch.full((1, env.sim.model.nv), 1e9))  # large, within the bound
    env.sim.add_qvel(torch.tensor([2]), torch.full((1, env.sim.model.nv), 1e11))
    assert env.sim.unstable().tolist() == [False, False, True]


@pytest.mark.parametrize("delay", [None, 2])  # None: one call of frame_skip substeps; 2: one call per substep
def test_a_world_that_blows_up_in_the_first_substep_of_its_episode_ends_it_too(delay):
    """A world just reset (time 0) that MuJoCo resets in its first substep ends that substep at time dt, as a good
    one does: its clock alone cannot tell, and it had gone on unseen from MuJoCo's default state (in a maze, ball
    and goal both at the origin: a success, reward 0 where the step costs -1). MuJoCo's reset zeroes its controls,
    which the step had set: that says it."""
    env = sims.make_env("half_cheetah", 3, seed=0)  # every world at time 0, as after the env's own resets
    if delay is not None:
        env.actuation_delay = torch.full((3,), delay)
    env.sim.add_qvel(torch.tensor([1]), torch.full((1, env.sim.model.nv), PUSH))
    step = env.step(torch.full((3, 6), 0.3))
    assert step.terminated.tolist() == [False, True, False] and float(step.info["log"][UNSTABLE_LOG]) == 1
    assert step.reward[1] == 0


def test_a_timestep_given_per_world_is_not_taken_for_a_reset():
    env = sims.make_env("hopper", 2, seed=0)
    env.sim.set_model_field("opt.timestep", torch.tensor([0.002, 0.0005]))
    for _ in range(3):
        env.sim.step(torch.zeros(2, 3), 4)
    assert not env.sim.unstable().any()


def test_the_runner_says_it_once_a_run_with_the_count():
    stats = EpisodeStats(4, [])
    for unstable in (0.0, 2.0, 4.0):  # (a world per step summed over steps: 6 blow-ups of 4 worlds, not "6 worlds")
        stats.add(torch.zeros(4), torch.zeros(4, dtype=torch.bool), {"log": {UNSTABLE_LOG: torch.tensor(unstable)}})
    with pytest.warns(UserWarning, match=r"blew up 6 time\(s\) over the last 3 steps"):
        assert stats.metrics()[UNSTABLE_LOG] == 2.0
    stats.add(torch.zeros(4), torch.zeros(4, dtype=torch.bool), {"log": {UNSTABLE_LOG: torch.tensor(1.0)}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats.metrics()  # once a run


def test_a_go1_world_gone_nan_on_the_gpus_code_path_ends_alone_and_the_run_goes_on(monkeypatch):
    """The GPU's task and path (MuJoCo Warp, resets by mask, randomization, pushes, terrain): a NaN world is
    reset whole (its contacts, warmstart and task state too), and nothing NaN reaches the learner or the logs."""
    from robolearn.config import load_config
    from robolearn.registry import make_env

    monkeypatch.setattr(interfaces, "HOST_READS_FREE_ON", set())
    env = make_env(load_config("ppo_go1_rough", ["env.backend=warp", "env.device=cpu", "env.num_envs=4"]).env, seed=0)
    generator = torch.Generator().manual_seed(0)
    actions = [torch.rand((4, 12), generator=generator) * 2 - 1 for _ in range(7)]
    for action in actions[:3]:
        env.step(action)
    sim = env.sim
    sim.add_qvel(torch.tensor([2]), torch.full((1, sim.model.nv), math.nan))
    for t, action in enumerate(actions[3:]):
        step = env.step(action)
        assert step.terminated.tolist() == [False, False, t == 0, False]
        assert float(step.info["log"][UNSTABLE_LOG]) == (t == 0)
        assert torch.isfinite(step.reward).all() and all(math.isfinite(float(v)) for v in step.info["log"].values())
        for group in (step.obs, step.info["final_obs"]):
            assert all(torch.isfinite(value).all() for value in group.values())


def test_a_gymnasium_mujoco_env_whose_physics_blows_up_ends_its_episode_too():
    """``gym:`` MuJoCo envs: MuJoCo resets a blown-up env mid-step and Gymnasium goes on from there (measured on
    HalfCheetah-v5: reward -0.55, a teleport back to the start); the adapter ends its episode as ours do."""
    from sims.adapters.gymnasium import GymVecEnv

    env = GymVecEnv("HalfCheetah-v5", 3, seed=0)
    env.reset()
    action = torch.full((3, 6), 0.3)
    for _ in range(3):
        assert float(env.step(action).info["log"][UNSTABLE_LOG]) == 0
    env.vec.envs[1].unwrapped.data.qvel[:] = PUSH
    step = env.step(action)
    assert step.terminated.tolist() == [False, True, False] and not step.truncated.any()
    assert step.reward[1] == 0 and float(step.info["log"][UNSTABLE_LOG]) == 1
    assert torch.equal(step.info["final_obs"]["policy"][1], step.obs["policy"][1]) and torch.isfinite(step.obs["policy"]).all()
    assert env.vec.envs[1].unwrapped.data.time == 0  # reset, its next episode begun
    after = env.step(action)
    assert not after.terminated.any() and float(after.info["log"][UNSTABLE_LOG]) == 0


def test_a_gymnasium_mujoco_env_that_resets_its_state_by_hand_is_not_flagged_again_after_its_blow_up():
    """An env of one's own (or gymnasium_robotics') may reset ``qpos``/``qvel`` without ``mj_resetData``, which
    leaves MuJoCo's warning counts as they were: the adapter had taken them as 0 after its reset, and so ended
    that env's every episode after its one blow-up, at its first step, with reward 0."""
    import mujoco
    import numpy as np
    import gymnasium
    from gymnasium import spaces

    from sims.adapters.gymnasium import GymVecEnv

    xml = ("<mujoco><worldbody><body><joint name='j' type='slide' axis='1 0 0'/><geom size='.1' mass='1'/></body>"
           "</worldbody><actuator><motor joint='j' ctrlrange='-1 1'/></actuator></mujoco>")

    class Slider(gymnasium.Env):
        metadata = {"render_fps": 500}
        observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float64)
        action_space = spaces.Box(-1, 1, (1,), np.float32)

        def __init__(self):
            self.model = mujoco.MjModel.from_xml_string(xml)
            self.data = mujoco.MjData(self.model)

        def _obs(self):
            return np.concatenate([self.data.qpos, self.data.qvel])

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.data.qpos[:], self.data.qvel[:], self.data.time = 0.0, 0.0, 0.0
            mujoco.mj_forward(self.model, self.data)
            return self._obs(), {}

        def step(self, action):
            self.data.ctrl[:] = action
            mujoco.mj_step(self.model, self.data)
            return self._obs(), 1.0, False, False, {}

    env = GymVecEnv(Slider, 2, max_episode_steps=100, seed=0)
    env.reset()
    action = torch.zeros(2, 1)
    env.vec.envs[1].unwrapped.data.qvel[:] = PUSH
    step = env.step(action)
    assert step.terminated.tolist() == [False, True] and float(step.info["log"][UNSTABLE_LOG]) == 1
    for _ in range(3):
        step = env.step(action)
        assert not step.terminated.any() and step.reward.tolist() == [1.0, 1.0]
        assert float(step.info["log"][UNSTABLE_LOG]) == 0
