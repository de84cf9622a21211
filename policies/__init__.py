"""Learning algorithms and the controllers they produce.

``AGENTS`` maps an algorithm name to ``(ConfigClass, AgentClass)``; an agent is
built as ``AgentClass(observation_spec, action_spec, ConfigClass(...), device)``.
"""

from policies.ppo import PPO, PPOConfig
from policies.sac import SAC, SACConfig

AGENTS = {"ppo": (PPOConfig, PPO), "sac": (SACConfig, SAC)}

__all__ = ["AGENTS", "PPO", "PPOConfig", "SAC", "SACConfig"]
