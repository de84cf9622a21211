"""The Go1 velocity task: model, standing, observations, commands, rewards, terrain, Warp."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import torch

from sims import make_env
from sims.tasks.go1 import DEFAULT_REWARD_WEIGHTS, Go1Rough, Go1Velocity

STILL = {"reset_velocity": 0.0, "reset_joint_noise": 0.0}  # start exactly at the home pose, at rest


def test_model_has_go1_kinematics_masses_and_servos():
    model = Go1Velocity().model()
    assert (model.nq, model.nv, model.nu) == (19, 18, 12)
    assert model.body("trunk").mass[0] == pytest.approx(5.204)
    assert model.body_subtreemass[model.body("trunk").id] == pytest.approx(12.84, abs=0.1)
    assert model.opt.timestep == pytest.approx(0.004)
    assert Go1Velocity().frame_skip * model.opt.timestep == pytest.approx(0.02)
    np.testing.assert_allclose(model.actuator_gainprm[:, 0], 35.0)
    np.testing.assert_allclose(model.actuator_biasprm[:, 1:3], [[-35.0, -0.5]] * 12)
    np.testing.assert_allclose(np.abs(model.actuator_forcerange[:, 1]), [23.7, 23.7, 35.55] * 4)
    # Thigh and calf 0.213 m: the knee sits 0.213 m below the hip pitch axis.
    assert model.body("FR_calf").pos[2] == pytest.approx(-0.213)
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, model.key("home").id)
    mujoco.mj_forward(model, data)
    assert 0.27 <= data.qpos[2] <= 0.3
    soles = [data.site(f"{leg}_foot").xpos[2] - 0.023 for leg in ("FR", "FL", "RR", "RL")]
    np.testing.assert_allclose(soles, 0.0, atol=2e-3)  # the home keyframe stands on its feet


def test_projected_gravity_is_world_down_in_the_trunk_frame():
    """The task reads gravity from a sensor (no quaternion math in torch per call): it must be R^T (0, 0, -1)
    of the trunk's orientation, worked out by MuJoCo's quaternion functions, at random orientations."""
    env = make_env("go1_flat", num_envs=20, seed=0)
    rng = np.random.default_rng(0)
    quats = rng.normal(size=(20, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    qpos = env.sim.qpos.clone().double()
    qpos[:, 3:7] = torch.as_tensor(quats)
    env.sim.set_state(torch.arange(20), qpos, torch.zeros_like(env.sim.qvel).double())
    expected = []
    for q in quats:  # R^T (0, 0, -1) through MuJoCo
        inverse, out = np.zeros(4), np.zeros(3)
        mujoco.mju_negQuat(inverse, q)
        mujoco.mju_rotVecQuat(out, np.array([0.0, 0.0, -1.0]), inverse)
        expected.append(out)
    np.testing.assert_allclose(env.task._gravity(env.sim).numpy(), expected, atol=1e-6)


def test_home_pose_with_zero_actions_stands_for_two_seconds():
    env = make_env("go1_flat", num_envs=4, seed=0, **STILL)
    for _ in range(100):  # 2 s at 50 Hz
        obs, _, terminated, _, _ = env.step(torch.zeros(4, 12))
        assert not terminated.any()
    height = env.sim.qpos[:, 2]
    assert ((0.22 < height) & (height < 0.32)).all(), height
    assert (obs["critic"][:, :3][:, 2] < -0.97).all()  # projected gravity: upright within ~14 degrees
    assert (obs["critic"][:, -4:] == 1).all()  # all four feet on the ground


def test_observation_groups_shapes_noise_and_finiteness():
    env = make_env("go1_flat", num_envs=8, seed=1, noise_scale=0.0)
    obs = env.reset(seed=1)
    assert env.observation_spec["policy"].shape == (45,) and env.observation_spec["critic"].shape == (53,)
    assert obs["policy"].shape == (8, 45) and obs["critic"].shape == (8, 53)
    torch.testing.assert_close(obs["policy"], obs["critic"][:, :45])  # no noise: the critic's first 45 agree
    for _ in range(20):
        obs, *_ = env.step(torch.rand(8, 12) * 2 - 1)
        assert all(torch.isfinite(v).all() for v in obs.values())
    noisy = make_env("go1_flat", num_envs=8, seed=1).reset(seed=1)
    gap = (noisy["policy"] - noisy["critic"][:, :45]).abs()
    assert 0.6 < gap[:, 21:33].mean() < 0.9 and gap[:, 21:33].max() <= 1.5  # joint velocities: U(-1.5, 1.5)
    assert gap[:, 9:21].max() <= 0.03  # joint positions: U(-0.03, 0.03)
    assert (gap[:, 6:9] == 0).all()  # commands are not noised


def test_policy_linvel_puts_the_noised_trunk_velocity_first():
    env = make_env("go1_flat", num_envs=8, seed=1, policy_linvel=True)
    obs = env.reset(seed=1)
    assert env.observation_spec["policy"].shape == (48,) and env.observation_spec["critic"].shape == (56,)
    truth = obs["critic"][:, 48:51]  # the privileged velocity, noise-free
    torch.testing.assert_close(obs["critic"][:, :3], truth)
    gap = (obs["policy"][:, :3] - truth).abs()
    assert 0 < gap.max() <= 0.1  # U(-0.1, 0.1)


def test_action_is_a_scaled_offset_from_the_home_pose():
    env = make_env("go1_flat", num_envs=2, seed=0, **STILL)
    home = torch.as_tensor(env.sim.model.key("home").qpos[7:], dtype=torch.float32)
    env.step(torch.tensor([[1.0] * 12, [-0.2] * 12]))
    torch.testing.assert_close(env.sim.ctrl[0], home + 0.25)
    torch.testing.assert_close(env.sim.ctrl[1], home - 0.05)


def test_action_limit_widens_the_box_in_the_same_units():
    env = make_env("go1_flat", num_envs=1, seed=0, action_limit=4.0, **STILL)
    assert env.action_spec.low.min() == -4.0 and env.action_spec.high.max() == 4.0
    home = torch.as_tensor(env.sim.model.key("home").qpos[7:], dtype=torch.float32)
    env.step(torch.full((1, 12), 3.0))
    torch.testing.assert_close(env.sim.ctrl[0], home + 0.75)  # still 0.25 rad per unit
    with pytest.raises(ValueError, match="action_limit must be above 0"):
        Go1Velocity(action_limit=0.0)


def test_commands_resample_at_the_set_period_per_world():
    env = make_env("go1_flat", num_envs=16, seed=2, resample_s=0.1, standing_fraction=0.0, **STILL)
    task = env.task
    assert task.resample_steps == 5
    start = task.command.clone()
    assert (start.abs().amax(1) > 0).all()
    for step in range(1, 11):
        env.step(torch.zeros(16, 12))
        changed = (task.command != start).any(1)
        assert changed.all() if step in (5, 10) else not changed.any(), step
        start = task.command.clone()


def test_commands_hold_between_draws_and_standing_draws_are_zero():
    env = make_env("go1_flat", num_envs=64, seed=3, standing_fraction=1.0, **STILL)
    assert (env.task.command == 0).all()
    env = make_env("go1_flat", num_envs=64, seed=3, standing_fraction=0.0, resample_s=100.0, **STILL)
    start = env.task.command.clone()
    assert ((start[:, 0] >= -1) & (start[:, 0] <= 1)).all()
    planar = start[:, :2].norm(dim=1)
    assert ((planar == 0) | (planar > 0.2)).all()  # slow planar commands are zeroed
    for _ in range(20):
        _, _, terminated, truncated, _ = env.step(torch.zeros(64, 12))
        assert not (terminated | truncated).any()
    torch.testing.assert_close(env.task.command, start)


def test_reward_terms_are_logged_scaled_by_dt_and_follow_the_command():
    env = make_env("go1_flat", num_envs=4, seed=0, **STILL)
    env.task.command.zero_()
    _, reward, _, _, info = env.step(torch.zeros(4, 12))
    log = info["log"]
    expected = {f"reward/{name}" for name in [*DEFAULT_REWARD_WEIGHTS, "positive_clip"]}
    assert expected == {k for k in log if k.startswith("reward/")}
    assert "metrics/lin_vel_error" in log and "metrics/ang_vel_error" in log
    # Standing still on a zero command tracks it almost perfectly: weight 1 x dt 0.02.
    assert 0.018 < float(log["reward/tracking_lin_vel"]) <= 0.02
    assert float(log["metrics/lin_vel_error"]) < 0.1
    env.task.command[:] = torch.tensor([1.0, 0.0, 0.0])
    _, _, _, _, info = env.step(torch.zeros(4, 12))
    assert float(info["log"]["reward/tracking_lin_vel"]) < 0.4 * 0.02  # exp(-1 / 0.25) ~ 0.02
    assert float(info["log"]["metrics/lin_vel_error"]) > 0.9


def only(**weights: float) -> dict[str, float]:
    """These terms alone: the weights given replace defaults, so every other term is set to 0."""
    return {**{name: 0.0 for name in DEFAULT_REWARD_WEIGHTS}, **weights}


def test_reward_weights_choose_terms_and_unknown_names_raise():
    env = make_env("go1_flat", num_envs=2, seed=0, reward_weights=only(base_height=-10.0, termination=-5.0),
                   only_positive_rewards=False, **STILL)
    _, reward, _, _, info = env.step(torch.zeros(2, 12))
    assert sorted(k for k in info["log"] if k.startswith("reward/")) == ["reward/base_height", "reward/termination"]
    assert (reward < 0).all()  # standing below the 0.27 m target costs a little
    env = make_env("go1_flat", num_envs=2, seed=0, reward_weights=only(base_height=-10.0), **STILL)
    _, reward, _, _, info = env.step(torch.zeros(2, 12))
    assert (reward == 0).all() and float(info["log"]["reward/positive_clip"]) > 0  # lifted to 0 by default
    with pytest.raises(ValueError, match=r"^reward_weights: unknown Go1 reward term.*'tracking_lin_velocity'\] "
                                         r"\(did you mean 'tracking_lin_vel'\?\)"):
        Go1Velocity(reward_weights={"tracking_lin_velocity": 1.0})
    # sigma 0 had paid no tracking reward at all (exp(-error^2 / 0)), a negative one paid the errors, silently
    with pytest.raises(ValueError, match=r"tracking_sigma must be above 0 .*got 0.0"):
        Go1Velocity(tracking_sigma=0.0)
    with pytest.raises(ValueError, match=r"standing_fraction is the fraction of zero commands: in \[0, 1\], got 1.5"):
        Go1Velocity(standing_fraction=1.5)
    # a range written high-first had drawn commands outside it, silently
    with pytest.raises(ValueError, match=r"command_ranges: the vy range \[0.5, -0.5\] is no \[low, high\] pair"):
        Go1Velocity(command_ranges=((-1.0, 1.0), (0.5, -0.5), (-1.0, 1.0)))


def test_one_weight_given_leaves_the_other_terms_at_their_defaults():
    """As ``env.kwargs.reward_weights.feet_air_time=0`` on the command line gives it: it had dropped every other term."""
    env = make_env("go1_flat", num_envs=2, seed=0, reward_weights={"feet_air_time": 0.0}, **STILL)
    _, _, _, _, info = env.step(torch.zeros(2, 12))
    logged = {k.removeprefix("reward/") for k in info["log"] if k.startswith("reward/")} - {"positive_clip"}
    assert logged == {name for name, w in DEFAULT_REWARD_WEIGHTS.items() if w != 0.0} - {"feet_air_time"}


def test_falling_terminates_and_is_penalised():
    env = make_env("go1_flat", num_envs=2, seed=0, reward_weights=only(termination=-1.0), **STILL)
    qpos = env.sim.qpos.double()
    qpos[:, 3:7] = torch.tensor([math.cos(1.0), math.sin(1.0), 0.0, 0.0], dtype=torch.float64)  # rolled 115 deg
    env.sim.set_state(torch.arange(2), qpos, torch.zeros(2, 18, dtype=torch.float64))
    _, reward, terminated, _, _ = env.step(torch.zeros(2, 12))
    assert terminated.all()
    torch.testing.assert_close(reward, torch.full((2,), -0.02))


def test_rough_terrain_builds_and_the_torch_heights_match_mujoco():
    task = Go1Rough()
    model = task.model()
    assert model.nhfield == 1
    data = mujoco.MjData(model)
    data.qpos[0] = 100.0  # the robot out of the rays' way
    mujoco.mj_forward(model, data)
    rng = np.random.default_rng(0)
    points = rng.uniform(-4, 4, size=(200, 2))
    down, hit = np.array([0.0, 0.0, -1.0]), np.zeros(1, dtype=np.int32)
    exact = []
    for x, y in points:  # cast rays down from 1 m onto the heightfield
        exact.append(1.0 - mujoco.mj_ray(model, data, np.array([x, y, 1.0]), down, None, 1, -1, hit))
    ours = task.terrain_height(torch.as_tensor(points, dtype=torch.float32)).numpy()
    error = np.abs(ours - np.array(exact))
    assert np.array(exact).max() > 0.03  # there is terrain to stand on
    assert np.median(error) < 1e-3 and error.max() < 0.05 / 2  # bilinear vs MuJoCo's triangles, only at block edges

    env = make_env("go1_rough", num_envs=8, seed=0, **STILL)
    obs, *_ = env.step(torch.zeros(8, 12))
    assert obs["policy"].shape == (8, 45) and torch.isfinite(obs["critic"]).all()
    assert (env.sim.qpos[:, :2].abs() <= 4.0).all() and env.sim.qpos[:, :2].abs().max() > 1.0  # spawned around

    # At and past the grid's edge (10 m; a robot walks there), float32 included: the flat border, no IndexError.
    edge = torch.tensor([[10.0, 0.0], [0.0, 10.0], [10.5, -10.5], [-30.0, 2.0], [9.99999, 9.99999]])
    torch.testing.assert_close(task.terrain_height(edge), torch.zeros(5))
    # A NaN position (NaN actions step the physics on a GPU until the runner's check): NaN, no bad index.
    assert task.terrain_height(torch.tensor([[float("nan"), 0.0]])).isnan().all()


def test_model_runs_on_mujoco_warp_cpu():
    """Every feature of the rough model (a superset of the flat one: heightfield, sensors,
    position servos, frictionloss) is supported by MuJoCo Warp; slow: compiles kernels."""
    import warp as wp
    import mujoco_warp as mjw
    wp.set_device("cpu")
    model = Go1Rough().model()
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, model.key("home").id)
    data.qpos[2] += 0.06  # above the highest block
    warp_model = mjw.put_model(model)
    warp_model.opt.warn_overflow = 0  # iterations=1 always "hits" the limit, as in Playground
    warp_data = mjw.put_data(model, data, nworld=2, nconmax=64, njmax=256)
    for _ in range(50):
        mjw.step(warp_model, warp_data)
    qpos = wp.to_torch(warp_data.qpos)
    assert torch.isfinite(qpos).all()
    assert ((0.2 < qpos[:, 2]) & (qpos[:, 2] < 0.4)).all()  # standing on the terrain, not through it
    assert int(warp_data.nacon.numpy()[0]) >= 8  # feet touch the heightfield in both worlds
    assert wp.to_torch(warp_data.sensordata).shape == (2, model.nsensordata)


def test_pose_and_joint_limit_terms_read_the_joints_against_home_and_the_soft_limits():
    """mjlab's terms: the posture reward is 1 at the home pose and falls away from it; the limit penalty
    is 0 inside 90 % of each joint's range and grows with the distance past it."""
    env = make_env("go1_flat", num_envs=3, seed=0, reward_weights=only(pose=1.0, joint_limits=-1.0),
                   only_positive_rewards=False, **STILL)
    home = env.sim.qpos.double()
    qpos = home.clone()
    qpos[1, 7 + 2] += 0.3  # one knee 0.3 rad off home, still inside its soft limits
    knee_low, knee_high = env.sim.model.jnt_range[3]
    qpos[2, 7 + 2] = knee_high - 0.02  # inside the hard limit, past the soft one (5 % of the range from it)
    env.sim.set_state(torch.arange(3), qpos, torch.zeros(3, 18, dtype=torch.float64))
    task, dt = env.task, 0.02
    task.command[:] = torch.tensor([0.5, 0.0, 0.0])  # a walking command: mjlab's walking std (calf 0.6 rad)
    snapshot_terms = task.rewards(env.sim, torch.zeros(3, 12))
    pose, limits = snapshot_terms["pose"] / dt, -snapshot_terms["joint_limits"] / dt
    assert pose[0] == pytest.approx(1.0)
    assert pose[1] == pytest.approx(math.exp(-(0.3 / 0.6) ** 2 / 12), rel=1e-5)
    assert limits[0] == 0 and limits[1] == 0
    soft_high = (knee_low + knee_high) / 2 + (knee_high - knee_low) / 2 * 0.9
    assert limits[2] == pytest.approx(knee_high - 0.02 - soft_high, rel=1e-4)


