"""Goal-conditioned behavior cloning (GCBC; Ghosh et al. 2019, OGBench's baseline).

Regress the dataset's action onto ``pi(s, g)`` with ``g`` a future state of the same
trajectory (hindsight relabeling, ``relabel.GoalSampler.actor_goals``):
``L = E[ |tanh(mu(s, g)) - a|^2 ]``, the log-likelihood of a unit-std Gaussian.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from gymnasium import spaces

from policies.goal.networks import GoalAgent, ln_mlp
from policies.goal.relabel import RelabelConfig


@dataclass
class GCBCConfig:
    batch_size: int = 1024
    lr: float = 3e-4
    hidden: tuple[int, ...] = (512, 512, 512)
    relabel: RelabelConfig = field(default_factory=RelabelConfig)


class GCBC(GoalAgent):
    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: GCBCConfig,
                 device: torch.device) -> None:
        self.cfg, self.relabel = cfg, cfg.relabel
        self._setup_spaces(observation_spec, action_spec, device)
        self.actor = ln_mlp(self.obs_dim + self.goal_dim, tuple(cfg.hidden), self.action_dim).to(self.device)
        self.optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr)

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        s, g = self.normalizer(batch["obs"], batch["actor_goal"])
        mean = torch.tanh(self.actor(torch.cat([s, g], dim=-1)))
        loss = 0.5 * (mean - self.normalized_action(batch)).square().sum(-1).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"actor_loss": loss.detach()}

    def state_dict(self) -> dict[str, Any]:
        return {"actor": self.actor.state_dict(), "normalizer": self.normalizer.state_dict(),
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("actor", "normalizer", "optimizer"):
            getattr(self, name).load_state_dict(state[name])
