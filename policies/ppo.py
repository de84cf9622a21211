"""Proximal Policy Optimization (Schulman et al. 2017) as massively parallel
robotics uses it (RSL-RL): GAE(lambda), clipped surrogate, clipped value loss,
an adaptive-KL learning rate, observation normalization inside the policy,
asymmetric actor/critic observation groups and an optional GRU policy.

The policy is a Gaussian over *normalized* actions with a learned,
state-independent std; the env receives ``clip(sample, -1, 1)`` scaled to the
``action_spec`` bounds. The runner stores ``act``'s output (the raw ``sample``,
and the GRU ``hidden`` state) with each transition; values and log-probs of
the acting policy are recomputed at the start of :meth:`PPO.update` and the
normalizers are updated at its end, so the recomputation is exact.

Recurrent policy: only the actor has memory (the critic may read privileged
groups instead). The runner calls :meth:`PPO.reset` with the done mask after
every env step, and evaluates with :meth:`PPO.controller`, not :meth:`PPO.act`
(which advances the rollout's hidden state).

Under torchrun (``robolearn/distributed.py``) each rank rolls out its own envs;
gradients and the KL that steers the learning rate are averaged over ranks, and
the normalizers merge every rank's statistics, so the ranks stay one policy.
Advantages are normalized per rank (as RSL-RL does).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from robolearn import distributed
from robolearn.interfaces import Agent, Controller, Obs, flatten_obs, moved_by, obs_dim, reset_mask
from policies.modules import (
    ActionScaler,
    BoxClip,
    DeterministicController,
    EmpiricalNormalizer,
    gaussian_entropy,
    gaussian_kl,
    gaussian_log_prob,
    mlp,
)


@dataclass
class PPOConfig:
    num_steps: int = 24  # rollout length per env between updates
    num_epochs: int = 5
    num_minibatches: int = 4
    gamma: float = 0.99
    lam: float = 0.95  # GAE lambda
    clip_ratio: float = 0.2
    clip_value_loss: bool = True
    value_coef: float = 1.0
    entropy_coef: float = 0.01
    max_grad_norm: float = 1.0
    learning_rate: float = 1e-3
    schedule: Literal["adaptive", "fixed"] = "adaptive"  # "adaptive": lr follows the KL to desired_kl
    desired_kl: float = 0.01
    min_lr: float = 1e-5
    max_lr: float = 1e-2
    normalize_advantages: bool = True
    normalize_obs: bool = True
    # Divide rewards by the running std of the discounted return (SB3's VecNormalize, CleanRL's
    # NormalizeReward): keeps value targets O(1) whatever the task's reward scale, which the
    # value-loss clipping (+-clip_ratio around the old values) assumes. Off in RSL-RL.
    normalize_rewards: bool = False
    actor_hidden: tuple[int, ...] = (256, 256, 256)
    critic_hidden: tuple[int, ...] = (256, 256, 256)
    activation: Literal["elu", "relu", "tanh", "silu"] = "elu"
    init_std: float = 1.0
    # True: the Gaussian lives in [-1, 1], mapped onto the env's action box (std 1 spans the box).
    # False: in the env's own action units (RSL-RL, legged_gym), samples clipped to the box; with a box
    # wider than the useful actions (Go1's action_limit) the mean is not pushed onto its bounds.
    normalize_actions: bool = True
    min_std: float = 0.01  # std is clamped here after every step (never NaN from log(0) or negative)
    # ... and here from above. Samples are clamped to the action bounds, so past them more noise costs
    # the policy little while the entropy bonus still pays for it: on Go1 the std grew 1 -> 4.4 in 56M steps.
    max_std: float | None = None  # None: no upper bound
    actor_obs_groups: tuple[str, ...] = ("policy",)
    critic_obs_groups: tuple[str, ...] = ("policy",)
    recurrent: bool = False
    rnn_hidden: int = 256


def gae(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation over a rollout ``(steps, num_envs)``.

    ``delta_t = r_t + gamma (1 - terminated_t) V(s'_t) - V(s_t)`` with ``s'_t``
    the true next state (the final observation when the episode ended, so a
    time limit bootstraps from V(s_T)); ``A_t = delta_t + gamma lam (1 - done_t) A_{t+1}``
    where ``done = terminated or truncated`` cuts the recursion at episode ends.
    Returns ``(advantages, returns = advantages + V)``.
    """
    not_terminated = 1.0 - terminated.float()
    carry = (gamma * lam) * (1.0 - (terminated | truncated).float())
    delta = reward + gamma * not_terminated * next_value - value
    # two ops a step, no indexing or copies: a rollout is hundreds of steps, and on a CPU each op costs
    # microseconds of dispatch (addcmul would be one, but fused it rounds otherwise than before)
    running = torch.zeros_like(delta[0])
    backwards = []
    for delta_t, carry_t in zip(reversed(delta.unbind(0)), reversed(carry.unbind(0))):
        running = delta_t + carry_t * running
        backwards.append(running)
    advantages = torch.stack(backwards[::-1])
    return advantages, advantages + value


