"""Point maze: drive a point mass through a maze to a goal (D4RL / OGBench ``pointmaze``).

The model is generated from a layout grid (1 = wall, 0 = free; the D4RL/OGBench
``medium`` 8x8 and ``large`` 9x12 layouts below). Cell ``(i, j)`` (row, column) is
centred at ``x = j * cell_size``, ``y = i * cell_size``; each wall cell is a box;
contacts are frictionless (``condim`` 1), so the point slides along walls. The model
also compiles on MuJoCo Warp (``mujoco_warp.put_model``; a test checks it).
The agent is a sphere of radius 0.1 m on two slide joints (x, y) with viscous
damping, driven by two force actuators: a constant control of 1 reaches about
2 m/s. 5 physics steps of 10 ms per control step (``control_dt`` 0.05 s).

- Observation ``policy`` (4): position (x, y, m), velocity (m/s).
  ``goal`` (2): the goal position, a mocap marker. The goal lives in the space of
  the first two ``policy`` features, so a reached state is a goal (hindsight
  relabeling in ``policies/goal`` relies on this). A flat agent (PPO, SAC) reads ``policy`` only unless its
  ``*obs_groups`` name ``goal`` too: with goals other than ``"fixed"`` the run warns it cannot know the goal.
- Action (2): forces in [-1, 1] (gear 10 N).
- Reward (``reward`` kwarg): ``"penalty"`` (OGBench's): ``goal`` = 0 when the point
  is within ``success_distance`` (0.25 m, a quarter cell) of the goal, else -1;
  ``"success"``: ``goal`` = 1 there, else 0 (the sparse reward of skill-based RL,
  SPiRL's mazes); ``"distance"``: ``goal`` = minus the distance to the goal (m), the
  dense reward of HIRO's and HRAC's ant mazes. Success: the same for all three; the episode terminates there when
  ``terminate_at_goal`` (recordings of undirected data turn it off).
- Goals (``goals`` kwarg): ``"eval"``: world ``w``'s first episode uses evaluation pair
  ``w % 5`` of :data:`EVAL_PAIRS` (as OGBench's five tasks per maze), episode ``e``
  pair ``(w + e x worlds) % 5``: one world cycles through all five; with a multiple of 5
  worlds each keeps its pair, and the five are covered evenly either way. Starting
  at its start cell centre plus U(-0.1, 0.1) m noise, goal at its goal cell
  centre; ``"fixed"``: every world uses evaluation pair ``pair`` (a single
  long-horizon task: with ``reward="success"``, a sparse one); ``"train"``: start
  and goal uniform over free cells (distinct), the start with the same noise.
  Truncated after ``max_episode_steps`` (500).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import ClassVar, Literal

import mujoco
import numpy as np
import torch

from robolearn.interfaces import Obs
from sims.backend import MujocoBackend
from sims.task import Task, check_noise_scales, uniform

LAYOUTS: dict[str, tuple[str, ...]] = {
    "medium": (
        "11111111",
        "10011001",
        "10010001",
        "11000111",
        "10010001",
        "10100101",
        "10001001",
        "11111111",
    ),
    "large": (
        "111111111111",
        "100001000001",
        "101101010101",
        "100000010001",
        "101111011101",
        "100101000001",
        "110101010111",
        "100100010001",
        "111111111111",
    ),
}

# OGBench's five evaluation tasks per maze: ((start row, col), (goal row, col)); these and the
# layouts above match ogbench 1.2.2 (ogbench/locomaze/maze.py).
EVAL_PAIRS: dict[str, tuple[tuple[tuple[int, int], tuple[int, int]], ...]] = {
    "medium": (((1, 1), (6, 6)), ((6, 1), (1, 6)), ((5, 3), (4, 2)), ((6, 5), (6, 1)), ((2, 6), (1, 1))),
    "large": (((1, 1), (7, 10)), ((5, 4), (7, 1)), ((7, 4), (1, 10)), ((3, 8), (5, 4)), ((1, 1), (5, 4))),
}


class MazeGrid:
    """A layout grid: free cells, cell <-> position, and shortest paths between cells (BFS)."""

    def __init__(self, layout: str, cell_size: float = 1.0) -> None:
        self.name, self.cell_size = layout, cell_size
        self.walls = np.array([[c == "1" for c in row] for row in LAYOUTS[layout]])
        self.free = [(int(i), int(j)) for i, j in zip(*np.nonzero(~self.walls))]
        self.index = {cell: k for k, cell in enumerate(self.free)}
        self.next_hop = self._next_hops()
        self._cell_centers = self.centers().float()  # for cells_of, which the navigator calls every step

    def center(self, cell: tuple[int, int]) -> tuple[float, float]:
        """The (x, y) of a cell's centre."""
        return cell[1] * self.cell_size, cell[0] * self.cell_size

    def centers(self) -> torch.Tensor:
        """``(num_free, 2)`` float64 centres of the free cells, in :attr:`free` order."""
        return torch.tensor([self.center(c) for c in self.free], dtype=torch.float64)

    def _next_hops(self) -> np.ndarray:
        """``hop[g, c]``: the free-cell index to move to from cell ``c`` towards goal ``g`` (``g`` itself there)."""
        n = len(self.free)
        hop = np.zeros((n, n), dtype=np.int64)
        for g, goal in enumerate(self.free):  # BFS from each goal; a cell's parent is its next hop
            hop[g, g] = g
            seen, queue = {goal}, deque([goal])
            while queue:
                i, j = queue.popleft()
                for nb in ((i + 1, j), (i - 1, j), (i, j + 1), (i, j - 1)):
                    if nb in self.index and nb not in seen:
                        seen.add(nb)
                        hop[g, self.index[nb]] = self.index[(i, j)]
                        queue.append(nb)
        return hop

    def hop_distances(self) -> np.ndarray:
        """``dist[g, c]``: the number of moves between free cells ``c`` and ``g`` along a shortest path."""
        n = len(self.free)
        goal, cell, dist = np.arange(n)[:, None], np.tile(np.arange(n), (n, 1)), np.zeros((n, n), dtype=np.int64)
        while (away := cell != goal).any():  # walk every cell one hop towards every goal
            dist += away
            cell = self.next_hop[goal, cell]
        return dist

    def cells_of(self, xy: torch.Tensor) -> torch.Tensor:
        """Free-cell index of each ``(N, 2)`` position: the cell with the nearest centre."""
        return torch.cdist(xy.float(), self._cell_centers.to(xy.device)).argmin(1)

    def wall_boxes(self) -> list[tuple[tuple[float, float, float], tuple[float, float, float]]]:
        """``(centre, half-size)`` of each wall cell's box: the cell's footprint, half a cell tall, on the floor."""
        h = self.cell_size / 2
        return [((j * self.cell_size, i * self.cell_size, h / 2), (h, h, h / 2))
                for i, j in zip(*np.nonzero(self.walls))]

    def mjcf(self) -> str:
        """The model: floor, wall boxes, the point mass on x/y slides, force actuators, a goal marker."""
        h = self.cell_size / 2
        walls = "\n".join(
            f'<geom type="box" pos="{x} {y} {z}" size="{sx} {sy} {sz}" rgba="0.6 0.6 0.7 1"/>'
            for (x, y, z), (sx, sy, sz) in self.wall_boxes())
        rows, cols = self.walls.shape
        cx, cy = (cols - 1) * h, (rows - 1) * h
        return f"""
<mujoco model="point_maze_{self.name}">
  <option timestep="0.01" gravity="0 0 0"/>
  <default><geom contype="1" conaffinity="1" condim="1"/></default>
  <worldbody>
    <light pos="{cx} {cy} 10" dir="0 0 -1"/>
    <camera name="top" pos="{cx} {cy} {1.4 * max(rows, cols)}" xyaxes="1 0 0 0 1 0"/>
    <geom type="plane" pos="{cx} {cy} 0" size="{cx + h} {cy + h} 0.1" contype="0" conaffinity="0" rgba="0.9 0.9 0.9 1"/>
    {walls}
    <body name="point" pos="0 0 0.1">
      <joint name="x" type="slide" axis="1 0 0" damping="5"/>
      <joint name="y" type="slide" axis="0 1 0" damping="5"/>
      <geom type="sphere" size="0.1" mass="1" rgba="0.9 0.3 0.2 1"/>
    </body>
    <body name="goal" mocap="true" pos="0 0 0.1">
      <geom type="sphere" size="0.1" contype="0" conaffinity="0" rgba="0.2 0.8 0.2 0.6"/>
    </body>
  </worldbody>
  <actuator>
    <motor joint="x" gear="10" ctrlrange="-1 1" ctrllimited="true"/>
    <motor joint="y" gear="10" ctrlrange="-1 1" ctrllimited="true"/>
  </actuator>
</mujoco>"""