def test_pose_std_is_tight_on_a_standing_command_as_mjlabs_variable_posture():
    """mjlab's Go1 posture reward uses std 0.05 (hip, thigh) / 0.1 (calf) when |(vx, vy)| + |yaw rate| < 0.05 and
    0.3 / 0.6 otherwise; the term had used the walking std on every command, so on a standing command a 0.3 rad
    knee error cost 0.02 of the term's 1 instead of mjlab's 0.53 (exp(-1/48) against exp(-0.75))."""
    env = make_env("go1_flat", num_envs=3, seed=0, reward_weights=only(pose=1.0), only_positive_rewards=False, **STILL)
    qpos = env.sim.qpos.double().clone()
    qpos[:, 7 + 2] += 0.3  # one knee 0.3 rad off home in every world
    env.sim.set_state(torch.arange(3), qpos, torch.zeros(3, 18, dtype=torch.float64))
    # standing; just under the threshold (0.03 + 0.01); yawing at 0.1 rad/s (walking std: speed 0.1)
    env.task.command[:] = torch.tensor([[0.0, 0.0, 0.0], [0.03, 0.0, 0.01], [0.0, 0.0, 0.1]])
    pose = env.task.rewards(env.sim, torch.zeros(3, 12))["pose"] / 0.02
    standing, walking = math.exp(-(0.3 / 0.1) ** 2 / 12), math.exp(-(0.3 / 0.6) ** 2 / 12)
    assert pose.tolist() == pytest.approx([standing, standing, walking], rel=1e-5)


