"""SPiRL (Pertsch et al. 2020, "Accelerating Reinforcement Learning with Learned Skill Priors").

Two phases in one run (``robolearn train configs/spirl_<task>.yaml dataset=<name>``; the
runner calls :meth:`SPiRL.prepare`, then :meth:`SPiRL.pretrain_update` ``pretrain_updates``
times, then :meth:`SPiRL.end_pretraining`, then trains online):

1. **Skills from data**: the skill model (:mod:`policies.skills.skill_model`: LSTM encoder
   over H = 10 actions, closed-loop decoder, state-conditioned prior) on H-step windows
   of the dataset. Frozen afterwards.
2. **SAC over skills**: every ``H`` env steps the high-level policy ``pi(z | s)`` (a
   Gaussian, initialized to the prior) picks a skill; the decoder plays it closed loop
   (``a_t = tanh(u(s_t, z))``). The high-level transition is ``(s, z, R, s')`` with the
   skill's rewards summed (:mod:`policies.skills.windows`). SAC's entropy is replaced by
   the divergence from the prior, whose weight is tuned toward ``target_kl`` as SAC tunes
   its temperature::

       y = R + discount (min_i Q'_i(s', z') - alpha KL(pi(.|s') || p(.|s'))),  z' ~ pi(s')
       J_Q = sum_i E[(Q_i(s, z) - y)^2] / 2
       J_pi = E[alpha KL(pi(.|s) || p(.|s)) - min_i Q_i(s, z~pi)]       (z reparameterized)
       J_alpha = E[-log alpha (KL(pi || p) - target_kl)]

The KL of two diagonal Gaussians is exact (``torch.distributions.kl_divergence``). States
are standardized with the dataset's statistics (fixed by ``prepare``, exported inside the
controller); actions are normalized to ``[-1, 1]`` as in :mod:`policies.sac`. The runner's
replay holds primitive steps plus the skill and step each was acted under; ``sample``
(the runner's hook for agents that read windows) cuts the high-level transitions.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import kl_divergence

from robolearn.interfaces import Agent, Controller, Obs, flatten_obs, obs_dim, reset_rows
from robolearn.storage import ReplayBuffer
from policies.modules import ActionScaler, EmpiricalNormalizer, EnsembleQ
from policies.offline.common import episode_ends
from policies.skills.controller import SkillController
from policies.skills.skill_model import GaussianMean, SkillModel
from policies.skills.windows import DatasetWindows, sample_skill_transitions


@dataclass
class SPiRLConfig:
    # skill model, pretrained on the run's dataset
    horizon: int = 10  # H: actions per skill
    latent_dim: int = 10
    beta: float = 5e-4  # weight of KL(q(z|a) || N(0, I))
    encoder_hidden: int = 128  # LSTM width
    decoder_hidden: tuple[int, ...] = (128, 128, 128)
    prior_hidden: tuple[int, ...] = (128, 128, 128, 128, 128, 128)  # also the high-level policy's
    decoder_std: float = 0.3  # fixed std of the decoder's pre-tanh Gaussian (Skill-Critic's KL target)
    pretrain_updates: int = 100_000
    pretrain_batch_size: int = 128
    pretrain_lr: float = 1e-3
    # A run directory whose pretrained skill model (and state normalizer) this run takes instead of pretraining
    # on a dataset: seeds or a sweep of the online phase share one pretraining
    skills_from: str = ""
    # online: SAC over skills
    batch_size: int = 256
    buffer_size: int = 1_000_000  # primitive steps; a multiple of env.num_envs
    gamma: float = 0.99  # per env step; a full skill is discounted gamma^H
    tau: float = 0.005
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4
    hidden: tuple[int, ...] = (256, 256)  # critics
    activation: Literal["elu", "relu", "tanh", "silu"] = "relu"
    num_critics: int = 2
    init_alpha: float = 0.1
    target_kl: float = 5.0  # target KL(pi(z|s) || p(z|s)) per skill (SPiRL: 1 to 5)
    obs_groups: tuple[str, ...] = ("policy",)


def check_config(cfg: SPiRLConfig) -> None:
    """Raise naming the first bad value (the CLI prints it as one line)."""
    for key in ("horizon", "latent_dim", "encoder_hidden", "pretrain_batch_size", "batch_size", "num_critics"):
        if getattr(cfg, key) < 1:
            raise ValueError(f"agent.{key} must be >= 1, got {getattr(cfg, key)}")
    for key in ("decoder_std", "target_kl", "init_alpha", "pretrain_lr"):
        if not getattr(cfg, key) > 0:
            raise ValueError(f"agent.{key} must be > 0, got {getattr(cfg, key)}")
    if cfg.pretrain_updates < 0:
        raise ValueError(f"agent.pretrain_updates must be >= 0, got {cfg.pretrain_updates}")
    if not 0 < cfg.gamma <= 1:
        raise ValueError(f"agent.gamma must be in (0, 1], got {cfg.gamma}")
    if not cfg.decoder_hidden or not cfg.prior_hidden:
        raise ValueError("agent.decoder_hidden and agent.prior_hidden need at least one layer")


class SPiRL(Agent):
    on_policy = False
    pretrains = True  # the runner pretrains it on `dataset=` before the online phase
    resume_fixed = ("horizon",)  # skills learnt to be held H steps: a resume may not change H

    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: SPiRLConfig,
                 device: torch.device) -> None:
        if len(action_spec.shape) != 1:
            raise ValueError(f"{type(self).__name__} expects a flat action_spec, got shape {action_spec.shape}")
        check_config(cfg)
        self.cfg, self.device = cfg, torch.device(device)
        self.groups = tuple(cfg.obs_groups)
        self.obs_dim = obs_dim(observation_spec, self.groups)
        self.action_dim, self.horizon = action_spec.shape[0], cfg.horizon
        self.normalizer = EmpiricalNormalizer(self.obs_dim).to(self.device)
        self.scaler = ActionScaler(action_spec).to(self.device)
        self.skills = SkillModel(self.obs_dim, self.action_dim, horizon=cfg.horizon, latent_dim=cfg.latent_dim,
                                 encoder_hidden=cfg.encoder_hidden, decoder_hidden=tuple(cfg.decoder_hidden),
                                 prior_hidden=tuple(cfg.prior_hidden), activation=cfg.activation,
                                 beta=cfg.beta).to(self.device)
        self.skill_optimizer = torch.optim.Adam(self.skills.parameters(), lr=cfg.pretrain_lr)
        self.policy = copy.deepcopy(self.skills.prior)  # pi(z | s); set to the trained prior by end_pretraining
        self.critic = EnsembleQ(cfg.num_critics, self.obs_dim, cfg.latent_dim, tuple(cfg.hidden),
                                cfg.activation).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.init_alpha), device=self.device))
        self.optimizer = torch.optim.Adam(SPiRL.param_groups(self), fused=True)  # subclasses rebuild it with theirs
        self.windows: DatasetWindows | None = None
        self.skill: torch.Tensor | None = None  # acting state: (num_envs, Z) current skills
        self.step: torch.Tensor | None = None  # (num_envs,) long: steps played of them

    def param_groups(self) -> list[dict[str, Any]]:
        """What the online optimizer trains (the skill model stays frozen)."""
        cfg = self.cfg
        return [{"params": list(self.policy.parameters()), "lr": cfg.actor_lr},
                {"params": list(self.critic.parameters()), "lr": cfg.critic_lr},
                {"params": [self.log_alpha], "lr": cfg.alpha_lr}]

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.critic_target, self.critic)]

    # -- phase 1: skills from the dataset -------------------------------------------------------

    def prepare(self, data: dict[str, Any]) -> None:
        """Fix the state normalizer to the dataset (``Dataset.transitions``) and index its H-step windows."""
        obs = flatten_obs(data["obs"], self.groups).to(self.device)
        self.normalizer.update(obs)
        actions = self.scaler.normalize(data["action"].to(self.device).float())
        self.windows = DatasetWindows(self.normalizer(obs), actions, episode_ends(data), self.horizon)

    def pretrain_update(self) -> dict[str, torch.Tensor]:
        """One step of the skill model on a minibatch of dataset windows."""
        if self.windows is None:
            raise RuntimeError("call prepare(data) with the dataset before pretraining")
        obs, actions = self.windows.sample(self.cfg.pretrain_batch_size)
        loss, metrics = self.skills.loss(obs, actions)
        self.skill_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.skill_optimizer.step()
        return {"loss": loss.detach(), **metrics}

    def take_pretrained(self, state: dict[str, Any]) -> None:
        """Another run's skill model and state normalizer (its agent's ``state_dict``, past pretraining), in place
        of pretraining here; shapes checked (a mismatch names the tensor); then the phase boundary."""
        from robolearn.checkpoint import check_compatible

        names = ("normalizer", "skills")
        check_compatible({name: getattr(self, name).state_dict() for name in names}, state)
        for name in names:
            getattr(self, name).load_state_dict(state[name])
        self.end_pretraining()

    def end_pretraining(self) -> None:
        """The phase boundary: the high-level policy starts as the prior; the dataset is let go."""
        self.policy.load_state_dict(self.skills.prior.state_dict())
        self.windows = None

    # -- phase 2: acting and learning online ----------------------------------------------------

    @torch.no_grad()
    def act(self, obs: Obs, explore: bool = True) -> dict[str, torch.Tensor]:
        """A new skill where the last one is played out (sampled from pi when exploring, else its mean),
        then this step's action; the skill and step go into the replay with the transition."""
        return self._act(obs, self.policy, explore)

    @torch.no_grad()
    def random_act(self, obs: Obs) -> dict[str, torch.Tensor]:
        """The runner's warm-up (``runner.random_steps``): skills drawn from the prior."""
        return self._act(obs, self.skills.prior, True)

    def _act(self, obs: Obs, high: nn.Module, explore: bool) -> dict[str, torch.Tensor]:
        s = self.normalizer(flatten_obs(obs, self.groups))
        if self.step is None or self.step.shape[0] != s.shape[0]:
            self.skill = s.new_zeros(s.shape[0], self.cfg.latent_dim)
            self.step = torch.zeros(s.shape[0], dtype=torch.long, device=s.device)
        new = (self.step == 0).nonzero().squeeze(1)
        if len(new):
            pi = high(s[new])
            self.skill[new] = pi.sample() if explore else pi.mean
        out = {"action": self.scaler(self.low_action(s, self.skill, self.step, explore)),
               "skill": self.skill.clone(), "skill_step": self.step.clone()}
        self.step = (self.step + 1) % self.horizon
        return out

    def low_action(self, s: torch.Tensor, z: torch.Tensor, step: torch.Tensor, explore: bool) -> torch.Tensor:
        """SPiRL plays the decoder's mean action."""
        return torch.tanh(self.skills.decoder(s, z))

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Envs in ``mask`` start a new skill at their next step."""
        if self.step is not None:
            self.step[reset_rows(mask, self.step, f"{type(self).__name__}.reset")] = 0

    @property
    def replay_window(self) -> int:
        """Steps of each env the replay must hold before the first :meth:`sample`: a skill's H played out, and
        the step after it (:func:`~policies.skills.windows.sample_skill_transitions` samples ended skills only)."""
        return self.horizon + 1

    def sample(self, replay: ReplayBuffer, batch_size: int, num_envs: int) -> dict[str, Any]:
        """High-level transitions cut from the replay of primitive steps."""
        return {"high": sample_skill_transitions(replay, batch_size, num_envs, self.horizon, self.cfg.gamma, self.groups)}

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """One gradient step of everything :meth:`losses` trains; targets follow by tau."""
        loss, metrics = self.losses(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        with torch.no_grad():
            for target, online in self.target_pairs():
                torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), self.cfg.tau)
        return metrics

    def losses(self, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.high_losses(batch["high"], train_policy=True)

    def high_value(self, s: torch.Tensor, target: bool = True) -> torch.Tensor:
        """``V(s) = min_i Q'_i(s, z) - alpha KL(pi(.|s) || p(.|s))``, ``z ~ pi(s)`` (no gradient)."""
        with torch.no_grad():
            pi = self.policy(s)
            kl = kl_divergence(pi, self.skills.prior(s)).sum(-1)
            return (self.critic_target if target else self.critic)(s, pi.sample()).amin(0) - self.log_alpha.exp() * kl

    def high_losses(self, batch: dict[str, Any], train_policy: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """SAC over skills with the KL to the prior in place of the entropy (module docstring)."""
        cfg = self.cfg
        s = self.normalizer(flatten_obs(batch["obs"], self.groups))
        s_next = self.normalizer(flatten_obs(batch["next_obs"], self.groups))
        target_q = batch["reward"] + batch["discount"] * self.high_value(s_next)
        q = self.critic(s, batch["skill"])
        loss = 0.5 * (q - target_q).square().mean(-1).sum()
        metrics = {"critic_loss": loss.detach(), "q": q.detach().mean(), "alpha": self.log_alpha.detach().exp()}
        if train_policy:
            pi = self.policy(s)
            with torch.no_grad():
                prior = self.skills.prior(s)
            kl = kl_divergence(pi, prior).sum(-1)
            q_new = self.critic(s, pi.rsample(), detach_params=True).amin(0)
            actor_loss = (self.log_alpha.detach().exp() * kl - q_new).mean()
            alpha_loss = -(self.log_alpha * (kl.detach() - cfg.target_kl)).mean()
            loss = loss + actor_loss + alpha_loss
            metrics |= {"actor_loss": actor_loss.detach(), "kl": kl.detach().mean()}
        return loss, metrics

    # -- the controller and checkpoints ---------------------------------------------------------

    def low_module(self) -> nn.Module:
        """What plays a skill in the controller: ``(s, z, one_hot(k)) -> pre-tanh action``."""
        return self.skills.decoder

    def controller(self) -> Controller:
        """The high-level policy's mean skill every H steps, played by :meth:`low_module`'s mean action."""
        return SkillController(copy.deepcopy(self.normalizer), GaussianMean(copy.deepcopy(self.policy)),
                               copy.deepcopy(self.low_module()), copy.deepcopy(self.scaler), self.horizon,
                               self.cfg.latent_dim, self.groups, self.obs_dim)

    saved = ("normalizer", "skills", "skill_optimizer", "policy", "critic", "critic_target", "optimizer")

    def state_dict(self) -> dict[str, Any]:
        return {**{name: getattr(self, name).state_dict() for name in self.saved},
                "log_alpha": self.log_alpha.detach().clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self.saved:
            getattr(self, name).load_state_dict(state[name])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
