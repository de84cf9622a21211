"""Action-sequence critic (K actions scored together) against its K = 1 version, at equal updates.

Same task, budget, settings and number of gradient updates (one per env step after the random
phase); a variant changes only K (how many actions the critic scores and the actor emits per
decision), n (rewards summed before the bootstrap) and the execution (the K actions open loop, or
queried every step and blended, ACT's temporal ensemble, as CQN-AS plays them). Reported per seed:
the final return (10 deterministic episodes, played as in training), the training wall-clock (export and
final evaluation included) with the machine of each run, and how
much the trained critic's value depends on each of the K actions it scores (``sensitivity``, below).

    python benchmarks/sequence_critic.py [--seeds 3] [--steps 6000] [--jobs 2] \\
        [--variants 1,1,open_loop 4,1,open_loop 4,4,open_loop 4,1,ensemble 4,4,ensemble]

Each run appends a JSON line to results/sequence_critic<tag>_runs.jsonl (with its code commit);
the table (results/sequence_critic<tag>.md) is rebuilt from every line of the latest budget (a
variant's seed: its latest run). ``--tag _try`` keeps a trial's runs out of the committed ones.
BENCHMARKS.md quotes the table in "Action-sequence critic vs K = 1 on Pendulum-v1"; no peer library
runs. In its run (two at a time on 2 CPU cores) a K = 1 run took about 1.5 min and a K = 4 run about 4 min.
"""

from __future__ import annotations

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
from common import RESULTS, benchmark_parser, check_whole_iterations, code_commit, machine, write_result  # noqa: E402

EVAL_EPISODES = 10
DEFAULT_VARIANTS = ["1,1,open_loop", "4,1,open_loop", "4,4,open_loop", "4,1,ensemble", "4,4,ensemble"]
SENSITIVITY_BATCH = 2048


def run(job: dict) -> dict:
    """Train one (variant, seed) and evaluate it; appends and returns its JSON line."""
    torch.set_num_threads(1)
    from robolearn import load_config
    from robolearn.runner import Runner

    k, n, execution, *decay = job["variant"].split(",")
    cfg = load_config("sac_as_gym_pendulum", [
        f"agent.sequence_length={k}", f"agent.nstep={n}", f"agent.execution={execution}", f"seed={job['seed']}",
        *[f"agent.ensemble_decay={m}" for m in decay],
        f"runner.total_steps={job['steps']}", f"runner.random_steps={job['random_steps']}",
        f"runner.eval_episodes={EVAL_EPISODES}", "runner.video_seconds=0", "runner.checkpoint_every=100000",
        "logging.wandb=disabled", "logging.progress=false", f"run_dir={tempfile.gettempdir()}/robolearn-seqcritic"])
    runner = Runner(cfg)
    start = time.perf_counter()
    result = runner.train()
    elapsed = time.perf_counter() - start  # includes the export and the final evaluation, alike for every variant
    out = {**{k: v for k, v in job.items() if k != "runs"}, "return": float(result.evaluation["return_mean"]), "seconds": elapsed, "machine": machine(),
           "commit": code_commit(), "sensitivity": sensitivity(runner.agent, runner.replay, cfg.env.num_envs)}
    runner.close()
    with open(job["runs"], "a") as f:  # one short line per run: appends from parallel jobs do not interleave
        f.write(json.dumps(out) + "\n")
    print(f"{job['variant']} seed {job['seed']}: return {out['return']:.1f}, {elapsed:.0f} s", flush=True)
    return out


def sensitivity(agent, replay, num_envs: int) -> list[float]:
    """Mean |dQ/da_j| over the K positions j of the actor's deterministic chunk, relative to position 1.

    Measured on replay states with the trained critic (the min over its ensemble, as the actor sees it):
    how much of the critic's value each of the K actions it scores carries, i.e. how much gradient the
    actor's j-th action gets. With n = 1 the target does not depend on actions 2..K, so they should carry
    little; with n = K each is part of the return the critic predicts."""
    if agent.cfg.sequence_length == 1:
        return [1.0]
    from robolearn.interfaces import flatten_obs

    batch = agent.sample(replay, SENSITIVITY_BATCH, num_envs)
    obs = flatten_obs(batch["obs"], agent.groups)
    with torch.no_grad():
        chunk = agent.actor(obs, agent.cfg.sequence_length, deterministic=True)[0]
    chunk.requires_grad_(True)
    (grad,) = torch.autograd.grad(agent.critic(obs, chunk.flatten(1)).amin(0).sum(), chunk)
    per_position = grad.abs().mean(dim=(0, 2))
    return (per_position / per_position[0]).tolist()


