"""Ant maze: the model, resets at the start cell, the observation layout, rewards and
termination at the goal, walls that block the ant, random-action steps, and MuJoCo Warp."""

from __future__ import annotations

import pytest
import torch

import sims
from sims.tasks.ant_maze import AntMaze
from sims.tasks.point_maze import EVAL_PAIRS, MazeGrid


def place(env, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
    """Put every world in ``qpos``/``qvel``, keeping the rest of its state (the goal marker included)."""
    rows = env.get_state()["state"]
    rows[:, env.sim.state_slice("qpos")], rows[:, env.sim.state_slice("qvel")] = qpos, qvel
    env.sim.set_full_state(torch.arange(env.num_envs), rows)


@pytest.mark.parametrize("layout", ["medium", "large"])
def test_model_compiles_with_walls_goal_marker_and_camera(layout):
    task = AntMaze(layout=layout)
    model = task.model()
    walls = int(task.grid.walls.sum())
    assert (model.nq, model.nv, model.nu, model.nmocap) == (15, 14, 8, 1)
    assert model.ngeom == 14 + walls + 1  # ant.xml's floor and 13 body geoms, the walls, the goal marker
    assert model.camera("top").id >= 0 and task.grid.cell_size == 4.0
    assert model.opt.timestep == 0.02 and (model.actuator_gear[:, 0] == 30.0).all()  # D4RL's and OGBench's ant


def test_random_controls_leave_the_maze_ant_upright():
    """The maze ant's physics (30 N m, 20 ms) keep a randomly driven ant on its feet, where Ant-v5's
    (150 N m, 10 ms) turn it over; with no termination a flipped ant would waste the rest of its episode."""
    def upright_after_random_controls(**kwargs) -> torch.Tensor:
        with sims.make_env("ant_maze_medium", num_envs=8, seed=0, num_threads=1, **kwargs) as env:
            env.reset(seed=0)
            generator = torch.Generator().manual_seed(0)
            for _ in range(round(20.0 / env.control_dt)):  # 20 s of uniformly random controls
                env.step(torch.rand(8, 8, generator=generator) * 2 - 1)
            w, x, y, z = env.get_state()["qpos"][:, 3:7].T
            return 1 - 2 * (x * x + y * y) > 0  # the torso's z axis still points up

    assert upright_after_random_controls().all()
    assert not upright_after_random_controls(physics_timestep=0.01, motor_gear=150.0).any()


def test_bad_physics_is_refused():
    with pytest.raises(ValueError, match="motor_gear=0"):
        AntMaze(motor_gear=0)


def test_fixed_goal_reset_observations_and_success_reward():
    grid = MazeGrid("medium", cell_size=4.0)
    start, goal = EVAL_PAIRS["medium"][1]
    with sims.make_env("ant_maze_medium", num_envs=3, seed=0, num_threads=1, goals="fixed", pair=1,
                       reward="success") as env:
        obs = env.reset(seed=0)
        assert obs["policy"].shape == (3, 29) and obs["goal"].shape == (3, 2) and env.max_episode_steps == 1000
        assert env.control_dt == pytest.approx(0.1)  # 5 x 20 ms, OGBench's
        assert torch.allclose(obs["goal"], torch.tensor([grid.center(goal)] * 3, dtype=torch.float32))
        qpos = env.get_state()["qpos"]
        assert torch.equal(obs["policy"][:, :2], qpos[:, :2].float())  # the first two features: torso (x, y)
        assert (qpos[:, :2] - torch.tensor(grid.center(start), dtype=torch.float64)).abs().max() <= 0.1
        assert len({tuple(q) for q in qpos[:, 2:].tolist()}) == 3  # Ant's joint noise differs per world

        here = obs["goal"].double() + torch.tensor([[0.0, 0.0], [0.0, 2.0], [2.0, 0.0]], dtype=torch.float64)
        qpos[:, :2] = here  # world 0 on its goal, the others 2 m away
        place(env, qpos, torch.zeros(3, 14, dtype=torch.float64))
        step = env.step(torch.zeros(3, 8))
        assert step.reward.tolist() == [1.0, 0.0, 0.0] and step.terminated.tolist() == [True, False, False]
        assert step.info["success"].tolist() == [True, False, False]


def test_penalty_reward_without_termination_and_no_termination_when_flipped():
    with sims.make_env("ant_maze_large", num_envs=2, seed=0, num_threads=1, terminate_at_goal=False) as env:
        obs = env.reset(seed=0)
        qpos = env.get_state()["qpos"]
        offset = torch.tensor([[0.3, 0.0], [0.0, 0.6]], dtype=torch.float64)  # inside, outside the 0.5 m tolerance
        qpos[:, :2] = obs["goal"].double() + offset
        qpos[1, 3:7] = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64)  # world 1 upside down
        place(env, qpos, torch.zeros(2, 14, dtype=torch.float64))
        for _ in range(5):
            step = env.step(torch.zeros(2, 8))
            assert step.reward.tolist() == [0.0, -1.0] and not step.terminated.any()
            assert step.info["success"].tolist() == [True, False]


def test_walls_block_the_ant():
    with sims.make_env("ant_maze_medium", num_envs=2, seed=0, num_threads=1) as env:
        env.reset(seed=0)
        qpos = env.get_state()["qpos"]
        qpos[:, :2] = torch.tensor([4.0, 4.0], dtype=torch.float64)  # cell (1, 1): wall row 0 below (face y = 2)
        qvel = torch.zeros(2, 14, dtype=torch.float64)
        qvel[:, 1] = torch.tensor([-10.0, 10.0], dtype=torch.float64)  # thrown at the wall; up the free corridor
        place(env, qpos, qvel)
        y = torch.stack([env.step(torch.zeros(2, 8)).obs["policy"][:, 1] for _ in range(40)])
    assert y[:, 1].max() - 4.0 > 2.0  # thrown freely it travels further than the 2 m to the wall...
    assert y[:, 0].min() > 2.25  # ...but the torso (radius 0.25) stops at the wall face
    assert y[:, 1].max() < 10.0 - 0.25  # the corridor ends at the wall of row 3 (face y = 10)


def test_random_actions_keep_observations_finite():
    with sims.make_env("ant_maze_large", num_envs=4, seed=0, num_threads=1, goals="train") as env:
        env.reset(seed=0)
        generator = torch.Generator().manual_seed(0)
        for _ in range(50):
            step = env.step(torch.rand(4, 8, generator=generator) * 2 - 1)
            assert all(torch.isfinite(v).all() for v in step.obs.values()) and torch.isfinite(step.reward).all()


def test_compiles_on_mujoco_warp():
    import warp as wp
    import mujoco_warp as mjw
    with wp.ScopedDevice("cpu"):
        model = mjw.put_model(AntMaze(layout="medium").model())
    assert model.nu == 8
