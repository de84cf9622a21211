"""Offline agents learn from a tiny synthetic dataset, stay finite, export, and resume exactly."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import onnxruntime
import pytest
import torch

from policies import AGENTS
from policies.offline.common import discounted_returns, episode_ends, episode_returns
from robolearn.export import export_controller
from robolearn.interfaces import flatten_obs
from robolearn.storage import ReplayBuffer

SMALL = {"hidden": (32, 32)}
VARIANTS = {
    "bc": SMALL, "bc-nll": {**SMALL, "loss": "nll"}, "td3bc": SMALL, "iql": {**SMALL, "total_updates": 300},
    "cql": {**SMALL, "n_actions": 4}, "calql": {**SMALL, "n_actions": 4},
}
# the loss each agent must reduce on a fixed dataset
LOSS = {"bc": "bc_loss", "bc-nll": "bc_loss", "td3bc": "bc_loss", "iql": "value_loss", "cql": "cql_gap", "calql": "cql_gap"}


def make(variant: str, obs_spec, action_spec):
    config_cls, agent_cls = AGENTS[variant.split("-")[0]]
    return agent_cls(obs_spec, action_spec, config_cls(**VARIANTS[variant]), torch.device("cpu"))


def synthetic_dataset(action_spec, episodes: int = 16, length: int = 32) -> dict:
    """Episodes of a linear expert ``a = tanh(W s)`` (env units) on a random walk; reward favors that action."""
    g = torch.Generator().manual_seed(0)
    n = episodes * length
    obs = torch.randn(n + episodes, 4, generator=g) * 2 + 1
    w = torch.randn(4, 2, generator=g) * 0.5
    low, high = torch.as_tensor(action_spec.low), torch.as_tensor(action_spec.high)
    rows = torch.arange(n) + torch.arange(n) // length  # each episode has length + 1 observations
    clean = torch.tanh(obs[rows] @ w)
    action = (clean + 0.3 * torch.randn(n, 2, generator=g)).clamp(-1, 1)
    truncated = torch.zeros(n, dtype=torch.bool)
    truncated[length - 1::length] = True
    return {
        "obs": {"policy": obs[rows], "critic": torch.randn(n, 3, generator=g)},
        "next_obs": {"policy": obs[rows + 1], "critic": torch.randn(n, 3, generator=g)},
        "action": low + (action + 1) / 2 * (high - low),
        "reward": -(action - clean).square().sum(-1),
        "terminated": torch.zeros(n, dtype=torch.bool), "truncated": truncated,
    }


@pytest.fixture(params=VARIANTS)
def variant(request) -> str:
    return request.param


def train(agent, data: dict, updates: int, batch_size: int = 64) -> list[dict[str, float]]:
    replay = ReplayBuffer(data["reward"].shape[0], torch.device("cpu"))
    replay.add(data)
    return [{k: float(v) for k, v in agent.update(replay.sample(batch_size)).items()} for _ in range(updates)]


def test_update_reduces_the_loss_and_metrics_are_finite(variant, obs_spec, action_spec):
    torch.manual_seed(0)
    agent = make(variant, obs_spec, action_spec)
    assert agent.offline and not agent.on_policy
    data = agent.prepare(synthetic_dataset(action_spec))
    history = train(agent, data, 300)
    for metrics in history:
        assert all(np.isfinite(v) for v in metrics.values()), metrics
    losses = [m[LOSS[variant]] for m in history if LOSS[variant] in m]  # TD3+BC's actor starts at update 2
    first, last = np.mean(losses[:20]), np.mean(losses[-20:])
    assert last < first, f"{variant}: {LOSS[variant]} went from {first:.4f} to {last:.4f}"
    if variant == "calql":
        assert "calql_bound_rate" in history[-1]


def test_bc_imitates_the_dataset(obs_spec, action_spec):
    torch.manual_seed(0)
    agent = make("bc", obs_spec, action_spec)
    data = agent.prepare(synthetic_dataset(action_spec))
    history = train(agent, data, 400)
    assert history[-1]["action_mse"] < 0.5 * history[0]["action_mse"]


def test_controller_exports_with_the_dataset_normalizer(variant, obs_spec, action_spec, tmp_path):
    torch.manual_seed(0)
    agent = make(variant, obs_spec, action_spec)
    data = agent.prepare(synthetic_dataset(action_spec))
    seen = flatten_obs(data["obs"], agent.obs_groups)  # the normalizer is the dataset's statistics
    torch.testing.assert_close(agent.normalizer.mean, seen.mean(0), atol=1e-4, rtol=0)
    torch.testing.assert_close(agent.normalizer.var, seen.var(0, unbiased=False), rtol=1e-3, atol=0)
    train(agent, data, 3)
    controller = agent.controller().eval()
    obs = {"policy": data["obs"]["policy"][:5], "critic": data["obs"]["critic"][:5]}
    expected = agent.act(obs, explore=False)["action"]
    torch.testing.assert_close(controller.act(obs), expected)
    low, high = torch.as_tensor(action_spec.low), torch.as_tensor(action_spec.high)
    assert bool(((expected >= low - 1e-6) & (expected <= high + 1e-6)).all())
    paths = export_controller(controller, tmp_path)
    session = onnxruntime.InferenceSession(str(paths["onnx"]), providers=["CPUExecutionProvider"])
    got = session.run(None, {"obs": obs["policy"].numpy()})[0]
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-5)


def test_state_dict_round_trip_resumes_exactly(variant, obs_spec, action_spec, assert_same):
    """Everything an update changes comes back: weights, optimizer moments, schedules, counters."""
    torch.manual_seed(0)
    data = synthetic_dataset(action_spec)
    agent = make(variant, obs_spec, action_spec)
    data = agent.prepare(data)
    train(agent, data, 4)  # TD3+BC's next update falls between its delayed actor steps: it reports the 4th's
    buffer = io.BytesIO()
    torch.save(agent.state_dict(), buffer)
    buffer.seek(0)
    clone = make(variant, obs_spec, action_spec)
    clone.load_state_dict(torch.load(buffer, weights_only=True))
    assert_same(clone.state_dict(), agent.state_dict())
    replay = ReplayBuffer(data["reward"].shape[0], torch.device("cpu"))
    replay.add(data)
    batch = replay.sample(32)
    torch.manual_seed(1)
    a = {k: float(v) for k, v in agent.update(batch).items()}
    torch.manual_seed(1)
    b = {k: float(v) for k, v in clone.update(batch).items()}
    assert a == b
    assert_same(clone.state_dict(), agent.state_dict())  # the step the losses led to: moments and schedules count


def constant(layer, values) -> None:
    """Make a network's last layer output ``values`` (one per ensemble member, or one) whatever its input."""
    with torch.no_grad():
        layer.weight.zero_()
        layer.bias.copy_(torch.as_tensor(values, dtype=torch.float32).view(layer.bias.shape))


