"""TD3+BC (Fujimoto & Gu 2021, "A Minimalist Approach to Offline Reinforcement Learning").

TD3 with two changes: the actor's loss adds a behavior-cloning term, and the
observations are normalized with the dataset's mean and std. Eq. (3) of the paper:

    pi = argmax_pi E_(s,a)~D [ lambda Q(s, pi(s)) - (pi(s) - a)^2 ],
    lambda = alpha / ( (1/N) sum_(s_i,a_i) |Q(s_i, a_i)| )     (alpha = 2.5)

where the normalizer of lambda is computed on the minibatch (at ``pi(s)``, as the
authors' code does) and carries no gradient. The critics are TD3's: clipped double Q
with target policy smoothing (noise 0.2 clipped at 0.5, in ``[-1, 1]`` action units)
and the actor and targets updated every ``policy_delay`` = 2 critic updates.
Hyperparameters are the paper's (Table 2), which are also CORL's.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

import torch
from gymnasium import spaces
from torch import nn

from robolearn.interfaces import Controller, Obs, flatten_obs, obs_dim
from policies.modules import ActionScaler, DeterministicController, EnsembleQ, mlp
from policies.offline.common import OfflineAgent, dataset_standardizer


@dataclass
class TD3BCConfig:
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    hidden: tuple[int, ...] = (256, 256)
    activation: Literal["elu", "relu", "tanh", "silu"] = "relu"
    alpha: float = 2.5  # weight of Q against behavior cloning (eq. 3)
    policy_delay: int = 2
    target_noise: float = 0.2
    target_noise_clip: float = 0.5
    normalize_obs: bool = True
    obs_groups: tuple[str, ...] = ("policy",)


class TD3BC(OfflineAgent):
    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: TD3BCConfig, device: torch.device) -> None:
        self.cfg, self.device = cfg, torch.device(device)
        self.obs_groups = tuple(cfg.obs_groups)
        self.obs_dim = obs_dim(observation_spec, self.obs_groups)
        action_dim, hidden = action_spec.shape[0], tuple(cfg.hidden)
        self.scaler = ActionScaler(action_spec).to(self.device)
        self.normalizer = dataset_standardizer(self.obs_dim, cfg.normalize_obs).to(self.device)
        self.actor = nn.Sequential(mlp(self.obs_dim, hidden, action_dim, cfg.activation), nn.Tanh()).to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = EnsembleQ(2, self.obs_dim, action_dim, hidden, cfg.activation).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        fused = self.device.type in ("cpu", "cuda")  # one kernel for all parameters instead of a per-tensor loop
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr, fused=fused)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr, fused=fused)
        self.updates = 0
        self._actor_metrics: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def act(self, obs: Obs, explore: bool = False) -> dict[str, torch.Tensor]:
        return {"action": self.scaler(self.actor(self.normalizer(flatten_obs(obs, self.obs_groups))))}

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        obs = self.normalizer(flatten_obs(batch["obs"], self.obs_groups))
        next_obs = self.normalizer(flatten_obs(batch["next_obs"], self.obs_groups))
        action = self.scaler.normalize(batch["action"])
        not_terminated = 1.0 - batch["terminated"].float()

        # Target policy smoothing and clipped double Q (TD3, Fujimoto et al. 2018, eq. 14-15):
        # y = r + gamma (1 - d) min_i Q'_i(s', clip(pi'(s') + clip(eps, -c, c), -1, 1)), eps ~ N(0, sigma)
        with torch.no_grad():
            noise = (torch.randn_like(action) * cfg.target_noise).clamp(-cfg.target_noise_clip, cfg.target_noise_clip)
            next_action = (self.actor_target(next_obs) + noise).clamp(-1.0, 1.0)
            target_q = batch["reward"] + cfg.gamma * not_terminated * self.critic_target(next_obs, next_action).amin(0)
        q = self.critic(obs, action)
        critic_loss = (q - target_q).square().mean(-1).sum()  # sum_i E[(Q_i(s, a) - y)^2]
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()

        self.updates += 1
        if self.updates % cfg.policy_delay == 0:
            # Eq. (3): maximize lambda Q_1(s, pi(s)) - (pi(s) - a)^2, lambda = alpha / mean |Q_1|
            pi = self.actor(obs)
            q_pi = self.critic(obs, pi, detach_params=True)[0]
            lam = cfg.alpha / q_pi.abs().mean().detach()
            bc = (pi - action).square().mean()
            actor_loss = -lam * q_pi.mean() + bc
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
            self.actor_optimizer.step()
            with torch.no_grad():
                torch._foreach_lerp_(list(self.critic_target.parameters()), list(self.critic.parameters()), cfg.tau)
                torch._foreach_lerp_(list(self.actor_target.parameters()), list(self.actor.parameters()), cfg.tau)
            self._actor_metrics = {"actor_loss": actor_loss.detach(), "bc_loss": bc.detach(), "lambda": lam}
        return {"critic_loss": critic_loss.detach(), "q": q.detach().mean(), **self._actor_metrics}

    def controller(self) -> Controller:
        """``obs -> scale(tanh(f(norm(obs))))``."""
        return DeterministicController(copy.deepcopy(self.normalizer), copy.deepcopy(self.actor[0]), nn.Tanh(),
                                       copy.deepcopy(self.scaler), self.obs_groups, self.obs_dim)

    def state_dict(self) -> dict[str, Any]:
        state = {"actor": self.actor.state_dict(), "actor_target": self.actor_target.state_dict(),
                 "critic": self.critic.state_dict(), "critic_target": self.critic_target.state_dict(),
                 "normalizer": self.normalizer.state_dict(), "actor_optimizer": self.actor_optimizer.state_dict(),
                 "critic_optimizer": self.critic_optimizer.state_dict(), "updates": torch.tensor(self.updates)}
        # The last actor step's metrics, which every update until the next one reports (the iteration's logged
        # means hold them): a resume between two actor steps reports them too. Absent before the first actor step,
        # so that checkpoints written before they were kept still load (and report none until the next one).
        if self._actor_metrics:
            state["actor_metrics"] = dict(self._actor_metrics)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("actor", "actor_target", "critic", "critic_target", "normalizer", "actor_optimizer", "critic_optimizer"):
            getattr(self, name).load_state_dict(state[name])
        self.updates = int(state["updates"])
        self._actor_metrics = dict(state.get("actor_metrics", {}))
