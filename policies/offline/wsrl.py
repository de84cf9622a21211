"""Offline-to-online fine-tuning agents: CQL/Cal-QL pretrained on a dataset, then SAC online.

One agent class, three presets (``robolearn.finetune_runner`` runs both phases):

- ``wsrl`` (Zhou et al. 2024, "Efficient Online Reinforcement Learning Fine-Tuning Need
  Not Retain Offline Data"): Cal-QL pretraining with a 10-critic LayerNorm ensemble
  (targets from the min of 2 sampled critics); online, ``warmup_steps`` with the frozen
  pretrained policy fill a fresh buffer (the offline data is dropped), then SAC
  (CQL off) at UTD 4, batch 1024, actor lr 1e-4, critic lr 3e-4, target entropy -|A| (its config says 0,
  which its SAC reads as -|A|: ``target_entropy >= 0`` is replaced by ``-action_dim``).
  With ``warmup_steps: 0`` it is the naive fine-tuning baseline.
- ``calql_finetune`` (Nakamoto et al. 2023): Cal-QL keeps its regularizer online and
  draws ``offline_ratio`` of each batch from the offline data.
- ``jsrl`` (Uchendu et al. 2023, "Jump-Start Reinforcement Learning"): a guide controller
  acts for the first h steps of each episode (:mod:`robolearn.jsrl_curriculum`).

The online-phase settings are here with the agent's (the ``agent:`` section is the only
algorithm-specific one); ``runner.total_steps`` counts online env steps and
``runner.utd_ratio`` the online updates per env step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from policies.offline.cql import CQL, CQLConfig
from robolearn.learning_rates import set_configured


@dataclass
class FinetuneConfig(CQLConfig):
    """Cal-QL pretraining (WSRL's ensemble) and the online phase's settings."""

    calql: bool = True
    num_critics: int = 10
    target_critics: int = 2
    layer_norm: bool = True
    actor_q: Literal["min", "mean"] = "min"  # WSRL's SAC: the min over all the critics (REDQ's mean is not its choice)
    # offline phase
    pretrain_updates: int = 1_000_000
    # online phase
    warmup_steps: int = 5000  # env steps acted by the frozen pretrained policy before any update
    offline_ratio: float = 0.0  # share of each online batch drawn from the offline data; 0 drops the data
    online_batch_size: int = 1024
    online_buffer_size: int = 1_000_000  # capped at runner.total_steps
    online_cql_alpha: float = 0.0  # 0: SAC online (WSRL); Cal-QL fine-tuning keeps its alpha
    online_actor_lr: float = 1e-4
    online_critic_lr: float = 3e-4
    # None: keep the pretraining's (-|A|): WSRL's effective target (its config's 0 is read as -|A| by its SAC)
    online_target_entropy: float | None = None
    # JSRL: a guide acts for the first h steps of each episode ("" off)
    guide: str = ""  # "pretrained" (the offline phase's policy) or an exported controller / run directory
    jsrl_horizon: int = 0  # initial h; 0: the env's episode length
    jsrl_step: int = 100  # h shrinks by this many steps at a time
    jsrl_window: int = 5  # finished episodes at the current h before it is judged
    jsrl_threshold: float | None = None  # recent mean return that shrinks h; None: within tolerance of the best
    jsrl_tolerance: float = 0.05


@dataclass
class CalQLFinetuneConfig(FinetuneConfig):
    """Cal-QL fine-tuning: the regularizer stays on and half of each batch is offline data."""

    warmup_steps: int = 0
    offline_ratio: float = 0.5
    online_cql_alpha: float = 5.0
    online_batch_size: int = 256
    online_target_entropy: float | None = None


@dataclass
class JSRLConfig(FinetuneConfig):
    """JSRL with the pretrained policy as guide; the learner fine-tunes like WSRL without warmup."""

    warmup_steps: int = 0
    guide: str = "pretrained"


class Finetune(CQL):
    """CQL/Cal-QL whose hyperparameters switch to the online phase's on :meth:`go_online`."""

    finetune = True

    def go_online(self) -> None:
        """Online hyperparameters (idempotent; a resumed online run calls it before loading state)."""
        cfg = self.cfg
        self.cql_alpha = cfg.online_cql_alpha
        if cfg.online_target_entropy is not None:
            self.target_entropy = float(cfg.online_target_entropy)
        actor, critic, _ = self.optimizer.param_groups
        set_configured(actor, cfg.online_actor_lr)  # (and the tag a resume compares: robolearn/learning_rates.py)
        set_configured(critic, cfg.online_critic_lr)
