"""HIQL (Park et al. 2023, "HIQL: Offline Goal-Conditioned RL with Latent States as Actions").

One goal-conditioned value function, two policies. With value goals ``g``, actor
goals ``g'``, subgoal ``w = s_{t+k}`` (k = 25 steps later in the trajectory,
capped at its end) from the relabeled minibatch (``relabel``):

- goal representation ``phi([s; g])``: an MLP to ``rep_dim`` (10) normalized to
  length ``sqrt(rep_dim)``; part of the value network and trained only through it;
- value ``V_i(s, g) = MLP_i([s; phi([s; g])])``, a 2-ensemble, by expectile
  regression (tau 0.7) as in OGBench's HIQL: with targets ``Q_i = r + gamma m V'_i(s', g)``
  and the advantage ``A = r + gamma m min_i V'_i(s', g) - mean_i V'_i(s, g)``,
  ``L_V = sum_i E[ |tau - 1(A < 0)| (Q_i - V_i(s, g))^2 ]``;
- high policy ``pi_h(s, g') -> phi([s; s_h])`` by AWR with
  ``A_h = V(s_h, g') - V(s, g')`` (V the ensemble mean), weights
  ``min(exp(beta_h A_h), 100)``, where the target ``s_h = s_{min(t+k, t_g')}`` stops at the
  actor goal when that is closer than k steps (OGBench's ``high_actor_targets``);
- low policy ``pi_l(a | s, phi([s; w]))`` by AWR with ``A_l = V(s', w) - V(s, w)``,
  weights ``min(exp(beta_l A_l), 100)`` (beta 1); ``phi`` is not trained by it.

Both policies are unit-std Gaussians (weighted squared error; see ``networks``).
The controller (:class:`HIQLController`) runs the high level every control step, as
OGBench's evaluation does: the subgoal representation is recomputed from the current
state, so it has no state and ``decision_period`` stays 1; both levels are one
``nn.Module`` and export to TorchScript and ONNX together.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from robolearn.interfaces import Controller
from policies.goal.networks import GoalAgent, StateGoalNormalizer, ln_mlp
from policies.goal.relabel import RelabelConfig
from policies.modules import ActionScaler, EnsembleQ


@dataclass
class HIQLConfig:
    batch_size: int = 1024
    lr: float = 3e-4
    hidden: tuple[int, ...] = (512, 512, 512)
    gamma: float = 0.99
    expectile: float = 0.7
    high_beta: float = 1.0
    low_beta: float = 1.0
    max_weight: float = 100.0
    rep_dim: int = 10
    subgoal_steps: int = 25  # k
    target_tau: float = 0.005
    relabel: RelabelConfig = field(default_factory=RelabelConfig)


class GoalRepresentation(nn.Module):
    """``phi([s; g])``: an MLP whose output is rescaled to length ``sqrt(dim)``."""

    def __init__(self, in_dim: int, hidden: tuple[int, ...], dim: int) -> None:
        super().__init__()
        self.net, self.length = ln_mlp(in_dim, hidden, dim), math.sqrt(dim)

    def forward(self, state: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        return length_normalize(self.net(torch.cat([state, goal], dim=-1)), self.length)


def expectile_value_loss(value: nn.Module, target: nn.Module, s: torch.Tensor, s_next: torch.Tensor, g: torch.Tensor,
                         reward: torch.Tensor, mask: torch.Tensor, gamma: float,
                         expectile: float) -> tuple[torch.Tensor, torch.Tensor]:
    """OGBench's HIQL value loss for a 2-ensemble ``value`` with targets ``Q_i = r + gamma m target_i(s_next, g)``
    and ``A = r + gamma m min_i target_i(s_next, g) - mean_i target_i(s, g)``:
    ``sum_i E[ |tau - 1(A < 0)| (Q_i - V_i(s, g))^2 ]``. ``s_next`` is where the target bootstraps: the next
    state for HIQL's value, the state an option later for OTA's. Returns the loss and ``V(s, g)`` ``(2, B)``."""
    with torch.no_grad():
        q, advantage = td_targets(target, s, s_next, g, reward, mask, gamma)
    v = value(s, g)
    return ((expectile - (advantage < 0).float()).abs() * (q - v).square()).mean(-1).sum(), v


def td_targets(target: nn.Module, s: torch.Tensor, s_next: torch.Tensor, g: torch.Tensor, reward: torch.Tensor,
               mask: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``Q_i = r + gamma m V'_i(s_next, g)`` ``(2, B)`` and
    ``A = r + gamma m min_i V'_i(s_next, g) - mean_i V'_i(s, g)``."""
    next_v = target(s_next, g)
    advantage = reward + gamma * mask * next_v.amin(0) - target(s, g).mean(0)
    return reward + gamma * mask * next_v, advantage


def length_normalize(x: torch.Tensor, length: float) -> torch.Tensor:
    return x / (x.norm(dim=-1, keepdim=True) + 1e-6) * length


