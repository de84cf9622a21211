"""How often the high level's advantage has the right sign: HIQL's value against OTA's option-aware one.

OTA's motivation (Ahn et al. 2025) is that far from the goal HIQL's value gives the high
policy an advantage ``V(s_{t+k}, g) - V(s_t, g)`` of the wrong sign. On minibatches drawn
as the high policy's are (actor goals uniform over later states of the trajectory,
target ``k`` = 25 steps later, or the goal when that is closer), the true sign is that of the shortest-path progress in
maze cells ``d(s_t, g) - d(s_{t+k}, g)`` (BFS over the layout; pairs without progress
are left out). Reported per bin of ``d(s_t, g)``: the fraction of pairs whose advantage
has that sign, for trained checkpoints (``checkpoints/latest.pt`` of offline runs, e.g.
those benchmarks/hiql_maze.py leaves under /tmp/robolearn-hiql-bench).

    python benchmarks/ota_advantage_sign.py --layout large --runs RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

BINS = (0, 4, 8, 12, 16, 1000)  # shortest-path distance d(s_t, g) in maze cells


def cell_distances(grid) -> np.ndarray:
    """``dist[a, b]``: shortest path length in cells between free cells ``a`` and ``b``."""
    n, hop = len(grid.free), grid.next_hop
    dist = np.zeros((n, n), dtype=np.int64)
    for g in range(n):
        for c in range(n):
            k, steps = c, 0
            while k != g:
                k, steps = hop[g, k], steps + 1
            dist[g, c] = steps
    return dist


@torch.no_grad()
def sign_agreement(run: Path, layout: str, batches: int, seed: int) -> tuple[str, list[tuple[float, int]]]:
    from common import load_goal_agent
    from sims.tasks.maze_navigator import MazeNavigator
    from sims.tasks.point_maze import MazeGrid

    agent, algo, run_seed = load_goal_agent(run, layout)
    grid = MazeGrid(layout)
    dist, maze = torch.as_tensor(cell_distances(grid)), MazeNavigator(grid, num_envs=0)
    torch.manual_seed(seed)
    d0s, goods = [], []
    for _ in range(batches):
        b = agent.sample(1024)
        cell = maze.current_cells
        c0, ck, cg = cell(b["obs"][:, :2]), cell(b["high_target_obs"][:, :2]), cell(b["actor_goal"])
        progress = dist[cg, c0] - dist[cg, ck]
        s, g = agent.normalizer(b["obs"], b["actor_goal"])
        s_k, _ = agent.normalizer(b["high_target_obs"], b["actor_goal"])
        adv = agent.high_advantage(s, s_k, g)
        keep = progress != 0
        d0s.append(dist[cg, c0][keep])
        goods.append((torch.sign(adv[keep]) == torch.sign(progress[keep].float())))
    d0, good = torch.cat(d0s), torch.cat(goods).float()
    rows = []
    for lo, hi in zip(BINS[:-1], BINS[1:]):
        m = (d0 >= lo) & (d0 < hi)
        rows.append((float(good[m].mean()) if m.any() else float("nan"), int(m.sum())))
    rows.append((float(good.mean()), len(good)))
    return f"{algo} seed {run_seed}", rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layout", default="large")
    parser.add_argument("--runs", nargs="+", required=True, type=Path)
    parser.add_argument("--batches", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    header = " | ".join(f"d in [{lo}, {hi})" if hi < 1000 else f"d >= {lo}" for lo, hi in zip(BINS[:-1], BINS[1:]))
    print(f"| run | {header} | all |\n|---|" + "---|" * len(BINS))
    for run in args.runs:
        name, rows = sign_agreement(run, args.layout, args.batches, seed=0)
        print(f"| {name} | " + " | ".join(f"{100 * r:.0f}% (n={n})" for r, n in rows) + " |", flush=True)


if __name__ == "__main__":
    main()
