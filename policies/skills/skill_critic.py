"""Skill-Critic (Hao et al. 2023, "Skill-Critic: Refining Learned Skills for Hierarchical
Reinforcement Learning"): SPiRL whose low level is refined online too.

SPiRL's skills are frozen: when the data's skills are not quite right for the task, the
high level can only pick among them. Skill-Critic adds, on top of :class:`SPiRL`:

- a low-level policy ``pi_L(a | s, z, k)`` (``k`` the step in the skill, one-hot),
  initialized from the decoder (:meth:`LowPolicy.from_decoder`) and regularized toward
  it by ``KL(pi_L(.|s, z, k) || p(.|s, z))`` with a weight tuned toward ``target_low_kl``
  (both are tanh-squashed Gaussians through the same tanh, so the KL is that of the
  pre-tanh Gaussians: exact);
- a low-level critic ``Q_L(s, z, k, a)`` on primitive steps whose target mixes the two
  levels' values: when the step ends the skill (``k = H - 1``) the next state starts a
  new one and is valued by the high level, else by the low level::

      V_H(s') = min_i Q'_H,i(s', z') - alpha_H KL(pi_H(.|s') || p(.|s')),          z' ~ pi_H(s')
      V_L(s') = min_i Q'_L,i(s', z, k+1, a') - alpha_L KL(pi_L(.|s', z, k+1) || p(.|s', z)),  a' ~ pi_L
      y = r + gamma (1 - terminated) (V_H(s') if k = H - 1 else V_L(s'))

  and ``J_piL = E[alpha_L KL(pi_L || p) - min_i Q_L,i(s, z, k, a~pi_L)]``;
- staged training, counted in updates: until ``critic_warmup_updates`` only the critics
  learn (both policies stay the prior and the decoder); until ``low_start_updates`` the
  high level learns as SPiRL's; then both levels.

Exploring, the low level samples ``a ~ pi_L`` (so ``Q_L`` sees actions around the
decoder's from the start); the controller plays ``pi_L``'s mean. Each update samples a
batch of high-level transitions and one of primitive steps (``sample``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Normal, kl_divergence

from robolearn.interfaces import flatten_obs
from robolearn.storage import ReplayBuffer
from policies.modules import EnsembleQ
from policies.skills.skill_model import LowPolicy
from policies.skills.spirl import SPiRL, SPiRLConfig


@dataclass
class SkillCriticConfig(SPiRLConfig):
    low_actor_lr: float = 3e-4
    low_critic_lr: float = 3e-4
    init_low_alpha: float = 0.1
    target_low_kl: float = 0.5  # target KL(pi_L || decoder) per step
    critic_warmup_updates: int = 2_000  # stage 1: critics only
    low_start_updates: int = 10_000  # stage 2 until here (high level as SPiRL), then stage 3: both levels


def one_hot_step(step: torch.Tensor, horizon: int) -> torch.Tensor:
    """``(B,)`` integer steps -> ``(B, H)`` float one-hot."""
    return nn.functional.one_hot(step.long(), horizon).float()


class SkillCritic(SPiRL):
    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: SkillCriticConfig,
                 device: torch.device) -> None:
        if not 0 <= cfg.critic_warmup_updates <= cfg.low_start_updates:
            raise ValueError(f"agent.critic_warmup_updates ({cfg.critic_warmup_updates}) must be in "
                             f"[0, agent.low_start_updates ({cfg.low_start_updates})]")
        if not cfg.target_low_kl > 0 or not cfg.init_low_alpha > 0:
            raise ValueError("agent.target_low_kl and agent.init_low_alpha must be > 0")
        super().__init__(observation_spec, action_spec, cfg, device)
        # the low level's initial weights come from a forked random stream, so that with one seed SPiRL and
        # Skill-Critic pretrain the same skill model (a paired comparison)
        with torch.random.fork_rng(devices=[]):
            self.low_policy = LowPolicy.from_decoder(self.skills.decoder, cfg.horizon, cfg.decoder_std)
            self.low_critic = EnsembleQ(cfg.num_critics, self.obs_dim + cfg.latent_dim + cfg.horizon, self.action_dim,
                                        tuple(cfg.hidden), cfg.activation).to(self.device)
        self.low_critic_target = copy.deepcopy(self.low_critic).requires_grad_(False)
        self.log_low_alpha = nn.Parameter(torch.tensor(math.log(cfg.init_low_alpha), device=self.device))
        self.optimizer = torch.optim.Adam(self.param_groups(), fused=True)  # SPiRL's groups and the low level's
        self.updates = 0

    def param_groups(self) -> list[dict[str, Any]]:
        cfg = self.cfg
        return [*super().param_groups(), {"params": list(self.low_policy.parameters()), "lr": cfg.low_actor_lr},
                {"params": list(self.low_critic.parameters()), "lr": cfg.low_critic_lr},
                {"params": [self.log_low_alpha], "lr": cfg.alpha_lr}]

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [*super().target_pairs(), (self.low_critic_target, self.low_critic)]

    def end_pretraining(self) -> None:
        """The low-level policy starts as the trained decoder."""
        super().end_pretraining()
        self.low_policy.load_state_dict(
            LowPolicy.from_decoder(self.skills.decoder, self.horizon, self.cfg.decoder_std).state_dict())

    @property
    def stage(self) -> int:
        """1: critics only; 2: + high level; 3: + low level."""
        cfg = self.cfg
        return 1 if self.updates < cfg.critic_warmup_updates else 2 if self.updates < cfg.low_start_updates else 3

    def low_action(self, s: torch.Tensor, z: torch.Tensor, step: torch.Tensor, explore: bool) -> torch.Tensor:
        pi = self.low_policy.distribution(s, z, one_hot_step(step, self.horizon))
        return torch.tanh(pi.sample() if explore else pi.mean)

    def sample(self, replay: ReplayBuffer, batch_size: int, num_envs: int) -> dict[str, Any]:
        """High-level transitions and primitive steps, one batch of each."""
        return {**super().sample(replay, batch_size, num_envs), "low": replay.sample(batch_size)}

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        metrics = super().update(batch)
        self.updates += 1
        return metrics

    def losses(self, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        stage = self.stage
        high_loss, high_metrics = self.high_losses(batch["high"], train_policy=stage >= 2)
        low_loss, low_metrics = self.low_losses(batch["low"], train_policy=stage >= 3)
        return high_loss + low_loss, {**high_metrics, **low_metrics}

    def state_metrics(self) -> dict[str, float]:
        """Logged as they stand at an iteration's end, the stage the next update trains in (update metrics are
        averaged over an iteration's updates: a stage that turned from 2 to 3 inside one had been logged as 2.5)."""
        return {"stage": float(self.stage)}

    def decoder_distribution(self, s: torch.Tensor, z: torch.Tensor) -> Normal:
        """The decoder's pre-tanh Gaussian ``p(. | s, z)`` (no gradient: it is frozen)."""
        with torch.no_grad():
            return Normal(self.skills.decoder(s, z), self.cfg.decoder_std, validate_args=False)

    def low_losses(self, batch: dict[str, Any], train_policy: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The low-level critic with the mixed target and, from stage 3, the low-level policy (module docstring)."""
        cfg, h = self.cfg, self.horizon
        s = self.normalizer(flatten_obs(batch["obs"], self.groups))
        s_next = self.normalizer(flatten_obs(batch["next_obs"], self.groups))
        z, step = batch["skill"], batch["skill_step"].long()
        k, k_next = one_hot_step(step, h), one_hot_step((step + 1) % h, h)
        action = self.scaler.normalize(batch["action"])
        alpha = self.log_low_alpha.detach().exp()
        with torch.no_grad():
            pi_next = self.low_policy.distribution(s_next, z, k_next)
            kl_next = kl_divergence(pi_next, self.decoder_distribution(s_next, z)).sum(-1)
            low_x = torch.cat([s_next, z, k_next], dim=-1)
            v_low = self.low_critic_target(low_x, torch.tanh(pi_next.sample())).amin(0) - alpha * kl_next
            v_next = torch.where(step == h - 1, self.high_value(s_next), v_low)
            target_q = batch["reward"] + cfg.gamma * (1.0 - batch["terminated"].float()) * v_next
        x = torch.cat([s, z, k], dim=-1)
        q = self.low_critic(x, action)
        loss = 0.5 * (q - target_q).square().mean(-1).sum()
        metrics = {"low_critic_loss": loss.detach(), "low_q": q.detach().mean(), "low_alpha": alpha}
        if train_policy:
            pi = self.low_policy.distribution(s, z, k)
            kl = kl_divergence(pi, self.decoder_distribution(s, z)).sum(-1)
            q_new = self.low_critic(x, torch.tanh(pi.rsample()), detach_params=True).amin(0)
            actor_loss = (alpha * kl - q_new).mean()
            alpha_loss = -(self.log_low_alpha * (kl.detach() - cfg.target_low_kl)).mean()
            loss = loss + actor_loss + alpha_loss
            metrics |= {"low_actor_loss": actor_loss.detach(), "low_kl": kl.detach().mean()}
        return loss, metrics

    def low_module(self) -> nn.Module:
        return self.low_policy

    saved = (*SPiRL.saved, "low_policy", "low_critic", "low_critic_target")

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "log_low_alpha": self.log_low_alpha.detach().clone(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        with torch.no_grad():
            self.log_low_alpha.copy_(state["log_low_alpha"])
        self.updates = int(state["updates"])
