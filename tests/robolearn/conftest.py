"""Shared by the offline and fine-tuning tests: a scripted pendulum swing-up, their datasets' behavior policy."""

from __future__ import annotations

import pytest
import torch


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
