"""runner.max_minutes: a wall-clock budget that ends training early and still finishes the run."""

from __future__ import annotations

import json
import time

from robolearn import load_config
from robolearn.runner import Runner, out_of_time


def test_training_stops_at_the_wall_clock_budget_and_still_evaluates(tmp_path):
    cfg = load_config("ppo_pendulum", [f"run_dir={tmp_path}", "env.num_envs=8", "runner.total_steps=100000000",
                                       "runner.max_minutes=0.05", "runner.eval_episodes=2", "runner.video_seconds=0",
                                       "logging.wandb=disabled", "logging.progress=false"])
    runner = Runner(cfg)
    result = runner.train()
    runner.close()
    lines = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert 0 < lines[-1]["env_steps"] < 100000000
    iteration = max(b["time"] - a["time"] for a, b in zip(lines, lines[1:]))  # (a loaded machine's, measured)
    # within the budget: the run's clock starts at its logger, a little before the budget's (after the first reset)
    assert 3.0 - 2 * iteration - 0.5 <= lines[-1]["time"] <= 3.25, (lines[-1]["time"], iteration)
    assert result.evaluation is not None and (result.run_dir / "eval.json").is_file()


def test_an_iteration_that_would_end_past_the_budget_is_not_begun():
    """A run had gone up to a whole iteration over its budget (a minute of SAC updates on a CPU)."""
    deadline = time.monotonic() + 10.0
    assert not out_of_time(deadline, lap=1.0)
    assert out_of_time(deadline, lap=12.0)
    assert not out_of_time(float("inf"), lap=1e9)
