"""Specs and synthetic transition batches shared by the policies tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from robolearn.interfaces import Agent
from robolearn.storage import RolloutStorage

OBS_SPEC = {
    "policy": spaces.Box(-np.inf, np.inf, (4,), np.float32),
    "critic": spaces.Box(-np.inf, np.inf, (3,), np.float32),
}
ACTION_SPEC = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 2.0], np.float32))


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny networks run as fast on one thread, and stay fast when other processes share the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _random_obs(num_envs: int) -> dict[str, torch.Tensor]:
    return {name: torch.randn(num_envs, *space.shape) * 3 + 1 for name, space in OBS_SPEC.items()}


def _assert_same(a: Any, b: Any) -> None:
    """Equal to the bit, through nested dicts, lists and tensors (a resumed agent's state)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    else:
        assert a == b


@pytest.fixture
def assert_same() -> Callable[[Any, Any], None]:
    """Compare two states to the bit (nested dicts, lists, tensors)."""
    return _assert_same


@pytest.fixture
def obs_spec() -> dict[str, spaces.Box]:
    """Two groups: ``policy`` (4) and privileged ``critic`` (3)."""
    return OBS_SPEC


@pytest.fixture
def action_spec() -> spaces.Box:
    """Asymmetric, non-unit bounds, so action scaling is exercised."""
    return ACTION_SPEC


@pytest.fixture
def random_obs() -> Callable[[int], dict[str, torch.Tensor]]:
    return _random_obs


@pytest.fixture
def make_rollout() -> Callable[[Agent, int, int], dict[str, Any]]:
    """A rollout collected by ``agent.act`` on random observations, with random rewards and episode ends."""

    def make(agent: Agent, num_envs: int, steps: int) -> dict[str, Any]:
        storage, obs = RolloutStorage(steps, torch.device("cpu")), _random_obs(num_envs)
        for _ in range(steps):
            out = agent.act(obs, explore=True)
            next_obs = _random_obs(num_envs)
            terminated, truncated = torch.rand(num_envs) < 0.1, torch.rand(num_envs) < 0.1
            storage.add({"obs": obs, "next_obs": next_obs, "reward": torch.randn(num_envs),
                         "terminated": terminated, "truncated": truncated & ~terminated, **out})
            agent.reset(terminated | truncated)
            obs = _random_obs(num_envs)
        return storage.data

    return make


@pytest.fixture
def make_replay_batch() -> Callable[[int], dict[str, Any]]:
    """A replay minibatch with env-unit actions inside ``ACTION_SPEC``."""

    def make(batch_size: int) -> dict[str, Any]:
        low, high = torch.as_tensor(ACTION_SPEC.low), torch.as_tensor(ACTION_SPEC.high)
        return {
            "obs": _random_obs(batch_size),
            "next_obs": _random_obs(batch_size),
            "action": low + (high - low) * torch.rand(batch_size, 2),
            "reward": torch.randn(batch_size),
            "terminated": torch.rand(batch_size) < 0.2,
            "truncated": torch.rand(batch_size) < 0.2,
        }

    return make
