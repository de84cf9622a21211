"""Report a Go1 velocity-tracking run: learning curve against wall-clock and the tracking error.

The tracking error is measured here, not read from training logs (which carry
exploration noise): the run's exported controller drives ``--worlds`` Go1s on
the run's own env config for ``--seconds`` of sim time, commands resampled as
in training, and the mean |v_xy command - v_xy| and |yaw-rate error| over all
steps are reported, the xy error also by the direction commanded (a policy that
walks only forward and left scores ~0.5 m/s overall), with the share of actions
at the bounds of the action box (a policy that switches joints between corners
sits there). No peer library. Writes ``benchmarks/results/go1_gpu.md`` (``--out`` to change),
quoted in BENCHMARKS.md, "GPU: MuJoCo Warp", "Go1 velocity tracking in 3 minutes of wall-clock";
``bash benchmarks/gpu.sh go1`` trains the run and reports it.

    python benchmarks/go1_gpu_report.py benchmarks/runs/go1_gpu
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import benchmark_parser, machine, task_env, write_result  # noqa: E402
from robolearn.registry import make_env  # noqa: E402
from robolearn.config import load_run_config  # noqa: E402
from robolearn.runs import load_agent  # noqa: E402

THRESHOLD = 0.3  # m/s: "walks" = mean xy tracking error below this, commands U(-1, 1) m/s per axis


DIRECTIONS = ("+vx +vy", "+vx -vy", "-vx +vy", "-vx -vy", "no xy command")


@torch.no_grad()
def tracking_error(run: Path, worlds: int, seconds: float) -> dict[str, float]:
    cfg = load_run_config(run)
    cfg.env.randomization = {}  # nominal robot, no pushes: the gait itself
    with make_env(cfg.env, num_envs=worlds, seed=123) as env:
        inner = task_env(env)
        task, bound = inner.task, torch.as_tensor(env.action_spec.high, device=env.device)
        controller = load_agent(run, env).controller().to(env.device).eval()
        obs = env.reset(seed=123)
        sums = {"lin_vel_error": 0.0, "ang_vel_error": 0.0}
        by_direction, counts = torch.zeros(len(DIRECTIONS)), torch.zeros(len(DIRECTIONS))
        falls, at_bound, steps = 0, 0.0, int(seconds / env.control_dt)
        for _ in range(steps):
            action = controller.act(obs)
            at_bound += float((action.abs() >= 0.999 * bound).float().mean())
            obs, _, terminated, _, info = env.step(action)
            for key in sums:
                sums[key] += float(info["log"][f"metrics/{key}"])
            command, error = task.command[:, :2], task.metrics(inner.sim)["lin_vel_error"]
            direction = 2 * (command[:, 0] < 0).long() + (command[:, 1] < 0).long()
            direction[(command == 0).all(dim=1)] = len(DIRECTIONS) - 1
            by_direction += torch.bincount(direction, weights=error.double(), minlength=len(DIRECTIONS)).cpu().float()
            counts += torch.bincount(direction, minlength=len(DIRECTIONS)).cpu().float()
            falls += int(terminated.sum())
    return {**{k: v / steps for k, v in sums.items()}, "falls_per_world_minute": falls / worlds / (seconds / 60),
            "by_direction": dict(zip(DIRECTIONS, (by_direction / counts).tolist())),  # nan: none commanded
            "actions_at_bound": at_bound / steps}


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("runs", type=Path, help="a run, or the run name's folder: its newest run is reported")
    parser.add_argument("--worlds", type=int, default=1024, help="Go1s the controller drives in the tracking test")
    parser.add_argument("--seconds", type=float, default=20.0, help="sim seconds each of them is driven")
    parser.add_argument("--out", default="go1_gpu.md", help="file under benchmarks/results/")
    args = parser.parse_args()
    runs = [args.runs] if (args.runs / "metrics.jsonl").is_file() else \
        [p for p in args.runs.iterdir() if (p / "metrics.jsonl").is_file()] if args.runs.is_dir() else []
    if not runs:
        parser.error(f"{args.runs}: no run there (a folder with metrics.jsonl, or one holding such folders)")
    run = max(runs, key=lambda p: p.stat().st_mtime)
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    error = tracking_error(run, args.worlds, args.seconds)
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    last = lines[-1]
    table = ["| wall-clock (s) | env steps | return | train lin vel error (m/s) | env steps/s |", "|---|---|---|---|---|"]
    picked = lines[:: max(1, len(lines) // 10)]
    for line in picked + ([last] if picked[-1] is not last else []):
        table.append(f"| {line['time']:.0f} | {line['env_steps']:,} | {line.get('return', float('nan')):.2f} | "
                     f"{line.get('metrics/lin_vel_error', float('nan')):.3f} | {line.get('fps', float('nan')):,.0f} |")
    walks = error["lin_vel_error"] < THRESHOLD
    cfg = load_run_config(run)
    randomization = cfg.env.randomization
    pool = randomization.get("dynamics_pool", 0)
    drawn = ("once per robot" if not randomization.get("dynamics_every_episode", True)
             else f"every episode, from a pool of {pool}" if pool else "every episode")
    settings = (f"entropy_coef {cfg.agent.entropy_coef}, max_std {cfg.agent.max_std}, init_std {cfg.agent.init_std}, "
                f"action box ±{cfg.env.kwargs.get('action_limit', 1.0)} x {cfg.env.kwargs.get('action_scale', 0.25)} rad, "
                f"dynamics drawn {drawn}, policy sees its velocity: {cfg.env.kwargs.get('policy_linvel', False)}, "
                f"random episode start: {cfg.env.random_episode_start}, "
                f"reward weights given: {cfg.env.kwargs.get('reward_weights') or 'none (the defaults)'}, "
                f"only positive rewards: {cfg.env.kwargs.get('only_positive_rewards', True)}; "
                f"policy std at the end {last.get('std', float('nan')):.2f}")
    text = "\n".join([
        f"# Go1 velocity tracking (PPO; trained with backend {cfg.env.backend} on {cfg.env.device})", "",
        f"Machine: {machine()}{gpu}. Run: `{run}` ({last['env_steps']:,} env steps; {settings}).", "",
        *table, "",
        f"Deterministic controller, {args.worlds} nominal Go1s, {args.seconds:.0f} s each, commands resampled "
        f"every 10 s: mean xy velocity error **{error['lin_vel_error']:.3f} m/s**, yaw-rate error "
        f"{error['ang_vel_error']:.3f} rad/s, {error['falls_per_world_minute']:.2f} falls per robot-minute. "
        f"Threshold for a walking gait: {THRESHOLD} m/s -> {'met' if walks else 'NOT met'}.", "",
        "xy error by the direction commanded (m/s): "
        + ", ".join(f"{name} {value:.3f}" if value == value else f"{name} none commanded"
                    for name, value in error["by_direction"].items())
        + f"; actions at the bounds of the action box: {100 * error['actions_at_bound']:.0f} %.",
    ])
    write_result(args.out, text)


if __name__ == "__main__":
    main()
