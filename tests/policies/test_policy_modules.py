"""Shared building blocks: normalizer statistics, action scaling, Gaussian math, critic ensemble."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch.distributions import Normal, TransformedDistribution, kl_divergence
from torch.distributions.transforms import TanhTransform

from robolearn.interfaces import flatten_obs
from policies.modules import (
    ActionScaler,
    EmpiricalNormalizer,
    EnsembleQ,
    SquashedGaussianActor,
    gaussian_entropy,
    gaussian_kl,
    gaussian_log_prob,
)


def test_normalizer_matches_statistics_of_all_batches_seen() -> None:
    torch.manual_seed(0)
    data = torch.randn(1000, 3) * torch.tensor([0.1, 2.0, 30.0]) + torch.tensor([5.0, -1.0, 100.0])
    normalizer = EmpiricalNormalizer(3, clip=4.0)
    for chunk in torch.split(data, [1, 7, 300, 692]):
        normalizer.update(chunk)
    assert int(normalizer.count) == 1000
    torch.testing.assert_close(normalizer.mean, data.mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(normalizer.var, data.var(0, unbiased=False), rtol=1e-4, atol=1e-6)
    whitened = normalizer(data)
    torch.testing.assert_close(whitened.mean(0), torch.zeros(3), atol=1e-3, rtol=0)
    assert whitened.abs().max() <= 4.0


def test_normalizer_accepts_rollout_shaped_batches() -> None:
    normalizer = EmpiricalNormalizer(2)
    normalizer.update(torch.arange(24.0).reshape(3, 4, 2))
    torch.testing.assert_close(normalizer.mean, torch.tensor([11.0, 12.0]))


def test_action_scaler_maps_unit_box_to_bounds_and_back() -> None:
    scaler = ActionScaler(spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32)))
    unit = torch.tensor([[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0]])
    torch.testing.assert_close(scaler(unit), torch.tensor([[-2.0, 0.0], [0.0, 5.0], [2.0, 10.0]]))
    torch.testing.assert_close(scaler.normalize(scaler(unit)), unit)
    assert scaler.normalize(torch.tensor([[5.0, -3.0]])).tolist() == [[1.0, -1.0]]
    with pytest.raises(ValueError, match="finite bounds"):
        ActionScaler(spaces.Box(-np.inf, np.inf, (2,), np.float32))


def test_gaussian_functions_match_torch_distributions() -> None:
    torch.manual_seed(0)
    m0, m1, x = torch.randn(3, 5, 4).unbind(0)
    s0, s1 = torch.rand(2, 5, 4).add(0.1).unbind(0)
    torch.testing.assert_close(gaussian_log_prob(x, m0, s0), Normal(m0, s0).log_prob(x).sum(-1))
    torch.testing.assert_close(gaussian_entropy(s0), Normal(m0, s0).entropy().sum(-1))
    torch.testing.assert_close(gaussian_kl(m0, s0, m1, s1), kl_divergence(Normal(m0, s0), Normal(m1, s1)).sum(-1))


def test_squashed_gaussian_log_prob_matches_tanh_transform() -> None:
    torch.manual_seed(0)
    actor = SquashedGaussianActor(3, 2, (16,))
    obs = torch.randn(64, 3)
    torch.manual_seed(1)
    action, log_prob = actor(obs)
    mean, log_std = actor.mean_and_log_std(actor.trunk(obs))
    reference = TransformedDistribution(Normal(mean, log_std.exp()), TanhTransform(cache_size=1))
    # atanh is ill-conditioned near +-1: compare where the action is not saturated
    ok = action.abs().amax(-1) < 0.99
    torch.testing.assert_close(log_prob[ok], reference.log_prob(action).sum(-1)[ok], rtol=1e-3, atol=1e-3)
    deterministic, _ = actor(obs, deterministic=True)
    torch.testing.assert_close(deterministic, torch.tanh(mean))
    torch.testing.assert_close(actor.mean_net()(obs), mean)


def test_ensemble_q_equals_independent_networks_and_detach_blocks_weight_grads() -> None:
    torch.manual_seed(0)
    critic = EnsembleQ(2, obs_dim=3, action_dim=2, hidden=(8, 8))
    obs, action = torch.randn(5, 3), torch.randn(5, 2, requires_grad=True)
    q = critic(obs, action)
    assert q.shape == (2, 5)
    for i in range(2):
        x = torch.cat([obs, action], -1)
        for j, layer in enumerate(critic.layers):
            x = x @ layer.weight[i] + layer.bias[i]
            x = torch.relu(x) if j < len(critic.layers) - 1 else x
        torch.testing.assert_close(q[i], x.squeeze(-1))
    critic(obs, action, detach_params=True).sum().backward()
    assert action.grad is not None and action.grad.abs().sum() > 0
    assert all(p.grad is None for p in critic.parameters())


def test_flatten_obs_concatenates_in_order_for_any_batch_dims() -> None:
    obs = {"a": torch.zeros(3, 4, 2), "b": torch.ones(3, 4, 1)}
    assert flatten_obs(obs, ("b", "a"), batch_dims=2)[..., 0].eq(1).all()
    assert flatten_obs({"a": torch.zeros(4, 2, 2)}, ("a",)).shape == (4, 4)
    assert math.isclose(float(flatten_obs(obs, ("a", "b"), batch_dims=2).sum()), 12.0)


def test_a_stateless_controller_checks_a_reset_mask_as_a_stateful_one_does():
    """Its reset had taken anything: a mask of indices passed until the loop ran a recurrent controller."""
    from policies.modules import DeterministicController

    controller = DeterministicController(torch.nn.Identity(), torch.nn.Identity(), torch.nn.Identity(),
                                         torch.nn.Identity(), ("policy",), 3)
    controller.reset(torch.tensor([True, False])), controller.reset(None), controller.reset([0, 1])
    with pytest.raises(ValueError, match=r"DeterministicController.reset\(mask\): flags, .* got values \[0, 2\]"):
        controller.reset(torch.tensor([0, 2]))
    with pytest.raises(ValueError, match=r"one flag per world"):
        controller.reset(torch.ones(2, 2, dtype=torch.bool))
