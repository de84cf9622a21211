"""Flat goal-conditioned IQL (GCIQL; OGBench's baseline, after Kostrikov et al. 2021).

IQL with the goal as part of the state and the relabeled sparse reward
(``relabel``: r = 0 and no bootstrap at the goal, else -1). On a minibatch with
value goals ``g`` and actor goals ``g'``:

- value: ``L_V = E[ |tau - 1(u < 0)| u^2 ]``, ``u = min_i Q'_i(s, a, g) - V(s, g)``, tau 0.7;
- Q: ``L_Q = E[ (r + gamma m V(s', g) - Q_i(s, a, g))^2 ]``, gamma 0.99;
- actor (AWR): ``L_pi = E[ min(exp(beta (min_i Q'_i(s, a, g') - V(s, g'))), 100) |mu(s, g') - a|^2 / 2 ]``.

One Adam step on the sum, then a Polyak update of the target critics (tau 0.005).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from gymnasium import spaces

from policies.goal.networks import GoalAgent, ln_mlp
from policies.goal.relabel import RelabelConfig
from policies.modules import EnsembleQ


@dataclass
class GCIQLConfig:
    batch_size: int = 1024
    lr: float = 3e-4
    hidden: tuple[int, ...] = (512, 512, 512)
    gamma: float = 0.99
    expectile: float = 0.7
    beta: float = 3.0  # AWR inverse temperature
    max_weight: float = 100.0
    target_tau: float = 0.005
    relabel: RelabelConfig = field(default_factory=RelabelConfig)


class GCIQL(GoalAgent):
    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: GCIQLConfig,
                 device: torch.device) -> None:
        self.cfg, self.relabel = cfg, dataclasses.replace(cfg.relabel, gamma=cfg.gamma)
        self._setup_spaces(observation_spec, action_spec, device)
        sg, hidden = self.obs_dim + self.goal_dim, tuple(cfg.hidden)
        self.actor = ln_mlp(sg, hidden, self.action_dim).to(self.device)
        self.critic = EnsembleQ(2, sg, self.action_dim, hidden, "relu", layer_norm=True).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.value = ln_mlp(sg, hidden, 1).to(self.device)
        params = [*self.actor.parameters(), *self.critic.parameters(), *self.value.parameters()]
        self.optimizer = torch.optim.Adam(params, lr=cfg.lr)

    def _v(self, s: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return self.value(torch.cat([s, g], dim=-1)).squeeze(-1)

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        s, g = self.normalizer(batch["obs"], batch["value_goal"])
        s_next, _ = self.normalizer(batch["next_obs"], batch["value_goal"])
        _, g_actor = self.normalizer(batch["obs"], batch["actor_goal"])
        action = self.normalized_action(batch)

        with torch.no_grad():
            target_q = self.critic_target(torch.cat([s, g], -1), action).amin(0)
            next_v = self._v(s_next, g)
            actor_adv = self.critic_target(torch.cat([s, g_actor], -1), action).amin(0) - self._v(s, g_actor)
        v = self._v(s, g)
        u = target_q - v
        value_loss = ((cfg.expectile - (u < 0).float()).abs() * u.square()).mean()
        q = self.critic(torch.cat([s, g], -1), action)
        critic_loss = (q - (batch["reward"] + cfg.gamma * batch["mask"] * next_v)).square().mean(-1).sum()

        weight = torch.exp(cfg.beta * actor_adv).clamp(max=cfg.max_weight)
        mean = torch.tanh(self.actor(torch.cat([s, g_actor], -1)))
        actor_loss = (weight * 0.5 * (mean - action).square().sum(-1)).mean()

        self.optimizer.zero_grad(set_to_none=True)
        (value_loss + critic_loss + actor_loss).backward()
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(self.critic_target.parameters()), list(self.critic.parameters()), cfg.target_tau)
        return {"value_loss": value_loss.detach(), "critic_loss": critic_loss.detach(),
                "actor_loss": actor_loss.detach(), "v": v.detach().mean(), "adv_weight": weight.mean()}

    def state_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name).state_dict()
                for name in ("actor", "critic", "critic_target", "value", "normalizer", "optimizer")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            getattr(self, name).load_state_dict(value)
