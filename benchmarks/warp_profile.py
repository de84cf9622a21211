"""Where a Go1 PPO iteration's time goes on the GPU: the env step under each randomization, and policy inference.

Times one env step under each part of the config's randomization alone and all of it (also with
fresh draws instead of the config's ``dynamics_pool``, with the worlds to reset listed, ``done.nonzero()``,
instead of masked, and with 1% of the worlds reset every step, as while a policy learns, with and without
``Task.light_reset``), the MuJoCo Warp pieces of a step, and
one policy call; prints the figures (milliseconds), writes no result file (BENCHMARKS.md, "GPU:
MuJoCo Warp", quotes them). No peer library; ``bash benchmarks/gpu.sh profile`` runs it on a GPU.

    python benchmarks/warp_profile.py [--worlds 4096] [--device cuda]
    python benchmarks/warp_profile.py --worlds 64 --device cpu   # Warp's CPU device, without a GPU
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from common import benchmark_parser
from robolearn import interfaces
from robolearn.config import load_config
from robolearn.registry import make_agent, make_env


def timed(fn: Callable[[], object], device: torch.device, n: int = 20) -> float:
    """Milliseconds per call of ``fn`` after one untimed call, the GPU (if any) drained before and after."""
    drain = torch.cuda.synchronize if device.type == "cuda" else lambda device: None
    fn()
    drain(device)
    start = time.perf_counter()
    for _ in range(n):
        fn()
    drain(device)
    return (time.perf_counter() - start) / n * 1e3


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--worlds", type=int, default=4096, help="worlds of the Go1 env (configs/ppo_go1_flat.yaml)")
    parser.add_argument("--device", default="cuda", help="a CUDA device, or cpu: Warp's CPU device (its own "
                        "proportions, not the GPU's; for a machine without one, e.g. --worlds 64)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: no CUDA GPU here; --device cpu --worlds 64 profiles Warp's CPU "
                         "device (a step of 4096 worlds there takes seconds)")
    interfaces.HOST_READS_FREE_ON.clear()  # the GPU's code path on Warp's CPU device too: resets by mask
    cfg = load_config("ppo_go1_flat", ["env.backend=warp", f"env.device={args.device}", f"env.num_envs={args.worlds}"])
    full = dict(cfg.env.randomization)
    variants = {"none": {}, "mass": {k: full[k] for k in ("link_mass_scale", "torso_mass_kg", "torso_com_m")},
                "friction": {k: full[k] for k in ("contact_friction_scale", "frictionloss_scale")},
                "push": {k: full[k] for k in ("push_every_s", "push_velocity")}, "full": full}
    variants["full, fresh draws"] = {**full, "dynamics_pool": 0}  # the config draws from a pool
    variants["full, resets listed"] = full  # on a GPU the worlds to reset are a mask: every world draws each step
    for name, randomization in variants.items():
        cfg.env.randomization = randomization
        env = make_env(cfg.env, seed=0)
        if name.endswith("resets listed"):  # done.nonzero(): a host sync per step, and resets only when due
            env.env.task.resets_by_mask = False
        action = torch.zeros(args.worlds, 12, device=device)
        print(f"env step [{name}]: {timed(lambda: env.step(action), device):.2f} ms", flush=True)
        if name == "none":
            for piece, ms in backend_pieces(env.sim, device).items():
                print(f"  backend, all worlds: {piece}: {ms:.2f} ms", flush=True)
        if name.startswith("full"):
            resets = torch.randperm(args.worlds, device=device)[: max(1, args.worlds // 100)]
            print(f"env step + 1% of worlds reset [{name}]: "
                  f"{timed(lambda: step_with_resets(env, action, resets), device):.2f} ms", flush=True)
            env.sim._light_reset = False  # what Task.light_reset saves: a whole forward pass after each reset
            print(f"env step + 1% of worlds reset [{name}, whole forward pass]: "
                  f"{timed(lambda: step_with_resets(env, action, resets), device):.2f} ms", flush=True)
        if name == "full":
            agent = make_agent(cfg, env)
            obs = env.reset()
            print(f"agent.act: {timed(lambda: agent.act(obs, explore=True), device):.2f} ms", flush=True)
        env.close()


def backend_pieces(sim, device: torch.device) -> dict[str, float]:
    """Milliseconds of the MuJoCo Warp calls an env step and its resets make, each a CUDA graph as the
    backend runs them: one physics substep, the forward pass after resets, ``reset_data``, ``set_const``
    (a fresh mass draw), and kinematics plus position and velocity sensors alone (what a lighter pass
    after resets could be, for tasks that read nothing else then)."""
    import mujoco_warp as mjw
    import warp as wp

    m, d = sim._m, sim._d
    mask = wp.from_torch(sim._reset_mask)

    def sensors() -> None:
        mjw.fwd_kinematics(m, d)
        mjw.sensor_pos(m, d)
        mjw.com_vel(m, d)
        mjw.sensor_vel(m, d)

    launches = {"physics substep": lambda: mjw.step(m, d), "forward": lambda: mjw.forward(m, d),
                "reset_data": lambda: mjw.reset_data(m, d, reset=mask),
                "set_const": lambda: mjw.set_const(m, d, restore=False), "kinematics + pos/vel sensors": sensors}
    times = {piece: timed(lambda key=f"profile {piece}", fn=fn: sim._run(key, fn), device)
             for piece, fn in launches.items()}
    sim.set_state(torch.arange(sim.num_worlds, device=device), sim.qpos.clone(), sim.qvel.clone())
    return times


def step_with_resets(env, action: torch.Tensor, ids: torch.Tensor) -> None:
    """A step in which worlds ``ids`` end their episodes (at the time limit), as a learning policy's falls
    make them, and the env's own resets start new ones: the task's reset and, with
    ``dynamics_every_episode``, new masses and friction (``set_const``, or a pool's copy)."""
    env.env._episode_step[ids] = env.max_episode_steps - 1
    env.step(action)


if __name__ == "__main__":
    main()
