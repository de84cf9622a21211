"""Simulation throughput of the MuJoCo Warp backend, and its memory per 1k worlds.

The whole VecEnv step (physics in a CUDA graph, then the task's observations,
rewards, terminations and auto-resets in torch) with uniform random actions
drawn on the device, for each task at each world count:

    python benchmarks/warp_throughput.py --device cuda --worlds 1024 4096 16384
    python benchmarks/warp_throughput.py --device cpu   # Warp's CPU device against our CPU backend

On CPU, the same tasks also run on our CPU MuJoCo backend (all cores) side by
side, so the table says how much slower Warp's CPU device is (it exists for
tests; the CPU backend is the one to train with on a CPU). GPU memory is the
device's used memory (``torch.cuda.mem_get_info``, which sees Warp's allocator
too) after building the env, minus before, per 1024 worlds.

Writes ``benchmarks/results/warp_throughput_gpu.md`` (CUDA) or ``warp_throughput_cpu.md`` (BENCHMARKS.md,
"GPU: MuJoCo Warp"); ``bash benchmarks/gpu.sh throughput`` runs it on a GPU.
"""

from __future__ import annotations

import time

import torch

from common import benchmark_parser, machine, write_result
from sims import make_env


def env_steps_per_s(task: str, worlds: int, device: str, backend: str, seconds: float) -> tuple[float, float | None]:
    """Env steps per second of the full VecEnv step, and GPU MiB per 1024 worlds (None on CPU)."""
    cuda = device.startswith("cuda")
    gpu = torch.device(device) if cuda else None  # cuda:N's own clock and memory, not GPU 0's
    if cuda:
        torch.cuda.synchronize(gpu)
        free_before = torch.cuda.mem_get_info(gpu)[0]
    env = make_env(task, worlds, device=device, backend=backend, seed=0)
    low = torch.as_tensor(env.action_spec.low, device=env.device)
    high = torch.as_tensor(env.action_spec.high, device=env.device)

    def step() -> None:
        env.step(low + (high - low) * torch.rand((worlds, low.numel()), device=env.device))

    for _ in range(5):  # graph capture and kernel compilation
        step()
    memory = None
    if cuda:
        torch.cuda.synchronize(gpu)
        memory = (free_before - torch.cuda.mem_get_info(gpu)[0]) / 2**20 / (worlds / 1024)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            step()
        calls += 10
        if cuda:
            torch.cuda.synchronize(gpu)
    rate = calls * worlds / (time.perf_counter() - start)
    env.close()
    del env
    if cuda:
        torch.cuda.empty_cache()
    return rate, memory


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--device", default="cuda",
                        help="a CUDA device, or cpu: Warp's CPU device beside our CPU backend")
    parser.add_argument("--tasks", nargs="+", default=["ant", "go1_flat", "go1_rough"], help="tasks to step")
    parser.add_argument("--worlds", nargs="+", type=int, default=None,
                        help="world counts (default: 1024 4096 16384 on CUDA, 64 on CPU)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds each task and world count is stepped")
    parser.add_argument("--out", help="file under benchmarks/results/; default warp_throughput_gpu.md (or _cpu.md), "
                                      "with some --tasks warp_throughput_<device>_<tasks>.md, so that a partial run "
                                      "leaves the full table whole")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    if args.out is None:
        partial = "" if args.tasks == ["ant", "go1_flat", "go1_rough"] else "_" + "_".join(args.tasks)
        args.out = f"warp_throughput_{'gpu' if cuda else 'cpu'}{partial}.md"
    worlds = args.worlds or ([1024, 4096, 16384] if cuda else [64])
    rows = []
    for task in args.tasks:
        for n in worlds:
            rate, memory = env_steps_per_s(task, n, args.device, "warp", args.seconds)
            row = {"task": task, "worlds": n, "warp": rate, "memory": memory}
            if not cuda:
                row["mujoco"], _ = env_steps_per_s(task, n, "cpu", "mujoco", args.seconds)
            rows.append(row)
            print(row, flush=True)

    where = torch.cuda.get_device_name() if cuda else "Warp's CPU device"
    lines = [f"# MuJoCo Warp throughput ({where})", "",
             f"Machine: {machine()}" + (f", GPU {torch.cuda.get_device_name()}" if cuda else ""), "",
             "Full VecEnv step (physics, observations, rewards, resets), random actions, env steps/s "
             f"(control steps x worlds; best effort over {args.seconds:.0f} s).", ""]
    if cuda:
        lines += ["| task | worlds | env steps/s | GPU MiB per 1k worlds |", "|---|---|---|---|"]
        lines += [f"| {r['task']} | {r['worlds']} | {r['warp']:,.0f} | {r['memory']:.0f} |" for r in rows]
    else:
        lines += ["| task | worlds | Warp CPU device | CPU MuJoCo backend | CPU backend / Warp |", "|---|---|---|---|---|"]
        lines += [f"| {r['task']} | {r['worlds']} | {r['warp']:,.0f} | {r['mujoco']:,.0f} | {r['mujoco'] / r['warp']:.1f}x |"
                  for r in rows]
    write_result(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