@dataclass(kw_only=True)
class PointMaze(Task):
    layout: str = "medium"
    goals: Literal["eval", "fixed", "train"] = "eval"
    pair: int = 0  # goals="fixed": the evaluation pair every world uses
    reward: Literal["penalty", "success", "distance"] = "penalty"
    terminate_at_goal: bool = True
    success_distance: float = 0.25
    start_noise: float = 0.1
    frame_skip: int = 5
    max_episode_steps: int = 500
    name: ClassVar[str] = "point_maze"  # in error messages
    cell_size: ClassVar[float] = 1.0  # metres per maze cell
    grid: MazeGrid = field(init=False, repr=False)
    _pending_goal: torch.Tensor = field(init=False, repr=False)  # from reset() to after_reset()

    def __post_init__(self) -> None:
        if self.goals not in ("eval", "fixed", "train"):
            raise ValueError(f"{self.name} goals={self.goals!r}: choose 'eval', 'fixed' or 'train'")
        if self.reward not in ("penalty", "success", "distance"):
            raise ValueError(f"{self.name} reward={self.reward!r}: choose 'penalty', 'success' or 'distance'")
        if not 0 <= self.pair < len(EVAL_PAIRS[self.layout]):
            raise ValueError(f"{self.name} pair={self.pair}: the {self.layout} maze has evaluation pairs "
                             f"0..{len(EVAL_PAIRS[self.layout]) - 1}")
        if not self.success_distance > 0:  # no distance is below it: no success ever, the penalty every step
            raise ValueError(f"{self.name} success_distance={self.success_distance}: must be > 0 (metres)")
        check_noise_scales(self, self.name, start_noise=self.start_noise)
        self.grid = MazeGrid(self.layout, self.cell_size)

    def model(self) -> mujoco.MjModel:
        return mujoco.MjModel.from_xml_string(self.grid.mjcf())

    @property
    def fixed_goal(self) -> bool:
        """``goals="fixed"``: every episode has the same goal, which a flat agent may learn without reading it."""
        return self.goals == "fixed"

    def start(self, sim: MujocoBackend) -> None:
        self._episodes = torch.zeros(sim.num_worlds, dtype=torch.long)  # per world, for goals="eval"

    def _cells(self, ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and goal cell centres ``(len(ids), 2)`` for worlds ``ids``."""
        centers = self.grid.centers().to(generator.device)
        if self.goals in ("eval", "fixed"):
            pairs = EVAL_PAIRS[self.layout]
            if self.goals == "eval":  # world w's episode e: pair (w + e x worlds) % 5, so one world cycles them all
                ids = ids.cpu()  # (self._episodes: made by start(), which every env.reset calls first)
                k = (ids + self._episodes[ids] * len(self._episodes)) % len(pairs)
                self._episodes[ids] += 1
            else:
                k = torch.full_like(ids.cpu(), self.pair)
            start = torch.tensor([self.grid.center(pairs[p][0]) for p in k.tolist()], dtype=torch.float64)
            goal = torch.tensor([self.grid.center(pairs[p][1]) for p in k.tolist()], dtype=torch.float64)
            return start.to(generator.device), goal.to(generator.device)
        n = len(centers)
        first = torch.randint(n, (len(ids),), generator=generator, device=generator.device)
        second = (first + torch.randint(1, n, (len(ids),), generator=generator, device=generator.device)) % n
        return centers[first], centers[second]

    def reset(self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        start, self._pending_goal = self._cells(ids, generator)
        qpos = start + uniform(start.shape, -self.start_noise, self.start_noise, generator)
        return qpos, torch.zeros_like(qpos)

    def after_reset(self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator) -> None:
        goal = torch.cat([self._pending_goal, torch.full_like(self._pending_goal[:, :1], 0.1)], dim=1)
        sim.set_mocap_pos(ids, goal.unsqueeze(1))

    def observations(self, sim: MujocoBackend) -> Obs:
        return {"policy": torch.cat([sim.qpos, sim.qvel], dim=1).float(), "goal": self._goal(sim).float()}

    def rewards(self, sim: MujocoBackend, action: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.reward == "distance":
            return {"goal": -self._distance(sim)}
        reached = self.success(sim).float()
        return {"goal": reached if self.reward == "success" else reached - 1.0}

    def success(self, sim: MujocoBackend) -> torch.Tensor:
        return self._distance(sim) < self.success_distance

    def _distance(self, sim: MujocoBackend) -> torch.Tensor:
        """Of the agent's (x, y) to the goal, m."""
        return (sim.qpos[:, :2].double() - self._goal(sim)).norm(dim=1)

    def terminated(self, sim: MujocoBackend) -> torch.Tensor:
        return self.success(sim) if self.terminate_at_goal else super().terminated(sim)

    def _goal(self, sim: MujocoBackend) -> torch.Tensor:
        return sim.mocap_pos[:, 0, :2].double()

    def camera(self) -> str:
        return "top"


point_maze_medium = partial(PointMaze, layout="medium")  # the 8x8 D4RL/OGBench medium maze
point_maze_large = partial(PointMaze, layout="large")  # the 9x12 D4RL/OGBench large maze