@pytest.mark.parametrize("v, value_loss", [(0.0, 0.7), (2.0, 0.3)])
def test_iql_regresses_v_to_an_upper_expectile_and_q_to_r_plus_gamma_v(obs_spec, action_spec, v, value_loss):
    """Eq. (5): ``|tau - 1(u < 0)| u^2`` with ``u = Q'(s, a) - V(s)``, tau = 0.7: an error above V weighs 0.7, one
    below 0.3 (V tends to an upper expectile of Q). Eq. (6): Q's target is ``r + gamma (1 - d) V(s')``. Eq. (7): the
    advantage weight is ``exp(beta u)``. Target critics at 1, V at ``v``, Q at 0, r = 0.5, gamma = 0.9."""
    torch.manual_seed(0)
    config_cls, agent_cls = AGENTS["iql"]
    agent = agent_cls(obs_spec, action_spec, config_cls(**SMALL, gamma=0.9), torch.device("cpu"))
    constant(agent.critic_target.layers[-1], [1.0, 1.0])
    constant(agent.value[-1], [v])
    constant(agent.critic.layers[-1], [0.0, 0.0])
    batch = synthetic_dataset(action_spec, episodes=1, length=8)
    batch |= {"reward": torch.full((8,), 0.5), "terminated": torch.arange(8) >= 6}  # two rows end: y = r
    metrics = agent.update(batch)
    assert float(metrics["value_loss"]) == pytest.approx(value_loss)
    target = torch.where(batch["terminated"], 0.5, 0.5 + 0.9 * v)
    assert float(metrics["critic_loss"]) == pytest.approx(float(target.square().mean()))
    assert float(metrics["adv_weight"]) == pytest.approx(np.exp(3.0 * (1.0 - v)), rel=1e-5)


