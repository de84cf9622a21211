"""TD3 (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods") on transitions its owner assembles: one level of a hierarchical agent
(:mod:`policies.goal.hrac` runs two of them, HIRO and HRAC's choice of learner).

Actions are in ``[-1, 1]`` (``tanh`` of the actor's output); the owner scales them. Clipped
double Q with target policy smoothing (noise 0.2 clipped at 0.5) and the actor and targets
updated every ``policy_delay`` = 2 critic updates::

    y = r + discount * min_i Q'_i(s', clip(pi'(s') + clip(eps, -c, c), -1, 1))
    J_Q = sum_i E[(Q_i(s, a) - y)^2]          J_pi = E[-Q_1(s, pi(s)) + penalty(s, pi(s))]

``discount`` is given per transition (gamma, or gamma^n for an n-step high-level
transition, times 1 - terminated). ``penalty`` is the owner's extra actor loss (HRAC's
adjacency constraint). TD3+BC (:mod:`policies.offline.td3bc`) keeps its own update: its
actor loss is normalized by the batch's mean |Q|, and its numbers are benchmarked as they are.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from policies.modules import EnsembleQ, mlp


@dataclass
class TD3Settings:
    hidden: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    actor_lr: float = 1e-4  # HIRO's and HRAC's learning rates
    critic_lr: float = 1e-3
    tau: float = 0.005
    policy_delay: int = 2
    target_noise: float = 0.2
    target_noise_clip: float = 0.5


class TD3Learner:
    """An actor ``in -> pre-tanh action``, twin critics, their targets and optimizers."""

    def __init__(self, in_dim: int, action_dim: int, settings: TD3Settings, device: torch.device) -> None:
        self.settings = settings
        hidden = tuple(settings.hidden)
        self.actor = mlp(in_dim, hidden, action_dim, settings.activation).to(device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = EnsembleQ(2, in_dim, action_dim, hidden, settings.activation).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        fused = torch.device(device).type in ("cpu", "cuda")
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=settings.actor_lr, fused=fused)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=settings.critic_lr, fused=fused)
        self.updates = 0
        self._actor_metrics: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def act(self, x: torch.Tensor, noise: float = 0.0) -> torch.Tensor:
        """``tanh(actor(x))`` plus Gaussian exploration noise of std ``noise``, clipped to ``[-1, 1]``."""
        action = torch.tanh(self.actor(x))
        return (action + noise * torch.randn_like(action)).clamp(-1.0, 1.0) if noise > 0 else action

    def update(self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
               next_obs: torch.Tensor,
               penalty: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """One critic step, and every ``policy_delay`` calls an actor step and the target updates."""
        s = self.settings
        with torch.no_grad():
            next_action = torch.tanh(self.actor_target(next_obs))
            smoothing = (torch.randn_like(next_action) * s.target_noise).clamp(-s.target_noise_clip, s.target_noise_clip)
            next_action = (next_action + smoothing).clamp(-1.0, 1.0)
            target_q = reward + discount * self.critic_target(next_obs, next_action).amin(0)
        q = self.critic(obs, action)
        critic_loss = (q - target_q).square().mean(-1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()

        self.updates += 1
        if self.updates % s.policy_delay == 0:
            pi = torch.tanh(self.actor(obs))
            actor_loss = -self.critic(obs, pi, detach_params=True)[0].mean()
            metrics = {"actor_loss": actor_loss.detach()}
            if penalty is not None:
                extra = penalty(obs, pi).mean()
                actor_loss = actor_loss + extra
                metrics["penalty"] = extra.detach()
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
            self.actor_optimizer.step()
            with torch.no_grad():
                torch._foreach_lerp_(list(self.critic_target.parameters()), list(self.critic.parameters()), s.tau)
                torch._foreach_lerp_(list(self.actor_target.parameters()), list(self.actor.parameters()), s.tau)
            self._actor_metrics = metrics
        return {"critic_loss": critic_loss.detach(), "q": q.detach().mean(), **self._actor_metrics}

    saved = ("actor", "actor_target", "critic", "critic_target", "actor_optimizer", "critic_optimizer")

    def state_dict(self) -> dict[str, Any]:
        state = {**{name: getattr(self, name).state_dict() for name in self.saved}, "updates": torch.tensor(self.updates)}
        # The last actor step's metrics, which every update until the next one reports (the iteration's logged
        # means hold them): a resume between two actor steps reports them too. Absent before the first actor step,
        # so that checkpoints written before they were kept still load (and report none until the next one).
        if self._actor_metrics:
            state["actor_metrics"] = dict(self._actor_metrics)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self.saved:
            getattr(self, name).load_state_dict(state[name])
        self.updates = int(state["updates"])
        self._actor_metrics = dict(state.get("actor_metrics", {}))

    def modules(self) -> list[nn.Module]:
        return [self.actor, self.actor_target, self.critic, self.critic_target]
