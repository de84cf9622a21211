"""D4RL-style datasets (random / medium / medium-replay / expert) of our locomotion tasks, made here.

For each task:

1. **expert**: PPO (``configs/ppo_<task>.yaml``) trained with our own runner for
   ``--expert-steps`` env steps (3M by default: about 5 minutes of this 2-core machine);
2. **medium**: the same PPO config and seed, stopped as soon as its training return
   (stochastic policy, last 100 episodes) reaches ``--medium-fraction`` of the expert's
   evaluation return (D4RL's "medium" is about 1/3 of expert);
3. **medium-replay**: every whole episode that medium's training run collected, from its
   first iteration to the one where it stopped (D4RL's medium-replay is the replay buffer of
   the training run that produced medium; ours is PPO's rollouts, recorded by wrapping the
   run's VecEnv in :class:`robolearn.data.recording_env.RecordingEnv`);
4. **random**: uniform actions.

Each policy is recorded (``robolearn.data.record``, exact simulator state included) for
about ``--steps`` transitions: whole episodes, their number estimated from a pilot
evaluation's mean length. medium and expert add Gaussian action noise (``--noise`` half
ranges) as D4RL's stochastic behavior policies did. ``ref_min_score`` is the random
policy's mean return, ``ref_max_score`` the expert's deterministic mean return (both over
``EVAL_EPISODES`` episodes), so a normalized score of 1 means "as good as our expert".

    python benchmarks/make_datasets.py [--tasks hopper half_cheetah walker2d] [--steps 100000]

Datasets go to ``<root>/<task>-{random,medium,medium-replay,expert}-v0`` (``--root``, else
``$ROBOLEARN_DATASETS``, else ``~/.robolearn/datasets``); a summary goes to
``benchmarks/results/offline_datasets.md`` (``offline_datasets_<tasks>.md`` for some of the tasks),
quoted in BENCHMARKS.md, "Offline datasets and offline RL"; ``offline_d4rl_style.py`` trains on them.
The PPO runs stay under ``runs/datasets`` in the working directory. No peer library.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]  # this checkout's packages, not an installed copy
from common import benchmark_parser, machine, raise_to_end_an_episode, write_result  # noqa: E402

if TYPE_CHECKING:
    from robolearn.data import DatasetWriter
    from robolearn.interfaces import VecEnv

EVAL_EPISODES = 20
TASKS = ("hopper", "half_cheetah", "walker2d")
RUN_DIR = "runs/datasets"


def train_ppo(task: str, steps: int, stop_return: float | None = None, seed: int = 0,
              replay: Callable[[VecEnv, Path], DatasetWriter] | None = None) -> tuple[Path, float, int]:
    """A PPO run on ``task``; returns (run directory, seconds, env steps done). With ``replay``, every
    whole episode of the run's rollouts also goes to the writer ``replay(training env, run directory)``
    returns."""
    from robolearn import load_config
    from robolearn.data.recording_env import RecordingEnv
    from robolearn.runner import Runner

    name = f"ppo_{task}_" + ("expert" if stop_return is None else "medium")
    cfg = load_config(f"ppo_{task}", [f"runner.total_steps={steps}", f"seed={seed}", f"name={name}", f"run_dir={RUN_DIR}",
                                       "logging.wandb=disabled", "logging.progress=false", "runner.video_seconds=0",
                                       "runner.eval_episodes=0"])
    runner = Runner(cfg)
    stop = None if stop_return is None else (lambda m: m.get("return", -math.inf) >= stop_return)
    with contextlib.ExitStack() as stack:
        if replay is not None:
            # The runner steps self.env only; wrapping it records the rollouts without touching the learner.
            runner.env = RecordingEnv(runner.env, stack.enter_context(replay(runner.env, runner.run_dir)))
        start = time.perf_counter()
        try:
            runner.train(stop=stop)
        finally:
            runner.close()
    return runner.run_dir, time.perf_counter() - start, runner.progress.env_steps


def too_few_expert_steps(task: str, steps: int, metrics: list[dict]) -> str | None:
    """What to raise ``--expert-steps`` to when the expert's run (its ``metrics`` lines) ended no episode, else
    None. Medium is the same run stopped at a training return and medium-replay its whole episodes, so neither
    would have one (half_cheetah ends none before its 1000-step time limit): they had failed after both runs with
    the dataset writer's traceback."""
    if any("return" in line for line in metrics):
        return None
    what = raise_to_end_an_episode("--expert-steps", f"ppo_{task}")
    return (f"--expert-steps {steps:,}: no {task} episode ended in the expert's PPO run, so medium has no training "
            f"return to stop at and medium-replay no episode; {what}")


def policy(task: str, run: Path | None, env):
    """The run's deterministic controller, or uniform random actions when ``run`` is None."""
    from robolearn.data import RandomController
    from robolearn.runs import load_agent

    return RandomController(env, seed=0) if run is None else load_agent(run, env).controller().to(env.device).eval()


def pilot(task: str, run: Path | None) -> dict[str, float]:
    """Mean return and length of the policy over EVAL_EPISODES deterministic episodes."""
    import sims
    from robolearn.evaluate import evaluate

    with sims.make_env(task, num_envs=EVAL_EPISODES, seed=12345) as env:
        return evaluate(policy(task, run, env), env, EVAL_EPISODES, seed=12345)


