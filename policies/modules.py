"""Pieces shared by the algorithms in ``policies/``: MLPs, the observation
normalizer, action scaling, Gaussian policy heads, a batched critic ensemble
and the deterministic controller that most agents export.

Conventions: policies act in a normalized action space ``[-1, 1]^A``;
:class:`ActionScaler` maps it to the env's ``action_spec`` bounds inside the
controller, so the exported module speaks physical units.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from robolearn import distributed
from robolearn.interfaces import Controller

ACTIVATIONS: dict[str, type[nn.Module]] = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh, "silu": nn.SiLU}


def make_activation(name: str) -> nn.Module:
    """The activation module; ReLU works in place (it follows a matmul whose output nothing else
    reads, and saves one allocation and copy per layer: the SAC update is overhead-bound on CPU)."""
    return nn.ReLU(inplace=True) if name == "relu" else ACTIVATIONS[name]()


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int | None, activation: str = "elu") -> nn.Sequential:
    """``Linear -> act`` per hidden width, then a linear output (none when ``out_dim`` is None)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose from {sorted(ACTIVATIONS)}")
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), make_activation(activation)]
        in_dim = width
    if out_dim is not None:
        layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class EmpiricalNormalizer(nn.Module):
    """Running mean/variance of observations; ``forward`` whitens and clips.

    Statistics are buffers, so they are saved with the agent and travel inside
    the exported controller. Batches are merged with Chan et al.'s parallel
    update, which is exact for any batch sizes:
    ``mean' = mean + w * delta`` and
    ``var' = (1 - w) var + w var_b + w (1 - w) delta^2`` with ``w = n_b / (n + n_b)``.
    ``forward`` divides by ``std + eps`` (as RSL-RL does), so a feature that was
    constant so far is not blown up when it starts to vary.
    """

    def __init__(self, size: int, clip: float = 10.0, eps: float = 1e-2) -> None:
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(size))
        self.register_buffer("var", torch.ones(size))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - self.mean) / (self.var.sqrt() + self.eps)
        return x.clamp(-self.clip, self.clip) if self.clip < math.inf else x

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the statistics of ``x`` ``(..., size)`` (all leading dims are samples).

        Under torchrun every rank calls this together and merges every rank's
        batch in rank order, so all ranks keep the statistics of all the data.
        """
        size = self.mean.shape[0]
        x = x.reshape(-1, size).float()
        moments = torch.cat([x.new_tensor([x.shape[0]]), x.mean(0), x.var(0, unbiased=False)])
        for batch in distributed.all_gather(moments):
            n, batch_mean, batch_var = batch.split([1, size, size])
            self.merge(n.long().squeeze(0), batch_mean, batch_var)

    @torch.no_grad()
    def merge(self, n: torch.Tensor, batch_mean: torch.Tensor, batch_var: torch.Tensor) -> None:
        """Chan et al.'s parallel update with a batch of ``n`` samples of (biased) ``batch_var``."""
        w = n / (self.count + n)
        delta = batch_mean - self.mean
        self.mean.add_(w * delta)
        self.var.copy_((1 - w) * self.var + w * batch_var + w * (1 - w) * delta.square())
        self.count.add_(n)


class BoxClip(nn.Module):
    """Clip to per-dimension bounds: a Gaussian policy's actions kept inside their box (exports as ONNX Min/Max)."""

    def __init__(self, low: Any, high: Any) -> None:
        super().__init__()
        self.register_buffer("low", torch.as_tensor(low, dtype=torch.float32).flatten())
        self.register_buffer("high", torch.as_tensor(high, dtype=torch.float32).flatten())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(x, self.high), self.low)


