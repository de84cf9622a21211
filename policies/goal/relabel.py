"""Hindsight goal sampling over a dataset's trajectories (OGBench's ``GCDataset``).

Undirected data carries no goals; every minibatch gets goals drawn from the
dataset's own states. A goal is the first ``goal_dim`` features of a ``policy``
observation (the tasks' convention: for the point maze, its position).

- **value goals** (critics): with probability ``p_current`` (0.2) the current
  state itself, ``p_future`` (0.5) a future state of the same trajectory at a
  geometric(1 - gamma) offset (capped at the trajectory's last state), else
  (0.3) a state drawn uniformly from the whole dataset.
- **actor goals**: a future state of the same trajectory, uniform over the
  states after the current one (its last state at the end).
- reward 0 and ``mask`` 0 (no bootstrap) when the value goal is the current
  state, else reward -1 and mask 1; the goal is "reached" only there.
- **subgoals** (HIQL): the state ``k`` steps later in the same trajectory (the low
  level's goal), and the high level's target: ``k`` steps later too, but never past the
  actor goal (``min(t + k, t_goal)``, as OGBench's ``HGCDataset``), so that for a goal
  closer than ``k`` steps the high level learns to point at the goal itself.
- **options** (OTA): the state where an option of ``n`` steps from the current one
  ends, for the same value goal: ``n`` steps later, capped at the trajectory's last
  state, and at the goal itself when the goal lies ahead in the same trajectory
  within ``n`` steps; the option's reward is 0 and its mask 0 exactly when it ends
  at the goal (reached within the option), else -1 and 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class RelabelConfig:
    p_current: float = 0.2
    p_future: float = 0.5
    p_random: float = 0.3
    gamma: float = 0.99


class GoalSampler:
    """Minibatches of transitions with relabeled goals, drawn from ``data`` (``Dataset.transitions``)."""

    def __init__(self, data: dict[str, Any], ends: torch.Tensor, goal_dim: int, cfg: RelabelConfig) -> None:
        parts = (cfg.p_current, cfg.p_future, cfg.p_random)
        if abs(sum(parts) - 1.0) > 1e-6 or min(parts) < 0:
            raise ValueError(f"agent.relabel.p_current + p_future + p_random must be probabilities summing to 1, got "
                             f"{cfg.p_current} + {cfg.p_future} + {cfg.p_random} = {sum(parts):g}")
        self.cfg, self.goal_dim = cfg, goal_dim
        self.obs, self.next_obs = data["obs"]["policy"], data["next_obs"]["policy"]
        self.action = data["action"]
        self.size = int(self.action.shape[0])
        self.device = self.action.device
        rows = torch.arange(self.size, device=self.device)
        # last row of each row's trajectory: the next end at or after it
        end_rows = rows[ends.to(self.device)]
        self.final = end_rows[torch.searchsorted(end_rows, rows)]

    def goal(self, idx: torch.Tensor) -> torch.Tensor:
        """The goals that the states at rows ``idx`` reach."""
        return self.obs[idx, : self.goal_dim]

    def future(self, idx: torch.Tensor, steps: int | torch.Tensor) -> torch.Tensor:
        """Rows ``steps`` after ``idx`` in the same trajectory, capped at its last row."""
        return torch.minimum(idx + steps, self.final[idx])

    def option_ends(self, idx: torch.Tensor, goal_rows: torch.Tensor, steps: int) -> torch.Tensor:
        """Rows where an option of ``steps`` steps from ``idx`` ends when heading for ``goal_rows``: ``steps``
        later (capped at the trajectory's end), or at the goal when it is ahead in the same trajectory and
        closer than that."""
        end = self.future(idx, steps)
        ahead = (self.final[goal_rows] == self.final[idx]) & (goal_rows >= idx)
        return torch.where(ahead, torch.minimum(end, goal_rows), end)

    def value_goals(self, idx: torch.Tensor) -> torch.Tensor:
        """Rows of the value goals for ``idx``: current, geometric future or random (see the module)."""
        cfg, n = self.cfg, len(idx)
        offset = torch.empty(n, device=self.device).geometric_(1 - cfg.gamma).long()
        future = self.future(idx, offset)
        random = torch.randint(self.size, (n,), device=self.device)
        u = torch.rand(n, device=self.device)
        return torch.where(u < cfg.p_current, idx, torch.where(u < cfg.p_current + cfg.p_future, future, random))

    def actor_goals(self, idx: torch.Tensor) -> torch.Tensor:
        """Rows of the actor goals: uniform over the later states of the same trajectory."""
        first = torch.minimum(idx + 1, self.final[idx])
        span = (self.final[idx] - first + 1).float()
        return first + (torch.rand(len(idx), device=self.device) * span).long().clamp(max=span.long() - 1)

    def sample(self, batch_size: int, subgoal_steps: int = 0, option_steps: int = 0) -> dict[str, torch.Tensor]:
        """``obs``, ``next_obs``, ``action``, ``value_goal``, ``reward``, ``mask``, ``actor_goal``
        (and ``subgoal``, the state ``subgoal_steps`` later, with ``high_target``, the same capped at
        the actor goal, and its full state ``high_target_obs``, when asked; and ``option_obs``,
        ``option_reward``, ``option_mask`` for options of ``option_steps`` steps toward the
        value goal, when asked), each ``(batch_size, ...)``."""
        idx = torch.randint(self.size, (batch_size,), device=self.device)
        value_rows = self.value_goals(idx)
        reached = (value_rows == idx).float()
        actor_rows = self.actor_goals(idx)
        batch = {"obs": self.obs[idx], "next_obs": self.next_obs[idx], "action": self.action[idx],
                 "value_goal": self.goal(value_rows), "reward": reached - 1.0, "mask": 1.0 - reached,
                 "actor_goal": self.goal(actor_rows)}
        if subgoal_steps:
            subgoal_rows = self.future(idx, subgoal_steps)
            target_rows = torch.minimum(subgoal_rows, actor_rows)  # actor goals lie ahead in the same trajectory
            batch |= {"subgoal": self.goal(subgoal_rows), "high_target": self.goal(target_rows),
                      "high_target_obs": self.obs[target_rows]}
        if option_steps:
            option_rows = self.option_ends(idx, value_rows, option_steps)
            option_reached = (option_rows == value_rows).float()
            batch |= {"option_obs": self.obs[option_rows], "option_reward": option_reached - 1.0,
                      "option_mask": 1.0 - option_reached}
        return batch
