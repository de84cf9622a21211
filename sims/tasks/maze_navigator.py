"""A scripted maze navigator: the behavior policy of the undirected point-maze datasets.

Each env keeps its own goal cell. Every step it finds the cell it is in, takes
the next cell on a shortest path to its goal (a BFS table of the grid,
:attr:`MazeGrid.next_hop`), and steers towards that cell's centre (or the goal
centre once there) with a PD law on position and velocity. On arrival (within
``arrive_distance``) it picks a new goal cell uniformly at random, so an episode
wanders through the whole maze, as OGBench's ``navigate`` data does. Action
noise is added by the recorder (``robolearn.data.record(noise=...)``).
"""

from __future__ import annotations

import torch

from robolearn.interfaces import Obs
from sims.tasks.point_maze import MazeGrid


class MazeNavigator:
    """Waypoint following to random goal cells; ``act(obs)`` reads ``obs["policy"]`` = (x, y, vx, vy)."""

    def __init__(self, grid: MazeGrid, num_envs: int, kp: float = 3.0, kd: float = 0.5,
                 arrive_distance: float = 0.2, seed: int = 0) -> None:
        self.grid, self.num_envs = grid, num_envs
        self.kp, self.kd, self.arrive_distance = kp, kd, arrive_distance
        self.centers = grid.centers().float()
        self.hop = torch.as_tensor(grid.next_hop)
        self.cell_of = {cell: k for k, cell in enumerate(grid.free)}
        self.generator = torch.Generator().manual_seed(seed)
        self.goal = self._random_cells(num_envs)

    def _random_cells(self, n: int) -> torch.Tensor:
        return torch.randint(len(self.centers), (n,), generator=self.generator)

    def current_cells(self, position: torch.Tensor) -> torch.Tensor:
        """Free-cell index of each position (the nearest free cell centre)."""
        return self.grid.cells_of(position)

    def act(self, obs: Obs) -> torch.Tensor:
        state = obs["policy"].cpu().float()
        position, velocity = state[:, :2], state[:, 2:4]
        arrived = (position - self.centers[self.goal]).norm(dim=1) < self.arrive_distance
        if arrived.any():
            self.goal[arrived] = self._random_cells(int(arrived.sum()))
        waypoint = self.centers[self.hop[self.goal, self.current_cells(position)]]
        action = self.kp * (waypoint - position) - self.kd * velocity
        return action.clamp(-1.0, 1.0).to(obs["policy"].device)

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """New random goals for the envs in ``mask`` (all when None)."""
        mask = torch.ones(self.num_envs, dtype=torch.bool) if mask is None else mask.cpu().bool()
        self.goal[mask] = self._random_cells(int(mask.sum()))
