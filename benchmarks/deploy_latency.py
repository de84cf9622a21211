"""Deployment timing: controller inference, loop jitter, and a Dynamixel bus round trip.

1. Inference latency of one controller call (batch 1) for the arm-reach MLP
   (128x128) and an RSL-RL-sized one (256x256x256): eager PyTorch, TorchScript
   and ONNX Runtime, p50 and p99 over many calls.
2. Loop jitter at 100 Hz and 500 Hz: our drift-free ticker (sleep, then spin
   the last 0.5 ms) against the common ``time.sleep(period - work)`` loop,
   driving a controller on the sim arm: wake-up lateness p50/p99/max, overruns,
   and the drift of the loop's clock from wall time after the run.
3. Emulator round trip: one sync read (position + velocity) plus one sync write
   (goal positions) of 6 servos through the vendor SDK over a pseudo-terminal
   at 1 Mbaud, as our bus driver does them each control step.

No peer library: our drift-free loop is set against the naive sleep loop. Writes
``benchmarks/results/deploy_latency.md`` (BENCHMARKS.md, "Deploy to robots: timing and the sim-to-real gap").
No options.

    python benchmarks/deploy_latency.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from common import benchmark_parser, machine, write_result


def percentiles(samples: list[float]) -> tuple[float, float]:
    return float(np.percentile(samples, 50)) * 1e3, float(np.percentile(samples, 99)) * 1e3


def inference_latency(hidden: tuple[int, ...], calls: int = 3000) -> list[str]:
    from robolearn.export import ExportedController, export_controller

    controller = ppo_controller(hidden)
    obs = {"policy": torch.randn(1, 14)}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = export_controller(controller, Path(tmp))
        actors = {"PyTorch eager": controller, "TorchScript": ExportedController(paths["torchscript"]),
                  "ONNX Runtime": ExportedController(paths["onnx"])}
        for name, actor in actors.items():
            with torch.no_grad():
                for _ in range(200):
                    actor.act(obs)
                samples = []
                for _ in range(calls):
                    t = time.perf_counter()
                    actor.act(obs)
                    samples.append(time.perf_counter() - t)
            p50, p99 = percentiles(samples)
            rows.append(f"| {'x'.join(map(str, hidden))} | {name} | {p50:.3f} | {p99:.3f} |")
    return rows


def naive_loop(period: float, steps: int, work) -> dict:
    """The loop many scripts use: do the work, then sleep what is left of the period."""
    lateness, overruns, start = [], 0, time.perf_counter()
    expected = start
    for _ in range(steps):
        t = time.perf_counter()
        work()
        overruns += time.perf_counter() - t > period
        time.sleep(max(0.0, period - (time.perf_counter() - t)))
        expected += period
        lateness.append(time.perf_counter() - expected)
    return {"lateness": [abs(x) for x in lateness], "drift": time.perf_counter() - start - steps * period,
            "overruns": overruns}


def jitter(rate: int, seconds: float) -> list[str]:
    import sims
    from robolearn.runtime import run

    env = sims.make_env("arm_reach", 1, seed=0)
    controller = ppo_controller((128, 128))
    steps = int(rate * seconds)
    start = time.perf_counter()
    stats = run(controller, env, rate_hz=rate, steps=steps)
    ours_drift = time.perf_counter() - start - steps / rate
    obs = env.reset()
    state = {"obs": obs}

    def work():
        state["obs"] = env.step(controller.act(state["obs"])).obs

    naive = naive_loop(1 / rate, steps, work)
    s = stats.summary()
    rows = [f"| {rate} Hz | robolearn runtime (drift-free ticker) | {s['jitter_ms_p50']:.3f} | {s['jitter_ms_p99']:.3f} "
            f"| {s['jitter_ms_max']:.3f} | {s['overruns']} | {1e3 * ours_drift:+.1f} |"]
    p50, p99 = percentiles(naive["lateness"])
    rows.append(f"| {rate} Hz | naive sleep(period - work) loop | {p50:.3f} | {p99:.3f} | "
                f"{1e3 * max(naive['lateness']):.3f} | {naive['overruns']} | {1e3 * naive['drift']:+.1f} |")
    return rows


def ppo_controller(hidden: tuple[int, ...]):
    """The controller a PPO run on arm_reach exports (normalizer, MLP, clip, action scaling)."""
    import sims
    from policies import AGENTS

    torch.manual_seed(0)
    env = sims.make_env("arm_reach", 1)
    config_cls, agent_cls = AGENTS["ppo"]
    agent = agent_cls(env.observation_spec, env.action_spec, config_cls(actor_hidden=hidden, critic_hidden=hidden),
                      torch.device("cpu"))
    return agent.controller().eval()


# implicitfast: the servos' damping (kv) on these light links is unstable under explicit Euler (BADQACC resets).
SIX_JOINT_ARM = """<mujoco model="six"><option timestep="0.002" integrator="implicitfast"/><worldbody>{bodies}</worldbody>
<actuator>{actuators}</actuator></mujoco>"""


def emulator_round_trip(iterations: int = 1000) -> list[str]:
    from hardware.dynamixel.bus import DynamixelBus
    from hardware.dynamixel.calibration import Calibration
    from hardware.dynamixel.emulator import DynamixelEmulator

    body = ""
    for i in reversed(range(6)):  # a 6-joint chain, innermost first
        body = f'<body pos="0 0 0.05"><joint name="j{i + 1}" axis="0 1 0" range="-2 2"/>' \
               f'<geom type="capsule" fromto="0 0 0 0 0 0.05" size="0.01" mass="0.08"/>{body}</body>'
    actuators = "".join(f'<position joint="j{i + 1}" kp="6" kv="0.2" ctrlrange="-2 2" forcerange="-4.1 4.1"/>' for i in range(6))
    motors = [dict(id=i + 1, joint=f"j{i + 1}", model="XM430-W350", homing_offset=0, direction=1,
                   min_position=-2.0, max_position=2.0, velocity_limit=4.8) for i in range(6)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "six.xml"
        xml.write_text(SIX_JOINT_ARM.format(bodies=body, actuators=actuators))
        calibration = Calibration.from_list(motors)
        with DynamixelEmulator(str(xml), {m["id"]: m["joint"] for m in motors}) as emulator:
            with DynamixelBus(emulator.port, calibration) as bus:
                goal = np.zeros(6)
                for _ in range(50):
                    bus.read_state()
                    bus.write_goal(goal)
                samples, reads = [], []
                for i in range(iterations):
                    t = time.perf_counter()
                    q, _ = bus.read_state()
                    t_read = time.perf_counter()
                    bus.write_goal(np.full(6, 0.2 * np.sin(i / 50)))
                    samples.append(time.perf_counter() - t)
                    reads.append(t_read - t)
        p50, p99 = percentiles(samples)
        r50, r99 = percentiles(reads)
        rows.append(f"| 6 x XM430 at 1 Mbaud | {r50:.3f} / {r99:.3f} | {p50:.3f} / {p99:.3f} | "
                    f"{1 / statistics.median(samples):.0f} Hz |")
    return rows


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--out", default="deploy_latency.md", help="file under benchmarks/results/ (a trial: another name)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    inference = inference_latency((128, 128)) + inference_latency((256, 256, 256))
    loops = jitter(100, 5.0) + jitter(500, 5.0)
    bus = emulator_round_trip()
    markdown = f"""### Deployment timing: inference, loop jitter, bus round trip

Machine: {machine()}. One torch thread. Reproduce: `python benchmarks/deploy_latency.py`.

Controller inference, batch 1 (ms):

| MLP | runtime | p50 | p99 |
|---|---|---|---|
{chr(10).join(inference)}

Fixed-rate loop driving the 128x128 controller on the sim arm (env step included) for 5 s (ms; jitter =
lateness of each iteration's start against the fixed schedule start + k x period; overruns = iterations whose
work took longer than a period; extra time = loop duration minus steps x period: for our ticker the ticks it
skipped after overruns, for the naive loop its accumulated oversleep, i.e. clock drift):

| rate | loop | jitter p50 | jitter p99 | max | overruns | extra time (ms) |
|---|---|---|---|---|---|---|
{chr(10).join(loops)}

Dynamixel bus, one sync read (position + velocity) + one sync write (goal positions) through `dynamixel-sdk`
to the emulator over a pseudo-terminal (ms, p50 / p99; the emulator runs its MuJoCo arm in the same process):

| chain | sync read | read + write | sustainable rate |
|---|---|---|---|
{chr(10).join(bus)}
"""
    write_result(args.out, markdown)


if __name__ == "__main__":
    main()
