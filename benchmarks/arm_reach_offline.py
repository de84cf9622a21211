"""Arm reach offline: BC and IQL (configs/bc_arm_reach.yaml, iql_arm_reach.yaml) on recordings of a PPO expert.

The loop a user runs before the robot's own recordings exist, end to end from the command line:

1. the expert: ``robolearn train ppo_arm_reach`` (or ``--expert RUN``, a run already trained);
2. two datasets of ``--episodes`` episodes each: ``robolearn dataset record --run EXPERT`` as it acts
   (``arm-expert``), and with Gaussian action noise of ``--noise`` half action ranges (``arm-noisy``),
   where a learner that weighs actions by their outcome (IQL) should beat one that copies them all (BC);
3. ``robolearn train bc_arm_reach`` and ``iql_arm_reach`` on each, ``--seeds`` seeds, at the configs'
   budgets (``--updates`` to change them), each scored by its own final evaluation in simulation
   (``eval.json``: the configs' 50 deterministic episodes).

The expert's own evaluation (its run's ``eval.json``) is the reference. No peer library: this checks that
the shipped configs learn the task from its data (offline_d4rl_style.py compares IQL with d3rlpy's).
Datasets go to a temporary ``$ROBOLEARN_DATASETS``; runs stay under ``runs/arm_reach_offline``. Writes
``results/arm_reach_offline.md``, quoted in BENCHMARKS.md, "Arm reach offline".

    python benchmarks/arm_reach_offline.py [--expert runs/ppo_arm_reach/<time>] [--seeds 0 1 2]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import REPO, benchmark_parser, code_commit, machine, write_result

RUNS = REPO / "runs" / "arm_reach_offline"


def robolearn(*args: str, env: dict[str, str]) -> str:
    """Run one ``robolearn`` command (as a user types it) and return what it printed; a failure stops here."""
    done = subprocess.run([sys.executable, "-m", "robolearn", *args], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"robolearn {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def run_dir(printed: str) -> Path:
    """The run directory a ``robolearn train`` printed."""
    line = next(line for line in printed.splitlines() if line.startswith("run:"))
    return REPO / line.split(maxsplit=1)[1]


def evaluation(run: Path) -> dict:
    return json.loads((run / "eval.json").read_text())


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--expert", type=Path, help="a trained ppo_arm_reach run (default: train one)")
    parser.add_argument("--episodes", type=int, default=200, help="episodes per dataset")
    parser.add_argument("--noise", type=float, default=0.3, help="the noisy dataset's action noise (half ranges)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of each learner on each dataset")
    parser.add_argument("--updates", type=int, help="gradient updates of every run (default: the configs')")
    args = parser.parse_args()

    commit = code_commit()  # the code the runs start on (said again if it moved while they ran)
    env = {**os.environ, "ROBOLEARN_DATASETS": tempfile.mkdtemp(prefix="arm_reach_offline_")}
    common = ["--no-wandb", f"run_dir={RUNS}", "runner.video_seconds=0"]
    began = time.time()
    expert = args.expert or run_dir(robolearn("train", "ppo_arm_reach", *common, "name=expert", env=env))
    reference = evaluation(expert)
    print(f"expert {expert}: success {reference['success_rate']:.2f}, return {reference['return_mean']:.1f}", flush=True)
    datasets = {"arm-expert": 0.0, "arm-noisy": args.noise}
    for name, noise in datasets.items():
        robolearn("dataset", "record", "--run", str(expert), "--episodes", str(args.episodes), "--noise", str(noise),
                  "--name", name, "--no-progress", env=env)
    rows = []
    for name in datasets:
        for algo in ("bc", "iql"):
            scores = []
            for seed in args.seeds:
                budget = [f"runner.total_steps={args.updates}"] if args.updates else []
                printed = robolearn("train", f"{algo}_arm_reach", *common, f"dataset={name}", f"seed={seed}",
                                    f"name={algo}_{name}", *budget, env=env)
                result = evaluation(run_dir(printed))
                scores.append((result["success_rate"], result["return_mean"]))
                print(f"{algo} on {name}, seed {seed}: success {scores[-1][0]:.2f}, return {scores[-1][1]:.1f}", flush=True)
            success, returns = np.array(scores).T
            rows.append(f"| {name} | {algo} | {success.mean():.2f} ± {success.std():.2f} | "
                        f"{returns.mean():.1f} ± {returns.std():.1f} | {', '.join(f'{s:.2f}' for s in success)} |")
    minutes = (time.time() - began) / 60
    write_result("arm_reach_offline.md", "\n".join([
        f"Machine: {machine()}. Code: {commit}" + (f" (at the end: {code_commit()})" if code_commit() != commit else "")
        + f". {minutes:.0f} minutes in all" + ("" if args.expert else ", the expert's training included") + ".",
        f"Expert: {expert.relative_to(REPO) if expert.is_relative_to(REPO) else expert}, success "
        f"{reference['success_rate']:.2f}, return {reference['return_mean']:.1f} ({reference['episodes']} episodes). "
        f"Datasets: {args.episodes} episodes each; arm-noisy adds action noise of {args.noise} half ranges. "
        f"Seeds {args.seeds}; final evaluation of each run (the configs' 50 deterministic episodes).",
        "",
        "| dataset | learner | success (mean ± std over seeds) | return | success per seed |",
        "|---|---|---|---|---|",
        *rows,
    ]))


if __name__ == "__main__":
    main()
