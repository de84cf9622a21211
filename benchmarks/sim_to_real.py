"""The sim-to-real gap on the Dynamixel arm, with the emulator playing reality.

Three PPO controllers for ``arm_reach``: one trained on the nominal model
(configs/ppo_arm_reach.yaml), one with fixed domain randomization
(configs/ppo_arm_reach_dr.yaml), one with DORAEMON-style automatic widening of
the same ranges (configs/ppo_arm_reach_auto.yaml). Each is evaluated three ways:

1. in sim, on the nominal model (the MJCF as written, without randomization);
2. in sim, with the physics set to the emulator's "reality" (a diagnostic: the
   dynamics gap alone, without bus timing);
3. on the emulated robot: the exported ONNX controller through
   ``hardware.deploy.deploy`` -> DynamixelArm -> DynamixelBus -> the vendor SDK ->
   a pseudo-terminal -> the Dynamixel emulator, whose MuJoCo arm has other
   masses, friction, damping and servo gains and an actuation latency, in real
   time at 50 Hz, with the safety layer on.

    python benchmarks/sim_to_real.py [--nominal RUN --randomized RUN --auto RUN] [--episodes 20]

Without runs it trains them first (about 3 x 2.5 minutes here, under runs/sim_to_real).
No peer library. Writes ``benchmarks/results/<--out>`` (BENCHMARKS.md, "Deploy to robots:
timing and the sim-to-real gap").
"""

from __future__ import annotations

from pathlib import Path

import torch

from common import benchmark_parser, machine, write_result

REALITY = dict(mass_scale=1.5, damping_scale=1.6, friction_scale=3.0, gain_scale=0.5, actuation_latency=0.01)
"""The emulated arm: 50% heavier links, half the servo gains, 3x gear friction, 10 ms latency."""


def train_run(config: str, steps: int, seed: int) -> Path:
    from robolearn.config import load_config
    from robolearn.runner import train

    cfg = load_config(config, [f"runner.total_steps={steps}", f"seed={seed}", "run_dir=runs/sim_to_real",
                               "logging.wandb=disabled", "runner.video_seconds=0"])
    return train(cfg).run_dir


def final_width(run: Path) -> str:
    """The randomization width at the end of training (1 = the configured ranges), '-' if none."""
    from robolearn.logger import read_metrics

    rows = read_metrics(run)
    width = rows[-1].get("randomization/width") if rows else None
    return "-" if width is None else f"{width:.2f}"


def in_sim(run: Path, episodes: int, reality: bool) -> dict:
    import sims
    from robolearn.evaluate import evaluate
    from robolearn.export import ExportedController

    randomization = None
    if reality:
        point = {k: [v, v] for k, v in REALITY.items() if k.endswith("_scale")}
        latency = REALITY["actuation_latency"]
        randomization = {**point, "action_latency_s": [latency, latency]}
    env = sims.make_env("arm_reach", episodes, seed=123, randomization=randomization)
    return evaluate(ExportedController(run / "export" / "controller.onnx"), env, episodes, seed=123)  # (deploy's file)


def on_emulated_robot(run: Path, episodes: int) -> dict:
    from hardware.deploy import deploy
    from hardware.dxl_arm import load_robot_config
    from hardware.dynamixel.emulator import DynamixelEmulator, PhysicsOverrides

    config = load_robot_config("dxl_arm")
    servos = {m.id: m.joint for m in config.calibration.motors}
    with DynamixelEmulator(config.model_xml, servos, baudrate=config.baudrate,
                           physics=PhysicsOverrides(**REALITY)) as emulator:
        return deploy(run, "dxl_arm", port=emulator.port, episodes=episodes, fmt="onnx", record=False, seed=123)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--nominal", type=Path, help="a trained run of configs/ppo_arm_reach.yaml (default: train one)")
    parser.add_argument("--randomized", type=Path,
                        help="a trained run of configs/ppo_arm_reach_dr.yaml (default: train one)")
    parser.add_argument("--auto", type=Path, help="a trained run of configs/ppo_arm_reach_auto.yaml (default: train one)")
    parser.add_argument("--episodes", type=int, default=20, help="episodes on the emulated robot (real time)")
    parser.add_argument("--sim-episodes", type=int, default=200, help="episodes of each sim evaluation")
    parser.add_argument("--steps", type=int, default=2_000_000, help="training steps when training here")
    parser.add_argument("--seed", type=int, default=0, help="seed of the runs trained here")
    parser.add_argument("--out", default="sim_to_real.md", help="file under benchmarks/results/ (a trial: another name)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = {
        "nominal (configs/ppo_arm_reach.yaml)": args.nominal or train_run("ppo_arm_reach", args.steps, args.seed),
        "randomized (configs/ppo_arm_reach_dr.yaml)": args.randomized or train_run("ppo_arm_reach_dr", args.steps, args.seed),
        "auto-widened (configs/ppo_arm_reach_auto.yaml)": args.auto or train_run("ppo_arm_reach_auto", args.steps, args.seed),
    }
    rows = []
    for name, run in runs.items():
        sim = in_sim(run, args.sim_episodes, reality=False)
        sim_reality = in_sim(run, args.sim_episodes, reality=True)
        robot = on_emulated_robot(run, args.episodes)
        rows.append(f"| {name} | {final_width(run)} | {100 * sim['success_rate']:.0f}% ({sim['return_mean']:.1f}) "
                    f"| {100 * sim_reality['success_rate']:.0f}% ({sim_reality['return_mean']:.1f}) "
                    f"| {100 * robot['success_rate']:.0f}% ({robot['return_mean']:.1f}) "
                    f"| {robot['loop']['overruns']} / {robot['loop']['jitter_ms_p99']:.2f} ms "
                    f"| {sum(robot['safety_events'].values())} |")
        print(rows[-1], flush=True)
    reality = ", ".join(f"{k} {v}" for k, v in REALITY.items())
    markdown = f"""### Sim-to-real gap on the Dynamixel arm (emulated reality)

Machine: {machine()}. Success = fingertip within 2 cm of the target at the end of a 2 s episode; return in brackets.
Sim columns: {args.sim_episodes} episodes each; emulated robot: {args.episodes} episodes in real time at 50 Hz through
the vendor SDK over a pseudo-terminal, safety layer on. Emulator reality: {reality}.
Reproduce: `python benchmarks/sim_to_real.py --episodes {args.episodes} --sim-episodes {args.sim_episodes} --steps {args.steps}` (trains the three controllers, {args.steps:,} steps each).

| controller | randomization width at the end | sim, nominal model | sim, reality's physics | emulated robot | robot loop overruns / jitter p99 | safety interventions |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}
"""
    write_result(args.out, markdown)


if __name__ == "__main__":
    main()
