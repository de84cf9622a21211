"""The Dynamixel arm reach task: kinematics, targets, observation layout."""

import math

import mujoco
import numpy as np
import pytest
import torch

import sims
from sims.tasks.arm_reach import (ARM_XML, SHOULDER_HEIGHT, ArmReach, fingertip_position, reach_observation, reach_rewards,
                                   sample_targets)


def test_forward_kinematics_matches_mujoco():
    model = mujoco.MjModel.from_xml_path(str(ARM_XML))
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    for _ in range(20):
        data.qpos[:] = rng.uniform(model.jnt_range[:, 0], model.jnt_range[:, 1])
        mujoco.mj_kinematics(model, data)
        ours = fingertip_position(torch.tensor(data.qpos)).numpy()
        np.testing.assert_allclose(ours, data.site("fingertip").xpos, atol=1e-12)


def test_targets_lie_in_the_reachable_shell():
    targets = sample_targets(2000, torch.Generator().manual_seed(0))
    to_shoulder = targets - torch.tensor([0.0, 0.0, SHOULDER_HEIGHT], dtype=torch.float64)
    assert to_shoulder.norm(dim=1).max() <= 0.26
    assert targets[:, 2].min() >= 0.04 and targets[:, 0].min() > 0  # above the table, in front


def test_observation_and_target_follow_the_physics():
    env = sims.make_env("arm_reach", 4, seed=3)
    obs = env.reset(seed=3)
    sim = env.sim
    expected = reach_observation(sim.qpos.double(), sim.qvel.double(), sim.mocap_pos[:, 0].double())["policy"]
    torch.testing.assert_close(obs["policy"], expected)
    assert obs["policy"].shape == (4, 14)
    targets = sim.mocap_pos[:, 0].clone()
    assert len({tuple(t.tolist()) for t in targets}) == 4  # each world its own target
    goal = torch.tensor([[0.4, 0.6, -0.5, 0.3]]).repeat(4, 1)
    for _ in range(50):  # 1 s of position control
        step = env.step(goal)
    assert (sim.qpos - goal).abs().max() < 0.1  # servos track goal positions (gravity sag < 0.1 rad)
    torch.testing.assert_close(sim.mocap_pos[:, 0], targets)  # the target stays for the episode
    assert "success" in step.info and step.info["success"].dtype == torch.bool


def test_reset_places_a_new_target():
    env = sims.make_env("arm_reach", 2, seed=0)
    first = env.sim.mocap_pos[:, 0].clone()
    for _ in range(env.max_episode_steps):
        step = env.step(torch.zeros(2, 4))
    assert bool(step.truncated.all())
    assert not torch.allclose(env.sim.mocap_pos[:, 0], first)
    torch.testing.assert_close(step.info["final_obs"]["policy"][:, 8:11], first.float())


def test_reward_terms_have_the_documented_values():
    """dist = -|d|, reach = 1 - tanh(|d| / 5 cm), velocity = -0.01 |qvel|^2, smooth = -0.5 |goal change|^2, from
    the one function the simulation and the real arm share. With every joint at 0 the fingertip is at
    (0.20, 0, 0.21) m; the target here is 5 cm beyond it along x."""
    q = torch.zeros(1, 4, dtype=torch.float64)
    torch.testing.assert_close(fingertip_position(q), torch.tensor([[0.20, 0.0, 0.21]], dtype=torch.float64))
    target = torch.tensor([[0.25, 0.0, 0.21]], dtype=torch.float64)
    qvel = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    change = torch.tensor([[0.1, 0.0, 0.0, 0.0]])
    terms = {k: float(v) for k, v in reach_rewards(q, qvel, target, change, ArmReach()).items()}
    assert terms == pytest.approx({"dist": -0.05, "reach": 1 - math.tanh(1.0), "velocity": -0.01, "smooth": -0.005},
                                  rel=1e-5)


def test_goals_move_at_most_max_goal_step_and_smooth_charges_the_applied_change():
    """A goal 1 rad from the last moves 0.2 rad this step (as the robot's safety layer would let it), and the
    smooth term charges that applied 0.2 rad, -0.5 x 0.2^2 each step, not the 1 rad asked for."""
    env = sims.make_env("arm_reach", 1, seed=0)
    action = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    for goal in (0.2, 0.4):
        step = env.step(action)
        torch.testing.assert_close(env.sim.ctrl[0], torch.tensor([goal, 0.0, 0.0, 0.0], dtype=env.sim.ctrl.dtype))
        assert float(step.info["log"]["reward/smooth"]) == pytest.approx(-0.5 * 0.2**2, rel=1e-5)
