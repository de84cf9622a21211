"""HIQL against flat GCIQL and GCBC (and OTA, ``--algos ota hiql``) on the undirected point-maze datasets.

Same dataset (``benchmarks/make_maze_datasets.py``: ``point_maze_<layout>-navigate``),
same number of gradient updates, same networks (LayerNorm MLPs) and batch for the
three agents, each trained by the offline runner from ``configs/<algo>_point_maze_<layout>.yaml``
with one torch thread. Evaluation: the final controller on the maze's five
evaluation (start, goal) pairs, ``EPISODES_PER_GOAL`` episodes each (noisy starts),
success = within 0.25 m of the goal before 500 steps. Reported: success rate
mean ± std over seeds (each seed's rate averaged over the five goals), per-goal
rates, and the wall-clock of training (updates only) and of the whole run. For the hierarchical
agents also, at each evaluation: how often the high level's advantage has the right sign
(``ota_advantage_sign.py``, OTA's diagnostic), for each value network the agent has.
Runs go ``--jobs`` at a time (one torch thread each); each finished run is
appended to ``benchmarks/results/<out stem>_runs.jsonl``, so a cut-short benchmark keeps
what it finished, and the table is rewritten to ``benchmarks/results/<out>`` after each
(BENCHMARKS.md, "Goal-conditioned: HIQL vs GCIQL vs GCBC on point mazes"). No peer library
runs here; BENCHMARKS.md sets the rates beside the HIQL and OGBench papers'.

The paper's budget (1M updates, MLP 512x3, batch 1024) does not fit 2 shared CPU
cores; the default here is ``--updates 6000`` with a 256x2 MLP and batch 256: on those cores
(BENCHMARKS.md) about 2.5 min per HIQL run, 1 min per GCIQL run and 20 s per GCBC run.

    python benchmarks/hiql_maze.py [--layouts medium] [--seeds 3] [--updates 6000] [--out hiql_maze.md]
    python benchmarks/hiql_maze.py --layouts large --algos ota hiql --out hiql_maze_ota.md  # OTA vs HIQL
    python benchmarks/hiql_maze.py --layouts large --algos ota hiql --overrides agent.high_beta=3 ota:agent.option_steps=3
    python benchmarks/hiql_maze.py --layouts large --algos ota hiql --updates 20000 --jobs 2  # both cores
    python benchmarks/hiql_maze.py --layouts large --algos ota hiql --updates 50000 --eval-every 5000  # success vs updates
    python benchmarks/hiql_maze.py --from-runs benchmarks/results/hiql_maze_target_fix_runs.jsonl  # the table again
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]  # this checkout's packages, not an installed copy
from common import (  # noqa: E402
    RESULTS, benchmark_parser, machine, pool_runs, read_jsonl, recorded_machine, runs_file, train_offline, write_result)
from ota_advantage_sign import VALUES, bin_names, sign_agreement  # noqa: E402

ALGOS = ("hiql", "gciql", "gcbc")  # also: "ota" (configs/ota_point_maze_<layout>.yaml)
EPISODES_PER_GOAL = 10


@torch.no_grad()
def success_per_goal(controller: torch.nn.Module, task: str, seed: int) -> np.ndarray:
    """Success rate of each of the 5 evaluation pairs (world w runs pair w % 5)."""
    import sims

    with sims.make_env(task, num_envs=5 * EPISODES_PER_GOAL, seed=seed, num_threads=1, goals="eval") as env:
        obs, done, success = env.reset(seed=seed), torch.zeros(env.num_envs, dtype=torch.bool), torch.zeros(env.num_envs)
        while not done.all():
            step = env.step(controller.act(obs))
            ended = (step.terminated | step.truncated) & ~done
            success[ended] = step.info["success"][ended].float()
            done |= ended
            obs = step.obs
    return success.view(EPISODES_PER_GOAL, 5).mean(0).numpy()


def run(job: dict) -> dict:
    """Train one (algo, layout, seed) with one torch thread and evaluate it; a job is a dict so a process pool can send it."""
    from sims.tasks.point_maze import MazeGrid

    torch.set_num_threads(1)
    start = time.perf_counter()
    task, eval_seed, curve, signs = f"point_maze_{job['layout']}", 20_000 + job["seed"], [], []
    grid = MazeGrid(job["layout"])

    def evaluate_every(runner) -> None:
        """Success of the controller so far, every ``eval_every`` updates; training's random stream untouched."""
        updates = runner.progress.updates
        if job["eval_every"] and updates % job["eval_every"] == 0 and updates < job["updates"]:
            rng = torch.get_rng_state()
            curve.append((updates, float(success_per_goal(runner.agent.controller().eval(), task, eval_seed).mean())))
            torch.set_rng_state(rng)
            signs.append((updates, sign_agreement(runner.agent, grid)))
            print(f"{job['algo']} seed {job['seed']}: {updates} updates, success {curve[-1][1]:.2f}", flush=True)

    runner, train_s = train_offline(f"{job['algo']}_{task}",
                                    [f"seed={job['seed']}", f"runner.total_steps={job['updates']}", *job["overrides"]],
                                    "/tmp/robolearn-hiql-bench", after_iteration=evaluate_every)
    per_goal = success_per_goal(runner.agent.controller().eval(), task, eval_seed)
    curve.append((job["updates"], float(per_goal.mean())))
    signs.append((job["updates"], sign_agreement(runner.agent, grid)))
    return {**job, "success": float(per_goal.mean()), "per_goal": per_goal.tolist(), "curve": curve, "signs": signs,
            "train_s": train_s, "total_s": time.perf_counter() - start, "machine": machine(),
            "dataset_size": dataset_size(job["layout"])}