@pytest.mark.parametrize("config", ["ppo_go1_flat", "ppo_go1_rough"])
def test_the_go1_configs_give_the_policy_its_velocity_and_sample_in_the_wide_box(config):
    """The configs' actor interface (BENCHMARKS.md, session 49) reaches the task and PPO: the policy group
    carries the trunk velocity (48 channels), the box is ±4, and PPO's Gaussian (std 1) is in the box's units,
    so its samples pass ±1 yet stay within ±4."""
    from robolearn.config import load_config
    from robolearn.registry import make_agent, make_env as make_env_of

    cfg = load_config(config, ["env.num_envs=64"])
    cfg.env.randomization = {}
    with make_env_of(cfg.env, seed=0) as env:
        assert env.observation_spec["policy"].shape == (48,)
        assert env.action_spec.low.min() == -4.0 and env.action_spec.high.max() == 4.0
        action = make_agent(cfg, env).act(env.reset(seed=0))["action"]
    assert action.abs().max() > 1.5 and action.abs().max() <= 4.0


def test_planar_commands_slower_than_0_2_m_s_are_zeroed_and_the_yaw_rate_kept():
    """legged_gym's rule: a (vx, vy) draw slower than 0.2 m/s becomes a zero planar command (walking that slowly
    is hardly tracked); the yaw rate drawn with it stays. Every draw in these ranges is slower than 0.19 m/s."""
    env = make_env("go1_flat", num_envs=16, seed=0, standing_fraction=0.0,
                   command_ranges=((-0.15, 0.15), (-0.1, 0.1), (0.5, 1.0)), **STILL)
    command = env.task.command
    assert (command[:, :2] == 0).all()
    assert ((command[:, 2] >= 0.5) & (command[:, 2] <= 1.0)).all()


