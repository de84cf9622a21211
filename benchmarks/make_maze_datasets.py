"""Undirected, noisy point-maze navigation datasets (OGBench's ``navigate`` kind), made here.

The scripted :class:`sims.tasks.maze_navigator.MazeNavigator` (BFS waypoints to a
random goal cell, a new one on arrival) drives ``point_maze_<layout>`` in training
mode without goal termination, with Gaussian action noise (``--noise`` half ranges),
recorded by ``robolearn.data.record`` (exact simulator state included) into the
native Minari store as ``point_maze_<layout>-navigate-v0``. The env's own goal
observation is stored but meaningless here: goal-conditioned agents relabel goals
from the states of the data (``policies/goal/relabel.py``).

OGBench's datasets hold 1000 episodes x 1000 steps (1M transitions); the default
here is 500 episodes x 1000 steps (500k transitions, about 25 s per maze on 2 cores).

    python benchmarks/make_maze_datasets.py [--layouts medium large] [--episodes 500] [--steps 1000]

Writes the datasets (``<root>/point_maze_<layout>-navigate-v0``) and no results file;
``hiql_maze.py`` and ``skill_critic_maze.py`` train on them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]  # this checkout's packages, not an installed copy
from common import benchmark_parser  # noqa: E402


def make_dataset(layout: str, episodes: int, steps: int, noise: float, seed: int = 0, num_envs: int = 16,
                 root: Path | None = None, progress: bool = True) -> str:
    """Record ``episodes`` navigator episodes of ``steps`` steps on ``point_maze_<layout>``; returns the dataset id."""
    import sims
    from robolearn.data import DatasetWriter, record
    from sims.tasks.maze_navigator import MazeNavigator

    task = f"point_maze_{layout}"
    kwargs = {"goals": "train", "terminate_at_goal": False, "max_episode_steps": steps}
    with sims.make_env(task, num_envs=num_envs, seed=seed, num_threads=1, **kwargs) as env:
        navigator = MazeNavigator(env.task.grid, num_envs, seed=seed)  # type: ignore[attr-defined]
        metadata = {"task": task, "task_kwargs": kwargs, "controller": "scripted MazeNavigator (BFS waypoints, PD)",
                    "algorithm_name": "scripted-navigate", "source": "benchmarks/make_maze_datasets.py",
                    "noise": noise, "seed": seed, "num_envs": num_envs, "control_dt": env.control_dt,
                    "max_episode_steps": steps, "undirected": True,
                    "state": {"format": "mjSTATE_INTEGRATION", "size": int(env.get_state()["state"].shape[1])}}
        name = f"{task}-navigate"
        with DatasetWriter(name, env.observation_spec, env.action_spec, metadata=metadata, root=root,
                           overwrite=True) as writer:
            record(navigator, env, writer, episodes, noise=noise, seed=seed, progress=progress)
        return writer.id


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--layouts", nargs="+", default=["medium", "large"], help="maze layouts (point_maze_<layout>)")
    parser.add_argument("--episodes", type=int, default=500, help="episodes per maze")
    parser.add_argument("--steps", type=int, default=1000, help="steps per episode")
    parser.add_argument("--noise", type=float, default=0.2, help="Gaussian action noise, in half ranges")
    parser.add_argument("--root", type=Path, help="datasets directory (default: $ROBOLEARN_DATASETS or ~/.robolearn/datasets)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for layout in args.layouts:
        start = time.perf_counter()
        name = make_dataset(layout, args.episodes, args.steps, args.noise, root=args.root)
        print(f"{name}: {args.episodes} episodes x {args.steps} steps in {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
