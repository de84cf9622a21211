"""Point maze: the generated model, walls that block, rewards and termination at the goal,
evaluation and training goals, the scripted navigator, and MuJoCo Warp compiling the model."""

from __future__ import annotations

import pytest
import torch

import sims
from sims.tasks.maze_navigator import MazeNavigator
from sims.tasks.point_maze import EVAL_PAIRS, LAYOUTS, MazeGrid, PointMaze


@pytest.mark.parametrize("layout", ["medium", "large"])
def test_layouts_and_evaluation_pairs_are_free_and_connected(layout):
    grid = MazeGrid(layout)
    assert grid.walls.shape == {"medium": (8, 8), "large": (9, 12)}[layout]
    assert grid.walls[0].all() and grid.walls[-1].all() and grid.walls[:, 0].all() and grid.walls[:, -1].all()
    for start, goal in EVAL_PAIRS[layout]:
        assert start in grid.index and goal in grid.index
        cell, steps = grid.index[start], 0
        while cell != grid.index[goal]:  # following next hops reaches the goal through free neighbours
            nxt = grid.next_hop[grid.index[goal], cell]
            (i, j), (k, m) = grid.free[cell], grid.free[nxt]
            assert abs(i - k) + abs(j - m) == 1
            cell, steps = nxt, steps + 1
            assert steps < len(grid.free)
    model = PointMaze(layout=layout).model()
    assert model.nu == 2 and model.nmocap == 1 and model.ngeom == int(grid.walls.sum()) + 3


def test_hop_distances_are_shortest_paths_and_positions_map_to_their_cells():
    grid = MazeGrid("large")
    dist, n = grid.hop_distances(), len(grid.free)
    assert (dist == dist.T).all() and (dist.diagonal() == 0).all()
    for g in range(n):
        for c in range(n):
            if c != g:  # one more than from the next hop, and no shortcut through any free neighbour
                assert dist[g, c] == dist[g, grid.next_hop[g, c]] + 1
                (i, j) = grid.free[c]
                neighbours = [grid.index[nb] for nb in ((i + 1, j), (i - 1, j), (i, j + 1), (i, j - 1)) if nb in grid.index]
                assert dist[g, c] == 1 + min(dist[g, k] for k in neighbours)
    assert [int(dist[grid.index[goal], grid.index[start]]) for start, goal in EVAL_PAIRS["large"]] == [15, 19, 12, 14, 15]
    xy = torch.tensor([[1.0, 1.0], [1.45, 0.6], [0.2, 0.3], [10.3, 6.8]])  # (x, y) = (column, row)
    assert grid.cells_of(xy).tolist() == [grid.index[(1, 1)], grid.index[(1, 1)], grid.index[(1, 1)], grid.index[(7, 10)]]


def test_walls_block_motion():
    with sims.make_env("point_maze_medium", num_envs=2, seed=0, num_threads=1, goals="eval") as env:
        env.reset(seed=0)
        start = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)  # cell (1, 1): walls at x=3 and y=0
        env.sim.set_state(torch.arange(2), start, torch.zeros(2, 2, dtype=torch.float64))
        push = torch.tensor([[1.0, 0.0], [0.0, -1.0]])  # +x into the wall cell (1, 3); -y into row 0
        for _ in range(100):
            obs = env.step(push).obs
        x, y = obs["policy"][0, 0], obs["policy"][1, 1]
        assert 2.0 < x < 2.42  # reached the wall face at x = 2.5 (radius 0.1) and stopped there
        assert 0.58 < y < 0.7  # the wall face of row 0 is at y = 0.5


def test_goal_reward_success_and_termination():
    with sims.make_env("point_maze_medium", num_envs=2, seed=0, num_threads=1, goals="eval") as env:
        obs = env.reset(seed=0)
        goal = obs["goal"].double()
        here = torch.stack([goal[0], goal[1] + 2.0])  # env 0 on its goal, env 1 two metres away
        env.sim.set_state(torch.arange(2), here, torch.zeros(2, 2, dtype=torch.float64))
        env.sim.set_mocap_pos(torch.arange(2), torch.cat([goal, torch.full((2, 1), 0.1, dtype=torch.float64)], 1)[:, None])
        step = env.step(torch.zeros(2, 2))
        assert step.reward.tolist() == [0.0, -1.0]
        assert step.terminated.tolist() == [True, False] and step.info["success"].tolist() == [True, False]


def test_fixed_goal_with_success_reward():
    """goals="fixed": every world runs evaluation pair ``pair``; reward="success": 1 at the goal, else 0."""
    grid = MazeGrid("medium")
    (start, goal), = [EVAL_PAIRS["medium"][1]]
    with sims.make_env("point_maze_medium", num_envs=3, seed=0, num_threads=1, goals="fixed", pair=1,
                       reward="success") as env:
        obs = env.reset(seed=0)
        assert torch.allclose(obs["goal"], torch.tensor([grid.center(goal)] * 3, dtype=torch.float32))
        assert (obs["policy"][:, :2] - torch.tensor(grid.center(start))).abs().max() <= 0.1 + 1e-6
        goals = obs["goal"].double()
        here = goals + torch.tensor([[0.0, 0.0], [0.0, 2.0], [2.0, 0.0]], dtype=torch.float64)  # env 0 on its goal
        env.sim.set_state(torch.arange(3), here, torch.zeros(3, 2, dtype=torch.float64))
        env.sim.set_mocap_pos(torch.arange(3), torch.cat([goals, torch.full((3, 1), 0.1, dtype=torch.float64)], 1)[:, None])
        step = env.step(torch.zeros(3, 2))
        assert step.reward.tolist() == [1.0, 0.0, 0.0] and step.terminated.tolist() == [True, False, False]
    with pytest.raises(ValueError, match="pair=7"):
        sims.make_env("point_maze_medium", num_envs=1, goals="fixed", pair=7)
    with pytest.raises(ValueError, match="reward(=|: )'dense'"):
        sims.make_env("point_maze_medium", num_envs=1, reward="dense")