def test_cql_gap_is_the_log_sum_exp_over_importance_weighted_proposals_less_q_at_the_data(obs_spec, action_spec):
    """CQL(H), eq. (4) with importance sampling: ``log( sum_j exp(Q(s, a_j) - log mu(a_j)) ) - Q(s, a_data)`` over N
    uniform actions (``mu = 2^-A``) and N of pi at s and at s'. With every Q at 0.5 and pi's samples at log-density
    -1 (A = 2, N = 4): ``log(4 * 4 + 8 e)``, whatever Q."""
    torch.manual_seed(0)
    agent = make("cql", obs_spec, action_spec)
    constant(agent.critic.layers[-1], [0.5, 0.5])
    n = agent.cfg.n_actions
    agent._sample = lambda obs: (torch.zeros(obs.shape[0] * n, 2), torch.full((obs.shape[0] * n,), -1.0))
    metrics = agent.update(synthetic_dataset(action_spec, episodes=1, length=8))
    assert float(metrics["cql_gap"]) == pytest.approx(np.log(n * 2.0 ** 2 + 2 * n * np.e), rel=1e-5)


def test_episode_boundaries_and_monte_carlo_returns():
    data = {"obs": {"policy": torch.tensor([[0.0], [1.0], [5.0], [6.0]])},
            "next_obs": {"policy": torch.tensor([[1.0], [2.0], [6.0], [7.0]])},  # row 1 -> 2 jumps: an unflagged cut
            "reward": torch.tensor([1.0, 2.0, 3.0, 4.0]),
            "terminated": torch.tensor([False, False, False, True]), "truncated": torch.zeros(4, dtype=torch.bool)}
    ends = episode_ends(data)
    assert ends.tolist() == [False, True, False, True]
    torch.testing.assert_close(discounted_returns(data["reward"], ends, 0.5), torch.tensor([2.0, 2.0, 5.0, 4.0]))
    torch.testing.assert_close(episode_returns(data["reward"], ends), torch.tensor([3.0, 7.0], dtype=torch.float64))


@pytest.mark.parametrize("config", ["wsrl_hopper", "wsrl_half_cheetah", "jsrl_hopper", "calql_finetune_hopper"])
def test_fine_tuning_keeps_wsrl_s_effective_target_entropy_online(config, obs_spec, action_spec):
    """WSRL's config says target entropy 0, which its SAC reads as -|A| (``target_entropy >= 0`` -> ``-action_dim``);
    the default (and wsrl_half_cheetah, jsrl_hopper) had switched to a literal 0 at the phase boundary."""
    from policies.offline.wsrl import Finetune
    from robolearn import load_config

    agent_cfg = load_config(config, []).agent
    agent = Finetune(obs_spec, action_spec, dataclasses.replace(agent_cfg, hidden=(8, 8), num_critics=2),
                     torch.device("cpu"))
    agent.go_online()
    assert agent.target_entropy == -float(action_spec.shape[0])


@pytest.mark.parametrize("config", ["wsrl_hopper", "wsrl_half_cheetah", "jsrl_hopper"])
def test_wsrl_s_actor_maximizes_the_min_over_all_its_critics(config):
    """WSRL's SAC policy loss takes ``predicted_qs.min(axis=0)`` over the whole 10-critic ensemble (the subsample
    of 2 is for targets only); the preset had taken the ensemble's mean (REDQ's policy objective)."""
    from robolearn import load_config

    assert load_config(config, []).agent.actor_q == "min"
