"""Learning algorithms and the controllers they produce.

``AGENTS`` maps an algorithm name to ``(ConfigClass, AgentClass)``; an agent is
built as ``AgentClass(observation_spec, action_spec, ConfigClass(...), device)``.
"""

from policies.ppo import PPO, PPOConfig
from policies.sac import SAC, SACConfig
from policies.sequence_critic import SequenceCriticConfig, SequenceCriticSAC
from policies.srl import SRL, SRLConfig

AGENTS = {"ppo": (PPOConfig, PPO), "sac": (SACConfig, SAC), "srl": (SRLConfig, SRL),
          "sac_as": (SequenceCriticConfig, SequenceCriticSAC)}

__all__ = ["AGENTS", "PPO", "PPOConfig", "SAC", "SACConfig", "SRL", "SRLConfig", "SequenceCriticConfig",
           "SequenceCriticSAC"]