def test_evaluation_and_training_goals():
    grid = MazeGrid("large")
    with sims.make_env("point_maze_large", num_envs=10, seed=0, num_threads=1, goals="eval") as env:
        obs = env.reset(seed=0)
    for w in range(10):
        start, goal = EVAL_PAIRS["large"][w % 5]
        assert torch.allclose(obs["goal"][w].double(), torch.tensor(grid.center(goal), dtype=torch.float64))
        assert (obs["policy"][w, :2].double() - torch.tensor(grid.center(start), dtype=torch.float64)).abs().max() <= 0.1
    with sims.make_env("point_maze_large", num_envs=64, seed=0, num_threads=1, goals="train") as env:
        obs = env.reset(seed=0)
    centers = grid.centers().float()
    goal_cells = torch.cdist(obs["goal"], centers).min(1)
    assert goal_cells.values.max() < 1e-5  # goals at free cell centres
    assert len(set(goal_cells.indices.tolist())) > 20  # spread over the maze
    start_cells = torch.cdist(obs["policy"][:, :2], centers).argmin(1)
    assert (start_cells != goal_cells.indices).all()


@pytest.mark.parametrize("layout", ["medium", "large"])
def test_navigator_reaches_every_evaluation_goal(layout):
    with sims.make_env(f"point_maze_{layout}", num_envs=10, seed=0, num_threads=1, goals="eval") as env:
        navigator = MazeNavigator(env.task.grid, 10, arrive_distance=-1.0)  # never picks goals of its own
        obs = env.reset(seed=0)
        done, success = torch.zeros(10, dtype=torch.bool), torch.zeros(10, dtype=torch.bool)
        for _ in range(env.max_episode_steps):
            navigator.goal = navigator.current_cells(obs["goal"])  # steer to the env's goal
            step = env.step(navigator.act(obs))
            ended = (step.terminated | step.truncated) & ~done
            success |= ended & step.info["success"]
            done |= ended
            obs = step.obs
            if done.all():
                break
    assert success.all()


def test_navigator_wanders_to_new_goals_on_arrival():
    with sims.make_env("point_maze_medium", num_envs=4, seed=0, num_threads=1, goals="train",
                       terminate_at_goal=False, max_episode_steps=2000) as env:
        navigator = MazeNavigator(env.task.grid, 4, seed=1)
        obs = env.reset(seed=0)
        visited: set[int] = set()
        for _ in range(1500):
            obs = env.step(navigator.act(obs)).obs
            visited |= set(navigator.current_cells(obs["policy"][:, :2]).tolist())
    assert len(visited) == len(env.task.grid.free)  # the whole maze is covered


def test_compiles_on_mujoco_warp():
    import warp as wp
    import mujoco_warp as mjw
    with wp.ScopedDevice("cpu"):
        model = mjw.put_model(PointMaze(layout="medium").model())
    assert model.nu == 2


def test_layout_strings_are_rectangular():
    for rows in LAYOUTS.values():
        assert len({len(r) for r in rows}) == 1


def test_settings_errors_name_the_key_and_a_fixed_layout_points_at_the_other_task():
    with pytest.raises(ValueError, match=r"^foo: .*it takes: frame_skip, goals, max_episode_steps") as err:
        sims.make_env("point_maze_medium", num_envs=1, foo=1)
    assert "layout" not in str(err.value)  # the factory fixes it: not the user's to set
    with pytest.raises(ValueError, match=r"^layout: task 'point_maze_medium' is the one with "
                                         r"layout='medium'; pick another by its task name \(point_maze_large"):
        sims.make_env("point_maze_medium", num_envs=1, layout="large")
    with sims.make_env("ant_maze_large", num_envs=1, max_episode_steps=7) as env:
        assert env.max_episode_steps == 7 and env.task.layout == "large"
    # a success distance of 0 or less had never succeeded, silently; a negative start noise failed in torch's words
    with pytest.raises(ValueError, match=r"point_maze success_distance=-1.0: must be > 0"):
        sims.make_env("point_maze_medium", num_envs=1, success_distance=-1.0)
    with pytest.raises(ValueError, match=r"ant_maze start_noise=-0.1: must be >= 0"):
        sims.make_env("ant_maze_medium", num_envs=1, start_noise=-0.1)


def test_one_world_cycles_through_every_evaluation_pair_and_a_seeded_reset_starts_over():
    """A recording or video of one world had only ever shown pair 0."""
    with sims.make_env("point_maze_medium", num_envs=1, seed=0, max_episode_steps=2) as env:
        def goals():
            obs, seen = env.reset(seed=3), []
            for _ in range(10):
                seen.append(tuple(obs["goal"][0, :2].tolist()))
                obs, *_ = env.step(torch.zeros(1, 2))
            return seen[::2]  # one per episode
        first = goals()
        assert len(set(first)) == len(EVAL_PAIRS["medium"]) and goals() == first
    with sims.make_env("point_maze_medium", num_envs=10, seed=0) as env:  # first episodes: pair w % 5, as before
        obs = env.reset(seed=0)
        pairs = EVAL_PAIRS["medium"]
        expected = torch.tensor([env.task.grid.center(pairs[w % 5][1]) for w in range(10)], dtype=obs["goal"].dtype)
        torch.testing.assert_close(obs["goal"][:, :2], expected)
