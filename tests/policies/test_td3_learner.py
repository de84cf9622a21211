"""TD3Learner (a level of HIRO/HRAC): the delayed actor and target updates and clipped target-policy smoothing."""

from __future__ import annotations

import pytest
import torch

from policies.td3_learner import TD3Learner, TD3Settings

CPU = torch.device("cpu")


def learner(**settings: object) -> TD3Learner:
    return TD3Learner(4, 2, TD3Settings(hidden=(16, 16), **settings), CPU)


def batch(seed: int, n: int = 8) -> tuple[torch.Tensor, ...]:
    """``obs, action, reward, discount, next_obs``."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 4, generator=g), torch.rand(n, 2, generator=g) * 2 - 1, torch.randn(n, generator=g),
            torch.full((n,), 0.9), torch.randn(n, 4, generator=g))


def params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_the_actor_and_the_targets_step_once_every_policy_delay_critic_steps() -> None:
    torch.manual_seed(0)
    level = learner(policy_delay=2, tau=0.1)
    actor, actor_target, critic_target = params(level.actor), params(level.actor_target), params(level.critic_target)
    critic = params(level.critic)
    metrics = level.update(*batch(0))
    assert not same(critic, params(level.critic))  # the critic steps every update...
    assert same(actor, params(level.actor)) and "actor_loss" not in metrics  # ...the actor not on the first
    assert same(actor_target, params(level.actor_target)) and same(critic_target, params(level.critic_target))

    metrics = level.update(*batch(1))
    assert not same(actor, params(level.actor)) and "actor_loss" in metrics
    for before, target, online in zip(critic_target, level.critic_target.parameters(), level.critic.parameters()):
        torch.testing.assert_close(target, 0.9 * before + 0.1 * online)
    for before, target, online in zip(actor_target, level.actor_target.parameters(), level.actor.parameters()):
        torch.testing.assert_close(target, 0.9 * before + 0.1 * online)


def test_target_policy_smoothing_noise_is_clipped() -> None:
    """``a' = clip(pi'(s') + clip(eps, -c, c), -1, 1)``: with pi'(s') = 0 and noise far wider than c = 0.3, the
    target critic is asked at actions within +-0.3, not anywhere in [-1, 1]."""
    torch.manual_seed(0)
    level = learner(target_noise=10.0, target_noise_clip=0.3)
    with torch.no_grad():
        level.actor_target[-1].weight.zero_()
        level.actor_target[-1].bias.zero_()
    asked: list[torch.Tensor] = []
    hook = level.critic_target.register_forward_hook(lambda module, args, out: asked.append(args[1].clone()))
    level.update(*batch(0, n=256))
    hook.remove()
    (next_action,) = asked
    assert float(next_action.abs().max()) == pytest.approx(0.3) and float(next_action.abs().mean()) > 0.25
