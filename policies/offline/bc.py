"""Behavior cloning: regress the dataset's actions from its observations.

Two losses (``loss``):

- ``mse``: a deterministic policy ``a = tanh(f(s))``, ``L = E ||pi(s) - a||^2``
  (CORL's BC, also TD3+BC's behavior-cloning term);
- ``nll``: a Gaussian policy ``N(mu(s), sigma(s))`` in normalized action space,
  ``L = -E log N(a | mu(s), sigma(s))``; the controller acts with ``clip(mu(s))``.

Actions are learned in ``[-1, 1]`` (the dataset's env-unit actions are mapped with
the ``action_spec`` bounds); observations are whitened with the dataset's statistics.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

import torch
from gymnasium import spaces
from torch import nn

from robolearn.interfaces import Controller, Obs, flatten_obs, obs_dim
from policies.modules import ActionScaler, DeterministicController, EmpiricalNormalizer, gaussian_log_prob, mlp
from policies.offline.common import OfflineAgent


@dataclass
class BCConfig:
    batch_size: int = 256
    learning_rate: float = 3e-4
    hidden: tuple[int, ...] = (256, 256)
    activation: Literal["elu", "relu", "tanh", "silu"] = "relu"
    loss: Literal["mse", "nll"] = "mse"
    normalize_obs: bool = True
    obs_groups: tuple[str, ...] = ("policy",)


class BC(OfflineAgent):
    LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
    reads_rewards = False  # imitation: a dataset without rewards is whole to it

    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: BCConfig, device: torch.device) -> None:
        self.cfg, self.device = cfg, torch.device(device)
        self.obs_groups = tuple(cfg.obs_groups)
        self.obs_dim = obs_dim(observation_spec, self.obs_groups)
        action_dim = action_spec.shape[0]
        self.scaler = ActionScaler(action_spec).to(self.device)
        self.normalizer = (EmpiricalNormalizer(self.obs_dim) if cfg.normalize_obs else nn.Identity()).to(self.device)
        out = action_dim * (2 if cfg.loss == "nll" else 1)  # nll: mean and log-std heads
        self.net = mlp(self.obs_dim, tuple(cfg.hidden), out, cfg.activation).to(self.device)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=cfg.learning_rate)

    def _mean_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        out = self.net(self.normalizer(obs))
        if self.cfg.loss == "mse":
            return torch.tanh(out), None
        mean, log_std = out.chunk(2, dim=-1)
        return mean, log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)

    @torch.no_grad()
    def act(self, obs: Obs, explore: bool = False) -> dict[str, torch.Tensor]:
        mean, _ = self._mean_log_std(flatten_obs(obs, self.obs_groups))
        return {"action": self.scaler(mean.clamp(-1.0, 1.0))}

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        mean, log_std = self._mean_log_std(flatten_obs(batch["obs"], self.obs_groups))
        action = self.scaler.normalize(batch["action"])
        if log_std is None:
            loss = (mean - action).square().sum(-1).mean()  # E ||pi(s) - a||^2
        else:
            loss = -gaussian_log_prob(action, mean, log_std.exp()).mean()  # -E log N(a | mu, sigma)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"bc_loss": loss.detach(), "action_mse": (mean.detach() - action).square().mean()}

    def controller(self) -> Controller:
        """``obs -> scale(tanh(f(norm(obs))))`` (mse) or ``scale(clip(mu(norm(obs))))`` (nll)."""
        net = copy.deepcopy(self.net)
        if self.cfg.loss == "nll":  # keep the mean head only: the first A outputs of the last layer
            last, action_dim = net[-1], net[-1].out_features // 2
            head = nn.Linear(last.in_features, action_dim)
            head.load_state_dict({"weight": last.weight[:action_dim], "bias": last.bias[:action_dim]})
            net[-1] = head
        squash = nn.Tanh() if self.cfg.loss == "mse" else nn.Hardtanh()
        return DeterministicController(copy.deepcopy(self.normalizer), net, squash, copy.deepcopy(self.scaler),
                                       self.obs_groups, self.obs_dim)

    def state_dict(self) -> dict[str, Any]:
        return {"actor": self.net.state_dict(), "normalizer": self.normalizer.state_dict(),
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["actor"])
        self.normalizer.load_state_dict(state["normalizer"])
        self.optimizer.load_state_dict(state["optimizer"])