def dataset_writer(task: str, kind: str, env, run: Path | None, noise: float, refs: tuple[float, float],
                   root: Path | None, seed: int) -> DatasetWriter:
    """A writer for ``<task>-<kind>`` with the metadata every dataset here carries."""
    from robolearn.data import DatasetWriter, env_metadata

    metadata = env_metadata(env, task, controller=f"run:{run}" if run else "random",
                            algorithm_name="ppo" if run else "random", source="record (benchmarks/make_datasets.py)",
                            noise=noise, seed=seed, ref_min_score=refs[0], ref_max_score=refs[1])
    if kind == "medium-replay":
        metadata |= {"controller": f"run:{run} (its training rollouts)", "source": "PPO training run (make_datasets.py)"}
    return DatasetWriter(f"{task}-{kind}", env.observation_spec, env.action_spec, metadata=metadata, root=root,
                         overwrite=True)


def summarize(name: str, root: Path | None, seconds: float) -> dict:
    from robolearn.data import Dataset

    summary = Dataset.load(name, root).summary()
    print(f"{name}: {summary['episodes']} episodes, {summary['steps']} steps, return {summary['return_mean']:.1f}, "
          f"normalized {summary['normalized_score_mean']:.3f} ({seconds:.0f} s)", flush=True)
    return summary


def record_dataset(task: str, kind: str, run: Path | None, steps: int, noise: float, refs: tuple[float, float],
                   length: float, root: Path | None) -> dict[str, float]:
    import sims
    from robolearn.data import record

    episodes = max(1, math.ceil(steps / max(length, 1.0)))
    noise = noise if run else 0.0
    with sims.make_env(task, num_envs=16, seed=1) as env:
        with dataset_writer(task, kind, env, run, noise, refs, root, seed=1) as writer:
            stats = record(policy(task, run, env), env, writer, episodes, noise=noise, seed=1, progress=False)
    return summarize(f"{task}-{kind}", root, stats.seconds)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), help="tasks; configs/ppo_<task>.yaml trains their policies")
    parser.add_argument("--steps", type=int, default=100_000, help="transitions per dataset (about)")
    parser.add_argument("--expert-steps", type=int, default=3_000_000, help="PPO env steps for the expert")
    parser.add_argument("--medium-fraction", type=float, default=0.4,
                        help="medium stops when its training return reaches this fraction of the expert's")
    parser.add_argument("--noise", type=float, default=0.1, help="action noise of medium/expert, in half ranges")
    parser.add_argument("--root", type=Path, help="datasets directory (default: $ROBOLEARN_DATASETS or ~/.robolearn/datasets)")
    parser.add_argument("--out", help="table under benchmarks/results/: offline_datasets.md, or with some --tasks "
                        "offline_datasets_<tasks>.md, so that a partial run leaves the full table whole")
    args = parser.parse_args()
    from robolearn.logger import read_metrics

    if args.out is None:
        args.out = "offline_datasets" + ("" if tuple(args.tasks) == TASKS else "_" + "_".join(args.tasks)) + ".md"
    torch.set_num_threads(1)
    rows = []
    for task in args.tasks:
        random = pilot(task, None)
        expert_run, expert_s, expert_steps = train_ppo(task, args.expert_steps)
        if problem := too_few_expert_steps(task, args.expert_steps, read_metrics(expert_run)):
            raise SystemExit(problem)
        expert = pilot(task, expert_run)
        refs = (random["return_mean"], expert["return_mean"])
        print(f"{task} expert: {expert_steps} steps in {expert_s:.0f} s, return {expert['return_mean']:.1f}", flush=True)
        medium_run, medium_s, medium_steps = train_ppo(
            task, args.expert_steps, stop_return=args.medium_fraction * expert["return_mean"],
            replay=lambda env, run: dataset_writer(task, "medium-replay", env, run, 0.0, refs, args.root, seed=0))
        medium = pilot(task, medium_run)
        print(f"{task} medium: {medium_steps} steps in {medium_s:.0f} s, return {medium['return_mean']:.1f}", flush=True)
        replay = summarize(f"{task}-medium-replay", args.root, medium_s)
        for kind, run, ev, steps, seconds in (("random", None, random, 0, 0.0), ("medium", medium_run, medium, medium_steps, medium_s),
                                             ("expert", expert_run, expert, expert_steps, expert_s)):
            s = record_dataset(task, kind, run, args.steps, args.noise, refs, ev["length_mean"], args.root)
            rows.append(f"| {s['id']} | {'uniform random' if run is None else f'PPO, {steps:,} env steps ({seconds:.0f} s)'} | "
                        f"{ev['return_mean']:.0f} | {s['episodes']} | {s['steps']:,} | {s['return_mean']:.0f} ± {s['return_std']:.0f} | "
                        f"{100 * s['normalized_score_mean']:.1f} |")
            if kind == "medium":
                rows.append(f"| {replay['id']} | medium's PPO training rollouts, env steps 0 to {medium_steps:,} | - | "
                            f"{replay['episodes']} | {replay['steps']:,} | {replay['return_mean']:.0f} ± "
                            f"{replay['return_std']:.0f} | {100 * replay['normalized_score_mean']:.1f} |")
        rows.append(f"| | ref_min {refs[0]:.1f} (random), ref_max {refs[1]:.1f} (expert, deterministic) | | | | | |")
    lines = [f"### Offline datasets of our {', '.join(args.tasks)} (D4RL-style, made here)", "",
             f"Machine: {machine()}. Made by `python benchmarks/make_datasets.py` "
             f"(medium stops at {args.medium_fraction:.0%} of the expert's return; medium/expert recorded with "
             f"{args.noise} action noise; {EVAL_EPISODES} deterministic episodes for the policy returns and refs).", "",
             "| dataset | behavior policy | policy return (no noise) | episodes | transitions | dataset return | normalized x100 |",
             "|---|---|---|---|---|---|---|", *rows]
    write_result(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
