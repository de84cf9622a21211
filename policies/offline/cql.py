"""Conservative Q-Learning (Kumar et al. 2020), CQL(H) on top of SAC, with Cal-QL
(Nakamoto et al. 2023, "Cal-QL: Calibrated Offline RL Pre-Training for Efficient
Online Fine-Tuning") as the option ``calql``.

Each critic minimizes its soft Bellman error plus the CQL(H) regularizer, eq. (4):

    alpha * E_s[ log sum_a exp Q(s, a) - E_(a~D) Q(s, a) ]  +  1/2 E[(Q(s, a) - y)^2]

pushing Q down on actions the policy and a uniform proposal would take and up on
the dataset's. The log-sum-exp over the continuous action space is estimated by
importance sampling (the paper's Appendix F) with ``n_actions`` samples each from
Unif[-1, 1]^A, pi(.|s) and pi(.|s'), all evaluated at s:

    log sum_a exp Q(s, a) ~= logsumexp_j [ Q(s, a_j) - log q(a_j) ]  (- log 3N, a constant)

Cal-QL, eq. (5) of its paper: the Q-values of the *policy's* actions inside that
log-sum-exp are first lower-bounded by the Monte-Carlo return of the dataset's
behavior policy from s, ``Q(s, a) <- max(Q(s, a), G(s))``, so the conservative push
never drives Q below what the data already achieved (a calibrated, not over-pessimistic,
Q for online fine-tuning). ``G`` comes from the dataset's episodes (``prepare``).

The SAC part is standard (auto-tuned entropy temperature toward -|A|, twin critics
with Polyak targets) with CORL's choice of no entropy term in the backup. The critic,
actor and temperature losses are independent given a batch (the actor sees the
critics through detached weights; the CQL samples carry no actor gradient), so one
backward pass and one Adam step update all.
The critics form an ensemble (``num_critics``, optionally LayerNorm'd, targets from
the min of ``target_critics`` sampled members): WSRL pretrains with 10 and LayerNorm.
``self.cql_alpha = 0`` skips the regularizer, leaving SAC for online fine-tuning.
Defaults: alpha = 5, Lagrange off, 10 actions, policy lr 1e-4, critic lr 3e-4, 3x256
networks. Alpha's scale is eq. (4)'s, with the 1/2 on the Bellman error. The authors' code
and CORL weigh the full mean squared error, so the same update takes twice our alpha
there: our 5 is their 10 (CORL's setting); the authors' MuJoCo 5 is our 2.5. CORL's
policy lr is 3e-5.
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
from policies.modules import (ActionScaler, DeterministicController, EmpiricalNormalizer, EnsembleQ, SquashedGaussianActor,
                              Checkpointed, CheckpointedParts)
from policies.offline.common import OfflineAgent, discounted_returns, episode_ends


@dataclass
class CQLConfig:
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    actor_lr: float = 1e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4
    hidden: tuple[int, ...] = (256, 256, 256)
    activation: Literal["elu", "relu", "tanh", "silu"] = "relu"
    init_alpha: float = 1.0  # SAC temperature
    target_entropy: float | None = None  # None: -|A|
    cql_alpha: float = 5.0  # weight of the CQL(H) regularizer on eq. (4)'s 1/2-weighted Bellman error (= 10 in the authors' code and CORL's); Lagrange off
    n_actions: int = 10  # samples per proposal (uniform, pi(s), pi(s')) for the log-sum-exp
    temperature: float = 1.0  # of the log-sum-exp
    calql: bool = False  # lower-bound the policy actions' Q by the dataset's Monte-Carlo return
    # the critic ensemble (WSRL: 10 critics with LayerNorm, targets from the min of 2 sampled, actor on the min of
    # all 10)
    num_critics: int = 2
    target_critics: int = 0  # critics sampled for each target's min (REDQ); 0 (or num_critics and more): all
    layer_norm: bool = False
    actor_q: Literal["min", "mean"] = "min"  # how the actor's loss reduces the ensemble's Q
    reward_scale: float = 1.0
    normalize_obs: bool = True
    obs_groups: tuple[str, ...] = ("policy",)


class CQL(CheckpointedParts, OfflineAgent):
    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: CQLConfig, device: torch.device) -> None:
        self.cfg, self.device = cfg, torch.device(device)
        self.obs_groups = tuple(cfg.obs_groups)
        self.obs_dim = obs_dim(observation_spec, self.obs_groups)
        self.action_dim, hidden = action_spec.shape[0], tuple(cfg.hidden)
        self.scaler = ActionScaler(action_spec).to(self.device)
        self.normalizer = (EmpiricalNormalizer(self.obs_dim) if cfg.normalize_obs else nn.Identity()).to(self.device)
        self.actor = SquashedGaussianActor(self.obs_dim, self.action_dim, hidden, cfg.activation).to(self.device)
        self.critic = EnsembleQ(cfg.num_critics, self.obs_dim, self.action_dim, hidden, cfg.activation,
                                layer_norm=cfg.layer_norm).to(self.device)
        self.cql_alpha = cfg.cql_alpha  # 0 turns the regularizer off (plain SAC: fine-tuning sets it)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.init_alpha), device=self.device))
        self.target_entropy = -float(self.action_dim) if cfg.target_entropy is None else float(cfg.target_entropy)
        self.optimizer = torch.optim.Adam([
            {"params": list(self.actor.parameters()), "lr": cfg.actor_lr},
            {"params": list(self.critic.parameters()), "lr": cfg.critic_lr},
            {"params": [self.log_alpha], "lr": cfg.alpha_lr},
        ])
        self._online, self._target = list(self.critic.parameters()), list(self.critic_target.parameters())

    def prepare(self, data: dict[str, Any]) -> dict[str, Any]:
        """Normalizer; with ``calql``, each transition's discounted Monte-Carlo return ``mc_return``."""
        data = super().prepare(data)
        if self.cfg.calql:
            reward = data["reward"].float() * self.cfg.reward_scale
            data = {**data, "mc_return": discounted_returns(reward, episode_ends(data), self.cfg.gamma)}
        return data

    @torch.no_grad()
    def act(self, obs: Obs, explore: bool = False) -> dict[str, torch.Tensor]:
        action, _ = self.actor(self.normalizer(flatten_obs(obs, self.obs_groups)), deterministic=not explore)
        return {"action": self.scaler(action)}

    def _sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``n_actions`` actions of pi at each row of ``obs``: ``(B * N, A)`` and ``(B * N,)`` log-probs."""
        return self.actor(obs.repeat_interleave(self.cfg.n_actions, 0))

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        obs = self.normalizer(flatten_obs(batch["obs"], self.obs_groups))
        next_obs = self.normalizer(flatten_obs(batch["next_obs"], self.obs_groups))
        action = self.scaler.normalize(batch["action"])
        reward = batch["reward"] * cfg.reward_scale
        not_terminated = 1.0 - batch["terminated"].float()
        alpha = self.log_alpha.detach().exp()

        # Bellman target without the entropy bonus (CORL's backup_entropy=False): y = r + gamma (1 - d) min_i Q'_i(s', a')
        with torch.no_grad():
            next_action, _ = self.actor(next_obs)
            next_q = self.critic_target(next_obs, next_action)
            if 0 < cfg.target_critics < cfg.num_critics:
                next_q = next_q[torch.randperm(cfg.num_critics, device=obs.device)[:cfg.target_critics]]
            target_q = reward + cfg.gamma * not_terminated * next_q.amin(0)
        q = self.critic(obs, action)
        bellman_loss = 0.5 * (q - target_q).square().mean(-1).sum()

        metrics: dict[str, torch.Tensor] = {}
        critic_loss = bellman_loss
        if self.cql_alpha > 0:
            critic_loss = critic_loss + self.cql_alpha * self._cql_gap(batch, obs, next_obs, q, metrics)

        # Actor (SAC): E[alpha log pi(a|s) - Q(s, a)], a ~ pi(s) reparameterized, Q the ensemble's min (or mean)
        new_action, log_prob = self.actor(obs)
        q_new = self.critic(obs, new_action, detach_params=True)
        q_new = q_new.amin(0) if cfg.actor_q == "min" else q_new.mean(0)
        actor_loss = (alpha * log_prob - q_new).mean()
        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()

        self.optimizer.zero_grad(set_to_none=True)
        (critic_loss + actor_loss + alpha_loss).backward()
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(self._target, self._online, cfg.tau)
        return {"critic_loss": critic_loss.detach(), "bellman_loss": bellman_loss.detach(),
                "actor_loss": actor_loss.detach(), "alpha": alpha, "entropy": -log_prob.detach().mean(),
                "q": q.detach().mean(), **metrics}

    def _cql_gap(self, batch: dict[str, Any], obs: torch.Tensor, next_obs: torch.Tensor, q: torch.Tensor,
                 metrics: dict[str, torch.Tensor]) -> torch.Tensor:
        """The CQL(H) regularizer summed over critics (adds its metrics to ``metrics``)."""
        cfg = self.cfg
        B, N, A = obs.shape[0], cfg.n_actions, self.action_dim
        # CQL(H), eq. (4): log-sum-exp over importance-sampled actions minus Q at the data's actions
        with torch.no_grad():
            random_action = torch.rand(B * N, A, device=obs.device) * 2 - 1
            pi_action, pi_log_prob = self._sample(obs)
            next_pi_action, next_pi_log_prob = self._sample(next_obs)
        obs_rep = obs.repeat_interleave(N, 0)
        q_random = self.critic(obs_rep, random_action).view(-1, B, N)
        q_pi = self.critic(obs_rep, pi_action).view(-1, B, N)
        q_next_pi = self.critic(obs_rep, next_pi_action).view(-1, B, N)
        if cfg.calql:  # Cal-QL, eq. (5): Q(s, a~pi) >= G(s), the behavior policy's Monte-Carlo return
            bound = batch["mc_return"].view(1, B, 1)
            metrics["calql_bound_rate"] = (q_pi < bound).float().mean().detach()
            q_pi, q_next_pi = torch.maximum(q_pi, bound), torch.maximum(q_next_pi, bound)
        log_uniform = A * math.log(0.5)  # density of Unif[-1, 1]^A
        proposals = torch.cat([q_random - log_uniform, q_pi - pi_log_prob.view(1, B, N),
                               q_next_pi - next_pi_log_prob.view(1, B, N)], dim=-1)
        logsumexp = torch.logsumexp(proposals / cfg.temperature, dim=-1) * cfg.temperature
        cql_gap = (logsumexp - q).mean(-1)  # per critic
        metrics["cql_gap"] = cql_gap.mean().detach()
        return cql_gap.sum()

    def controller(self) -> Controller:
        """``obs -> scale(tanh(mu(norm(obs))))``."""
        return DeterministicController(copy.deepcopy(self.normalizer), self.actor.mean_net(), nn.Tanh(),
                                       copy.deepcopy(self.scaler), self.obs_groups, self.obs_dim)

    def _checkpointed(self) -> dict[str, Checkpointed]:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target,
                "normalizer": self.normalizer, "log_alpha": self.log_alpha, "optimizer": self.optimizer}




@dataclass
class CalQLConfig(CQLConfig):
    """CQL with the Cal-QL lower bound on (``algo: calql``)."""

    calql: bool = True
