"""Learning algorithms and the controllers they produce.

``AGENTS`` maps an algorithm name to ``(ConfigClass, AgentClass)``; an agent is
built as ``AgentClass(observation_spec, action_spec, ConfigClass(...), device)``.
:func:`agent_entry` finds either for a name, or for ``module:Class`` (an algorithm of one's own).
Offline agents (``policies.offline``) have ``offline = True`` and are trained
from a dataset by ``robolearn.offline_runner``; agents with ``pretrains = True``
(``policies.skills``) are pretrained on a dataset by the online runner first.
"""

import dataclasses

from policies.goal import GCBC, GCIQL, HIQL, HRAC, OTA, GCBCConfig, GCIQLConfig, HIQLConfig, HRACConfig, OTAConfig
from policies.offline import (BC, CQL, IQL, TD3BC, BCConfig, CalQLConfig, CalQLFinetuneConfig, CQLConfig, Finetune,
                              FinetuneConfig, IQLConfig, JSRLConfig, TD3BCConfig)
from policies.ppo import PPO, PPOConfig
from policies.sac import SAC, SACConfig
from policies.sequence_critic import SequenceCriticConfig, SequenceCriticSAC
from policies.skills import SPiRL, SkillCritic, SkillCriticConfig, SPiRLConfig
from policies.srl import SRL, SRLConfig

AGENTS = {"ppo": (PPOConfig, PPO), "sac": (SACConfig, SAC), "srl": (SRLConfig, SRL),
          "sac_as": (SequenceCriticConfig, SequenceCriticSAC), "bc": (BCConfig, BC), "td3bc": (TD3BCConfig, TD3BC),
          "iql": (IQLConfig, IQL), "cql": (CQLConfig, CQL), "calql": (CalQLConfig, CQL),
          # offline goal-conditioned, goals relabeled from the dataset (policies.goal)
          "gcbc": (GCBCConfig, GCBC), "gciql": (GCIQLConfig, GCIQL), "hiql": (HIQLConfig, HIQL),
          "ota": (OTAConfig, OTA),
          # online goal-conditioned hierarchy: adjacency-constrained subgoals (policies.goal.hrac)
          "hrac": (HRACConfig, HRAC),
          # skills pretrained on a dataset (`dataset=`), then trained online in the same run (policies.skills)
          "spirl": (SPiRLConfig, SPiRL), "skill_critic": (SkillCriticConfig, SkillCritic),
          # offline-to-online: pretrained on a dataset, fine-tuned online (robolearn.finetune_runner)
          "wsrl": (FinetuneConfig, Finetune), "calql_finetune": (CalQLFinetuneConfig, Finetune), "jsrl": (JSRLConfig, Finetune)}



def agent_entry(algo: str) -> tuple[type, type]:
    """``(ConfigClass, AgentClass)`` of ``algo``: a name in :data:`AGENTS`, or ``module:Class`` for an
    algorithm of one's own (imported as ``robolearn.plugins.import_named`` says): a
    :class:`~robolearn.interfaces.Agent` subclass whose ``config_class`` is the dataclass of its settings,
    the config's ``agent:`` section."""
    from robolearn.config import ConfigError
    from robolearn.interfaces import Agent
    from robolearn.plugins import import_named

    if algo in AGENTS:
        return AGENTS[algo]
    if ":" not in algo:
        raise ConfigError(f"algo: '{algo}' is not known; choose one of {sorted(AGENTS)}, or module:Class for an "
                          "Agent of your own")
    agent_cls = import_named(algo, "algo")
    if not (isinstance(agent_cls, type) and issubclass(agent_cls, Agent)):
        raise ConfigError(f"algo={algo}: not a robolearn.interfaces.Agent subclass")
    config_cls = getattr(agent_cls, "config_class", None)
    if not (isinstance(config_cls, type) and dataclasses.is_dataclass(config_cls)):
        raise ConfigError(f"algo={algo}: set {agent_cls.__name__}.config_class to the dataclass of its settings "
                          "(what the config's agent: section fills)")
    return config_cls, agent_cls


__all__ = ["AGENTS", "agent_entry", "BC", "BCConfig", "CQL", "CQLConfig", "CalQLConfig", "IQL", "IQLConfig", "PPO", "PPOConfig",
           "SAC", "SACConfig", "SRL", "SRLConfig", "SequenceCriticConfig", "SequenceCriticSAC", "TD3BC", "TD3BCConfig",
           "Finetune", "FinetuneConfig", "CalQLFinetuneConfig", "JSRLConfig", "GCBC", "GCBCConfig", "GCIQL",
           "GCIQLConfig", "HIQL", "HIQLConfig", "HRAC", "HRACConfig", "OTA", "OTAConfig", "SPiRL", "SPiRLConfig", "SkillCritic",
           "SkillCriticConfig"]
