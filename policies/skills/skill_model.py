"""SPiRL's skill model (Pertsch et al. 2020, "Accelerating Reinforcement Learning with
Learned Skill Priors"), closed-loop variant, learned from a dataset of H-step windows.

A skill is ``H`` consecutive actions summarized by a latent ``z`` (dim 10):

- encoder ``q(z | a_1..H)``: an LSTM over the window's actions; its last hidden state
  gives a diagonal Gaussian;
- closed-loop decoder ``p(a_t | s_t, z)``: an MLP of the current state and ``z`` to the
  pre-tanh mean ``u`` of a tanh-squashed Gaussian with the fixed std ``decoder_std``;
  its action is ``tanh(u)``. (The std only matters to Skill-Critic, whose low-level
  policy is regularized toward this distribution.)
- prior ``p(z | s_1)``: an MLP (6x128) to a diagonal Gaussian over ``z``.

With ``z ~ q`` reparameterized::

    L = 1/H sum_t |a_t - tanh(u(s_t, z))|^2 + beta KL(q(z | a) || N(0, I)) - log p(sg(z) | s_1)

The prior's term reads ``z`` with the gradient stopped, so it fits the encoder's skills
without pulling them toward what is easy to predict. States are normalized and actions
are in ``[-1, 1]`` (the agent's job).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributions import Normal, kl_divergence

from policies.modules import mlp

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class DiagGaussian(nn.Module):
    """``x -> N(mu(x), sigma(x))`` with ``log sigma`` clamped: the skill prior and the high-level policy."""

    def __init__(self, in_dim: int, hidden: tuple[int, ...], out_dim: int, activation: str) -> None:
        super().__init__()
        self.net = mlp(in_dim, hidden, 2 * out_dim, activation)
        self.out_dim = out_dim

    def forward(self, x: torch.Tensor) -> Normal:
        mean, log_std = self.net(x).split(self.out_dim, dim=-1)
        return Normal(mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp(), validate_args=False)


class GaussianMean(nn.Module):
    """``x -> mu(x)`` of a :class:`DiagGaussian` (sharing its network: give it a copy): what controllers act with."""

    def __init__(self, gaussian: DiagGaussian) -> None:
        super().__init__()
        self.net, self.out_dim = gaussian.net, gaussian.out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)[..., : self.out_dim]


class SkillEncoder(nn.Module):
    """``q(z | a_1..H)``: an LSTM over the actions, a linear head on its last hidden state."""

    def __init__(self, action_dim: int, hidden: int, latent_dim: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(action_dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 2 * latent_dim)
        self.latent_dim = latent_dim

    def forward(self, actions: torch.Tensor) -> Normal:
        """``actions (B, H, A)`` -> ``q(z | a)`` with batch shape ``(B, Z)``."""
        _, (h, _) = self.lstm(actions)
        mean, log_std = self.head(h[-1]).split(self.latent_dim, dim=-1)
        return Normal(mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp(), validate_args=False)


class SkillDecoder(nn.Module):
    """``p(a_t | s_t, z)``: ``forward`` gives the pre-tanh mean ``u(s_t, z)``.

    ``forward`` also takes the one-hot step ``k`` in the skill and ignores it, so the
    decoder and Skill-Critic's low-level policy (:class:`LowPolicy`) plug into the same
    controller."""

    def __init__(self, obs_dim: int, latent_dim: int, hidden: tuple[int, ...], action_dim: int, activation: str) -> None:
        super().__init__()
        self.in_dim, self.hidden, self.action_dim, self.activation = obs_dim + latent_dim, hidden, action_dim, activation
        self.net = mlp(self.in_dim, hidden, action_dim, activation)

    def forward(self, obs: torch.Tensor, z: torch.Tensor, step: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(torch.cat([obs, z], dim=-1))


class LowPolicy(nn.Module):
    """Skill-Critic's ``pi(a | s, z, k) = tanh(N(u(s, z, k), sigma(s, z, k)))``.

    Built from a decoder (:meth:`from_decoder`): the same layers with the one-hot ``k``
    appended to the input (its first-layer columns zero) and a log-std head that starts
    at ``log decoder_std`` (zero weights), so the policy starts as the decoder's
    distribution exactly (KL 0). ``forward`` gives the pre-tanh mean, as the decoder's.
    """

    def __init__(self, in_dim: int, horizon: int, hidden: tuple[int, ...], action_dim: int, activation: str) -> None:
        super().__init__()
        self.trunk = mlp(in_dim + horizon, hidden, None, activation)
        self.mean = nn.Linear(hidden[-1], action_dim)
        self.log_std = nn.Linear(hidden[-1], action_dim)

    @classmethod
    def from_decoder(cls, decoder: SkillDecoder, horizon: int, decoder_std: float) -> LowPolicy:
        policy = cls(decoder.in_dim, horizon, decoder.hidden, decoder.action_dim, decoder.activation)
        policy = policy.to(next(decoder.parameters()).device)
        theirs = [m for m in decoder.net if isinstance(m, nn.Linear)]
        mine = [m for m in policy.trunk if isinstance(m, nn.Linear)] + [policy.mean]
        with torch.no_grad():
            first, first_decoder = mine[0], theirs[0]
            first.weight.zero_()
            first.weight[:, : decoder.in_dim].copy_(first_decoder.weight)
            first.bias.copy_(first_decoder.bias)
            for layer, decoder_layer in zip(mine[1:], theirs[1:]):
                layer.load_state_dict(decoder_layer.state_dict())
            policy.log_std.weight.zero_()
            policy.log_std.bias.fill_(math.log(decoder_std))
        return policy

    def distribution(self, obs: torch.Tensor, z: torch.Tensor, step: torch.Tensor) -> Normal:
        """The pre-tanh Gaussian."""
        h = self.trunk(torch.cat([obs, z, step], dim=-1))
        return Normal(self.mean(h), self.log_std(h).clamp(LOG_STD_MIN, LOG_STD_MAX).exp(), validate_args=False)

    def forward(self, obs: torch.Tensor, z: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        return self.mean(self.trunk(torch.cat([obs, z, step], dim=-1)))


class SkillModel(nn.Module):
    """Encoder, closed-loop decoder and prior, trained together by :meth:`loss`."""

    def __init__(self, obs_dim: int, action_dim: int, *, horizon: int, latent_dim: int, encoder_hidden: int,
                 decoder_hidden: tuple[int, ...], prior_hidden: tuple[int, ...], activation: str, beta: float) -> None:
        super().__init__()
        self.horizon, self.beta = horizon, beta
        self.encoder = SkillEncoder(action_dim, encoder_hidden, latent_dim)
        self.decoder = SkillDecoder(obs_dim, latent_dim, decoder_hidden, action_dim, activation)
        self.prior = DiagGaussian(obs_dim, prior_hidden, latent_dim, activation)

    def loss(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """SPiRL's loss on windows: ``obs (B, H, S)`` normalized, ``actions (B, H, A)`` in ``[-1, 1]``."""
        q = self.encoder(actions)
        z = q.rsample()  # (B, Z)
        u = self.decoder(obs, z.unsqueeze(1).expand(-1, obs.shape[1], -1))
        reconstruction = (torch.tanh(u) - actions).square().sum(-1).mean()
        unit = Normal(torch.zeros_like(q.loc), torch.ones_like(q.scale), validate_args=False)
        kl = kl_divergence(q, unit).sum(-1).mean()
        prior_nll = -self.prior(obs[:, 0]).log_prob(z.detach()).sum(-1).mean()
        loss = reconstruction + self.beta * kl + prior_nll
        return loss, {"reconstruction": reconstruction.detach(), "kl": kl.detach(), "prior_nll": prior_nll.detach()}
