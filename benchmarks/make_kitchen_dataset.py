"""Noisy kitchen demonstrations where no episode does every sub-task (D4RL's ``kitchen-mixed`` kind), made here.

The scripted :class:`sims.tasks.kitchen_demonstrator.KitchenDemonstrator` drives
``kitchen`` (all four sub-tasks rewarded, so each demonstration earns one reward
per sub-task it does), each episode completing a random ordered ``--plan``
sub-tasks of the four (3: 24 orders), then returning home and holding still
until the episode is truncated after ``--steps`` steps. Gaussian action noise
(``--noise`` half ranges) is added by ``robolearn.data.record`` (exact
simulator state included), which stores the episodes in the native Minari
format as ``kitchen-mixed-v0``.

Why this mix: as in D4RL's ``kitchen-mixed``, every sub-task and every
transition from one to another appears in the data, but the online task
(``configs/spirl_kitchen.yaml``: all four in one episode) never does, so an
agent must recombine skills learned from pieces.

D4RL's ``kitchen-mixed`` holds about 136k transitions; the default here is 400
episodes x 200 steps (80k transitions; the plans take 120 to 170 steps with
noise 0.2), about 15 s on 2 cores and 100 MB on disk (mostly the exact simulator
states).

    python benchmarks/make_kitchen_dataset.py [--episodes 400] [--steps 200] [--plan 3] [--noise 0.2]

Writes the dataset (``<root>/<name>-v0``) and no results file; ``skill_critic_maze.py --layout kitchen``
trains on it (BENCHMARKS.md, "The kitchen: skills that must recombine").
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]  # this checkout's packages, not an installed copy
from common import benchmark_parser  # noqa: E402


def make_dataset(episodes: int, steps: int, plan: int, noise: float, seed: int = 0, num_envs: int = 16,
                 root: Path | None = None, name: str = "kitchen-mixed", progress: bool = True) -> str:
    """Record ``episodes`` demonstrations of ``steps`` steps, each of ``plan`` sub-tasks; returns the dataset id."""
    import sims
    from robolearn.data import DatasetWriter, record
    from sims.tasks.kitchen_demonstrator import KitchenDemonstrator

    kwargs = {"max_episode_steps": steps}
    with sims.make_env("kitchen", num_envs=num_envs, seed=seed, num_threads=1, **kwargs) as env:
        demonstrator = KitchenDemonstrator(num_envs, plan_length=plan, seed=seed)
        metadata = {"task": "kitchen", "task_kwargs": kwargs,
                    "controller": f"scripted KitchenDemonstrator ({plan} sub-tasks per episode in random orders)",
                    "algorithm_name": "scripted-mixed", "source": "benchmarks/make_kitchen_dataset.py",
                    "noise": noise, "seed": seed, "num_envs": num_envs, "control_dt": env.control_dt,
                    "max_episode_steps": steps, "sub_tasks_per_episode": plan,
                    "state": {"format": "mjSTATE_INTEGRATION", "size": int(env.get_state()["state"].shape[1])}}
        with DatasetWriter(name, env.observation_spec, env.action_spec, metadata=metadata, root=root,
                           overwrite=True) as writer:
            stats = record(demonstrator, env, writer, episodes, noise=noise, seed=seed, progress=progress)
        returns = torch.tensor(stats.returns)
        print(f"{writer.id}: sub-tasks done per episode (mean) {returns.mean():.2f}, "
              f"all {plan} in {float((returns >= plan).float().mean()):.1%} of episodes", flush=True)
        return writer.id


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--episodes", type=int, default=400, help="demonstrations to record")
    parser.add_argument("--steps", type=int, default=200, help="steps per episode")
    parser.add_argument("--plan", type=int, default=3, help="sub-tasks per demonstration (of 4)")
    parser.add_argument("--noise", type=float, default=0.2, help="Gaussian action noise, in half ranges")
    parser.add_argument("--name", default="kitchen-mixed", help="the dataset's name (stored as <name>-v0)")
    parser.add_argument("--root", type=Path, help="datasets directory (default: $ROBOLEARN_DATASETS or ~/.robolearn/datasets)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    name = make_dataset(args.episodes, args.steps, args.plan, args.noise, root=args.root, name=args.name)
    print(f"{name}: {args.episodes} episodes x {args.steps} steps in {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
