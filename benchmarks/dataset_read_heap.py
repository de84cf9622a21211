"""What reading a dataset costs every later update: a small MLP's forward and backward, timed
before and after ``Dataset.transitions`` reads the dataset on a worker thread (what it does) and
on the main thread (where it read until session 22, then with one more copy).

Reading thousands of episodes fragments the heap it reads on; on the main thread's heap glibc then
walks long free lists on every tensor allocation (``_int_malloc`` at 20% of a profile). The worker
thread gets a malloc arena of its own. Each case runs in a fresh process, so each starts from a clean heap.
No peer library: the two ways of reading are compared. Writes ``benchmarks/results/dataset_read_heap.md``
(quoted in BENCHMARKS.md, "Offline datasets and offline RL", the medium-replay speed of session 22).

    python3 benchmarks/dataset_read_heap.py [--datasets walker2d-medium-replay walker2d-expert]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
from common import benchmark_parser, code_commit, machine, write_result  # noqa: E402

ITERATIONS = 2000
READERS = ("worker thread", "main thread")


def mlp_microseconds() -> float:
    """Mean time of one forward and backward of a 256-wide MLP on a batch of 256 (one torch thread)."""
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(23, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 1))
    x = torch.randn(256, 23)
    start = time.perf_counter()
    for _ in range(ITERATIONS):
        net(x).sum().backward()
    return (time.perf_counter() - start) / ITERATIONS * 1e6


def measure(dataset: str, reader: str) -> dict[str, float]:
    """In this (fresh) process: the MLP's time, the read, the MLP's time again."""
    import torch

    from robolearn.data import Dataset

    torch.set_num_threads(1)
    torch.set_float32_matmul_precision("medium")  # our offline configs' setting
    before = mlp_microseconds()
    ds = Dataset.load(dataset)
    start = time.perf_counter()
    ds.transitions() if reader == "worker thread" else ds._read_transitions()  # noqa: SLF001 - the old path
    read_seconds = time.perf_counter() - start
    return {"before_us": before, "after_us": mlp_microseconds(), "read_s": read_seconds,
            "episodes": ds.num_episodes, "steps": ds.num_steps}


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--datasets", nargs="+", default=["walker2d-medium-replay", "walker2d-expert"],
                        help="datasets to read (benchmarks/make_datasets.py makes them), each on both threads")
    parser.add_argument("--out", default="dataset_read_heap.md",
                        help="file under benchmarks/results/ (a trial: another name)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(*args.worker)))
        return
    lines = [f"### Dataset reading and the speed of later updates\n\nMachine: {machine()}. Code: {code_commit()}. "
             f"`python3 benchmarks/dataset_read_heap.py`: one fresh process per row; a 256-wide MLP's forward and "
             f"backward (batch 256, one torch thread, {ITERATIONS} times) before and after reading the dataset.\n",
             "| dataset | episodes | transitions | read on | read s | MLP before (us) | MLP after (us) | after / before |",
             "|---|---|---|---|---|---|---|---|"]
    for dataset in args.datasets:
        for reader in READERS:
            out = subprocess.run([sys.executable, __file__, "--worker", dataset, reader], capture_output=True, text=True)
            if out.returncode:  # the worker says why (a dataset to make first): not a bare CalledProcessError
                raise SystemExit(f"{dataset} on the {reader}: {out.stderr[-3000:]}")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            lines.append(f"| {dataset} | {r['episodes']:,} | {r['steps']:,} | {reader} | {r['read_s']:.1f} | "
                         f"{r['before_us']:.0f} | {r['after_us']:.0f} | {r['after_us'] / r['before_us']:.2f}x |")
    write_result(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
