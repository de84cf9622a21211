"""Ant maze: walk Gymnasium's Ant through a maze to a goal (D4RL / OGBench ``antmaze``).

The point maze's layouts (:data:`~sims.tasks.point_maze.LAYOUTS`, ``medium`` and
``large``) and evaluation pairs, with 4 m cells (OGBench's ``maze_unit``): cell
``(i, j)`` is centred at ``x = 4 j``, ``y = 4 i`` (OGBench shifts this by -4 m
so that cell (1, 1) is the origin; the layouts and tasks are the same). Each
wall cell is a 4 x 4 x 2 m box (OGBench's walls are 2 m tall too). The robot is
``gymnasium/envs/mujoco/assets/ant.xml`` with the maze ant's physics of D4RL,
OGBench and HIRO/HRAC (their ``ant.xml``: RK4 with 20 ms steps and at most 30 N m
per joint; OGBench writes it as gear 30 on controls in [-1, 1], as here), not
Ant-v5's 10 ms and gear 150: under uniformly random controls Gymnasium's ant is on
its back within 25 s in 20 of 20 episodes and the maze ant in none, and a maze
without termination has no way back from a flip. 5 physics steps per control step
(``control_dt`` 0.1 s, OGBench's). The model also compiles on MuJoCo Warp (a test
checks it).

- Observation ``policy`` (29): ``qpos`` (torso x, y, z, orientation quaternion,
  eight joint angles) and ``qvel`` (14), as OGBench's ``antmaze``. The first two
  features are the torso's (x, y): ``goal`` (2), the goal position (a mocap
  marker), lives in their space, so a reached state is a goal (hindsight
  relabeling in ``policies/goal`` relies on this).
- Action (8): hip and ankle torques in [-1, 1], as Ant.
- Reward, success, termination at the goal and goals (``"eval"``, ``"fixed"``
  with ``pair``, ``"train"``): as :class:`~sims.tasks.point_maze.PointMaze`,
  with the torso's (x, y) within ``success_distance`` of the goal: 0.5 m,
  OGBench's ``_goal_tol`` for the ant (``ogbench/locomaze/maze.py``:
  ``1.0 if loco_env_type == 'point' else 0.5``). There is no termination when
  the ant flips over (OGBench has none either): it has to get up or time out.
- Reset: Ant's (``qpos0`` plus U(-0.1, 0.1) noise, quaternion included;
  N(0, 0.1^2) velocity), with the torso's (x, y) at the start cell centre plus
  U(-0.1, 0.1) m (OGBench's starts are noisier, U(-1, 1) m, and it also
  adds that noise to the goal). Truncated after ``max_episode_steps`` (1000).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import mujoco
import torch

from sims.backend import MujocoBackend
from sims.task import Task, check_noise_scales, normal, uniform
from sims.tasks.gym_assets import gym_asset
from sims.tasks.point_maze import PointMaze


@dataclass(kw_only=True)
class AntMaze(PointMaze):
    success_distance: float = 0.5
    reset_noise_scale: float = 0.1  # Ant's joint-position and velocity noise
    max_episode_steps: int = 1000
    physics_timestep: float = 0.02  # s, the maze ant's (Gymnasium's Ant-v5: 0.01)
    motor_gear: float = 30.0  # N m at |control| = 1, the maze ant's (Ant-v5: 150)
    name: ClassVar[str] = "ant_maze"
    cell_size: ClassVar[float] = 4.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_noise_scales(self, reset_noise_scale=self.reset_noise_scale)
        for key in ("physics_timestep", "motor_gear"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{self.name} {key}={getattr(self, key)}: must be > 0")

    def model(self) -> mujoco.MjModel:
        """ant.xml with the maze ant's timestep and gear, plus wall boxes, a floor under the whole maze, a goal marker and a top-down camera."""
        spec = mujoco.MjSpec.from_file(gym_asset("ant.xml"))
        spec.option.timestep = self.physics_timestep
        for motor in spec.actuators:
            motor.gear[0] = self.motor_gear
        rows, cols = self.grid.walls.shape
        h = self.cell_size / 2
        cx, cy = (cols - 1) * h, (rows - 1) * h
        floor = spec.geom("floor")
        floor.pos, floor.size = [cx, cy, 0.0], [cx + h, cy + h, 0.1]
        world = spec.worldbody
        for pos, size in self.grid.wall_boxes():
            # ant.xml's default class has conaffinity 0: walls must set it to be hit.
            world.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, pos=pos, size=size, contype=1, conaffinity=1,
                           rgba=[0.6, 0.6, 0.7, 1.0])
        # The identity orientation looks down -z with x to the right and y up the image.
        world.add_camera(name="top", pos=[cx, cy, 1.4 * max(rows, cols) * self.cell_size])
        goal = world.add_body(name="goal", mocap=True, pos=[0, 0, 0.1])
        goal.add_geom(type=mujoco.mjtGeom.mjGEOM_CYLINDER, size=[self.success_distance, 0.05, 0],
                      contype=0, conaffinity=0, rgba=[0.2, 0.8, 0.2, 0.6])
        return spec.compile()

    def reset(self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        start, self._pending_goal = self._cells(ids, generator)
        qpos, qvel = Task.reset(self, sim, ids, generator)  # qpos0 and zero velocity, as Ant starts from
        noise = self.reset_noise_scale
        qpos = qpos + uniform(qpos.shape, -noise, noise, generator)
        qpos[:, :2] = start + uniform(start.shape, -self.start_noise, self.start_noise, generator)
        return qpos, qvel + normal(qvel.shape, noise, generator)


ant_maze_medium = partial(AntMaze, layout="medium")  # the 8x8 D4RL/OGBench medium maze, 4 m cells
ant_maze_large = partial(AntMaze, layout="large")  # the 9x12 D4RL/OGBench large maze, 4 m cells
