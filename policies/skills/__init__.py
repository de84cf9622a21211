"""Hierarchical skill controllers: skills learned from a dataset, a high level that picks one
every H steps (SPiRL), and a low level refined online (Skill-Critic); one file per idea."""

from policies.skills.controller import SkillController
from policies.skills.skill_critic import SkillCritic, SkillCriticConfig
from policies.skills.spirl import SPiRL, SPiRLConfig

__all__ = ["SPiRL", "SPiRLConfig", "SkillController", "SkillCritic", "SkillCriticConfig"]
