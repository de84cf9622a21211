"""HRAC against the same agent without the adjacency constraint, on the point and ant mazes.

The task (``configs/hrac_<task>.yaml``): every episode from cell (1, 1) to cell (6, 6) of the
medium maze, reward minus the distance to the goal (HIRO's and HRAC's maze reward), success
(0.25 m for the point, 0.5 m for the ant) ends the episode. (On the point maze a hand-written
straight-line P-controller arrives in 72 steps, sliding along the frictionless walls.) Both
variants are the same run but for ``agent.adjacency`` (true: HRAC; false: HIRO-style
subgoals without off-policy correction, see policies/goal/hrac.py), with the same seeds,
budget, and updates per env step; runs go ``--jobs`` at a time, one torch thread each.

Evaluation: every ``--eval-every`` env steps the deterministic controller runs
``--eval-episodes`` episodes (separate envs, noisy starts); reported: success rate and
return against env steps, the mean distance to the goal over the episodes (minus the return
over the length), the success rate of the last 100 training episodes, mean ± std over seeds,
the paired one-sided tests of HRAC's lead at the last evaluation (t and sign test), and wall-clock per run. HRAC's paper trains 5M steps
on AntMaze; the budget here is what fits a 2-core CPU and is stated. No peer library: HRAC is set against
itself without the constraint. On 2 CPU cores (BENCHMARKS.md) a point-maze run of 80k steps took about 4 min,
an ant-maze run of 300k steps about 18 min.

Writes ``benchmarks/results/hrac_<task><tag>.md``, its plot ``.png`` and every finished run in
``hrac_<task><tag>_runs.jsonl`` (BENCHMARKS.md, "Goal-conditioned online: HRAC vs the same agent without
the adjacency constraint").

    python benchmarks/hrac_maze.py [--task point_maze_medium] [--seeds 0 1 2] [--steps 60000] [--jobs 2]
    python benchmarks/hrac_maze.py --from-runs benchmarks/results/hrac_ant_maze_medium_runs.jsonl  # the report again
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]  # this checkout's packages, not an installed copy
from common import (  # noqa: E402
    RESULTS, benchmark_parser, machine, paired_comparison, pool_runs, read_jsonl, recorded_machine, train_online_with_evals,
    runs_file, write_result)

VARIANTS = {"HRAC": "true", "no adjacency constraint": "false"}


def run(job: dict) -> dict:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        _, curve, total = train_online_with_evals(
            f"hrac_{job['task']}", [f"agent.adjacency={VARIANTS[job['variant']]}", f"runner.utd_ratio={job['utd']}"],
            tmp, job["seed"], job["steps"], job["eval_every"], job["eval_episodes"],
            on_eval=lambda point: print(f"  {job['variant']} seed {job['seed']}: {point['env_steps']} steps, success "
                                        f"{point['success']:.2f}, return {point['return']:.0f}, {point['time']:.0f} s",
                                        flush=True))
    return {**job, "curve": curve, "total_s": total, "machine": machine()}


def table(runs: list[dict], key: str, fmt: str) -> list[str]:
    lines = ["| env steps | " + " | ".join(VARIANTS) + " |", "|---|" + "---|" * len(VARIANTS)]
    steps = [p["env_steps"] for p in runs[0]["curve"]]
    for i, step in enumerate(steps):
        cells = []
        for variant in VARIANTS:
            values = [r["curve"][i][key] for r in runs
                      if r["variant"] == variant and i < len(r["curve"]) and r["curve"][i].get(key) is not None]
            cells.append((fmt + " ± " + fmt).format(np.mean(values), np.std(values)) if values else "")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return lines


def paired_table(runs: list[dict]) -> list[str]:
    """HRAC against the unconstrained agent seed by seed at the last evaluation, with one-sided tests."""
    hrac, other = VARIANTS
    seeds = sorted({r["seed"] for r in runs if r["variant"] == hrac} & {r["seed"] for r in runs if r["variant"] == other})
    if len(seeds) < 2:
        return ["(fewer than 2 seeds with both variants: no paired tests)"]
    last = {(r["variant"], r["seed"]): r["curve"][-1] for r in runs}
    lines = [f"| at the last evaluation | {hrac} per seed | {other} per seed | {hrac} ahead / behind (seeds) "
             "| mean gain ± SE | paired t (one-sided p) | sign test p (one-sided) |", "|---|---|---|---|---|---|---|"]
    for key, name, higher_is_better, fmt in [("train_success", "training success", True, "{:.2f}"),
                                             ("success", "evaluation success", True, "{:.1f}"),
                                             ("mean_distance", "mean distance to goal (m)", False, "{:.1f}")]:
        ours, theirs = ([last[(v, s)][key] for s in seeds] for v in (hrac, other))
        if None in ours + theirs:
            continue
        test = paired_comparison(ours, theirs, higher_is_better)
        t = "n/a (no spread)" if np.isnan(test["t"]) else f"{test['t']:.2f} ({test['t_p']:.3f})"
        lines.append(f"| {name} | {', '.join(fmt.format(v) for v in ours)} | {', '.join(fmt.format(v) for v in theirs)} "
                     f"| {test['ahead']} / {test['behind']} | {fmt.format(test['mean_gain'])} ± {fmt.format(test['se'])} "
                     f"| {t} | {test['sign_p']:.3f} |")
    return lines


def plot(runs: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for variant in VARIANTS:
        mine = [r for r in runs if r["variant"] == variant]
        steps = np.array([p["env_steps"] for p in mine[0]["curve"]])
        for ax, key in zip(axes, ("success", "return")):
            values = np.array([[p[key] for p in r["curve"]] for r in mine])
            ax.plot(steps, values.mean(0), marker="o", markersize=3, label=variant)
            ax.fill_between(steps, values.mean(0) - values.std(0), values.mean(0) + values.std(0), alpha=0.2)
            ax.set_xlabel("env steps")
            ax.set_ylabel(f"evaluation {key}")
            ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def train_all(args: argparse.Namespace, runs_path: Path) -> list[dict]:
    """Every (variant, seed) run, ``args.jobs`` at a time; each run is appended to ``runs_path`` as it ends."""
    jobs = [{"task": args.task, "variant": v, "seed": s, "steps": args.steps, "utd": args.utd,
             "eval_every": args.eval_every, "eval_episodes": args.eval_episodes} for s in args.seeds for v in VARIANTS]
    runs = []
    for out in pool_runs(run, jobs, args.jobs, runs_path):
        runs.append(out)
        last = out["curve"][-1]
        print(f"{out['variant']:24s} seed {out['seed']}: success {last['success']:.2f}, return {last['return']:.0f} "
              f"at {last['env_steps']} steps, {out['total_s']:.0f} s", flush=True)
    return runs


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--task", default="point_maze_medium", choices=["point_maze_medium", "ant_maze_medium"],
                        help="the maze (configs/hrac_<task>.yaml)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="seeds; each runs both variants")
    parser.add_argument("--steps", type=int, default=60_000, help="env steps per run")
    parser.add_argument("--utd", type=float, default=0.5, help="updates per env step (both variants)")
    parser.add_argument("--eval-every", type=int, default=10_000, help="env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10, help="deterministic episodes per evaluation")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time, one torch thread each")
    parser.add_argument("--tag", default="", help="appended to the result files' names (hrac_<task><tag>.md)")
    parser.add_argument("--from-runs", type=runs_file, help="rebuild the report from a runs jsonl file instead of training "
                        "(its runs set the task, seeds and budget)")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.from_runs:
        runs = read_jsonl(args.from_runs)
        if not runs:
            raise SystemExit(f"{args.from_runs} holds no runs")
        first = runs[0]
        args.task, args.steps, args.utd = first["task"], first["steps"], first["utd"]
        args.eval_every, args.eval_episodes = first["eval_every"], first["eval_episodes"]
        args.seeds = sorted({r["seed"] for r in runs})
        timing = f"Rebuilt from `{args.from_runs.name}`; {max(r['total_s'] for r in runs) / 60:.1f} min for the longest run."
    else:
        runs = train_all(args, RESULTS / f"hrac_{args.task}{args.tag}_runs.jsonl")
        timing = (f"{args.jobs} run(s) at a time, one torch thread and one physics thread each. "
                  f"Whole benchmark: {(time.perf_counter() - start) / 60:.1f} min.")
    stem = f"hrac_{args.task}{args.tag}"  # after --from-runs has set the task
    runs.sort(key=lambda r: (r["variant"], r["seed"]))
    for r in runs:
        for point in r["curve"]:  # both configs reward minus the distance to the goal at every step
            point["mean_distance"] = -point["return"] / point["length"]
    title = f"{args.task}, cell (1, 1) -> (6, 6), {len(args.seeds)} seeds"
    plot(runs, RESULTS / f"{stem}.png", title)
    lines = [f"# HRAC vs the same agent without the adjacency constraint: {args.task}", "",
             f"`python benchmarks/hrac_maze.py {' '.join(sys.argv[1:])}`", "",
             f"Machine: {'; '.join(dict.fromkeys(map(recorded_machine, runs)))}; {timing}", "",
             f"Task: `{args.task}` (configs/hrac_{args.task}.yaml): cell (1, 1) to cell (6, 6), reward minus the "
             f"distance to the goal, success ends the episode; 10 envs. Budget: {args.steps} env steps per run "
             f"(HRAC's paper: 5M on AntMaze), {args.utd} updates per env step (a high-level update every "
             f"subgoal period of low-level ones). Evaluation: {args.eval_episodes} deterministic episodes every "
             f"{args.eval_every} env steps; mean ± std over seeds {args.seeds}.", "",
             "Evaluation success rate:", "", *table(runs, "success", "{:.2f}"), "",
             "Evaluation return:", "", *table(runs, "return", "{:.0f}"), "",
             "Mean distance to the goal over the evaluation episodes (m; minus the return over the length):", "",
             *table(runs, "mean_distance", "{:.1f}"), "",
             "Training success rate (the last 100 finished training episodes, exploration noise on; "
             "steadier than 10 evaluation episodes):", "", *table(runs, "train_success", "{:.2f}"), "",
             "| variant | final success per seed | final return per seed | wall-clock per run (s) |", "|---|---|---|---|"]
    for variant in VARIANTS:
        mine = [r for r in runs if r["variant"] == variant]
        success = ", ".join(f"{r['curve'][-1]['success']:.1f}" for r in mine)
        returns = ", ".join(f"{r['curve'][-1]['return']:.0f}" for r in mine)
        lines.append(f"| {variant} | {success} | {returns} | {np.mean([r['total_s'] for r in mine]):.0f} |")
    lines += ["", f"Paired over seeds {args.seeds} (gain: {list(VARIANTS)[0]}'s advantage, so lower distance counts as "
              "gain; the sign test leaves ties out and cannot go below 0.5^seeds):", "", *paired_table(runs)]
    lines += ["", f"![success and return vs env steps]({stem}.png)", "", f"Per-run curves: `{args.from_runs.name if args.from_runs else stem + '_runs.jsonl'}`."]
    write_result(f"{stem}.md", "\n".join(lines))


if __name__ == "__main__":
    main()
