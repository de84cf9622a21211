"""Adapters between our VecEnv and other simulators' and learners' APIs."""

from __future__ import annotations

from typing import Any


def group_space(env: Any, group: str, adapter: str) -> Any:
    """The space of observation group ``group`` of our VecEnv ``env``, which ``adapter`` hands on as its
    observation; a group the env does not have is named with the ones it has (it had been a bare KeyError)."""
    if group not in env.observation_spec:
        raise ValueError(f"{adapter}(group={group!r}): {type(env).__name__} has no observation group {group!r}; "
                         f"its groups: {sorted(env.observation_spec)}")
    return env.observation_spec[group]