class HIQLValue(nn.Module):
    """``V_i(s, g) = MLP_i([s; phi([s; g])])``, i = 1, 2, evaluated as one batched ensemble."""

    def __init__(self, obs_dim: int, goal_dim: int, hidden: tuple[int, ...], rep_dim: int) -> None:
        super().__init__()
        self.phi = GoalRepresentation(obs_dim + goal_dim, hidden, rep_dim)
        self.heads = EnsembleQ(2, obs_dim + rep_dim, 0, hidden, "relu", layer_norm=True)

    def forward(self, state: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        """``(2, B)`` values."""
        x = torch.cat([state, self.phi(state, goal)], dim=-1)
        return self.heads(x, x[:, :0])  # no action input: the ensemble's Q without a


class HIQLController(Controller):
    """``[policy; goal] -> action``: subgoal representation ``z = pi_h(s, g)`` (length-normalized),
    then ``scale(tanh(pi_l(s, z)))``; both levels every control step."""

    __jit_ignored_attributes__ = ["obs_groups", "obs_size"]

    def __init__(self, normalizer: StateGoalNormalizer, high: nn.Module, low: nn.Module, scaler: ActionScaler,
                 obs_dim: int, goal_dim: int, rep_dim: int) -> None:
        super().__init__()
        self.normalizer, self.high, self.low, self.scaler = normalizer, high, low, scaler
        self.state_dim, self.length = obs_dim, math.sqrt(rep_dim)
        self.obs_groups, self.obs_size = ("policy", "goal"), obs_dim + goal_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        s, g = self.normalizer(obs[:, : self.state_dim], obs[:, self.state_dim :])
        z = length_normalize(self.high(torch.cat([s, g], dim=-1)), self.length)
        return self.scaler(torch.tanh(self.low(torch.cat([s, z], dim=-1))))


class HIQL(GoalAgent):
    saved_modules: tuple[str, ...] = ("value", "value_target", "high", "low", "normalizer", "optimizer")

    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: HIQLConfig,
                 device: torch.device) -> None:
        self.cfg, self.relabel = cfg, dataclasses.replace(cfg.relabel, gamma=cfg.gamma)
        self.subgoal_steps = cfg.subgoal_steps
        self._setup_spaces(observation_spec, action_spec, device)
        hidden = tuple(cfg.hidden)
        self.value = HIQLValue(self.obs_dim, self.goal_dim, hidden, cfg.rep_dim).to(self.device)
        self.value_target = copy.deepcopy(self.value).requires_grad_(False)
        self.high = ln_mlp(self.obs_dim + self.goal_dim, hidden, cfg.rep_dim).to(self.device)
        self.low = ln_mlp(self.obs_dim + cfg.rep_dim, hidden, self.action_dim).to(self.device)
        params = [*self.value.parameters(), *self.high.parameters(), *self.low.parameters()]
        self.optimizer = torch.optim.Adam(params, lr=cfg.lr)

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        norm = self.normalizer
        s, g = norm(batch["obs"], batch["value_goal"])
        s_next, _ = norm(batch["next_obs"], batch["value_goal"])
        g_actor, w = norm.goal(batch["actor_goal"]), norm.goal(batch["subgoal"])
        s_h, w_h = norm(batch["high_target_obs"], batch["high_target"])
        action = self.normalized_action(batch)

        # Value: expectile regression of each V_i onto r + gamma m V'_i(s', g), weighted by the sign of A
        value_loss, v = expectile_value_loss(self.value, self.value_target, s, s_next, g, batch["reward"],
                                             batch["mask"], cfg.gamma, cfg.expectile)
        extra_loss, extra_metrics = self.extra_losses(batch)

        # Policies: advantages from the (current) value, no gradient into it
        with torch.no_grad():
            low_adv = self.value(s_next, w).mean(0) - self.value(s, w).mean(0)
            high_adv = self.high_advantage(s, s_h, g_actor)
            z_low = self.value.phi(s, w)  # the low level's goal: phi of the subgoal
            z_high = self.value.phi(s, w_h)  # the high level's target: phi of the subgoal, capped at its goal
            low_weight = torch.exp(cfg.low_beta * low_adv).clamp(max=cfg.max_weight)
            high_weight = torch.exp(cfg.high_beta * high_adv).clamp(max=cfg.max_weight)
        low_mean = torch.tanh(self.low(torch.cat([s, z_low], dim=-1)))
        low_loss = (low_weight * 0.5 * (low_mean - action).square().sum(-1)).mean()
        high_mean = self.high(torch.cat([s, g_actor], dim=-1))
        high_loss = (high_weight * 0.5 * (high_mean - z_high).square().sum(-1)).mean()

        self.optimizer.zero_grad(set_to_none=True)
        (value_loss + low_loss + high_loss + extra_loss).backward()
        self.optimizer.step()
        with torch.no_grad():
            for target, online in self.target_pairs():
                torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), cfg.target_tau)
        return {"value_loss": value_loss.detach(), "low_actor_loss": low_loss.detach(),
                "high_actor_loss": high_loss.detach(), "v": v.detach().mean(),
                "low_adv_weight": low_weight.mean(), "high_adv_weight": high_weight.mean(), **extra_metrics}

    # Hooks for variants that change the high level's value (``ota.OTA``)
    def high_advantage(self, s: torch.Tensor, s_h: torch.Tensor, g_actor: torch.Tensor) -> torch.Tensor:
        """``A_h = V(s_h, g') - V(s, g')`` for the high target ``s_h`` (normalized inputs; called without gradient)."""
        return self.value(s_h, g_actor).mean(0) - self.value(s, g_actor).mean(0)

    def extra_losses(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor | float, dict[str, torch.Tensor]]:
        """Losses added to the step's sum, and their metrics (none for HIQL)."""
        return 0.0, {}

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """``(target, online)`` networks that the Polyak update moves."""
        return [(self.value_target, self.value)]

    def controller(self) -> Controller:
        return HIQLController(copy.deepcopy(self.normalizer), copy.deepcopy(self.high), copy.deepcopy(self.low),
                              copy.deepcopy(self.scaler), self.obs_dim, self.goal_dim, self.cfg.rep_dim)

    def state_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name).state_dict() for name in self.saved_modules}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            getattr(self, name).load_state_dict(value)
