"""Pieces the goal-conditioned agents share: LayerNorm MLPs, the (state, goal) normalizer,
a deterministic goal-conditioned controller, and the agents' common ``prepare``/``sample``.

Actors are Gaussians with a fixed unit standard deviation (OGBench's ``const_std``),
so their log-likelihood is ``-|a - mu|^2 / 2`` up to a constant: advantage-weighted
regression becomes weighted mean squared error, and the controller acts with the mean.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from robolearn.interfaces import Controller
from policies.modules import ActionScaler, EmpiricalNormalizer
from policies.offline.common import OfflineAgent, episode_ends
from policies.goal.relabel import GoalSampler, RelabelConfig


def ln_mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int) -> nn.Sequential:
    """``Linear -> LayerNorm -> GELU`` per hidden width, then a linear output (OGBench's MLP)."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), nn.LayerNorm(width), nn.GELU()]
        in_dim = width
    return nn.Sequential(*layers, nn.Linear(in_dim, out_dim))


class StateGoalNormalizer(nn.Module):
    """Standardizes states with the dataset's statistics, and goals with those of the state
    features they live in (the first ``goal_dim``)."""

    def __init__(self, obs_dim: int, goal_dim: int) -> None:
        super().__init__()
        self.goal_dim = goal_dim
        self.state = EmpiricalNormalizer(obs_dim)

    def forward(self, obs: torch.Tensor, goal: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.state(obs), self.goal(goal)

    def goal(self, goal: torch.Tensor) -> torch.Tensor:
        """A goal alone, standardized with the statistics of the state features it lives in."""
        s = self.state
        g = (goal - s.mean[: self.goal_dim]) / (s.var[: self.goal_dim].sqrt() + s.eps)
        return g.clamp(-s.clip, s.clip)


class GoalController(Controller):
    """``[policy; goal] -> scale(tanh(actor([norm(s); norm(g)])))``: a flat goal-conditioned policy."""

    __jit_ignored_attributes__ = ["obs_groups", "obs_size"]

    def __init__(self, normalizer: StateGoalNormalizer, actor: nn.Module, scaler: ActionScaler, obs_dim: int,
                 goal_dim: int) -> None:
        super().__init__()
        self.normalizer, self.actor, self.scaler = normalizer, actor, scaler
        self.state_dim = obs_dim
        self.obs_groups, self.obs_size = ("policy", "goal"), obs_dim + goal_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        s, g = self.normalizer(obs[:, : self.state_dim], obs[:, self.state_dim :])
        return self.scaler(torch.tanh(self.actor(torch.cat([s, g], dim=-1))))


class GoalAgent(OfflineAgent):
    """An offline agent that samples its own relabeled minibatches (the offline runner calls
    :meth:`sample` instead of drawing from its replay buffer)."""

    obs_groups = ("policy", "goal")
    reads_rewards = False  # rewards come from the relabeled goals, not the dataset
    subgoal_steps: int = 0
    option_steps: int = 0  # OTA: also sample options of this many steps (relabel.GoalSampler.option_ends)
    relabel: RelabelConfig
    normalizer: StateGoalNormalizer
    sampler: GoalSampler | None = None

    def _setup_spaces(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box,
                      device: torch.device) -> None:
        self.device = torch.device(device)
        missing = [group for group in ("policy", "goal") if group not in observation_spec]
        if missing:
            raise ValueError(f"{type(self).__name__} needs observation groups ['policy', 'goal']; the task has no "
                             f"{missing} (a goal-conditioned task such as point_maze_medium)")
        self.obs_dim = int(observation_spec["policy"].shape[0])
        self.goal_dim = int(observation_spec["goal"].shape[0])
        self.action_dim = int(action_spec.shape[0])
        self.scaler = ActionScaler(action_spec).to(self.device)
        self.normalizer = StateGoalNormalizer(self.obs_dim, self.goal_dim).to(self.device)

    def prepare(self, data: dict[str, Any]) -> dict[str, Any]:
        """Fit the state normalizer and index the trajectories for goal relabeling."""
        self.normalizer.state.update(data["obs"]["policy"].to(self.device))
        self.sampler = GoalSampler(data, episode_ends(data), self.goal_dim, self.relabel)
        return data

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        if self.sampler is None:
            raise RuntimeError(f"{type(self).__name__}.prepare(data) must be called before sampling")
        return self.sampler.sample(batch_size, self.subgoal_steps, self.option_steps)

    def normalized_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.scaler.normalize(batch["action"])

    def controller(self) -> Controller:
        return GoalController(copy.deepcopy(self.normalizer), copy.deepcopy(self.actor), copy.deepcopy(self.scaler),
                              self.obs_dim, self.goal_dim)

    @torch.no_grad()
    def act(self, obs: dict[str, torch.Tensor], explore: bool = False) -> dict[str, torch.Tensor]:
        x = torch.cat([obs["policy"], obs["goal"]], dim=-1).to(self.device)
        return {"action": self.controller()(x)}
