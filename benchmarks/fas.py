"""Frequency-Averaged Score: SRL (J = 16) against SAC, side by side, with R(L) curves.

Both agents train on the same task with the same budget and settings (SAC's:
lr 3e-4, 256x256, batch 256, gamma 0.99, tau 0.005, one update per env step,
uniform random actions first), then each is evaluated at action-sequence
lengths L = 1, 2, 4, ..., 30 (10 episodes per L, the same env seed for every L)
and scored with FAS = trapz(R(L) + shift, L) / (R_max * 30) (robolearn/fas.py).
SRL plays its own 16 actions and holds the last one past 16; SAC holds its action.

    python benchmarks/fas.py train --tasks gym:Pendulum-v1 --steps 20000 --seeds 3 --jobs 6 [--device cuda]
    python benchmarks/fas.py latency        # decision latency of the exported controllers (CPU, 1 thread)
    python benchmarks/fas.py report         # results/fas.md and R(L) plots from results/fas_runs.jsonl
    python benchmarks/fas.py delay --obs-delay 1 --action-latency 1   # the trained runs' FAS under latency

``train`` appends one JSON line per (task, agent, seed) to results/fas_runs.jsonl
as each finishes (R(L), FAS, wall-clock, machine); ``report`` turns every line there
into results/fas.md and one R(L) plot per task, results/fas_<task>.png; ``latency``
writes results/fas_latency.md, ``delay`` results/fas_delay.md (all quoted in BENCHMARKS.md,
"Sequence controllers: SRL, FAS, action-sequence critic"). No peer library: SAC is ours, and
the report sets its FAS beside the published SAC figures. In BENCHMARKS.md a Pendulum-v1 run of
10,000 steps trained in about 3 min (SAC) and 15 min (SRL) on 2 shared CPU cores.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, benchmark_parser, check_whole_iterations, code_commit, machine, write_result  # noqa: E402

# Base configs (the task is overridden) and overrides. SRL's temporal-recall loss on 64 of the 256 rows
# (agent.actor_batch_size): 16 x 64 state-actions per update keep it within ~5x SAC's update on a 2-core CPU.
# The third agent is an ablation, trained only when named in --agents: SRL whose sampled actions reach the
# next GRU step with their gradient (agent.detach_feedback=false, our SRL before session 16).
SRL_OVERRIDES = ["agent.actor_batch_size=64"]
AGENTS = {"SAC": ("sac_gym_pendulum", []), "SRL (J=16)": ("srl_gym_pendulum_j16", SRL_OVERRIDES),
          "SRL (J=16), feedback with gradient": ("srl_gym_pendulum_j16", [*SRL_OVERRIDES, "agent.detach_feedback=false"])}
DEFAULT_AGENTS = ["SAC", "SRL (J=16)"]
EPISODES = 10


def slug(task: str) -> str:
    return task.replace("gym:", "gym_").replace(":", "_").replace("/", "_")


def train_job(job: dict) -> dict:
    """Train one (task, agent, seed), then measure R(L) and FAS; returns a JSON-ready dict."""
    torch.set_num_threads(1)
    import sims
    from robolearn import fas, load_config
    from robolearn.runner import Runner

    task, agent, seed, device = job["task"], job["agent"], job["seed"], job["device"]
    base, overrides = AGENTS[agent]
    cfg = load_config(base, [*overrides,
        f"env.task={task}", f"env.device={device}", f"seed={seed}", f"runner.total_steps={job['steps']}",
        f"runner.random_steps={job['random_steps']}", "runner.eval_episodes=0", "runner.video_seconds=0",
        "runner.checkpoint_every=100000", "logging.wandb=disabled", "logging.progress=false",
        f"run_dir={tempfile.gettempdir()}/robolearn-fas"])
    start = time.perf_counter()
    runner = Runner(cfg)
    runner._finish = lambda result, logger: None  # no export/eval/video here: latency is measured by `latency`
    runner.train()
    train_s = time.perf_counter() - start
    runner.close()
    controller = runner.agent.controller()
    result = fas.fas(controller, lambda n: sims.make_env(task, n, device=device, seed=10_000 + seed), task,
                     episodes=EPISODES, seed=10_000 + seed)
    out = {**job, **result, "train_s": train_s, "machine": machine(), "overrides": overrides,
           "commit": code_commit()}
    with open(Path(job["out"]) / "fas_runs.jsonl", "a") as f:  # one short line per job: appends do not interleave
        f.write(json.dumps(out) + "\n")
    print(f"{task} {agent} seed {seed}: FAS {result['fas']:.3f}, R(1) {result['returns'][0]:.1f}, "
          f"train {train_s:.0f} s", flush=True)
    return out


def train(args: argparse.Namespace) -> None:
    Path(args.out).mkdir(parents=True, exist_ok=True)
    jobs = [{"task": task, "agent": agent, "seed": seed, "steps": args.steps, "random_steps": args.random_steps,
             "device": args.device, "out": args.out}
            for task in args.tasks for seed in range(args.seeds) for agent in args.agents]
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        pool.map(train_job, jobs, chunksize=1)


def plot_task(task: str, rows: list[dict], out_dir: Path, suffix: str = "") -> Path:
    from robolearn.fas import plot

    curves = {}
    for agent in AGENTS:
        mine = [r for r in rows if r["agent"] == agent]
        if mine:
            curves[agent] = {"lengths": mine[0]["lengths"], "returns": [r["returns"] for r in mine],
                             "fas": [r["fas"] for r in mine]}
    steps = rows[0]["steps"]
    return plot(curves, out_dir / f"fas_{slug(task)}{suffix}.png", f"{task}: R(L), {steps:,} steps, {len(rows) // len(curves)} seeds")


def report(args: argparse.Namespace) -> None:
    from robolearn.fas import SAC_BASELINE

    out_dir = Path(args.out)
    by_budget: dict[tuple[str, int, int], dict[tuple[str, int], dict]] = {}
    for line in (out_dir / "fas_runs.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "commit" not in row:  # runs from before commits were recorded are superseded; they stay in the file
            continue
        budget = (row["task"], row["steps"], row["random_steps"])  # one table per task and budget
        by_budget.setdefault(budget, {})[(row["agent"], row["seed"])] = row  # an agent's seed: its latest run
    tasks = [task for task, _, _ in by_budget]
    lines = ["### FAS: SRL (J = 16) vs SAC, same task, budget and settings", "",
             "FAS = trapz(R(L) + shift, L) / (R_max * 30) over L = 1, 2, 4, ..., 30 (Patel & Siegelmann); R(L) = mean "
             f"return of {EPISODES} episodes deciding every L steps (SAC holds its action, SRL plays its 16 and holds "
             "the last). R(L) curves: results/fas_<task>.png (a task with two budgets: fas_<task>_<steps>k.png). Published SAC FAS: Pendulum 0.44, Hopper 0.05, "
             "Walker 0.07, HalfCheetah 0.007.", ""]
    for (task, steps, _), latest in by_budget.items():
        rows = sorted(latest.values(), key=lambda r: r["seed"])  # per-seed columns in seed order
        plot_task(task, rows, out_dir, suffix=f"_{steps // 1000}k" if tasks.count(task) > 1 else "")
        lines += [f"**{task}**: {rows[0]['steps']:,} env steps ({rows[0]['random_steps']:,} random first), "
                  f"R_max {rows[0]['r_max']:g} (shift {rows[0]['shift']:g}), networks on {rows[0]['device']}. "
                  f"Machine: {rows[0]['machine']}.", "",
                  "| agent | FAS per seed | FAS mean ± std | published SAC FAS | R(1) mean ± std | R(16) mean | train wall-clock (s) |",
                  "|---|---|---|---|---|---|---|"]
        for agent in AGENTS:
            mine = [r for r in rows if r["agent"] == agent]
            if not mine:
                continue
            f = np.array([r["fas"] for r in mine])
            r1 = np.array([r["returns"][0] for r in mine])
            r16 = np.mean([r["returns"][r["lengths"].index(16)] for r in mine])
            published = SAC_BASELINE.get(task, "") if agent == "SAC" else ""
            lines.append(f"| {agent} | {', '.join(f'{x:.3f}' for x in f)} | {f.mean():.3f} ± {f.std():.3f} | {published} | "
                         f"{r1.mean():.1f} ± {r1.std():.1f} | {r16:.1f} | {np.mean([r['train_s'] for r in mine]):.0f} |")
        lines.append("")
    (out_dir / "fas.md").write_text("\n".join(lines))
    print("\n".join(lines))


def latency(args: argparse.Namespace) -> None:
    """Per-step and per-decision latency of exported SAC and SRL (J = 16) controllers on one CPU thread."""
    torch.set_num_threads(1)
    import sims
    from policies import SAC, SACConfig, SRL, SRLConfig
    from robolearn.export import FILENAMES, ExportedController, export_controller

    env = sims.make_env(args.latency_task, 1, seed=0)
    rows = []
    for name, agent in (("SAC", SAC(env.observation_spec, env.action_spec, SACConfig(), "cpu")),
                        ("SRL (J=16)", SRL(env.observation_spec, env.action_spec, SRLConfig(sequence_length=16), "cpu"))):
        with tempfile.TemporaryDirectory() as tmp:
            export_s = {}
            for fmt in ("torchscript", "onnx"):  # a folder each: an export removes the formats it was not asked for
                t0 = time.perf_counter()
                export_controller(agent.controller(), Path(tmp) / fmt, formats=(fmt,))
                export_s[fmt] = time.perf_counter() - t0
            paths = {fmt: Path(tmp) / fmt / FILENAMES[fmt] for fmt in export_s}
            for fmt in ("torchscript", "onnx"):
                controller = ExportedController(paths[fmt])
                obs = env.reset(seed=0)
                for _ in range(20):  # warm-up: TorchScript optimizes on its first calls, as a deployment would before its loop
                    controller(torch.zeros(1, controller.obs_size))
                controller.reset()
                step_s, decided = [], []
                for _ in range(args.latency_steps):
                    before = controller.queue.decisions if controller.queue is not None else -1
                    t0 = time.perf_counter()
                    action = controller.act(obs)
                    step_s.append(time.perf_counter() - t0)
                    decided.append(controller.queue is None or controller.queue.decisions > before)
                    obs, _, term, trunc, _ = env.step(action)
                    controller.reset(term | trunc)
                step = np.array(step_s) * 1e3
                decide = step[np.array(decided)]  # the steps on which the actor ran
                calls, period = len(decide), controller.decision_period
                rows.append(f"| {name} | {fmt} | {period} | {calls} / {len(step)} | {np.percentile(decide, 50):.3f} | "
                            f"{np.percentile(decide, 99):.3f} | {np.percentile(step, 50):.4f} | {np.percentile(step, 99):.3f} | "
                            f"{step.mean():.4f} | {export_s[fmt]:.1f} |")
    env.close()
    text = "\n".join([
        f"### Decision latency of exported controllers ({args.latency_task}, {args.latency_steps} control steps, batch 1)",
        "", f"Machine: {machine()}; torch 1 thread, onnxruntime CPU; untrained networks of the benchmark's sizes (latency "
        "does not depend on the weights), 20 warm-up calls. SRL decides once per 16 steps and at every episode start (one "
        "actor call returns the 16-action chunk; ExportedController plays it from its queue), SAC every step. "
        "'decision' = the steps on which the actor ran; 'step' = every act() call.", "",
        "| controller | format | decision period | actor calls / steps | decision p50 (ms) | decision p99 (ms) | "
        "step p50 (ms) | step p99 (ms) | mean per step (ms) | export time (s) |",
        "|---|---|---|---|---|---|---|---|---|---|", *rows])
    write_result(str(Path(args.out) / "fas_latency.md"), text)


def delay(args: argparse.Namespace) -> None:
    """FAS of the runs ``train`` left in the temp dir, evaluated through sims.delay.DelayedEnv."""
    torch.set_num_threads(1)
    import sims
    from robolearn import fas
    from robolearn.registry import make_env
    from robolearn.config import load_run_config
    from robolearn.runs import load_agent
    from sims.delay import Delay, DelayedEnv

    lag = Delay(obs_delay_steps=args.obs_delay, action_latency_steps=args.action_latency)
    rows = []
    for config in sorted(Path(tempfile.gettempdir(), "robolearn-fas").glob("*/*/config.yaml")):
        cfg = load_run_config(config.parent)
        if cfg.env.task not in args.tasks or cfg.runner.total_steps != args.steps:
            continue
        with make_env(cfg.env, num_envs=1) as env:
            controller = load_agent(config.parent, env, cfg).controller()
        seed = 10_000 + cfg.seed
        result = fas.fas(controller, lambda n: DelayedEnv(sims.make_env(cfg.env.task, n, seed=seed), lag), cfg.env.task,
                         episodes=EPISODES, seed=seed)
        rows.append((cfg.env.task, cfg.algo, cfg.seed, result))
        print(f"{cfg.env.task} {cfg.algo} seed {cfg.seed}: FAS under {lag} {result['fas']:.3f}", flush=True)
    lines = [f"### FAS under latency: {lag.obs_delay_steps} step(s) observation delay, {lag.action_latency_steps} step(s) "
             f"action latency (sims/delay.py)", "", f"The runs of `fas.py train` ({args.steps:,} steps), evaluated through "
             f"DelayedEnv; R(L) and FAS as in fas.md. Machine: {machine()}.", "",
             "| task | agent | FAS per seed | FAS mean | R(1) mean |", "|---|---|---|---|---|"]
    for task in dict.fromkeys(r[0] for r in rows):
        for algo in dict.fromkeys(r[1] for r in rows if r[0] == task):
            mine = [r[3] for r in rows if r[0] == task and r[1] == algo]
            scores = ", ".join(f"{m['fas']:.3f}" for m in mine)
            lines.append(f"| {task} | {algo} | {scores} | {np.mean([m['fas'] for m in mine]):.3f} | "
                         f"{np.mean([m['returns'][0] for m in mine]):.1f} |")
    (Path(args.out) / "fas_delay.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("command", choices=["train", "latency", "report", "delay"],
                        help="train: train and score the agents; latency: time exported controllers; report: "
                             "fas.md and the plots from fas_runs.jsonl; delay: FAS of the trained runs under latency")
    parser.add_argument("--tasks", nargs="+", default=["gym:Pendulum-v1"],
                        help="tasks to train on (train), or whose trained runs to evaluate (delay)")
    parser.add_argument("--steps", type=int, default=20_000,
                        help="env steps per run (train), or the budget of the runs to evaluate (delay)")
    parser.add_argument("--random-steps", type=int, default=1_000, help="uniform random env steps first (train)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 of each task and agent (train)")
    parser.add_argument("--agents", nargs="+", choices=list(AGENTS), default=DEFAULT_AGENTS, help="agents to train")
    parser.add_argument("--jobs", type=int, default=1, help="parallel training processes")
    parser.add_argument("--device", default="cpu", help="device of the env and networks (train), e.g. cuda")
    parser.add_argument("--out", default=str(RESULTS),
                        help="folder of fas_runs.jsonl, fas.md, the R(L) plots, fas_delay.md and fas_latency.md")
    parser.add_argument("--latency-task", default="gym:Hopper-v5", help="task the controllers are timed on (latency)")
    parser.add_argument("--latency-steps", type=int, default=2000,
                        help="control steps timed per controller and format (latency)")
    parser.add_argument("--obs-delay", type=int, default=1, help="observation delay in control steps (delay)")
    parser.add_argument("--action-latency", type=int, default=1, help="action latency in control steps (delay)")
    args = parser.parse_args()
    check_whole_iterations(parser, args.steps)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    {"train": train, "latency": latency, "report": report, "delay": delay}[args.command](args)


if __name__ == "__main__":
    main()
