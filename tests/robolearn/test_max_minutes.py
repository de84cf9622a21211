"""runner.max_minutes: a wall-clock budget that ends training early and still finishes the run."""

from __future__ import annotations

import json
import time

from robolearn import load_config
from robolearn.runner import Runner, out_of_time


def test_training_stops_at_the_wall_clock_budget_and_still_evaluates(tmp_path, monkeypatch):
    """On a fake clock that only the agent's updates move (0.4 s each): the wall clock's 3 s budget failed on a
    loaded machine, a first iteration of over 1.5 s leaving one metrics line (no iteration time to measure), or a
    last iteration slower than the one before ending past the bound. 7 iterations end by 2.8 s; an 8th would end
    at 3.2 s, past the budget, and is not begun (a budget that ignored the iterations' length would begin it)."""
    import robolearn.runner as runner_module

    now = [100.0]
    monkeypatch.setattr(runner_module, "time", type("FakeTime", (), {"monotonic": staticmethod(lambda: now[0]),
                                                                    "perf_counter": staticmethod(lambda: now[0])}))
    cfg = load_config("ppo_pendulum", [f"run_dir={tmp_path}", "env.num_envs=8", "runner.total_steps=100000000",
                                       "runner.max_minutes=0.05", "runner.eval_episodes=2", "runner.video_seconds=0",
                                       "logging.wandb=disabled", "logging.progress=false"])
    runner = Runner(cfg)
    update = runner.agent.update

    def slow_update(batch):
        now[0] += 0.4
        return update(batch)

    runner.agent.update = slow_update
    result = runner.train()
    runner.close()
    lines = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert runner.progress.iteration == len(lines) == 7 and lines[-1]["env_steps"] == 7 * 8 * 32
    assert now[0] - 100.0 <= 3.0  # ended within the budget
    assert result.evaluation is not None and (result.run_dir / "eval.json").is_file()


def test_an_iteration_that_would_end_past_the_budget_is_not_begun():
    """A run had gone up to a whole iteration over its budget (a minute of SAC updates on a CPU)."""
    deadline = time.monotonic() + 10.0
    assert not out_of_time(deadline, lap=1.0)
    assert out_of_time(deadline, lap=12.0)
    assert not out_of_time(float("inf"), lap=1e9)
