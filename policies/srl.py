"""Sequence Reinforcement Learning (Patel & Siegelmann, ICLR 2025, "Overcoming slow
decision frequencies in continuous control: model-based sequence reinforcement
learning for model-free control").

A SAC-style agent whose actor emits ``J`` actions from one state, so the
deployed controller decides once per ``J`` control steps and needs no model:

- **Actor**: an MLP encodes ``s`` into the initial hidden state ``h_0`` of a GRU
  cell whose input is the previous action; each step emits a tanh-Gaussian
  action ``a_i ~ pi(. | h_i)`` and the sample feeds the next step as a value
  (``detach_feedback``): ``h_{i+1} = GRU(stop_gradient(a_i), h_i)``.
- **Critics**: twin Q on primitive one-step transitions from the replay buffer,
  SAC's soft target with the *first* action of the sequence unrolled from ``s'``:
  ``y = r + gamma (1 - d) (min_j Q'_j(s', a'_0) - alpha log pi(a'_0 | s'))``.
- **Model** ``f(s, a) -> s'`` (MLP 400-300 on the state change, MSE), used only
  in training to supply the intermediate states of a sequence; its target copy
  follows by ``model_tau``.
- **Actor loss ("temporal recall")**: unroll ``a_0..a_{J-1}`` from ``s``;
  ``s_0 = s``, ``s_{i+1} = f'(s_i, a_i)`` without gradient;
  ``J_pi = sum_i E[alpha log pi(a_i | h_i) - min_j Q_j(s_i, a_i)]``.
- **Temperature** as SAC, target entropy ``-|A|`` per action.

Training rollouts play each sequence open loop for ``J`` steps, as deployed
(``act_open_loop``); the replay still stores primitive transitions. Actions are
normalized to ``[-1, 1]`` inside, like :mod:`policies.sac`; the controller
scales them to the env's bounds. The whole update is one backward pass and
one fused Adam step over four independent losses (see :mod:`policies.sac`).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from gymnasium import spaces
from torch import nn

from robolearn.chunking import ActionQueue, ChunkedController
from robolearn.interfaces import Agent, Controller, Obs, flatten_obs, obs_dim
from policies.modules import ActionScaler, EnsembleQ, mlp, Checkpointed, CheckpointedParts


@dataclass
class SRLConfig:
    sequence_length: int = 4  # J: actions per decision
    batch_size: int = 256
    # the temporal-recall loss scores actor_batch_size x J state-actions; fewer rows (taken from the minibatch)
    # keep a J = 16 update near SAC's cost on a CPU. None: the whole minibatch, as the paper.
    actor_batch_size: int | None = None
    buffer_size: int = 1_000_000
    gamma: float = 0.99
    tau: float = 0.005  # critic targets
    model_tau: float = 0.005  # model target used for the actor's intermediate states
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    model_lr: float = 3e-4
    alpha_lr: float = 3e-4
    hidden: tuple[int, ...] = (256, 256)  # actor encoder and critics
    gru_hidden: int = 256
    model_hidden: tuple[int, ...] = (400, 300)
    activation: Literal["elu", "relu", "tanh", "silu"] = "relu"
    num_critics: int = 2
    init_alpha: float = 1.0
    target_entropy: float | None = None  # None: -|A|
    obs_groups: tuple[str, ...] = ("policy",)  # actor, critic and model all read these (the model predicts them)
    act_open_loop: bool = True  # training rollouts play whole sequences, as deployed
    # Feed each sampled action back into the GRU without its gradient, so the actor loss of a_i does not reach
    # a_0..a_{i-1}: a_0 answers to Q(s, a_0) alone, as SAC's action does. With the gradient (False), 15 of 16
    # loss terms reach a_0 through that input; on HalfCheetah (3 seeds, 30k steps) that gave lower FAS on every
    # seed (0.016 vs 0.031 mean) and a lower replanned-every-step return (R(1) 571 vs 880; BENCHMARKS.md).
    detach_feedback: bool = True


class SequenceActor(nn.Module):
    """``s -> (a_0, ..., a_{L-1})``: MLP encoder into a GRU cell fed the previous action."""

    LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...], gru_hidden: int, activation: str,
                 detach_feedback: bool = False) -> None:
        super().__init__()
        # feed a_i to step i + 1 as a value, not a path for gradients (SRL's default); the action-sequence critic
        # scores the K actions jointly, so its actor keeps the path (False)
        self.detach_feedback = detach_feedback
        self.encoder = mlp(obs_dim, hidden, gru_hidden, activation)
        self.gru = nn.GRUCell(action_dim, gru_hidden)
        self.head = nn.Linear(gru_hidden, 2 * action_dim)

    def forward(self, obs: torch.Tensor, length: int, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized ``(actions (B, L, A), log pi (B, L))``; each sample feeds the next GRU step.

        The tanh-Gaussian log-density is SAC's: ``log N(u) - sum log(1 - tanh(u)^2)``,
        the correction computed stably as ``2 (log 2 - u - softplus(-2u))``.
        """
        h = torch.tanh(self.encoder(obs))
        actions, log_probs = [], []
        for i in range(length):
            if i > 0:
                h = self.gru(actions[-1].detach() if self.detach_feedback else actions[-1], h)
            mean, log_std = self.head(h).chunk(2, dim=-1)
            log_std = log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)
            eps = torch.zeros_like(mean) if deterministic else torch.randn_like(mean)
            u = mean + log_std.exp() * eps
            log_prob = (-0.5 * eps.square() - log_std - 2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
            actions.append(torch.tanh(u))
            log_probs.append(log_prob - 0.5 * math.log(2 * math.pi) * mean.shape[-1])
        return torch.stack(actions, dim=1), torch.stack(log_probs, dim=1)


class SequencePolicy(nn.Module):
    """The deterministic sequence ``obs -> (B, J, A)`` in env units: a chunk source (``robolearn.chunking``).

    ``forward(obs, length)`` keeps unrolling past ``J`` open loop, which FAS's
    ``beyond="extend"`` uses.
    """

    def __init__(self, actor: SequenceActor, scaler: ActionScaler, length: int, obs_groups: tuple[str, ...], obs_size: int) -> None:
        super().__init__()
        self.actor, self.scaler = actor, scaler
        self.chunk_length, self.obs_groups, self.obs_size = length, tuple(obs_groups), obs_size

    def forward(self, obs: torch.Tensor, length: int | None = None) -> torch.Tensor:
        return self.scaler(self.actor(obs, length or self.chunk_length, deterministic=True)[0])


class DynamicsModel(nn.Module):
    """``f(s, a) = s + g(s, a)``: predicts the next state through its change."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...], activation: str) -> None:
        super().__init__()
        self.net = mlp(obs_dim + action_dim, hidden, obs_dim, activation)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return obs + self.net(torch.cat([obs, action], dim=-1))


class SRL(CheckpointedParts, Agent):
    on_policy = False
    resume_fixed = ("sequence_length",)  # J actions per decision, which the critics and the model learnt

    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: SRLConfig, device: torch.device) -> None:
        if len(action_spec.shape) != 1:
            raise ValueError(f"SRL expects a flat action_spec, got shape {action_spec.shape}")
        if cfg.sequence_length < 1:
            raise ValueError(f"agent.sequence_length must be >= 1, got {cfg.sequence_length}")
        if cfg.actor_batch_size is not None and cfg.actor_batch_size > cfg.batch_size:  # (it had used the whole
            # minibatch silently, a setting that did not do what it said)
            raise ValueError(f"agent.actor_batch_size={cfg.actor_batch_size} is more than agent.batch_size="
                             f"{cfg.batch_size}: the recall loss takes its rows from the minibatch; give at most "
                             "batch_size, or null for all of it")
        self.cfg, self.device = cfg, torch.device(device)
        self.groups = tuple(cfg.obs_groups)
        self.obs_dim = obs_dim(observation_spec, self.groups)
        action_dim = action_spec.shape[0]
        hidden = tuple(cfg.hidden)

        self.scaler = ActionScaler(action_spec).to(self.device)
        self.actor = SequenceActor(self.obs_dim, action_dim, hidden, cfg.gru_hidden, cfg.activation,
                                   cfg.detach_feedback).to(self.device)
        self.critic = EnsembleQ(cfg.num_critics, self.obs_dim, action_dim, hidden, cfg.activation).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.model = DynamicsModel(self.obs_dim, action_dim, tuple(cfg.model_hidden), cfg.activation).to(self.device)
        self.model_target = copy.deepcopy(self.model).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.init_alpha), device=self.device))
        self.target_entropy = -float(action_dim) if cfg.target_entropy is None else float(cfg.target_entropy)
        self.optimizer = torch.optim.Adam(
            [
                {"params": list(self.actor.parameters()), "lr": cfg.actor_lr},
                {"params": list(self.critic.parameters()), "lr": cfg.critic_lr},
                {"params": list(self.model.parameters()), "lr": cfg.model_lr},
                {"params": [self.log_alpha], "lr": cfg.alpha_lr},
            ],
            fused=True,
        )
        self._critic_pairs = (list(self.critic_target.parameters()), list(self.critic.parameters()))
        self._model_pairs = (list(self.model_target.parameters()), list(self.model.parameters()))
        self.queue = ActionQueue(cfg.sequence_length if cfg.act_open_loop else 1)

    @torch.no_grad()
    def act(self, obs: Obs, explore: bool = True) -> dict[str, torch.Tensor]:
        """One action per env; a new sequence is drawn when an env's last one is played out."""
        x = flatten_obs(obs, self.groups)
        source = lambda rows, length: self.actor(x[rows.to(x.device)], length, deterministic=not explore)[0]  # noqa: E731
        return {"action": self.scaler(self.queue.next(x.shape[0], source))}

    def reset(self, mask: torch.Tensor | None = None) -> None:
        self.queue.reset(mask)

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """One gradient step of critics, model, actor and temperature; targets follow."""
        cfg = self.cfg
        obs, next_obs = flatten_obs(batch["obs"], self.groups), flatten_obs(batch["next_obs"], self.groups)
        action = self.scaler.normalize(batch["action"])
        not_terminated = 1.0 - batch["terminated"].float()
        alpha = self.log_alpha.detach().exp()

        # Critic: SAC's soft target with the first action of the sequence unrolled from s'
        with torch.no_grad():
            next_action, next_log_prob = self.actor(next_obs, 1)
            next_q = self.critic_target(next_obs, next_action[:, 0]).amin(0)
            target_q = batch["reward"] + cfg.gamma * not_terminated * (next_q - alpha * next_log_prob[:, 0])
        q = self.critic(obs, action)
        critic_loss = 0.5 * (q - target_q).square().mean(-1).sum()

        # Model: E[|f(s, a) - s'|^2]
        model_loss = (self.model(obs, action) - next_obs).square().sum(-1).mean()

        # Actor ("temporal recall"): J_pi = sum_i E[alpha log pi(a_i) - min_j Q_j(s_i, a_i)], s_{i+1} = f'(s_i, a_i)
        recall_obs = obs if cfg.actor_batch_size is None else obs[: cfg.actor_batch_size]
        actions, log_probs = self.actor(recall_obs, cfg.sequence_length)
        states = [recall_obs]
        with torch.no_grad():
            for i in range(cfg.sequence_length - 1):
                states.append(self.model_target(states[-1], actions[:, i]))
        batch_size, length, action_dim = actions.shape
        s = torch.stack(states, dim=1).reshape(batch_size * length, -1)
        q_new = self.critic(s, actions.reshape(batch_size * length, action_dim), detach_params=True).amin(0)
        actor_loss = (alpha * log_probs - q_new.view(batch_size, length)).mean(0).sum()

        # Temperature: J(alpha) = E[-alpha (log pi(a_i) + target_entropy)] over every action of the sequence
        alpha_loss = -(self.log_alpha * (log_probs.detach() + self.target_entropy)).mean()

        self.optimizer.zero_grad(set_to_none=True)
        (critic_loss + model_loss + actor_loss + alpha_loss).backward()
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(*self._critic_pairs, cfg.tau)
            torch._foreach_lerp_(*self._model_pairs, cfg.model_tau)

        return {
            "critic_loss": critic_loss.detach(),
            "model_loss": model_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha": alpha,
            "entropy": -log_probs.detach().mean(),
            "q": q.detach().mean(),
        }

    def controller(self) -> Controller:
        """One actor call per ``J`` steps: the deterministic sequence, played open loop."""
        policy = SequencePolicy(copy.deepcopy(self.actor), copy.deepcopy(self.scaler), self.cfg.sequence_length,
                                self.groups, self.obs_dim)
        return ChunkedController(policy)

    def _checkpointed(self) -> dict[str, Checkpointed]:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target, "model": self.model,
                "model_target": self.model_target, "log_alpha": self.log_alpha, "optimizer": self.optimizer}