class ActionScaler(nn.Module):
    """Affine map between normalized actions ``[-1, 1]`` and the bounds of a Box."""

    def __init__(self, space: spaces.Box) -> None:
        super().__init__()
        low = torch.as_tensor(space.low, dtype=torch.float32).flatten()
        high = torch.as_tensor(space.high, dtype=torch.float32).flatten()
        if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
            raise ValueError(f"action_spec needs finite bounds to scale actions, got low={space.low} high={space.high}; "
                             "give the env bounds (an mjlab task: env.kwargs.action_limit, e.g. 1.0; a Gymnasium "
                             "env: a Box with finite low and high), or train PPO with agent.normalize_actions=false "
                             "(a Gaussian in the env's own units: the other algorithms squash into the bounds)")
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("offset", (high + low) / 2)

    def forward(self, action: torch.Tensor) -> torch.Tensor:
        """Normalized -> env units."""
        return action * self.scale + self.offset

    def normalize(self, action: torch.Tensor) -> torch.Tensor:
        """Env units -> normalized (clipped to ``[-1, 1]``)."""
        return ((action - self.offset) / self.scale).clamp(-1.0, 1.0)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Log-density of a diagonal Gaussian, summed over the last (action) dim."""
    z = (x - mean) / std
    return (-0.5 * z.square() - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)


def gaussian_entropy(std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian, summed over the last dim."""
    return (std.log() + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)


def gaussian_kl(mean0: torch.Tensor, std0: torch.Tensor, mean1: torch.Tensor, std1: torch.Tensor) -> torch.Tensor:
    """KL(N0 || N1) of diagonal Gaussians, summed over the last dim:
    ``log(s1/s0) + (s0^2 + (m0 - m1)^2) / (2 s1^2) - 1/2``."""
    return (torch.log(std1 / std0) + (std0.square() + (mean0 - mean1).square()) / (2 * std1.square()) - 0.5).sum(-1)


class SquashedGaussianActor(nn.Module):
    """SAC's policy: ``a = tanh(u)``, ``u ~ N(mu(s), sigma(s))`` in normalized action space.

    ``mu`` and ``log sigma`` come from one linear head (one matmul instead of two:
    the update is overhead-bound on CPU at SAC's batch sizes).
    """

    LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...], activation: str = "relu") -> None:
        super().__init__()
        self.trunk = mlp(obs_dim, hidden, None, activation)
        self.head = nn.Linear(hidden[-1], 2 * action_dim)
        self.action_dim = action_dim

    def mean_and_log_std(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mu, log sigma)`` of the pre-tanh Gaussian from trunk features, ``log sigma`` clamped."""
        mean, log_std = self.head(features).split(self.action_dim, dim=-1)
        return mean, log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)

    def forward(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized ``(action, log pi(action | obs))``.

        With ``u = mu + sigma * eps``, ``log N(u) = sum(-eps^2 / 2 - log sigma) - A/2 log(2 pi)``;
        the change of variables through tanh subtracts ``sum log(1 - tanh(u)^2)``,
        computed stably as ``2 (log 2 - u - softplus(-2u))``.
        """
        mean, log_std = self.mean_and_log_std(self.trunk(obs))
        eps = torch.zeros_like(mean) if deterministic else torch.randn_like(mean)
        u = mean + log_std.exp() * eps
        log_prob = (-0.5 * eps.square() - log_std - 2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), log_prob - 0.5 * math.log(2 * math.pi) * self.action_dim

    def mean_net(self) -> nn.Module:
        """A copy of ``obs -> mu(obs)`` (pre-tanh), for controllers."""
        mean = nn.Linear(self.head.in_features, self.action_dim).to(self.head.weight.device)
        with torch.no_grad():
            mean.weight.copy_(self.head.weight[: self.action_dim])
            mean.bias.copy_(self.head.bias[: self.action_dim])
        return nn.Sequential(copy.deepcopy(self.trunk), mean)


