"""Kernel launches, counted as torch ops: a GPU's env step is bound by them at a few thousand worlds."""

from __future__ import annotations

import pytest
import torch

from robolearn import interfaces
from robolearn.torch_ops import TorchOps


def test_it_counts_ops_that_launch_kernels_and_not_views():
    x = torch.arange(12.0)
    with TorchOps() as ops:
        y = x.view(3, 4)[:, 1:].t().unsqueeze(0)  # views only
        (y + 1).sum()
        ops.counting = False
        y * 2
    assert ops.counts == {"add": 1, "sum": 1}


# Torch ops per step of the Go1 configs' env by mask (the GPU's code path), as this test steps it: 245 and 363
# in session 53, 420 and 702 before it; rough 335 in session 54, its observations' two terrain lookups made one
# (benchmarks/step_launches.py: mjlab's Go1 step dispatches 643); 256 and 346 in session 60, which ends the
# episodes of worlds whose physics blew up (11 ops); 257 and 347 in session 61, which bounds them at mjMAXVAL as
# CPU MuJoCo does (1 op).
BUDGETS = {"ppo_go1_flat": 270, "ppo_go1_rough": 355}


@pytest.mark.parametrize("config", BUDGETS)
def test_the_go1_env_step_stays_within_its_kernel_budget(monkeypatch, config):
    """Each op is a launch on a GPU: per-call quaternion math, per-part noise draws, or a terrain lookup of
    thirty ops, back in the step, would cost every GPU run; the budget says so here."""
    import mujoco_warp  # noqa: F401  (a declared dependency: missing, a failure)
    from robolearn.config import load_config
    from robolearn.registry import make_env

    monkeypatch.setattr(interfaces, "HOST_READS_FREE_ON", set())  # resets by mask, as on a GPU
    cfg = load_config(config, ["env.backend=warp", "env.device=cpu", "env.num_envs=4"])
    env = make_env(cfg.env, seed=0)
    generator = torch.Generator().manual_seed(0)
    actions = [torch.rand((4, 12), generator=generator) * 8 - 4 for _ in range(12)]
    for action in actions[:2]:  # first-step checks
        env.step(action)
    with TorchOps() as ops:
        for action in actions[2:]:
            env.step(action)
    per_step = ops.total / 10
    assert per_step <= BUDGETS[config], ops.counts.most_common(10)


def test_a_ppo_iteration_outside_the_env_step_stays_within_its_kernel_budget(tmp_path, monkeypatch):
    """The learner's and the runner's ops per control step (acting, storing, bookkeeping, the update, the
    per-iteration copy of the agent), the env's own left out: 168 on this config in session 54, 177 before
    (a deepcopy of the agent's state each iteration, a clone of the episode counters each step)."""
    from robolearn.config import load_config
    from robolearn.runner import Runner

    monkeypatch.setattr(interfaces, "HOST_READS_FREE_ON", set())  # the finiteness checks deferred, as on a GPU
    cfg = load_config("ppo_cartpole", [f"run_dir={tmp_path}", "env.num_envs=8", "runner.eval_episodes=0",
                                       "runner.video_seconds=0", "logging.progress=false", "logging.wandb=disabled",
                                       "runner.total_steps=100000000", "runner.checkpoint_every=1000"])
    runner = Runner(cfg)
    every, in_env_step, iterations = TorchOps(counting=False), TorchOps(counting=False), []
    env_step = runner.env.step

    def counted_env_step(action):
        with in_env_step:
            return env_step(action)

    def stop(metrics: dict) -> bool:  # after each iteration: count iterations 2 to 4
        iterations.append(metrics)
        every.counting = in_env_step.counting = len(iterations) <= 3
        return len(iterations) > 3

    monkeypatch.setattr(runner.env, "step", counted_env_step)
    with every:
        runner.train(stop=stop)
    runner.close()
    per_step = (every.total - in_env_step.total) / (3 * cfg.agent.num_steps)
    assert in_env_step.total > 0 and per_step <= 172, (per_step, every.counts.most_common(10))
