"""Implicit Q-Learning (Kostrikov, Nair & Levine 2021, "Offline Reinforcement Learning
with Implicit Q-Learning").

Never queries Q at actions outside the dataset. Three losses on a minibatch:

- value, eq. (5): ``L_V = E[ L2^tau( min_i Q'_i(s, a) - V(s) ) ]`` with the expectile
  loss ``L2^tau(u) = |tau - 1(u < 0)| u^2`` (tau = 0.7): V approaches an upper
  expectile of Q over the dataset's actions;
- Q, eq. (6): ``L_Q = E[ (r + gamma (1 - d) V(s') - Q_i(s, a))^2 ]``;
- policy, eq. (7), advantage-weighted regression:
  ``L_pi = -E[ exp(beta (Q'(s, a) - V(s))) log pi(a | s) ]`` with beta = 3 (the
  "temperature" 1/beta of the paper's text is CORL's ``beta``), the weight clipped at 100.

The three are independent given the batch (V's target and the advantage use the
target critic and the V of before this step, as in the authors' and CORL's code),
so one backward pass and one Adam step update everything. The actor's learning rate
follows a cosine schedule to 0 over ``total_updates`` (CORL), the run's length by default. The policy is a Gaussian
with ``tanh`` mean and state-independent std (CORL's ``GaussianPolicy``); the
controller acts with its mean. Rewards are scaled by ``1000 / (max - min episode
return)`` of the dataset (``normalize_reward``; the paper's MuJoCo setting).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from gymnasium import spaces
from torch import nn

from robolearn.interfaces import Controller, Obs, flatten_obs, obs_dim
from policies.modules import (ActionScaler, DeterministicController, EnsembleQ, gaussian_log_prob, mlp,
                              Checkpointed, CheckpointedParts)
from policies.offline.common import OfflineAgent, dataset_standardizer, episode_ends, episode_returns


@dataclass
class IQLConfig:
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005  # target critic: theta' <- (1 - tau) theta' + tau theta
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    value_lr: float = 3e-4
    hidden: tuple[int, ...] = (256, 256)
    activation: Literal["elu", "relu", "tanh", "silu"] = "relu"
    expectile: float = 0.7  # tau of eq. (5)
    beta: float = 3.0  # inverse temperature of eq. (7)
    max_weight: float = 100.0  # clip of exp(beta A)
    log_std_min: float = -20.0  # floor of the policy's state-independent log std (IQL's code: -5)
    log_std_init: float = 0.0  # its starting value (IQL's code: 0; d3rlpy: -1.5, the middle of its [-5, 2])
    total_updates: int = 0  # length of the actor's cosine schedule; 0: the offline run's (constant lr outside a run)
    normalize_reward: bool = True
    normalize_obs: bool = True
    obs_groups: tuple[str, ...] = ("policy",)


class IQL(CheckpointedParts, OfflineAgent):
    LOG_STD_MAX = 2.0

    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: IQLConfig, device: torch.device) -> None:
        self.cfg, self.device = cfg, torch.device(device)
        self.obs_groups = tuple(cfg.obs_groups)
        self.obs_dim = obs_dim(observation_spec, self.obs_groups)
        action_dim, hidden = action_spec.shape[0], tuple(cfg.hidden)
        self.scaler = ActionScaler(action_spec).to(self.device)
        self.normalizer = dataset_standardizer(self.obs_dim, cfg.normalize_obs).to(self.device)
        self.actor = mlp(self.obs_dim, hidden, action_dim, cfg.activation).to(self.device)  # mean = tanh(actor(s))
        self.log_std = nn.Parameter(torch.full((action_dim,), cfg.log_std_init, device=self.device))
        self.critic = EnsembleQ(2, self.obs_dim, action_dim, hidden, cfg.activation).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.value = mlp(self.obs_dim, hidden, 1, cfg.activation).to(self.device)
        self.reward_scale = torch.ones((), device=self.device)  # set from the dataset by prepare()
        self.optimizer = torch.optim.Adam([
            {"params": [*self.actor.parameters(), self.log_std], "lr": cfg.actor_lr},
            {"params": list(self.critic.parameters()), "lr": cfg.critic_lr},
            {"params": list(self.value.parameters()), "lr": cfg.value_lr},
        ], fused=self.device.type in ("cpu", "cuda"))  # one kernel for all parameters: the per-tensor loop was ~20% of an update on CPU
        horizon = cfg.total_updates
        cosine = lambda step: 0.5 * (1 + math.cos(math.pi * min(step, horizon) / horizon)) if horizon > 0 else 1.0  # noqa: E731
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, [cosine, lambda _: 1.0, lambda _: 1.0])

    def prepare(self, data: dict[str, Any]) -> dict[str, Any]:
        """Dataset statistics: observation normalizer and (``normalize_reward``) the reward scale."""
        if self.cfg.normalize_reward:
            returns = episode_returns(data["reward"], episode_ends(data))
            spread = float(returns.max() - returns.min())
            self.reward_scale.fill_(1000.0 / spread if spread > 0 else 1.0)
        return super().prepare(data)

    def _v(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value(obs).squeeze(-1)

    @torch.no_grad()
    def act(self, obs: Obs, explore: bool = False) -> dict[str, torch.Tensor]:
        mean = torch.tanh(self.actor(self.normalizer(flatten_obs(obs, self.obs_groups))))
        if explore:
            mean = (mean + torch.randn_like(mean) * self._std()).clamp(-1.0, 1.0)
        return {"action": self.scaler(mean)}

    def _std(self) -> torch.Tensor:
        return self.log_std.clamp(self.cfg.log_std_min, self.LOG_STD_MAX).exp()

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        obs = self.normalizer(flatten_obs(batch["obs"], self.obs_groups))
        next_obs = self.normalizer(flatten_obs(batch["next_obs"], self.obs_groups))
        action = self.scaler.normalize(batch["action"])
        reward = batch["reward"] * self.reward_scale
        not_terminated = 1.0 - batch["terminated"].float()

        # Value, eq. (5): expectile regression of V(s) onto min_i Q'_i(s, a)
        with torch.no_grad():
            target_q = self.critic_target(obs, action).amin(0)
            next_v = self._v(next_obs)
        v = self._v(obs)
        u = target_q - v
        value_loss = ((cfg.expectile - (u < 0).float()).abs() * u.square()).mean()

        # Q, eq. (6): regress both critics onto r + gamma (1 - d) V(s')
        q = self.critic(obs, action)
        critic_loss = (q - (reward + cfg.gamma * not_terminated * next_v)).square().mean(-1).mean()

        # Policy, eq. (7): advantage-weighted log-likelihood of the dataset's actions
        weight = torch.exp(cfg.beta * u.detach()).clamp(max=cfg.max_weight)
        log_prob = gaussian_log_prob(action, torch.tanh(self.actor(obs)), self._std())
        actor_loss = -(weight * log_prob).mean()

        self.optimizer.zero_grad(set_to_none=True)
        (value_loss + critic_loss + actor_loss).backward()
        self.optimizer.step()
        self.schedule.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(self.critic_target.parameters()), list(self.critic.parameters()), cfg.tau)
        return {"value_loss": value_loss.detach(), "critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(),
                "v": v.detach().mean(), "q": q.detach().mean(), "adv_weight": weight.mean()}

    def controller(self) -> Controller:
        """``obs -> scale(tanh(mu(norm(obs))))``: the Gaussian's mean."""
        return DeterministicController(copy.deepcopy(self.normalizer), copy.deepcopy(self.actor), nn.Tanh(),
                                       copy.deepcopy(self.scaler), self.obs_groups, self.obs_dim)

    def _checkpointed(self) -> dict[str, Checkpointed]:
        return {"actor": self.actor, "log_std": self.log_std, "critic": self.critic, "critic_target": self.critic_target,
                "value": self.value, "normalizer": self.normalizer, "reward_scale": self.reward_scale,
                "optimizer": self.optimizer, "schedule": self.schedule}


