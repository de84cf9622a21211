"""Data-parallel PPO: env steps/s with 1, 2, ... ranks under torchrun, and the scaling efficiency.

Each rank steps ``--num-envs`` worlds (``env.num_envs`` is per rank, so N ranks
collect N times the batch per iteration: weak scaling) until the run has taken
``--budget`` env steps in all; throughput is the whole loop, collection and
update (gradient all-reduce included), over all ranks, from the end of the
first iteration (warm-up) to the last. Efficiency = throughput(N) / (N x
throughput(1)). On CPU every rank gets its share of the cores for physics
(cores / N threads) and one torch thread. No peer library: N ranks are set against one.

    python benchmarks/distributed_scaling.py                        # CPU, gloo, 1 and 2 ranks
    python benchmarks/distributed_scaling.py --ranks 1 2 4 8 --budget 1000000
    python benchmarks/distributed_scaling.py --device cuda          # one GPU per rank, NCCL

Writes ``benchmarks/results/distributed_scaling.md`` (``--device cuda``:
``distributed_scaling_cuda.md``), quoted in BENCHMARKS.md, "Data-parallel PPO scaling".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import benchmark_parser

ROOT = Path(__file__).resolve().parent.parent


def worker(args: argparse.Namespace) -> None:
    """One rank (started by torchrun): train, then rank 0 writes the run's throughput to ``args.worker_out``."""
    import torch
    import torch.distributed as dist

    from robolearn import distributed, load_config
    from robolearn.logger import read_metrics
    from robolearn.runner import Runner

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # the backend asked for, not the default for the device
        if args.device == "cuda":
            torch.cuda.set_device(distributed.local_rank())
        dist.init_process_group(backend=args.backend)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(args.config, [
            f"run_dir={tmp}", f"env.num_envs={args.num_envs}", f"env.device={args.device}",
            f"env.backend={args.sim_backend}",
            f"runner.total_steps={args.budget}", "runner.eval_episodes=0", "runner.video_seconds=0",
            "runner.checkpoint_every=1000000", "logging.wandb=disabled", "logging.progress=false",
        ])
        runner = Runner(cfg)
        try:
            result = runner.train()
        finally:
            runner.close()
        if distributed.is_main():
            lines = read_metrics(result.run_dir)
            first, last = lines[0], lines[-1]
            fps = (last["env_steps"] - first["env_steps"]) / (last["time"] - first["time"])
            Path(args.worker_out).write_text(json.dumps({"env_steps": last["env_steps"], "seconds": last["time"],
                                                  "fps": fps, "iterations": len(lines)}))


def run(ranks: int, args: argparse.Namespace) -> dict:
    """Launch ``ranks`` ranks of this script with torchrun and read rank 0's numbers."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
                   __file__, "--worker", "--worker-out", out.name, "--config", args.config, "--num-envs", str(args.num_envs),
                   "--budget", str(args.budget), "--device", args.device, "--backend", args.backend, "--sim-backend", args.sim_backend]
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        done = subprocess.run(command, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
        if done.returncode:  # the ranks' own errors, not only torchrun's exit status
            raise SystemExit(f"{ranks} rank(s) failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
        return json.loads(Path(out.name).read_text())


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2],
                        help="rank counts, one torchrun launch each; efficiency is against the first")
    parser.add_argument("--config", default="ppo_half_cheetah", help="the PPO config every rank trains")
    parser.add_argument("--num-envs", type=int, default=64, help="worlds per rank")
    parser.add_argument("--budget", type=int, default=200_000, help="env steps of each run, all ranks together")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where worlds and networks run (env.device); cuda: one GPU per rank")
    parser.add_argument("--backend", default=None, choices=["gloo", "nccl"],
                        help="the process group's: default nccl on cuda, gloo on cpu")
    parser.add_argument("--sim-backend", default="mujoco", choices=["mujoco", "warp"], help="the simulator (env.backend)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per rank count; the best is kept")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help="file under benchmarks/results/ (a trial: another name); default "
                        "distributed_scaling.md, or distributed_scaling_cuda.md with --device cuda")
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    if args.worker:
        return worker(args)

    from common import machine, write_result

    load_before, results = os.getloadavg()[0], {}
    for ranks in args.ranks:
        results[ranks] = max((run(ranks, args) for _ in range(args.repeats)), key=lambda r: r["fps"])
        print(f"{ranks} rank(s): {results[ranks]['fps']:,.0f} env steps/s", flush=True)
    base = results[args.ranks[0]]["fps"] / args.ranks[0]
    rows = [f"| {n} | {args.num_envs} | {n * args.num_envs} | {r['env_steps']:,} | {r['iterations']} | {r['seconds']:.1f} | "
            f"{r['fps']:,.0f} | {r['fps'] / (n * base):.2f} |" for n, r in results.items()]
    device = args.device if args.device == "cpu" else f"{args.device} (one GPU per rank)"
    gpu = ""
    if args.device == "cuda":
        import torch

        gpu = f", GPU {torch.cuda.get_device_name(0)}"
    command = " ".join(["python benchmarks/distributed_scaling.py", *sys.argv[1:]])
    markdown = f"""## Data-parallel PPO scaling (torchrun, {args.backend})

Machine: {machine()}{gpu}; load average {load_before:.1f} before and {os.getloadavg()[0]:.1f} after
(other jobs share the machine). Device {device}, backend {args.backend}, simulator {args.sim_backend}; `{args.config}` with {args.num_envs} worlds
per rank, a budget of {args.budget:,} env steps per run (all ranks together); best of {args.repeats} run(s).
Throughput: env steps/s of collection plus update over all ranks, after the first iteration.
Efficiency: throughput(N) / (N x throughput(1)). Reproduce: `{command}`.

| ranks | worlds per rank | worlds | env steps | iterations | seconds | env steps/s | efficiency |
|---:|---:|---:|---:|---:|---:|---:|---:|
""" + "\n".join(rows)
    write_result(args.out or ("distributed_scaling.md" if args.device == "cpu" else "distributed_scaling_cuda.md"), markdown)


if __name__ == "__main__":
    main()