class EnsembleLinear(nn.Module):
    """``E`` independent linear layers applied in one batched matmul.

    Input ``(E, B, in)`` -> output ``(E, B, out)``; a ``(B, in)`` input is shared
    by all members. Initialized like ``nn.Linear`` (uniform in +-1/sqrt(in)).
    """

    def __init__(self, num_members: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        bound = 1 / math.sqrt(in_dim)
        self.weight = nn.Parameter(torch.empty(num_members, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_dim).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor, detach: bool = False) -> torch.Tensor:
        weight, bias = (self.weight.detach(), self.bias.detach()) if detach else (self.weight, self.bias)
        if x.dim() == 2:
            x = x.expand(weight.shape[0], -1, -1)
        return torch.baddbmm(bias, x, weight)


class EnsembleQ(nn.Module):
    """``E`` Q-networks ``Q_i(s, a)`` evaluated together: ``(B, .) -> (E, B)``.

    Twin critics (E = 2) cost one batched matmul per layer instead of two MLPs.
    ``layer_norm``: LayerNorm (with affine weights shared by the members) after each
    hidden layer, before the activation; it keeps large ensembles' Q-values from
    diverging under high update-to-data ratios (WSRL, RLPD).
    """

    def __init__(self, num_members: int, obs_dim: int, action_dim: int, hidden: tuple[int, ...], activation: str = "relu",
                 layer_norm: bool = False) -> None:
        super().__init__()
        dims = (obs_dim + action_dim, *hidden, 1)
        self.layers = nn.ModuleList(EnsembleLinear(num_members, i, o) for i, o in zip(dims[:-1], dims[1:]))
        self.norms = nn.ModuleList(nn.LayerNorm(width) for width in hidden) if layer_norm else None
        self.activation = make_activation(activation)

    def forward(self, obs: torch.Tensor, action: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """``detach_params``: gradients reach the inputs but not the weights (for actor losses)."""
        x = torch.cat([obs, action], dim=-1)
        for i, layer in enumerate(self.layers):
            x = layer(x, detach_params)
            if i < len(self.layers) - 1:
                if self.norms is not None:
                    x = self._norm(self.norms[i], x, detach_params)
                x = self.activation(x)
        return x.squeeze(-1)

    @staticmethod
    def _norm(norm: nn.LayerNorm, x: torch.Tensor, detach: bool) -> torch.Tensor:
        weight, bias = (norm.weight.detach(), norm.bias.detach()) if detach else (norm.weight, norm.bias)
        return nn.functional.layer_norm(x, norm.normalized_shape, weight, bias, norm.eps)


class DeterministicController(Controller):
    """``obs -> scale(squash(net(normalize(obs))))``: the exported flat policy.

    ``squash`` is a :class:`BoxClip` (clip) for Gaussian policies and
    ``nn.Tanh()`` for tanh-squashed ones.
    """

    # Controller's annotations of these are strings TorchScript cannot resolve; forward never reads them
    __jit_ignored_attributes__ = ["obs_groups", "obs_size"]

    def __init__(
        self,
        normalizer: nn.Module,
        net: nn.Module,
        squash: nn.Module,
        scaler: ActionScaler,
        obs_groups: tuple[str, ...],
        obs_size: int,
    ) -> None:
        super().__init__()
        self.normalizer, self.net, self.squash, self.scaler = normalizer, net, squash, scaler
        self.obs_groups, self.obs_size = tuple(obs_groups), obs_size

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.scaler(self.squash(self.net(self.normalizer(obs))))


# What an agent's checkpoint holds, by name: modules, optimizers and lr schedules (their
# ``state_dict``), and tensors such as a learned temperature (copied).
Checkpointed = nn.Module | torch.optim.Optimizer | torch.optim.lr_scheduler.LRScheduler | torch.Tensor


class CheckpointedParts:
    """Mixin for an agent whose resumable state is the parts its ``_checkpointed()`` names.

    Put it before ``Agent``/``OfflineAgent`` in the bases so that its ``state_dict`` and
    ``load_state_dict`` are the ones used.
    """

    def _checkpointed(self) -> dict[str, Checkpointed]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """``state_dict()`` of each module, optimizer and schedule, a detached copy of each tensor."""
        return {name: part.detach().clone() if isinstance(part, torch.Tensor) else part.state_dict()
                for name, part in self._checkpointed().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore every part in place from what :meth:`state_dict` returned."""
        for name, part in self._checkpointed().items():
            if isinstance(part, torch.Tensor):
                with torch.no_grad():
                    part.copy_(state[name])
            else:
                part.load_state_dict(state[name])
