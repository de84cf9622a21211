"""A controller moved to float64 (``.double()``) acts on the observations an env gives, as it does in float32:
``Controller.read`` feeds its network in the controller's own dtype."""

from __future__ import annotations

import pytest
import torch

from robolearn.config import load_config
from robolearn.registry import make_agent, make_env


@pytest.mark.parametrize("config, overrides", [
    ("sac_pendulum", []),                                    # a plain MLP
    ("ppo_pendulum", ["agent.recurrent=true"]),              # a GRU with its hidden state
    ("srl_hopper_j16", []),                                  # a chunk queue
    ("hrac_point_maze_medium", []),                          # a subgoal held for several steps
])
def test_a_float64_controller_acts_on_an_envs_observations(config, overrides):
    cfg = load_config(config, ["env.num_envs=2", *overrides])
    env = make_env(cfg.env, seed=0)
    controller = make_agent(cfg, env).controller().double()
    obs = env.reset()
    for _ in range(3):
        action = controller.act(obs)
        assert action.dtype == torch.float64 and torch.isfinite(action).all()
        obs = env.step(action).obs
