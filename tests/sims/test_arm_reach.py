"""The Dynamixel arm reach task: kinematics, targets, observation layout."""

import mujoco
import numpy as np
import torch

import sims
from sims.tasks.arm_reach import ARM_XML, SHOULDER_HEIGHT, fingertip_position, reach_observation, sample_targets


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
