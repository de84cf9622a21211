"""The deployable skill controller: a high level picks a skill every H steps, a low level acts.

:class:`SkillController` keeps, per env, the current skill ``z`` and the step ``k`` in
it. ``forward`` is the pure function that is exported, with the held state as explicit
inputs and outputs::

    forward(obs, skill, step) -> (action, next_skill, next_step)

    s = normalize(obs)
    z = high(s)           where step == 0 (a new skill), else skill
    action = scale(tanh(low(s, z, one_hot(step))))
    next_step = (step + 1) mod H

Both levels run in every call (``torch.where`` picks the skill), so the function has no
data-dependent control flow and exports to TorchScript and ONNX alike. ``step`` is a
float tensor ``(B,)`` and the zero state (``skill = 0``, ``step = 0``) is a fresh
start, so a generic driver can hold the state: start from zeros, feed the outputs back,
zero an env's rows when its episode ends. ``act``/``reset`` do exactly that inside, and so
does :class:`robolearn.export.ExportedController` around the exported file (``robolearn
eval --exported``, ``robolearn deploy``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from robolearn.interfaces import Controller, Obs, moved_by, reset_mask, reset_rows
from policies.modules import ActionScaler


class SkillController(Controller):
    """``high``: normalized state -> skill (the high-level policy's mean); ``low``:
    ``(s, z, one_hot(k))`` -> pre-tanh action mean (SPiRL's decoder or Skill-Critic's low-level policy)."""

    __jit_ignored_attributes__ = ["obs_groups", "obs_size", "skill", "step"]

    def __init__(self, normalizer: nn.Module, high: nn.Module, low: nn.Module, scaler: ActionScaler, horizon: int,
                 latent_dim: int, obs_groups: tuple[str, ...], obs_size: int) -> None:
        super().__init__()
        self.normalizer, self.high, self.low, self.scaler = normalizer, high, low, scaler
        self.horizon, self.latent_dim = horizon, latent_dim
        self.decision_period = horizon
        self.obs_groups, self.obs_size = tuple(obs_groups), obs_size
        self.register_buffer("steps", torch.arange(horizon, dtype=torch.float32))
        self.skill: torch.Tensor | None = None  # (B, Z) held by act()
        self.step: torch.Tensor | None = None  # (B,) float

    def forward(self, obs: torch.Tensor, skill: torch.Tensor, step: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = self.normalizer(obs)
        z = torch.where((step == 0).unsqueeze(-1), self.high(s), skill)
        one_hot = (step.unsqueeze(-1) == self.steps).float()
        action = self.scaler(torch.tanh(self.low(s, z, one_hot)))
        return action, z, torch.remainder(step + 1, self.horizon)

    @torch.no_grad()
    def act(self, obs: Obs) -> torch.Tensor:
        x = self.read(obs)
        if self.step is None or self.step.shape[0] != x.shape[0]:
            self.skill, self.step = x.new_zeros(x.shape[0], self.latent_dim), x.new_zeros(x.shape[0])
        action, self.skill, self.step = self(x, self.skill, self.step)
        return action

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> SkillController:
        """nn.Module's move of parameters and buffers (``.to()``, ``.cuda()``, ``.double()``...), which also lets the
        held skills and steps go if it would move them: every env picks a new skill at the next ``act``, where the
        controller now is (a new episode; a move that changes nothing keeps them). Kept where they were made, they
        had met the moved networks' outputs in ``forward`` (on a GPU, CPU skills raise there), ``reset`` or not."""
        if moved_by(fn, self.skill, self.step):
            self.skill = self.step = None
        return super()._apply(fn, recurse)

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """A new skill is chosen at the next ``act`` for the envs in ``mask`` (all when None). Before the first
        ``act`` there is nothing to clear, but the mask is checked all the same (as every Controller does), so
        that a wrong one fails at the first reset, not only once the controller has acted."""
        who = f"{type(self).__name__}.reset"
        mask = reset_mask(mask, who=who)  # (indices [0, 2] said as such, not as a length)
        if self.step is None:
            return
        rows = reset_rows(mask, self.step, who)
        self.skill[rows] = 0.0
        self.step[rows] = 0.0

    def export_inputs(self, batch_size: int = 1) -> dict[str, torch.Tensor]:
        return {"obs": torch.zeros(batch_size, self.obs_size), "skill": torch.zeros(batch_size, self.latent_dim),
                "step": torch.zeros(batch_size)}

    def export_outputs(self) -> list[str]:
        return ["action", "next_skill", "next_step"]
