"""Build the CUDA kernels of our Warp tasks for one GPU architecture, on a machine without a GPU.

MuJoCo Warp compiles its kernels with NVRTC the first time a world steps on a GPU;
for these tasks that is 85 modules, which took 115 s to build for sm_90 on this
2-core machine, time a fresh GPU machine would spend before its first step. Warp's ahead-of-time
compiler needs no GPU, so here each task steps a few times on Warp's CPU device
(which creates every kernel module its step uses), and each module so created is
then compiled for ``--arch`` into the kernel cache at ``WARP_CACHE_PATH``.
Copy that folder to the GPU machine and point ``WARP_CACHE_PATH`` at it: Warp
loads a module from the cache when its content hash matches, and compiles the
rest as usual (its log says "(cached)" or "(compiled)" per module).

    WARP_CACHE_PATH=/tmp/warpcache python benchmarks/warp_prebuild.py --arch 90

Modules whose code differs between devices (a CUDA-only path of MuJoCo Warp, a
different block size) get a different hash and are compiled on the GPU as before.
Seen on an H100 (session 30): the modules built here loaded from the cache; 14 were
compiled there (33 s), the tiled Cholesky solver (CUDA only), broadphase variants
for other world counts, and ``set_const``, which the steps here now exercise by
randomizing masses. Writes only the kernel cache: no results file, no peer.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import warp as wp
from warp._src.context import user_modules  # Warp's registry of kernel modules; no public accessor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import sims  # noqa: E402
from common import benchmark_parser  # noqa: E402

TASKS = ["go1_flat", "go1_rough", "ant", "pendulum", "cartpole", "reacher", "arm_reach", "hopper", "half_cheetah"]


def step_on_cpu(task: str, steps: int = 3) -> None:
    """Create and launch every kernel module ``task``'s VecEnv step and reset use."""
    # A mass draw makes the backend run set_const, which the configs' randomization uses on the GPU.
    env = sims.make_env(task, 4, device="cpu", backend="warp", seed=0, randomization={"mass_scale": [0.9, 1.1]})
    env.reset(seed=0)
    low, high = torch.as_tensor(env.action_spec.low), torch.as_tensor(env.action_spec.high)
    for _ in range(steps):
        env.step(low + (high - low) * torch.rand((4, low.numel())))
    env.close()


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10: 90 = H100/H200, 89 = L4/L40")
    parser.add_argument("--tasks", nargs="+", default=TASKS, help="tasks whose kernel modules to build")
    args = parser.parse_args()
    wp.init()
    start = time.perf_counter()
    for task in args.tasks:
        step_on_cpu(task)
    modules = [module for module in list(user_modules.values()) if module.execs]
    print(f"{len(modules)} kernel modules used by {len(args.tasks)} tasks ({time.perf_counter() - start:.0f} s)")
    start = time.perf_counter()
    for module in modules:
        wp.compile_aot_module(module, arch=args.arch, use_ptx=False)
    print(f"compiled for sm_{args.arch} in {time.perf_counter() - start:.0f} s into {wp.config.kernel_cache_dir}")


if __name__ == "__main__":
    main()