def test_a_trunk_lower_than_min_height_terminates():
    """Terminated when the trunk centre is less than min_height (0.1 m) above the ground, upright or not."""
    env = make_env("go1_flat", num_envs=3, seed=0, **STILL)
    qpos = env.sim.qpos.double()
    qpos[:, 2] = torch.tensor([0.05, 0.09, 0.12], dtype=torch.float64)  # upright (the home orientation)
    env.sim.set_state(torch.arange(3), qpos, torch.zeros(3, 18, dtype=torch.float64))
    assert env.task.terminated(env.sim).tolist() == [True, True, False]


def test_feet_air_time_pays_each_swing_once_at_touchdown_from_its_own_liftoff():
    """legged_gym's term: at touchdown a foot is paid (seconds in the air - 0.5), times weight x dt, only on a
    moving command; its air time restarts at every contact, so a second swing of 0.82 s is paid as the first was,
    not for the time since the episode began."""
    env = make_env("go1_flat", num_envs=1, seed=0, reward_weights=only(feet_air_time=1.0),
                   only_positive_rewards=False, **STILL)
    env.task.command[:] = torch.tensor([1.0, 0.0, 0.0])
    standing = env.sim.qpos.double()
    lifted = standing.clone()
    lifted[:, 2] += 0.3  # every sole 30 cm above the floor

    def air_time_term(qpos: torch.Tensor) -> float:
        env.sim.set_state(torch.arange(1), qpos, torch.zeros(1, 18, dtype=torch.float64))
        return float(env.task.rewards(env.sim, torch.zeros(1, 12))["feet_air_time"][0])

    for _ in range(2):  # two swings, standing 0.6 s between them
        assert [air_time_term(lifted) for _ in range(40)] == [0.0] * 40  # nothing paid in the air
        assert air_time_term(standing) == pytest.approx(0.02 * 4 * (41 * 0.02 - 0.5), rel=1e-4)  # four feet land
        assert [air_time_term(standing) for _ in range(30)] == [0.0] * 30
    env.task.command.zero_()  # a standing command: no step is paid
    for _ in range(40):
        air_time_term(lifted)
    assert air_time_term(standing) == 0.0