def overrides_for(algo: str, overrides: list[str]) -> list[str]:
    """The overrides that apply to ``algo``: unprefixed ones, and ``<algo>:key=value`` without its prefix."""
    chosen = []
    for item in overrides:
        target, sep, rest = item.partition(":")
        if not sep or "=" in target:  # no algo prefix (a ':' after '=' belongs to the value)
            chosen.append(item)
        elif target == algo:
            chosen.append(rest)
    return chosen


def dataset_size(layout: str) -> str:
    """``<episodes> episodes x <steps per episode> steps`` of the layout's navigate dataset, read from its metadata."""
    from robolearn.data.minari_store import dataset_dir, read_metadata

    meta = read_metadata(dataset_dir(f"point_maze_{layout}-navigate"))
    return f"{meta['total_episodes']} episodes x {meta['total_steps'] // meta['total_episodes']} steps"


def recorded_size(results: dict[tuple[str, str], list[dict]], layout: str) -> str:
    """The dataset size the runs of ``layout`` recorded; for runs from before it was recorded, the dataset here now,
    said so (it may have been made again at another size since)."""
    sizes = {r["dataset_size"] for (lay, _), rows in results.items() if lay == layout for r in rows if "dataset_size" in r}
    if sizes:
        return " / ".join(sorted(sizes))
    try:
        return f"{dataset_size(layout)} (the dataset here now: the runs did not record theirs)"
    except (OSError, KeyError, ValueError):  # (robolearn's DatasetError is a ValueError) no dataset here to read
        return "not recorded by the runs"


def table(results: dict[tuple[str, str], list[dict]], args: argparse.Namespace) -> str:
    title = " vs ".join(algo.upper() for algo in args.algos)
    sizes = ", ".join(f"{layout} {recorded_size(results, layout)}" for layout in args.layouts)
    machines = list(dict.fromkeys(recorded_machine(r) for rows in results.values() for r in rows))
    lines = [f"### {title} on the point maze (undirected navigate data, made here)", "",
             f"{machines_line(results, machines)}; one torch thread per run. Budget: {args.updates:,} gradient updates per run, "
             f"MLP {'as overridden below' if any('agent.hidden=' in o for o in args.overrides) else '256x2'} "
             "with LayerNorm, batch 256, lr 3e-4 (paper: 1M updates, MLP 512x3, batch 1024), "
             f"seeds {args.seed_list}. Datasets ({sizes}) of the noisy BFS navigator "
             "(OGBench: 1000 x 1000). Success over the 5 evaluation goal pairs, "
             f"{EPISODES_PER_GOAL} episodes each, mean ± std over seeds."
             + (f" Overrides: `{' '.join(args.overrides)}`." if args.overrides else ""), "",
             "| maze | algorithm | success rate | per seed | per goal (mean over seeds) | train s / run | total s / run |",
             "|---|---|---|---|---|---|---|"]
    for (layout, algo), rows in results.items():
        rates = np.array([r["success"] for r in rows])
        goals = np.mean([r["per_goal"] for r in rows], axis=0)
        lines.append(f"| {layout} | {algo} | {100 * rates.mean():.1f} ± {100 * rates.std():.1f} (n={len(rows)}) | "
                     + " / ".join(f"{100 * r:.0f}" for r in rates) + " | "
                     + " / ".join(f"{100 * g:.0f}" for g in goals)
                     + f" | {per_machine(rows, 'train_s', machines)} | {per_machine(rows, 'total_s', machines)} |")
    return "\n".join(lines + curve_table(results) + sign_table(results))


