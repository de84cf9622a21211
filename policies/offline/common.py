"""What every offline agent shares: the dataset statistics it fixes before training.

An offline agent is an :class:`~robolearn.interfaces.Agent` with ``offline = True``
and a :meth:`OfflineAgent.prepare` hook. The offline runner calls ``prepare(data)``
once with the whole dataset (``Dataset.transitions``) before the first update; the
agent fits its observation normalizer to the dataset (frozen afterwards, and
exported inside the controller) and may add per-transition columns the runner
then samples with the rest (Cal-QL's Monte-Carlo returns).

Episode boundaries are recovered from the flat transitions: an episode ends where
``terminated | truncated``, at the last row, or where ``next_obs`` of one row is not
``obs`` of the next (a dataset whose episodes were cut without a flag).
"""

from __future__ import annotations

from typing import Any

import torch

from robolearn.interfaces import Agent, flatten_obs
from policies.modules import EmpiricalNormalizer


def dataset_standardizer(obs_dim: int, enabled: bool = True) -> EmpiricalNormalizer | torch.nn.Identity:
    """``(s - mean) / (std + 1e-3)`` with the dataset's statistics and no clipping: TD3+BC's
    state normalization (Fujimoto & Gu 2021, sec. 5), also CORL's and d3rlpy's for IQL,
    instead of the online normalizer's ``std + 1e-2`` and +-10 clip."""
    return EmpiricalNormalizer(obs_dim, clip=float("inf"), eps=1e-3) if enabled else torch.nn.Identity()


class OfflineAgent(Agent):
    """An agent trained from a fixed dataset; ``act`` is only used for evaluation."""

    on_policy = False
    offline = True
    normalizer: EmpiricalNormalizer | torch.nn.Identity
    obs_groups: tuple[str, ...]

    def prepare(self, data: dict[str, Any]) -> dict[str, Any]:
        """Fit the observation normalizer to the dataset; return ``data`` with any extra columns."""
        if isinstance(self.normalizer, EmpiricalNormalizer):
            self.normalizer.update(flatten_obs(data["obs"], self.obs_groups).to(self.normalizer.mean.device))
        return data


def episode_ends(data: dict[str, Any]) -> torch.Tensor:
    """Bool ``(N,)``: whether row ``i`` is the last transition of its episode (see the module docstring)."""
    done = data["terminated"].bool() | data["truncated"].bool()
    done[-1] = True
    for group, next_obs in data["next_obs"].items():
        cut = (next_obs[:-1] != data["obs"][group][1:]).flatten(1).any(-1)
        done[:-1] |= cut
    return done


def discounted_returns(reward: torch.Tensor, ends: torch.Tensor, gamma: float) -> torch.Tensor:
    """``G_t = r_t + gamma G_{t+1}`` within each episode, ``G_T = r_T`` at its last row.

    A time-limit truncation is not bootstrapped, so ``G_t`` leaves out the rewards
    after the cut: a lower bound of the behavior policy's return (Cal-QL's use) where
    those rewards are non-negative, an overestimate where they are negative (Cal-QL's
    code special-cases all-negative sparse episodes with ``r / (1 - gamma)``; not done here).
    """
    rewards, last = reward.double().cpu().tolist(), ends.cpu().tolist()
    out, running = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):  # one pass over Python floats: ~0.3 s per million rows
        running = rewards[t] + (0.0 if last[t] else gamma * running)
        out[t] = running
    return torch.tensor(out, dtype=torch.float32, device=reward.device)


def episode_returns(reward: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Undiscounted return of every episode, in order."""
    episode = torch.cumsum(ends.long(), 0) - ends.long()  # index of each row's episode
    return torch.zeros(int(ends.sum()), dtype=torch.float64).index_add_(0, episode.cpu(), reward.double().cpu())
