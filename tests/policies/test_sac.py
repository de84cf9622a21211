"""SAC: bootstrapping, target networks, action scaling, temperature and metrics."""

from __future__ import annotations

import torch

from policies.sac import SAC, SACConfig

CPU = torch.device("cpu")


def small(**overrides: object) -> SACConfig:
    return SACConfig(hidden=(16, 16), **overrides)


def test_termination_cuts_bootstrap_and_truncation_does_not(make_replay_batch, obs_spec, action_spec) -> None:
    torch.manual_seed(0)
    agent = SAC(obs_spec, action_spec, small(), CPU)
    batch = make_replay_batch(32)
    with torch.no_grad():
        q = agent.critic(batch["obs"]["policy"], agent.scaler.normalize(batch["action"]))
    terminated = batch | {"terminated": torch.ones(32, dtype=torch.bool), "truncated": torch.zeros(32, dtype=torch.bool)}
    truncated = batch | {"terminated": torch.zeros(32, dtype=torch.bool), "truncated": torch.ones(32, dtype=torch.bool)}
    state = agent.state_dict()
    # terminated: y = r, so the critic loss is known exactly
    loss = agent.update(terminated)["critic_loss"]
    torch.testing.assert_close(loss, 0.5 * (q - batch["reward"]).square().mean(-1).sum())
    agent.load_state_dict(state)
    assert not torch.allclose(agent.update(truncated)["critic_loss"], loss)


def test_bootstrap_takes_the_smaller_target_critic(make_replay_batch, obs_spec, action_spec) -> None:
    """Clipped double Q: ``y = r + gamma (min_i Q'_i(s', a') - alpha log pi)``. Target critics fixed at 1 and 3,
    and a temperature too small to count, make ``y = r + gamma * 1``."""
    torch.manual_seed(0)
    agent = SAC(obs_spec, action_spec, small(init_alpha=1e-9, gamma=0.9), CPU)
    with torch.no_grad():
        agent.critic_target.layers[-1].weight.zero_()
        agent.critic_target.layers[-1].bias.copy_(torch.tensor([1.0, 3.0]).view(2, 1, 1))
    batch = make_replay_batch(32) | {"terminated": torch.zeros(32, dtype=torch.bool)}
    with torch.no_grad():
        q = agent.critic(batch["obs"]["policy"], agent.scaler.normalize(batch["action"]))
    target = batch["reward"] + 0.9 * 1.0
    torch.testing.assert_close(agent.update(batch)["critic_loss"], 0.5 * (q - target).square().mean(-1).sum())


def test_target_networks_follow_with_tau(make_replay_batch, obs_spec, action_spec) -> None:
    torch.manual_seed(0)
    agent = SAC(obs_spec, action_spec, small(tau=0.1), CPU)
    target_before = [p.clone() for p in agent.critic_target.parameters()]
    agent.update(make_replay_batch(32))
    for before, target, online in zip(target_before, agent.critic_target.parameters(), agent.critic.parameters()):
        torch.testing.assert_close(target, 0.9 * before + 0.1 * online)
        assert not target.requires_grad


def test_actions_respect_bounds_and_controller_is_the_deterministic_policy(random_obs, obs_spec, action_spec) -> None:
    torch.manual_seed(0)
    agent = SAC(obs_spec, action_spec, small(), CPU)
    with torch.no_grad():  # saturate the policy to hit the bounds
        agent.actor.head.bias[:2].fill_(50.0)  # the mean half of the head
    obs = random_obs(64)
    low, high = torch.as_tensor(action_spec.low), torch.as_tensor(action_spec.high)
    for explore in (True, False):
        action = agent.act(obs, explore=explore)["action"]
        assert action.shape == (64, 2) and (action >= low).all() and (action <= high).all()
    torch.testing.assert_close(agent.controller().act(obs), agent.act(obs, explore=False)["action"])
    torch.testing.assert_close(agent.controller().act(obs), high.expand(64, 2))


def test_temperature_falls_when_entropy_exceeds_target(make_replay_batch, obs_spec, action_spec) -> None:
    torch.manual_seed(0)
    agent = SAC(obs_spec, action_spec, small(target_entropy=-20.0, alpha_lr=1e-2), CPU)
    for _ in range(5):
        metrics = agent.update(make_replay_batch(64))
    assert float(metrics["alpha"]) < 1.0
    assert agent.target_entropy == -20.0 and SAC(obs_spec, action_spec, small(), CPU).target_entropy == -2.0


def test_metrics_are_detached_tensors(make_replay_batch, obs_spec, action_spec) -> None:
    agent = SAC(obs_spec, action_spec, small(critic_obs_groups=("policy", "critic")), CPU)
    metrics = agent.update(make_replay_batch(16))
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad for v in metrics.values())


def test_bootstrap_subtracts_the_temperature_times_the_next_log_prob(make_replay_batch, obs_spec, action_spec) -> None:
    """The soft target's entropy bonus: ``y = r + gamma (min_i Q'_i - alpha log pi(a'|s'))`` with target critics at 0
    and alpha = 2 is ``r - 0.9 * 2 log pi``; the next action is drawn again here from the same seed."""
    torch.manual_seed(0)
    agent = SAC(obs_spec, action_spec, small(init_alpha=2.0, gamma=0.9), CPU)
    with torch.no_grad():
        agent.critic_target.layers[-1].weight.zero_()
        agent.critic_target.layers[-1].bias.zero_()
    batch = make_replay_batch(32) | {"terminated": torch.zeros(32, dtype=torch.bool)}
    with torch.no_grad():
        q = agent.critic(batch["obs"]["policy"], agent.scaler.normalize(batch["action"]))
        torch.manual_seed(7)
        _, next_log_prob = agent.actor(agent._groups(batch["next_obs"])[0])
    target = batch["reward"] - 0.9 * 2.0 * next_log_prob
    assert next_log_prob.abs().mean() > 0.1  # the bonus is not negligible
    torch.manual_seed(7)
    torch.testing.assert_close(agent.update(batch)["critic_loss"], 0.5 * (q - target).square().mean(-1).sum())


def test_actor_step_raises_entropy_where_the_critic_is_flat(make_replay_batch, obs_spec, action_spec) -> None:
    """``J_pi = E[alpha log pi - Q]``: with every Q at 0 the actor's step only lowers ``log pi`` of its samples, so
    the policy's entropy (measured from one seed before and after) rises."""
    torch.manual_seed(0)
    agent = SAC(obs_spec, action_spec, small(actor_lr=1e-2, alpha_lr=0.0), CPU)
    with torch.no_grad():
        agent.critic.layers[-1].weight.zero_()
        agent.critic.layers[-1].bias.zero_()
    batch = make_replay_batch(256)
    actor_obs = agent._groups(batch["obs"])[0]

    def entropy() -> float:
        torch.manual_seed(3)
        with torch.no_grad():
            return float(-agent.actor(actor_obs)[1].mean())

    before = entropy()
    agent.update(batch)
    assert entropy() > before + 0.01
