"""Shared helpers for benchmarks: the machine description, result files, offline training runs."""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
REPO = RESULTS.parents[1]


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The docstring's own line breaks, and each option's default (none said where it is None, False or empty:
    the option's help says what happens then)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default = action.default
        if default is None or default is False or (isinstance(default, (str, list)) and not default):
            return action.help
        return super()._get_help_string(action)


def benchmark_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's parser: --help shows its docstring and each option's default, so a run is understood before it starts."""
    return argparse.ArgumentParser(description=doc, formatter_class=_HelpFormatter)


def runs_file(text: str) -> Path:
    """An argparse type for --from-runs: a runs jsonl file that exists (a missing one is a usage error, not a
    traceback)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no runs file {text} (the committed ones: benchmarks/results/*_runs.jsonl)")
    return path


def check_whole_iterations(parser: argparse.ArgumentParser, steps: int, option: str = "--steps") -> None:
    """Refuse an off-policy budget between whole iterations: the runner trains to the next whole one (1,000 env
    steps), so a table would state fewer steps than ours trained, and a peer would train only the steps given."""
    from robolearn.runner import OFF_POLICY_STEPS_PER_ITERATION as per_iteration

    if steps % per_iteration:
        parser.error(f"{option} {steps:,}: off-policy runs train in whole iterations of {per_iteration:,} env steps; "
                     f"give a multiple of {per_iteration:,}")


def raise_to_end_an_episode(option: str, config: str) -> str:
    """What to raise ``option`` (a budget of env steps) to, for a one-line error, where a run of PPO config
    ``config`` ended no episode: its training return, a curve's points or a dataset's episodes are then missing
    (half_cheetah ends none before its 1000-step time limit). At least where each of the config's envs has
    reached its task's time limit, in whole iterations (episodes that end earlier, as falls do, need fewer); no
    figure where the limit is unknown here (a ``gym:`` env's)."""
    import sims
    from robolearn import load_config

    cfg = load_config(config)
    limit = sims.trained_settings(cfg.env.task, cfg.env.kwargs).get("max_episode_steps")
    if not isinstance(limit, int):
        return f"raise {option}"
    needed = math.ceil(limit / cfg.agent.num_steps) * cfg.agent.num_steps * cfg.env.num_envs
    return (f"raise {option} to at least {needed:,} (where each of configs/{config}.yaml's {cfg.env.num_envs} envs "
            f"has reached the {limit}-step time limit)")


def cpu_model() -> str:
    """The processor's name from /proc/cpuinfo (Linux), else what platform knows, with its widest
    matmul units: small-network updates are matmul-bound on AVX2 and overhead-bound on AMX, so
    speed ratios against a peer differ between the two."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown CPU"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "unknown CPU")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    units = [label for flag, label in (("amx_bf16", "AMX"), ("avx512f", "AVX-512"), ("avx2", "AVX2")) if flag in flags]
    return f"{name} ({units[0] if units else 'no AVX2'})"


def machine() -> str:
    """CPU model, core count and library versions, for every results table."""
    cpu = cpu_model()
    import mujoco
    import torch

    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}, "
            f"mujoco {mujoco.__version__}")


def recorded_machine(run: dict) -> str:
    """The machine a run recorded (a report rebuilt from a runs file names the runs' machine, not this one)."""
    return run.get("machine") or "machine not recorded with these runs"


def code_commit() -> str:
    """The last commit that changed the agents, the runner or the simulators (benchmark-only commits do not
    change a run; a task's step does), with "+dirty" when those files have uncommitted changes: recorded with each
    run to tell code versions apart."""
    git = lambda *args: subprocess.run(["git", *args, "--", "policies", "robolearn", "sims"], cwd=REPO,  # noqa: E731
                                       capture_output=True, text=True).stdout.strip()
    return (git("log", "-1", "--format=%h") or "unknown") + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def quiet_sb3_logger() -> object:
    """An SB3 logger that writes nothing: SB3's default makes an empty ``/tmp/SB3-<date>`` folder every ``learn()``."""
    from stable_baselines3.common.logger import Logger

    return Logger(folder=None, output_formats=[])


def task_env(env: object) -> object:
    """The TaskEnv under an env's wrappers (randomization, delay): its ``task`` and ``sim`` give per-world figures."""
    while not hasattr(env, "task"):
        env = env.env
    return env


def write_result(name: str, markdown: str) -> Path:
    """``results/<name>`` (a name with a folder in it: that path, as given), written atomically (a cut-short
    write leaves the previous table whole)."""
    from robolearn.checkpoint import atomic_write_bytes

    path = RESULTS / name if Path(name).name == name else Path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, lambda f: f.write((markdown.rstrip() + "\n").encode()))
    print(markdown)
    print(f"\nwritten to {path}")
    return path


def append_jsonl(path: Path, record: dict) -> None:
    """Append one record as a JSON line: a benchmark's runs file keeps every run finished so far."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def pool_runs(fn: Callable[[object], dict], jobs: list, processes: int, runs_path: Path,
              ordered: bool = False, append: bool = False) -> Iterator[dict]:
    """Each job's ``fn(job)`` in ``processes`` spawned processes, yielded as it ends (in job order if ``ordered``)
    after it is appended to ``runs_path``: a cut-short benchmark keeps every finished run. The file starts
    empty unless ``append`` (more seeds for runs already there); runs already in it are then moved to
    ``<name>.replaced-<time>.jsonl`` beside it, never deleted (they may be the ones BENCHMARKS.md quotes)."""
    runs_path.parent.mkdir(parents=True, exist_ok=True)
    if not append and runs_path.is_file() and runs_path.read_text().strip():
        stamp, n = f"{runs_path.stem}.replaced-{datetime.now():%Y%m%d-%H%M%S}", 0
        kept = runs_path.with_name(f"{stamp}.jsonl")
        while kept.exists():  # two invocations in the same second keep both
            n += 1
            kept = runs_path.with_name(f"{stamp}-{n}.jsonl")
        runs_path.rename(kept)
        print(f"{runs_path.name}: the runs already there moved to {kept.name}")
    if not append:
        runs_path.write_text("")
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        for out in (pool.imap if ordered else pool.imap_unordered)(fn, jobs):
            append_jsonl(runs_path, out)
            yield out


def read_jsonl(path: Path | str) -> list[dict]:
    """The records of a JSON-lines file, in order (blank lines skipped)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def train_offline(config: str, overrides: list[str], run_dir: str,
                  after_iteration: Callable[[object], None] | None = None) -> tuple[object, float]:
    """Train an offline config quietly (no evaluation, video, checkpoints or W&B) through the normal
    OfflineRunner; returns the runner (closed; its agent trained) and the summed update-loop seconds.
    ``after_iteration(runner)`` runs after each iteration of updates (a benchmark's own evaluations)."""
    from robolearn import load_config
    from robolearn.logger import read_metrics
    from robolearn.offline_runner import OfflineRunner

    cfg = load_config(config, [*overrides, "runner.eval_episodes=0", "runner.video_seconds=0",
                               "runner.checkpoint_every=1000000", "logging.wandb=disabled", "logging.progress=false",
                               f"run_dir={run_dir}"])
    runner = OfflineRunner(cfg)
    try:
        runner.train(stop=None if after_iteration is None else lambda _: after_iteration(runner) or False)
    finally:
        runner.close()
    return runner, sum(m["iteration_time"] for m in read_metrics(runner.run_dir))


def train_online_with_evals(config: str, overrides: list[str], run_dir: str, seed: int, total_steps: int,
                            eval_every: int, eval_episodes: int,
                            on_eval: Callable[[dict], None] | None = None) -> tuple[object, list[dict], float]:
    """Train an online config quietly through the normal Runner, evaluating its deterministic
    controller every ``eval_every`` env steps on ``eval_episodes`` separate envs (seed + 10000).
    Returns the run's result, the curve (env_steps, success, return, length, the training
    success rate so far, seconds) and the whole run's seconds. ``on_eval`` sees each curve point as it
    is made (long benchmarks print them, so that a run's progress shows before it ends)."""
    import time

    from robolearn import load_config
    from robolearn.evaluate import evaluate
    from robolearn.registry import make_env
    from robolearn.runner import Runner

    cfg = load_config(config, [*overrides, f"seed={seed}", f"run_dir={run_dir}", f"runner.total_steps={total_steps}",
                               "logging.wandb=disabled", "logging.progress=false", "env.num_threads=1",
                               "runner.eval_episodes=0", "runner.video_seconds=0", "runner.checkpoint_every=1000000"])
    start = time.perf_counter()
    runner = Runner(cfg)
    eval_env = make_env(cfg.env, num_envs=eval_episodes, seed=seed + 10_000)
    if eval_every < 1:
        raise ValueError(f"--eval-every must be at least 1 env step, got {eval_every}")
    curve: list[dict] = []
    next_eval = [eval_every]  # the first iteration end at or past it evaluates (iterations are ~1000 steps)

    def stop(metrics: dict) -> bool:
        steps = runner.progress.env_steps
        if steps >= next_eval[0] or steps >= total_steps:
            while next_eval[0] <= steps:
                next_eval[0] += eval_every
            result = evaluate(runner.agent.controller(), eval_env, eval_episodes, seed=seed + 10_000)
            curve.append({"env_steps": steps, "success": result.get("success_rate", 0.0), "return": result["return_mean"],
                          "length": result["length_mean"], "train_success": metrics.get("success_rate"),
                          "time": time.perf_counter() - start})
            if on_eval is not None:
                on_eval(curve[-1])
        return False

    try:
        result = runner.train(stop=stop)
    finally:
        runner.close()
        eval_env.close()
    return result, curve, time.perf_counter() - start


def paired_comparison(ours: list[float], theirs: list[float], higher_is_better: bool = True) -> dict:
    """One-sided tests that ``ours`` beats ``theirs`` over paired seeds: how many seeds it leads on,
    the mean difference and its standard error, the paired t-test's p and the exact sign test's p
    (ties left out, as the sign test does). Few seeds make both tests weak; the report says so."""
    from scipy import stats  # only the reports that test differences need scipy (the bench extra)

    ours_arr, theirs_arr = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    if ours_arr.shape != theirs_arr.shape or ours_arr.size < 2:
        raise ValueError(f"paired comparison needs two equal lists of at least 2 seeds, got {len(ours)} and {len(theirs)}")
    gain = (ours_arr - theirs_arr) * (1 if higher_is_better else -1)
    ahead, behind = int((gain > 0).sum()), int((gain < 0).sum())
    sign_p = stats.binomtest(ahead, ahead + behind, 0.5, alternative="greater").pvalue if ahead + behind else 1.0
    t = stats.ttest_1samp(gain, 0.0, alternative="greater")  # the paired t-test, on the gains
    return {"ahead": ahead, "behind": behind, "mean_gain": float(gain.mean()), "se": float(stats.sem(gain)),
            "t": float(t.statistic), "t_p": float(t.pvalue), "sign_p": float(sign_p)}


def load_goal_agent(run: Path, layout: str):
    """The goal-conditioned agent (HIQL, OTA, ...) of a finished point-maze run, from its ``checkpoints/latest.pt``,
    prepared on its dataset (normalizer and goal sampler as in training). Returns ``(agent, algo, seed)``."""
    import torch

    from policies import agent_entry
    from robolearn.checkpoint import load_checkpoint
    from robolearn.config import config_from_dict
    from robolearn.data import Dataset

    payload = load_checkpoint(Path(run) / "checkpoints" / "latest.pt")
    cfg = config_from_dict(payload["config"])  # the run's own settings, overrides (network sizes) included
    algo, seed = cfg.algo, cfg.seed
    if cfg.env.task != f"point_maze_{layout}":
        raise SystemExit(f"{run} trained on {cfg.env.task}, not point_maze_{layout}")
    dataset = Dataset.load(cfg.dataset)
    agent = agent_entry(algo)[1](dataset.observation_spec, dataset.action_spec, cfg.agent, torch.device("cpu"))
    agent.prepare(dataset.transitions())
    agent.load_state_dict(payload["agent"])
    return agent, algo, seed
