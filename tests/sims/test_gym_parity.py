"""Our hopper, walker2d, half_cheetah, ant and reacher against Gymnasium's v5 envs.

Both start from the same state and get the same actions; the physics is
bit-identical, so observations, rewards and terminations must agree.
"""

import gymnasium
import numpy as np
import pytest
import torch

from sims import TASKS, MujocoBackend, TaskEnv


# Our reward term -> Gymnasium's info key.
GYM_TERMS = {
    "forward": "reward_forward",
    "healthy": "reward_survive",
    "ctrl": "reward_ctrl",
    "contact": "reward_contact",
    "dist": "reward_dist",
}


def _rollout(name: str, gym_id: str, steps: int, **kwargs):
    """Step our task and Gymnasium's env side by side; yield both results per step."""
    task = TASKS[name](**kwargs)
    env = TaskEnv(task, MujocoBackend(task.model(), 1, fields=task.fields, dtype=torch.float64), seed=0)
    gym_env = gymnasium.make(gym_id, **kwargs).unwrapped
    gym_obs, _ = gym_env.reset(seed=0)
    qpos, qvel = (torch.from_numpy(x.copy())[None] for x in (gym_env.data.qpos, gym_env.data.qvel))
    env.sim.set_state(torch.tensor([0]), qpos, qvel)
    np.testing.assert_array_equal(env.task.observations(env.sim)["policy"][0].numpy(), gym_obs)

    rng = np.random.default_rng(0)
    for _ in range(steps):
        action = rng.uniform(-1, 1, gym_env.action_space.shape).astype(np.float32)
        gym_step = gym_env.step(action.astype(np.float64))
        ours = env.step(torch.from_numpy(action)[None])
        yield ours, gym_step
        if gym_step[2]:
            return


@pytest.mark.parametrize(
    ("name", "gym_id", "kwargs"),
    [
        ("hopper", "Hopper-v5", {}),
        ("walker2d", "Walker2d-v5", {}),
        ("half_cheetah", "HalfCheetah-v5", {}),
        ("reacher", "Reacher-v5", {}),
        ("ant", "Ant-v5", {"include_cfrc_ext_in_observation": False, "contact_cost_weight": 0.0}),
    ],
)
def test_matches_gymnasium_v5(name: str, gym_id: str, kwargs: dict) -> None:
    for ours, (obs, reward, terminated, _, info) in _rollout(name, gym_id, 50, **kwargs):
        np.testing.assert_array_equal(ours.info["final_obs"]["policy"][0].numpy(), obs)
        # Our action arithmetic is float32, so the control cost differs by ~1e-7.
        assert ours.reward[0].item() == pytest.approx(reward, abs=1e-6)
        assert bool(ours.terminated[0]) == terminated
        # every reward term Gymnasium reports is logged (the loop below had passed an empty log)
        terms = {name: value for name, value in ours.info["log"].items() if name.startswith("reward/")}
        assert {GYM_TERMS[t.removeprefix("reward/")] for t in terms} == {key for key in info if key.startswith("reward_")}
        for term, value in terms.items():
            gym_key = GYM_TERMS[term.removeprefix("reward/")]
            assert value.item() == pytest.approx(info[gym_key], abs=1e-6), term


def test_ant_contact_forces_nearly_match_gymnasium() -> None:
    """cfrc_ext comes from the start of the last substep, not the last RK4 stage (see sims.tasks.ant)."""
    agree, total = 0, 0
    for ours, (obs, reward, terminated, _, _) in _rollout("ant", "Ant-v5", 100):
        mine = ours.info["final_obs"]["policy"][0].numpy()
        np.testing.assert_array_equal(mine[:27], obs[:27])
        agree += int(np.sum(np.abs(mine[27:] - obs[27:]) < 1e-6))
        total += obs.size - 27
        assert ours.reward[0].item() == pytest.approx(reward, abs=0.02)
        assert bool(ours.terminated[0]) == terminated
    assert agree / total > 0.9


@pytest.mark.parametrize(
    ("name", "gym_id", "qvel_normal"),
    [("hopper", "Hopper-v5", False), ("walker2d", "Walker2d-v5", False), ("half_cheetah", "HalfCheetah-v5", True),
     ("ant", "Ant-v5", True)],
)
def test_time_limit_control_dt_and_reset_noise_match_gymnasium(name: str, gym_id: str, qvel_normal: bool) -> None:
    """The rollouts above start from Gymnasium's own reset state, so they check neither our reset distribution
    nor the episode length and control period: U(-s, s) on qpos around qpos0, and U(-s, s) (hopper, walker) or
    N(0, s^2) (cheetah, ant) on qvel, s = the env's reset_noise_scale."""
    task = TASKS[name]()
    env = TaskEnv(task, MujocoBackend(task.model(), 2000, fields=task.fields, dtype=torch.float64), seed=0)
    gym_env = gymnasium.make(gym_id)
    assert env.max_episode_steps == gym_env.spec.max_episode_steps
    assert env.control_dt == pytest.approx(gym_env.unwrapped.dt)
    s = gym_env.unwrapped._reset_noise_scale
    assert task.reset_noise_scale == s
    dq = (env.sim.qpos - torch.as_tensor(gym_env.unwrapped.init_qpos)).numpy()
    assert np.abs(dq).max() <= s and np.abs(dq).max() > 0.95 * s
    np.testing.assert_allclose(dq.std(0), s / np.sqrt(3), rtol=0.1)
    qvel = env.sim.qvel.numpy()
    np.testing.assert_allclose(qvel.std(0), s if qvel_normal else s / np.sqrt(3), rtol=0.1)
    if not qvel_normal:
        assert np.abs(qvel).max() <= s
