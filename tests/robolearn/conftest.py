"""Shared by the runner tests: a scripted pendulum swing-up (the offline datasets' behavior policy), and a
stop callback that moves a run's folder away while it trains."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
import torch


@pytest.fixture
def moving_the_run_once() -> Callable[[Path, Path, list[Path]], Callable[[dict[str, Any]], bool]]:
    """``(runs, to, moved) ->`` a ``train(stop=...)`` callback that, at its first call, renames the one run
    under ``runs`` to ``to`` (appending the run's path to ``moved``) and never stops the run itself."""
    def make(runs: Path, to: Path, moved: list[Path]) -> Callable[[dict[str, Any]], bool]:
        def stop(metrics: dict[str, Any]) -> bool:
            if not moved:
                moved.append(next(runs.glob("*/*")))
                moved[0].rename(to)
            return False

        return stop

    return make


class SwingUp:
    """Energy pumping (bang-bang torque along the velocity until the rod has the energy of upright,
    with I = 1/3 kg m^2 and m g l_c = 4.9 N m) and a PD balance near upright."""

    def act(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        c, s, w = obs["policy"].unbind(-1)
        energy = w.square() / 6 + 4.9 * c
        pump = 2.0 * torch.sign(w * (4.9 - energy) + 1e-6)
        balance = (-(20 * torch.atan2(s, c) + 4 * w)).clamp(-2, 2)
        return torch.where(c > 0.85, balance, pump).unsqueeze(-1)

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Stateless."""


@pytest.fixture(scope="session")
def swing_up() -> SwingUp:
    return SwingUp()
