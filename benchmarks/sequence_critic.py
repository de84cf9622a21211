"""Action-sequence critic (K actions scored together) against its K = 1 version, at equal updates.

Same task, budget, settings and number of gradient updates (one per env step after the random
phase); a variant changes only K (how many actions the critic scores and the actor emits per
decision), n (rewards summed before the bootstrap) and the execution (the K actions open loop, or
queried every step and blended, ACT's temporal ensemble, as CQN-AS plays them). Reported per seed:
the final return (10 deterministic episodes, played as in training), and the training wall-clock.

    python benchmarks/sequence_critic.py [--seeds 3] [--steps 6000] [--jobs 2] \
        [--variants 1,1,open_loop 4,1,open_loop 4,4,open_loop 4,1,ensemble]

Each run appends a JSON line to results/sequence_critic_runs.jsonl (with its code commit);
the table is rebuilt from every line of the latest budget (a variant's seed: its latest run).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import RESULTS, code_commit, machine, write_result  # noqa: E402

EVAL_EPISODES = 10
RUNS = RESULTS / "sequence_critic_runs.jsonl"
DEFAULT_VARIANTS = ["1,1,open_loop", "4,1,open_loop", "4,4,open_loop", "4,1,ensemble"]


def run(job: dict) -> dict:
    """Train one (variant, seed) and evaluate it; appends and returns its JSON line."""
    torch.set_num_threads(1)
    from robolearn import load_config
    from robolearn.runner import Runner

    k, n, execution = job["variant"].split(",")
    cfg = load_config("sac_as_gym_pendulum", [
        f"agent.sequence_length={k}", f"agent.nstep={n}", f"agent.execution={execution}", f"seed={job['seed']}",
        f"runner.total_steps={job['steps']}", f"runner.random_steps={job['random_steps']}",
        f"runner.eval_episodes={EVAL_EPISODES}", "runner.video_seconds=0", "runner.checkpoint_every=100000",
        "logging.wandb=disabled", "logging.progress=false", f"run_dir={tempfile.gettempdir()}/robolearn-seqcritic"])
    runner = Runner(cfg)
    start = time.perf_counter()
    result = runner.train()
    elapsed = time.perf_counter() - start  # includes the export and the final evaluation, alike for every variant
    runner.close()
    out = {**job, "return": float(result.evaluation["return_mean"]), "seconds": elapsed, "machine": machine(),
           "commit": code_commit()}
    with open(RUNS, "a") as f:  # one short line per run: appends from parallel jobs do not interleave
        f.write(json.dumps(out) + "\n")
    print(f"{job['variant']} seed {job['seed']}: return {out['return']:.1f}, {elapsed:.0f} s", flush=True)
    return out


def label(variant: str) -> str:
    k, n, execution = variant.split(",")
    play = "open loop" if execution == "open_loop" else "ensembled every step"
    return f"K = {k}" if k == "1" else f"K = {k}, n = {n}, {play}"


def report() -> None:
    rows = [json.loads(line) for line in RUNS.read_text().splitlines()]
    budget = (rows[-1]["steps"], rows[-1]["random_steps"])
    latest: dict[str, dict[int, dict]] = {}
    for row in rows:
        if (row["steps"], row["random_steps"]) == budget:
            latest.setdefault(row["variant"], {})[row["seed"]] = row
    steps, random_steps = budget
    lines = []
    for variant, by_seed in latest.items():
        runs = [by_seed[s] for s in sorted(by_seed)]
        returns = np.array([r["return"] for r in runs])
        lines.append(f"| {label(variant)} | {', '.join(f'{r:.0f}' for r in returns)} | {returns.mean():.0f} ± "
                     f"{returns.std():.0f} (n={len(runs)}) | {np.mean([r['seconds'] for r in runs]):.0f} |")
    write_result("sequence_critic.md", "\n".join([
        f"### Action-sequence critic vs K = 1 on Pendulum-v1: {steps:,} env steps, {steps - random_steps:,} updates "
        f"each, seeds {sorted({s for by_seed in latest.values() for s in by_seed})}", "",
        f"Machine: {rows[-1]['machine']}. SAC settings (lr 3e-4, 256x256, batch 256), {random_steps:,} random steps, one "
        f"update per env step; n = rewards summed before the bootstrap; the K actions are played open loop (one "
        f"decision per K steps) or queried every step and blended (ACT's temporal ensemble, m = 0.01), in training "
        f"and in the final evaluation ({EVAL_EPISODES} deterministic episodes). Per-run lines with their commits: "
        f"results/sequence_critic_runs.jsonl.", "",
        "| critic and execution | final return per seed | mean ± std (seeds) | wall-clock (s) |", "|---|---|---|---|", *lines]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6_000)
    parser.add_argument("--random-steps", type=int, default=1_000)
    parser.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, help="K,n,execution (open_loop|ensemble)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel training processes")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    if not args.report_only:
        jobs = [{"variant": v, "seed": seed, "steps": args.steps, "random_steps": args.random_steps}
                for seed in range(args.seeds) for v in args.variants]
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            pool.map(run, jobs, chunksize=1)
    report()


if __name__ == "__main__":
    main()
