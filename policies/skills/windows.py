"""H-step windows: skill-model training data from a dataset, and high-level transitions from
the online replay.

Offline (:class:`DatasetWindows`): every run of ``H`` consecutive rows of one episode of a
flat dataset (``Dataset.transitions``) is a window.

Online (:func:`sample_skill_transitions`): the runner's replay holds primitive steps, env
after env each step (one env's steps are ``num_envs`` rows apart), each with the skill
``z`` it was acted under and its step ``k`` in that skill (what the agent's ``act``
returned). A high-level transition starts at a row with ``k = 0`` and runs until the
skill's ``H`` steps are played or its episode ends::

    R = sum_{j <= e} gamma^j r_j,   discount = gamma^(e + 1) (1 - terminated_e),   s' = next_obs_e

with ``e`` the skill's last step. (SPiRL sums the ``H`` rewards undiscounted; discounting
them per step keeps the high- and low-level values of Skill-Critic on one scale, and is
SPiRL's sum as gamma -> 1.) Skills that started within the last ``H`` steps may still be
running and are not sampled.
"""

from __future__ import annotations

from typing import Any

import torch

from robolearn.storage import ReplayBuffer


class DatasetWindows:
    """Uniformly sampled windows ``(obs (B, H, S), actions (B, H, A))`` inside episodes."""

    def __init__(self, obs: torch.Tensor, actions: torch.Tensor, ends: torch.Tensor, horizon: int) -> None:
        self.obs, self.actions, self.horizon = obs, actions, horizon
        ends = ends.to(obs.device).long()
        episode = torch.cumsum(ends, 0) - ends  # each row's episode index
        starts = torch.arange(max(0, len(episode) - horizon + 1), device=obs.device)
        self.starts = starts[episode[starts] == episode[starts + horizon - 1]]
        if len(self.starts) == 0:
            longest = int(torch.bincount(episode).max()) if len(episode) else 0
            raise ValueError(f"the dataset has no episode of at least agent.horizon = {horizon} steps (its longest "
                             f"has {longest}): lower agent.horizon, or record longer episodes")

    def sample(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = self.starts[torch.randint(len(self.starts), (batch_size,), device=self.starts.device)]
        index = start.unsqueeze(1) + torch.arange(self.horizon, device=start.device)
        return self.obs[index], self.actions[index]


def sample_skill_transitions(replay: ReplayBuffer, batch_size: int, num_envs: int, horizon: int, gamma: float,
                             groups: tuple[str, ...]) -> dict[str, Any]:
    """``batch_size`` high-level transitions ``{obs, skill, reward, next_obs, discount}`` (see the module)."""
    data, capacity = replay.data, replay.capacity
    if capacity % num_envs:
        raise ValueError(f"agent.buffer_size ({capacity}) must be a multiple of env.num_envs ({num_envs})")
    usable = replay.size - horizon * num_envs  # rows old enough that their skill has ended
    oldest = replay.position if replay.size == capacity else 0
    rows = (oldest + torch.arange(max(usable, 0), device=replay.device)) % capacity
    starts = rows[data["skill_step"][rows] == 0]
    if len(starts) == 0:
        raise ValueError(f"no finished window of {horizon} steps (a skill, or HRAC's subgoal period) in the replay "
                         f"buffer yet: set runner.random_steps above {2 * horizon * num_envs} (2 x {horizon} steps x "
                         "env.num_envs) so that updates start after some")
    start = starts[torch.randint(len(starts), (batch_size,), device=replay.device)]
    index = (start.unsqueeze(1) + num_envs * torch.arange(horizon, device=replay.device)) % capacity  # (B, H)
    done = data["terminated"][index] | data["truncated"][index]
    alive = torch.cat([torch.ones_like(done[:, :1]), ~done[:, :-1]], dim=1).long().cumprod(1)  # no end before step j
    powers = gamma ** torch.arange(horizon, device=replay.device, dtype=torch.float32)
    reward = (data["reward"][index] * alive * powers).sum(1)
    last = alive.sum(1) - 1
    end = index.gather(1, last.unsqueeze(1)).squeeze(1)
    return {
        "obs": {g: data["obs"][g][start] for g in groups},
        "skill": data["skill"][start],
        "reward": reward,
        "next_obs": {g: data["next_obs"][g][end] for g in groups},
        "discount": gamma ** (last + 1).float() * (~data["terminated"][end]).float(),
    }
