"""Learning rates changed on a resume take effect (an optimizer's load had put the saved ones back), and
an unchanged config resumes exactly as before."""

from __future__ import annotations

import pytest
import torch

import sims
from robolearn import load_config
from robolearn.checkpoint import load_checkpoint
from robolearn.learning_rates import apply_changed, configured
from robolearn.registry import make_agent
from robolearn.runner import train


def _agent(config: str, *overrides: str):
    with sims.make_env("pendulum", 2, seed=0) as env:
        return make_agent(load_config(config, list(overrides)), env)


def _resumed(saved, config: str, *overrides: str):
    """A fresh agent of ``config`` with ``overrides`` loaded from ``saved``'s state, as restore_agent does."""
    agent = _agent(config, *overrides)
    fresh = configured(agent)
    agent.load_state_dict(saved.state_dict())
    apply_changed(agent, fresh)
    return agent


def _rates(agent) -> list[float]:
    return [float(group["lr"]) for group in agent.optimizer.param_groups]


def test_a_changed_constant_rate_applies_and_the_others_stay():
    saved = _agent("sac_pendulum")
    assert _rates(_resumed(saved, "sac_pendulum")) == _rates(saved) == [3e-4, 3e-4, 3e-4]
    assert _rates(_resumed(saved, "sac_pendulum", "agent.critic_lr=1e-5")) == [3e-4, 1e-5, 3e-4]


def test_a_schedule_goes_on_from_where_it_was_scaled_to_the_new_base():
    """IQL's actor follows a cosine schedule: a new actor_lr scales it, at the step it had reached."""
    saved = _agent("iql_hopper", "agent.total_updates=100")
    for _ in range(50):
        saved.optimizer.step(), saved.schedule.step()  # (no gradients: only the rates move)
    halfway = _rates(saved)[0]
    assert halfway == pytest.approx(3e-4 * 0.5)
    same = _resumed(saved, "iql_hopper", "agent.total_updates=100")
    assert _rates(same) == _rates(saved) and same.schedule.base_lrs == saved.schedule.base_lrs
    doubled = _resumed(saved, "iql_hopper", "agent.total_updates=100", "agent.actor_lr=6e-4", "agent.value_lr=1e-4")
    assert _rates(doubled) == pytest.approx([2 * halfway, 3e-4, 1e-4])
    doubled.optimizer.step(), doubled.schedule.step()
    assert _rates(doubled)[0] == pytest.approx(6e-4 * 0.5 * (1 + torch.cos(torch.tensor(torch.pi * 51 / 100)).item()))


def test_ppos_adaptive_rate_is_kept_unless_its_configured_rate_changed_then_restarts_there():
    saved = _agent("ppo_pendulum")
    saved.lr.fill_(2e-3)  # where the adaptive schedule had taken it
    for group in saved.optimizer.param_groups:  # tagged on a GPU, from a float32 rate
        group["configured_lr"] = float(torch.tensor(1e-3, dtype=torch.float32))
    same = _resumed(saved, "ppo_pendulum")
    assert float(same.lr) == 2e-3 and all(group["lr"] is same.lr for group in same.optimizer.param_groups)
    changed = _resumed(saved, "ppo_pendulum", "agent.learning_rate=5e-4")
    assert float(changed.lr) == pytest.approx(5e-4) and all(g["lr"] is changed.lr for g in changed.optimizer.param_groups)


def test_a_frozen_rate_of_zero_can_be_given_a_rate_on_resume():
    """Scaling by new / old cannot move a rate of 0 ("0 freezes what it trains")."""
    saved = _agent("sac_pendulum", "agent.critic_lr=0")
    assert _rates(_resumed(saved, "sac_pendulum", "agent.critic_lr=1e-4")) == [3e-4, 1e-4, 3e-4]


def untagged(agent):
    for group in agent.optimizer.param_groups:  # as a checkpoint written before the tags
        del group["configured_lr"]
    return agent


def test_an_untagged_checkpoints_plain_rates_are_their_configured_ones():
    first = _resumed(untagged(_agent("sac_pendulum")), "sac_pendulum", "agent.critic_lr=1e-5")
    assert _rates(first) == [3e-4, 1e-5, 3e-4] and first.optimizer.param_groups[1]["configured_lr"] == 1e-5
    assert _rates(_resumed(first, "sac_pendulum", "agent.critic_lr=1e-6")) == [3e-4, 1e-6, 3e-4]


def test_an_untagged_ppo_keeps_its_adapted_rate_once_and_is_tagged_from_then_on():
    saved = _agent("ppo_pendulum")
    saved.lr.fill_(2e-3)
    first = _resumed(untagged(saved), "ppo_pendulum", "agent.learning_rate=5e-4")
    assert float(first.lr) == 2e-3  # adapted: what its configured rate was is unknown
    assert float(_resumed(first, "ppo_pendulum", "agent.learning_rate=1e-4").lr) == pytest.approx(1e-4)


def test_a_resumed_run_trains_with_the_rate_it_was_given(tmp_path):
    overrides = [f"run_dir={tmp_path}", "logging.wandb=disabled", "logging.progress=false", "env.num_envs=2",
                 "runner.total_steps=400", "runner.random_steps=100", "runner.eval_episodes=0",
                 "runner.video_seconds=0", "agent.batch_size=16", "agent.hidden=[16,16]"]
    run = train(load_config("sac_pendulum", overrides)).run_dir
    groups = load_checkpoint(run / "checkpoints" / "latest.pt")["agent"]["optimizer"]["param_groups"]
    assert [group["lr"] for group in groups] == [3e-4, 3e-4, 3e-4]
    train(load_config(run / "config.yaml", ["runner.total_steps=2000", "agent.critic_lr=1e-5"]), resume=run)
    groups = load_checkpoint(run / "checkpoints" / "latest.pt")["agent"]["optimizer"]["param_groups"]
    assert [group["lr"] for group in groups] == [3e-4, 1e-5, 3e-4]


def test_a_fine_tunes_online_rates_are_what_a_resume_in_its_online_phase_compares():
    """go_online sets the online phase's rates and their tags, so a changed online rate applies there."""
    saved = _agent("wsrl_hopper")
    saved.go_online()
    agent = _agent("wsrl_hopper", "agent.online_critic_lr=1e-5")
    agent.go_online()  # as the fine-tune runner does before loading an online checkpoint
    fresh = configured(agent)
    agent.load_state_dict(saved.state_dict())
    apply_changed(agent, fresh)
    assert _rates(agent) == [1e-4, 1e-5, _rates(saved)[2]]