def machines_line(results: dict[tuple[str, str], list[dict]], machines: list[str]) -> str:
    """The machine the runs ran on; where seeds added later ran on another, each numbered with its runs."""
    if len(machines) == 1:
        return f"Machine: {machines[0]}"
    runs = [[f"{algo} seeds {[r['seed'] for r in rows if recorded_machine(r) == m]}"
             for (_, algo), rows in results.items() if any(recorded_machine(r) == m for r in rows)] for m in machines]
    return "Machines (seconds below per machine, in this order): " + "; ".join(
        f"[{k}] {m} ({', '.join(r)})" for k, (m, r) in enumerate(zip(machines, runs), 1))


def per_machine(rows: list[dict], key: str, machines: list[str]) -> str:
    """Mean of ``key`` over the rows, separately for each machine they ran on (seconds differ between machines)."""
    means = [(k, [r[key] for r in rows if recorded_machine(r) == m]) for k, m in enumerate(machines, 1)]
    means = [(k, values) for k, values in means if values]
    if len(means) == 1:
        return f"{np.mean(means[0][1]):.0f}"
    return " / ".join(f"{np.mean(values):.0f} [{k}]" for k, values in means)


def curve_table(results: dict[tuple[str, str], list[dict]]) -> list[str]:
    """Success against updates within each run (``--eval-every``): mean ± std over seeds at each point."""
    curves = {key: [dict(r["curve"]) for r in rows] for key, rows in results.items() if len(rows[0].get("curve", [])) > 1}
    if not curves:
        return []
    points = sorted({u for runs in curves.values() for run in runs for u in run})
    lines = ["", "Success rate (%) against gradient updates, evaluated during each run (mean ± std over seeds); "
             "last 3: each run's mean over its last three evaluations (less noisy than its final one alone), then over seeds:", "",
             "| maze | algorithm | " + " | ".join(f"{u // 1000}k" for u in points) + " | last 3 |",
             "|---|---|" + "---|" * (len(points) + 1)]

    def cell(values: list[float]) -> str:
        return f"{100 * np.mean(values):.0f} ± {100 * np.std(values):.0f}" if values else ""

    for (layout, algo), runs in curves.items():
        cells = [cell([run[u] for run in runs if u in run]) for u in points]
        cells.append(cell([np.mean([run[u] for u in sorted(run)[-3:]]) for run in runs]))
        lines.append(f"| {layout} | {algo} | " + " | ".join(cells) + " |")
    return lines


