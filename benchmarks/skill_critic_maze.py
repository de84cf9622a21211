"""Skill-Critic against SPiRL and flat SAC on the sparse point maze, at equal online budget.

The task (``configs/<algo>_point_maze_<layout>.yaml``): the medium maze, every episode from
cell (1, 1) to cell (6, 6) (10 cells of corridors; ``--layout large``: the large maze from
(5, 4) to (7, 1), 19 cells), 500 steps, reward 1 on arrival (the episode ends there), else 0.
SPiRL and Skill-Critic learn their skills from the undirected noisy navigation dataset
(``benchmarks/make_maze_datasets.py``: ``point_maze_<layout>-navigate``)
in the same run (``agent.pretrain_updates``), then train online; flat SAC has no data and
no skills. Every algorithm gets the same online env steps on the same number of envs, one
torch thread each, runs one after another (``--jobs`` at a time). ``--layout kitchen``: the same
comparison on the kitchen (``configs/<algo>_kitchen.yaml``, skills from ``kitchen-mixed``,
``benchmarks/make_kitchen_dataset.py``).

Evaluation: every ``--eval-every`` online env steps the deterministic controller (mean
skill, mean action) runs ``--eval-episodes`` episodes (noisy starts); reported: success
rate and return (= success, the reward being 1 at the goal) against online steps, mean ±
std over seeds, plus the pretrained controller's (the prior's mean skill played by the
decoder) at step 0, and wall-clock per run split into pretraining and online training.

The papers' budgets (SPiRL: ~100k skill-model updates, then millions of env steps; Skill-Critic
likewise) do not fit one CPU core in an hour; the defaults are shortened and stated in the
results file. On the medium maze (BENCHMARKS.md, one core per run) a run took about 95 s of skill
pretraining, then 1.5 min (SPiRL) or 2.5 min (Skill-Critic) online; flat SAC 1.8 min. No peer library.

Writes ``benchmarks/results/<--out>``, its plot ``.png`` and every finished run in ``<out stem>_runs.jsonl``
(BENCHMARKS.md, "Skill controllers: Skill-Critic vs SPiRL vs flat SAC on the sparse point maze").

    python benchmarks/skill_critic_maze.py [--layout medium] [--seeds 0 1 2] [--online-steps 50000]
                                           [--pretrain-updates 8000]
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
    RESULTS, benchmark_parser, machine, pool_runs, read_jsonl, runs_file, train_online_with_evals, write_result)

ALGOS = ("skill_critic", "spirl", "sac")
NAMES = {"skill_critic": "Skill-Critic", "spirl": "SPiRL", "sac": "SAC (flat)"}
PAIRS = {"medium": 0, "large": 1}  # the farthest evaluation pair of each maze (configs/<algo>_point_maze_<layout>.yaml)
TASKS = {"medium": "start cell (1, 1), goal cell (6, 6): 10 cells of corridors",
         "large": "start cell (5, 4), goal cell (7, 1): 19 cells of corridors"}


def run(algo: str, seed: int, args: argparse.Namespace, run_dir: Path) -> dict:
    """One training run; returns its evaluation curve and timings."""
    from robolearn.evaluate import evaluate
    from robolearn.export import ExportedController
    from robolearn.logger import read_metrics
    from robolearn.registry import make_env

    overrides = [f"runner.utd_ratio={args.sac_utd if algo == 'sac' else args.skill_utd}", "agent.buffer_size=200000",
                 *args.overrides]
    if algo != "sac":
        overrides += [f"dataset={args.dataset or default_dataset(args.layout)}",
                      f"agent.pretrain_updates={args.pretrain_updates}"]
    if algo == "skill_critic":
        overrides += [f"agent.critic_warmup_updates={args.critic_warmup}", f"agent.low_start_updates={args.low_start}"]
    config = f"{algo}_kitchen" if args.layout == "kitchen" else f"{algo}_point_maze_{args.layout}"
    result, curve, total = train_online_with_evals(config, overrides, str(run_dir), seed, args.online_steps,
                                                   args.eval_every, args.eval_episodes)
    pretrain = [m for m in read_metrics(result.run_dir) if m.get("phase") == "pretrain"]
    pretrain_time = pretrain[-1]["time"] if pretrain else 0.0
    if algo != "sac":  # step 0: the pretrained controller (the prior's mean skill, the decoder's action)
        from robolearn import load_config

        env_cfg = load_config(config, [*args.overrides, "env.num_threads=1"]).env
        eval_env = make_env(env_cfg, num_envs=args.eval_episodes, seed=seed + 10_000)
        zero = evaluate(ExportedController(result.run_dir / "pretrained" / "controller.pt"), eval_env,
                        args.eval_episodes, seed=seed + 10_000)
        eval_env.close()
        curve.insert(0, {"env_steps": 0, "success": zero["success_rate"], "return": zero["return_mean"],
                         "length": zero["length_mean"], "train_success": None, "time": 0.0})
    return {"algo": algo, "seed": seed, "curve": curve, "pretrain_s": pretrain_time, "total_s": total,
            "pretrain": pretrain[-1] if pretrain else None, "machine": machine()}


def run_job(job: tuple[str, int, argparse.Namespace]) -> dict:
    """One run in a pool worker (one torch thread), in a temporary run directory or under ``--keep-runs``."""
    torch.set_num_threads(1)
    algo, seed, args = job
    if args.keep_runs:
        return run(algo, seed, args, args.keep_runs / f"{algo}_seed{seed}")
    with tempfile.TemporaryDirectory() as tmp:
        return run(algo, seed, args, Path(tmp))


def kitchen_setup(args: argparse.Namespace) -> tuple[list[str], dict]:
    """The sub-tasks the kitchen asks for and the fixtures it moves, after ``--overrides``."""
    from robolearn import load_config

    kwargs = load_config("spirl_kitchen", args.overrides).env.kwargs
    return list(kwargs.get("tasks", [])), dict(kwargs.get("offsets", {}))


def kitchen_text(args: argparse.Namespace) -> str:
    tasks, offsets = args.kitchen_tasks, args.kitchen_offsets
    moved = "; ".join(f"{name} moved by {list(offset)} m" for name, offset in offsets.items())
    return (f"{'all ' if len(tasks) == 4 else ''}{len(tasks)} sub-tasks ({', '.join(tasks)}) in one episode, any order"
            + (f"; a rearranged kitchen ({moved}) unlike the data's" if moved else ""))


def default_dataset(layout: str) -> str:
    return "kitchen-mixed" if layout == "kitchen" else f"point_maze_{layout}-navigate"


def stats(runs: list[dict], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    steps = np.array([p["env_steps"] for p in runs[0]["curve"]])
    values = np.array([[p[key] for p in r["curve"]] for r in runs], dtype=float)
    return steps, values.mean(0), values.std(0)


def plot(results: dict[str, list[dict]], path: Path, title: str, kitchen: int = 0) -> None:
    """Return against steps; ``kitchen``: the number of sub-tasks asked for (0: the maze)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for algo, runs in results.items():
        steps, mean, std = stats(runs, "return")
        ax.plot(steps, mean, marker="o", markersize=3, label=NAMES[algo])
        ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
    ax.set_xlabel("online env steps")
    ax.set_ylabel("evaluation return (sub-tasks done)" if kitchen else "evaluation return (= success rate)")
    ax.set_title(f"{'kitchen' if kitchen else 'sparse point maze'}, {title}, {len(next(iter(results.values())))} seeds",
                 fontsize=9)
    ax.set_ylim(-0.05, kitchen + 0.2 if kitchen else 1.05)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def report(results: dict[str, list[dict]], args: argparse.Namespace, wall: float | None) -> str:
    counts = {NAMES[algo]: len(runs) for algo, runs in results.items()}
    seeds = (f"{next(iter(counts.values()))} seeds" if len(set(counts.values())) == 1 else
             "seeds (" + ", ".join(f"{name}: {n}" for name, n in counts.items()) + ")")
    lines = [
        f"# Skill-Critic vs SPiRL vs flat SAC on {'the kitchen' if args.layout == 'kitchen' else 'the sparse point maze'}",
        "",
        f"`python benchmarks/skill_critic_maze.py {' '.join(sys.argv[1:])}`",
        "",
        (f"Machine: {machine()}; one torch thread and one physics thread per run, {args.jobs} run(s) at a time. "
         f"Whole benchmark: {wall / 60:.1f} min." if wall is not None else
         # a rebuild names the machine the runs recorded, never the one rebuilding (older runs recorded none)
         "Machine: " + "; ".join(dict.fromkeys(
             r.get("machine") or "not recorded with these runs (the report each training invocation wrote names "
             "the machine it ran on)" for runs in results.values() for r in runs))
         + "; one torch thread and one physics thread per run. Tables rebuilt from the runs of "
         + ", ".join(f"`{Path(f).name}`" for f in args.from_runs) + "."),
        "",
        (f"Task: `kitchen` ({kitchen_text(args)}), reward 1 per sub-task the first time it is done (return = "
         "sub-tasks done, success = all of them, which ends the episode), 280 steps, 10 envs. Skills (H = 10, z dim "
         f"10) pretrained in each run on `{args.dataset or default_dataset(args.layout)}` (400 scripted "
         "demonstrations of 3 of the 4 sub-tasks in random orders, action noise 0.2: none shows all four)."
         if args.layout == "kitchen" else
         f"Task: `point_maze_{args.layout}`, `goals: fixed`, `pair: {PAIRS[args.layout]}` ({TASKS[args.layout]}), "
         "`reward: success` "
         "(1 on arrival, the episode ends; else 0), 500 steps, 10 envs. Skills (H = 10, z dim 10) pretrained in "
         f"each run on `{args.dataset or default_dataset(args.layout)}` (500 episodes x 1000 steps of "
         "undirected scripted navigation with action noise 0.2)."),
        "",
        *([f"Config overrides for every algorithm: `{' '.join(args.overrides)}`.", ""] if args.overrides else []),
        f"Budget (shortened to fit one CPU core): {args.pretrain_updates} skill-model updates (batch 128; "
        f"SPiRL trains ~100k+), then {args.online_steps} online env steps for every algorithm (the papers: "
        f"millions); updates per env step {args.skill_utd} for SPiRL and Skill-Critic (one high-level update, "
        f"plus one low-level one for Skill-Critic, per update), {args.sac_utd} for SAC. Skill-Critic's stages: "
        f"critics only until update {args.critic_warmup}, the high level until {args.low_start}, then both. "
        f"Evaluation: {args.eval_episodes} deterministic episodes every {args.eval_every} env steps; mean ± std "
        f"over {seeds}.",
        "",
    ]
    steps = [p["env_steps"] for p in next(iter(results.values()))[-1]["curve"]]
    header = "| online steps | " + " | ".join(NAMES[a] for a in results) + " |"
    asked = len(args.kitchen_tasks)
    keys = ((("return", f"Evaluation return (sub-tasks done of {asked})"),
             ("success", f"Evaluation success rate (all {asked})"))
            if args.layout == "kitchen" else
            (("success", "Evaluation success rate (= return)"),
             ("length", "Evaluation episode length (steps to the goal; 500 = never arrived)")))
    for key, title in keys:
        lines += [f"{title}, mean ± std over seeds:", "", header, "|---|" + "---|" * len(results)]
        table = {a: {p["env_steps"]: [] for p in runs[0]["curve"]} for a, runs in results.items()}
        for algo, runs in results.items():
            for r in runs:
                for p in r["curve"]:
                    table[algo][p["env_steps"]].append(p[key])
        for step in sorted({s for a in table for s in table[a]}):
            cells = []
            for algo in results:
                values = table[algo].get(step)
                fmt = "{:.0f} ± {:.0f}" if key == "length" else "{:.2f} ± {:.2f}"
                cells.append(fmt.format(np.mean(values), np.std(values)) if values else "")
            lines.append(f"| {step} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["Step 0 of SPiRL and Skill-Critic is the pretrained controller (the prior's mean skill "
              "played by the decoder), before any online step.", "",
              "| algorithm | success at step 0 (pretrained controller) | final success | best success (any online "
              "eval) | mean success over the online evals | "
              "online steps to a 0.9 eval (median; never: -) | training success, last 100 episodes | "
              "pretraining s | whole run s |", "|---|---|---|---|---|---|---|---|---|"]
    for algo, runs in results.items():
        final = [r["curve"][-1]["success"] for r in runs]
        # step 0 is its own column: a fine-tuned agent's final success can be below its own start
        zero = [p["success"] for r in runs for p in r["curve"] if p["env_steps"] == 0]
        start = f"{np.mean(zero):.2f} ± {np.std(zero):.2f}" if len(zero) == len(runs) else "-"
        best = [max(p["success"] for p in r["curve"] if p["env_steps"] > 0) for r in runs]
        area = [np.mean([p["success"] for p in r["curve"] if p["env_steps"] > 0]) for r in runs]  # area under the curve
        solved = [min((p["env_steps"] for p in r["curve"] if p["success"] >= 0.9 and p["env_steps"] > 0),
                      default=np.inf) for r in runs]
        median = np.median(solved)
        steps = (f"{'-' if median == np.inf else f'{median:.0f}'} "
                 f"({', '.join('-' if s == np.inf else f'{s:.0f}' for s in solved)})")
        train = [r["curve"][-1]["train_success"] or 0.0 for r in runs]
        pretrain = f"{np.mean([r['pretrain_s'] for r in runs]):.0f}" if algo != "sac" else "-"
        lines.append(f"| {NAMES[algo]} | {start} | {np.mean(final):.2f} ± {np.std(final):.2f} | {np.mean(best):.2f} ± "
                     f"{np.std(best):.2f} | {np.mean(area):.2f} ± {np.std(area):.2f} | {steps} | "
                     f"{np.mean(train):.2f} | "
                     f"{pretrain} | {np.mean([r['total_s'] for r in runs]):.0f} |")
    skills = [r["pretrain"] for a in results for r in results[a] if r["pretrain"]]
    if skills:
        lines += ["", "Skill model at the end of pretraining (mean over runs): reconstruction "
                  f"{np.mean([s['pretrain/reconstruction'] for s in skills]):.3f} (squared error summed over the action "
                  f"dims), KL(q || N(0, I)) {np.mean([s['pretrain/kl'] for s in skills]):.2f}, prior NLL "
                  f"{np.mean([s['pretrain/prior_nll'] for s in skills]):.2f}."]
    stem = Path(args.out).stem
    sources = [Path(f).name for f in args.from_runs] or [f"{stem}_runs.jsonl"]
    lines += ["", f"![return vs steps]({stem}.png)", "", f"Per-run curves: {', '.join(f'`{f}`' for f in sources)}."]
    return "\n".join(lines)


def load_runs(paths: list[str], algos: list[str]) -> dict[str, list[dict]]:
    """The runs of ``algos`` in these runs files (one JSON run per line), by seed; algorithms without runs left out."""
    results: dict[str, list[dict]] = {algo: [] for algo in algos}
    for path in paths:
        for run in read_jsonl(path):
            if run["algo"] in results:
                results[run["algo"]].append(run)
    if not any(results.values()):
        raise SystemExit(f"no runs of {algos} in {paths}")
    return {algo: sorted(runs, key=lambda run: run["seed"]) for algo, runs in results.items() if runs}


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS, help="algorithms to train")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="seeds; each runs every algorithm")
    parser.add_argument("--layout", choices=["medium", "large", "kitchen"], default="medium",
                        help="large: evaluation pair 1; kitchen: the kitchen task (configs/<algo>_kitchen.yaml)")
    parser.add_argument("--dataset", default="", help="default: point_maze_<layout>-navigate, or kitchen-mixed")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time")
    parser.add_argument("--online-steps", type=int, default=50_000, help="online env steps per run")
    parser.add_argument("--pretrain-updates", type=int, default=8_000,
                        help="skill-model updates before the online phase (SPiRL, Skill-Critic)")
    parser.add_argument("--skill-utd", type=float, default=0.1, help="updates per env step of SPiRL and Skill-Critic")
    parser.add_argument("--sac-utd", type=float, default=0.25, help="updates per env step of flat SAC")
    parser.add_argument("--critic-warmup", type=int, default=500,
                        help="Skill-Critic: updates of the critics only (agent.critic_warmup_updates)")
    parser.add_argument("--low-start", type=int, default=2_000,
                        help="Skill-Critic: the update from which the low level trains too (agent.low_start_updates)")
    parser.add_argument("--eval-every", type=int, default=5_000, help="online env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10, help="deterministic episodes per evaluation")
    parser.add_argument("--overrides", nargs="*", default=[],
                        help="config overrides for every algorithm, e.g. "
                             "env.kwargs.offsets={light_switch: [0.04, 0, 0]}")
    parser.add_argument("--keep-runs", type=Path, help="keep each run directory here (<algo>_seed<n>/...), "
                        "e.g. to evaluate the checkpoints afterwards; default: temporary, deleted")
    parser.add_argument("--from-runs", nargs="+", default=[], metavar="RUNS_JSONL", type=runs_file,
                        help="train nothing: rebuild the tables and the plot from these runs files (e.g. two "
                             "invocations with different --seeds); the other options must match theirs")
    parser.add_argument("--out", default="", help="file under benchmarks/results/; default: skill_critic_maze.md "
                        "(medium), skill_critic_maze_large.md, skill_critic_kitchen.md")
    args = parser.parse_args()
    args.out = args.out or {"medium": "skill_critic_maze.md", "kitchen": "skill_critic_kitchen.md"}.get(
        args.layout, f"skill_critic_maze_{args.layout}.md")
    torch.set_num_threads(1)
    start = time.perf_counter()
    results: dict[str, list[dict]] = {algo: [] for algo in args.algos}
    args.kitchen_tasks, args.kitchen_offsets = kitchen_setup(args) if args.layout == "kitchen" else ([], {})
    asked = len(args.kitchen_tasks)  # sub-tasks asked for (0: a maze)
    title = (f"{asked} sub-tasks" + "".join(f", {name} moved {list(d)} m" for name, d in args.kitchen_offsets.items())
             if asked else f"{args.layout} (pair {PAIRS[args.layout]})")
    if args.from_runs:
        results = load_runs(args.from_runs, args.algos)
        plot(results, RESULTS / Path(args.out).with_suffix(".png").name, title, kitchen=asked)
        write_result(args.out, report(results, args, None))
        return
    runs_path = RESULTS / Path(args.out).with_name(Path(args.out).stem + "_runs.jsonl").name
    jobs = [(algo, seed, args) for seed in args.seeds for algo in args.algos]
    for out in pool_runs(run_job, jobs, args.jobs, runs_path, ordered=True):
        results[out["algo"]].append(out)
        last = out["curve"][-1]
        print(f"{out['algo']:13s} seed {out['seed']}: success {last['success']:.2f}, return {last['return']:.2f} "
              f"at {last['env_steps']} steps, pretrain {out['pretrain_s']:.0f} s, run {out['total_s']:.0f} s",
              flush=True)
    plot(results, RESULTS / Path(args.out).with_suffix(".png").name, title, kitchen=asked)
    write_result(args.out, report(results, args, time.perf_counter() - start))


if __name__ == "__main__":
    main()
