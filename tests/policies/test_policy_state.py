"""Agents resume exactly from ``state_dict()`` saved with ``torch.save`` and
loaded with ``torch.load(weights_only=True)``."""

from __future__ import annotations

import io
import pytest
import torch

from policies import AGENTS

CONFIGS = {
    "ppo": {"actor_hidden": (16, 16), "critic_hidden": (16, 16), "critic_obs_groups": ("policy", "critic")},
    "ppo-gru": {"actor_hidden": (16,), "critic_hidden": (16,), "recurrent": True, "rnn_hidden": 8},
    "sac": {"hidden": (16, 16), "critic_obs_groups": ("policy", "critic")},
}


def make_agent(variant: str, obs_spec, action_spec):
    config_cls, agent_cls = AGENTS[variant.split("-")[0]]
    return agent_cls(obs_spec, action_spec, config_cls(**CONFIGS[variant]), torch.device("cpu"))


@pytest.mark.parametrize("variant", CONFIGS)
def test_state_dict_round_trip_resumes_exactly(variant, obs_spec, action_spec, random_obs, make_rollout, make_replay_batch,
                                                assert_same) -> None:
    torch.manual_seed(0)
    agent = make_agent(variant, obs_spec, action_spec)
    batch = (lambda: make_rollout(agent, 8, 6)) if agent.on_policy else (lambda: make_replay_batch(32))
    for _ in range(2):
        agent.update(batch())

    buffer = io.BytesIO()
    torch.save(agent.state_dict(), buffer)
    buffer.seek(0)
    torch.manual_seed(1)
    resumed = make_agent(variant, obs_spec, action_spec)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert_same(resumed.state_dict(), agent.state_dict())

    obs = random_obs(5)
    torch.testing.assert_close(resumed.act(obs, explore=False)["action"], agent.act(obs, explore=False)["action"])

    # the next update is identical too (optimizer moments, step counts, learning rate, normalizer)
    next_batch = batch()
    for a in (agent, resumed):
        torch.manual_seed(2)
        a.update(next_batch)
    assert_same(resumed.state_dict(), agent.state_dict())