def adaptive_lr(lr: torch.Tensor, kl: torch.Tensor, cfg: PPOConfig) -> torch.Tensor:
    """RSL-RL's schedule: shrink the step when the policy moved too far, grow it when too little.

    On tensors, so that the learning rate never leaves the device: RSL-RL reads each minibatch's KL to
    the host, a wait for the GPU's queue to drain twenty times an update. The KL is compared in the rate's
    dtype (float64 on CPU: what the Python floats compared)."""
    kl = kl.to(lr.dtype)
    shrink = (lr / 1.5).clamp(min=cfg.min_lr)
    grow = (lr * 1.5).clamp(max=cfg.max_lr)
    return torch.where(kl > 2.0 * cfg.desired_kl, shrink, torch.where((kl > 0.0) & (kl < cfg.desired_kl / 2.0), grow, lr))


class GRUActor(nn.Module):
    """Recurrent policy mean: a GRU cell over observations, then an MLP head."""

    def __init__(self, obs_dim: int, rnn_hidden: int, hidden: tuple[int, ...], action_dim: int, activation: str) -> None:
        super().__init__()
        self.gru = nn.GRUCell(obs_dim, rnn_hidden)
        self.head = mlp(rnn_hidden, hidden, action_dim, activation)

    def forward(self, obs: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: ``(B, obs), (B, H) -> mean (B, A), next hidden (B, H)``."""
        hidden = self.gru(obs, hidden)
        return self.head(hidden), hidden

    def unroll(self, obs: torch.Tensor, hidden: torch.Tensor, reset: torch.Tensor) -> torch.Tensor:
        """Means over a sequence ``(T, B, obs)`` from ``hidden`` ``(B, H)``, zeroing the state where ``reset`` ``(T, B)``."""
        states = []
        for t in range(obs.shape[0]):
            hidden = self.gru(obs[t], hidden * (~reset[t]).unsqueeze(-1))
            states.append(hidden)
        return self.head(torch.stack(states))


class RecurrentController(Controller):
    """Deployable GRU policy: ``forward(obs, hidden) -> (action, next_hidden)``.

    ``act``/``reset`` keep the hidden state of the current batch of envs inside.
    """

    # read by act(), reset() and export_inputs() only, never by the exported forward
    __jit_ignored_attributes__ = ["obs_groups", "obs_size", "hidden"]

    def __init__(
        self, normalizer: nn.Module, actor: GRUActor, clip: BoxClip, scaler: ActionScaler, obs_groups: tuple[str, ...],
        obs_size: int,
    ) -> None:
        super().__init__()
        self.normalizer, self.actor, self.clip, self.scaler = normalizer, actor, clip, scaler
        self.obs_groups, self.obs_size = tuple(obs_groups), obs_size
        self.hidden_size = actor.gru.hidden_size
        self.hidden: torch.Tensor | None = None

    def forward(self, obs: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, hidden = self.actor(self.normalizer(obs), hidden)
        return self.scaler(self.clip(mean)), hidden

    @torch.no_grad()
    def act(self, obs: Obs) -> torch.Tensor:
        x = self.read(obs)
        if self.hidden is None or self.hidden.shape[0] != x.shape[0]:
            self.hidden = x.new_zeros(x.shape[0], self.hidden_size)
        action, self.hidden = self(x, self.hidden)
        return action

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> RecurrentController:
        """nn.Module's move of parameters and buffers (``.to()``, ``.cuda()``...), which also lets the hidden state
        go if it would move it: every env's memory starts from zeros at the next ``act``, where the controller now
        is (a new episode; a move that changes nothing keeps it). Kept where it was made, it had been fed to the
        moved GRU (on a GPU, a CPU hidden state raises there), ``reset`` or not."""
        if moved_by(fn, self.hidden):
            self.hidden = None
        return super()._apply(fn, recurse)

    def reset(self, mask: torch.Tensor | None = None) -> None:
        if self.hidden is not None:
            mask = reset_mask(mask, self.hidden.shape[0])
            if mask is not None:  # on the hidden state's device: an env's (a robot's) done flags may be on the CPU
                mask = mask.to(self.hidden.device)
            self.hidden = torch.zeros_like(self.hidden) if mask is None else self.hidden * (~mask).unsqueeze(-1)

    def export_inputs(self, batch_size: int = 1) -> dict[str, torch.Tensor]:
        return {"obs": torch.zeros(batch_size, self.obs_size), "hidden": torch.zeros(batch_size, self.hidden_size)}

    def export_outputs(self) -> list[str]:
        return ["action", "next_hidden"]


class PPO(Agent):
    on_policy = True
    data_parallel = True

    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: PPOConfig, device: torch.device) -> None:
        if len(action_spec.shape) != 1:
            raise ValueError(f"PPO expects a flat action_spec, got shape {action_spec.shape}")
        if cfg.schedule not in ("adaptive", "fixed"):
            raise ValueError(f"schedule must be 'adaptive' or 'fixed', got {cfg.schedule!r}")
        max_std = math.inf if cfg.max_std is None else cfg.max_std
        if not 0 < cfg.min_std <= max_std or cfg.init_std <= 0:
            raise ValueError(f"need 0 < agent.min_std <= agent.max_std and agent.init_std > 0, got {cfg.min_std}, "
                             f"{cfg.max_std}, {cfg.init_std}")
        self._log_std_range = (math.log(cfg.min_std), math.log(max_std))  # log(inf) = inf: no upper bound
        self.cfg, self.device = cfg, torch.device(device)
        self.actor_groups, self.critic_groups = tuple(cfg.actor_obs_groups), tuple(cfg.critic_obs_groups)
        self.actor_obs_dim = obs_dim(observation_spec, self.actor_groups)
        critic_obs_dim = obs_dim(observation_spec, self.critic_groups)
        action_dim = action_spec.shape[0]

        def normalizer(size: int) -> nn.Module:
            return EmpiricalNormalizer(size) if cfg.normalize_obs else nn.Identity()

        self.actor_normalizer = normalizer(self.actor_obs_dim).to(self.device)
        self.critic_normalizer = normalizer(critic_obs_dim).to(self.device)
        self.actor: nn.Module
        if cfg.recurrent:
            self.actor = GRUActor(self.actor_obs_dim, cfg.rnn_hidden, tuple(cfg.actor_hidden), action_dim, cfg.activation)
        else:
            self.actor = mlp(self.actor_obs_dim, tuple(cfg.actor_hidden), action_dim, cfg.activation)
        self.actor.to(self.device)
        # init_std outside [min_std, max_std] starts at the bound, as the clamp after every step would put it: a
        # resume's, whose min_std was raised above the run's init_std, is replaced by its checkpoint's (a new run's
        # is refused, robolearn.config.check_starts)
        start = min(max(math.log(cfg.init_std), self._log_std_range[0]), self._log_std_range[1])
        self.log_std = nn.Parameter(torch.full((action_dim,), start, device=self.device))
        self.critic = mlp(critic_obs_dim, tuple(cfg.critic_hidden), 1, cfg.activation).to(self.device)
        # Normalized: clip to [-1, 1], then scale onto the box. In env units: clip to the box, scale by the identity.
        unit = spaces.Box(-1.0, 1.0, (action_dim,), dtype=np.float32)
        scaled, clipped = (action_spec, unit) if cfg.normalize_actions else (unit, action_spec)
        self.scaler = ActionScaler(scaled).to(self.device)
        self.clip = BoxClip(clipped.low, clipped.high).to(self.device)
        self.params = [*self.actor.parameters(), self.log_std, *self.critic.parameters()]
        # The learning rate lives on the device and the optimizer holds this very tensor, so the adaptive schedule
        # updates it in place without a host read. On CPU float64, as the Python float it replaced (a CPU run is
        # bit for bit what it was); float32 on a GPU, whose fused Adam reads a tensor lr as float32.
        lr_dtype = torch.float64 if self.device.type == "cpu" else torch.float32
        self.lr = torch.tensor(cfg.learning_rate, dtype=lr_dtype, device=self.device)
        # fused: one kernel for all parameters instead of a dozen small ops each (~10% of a small-network update on
        # CPU); it is also what takes a tensor lr (torch's other Adams want capturable=True for one). torch fuses
        # Adam on CPU, CUDA and MPS, and says so at construction on a device it cannot.
        self.optimizer = torch.optim.Adam(self.params, lr=self.lr, fused=True)
        self.hidden: torch.Tensor | None = None  # GRU state of the envs being rolled out
        # reward normalization: running variance of the discounted return, and each env's return so far
        self.return_normalizer = EmpiricalNormalizer(1).to(self.device) if cfg.normalize_rewards else None
        self.running_return: torch.Tensor | None = None

    @property
    def learning_rate(self) -> float:
        """The current learning rate, read to the host (a wait on a GPU: not for the training loop)."""
        return float(self.lr)

    @property
    def std(self) -> torch.Tensor:
        return self.log_std.exp()

    # ----------------------------------------------------------------- acting
    @torch.no_grad()
    def act(self, obs: Obs, explore: bool = True) -> dict[str, torch.Tensor]:
        """``action`` (env units), ``sample`` (raw Gaussian sample) and, if recurrent, ``hidden`` (state before this step)."""
        x = self.actor_normalizer(flatten_obs(obs, self.actor_groups))
        out: dict[str, torch.Tensor] = {}
        if self.cfg.recurrent:
            if self.hidden is None or self.hidden.shape[0] != x.shape[0]:
                self.hidden = x.new_zeros(x.shape[0], self.cfg.rnn_hidden)
            out["hidden"] = self.hidden
            mean, self.hidden = self.actor(x, self.hidden)
        else:
            mean = self.actor(x)
        sample = mean + self.std * torch.randn_like(mean) if explore else mean
        out["sample"] = sample
        out["action"] = self.scaler(self.clip(sample))
        return out

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Zero the GRU state of envs in ``mask`` (all when None); a no-op for the feedforward policy."""
        if self.hidden is not None:
            mask = reset_mask(mask, self.hidden.shape[0])
            self.hidden = torch.zeros_like(self.hidden) if mask is None else self.hidden * (~mask).unsqueeze(-1)

    # --------------------------------------------------------------- learning
    def _policy_mean(self, actor_obs: torch.Tensor, data: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.cfg.recurrent:
            return self.actor.unroll(actor_obs, data["hidden"][0], data["reset"])
        return self.actor(actor_obs)

    def _minibatches(self, data: dict[str, torch.Tensor]) -> Iterator[dict[str, torch.Tensor]]:
        """Feedforward: random subsets of all transitions. Recurrent: random subsets of envs, whole sequences."""
        if self.cfg.recurrent:  # data is (steps, num_envs, ...)
            for envs in torch.randperm(data["advantages"].shape[1], device=self.device).chunk(self.cfg.num_minibatches):
                yield {k: v[:, envs] for k, v in data.items()}
        else:  # data is (steps * num_envs, ...)
            for index in torch.randperm(data["advantages"].shape[0], device=self.device).chunk(self.cfg.num_minibatches):
                yield {k: v[index] for k, v in data.items()}

    def update(self, batch: dict[str, Any]) -> dict[str, float]:
        """``num_epochs`` passes of ``num_minibatches`` PPO steps over a rollout ``(steps, num_envs, ...)``."""
        cfg = self.cfg
        actor_obs = flatten_obs(batch["obs"], self.actor_groups, batch_dims=2)
        critic_obs = flatten_obs(batch["obs"], self.critic_groups, batch_dims=2)
        next_critic_obs = flatten_obs(batch["next_obs"], self.critic_groups, batch_dims=2)

        with torch.no_grad():
            data = {
                "actor_obs": self.actor_normalizer(actor_obs),
                "critic_obs": self.critic_normalizer(critic_obs),
                "sample": batch["sample"],
            }
            if cfg.recurrent:  # the state at step t was zeroed when step t-1 ended an episode
                done = batch["terminated"] | batch["truncated"]
                data["hidden"] = batch["hidden"]
                data["reset"] = torch.cat([torch.zeros_like(done[:1]), done[:-1]])
            value = self.critic(data["critic_obs"]).squeeze(-1)
            next_value = self.critic(self.critic_normalizer(next_critic_obs)).squeeze(-1)
            reward = self._scale_rewards(batch) if cfg.normalize_rewards else batch["reward"]
            advantages, returns = gae(reward, batch["terminated"], batch["truncated"], value, next_value, cfg.gamma, cfg.lam)
            if cfg.normalize_advantages:
                advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
            old_mean, old_std = self._policy_mean(data["actor_obs"], data), self.std
            data |= {
                "old_mean": old_mean,
                "old_log_prob": gaussian_log_prob(data["sample"], old_mean, old_std),
                "value": value,
                "returns": returns,
                "advantages": advantages,
            }
        if not cfg.recurrent:
            data = {k: v.flatten(0, 1) for k, v in data.items()}

        # metrics stay tensors until the end: one device sync per update for them, not five per minibatch, and
        # none for the adaptive schedule, which RSL-RL reads to the host every minibatch
        stats: list[torch.Tensor] = []
        for _ in range(cfg.num_epochs):
            for mb in self._minibatches(data):
                mean, std = self._policy_mean(mb["actor_obs"], mb), self.std
                log_prob = gaussian_log_prob(mb["sample"], mean, std)
                entropy = gaussian_entropy(std)

                kl = gaussian_kl(mb["old_mean"], old_std, mean.detach(), std.detach()).mean()
                if cfg.schedule == "adaptive":  # the KL of all ranks, so the lr stays the same on every rank
                    self.lr.copy_(adaptive_lr(self.lr, distributed.mean(kl), cfg))

                # Clipped surrogate: L = -E[min(rho A, clip(rho, 1 - eps, 1 + eps) A)], rho = pi / pi_old
                ratio = torch.exp(log_prob - mb["old_log_prob"])
                adv = mb["advantages"]
                policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - cfg.clip_ratio, 1 + cfg.clip_ratio) * adv).mean()

                # Value loss, optionally clipped around the old values like the surrogate
                value = self.critic(mb["critic_obs"]).squeeze(-1)
                value_loss = (value - mb["returns"]).square()
                if cfg.clip_value_loss:
                    clipped = mb["value"] + (value - mb["value"]).clamp(-cfg.clip_ratio, cfg.clip_ratio)
                    value_loss = torch.max(value_loss, (clipped - mb["returns"]).square())
                value_loss = value_loss.mean()

                loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                distributed.average_gradients(self.params)
                nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm, foreach=True)
                self.optimizer.step()
                with torch.no_grad():
                    self.log_std.clamp_(*self._log_std_range)

                clip_fraction = ((ratio.detach() - 1).abs() > cfg.clip_ratio).float().mean()
                stats.append(torch.stack([policy_loss.detach(), value_loss.detach(), entropy.detach(), kl, clip_fraction]))

        if cfg.normalize_obs:  # after the update, so the rollout's actions were sampled under the parameters used above
            self.actor_normalizer.update(actor_obs)
            self.critic_normalizer.update(critic_obs)
        *means, std, lr = torch.cat([torch.stack(stats).mean(0), self.std.detach().mean().reshape(1),
                                     self.lr.reshape(1)]).tolist()  # one read
        names = ("policy_loss", "value_loss", "entropy", "kl", "clip_fraction")
        return dict(zip(names, means)) | {"learning_rate": lr, "std": std}

    @torch.no_grad()
    def _scale_rewards(self, batch: dict[str, Any]) -> torch.Tensor:
        """``reward / std(discounted return)``, the std running over all rollouts so far (this one included)."""
        reward, done = batch["reward"], batch["terminated"] | batch["truncated"]
        if self.running_return is None or self.running_return.shape != reward.shape[1:]:
            self.running_return = torch.zeros_like(reward[0])
        keep = (~done).float()
        returns = []
        for reward_t, keep_t in zip(reward.unbind(0), keep.unbind(0)):
            returns.append(self.running_return * self.cfg.gamma + reward_t)
            self.running_return = returns[-1] * keep_t
        self.return_normalizer.update(torch.stack(returns).reshape(-1, 1))
        return reward / (self.return_normalizer.var.sqrt() + 1e-8)

    # ------------------------------------------------------------- deployment
    def controller(self) -> Controller:
        """Normalizer + actor mean + clip to the box + scale to the action bounds; deterministic."""
        normalizer, actor = copy.deepcopy(self.actor_normalizer), copy.deepcopy(self.actor)
        clip, scaler = copy.deepcopy(self.clip), copy.deepcopy(self.scaler)
        if self.cfg.recurrent:
            return RecurrentController(normalizer, actor, clip, scaler, self.actor_groups, self.actor_obs_dim)
        return DeterministicController(normalizer, actor, clip, scaler, self.actor_groups, self.actor_obs_dim)

    def state_dict(self) -> dict[str, Any]:
        state = {
            "actor": self.actor.state_dict(),
            "log_std": self.log_std.detach().clone(),
            "critic": self.critic.state_dict(),
            "actor_normalizer": self.actor_normalizer.state_dict(),
            "critic_normalizer": self.critic_normalizer.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "learning_rate": self.lr.detach().clone(),  # a tensor: the runner snapshots this every iteration
        }
        if self.return_normalizer is not None:  # the per-env running returns restart with the envs' episodes
            state["return_normalizer"] = self.return_normalizer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        with torch.no_grad():
            self.log_std.copy_(state["log_std"].clamp(*self._log_std_range))  # a floor raised on resume: from now
        self.critic.load_state_dict(state["critic"])
        self.actor_normalizer.load_state_dict(state["actor_normalizer"])
        self.critic_normalizer.load_state_dict(state["critic_normalizer"])
        self.optimizer.load_state_dict(state["optimizer"])
        with torch.no_grad():  # older checkpoints hold a float
            self.lr.copy_(torch.as_tensor(state["learning_rate"], dtype=torch.float64))
        for group in self.optimizer.param_groups:  # loading put the saved lr in; the schedule updates ours in place
            group["lr"] = self.lr
        if self.return_normalizer is not None:
            self.return_normalizer.load_state_dict(state["return_normalizer"])
