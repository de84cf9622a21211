"""Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
Applications"): twin critics with target networks, a tanh-squashed Gaussian
policy and an automatically tuned temperature.

Actions: the replay buffer holds env-unit actions (the runner stores what it
sent, random warm-up actions included); the agent maps them to ``[-1, 1]``
with the ``action_spec`` bounds, and its policy and controller act through
``tanh`` scaled back to the bounds. Bootstrapping is cut only by
``terminated``: a time-limit truncation bootstraps from ``next_obs``.

Speed: both critics run as one batched ensemble, and the three losses are
independent given a batch (the actor sees the critic through detached
weights), so one backward pass and one fused Adam step update everything.
(Unlike implementations with one optimizer step per loss, the actor's loss
therefore uses the critic from before this step's critic update.)
``update`` returns 0-dim tensors, never synchronizing with the device.

Under torchrun (``robolearn/distributed.py``) each rank samples from its own
replay buffer and the gradients of critics, actor and temperature are averaged
over ranks before the step, so one update sees ``batch_size x world_size``
transitions.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from gymnasium import spaces
from torch import nn

from robolearn import distributed
from robolearn.interfaces import Agent, Controller, Obs, flatten_obs, obs_dim
from policies.modules import (ActionScaler, DeterministicController, EnsembleQ, SquashedGaussianActor,
                              Checkpointed, CheckpointedParts)


@dataclass
class SACConfig:
    batch_size: int = 256
    buffer_size: int = 1_000_000
    gamma: float = 0.99
    tau: float = 0.005  # target networks: theta' <- (1 - tau) theta' + tau theta
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4
    hidden: tuple[int, ...] = (256, 256)
    activation: Literal["elu", "relu", "tanh", "silu"] = "relu"
    num_critics: int = 2
    init_alpha: float = 1.0
    target_entropy: float | None = None  # None: -|A|
    actor_obs_groups: tuple[str, ...] = ("policy",)
    critic_obs_groups: tuple[str, ...] = ("policy",)


class SAC(CheckpointedParts, Agent):
    on_policy = False
    data_parallel = True

    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: SACConfig, device: torch.device) -> None:
        if len(action_spec.shape) != 1:
            raise ValueError(f"SAC expects a flat action_spec, got shape {action_spec.shape}")
        self.cfg, self.device = cfg, torch.device(device)
        self.actor_groups, self.critic_groups = tuple(cfg.actor_obs_groups), tuple(cfg.critic_obs_groups)
        self.actor_obs_dim = obs_dim(observation_spec, self.actor_groups)
        critic_obs_dim = obs_dim(observation_spec, self.critic_groups)
        action_dim = action_spec.shape[0]
        hidden = tuple(cfg.hidden)

        self.scaler = ActionScaler(action_spec).to(self.device)
        self.actor = SquashedGaussianActor(self.actor_obs_dim, action_dim, hidden, cfg.activation).to(self.device)
        self.critic = EnsembleQ(cfg.num_critics, critic_obs_dim, action_dim, hidden, cfg.activation).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.init_alpha), device=self.device))
        self.target_entropy = -float(action_dim) if cfg.target_entropy is None else float(cfg.target_entropy)
        self.optimizer = torch.optim.Adam(
            [
                {"params": list(self.actor.parameters()), "lr": cfg.actor_lr},
                {"params": list(self.critic.parameters()), "lr": cfg.critic_lr},
                {"params": [self.log_alpha], "lr": cfg.alpha_lr},
            ],
            fused=True,
        )
        self._online, self._target = list(self.critic.parameters()), list(self.critic_target.parameters())
        self._params = [p for group in self.optimizer.param_groups for p in group["params"]]

    def _groups(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor]:
        actor_obs = flatten_obs(obs, self.actor_groups)
        critic_obs = actor_obs if self.critic_groups == self.actor_groups else flatten_obs(obs, self.critic_groups)
        return actor_obs, critic_obs

    @torch.no_grad()
    def act(self, obs: Obs, explore: bool = True) -> dict[str, torch.Tensor]:
        action, _ = self.actor(flatten_obs(obs, self.actor_groups), deterministic=not explore)
        return {"action": self.scaler(action)}

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """One gradient step of critics, actor and temperature on a replay minibatch; targets follow by tau."""
        cfg = self.cfg
        actor_obs, critic_obs = self._groups(batch["obs"])
        next_actor_obs, next_critic_obs = self._groups(batch["next_obs"])
        action = self.scaler.normalize(batch["action"])
        not_terminated = 1.0 - batch["terminated"].float()
        alpha = self.log_alpha.detach().exp()

        # Soft Bellman target: y = r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(s')
        with torch.no_grad():
            next_action, next_log_prob = self.actor(next_actor_obs)
            next_q = self.critic_target(next_critic_obs, next_action).amin(0)
            target_q = batch["reward"] + cfg.gamma * not_terminated * (next_q - alpha * next_log_prob)

        # Critic: J_Q = sum_i E[(Q_i(s, a) - y)^2] / 2
        q = self.critic(critic_obs, action)
        critic_loss = 0.5 * (q - target_q).square().mean(-1).sum()

        # Actor: J_pi = E[alpha log pi(a|s) - min_i Q_i(s, a)], a ~ pi(s) reparameterized
        new_action, log_prob = self.actor(actor_obs)
        q_new = self.critic(critic_obs, new_action, detach_params=True).amin(0)
        actor_loss = (alpha * log_prob - q_new).mean()

        # Temperature: J(alpha) = E[-alpha (log pi(a|s) + target_entropy)], gradient taken through log alpha
        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()

        self.optimizer.zero_grad(set_to_none=True)
        (critic_loss + actor_loss + alpha_loss).backward()
        distributed.average_gradients(self._params)  # critics, actor and temperature alike
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(self._target, self._online, cfg.tau)

        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha": alpha,
            "entropy": -log_prob.detach().mean(),
            "q": q.detach().mean(),
        }

    def controller(self) -> Controller:
        """``obs -> tanh(mu(obs))`` scaled to the action bounds."""
        return DeterministicController(
            nn.Identity(), self.actor.mean_net(), nn.Tanh(), copy.deepcopy(self.scaler), self.actor_groups, self.actor_obs_dim
        )

    def _checkpointed(self) -> dict[str, Checkpointed]:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target,
                "log_alpha": self.log_alpha, "optimizer": self.optimizer}