def sign_table(results: dict[tuple[str, str], list[dict]]) -> list[str]:
    """How often each value's high-level advantage has the right sign (``ota_advantage_sign``), by distance to the
    goal, at each evaluation: mean over the seeds that measured it."""
    lines = []
    for (layout, algo), rows in results.items():
        runs = [dict(r["signs"]) for r in rows if r.get("signs") and r["signs"][-1][1]]
        for name in VALUES:
            for u in sorted({u for run in runs for u in run if name in run[u]}):
                at = [run[u] for run in runs if u in run and name in run[u]]
                cells = [f"{100 * np.nanmean([a[name][b] for a in at]):.0f}" for b in range(len(bin_names()))]
                lines.append(f"| {layout} | {algo} | {name} | {u // 1000}k | {len(at)} | " + " | ".join(cells) + " |")
    if not lines:
        return []
    return ["", "High-level advantage with the right sign (%; `benchmarks/ota_advantage_sign.py`): the high level's "
            "training pairs (s_t, s_{t+k}) and goals g, sign of V(s_{t+k}, g) - V(s_t, g) against the shortest-path "
            "progress in maze cells, by the distance d(s_t, g) in cells; mean over the seeds that measured it:", "",
            f"| maze | algorithm | value | updates | n | {' | '.join(bin_names())} |",
            "|---|---|---|---|---|" + "---|" * len(bin_names()), *lines]


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--layouts", nargs="+", default=["medium"],
                        help="maze layouts (medium, large); each needs its point_maze_<layout>-navigate dataset")
    parser.add_argument("--algos", nargs="+", default=list(ALGOS),
                        help="agents, each from configs/<algo>_point_maze_<layout>.yaml; also: ota")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per layout and agent, from --first-seed on")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1; "
                        "above 0, runs are appended to --out's runs file and the table holds all of them "
                        "(more seeds for an earlier benchmark)")
    parser.add_argument("--updates", type=int, default=6000, help="gradient updates per run")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time, one torch thread each")
    parser.add_argument("--eval-every", type=int, default=0,
                        help="also evaluate every N updates (a multiple of 1000): success against updates in one run")
    parser.add_argument("--out", default="hiql_maze.md", help="file under benchmarks/results/")
    parser.add_argument("--overrides", nargs="*", default=[],
                        help="config overrides for every agent, e.g. agent.high_beta=3; "
                             "prefix one with '<algo>:' to give it to that agent only, e.g. ota:agent.option_steps=3")
    parser.add_argument("--from-runs", type=runs_file, help="rebuild the table from a runs jsonl file instead of training "
                        "(written to the file the runs came from unless --out is given)")
    args = parser.parse_args()
    if args.from_runs:
        write_table(args.from_runs, args.out if args.out != parser.get_default("out")
                    else args.from_runs.name.removesuffix("_runs.jsonl") + ".md")
        return
    # seed-major: a cut-short benchmark still compares the algorithms
    jobs = [{"algo": algo, "layout": layout, "seed": seed, "updates": args.updates, "eval_every": args.eval_every,
             "overrides": overrides_for(algo, args.overrides)}
            for layout in args.layouts for seed in range(args.first_seed, args.first_seed + args.seeds)
            for algo in args.algos]
    start = time.perf_counter()
    runs_path = RESULTS / f"{Path(args.out).stem}_runs.jsonl"
    for row in pool_runs(run, jobs, args.jobs, runs_path, append=args.first_seed > 0):
        print(f"{row['layout']} {row['algo']} seed {row['seed']}: success {row['success']:.2f} {row['per_goal']} "
              f"train {row['train_s']:.0f} s total {row['total_s']:.0f} s", flush=True)
        write_table(runs_path, args.out, f"Benchmark wall-clock so far: {time.perf_counter() - start:.0f} s.")


def write_table(runs_path: Path, out: str, footer: str | None = None) -> None:
    """The table of every run in ``runs_path`` (its runs set the layouts, algorithms, budget, seeds and overrides),
    so a benchmark appending seeds to an earlier one tables them all. ``footer`` None: says it was rebuilt."""
    runs = read_jsonl(runs_path)
    if not runs:
        raise SystemExit(f"{runs_path} holds no runs")
    per_algo = {r["algo"]: " ".join(r["overrides"]) for r in runs if r["overrides"]}
    spec = argparse.Namespace(
        layouts=list(dict.fromkeys(r["layout"] for r in runs)), algos=list(dict.fromkeys(r["algo"] for r in runs)),
        updates=runs[0]["updates"], seed_list=sorted({r["seed"] for r in runs}),
        overrides=["; ".join(f"{algo}: {overrides}" for algo, overrides in per_algo.items())] if per_algo else [])
    results = {(layout, algo): sorted((r for r in runs if (r["layout"], r["algo"]) == (layout, algo)), key=lambda r: r["seed"])
               for layout in spec.layouts for algo in spec.algos}
    footer = footer or f"Rebuilt from `{runs_path.name}`; the longest run took {max(r['total_s'] for r in runs):.0f} s."
    write_result(out, table({k: v for k, v in results.items() if v}, spec) + f"\n\n{footer}")


if __name__ == "__main__":
    main()
