"""Where a PPO run would wait on the GPU: the calls that read a device value on the host, by source line.

Counts them with :class:`robolearn.host_reads.HostReads` over whole iterations after a first one. By default
on the Go1 config on MuJoCo Warp's CPU device, with the checks that read their verdicts at once on a CPU
(``robolearn.interfaces.HOST_READS_FREE_ON``) made to defer them as on a GPU: the GPU's code path without a
GPU. Prints the table and writes ``results/host_syncs.md`` (``host_syncs_cuda.md`` on a GPU); no peer library.

    python benchmarks/host_syncs.py                            # Go1 flat, Warp's CPU device, 16 worlds
    python benchmarks/host_syncs.py --device cuda --worlds 4096  # on a GPU
    python benchmarks/host_syncs.py --config sac_hopper runner.random_steps=1000  # SAC, updating from iteration 2
"""

from __future__ import annotations

import contextlib
import io
import linecache
import tempfile
from pathlib import Path
from typing import Any

import torch

from common import benchmark_parser, code_commit, machine, write_result
from robolearn import interfaces
from robolearn.config import load_config
from robolearn.host_reads import HostReads
from robolearn.runner import train

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--config", default="ppo_go1_flat", help="a training config (its task must run on MuJoCo Warp)")
    parser.add_argument("--device", default="cpu", help="cpu: MuJoCo Warp's CPU device; cuda: a GPU")
    parser.add_argument("--worlds", type=int, default=16, help="env.num_envs")
    parser.add_argument("--iterations", type=int, default=3, help="iterations counted, after one that is not")
    parser.add_argument("--out", help="file under benchmarks/results/ (a trial: another name); default host_syncs.md, "
                        "host_syncs_<config>.md for another --config, _cuda on a GPU")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. runner.random_steps=1000 for SAC's "
                        "updates to start after the first iteration")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: no CUDA GPU here; the default, cpu, runs Warp's CPU device")
    # the run is a means, not a result: it goes into a folder removed after, and its lines (an "ended early"
    # with a resume line for a run that is gone) are not printed
    scratch = tempfile.TemporaryDirectory(prefix="host_syncs-")
    cfg = load_config(args.config, [
        "env.backend=warp", f"env.device={args.device}", f"env.num_envs={args.worlds}", "env.num_threads=1",
        "runner.eval_episodes=0", "runner.video_seconds=0", "runner.checkpoint_every=1000000",
        "runner.total_steps=1000000000", "logging.progress=false", "logging.wandb=disabled",
        f"run_dir={scratch.name}", *args.overrides])
    interfaces.HOST_READS_FREE_ON.clear()  # the finiteness checks as on a GPU: deferred to once an iteration
    reads, env_steps = HostReads(counting=False, stand_in=args.device == "cpu"), []

    def stop(metrics: dict) -> bool:  # called after each iteration: count from the second one on
        env_steps.append(metrics["env_steps"])
        reads.counting = len(env_steps) <= args.iterations
        return not reads.counting

    with scratch, reads, contextlib.redirect_stdout(io.StringIO()):
        train(cfg, stop=stop)
    steps = round((env_steps[-1] - env_steps[0]) / args.worlds / args.iterations)  # of every world, per iteration
    suffix = ("" if args.config == "ppo_go1_flat" else f"_{args.config}") + ("" if args.device == "cpu" else "_cuda")
    write_result(args.out or f"host_syncs{suffix}.md", report(reads.sites, args, steps))


PARTS = {"sims": "the env step", "policies": "the learner", "robolearn": "the runner"}


def report(sites: dict, args: Any, steps: int) -> str:
    """The reads per iteration by line, and in sum for each part of the code (sims/, policies/, robolearn/)."""
    rows = [f"| {count / args.iterations:g} | `{name}` | {path}:{line} | "
            f"`{linecache.getline(str(ROOT / path), line).strip().replace('|', '/')[:110]}` |"
            for (name, path, line), count in sorted(sites.items(), key=lambda item: (-item[1], item[0]))]
    parts = {part: sum(count for (_, path, _), count in sites.items() if path.startswith(f"{folder}/"))
             for folder, part in PARTS.items()}
    sums = ", ".join(f"{count / args.iterations:g} in {part} ({count / args.iterations / steps:.2f} per env step)"
                     if part == "the env step" else f"{count / args.iterations:g} in {part}"
                     for part, count in parts.items())
    return "\n".join([
        f"# Host reads of device values in training ({args.config}, backend warp on {args.device})",
        "", f"Machine: {machine()}. Code: {code_commit()}.", "",
        f"{args.worlds} worlds, {args.iterations} iterations of {steps} env steps counted after a first one "
        f"(`python benchmarks/host_syncs.py`). On a GPU each is a wait for the device's queue to drain.", "",
        f"**Per iteration: {sum(sites.values()) / args.iterations:g} reads; {sums}.**", "",
        "| per iteration | call | where | source |", "|---|---|---|---|", *rows])


if __name__ == "__main__":
    main()