def label(variant: str) -> str:
    k, n, execution, *decay = variant.split(",")
    play = "open loop" if execution == "open_loop" else "ensembled every step" + (f", m = {decay[0]}" if decay else "")
    return f"K = {k}" if k == "1" else f"K = {k}, n = {n}, {play}"


def report(tag: str) -> None:
    runs_path = RESULTS / f"sequence_critic{tag}_runs.jsonl"
    rows = [json.loads(line) for line in runs_path.read_text().splitlines()]
    budget = (rows[-1]["steps"], rows[-1]["random_steps"])
    latest: dict[str, dict[int, dict]] = {}
    for row in rows:
        if (row["steps"], row["random_steps"]) == budget:
            latest.setdefault(row["variant"], {})[row["seed"]] = row
    steps, random_steps = budget
    # each run records its machine; a row's seeds may have run on different CPUs (a re-run seed replaces the
    # first), so every row names its runs' machines and the header lists them, never just the last run's
    machine_of = lambda run: run.get("machine", "not recorded")  # noqa: E731
    machines = list(dict.fromkeys(machine_of(r) for by_seed in latest.values() for r in by_seed.values()))
    letter = {m: chr(ord("A") + i) for i, m in enumerate(machines)}
    lines = []
    for variant, by_seed in latest.items():
        runs = [by_seed[s] for s in sorted(by_seed)]
        returns = np.array([r["return"] for r in runs])
        measured = [r["sensitivity"] for r in runs if "sensitivity" in r]  # runs before session 18 lack it
        shares = " / ".join(f"{v:.2f}" for v in np.mean(measured, axis=0)) + f" (n={len(measured)})" if measured else "-"
        lines.append(f"| {label(variant)} | {', '.join(f'{r:.0f}' for r in returns)} | {returns.mean():.0f} ± "
                     f"{returns.std():.0f} (n={len(runs)}) | {shares} | {np.mean([r['seconds'] for r in runs]):.0f} | "
                     f"{', '.join(letter[machine_of(r)] for r in runs)} |")
    write_result(f"sequence_critic{tag}.md", "\n".join([
        f"### Action-sequence critic vs K = 1 on Pendulum-v1: {steps:,} env steps, {steps - random_steps:,} updates "
        f"each, seeds {sorted({s for by_seed in latest.values() for s in by_seed})}", "",
        ("Machine: " + machines[0] if len(machines) == 1 else
         "Machines (the last column gives each seed's): " + "; ".join(f"{letter[m]} = {m}" for m in machines)
         + ". The wall-clock column then compares runs across these CPUs, not on one")
        + f". SAC settings (lr 3e-4, 256x256, batch 256), {random_steps:,} random steps, one "
        f"update per env step; n = rewards summed before the bootstrap; the K actions are played open loop (one "
        f"decision per K steps) or queried every step and blended (ACT's temporal ensemble, m = 0.01), in training "
        f"and in the final evaluation ({EVAL_EPISODES} deterministic episodes). Per-run lines with their commits: "
        f"results/{runs_path.name}. Critic sensitivity: mean |dQ/da_j| of the trained critic at the "
        f"actor's chunk on {SENSITIVITY_BATCH} replay states, for the K positions j, relative to j = 1.", "",
        "| critic and execution | final return per seed | mean ± std (seeds) | critic sensitivity to actions 1..K | "
        "wall-clock per run (s; export and final evaluation included) | machine per seed |", "|---|---|---|---|---|---|",
        *lines]))


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 of each variant")
    parser.add_argument("--steps", type=int, default=6_000, help="env steps per run")
    parser.add_argument("--random-steps", type=int, default=1_000, help="uniform random env steps first, no updates")
    parser.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, help="K,n,execution (open_loop|ensemble)[,m: ACT's ensemble decay, default 0.01]")
    parser.add_argument("--jobs", type=int, default=1, help="parallel training processes")
    parser.add_argument("--report-only", action="store_true", help="train nothing: rebuild the table from the runs file")
    parser.add_argument("--tag", default="", help="in the result files' names: sequence_critic<tag>_runs.jsonl, .md")
    args = parser.parse_args()
    check_whole_iterations(parser, args.steps)
    if not args.report_only:
        runs = str(RESULTS / f"sequence_critic{args.tag}_runs.jsonl")
        jobs = [{"variant": v, "seed": seed, "steps": args.steps, "random_steps": args.random_steps, "runs": runs}
                for seed in range(args.seeds) for v in args.variants]
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            pool.map(run, jobs, chunksize=1)
    report(args.tag)


if __name__ == "__main__":
    main()
