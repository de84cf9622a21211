"""How often the high level's advantage has the right sign: HIQL's value against OTA's option-aware one.

OTA's motivation (Ahn et al. 2025) is that far from the goal HIQL's value gives the high
policy an advantage ``V(s_{t+k}, g) - V(s_t, g)`` of the wrong sign. On minibatches drawn
as the high policy's are (actor goals uniform over later states of the trajectory,
target ``k`` = 25 steps later, or the goal when that is closer), the true sign is that of the shortest-path progress in
maze cells ``d(s_t, g) - d(s_{t+k}, g)`` (BFS over the layout, ``MazeGrid.hop_distances``; pairs without
progress are left out). Reported per bin of ``d(s_t, g)``: the fraction of pairs whose advantage
has that sign, for each value network the agent has: HIQL's one-step ``value``, and for OTA also
its option-aware ``high_value``, the one its high level uses (``value`` is trained the same way in both
agents, so an OTA run compares the two on the same data). ``benchmarks/hiql_maze.py`` records it at
every evaluation of a run; this command reads trained checkpoints (``checkpoints/latest.pt`` of offline
runs, e.g. those benchmarks/hiql_maze.py leaves under /tmp/robolearn-hiql-bench).

    python benchmarks/ota_advantage_sign.py --layout large --runs RUN_DIR [RUN_DIR ...]

No peer library. Prints the table as markdown and writes no file; BENCHMARKS.md quotes it in
"OTA vs HIQL on the large point maze".
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

BINS = (0, 4, 8, 12, 16, 1000)  # shortest-path distance d(s_t, g) in maze cells
VALUES = ("value", "high_value")  # HIQL's one-step value; OTA's option-aware value


@torch.no_grad()
def sign_agreement(agent, grid, batches: int = 32, seed: int = 0) -> dict[str, list[float]]:
    """For each value network of ``agent``: the fraction of pairs whose advantage has the right sign, per bin of
    ``BINS`` and then over all pairs; ``"pairs"``: how many pairs each of those counts. ``batches`` minibatches of
    1024 drawn from ``seed``, the global random stream left as it was. Empty for an agent without a high level."""
    if not agent.subgoal_steps:
        return {}
    values = {name: value for name in VALUES if (value := getattr(agent, name, None)) is not None}
    dist = torch.as_tensor(grid.hop_distances())
    d0s, rights = [], {name: [] for name in values}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(batches):
            b = agent.sample(1024)
            c0, ck, cg = (grid.cells_of(x[:, : agent.goal_dim]) for x in (b["obs"], b["high_target_obs"], b["actor_goal"]))
            d_start = dist[cg, c0]
            progress = d_start - dist[cg, ck]
            keep = progress != 0
            s, g = agent.normalizer(b["obs"], b["actor_goal"])
            s_k, _ = agent.normalizer(b["high_target_obs"], b["actor_goal"])
            d0s.append(d_start[keep])
            for name, value in values.items():
                advantage = value(s_k, g).mean(0) - value(s, g).mean(0)  # the high level's A_h with this value
                rights[name].append(torch.sign(advantage[keep]) == torch.sign(progress[keep].float()))
    d0 = torch.cat(d0s)
    bins = [(d0 >= lo) & (d0 < hi) for lo, hi in zip(BINS[:-1], BINS[1:])] + [torch.ones_like(d0, dtype=torch.bool)]
    result = {"pairs": [float(m.sum()) for m in bins]}
    for name, right in rights.items():
        right = torch.cat(right).float()
        result[name] = [float(right[m].mean()) if m.any() else float("nan") for m in bins]
    return result


def bin_names() -> list[str]:
    return [f"d in [{lo}, {hi})" if hi < 1000 else f"d >= {lo}" for lo, hi in zip(BINS[:-1], BINS[1:])] + ["all"]


def main() -> None:
    from common import benchmark_parser, load_goal_agent
    from sims.tasks.point_maze import MazeGrid

    parser = benchmark_parser(__doc__)
    parser.add_argument("--layout", default="large", help="the maze the runs trained on (point_maze_<layout>)")
    parser.add_argument("--runs", nargs="+", required=True, type=Path,
                        help="trained HIQL or OTA run directories (checkpoints/latest.pt)")
    parser.add_argument("--batches", type=int, default=8, help="minibatches of 1024 pairs drawn per run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    grid = MazeGrid(args.layout)
    print(f"| run | value | {' | '.join(bin_names())} |\n|---|---|" + "---|" * len(BINS))
    for run in args.runs:
        agent, algo, seed = load_goal_agent(run, args.layout)
        result = sign_agreement(agent, grid, args.batches, seed=0)
        for name in VALUES:
            if name in result:
                print(f"| {algo} seed {seed} | {name} | "
                      + " | ".join(f"{100 * r:.0f}% (n={n:.0f})" for r, n in zip(result[name], result["pairs"])) + " |",
                      flush=True)


if __name__ == "__main__":
    main()
