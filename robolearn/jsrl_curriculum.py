"""JSRL's horizon curriculum (Uchendu et al. 2023, "Jump-Start Reinforcement Learning").

A guide controller acts for the first ``h`` steps of each episode and the learner after.
``h`` starts at the episode length (the guide alone) and shrinks by ``step`` whenever the
mean return of the last ``window`` episodes at the current ``h`` passes the threshold:
a fixed return, or (the paper's rule) within ``tolerance`` of the best such mean so far,
i.e. handing steps to the learner did not cost return.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class HorizonCurriculum:
    """The guide's horizon ``h`` and the episodes that judge it."""

    def __init__(self, horizon: int, step: int, window: int, threshold: float | None = None, tolerance: float = 0.05) -> None:
        self.h, self.step, self.window = int(horizon), int(step), int(window)
        self.threshold, self.tolerance = threshold, tolerance
        self.best: float | None = None
        self.returns: list[float] = []

    def guided(self, episode_step: torch.Tensor) -> torch.Tensor:
        """Bool per env: whether the guide acts at this step of its episode."""
        return episode_step < self.h

    def episode_done(self, episode_return: float, horizon: int | None = None) -> bool:
        """Record an episode finished at the current ``h``; return whether ``h`` shrank. ``horizon``: the ``h``
        it began at (None: the current one); one begun before ``h`` last shrank (another env's episode ending in
        the same step as those that shrank it) ran with another guide and is not counted."""
        if self.h <= 0 or (horizon is not None and horizon != self.h):
            return False
        self.returns.append(float(episode_return))
        if len(self.returns) < self.window:
            return False
        mean = float(np.mean(self.returns))
        self.returns = []
        self.best = mean if self.best is None else max(self.best, mean)
        bar = self.threshold if self.threshold is not None else self.best - self.tolerance * abs(self.best)
        if mean < bar:
            return False
        self.h = max(0, self.h - self.step)
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"h": self.h, "best": self.best, "returns": list(self.returns)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.h, self.best, self.returns = int(state["h"]), state["best"], list(state["returns"])
