"""High level or low level: where a trained HIQL (or OTA) fails on the point maze.

HIQL's controller asks its high level for a subgoal representation ``z = pi_h(s, g)`` and
its low level for an action toward ``z``. Here the same trained low level is also driven
by oracle subgoals: ``z = phi([s; w])`` (the value's own goal representation, which is
what the high level is trained to predict) for the waypoint ``w`` = the centre of the
cell ``ahead`` hops further along the shortest path (BFS over the layout) from the
point's cell to the goal's cell, or the goal itself once it is that close. If the low
level reaches the goals with oracle waypoints and not with its own high level, the high
level is what fails; if it fails with both, the low level does.

Success is measured as ``benchmarks/hiql_maze.py`` does (five evaluation pairs, 10
noisy starts each, 500 steps, same evaluation seed), per run. A second table reads where
the high level points: at every free cell's centre ``c`` (at rest) and for every other
free cell as the goal ``g``, its ``z`` is decoded to the cell ``j`` whose ``phi([s; c_j])``
is nearest, and counted as *on a shortest path* when ``j != c`` and
``d(c, j) + d(j, g) = d(c, g)`` (BFS distances in cells; a subgoal behind a wall fails
this), and as *closer* when ``d(j, g) < d(c, g)``, by ``d(c, g)``:

    python benchmarks/hiql_oracle_subgoals.py --layout large --runs RUN_DIR [RUN_DIR ...] [--ahead 1 2 3]

No peer library. Prints both tables as markdown and writes no file; BENCHMARKS.md quotes them in
"Where HIQL fails: its high level, not its low level".
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
from common import benchmark_parser, load_goal_agent  # noqa: E402
from hiql_maze import success_per_goal  # noqa: E402
from ota_advantage_sign import BINS  # noqa: E402


class OracleSubgoals:
    """``act(obs)``: the agent's low level toward the waypoint ``ahead`` cells along the shortest path to the goal
    (the cells and next hops of the data's own waypoint follower, ``MazeNavigator``)."""

    def __init__(self, agent, grid, ahead: int) -> None:
        from sims.tasks.maze_navigator import MazeNavigator

        self.agent, self.ahead, self.maze = agent, ahead, MazeNavigator(grid, num_envs=0)

    @torch.no_grad()
    def act(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        state, goal, maze = obs["policy"], obs["goal"], self.maze
        goal_cell, waypoint = maze.current_cells(goal), maze.current_cells(state[:, :2])
        for _ in range(self.ahead):
            waypoint = maze.hop[goal_cell, waypoint]
        target = torch.where((waypoint == goal_cell)[:, None], goal, maze.centers[waypoint])
        agent = self.agent
        s, w = agent.normalizer(state, target)
        z = agent.value.phi(s, w)
        return agent.scaler(torch.tanh(agent.low(torch.cat([s, z], dim=-1))))


@torch.no_grad()
def pointing(agent, grid, dist: torch.Tensor) -> tuple[list[tuple[float, float, int]], float]:
    """Per distance bin, the fractions of (cell, goal) pairs where the high level's subgoal decodes to a cell on a
    shortest path and to a cell closer to the goal, and the pair count; and how often ``phi([s; c_j])`` decodes
    back to ``j`` (the decoder's own check)."""
    centers = grid.centers().float()
    n = len(centers)
    cell, goal = (x.reshape(-1) for x in torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij"))
    keep = cell != goal
    cell, goal = cell[keep], goal[keep]
    state = torch.cat([centers[cell], torch.zeros(len(cell), 2)], dim=-1)  # at rest at the cell centre
    s, g = agent.normalizer(state, centers[goal])
    z = agent.high(torch.cat([s, g], dim=-1))
    z = z / z.norm(dim=-1, keepdim=True)
    # phi([s; c_j]) for every candidate cell j: (pairs, n, rep_dim)
    s_rep = s[:, None].expand(-1, n, -1).reshape(-1, s.shape[-1])
    _, c = agent.normalizer(state[:, None].expand(-1, n, -1).reshape(-1, state.shape[-1]), centers.repeat(len(cell), 1))
    reps = agent.value.phi(s_rep, c).view(len(cell), n, -1)
    chosen = (reps @ z[:, :, None]).squeeze(-1).argmax(1)
    own = reps[torch.arange(len(cell)), goal]  # phi([s; c_goal]): does it decode to the goal's cell?
    self_decode = (reps @ own[:, :, None]).squeeze(-1).argmax(1)
    d0 = dist[goal, cell]
    on_path = ((chosen != cell) & (dist[chosen, cell] + dist[goal, chosen] == d0)).float()
    closer = (dist[goal, chosen] < d0).float()
    rows = []
    for lo, hi in [*zip(BINS[:-1], BINS[1:]), (0, 1000)]:  # the bins, then all pairs
        m = (d0 >= lo) & (d0 < hi)
        rows.append((float(on_path[m].mean()), float(closer[m].mean()), int(m.sum())))
    return rows, float((self_decode == goal).float().mean())


def main() -> None:
    from sims.tasks.point_maze import MazeGrid

    parser = benchmark_parser(__doc__)
    parser.add_argument("--layout", default="large", help="the maze the runs trained on (point_maze_<layout>)")
    parser.add_argument("--runs", nargs="+", required=True, type=Path,
                        help="trained HIQL or OTA run directories (checkpoints/latest.pt), e.g. hiql_maze.py's "
                             "under /tmp/robolearn-hiql-bench")
    parser.add_argument("--ahead", nargs="+", type=int, default=[1, 2, 3], help="waypoint hops along the path")
    parser.add_argument("--eval-seed", type=int, help="default: the benchmark's (20000 + the run's seed)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    task, grid = f"point_maze_{args.layout}", MazeGrid(args.layout)
    print("| run | high level | " + " | ".join(f"oracle, {k} cell{'s' * (k > 1)} ahead" for k in args.ahead) + " |")
    print("|---|---|" + "---|" * len(args.ahead))
    agents = [load_goal_agent(run, args.layout) for run in args.runs]
    for run, (agent, algo, seed) in zip(args.runs, agents):
        eval_seed = 20_000 + seed if args.eval_seed is None else args.eval_seed
        rates = [success_per_goal(agent.controller().eval(), task, eval_seed)]
        rates += [success_per_goal(OracleSubgoals(agent, grid, k), task, eval_seed) for k in args.ahead]
        print(f"| {algo} seed {seed} ({run.name}) | "
              + " | ".join(f"{100 * r.mean():.0f} ({' / '.join(f'{100 * g:.0f}' for g in r)})" for r in rates) + " |",
              flush=True)
    print("\nSuccess % (per goal pair 1-5), evaluation seeds as benchmarks/hiql_maze.py's.\n")
    dist = torch.as_tensor(grid.hop_distances())
    header = " | ".join(f"d in [{max(lo, 1)}, {hi})" if hi < 1000 else f"d >= {lo}" for lo, hi in zip(BINS[:-1], BINS[1:]))
    print("Subgoal on a shortest path % (closer to the goal %), by the distance d(c, g) in cells:\n")
    print(f"| run | {header} | all | phi decodes to itself |\n|---|" + "---|" * (len(BINS) + 1))
    for run, (agent, algo, seed) in zip(args.runs, agents):
        rows, self_decode = pointing(agent, grid, dist)
        print(f"| {algo} seed {seed} ({run.name}) | " + " | ".join(f"{100 * a:.0f} ({100 * b:.0f}), n={n}" for a, b, n in rows)
              + f" | {100 * self_decode:.0f}% |", flush=True)


if __name__ == "__main__":
    main()
