"""SAC with an action-sequence critic: the idea of CQN-AS (Seo & Abbeel, "Reinforcement
Learning with Action Sequence for Data-Efficient Robot Learning") for continuous control.

The critic scores a *sequence* of K actions from a state, ``Q(s_t, a_t..a_{t+K-1})``,
bootstrapped after ``n`` steps (CQN-AS: n = 1-3, not K)::

    y = sum_{j<n} gamma^j r_{t+j} + gamma^n (1 - d) (min_i Q'_i(s_{t+n}, a'_{0:K}) - alpha mean_k log pi(a'_k)),
    a'_{0:K} ~ pi(s_{t+n})

With ``n < K``
the target does not depend on actions ``n..K-1`` (they are re-chosen at s_{t+n}), so
the critic learns to ignore them and the actor gets no signal for them: right for
CQN-AS's execution, which queries every step and blends the chunks (``execution:
ensemble``), wrong for playing the K actions open loop, where ``n = K`` makes the
target the return of exactly the K actions played (no off-policy n-step bias: the
actions are the critic's input). benchmarks/sequence_critic.py measures both. The actor is
SRL's GRU sequence actor (:class:`policies.srl.SequenceActor`) emitting K actions,
trained with ``J_pi = E[alpha mean_k log pi(a_k) - min_i Q_i(s, a_{0:K})]``;
temperature as SAC with target entropy ``-|A|`` per action. Rollouts and the
controller play the K actions open loop (one decision per K steps) or, with
``execution: ensemble``, query every step and blend (ACT's temporal ensemble).

Departures: CQN-AS's critic runs a GRU over per-step features; here the twin
critics read the K actions concatenated (one batched ensemble, SAC's speed).
K = 1 is SAC with a GRU-free actor head: the ablation that isolates the critic.

Replay: the runner's buffer holds primitive transitions, env after env each
step; :meth:`SequenceCriticSAC.sample` (the runner's hook for agents that read
windows) cuts windows of K consecutive transitions of one env. A window that
crosses an episode end stops its return and bootstraps there, and holds its
last real action for the steps beyond.
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import torch
from gymnasium import spaces
from torch import nn

from robolearn.chunking import ACT_DECAY, ActionQueue, ChunkedController, Mode
from robolearn.interfaces import Agent, Controller, Obs, flatten_obs, obs_dim
from robolearn.storage import ReplayBuffer
from policies.modules import ActionScaler, EnsembleQ, Checkpointed, CheckpointedParts
from policies.srl import SequenceActor, SequencePolicy


@dataclass
class SequenceCriticConfig:
    sequence_length: int = 4  # K: actions the critic scores and the actor emits
    nstep: int | None = None  # n: rewards summed before bootstrapping (1 <= n <= K); None: n = K, for open-loop play
    execution: Mode = "open_loop"  # rollouts and controller: K actions open loop, or ACT's temporal ensemble
    ensemble_decay: float = ACT_DECAY  # ensemble only: ACT's m in w_i = exp(-m i), i = 0 the oldest; m < 0 favours the newest
    batch_size: int = 256
    buffer_size: int = 1_000_000  # a multiple of env.num_envs (windows follow one env through the ring)
    gamma: float = 0.99
    tau: float = 0.005
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4
    hidden: tuple[int, ...] = (256, 256)
    gru_hidden: int = 256
    activation: Literal["elu", "relu", "tanh", "silu"] = "relu"
    num_critics: int = 2
    init_alpha: float = 1.0
    target_entropy: float | None = None  # None: -|A| per action
    obs_groups: tuple[str, ...] = ("policy",)


class SequenceCriticSAC(CheckpointedParts, Agent):
    on_policy = False
    resume_fixed = ("sequence_length",)  # K actions per decision, which the critic learnt to score

    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: SequenceCriticConfig,
                 device: torch.device) -> None:
        if cfg.sequence_length < 1:
            raise ValueError(f"agent.sequence_length must be >= 1, got {cfg.sequence_length}")
        self.nstep = cfg.sequence_length if cfg.nstep is None else cfg.nstep
        if not 1 <= self.nstep <= cfg.sequence_length:
            raise ValueError(f"agent.nstep must be in [1, sequence_length = {cfg.sequence_length}], got {cfg.nstep}")
        if cfg.execution == "open_loop" and self.nstep < cfg.sequence_length:
            warnings.warn(f"agent.nstep = {cfg.nstep} < agent.sequence_length = {cfg.sequence_length} with open-loop "
                          f"execution: the critic ignores actions {cfg.nstep + 1}..{cfg.sequence_length} of each "
                          f"sequence, which are played unchanged; set agent.nstep={cfg.sequence_length}, or "
                          "agent.execution=ensemble (see policies/sequence_critic.py)", stacklevel=2)
        self.cfg, self.device = cfg, torch.device(device)
        self.groups = tuple(cfg.obs_groups)
        self.obs_dim = obs_dim(observation_spec, self.groups)
        self.action_dim, k = action_spec.shape[0], cfg.sequence_length
        hidden = tuple(cfg.hidden)
        self.scaler = ActionScaler(action_spec).to(self.device)
        self.actor = SequenceActor(self.obs_dim, self.action_dim, hidden, cfg.gru_hidden, cfg.activation).to(self.device)
        self.critic = EnsembleQ(cfg.num_critics, self.obs_dim, k * self.action_dim, hidden, cfg.activation).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.init_alpha), device=self.device))
        self.target_entropy = -float(self.action_dim) if cfg.target_entropy is None else float(cfg.target_entropy)
        self.optimizer = torch.optim.Adam(
            [
                {"params": list(self.actor.parameters()), "lr": cfg.actor_lr},
                {"params": list(self.critic.parameters()), "lr": cfg.critic_lr},
                {"params": [self.log_alpha], "lr": cfg.alpha_lr},
            ],
            fused=True,
        )
        self._pairs = (list(self.critic_target.parameters()), list(self.critic.parameters()))
        self.queue = ActionQueue(k, mode=cfg.execution, decay=cfg.ensemble_decay)

    @torch.no_grad()
    def act(self, obs: Obs, explore: bool = True) -> dict[str, torch.Tensor]:
        x = flatten_obs(obs, self.groups)
        source = lambda rows, length: self.actor(x[rows.to(x.device)], length, deterministic=not explore)[0]  # noqa: E731
        return {"action": self.scaler(self.queue.next(x.shape[0], source))}

    def reset(self, mask: torch.Tensor | None = None) -> None:
        self.queue.reset(mask)

    @property
    def replay_window(self) -> int:
        """Steps of each env the replay must hold before the first :meth:`sample`: one window of K."""
        return self.cfg.sequence_length

    def sample(self, replay: ReplayBuffer, batch_size: int, num_envs: int) -> dict[str, Any]:
        """Windows of K consecutive transitions of one env: obs, the K actions, the n-step return and bootstrap."""
        k, n, data = self.cfg.sequence_length, self.nstep, replay.data
        if replay.capacity % num_envs:
            raise ValueError(f"agent.buffer_size ({replay.capacity}) must be a multiple of env.num_envs ({num_envs})")
        span = (k - 1) * num_envs
        if replay.size <= span:  # updates began before one window of K steps was in the buffer
            raise ValueError(f"windows of agent.sequence_length = {k} steps need more than {span} transitions in the "
                             f"replay buffer: set runner.random_steps above {span} ({k - 1} steps x env.num_envs)")
        oldest = replay.position if replay.size == replay.capacity else 0
        start = oldest + torch.randint(0, replay.size - span, (batch_size,), device=replay.device)
        index = (start.unsqueeze(1) + num_envs * torch.arange(k, device=replay.device)) % replay.capacity  # (B, K)
        done = data["terminated"][index] | data["truncated"][index]
        # alive[:, j]: no episode ended before step j of the window
        alive = torch.cat([torch.ones_like(done[:, :1]), ~done[:, :-1]], dim=1).long().cumprod(1).bool()
        actions = data["action"][index]
        last = alive.long().sum(1, keepdim=True) - 1  # the window's last real step
        steps = torch.arange(k, device=replay.device).expand(batch_size, k)
        held = torch.minimum(steps, last)
        actions = actions.gather(1, held.unsqueeze(-1).expand_as(actions))
        # n-step: stop at the first episode end within the first n steps
        alive_n, done_n = alive[:, :n], done[:, :n]
        reward = (data["reward"][index[:, :n]] * alive_n * self.cfg.gamma ** torch.arange(n, device=replay.device)).sum(1)
        end = torch.where(done_n.any(1), done_n.float().argmax(1), torch.full_like(last[:, 0], n - 1))
        boot = index.gather(1, end.unsqueeze(1)).squeeze(1)
        return {
            "obs": {g: data["obs"][g][index[:, 0]] for g in self.groups},
            "actions": actions,
            "reward": reward,
            "next_obs": {g: data["next_obs"][g][boot] for g in self.groups},
            "discount": self.cfg.gamma ** (end + 1).float() * (~data["terminated"][boot]).float(),
        }

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """One gradient step of critics, actor and temperature on a batch of windows."""
        k = self.cfg.sequence_length
        obs, next_obs = flatten_obs(batch["obs"], self.groups), flatten_obs(batch["next_obs"], self.groups)
        actions = self.scaler.normalize(batch["actions"]).flatten(1)  # (B, K * A)
        alpha = self.log_alpha.detach().exp()

        with torch.no_grad():
            next_actions, next_log_prob = self.actor(next_obs, k)
            next_q = self.critic_target(next_obs, next_actions.flatten(1)).amin(0)
            target_q = batch["reward"] + batch["discount"] * (next_q - alpha * next_log_prob.mean(1))
        q = self.critic(obs, actions)
        critic_loss = 0.5 * (q - target_q).square().mean(-1).sum()

        new_actions, log_prob = self.actor(obs, k)
        q_new = self.critic(obs, new_actions.flatten(1), detach_params=True).amin(0)
        actor_loss = (alpha * log_prob.mean(1) - q_new).mean()
        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()

        self.optimizer.zero_grad(set_to_none=True)
        (critic_loss + actor_loss + alpha_loss).backward()
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(*self._pairs, self.cfg.tau)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(), "alpha": alpha,
                "entropy": -log_prob.detach().mean(), "q": q.detach().mean()}

    def controller(self) -> Controller:
        """The deterministic K actions, played as in training: open loop (one actor call per K steps) or ensembled."""
        policy = SequencePolicy(copy.deepcopy(self.actor), copy.deepcopy(self.scaler), self.cfg.sequence_length,
                                self.groups, self.obs_dim)
        return ChunkedController(policy, mode=self.cfg.execution, decay=self.cfg.ensemble_decay)

    def _checkpointed(self) -> dict[str, Checkpointed]:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target,
                "log_alpha": self.log_alpha, "optimizer": self.optimizer}


