"""OTA (Ahn et al. 2025, "Option-aware Temporally Abstracted Value for Offline Goal-Conditioned RL").

HIQL (``hiql``) with a second, option-aware value for the high level only. Long
horizons make HIQL's one-step value noisy far from the goal, and the high level's
advantage ``V(s_{t+k}, g) - V(s_t, g)`` then often has the wrong sign. OTA trains
``V_high(s, g)`` (same architecture as HIQL's value: its own ``phi`` and 2-ensemble) by
the same expectile regression, but its TD target steps one *option* of ``n`` states
(``option_steps``, 5 as in the paper's code) at a time:

- option end ``s_{t+n}`` (capped at the trajectory's end, and at the goal when the goal
  is ahead within ``n`` steps; ``relabel.GoalSampler.option_ends``), for the same
  relabeled value goal ``g`` as HIQL's value;
- reward per option ``-1`` unless the goal is reached within the option (then 0, and no
  bootstrap); discount ``gamma`` once per option (not ``gamma^n``):
  ``Q_i = r_o + gamma m_o V'_high,i(s_{t+n}, g)``.

So ``V_high`` counts options rather than steps: the effective horizon is about ``n``
times shorter. ``V_high`` is used only for the high policy's AWR advantage
``A_h = V_high(s_h, g') - V_high(s_t, g')`` (``s_h`` HIQL's high target: ``s_{t+k}``, or the
actor goal when it is closer); the low level keeps HIQL's value, advantage and ``phi`` (the
high policy still predicts HIQL's ``phi([s; s_h])``).
``V_high`` is trained in the same Adam step and Polyak-averaged like HIQL's value. The
exported controller is HIQL's (``HIQLController``): OTA changes training only.

Against a public OGBench-style ``OTAAgent`` (found by code search; its repository was not identified,
the paper points to github.com/ota-v/ota-v) and the paper's description: the same
option target (option end capped at the goal, reward ``r_o`` in {-1, 0}, one discount), a separate
``V_high`` with its own goal representation and target network. Differences: ``V_high`` reuses
HIQL's relabeled value goals instead of drawing its own from the same distribution (their
"current goal" case sets the goal to the option's end; here it is the current state, which the
option reaches at once: both give target 0), and the AWR temperatures stay HIQL's (1 here; 3 in
that agent's default config).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from gymnasium import spaces
from torch import nn

from policies.goal.hiql import HIQL, HIQLConfig, HIQLValue, expectile_value_loss, td_targets


@dataclass
class OTAConfig(HIQLConfig):
    option_steps: int = 5  # n: the option length of V_high's TD target (the paper's abstraction factor)


class OTA(HIQL):
    saved_modules = (*HIQL.saved_modules, "high_value", "high_value_target")

    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: OTAConfig,
                 device: torch.device) -> None:
        if cfg.option_steps < 1:
            raise ValueError(f"agent.option_steps: must be at least 1, got {cfg.option_steps}")
        super().__init__(observation_spec, action_spec, cfg, device)
        self.option_steps = cfg.option_steps
        self.high_value = HIQLValue(self.obs_dim, self.goal_dim, tuple(cfg.hidden), cfg.rep_dim).to(self.device)
        self.high_value_target = copy.deepcopy(self.high_value).requires_grad_(False)
        self.optimizer.add_param_group({"params": list(self.high_value.parameters())})

    def option_inputs(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """Normalized ``s_t``, ``s_{t+n}``, ``g`` and the option's reward and mask."""
        s, g = self.normalizer(batch["obs"], batch["value_goal"])
        s_option, _ = self.normalizer(batch["option_obs"], batch["value_goal"])
        return s, s_option, g, batch["option_reward"], batch["option_mask"]

    @torch.no_grad()
    def option_targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``V_high``'s TD targets ``r_o + gamma m_o V'_high,i(s_{t+n}, g)``, ``(2, B)`` (for inspection and tests)."""
        s, s_option, g, reward, mask = self.option_inputs(batch)
        return td_targets(self.high_value_target, s, s_option, g, reward, mask, self.cfg.gamma)[0]

    def extra_losses(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        s, s_option, g, reward, mask = self.option_inputs(batch)
        loss, v = expectile_value_loss(self.high_value, self.high_value_target, s, s_option, g, reward, mask,
                                       self.cfg.gamma, self.cfg.expectile)
        return loss, {"high_value_loss": loss.detach(), "v_high": v.detach().mean()}

    def high_advantage(self, s: torch.Tensor, s_h: torch.Tensor, g_actor: torch.Tensor) -> torch.Tensor:
        return self.high_value(s_h, g_actor).mean(0) - self.high_value(s, g_actor).mean(0)

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [*super().target_pairs(), (self.high_value_target, self.high_value)]
