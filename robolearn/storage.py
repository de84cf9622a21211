"""Transition storage on the torch device: a rollout for on-policy agents and a
ring-buffer replay for off-policy ones. Both hold the same transition layout
(see :class:`robolearn.interfaces.Agent`): nested dicts of tensors."""

from __future__ import annotations

from typing import Any

import torch

Batch = dict[str, Any]  # str -> Tensor, or str -> dict[str, Tensor] for obs groups


def map_batch(batch: Batch, fn) -> Batch:
    """``fn`` applied to every leaf, the nesting kept."""
    return {k: map_batch(v, fn) if isinstance(v, dict) else fn(v) for k, v in batch.items()}


def _allocate(example: Batch, leading: tuple[int, ...], device: torch.device) -> Batch:
    return map_batch(example, lambda t: torch.zeros(leading + tuple(t.shape[1:]), dtype=t.dtype, device=device))


def write_batch(dst: Batch, src: Batch, index: Any) -> None:
    """``dst[index] = src`` leaf by leaf (tensors or numpy arrays)."""
    for k, v in src.items():
        if isinstance(v, dict):
            write_batch(dst[k], v, index)
        else:
            dst[k][index] = v


class RolloutStorage:
    """``steps`` consecutive transitions of every env: leaves are ``(steps, num_envs, ...)``."""

    def __init__(self, steps: int, device: torch.device) -> None:
        self.steps, self.device = steps, device
        self.data: Batch | None = None
        self.step = 0

    def add(self, transition: Batch) -> None:
        if self.step >= self.steps:
            raise RuntimeError("rollout is full: clear() it (or start a new RolloutStorage) after the update")
        if self.data is None:
            num_envs = next(iter(_leaves(transition))).shape[0]
            self.data = _allocate(transition, (self.steps, num_envs), self.device)
        write_batch(self.data, transition, self.step)
        self.step += 1

    @property
    def full(self) -> bool:
        return self.step == self.steps

    def clear(self) -> None:
        self.step = 0


class ReplayBuffer:
    """A ring buffer of single transitions (leaves ``(capacity, ...)``), sampled uniformly."""

    def __init__(self, capacity: int, device: torch.device) -> None:
        self.capacity, self.device = capacity, device
        self.data: Batch | None = None
        self.position = 0
        self.size = 0

    def add(self, transition: Batch) -> None:
        """Add a batch of transitions whose leaves are ``(n, ...)``."""
        n = next(iter(_leaves(transition))).shape[0]
        if self.data is None:
            self.data = _allocate(transition, (self.capacity,), self.device)
        index = (torch.arange(n, device=self.device) + self.position) % self.capacity
        write_batch(self.data, transition, index)
        self.position = (self.position + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        if self.size == 0 or self.data is None:
            raise RuntimeError("cannot sample from an empty replay buffer")
        index = torch.randint(0, self.size, (batch_size,), device=self.device, generator=generator)
        return map_batch(self.data, lambda t: t[index])

    def end_episodes_at_newest(self, rows: int) -> None:
        """Mark the newest ``rows`` transitions (the last step of ``rows`` envs) as ends of their episodes
        (truncated: bootstrapped from their real ``next_obs``). A resume starts every env on a fresh episode,
        so a window of steps (a skill's, an n-step return's) must not run on across that seam into another."""
        if self.data is None or self.size == 0 or "truncated" not in self.data:
            return
        newest = (self.position - 1 - torch.arange(min(rows, self.size), device=self.device)) % self.capacity
        self.data["truncated"][newest] = True

    def state_dict(self) -> dict[str, Any]:
        """Position, size and the filled rows only: a run a few thousand steps into a 1M buffer saves those,
        not the whole allocation (until the ring wraps, the filled rows are the first ``size``)."""
        data = self.data
        if data is not None and self.size < self.capacity:
            data = map_batch(data, lambda t: t[: self.size].clone())  # a view would save the whole storage
        return {"data": data, "position": self.position, "size": self.size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a saved buffer into this one, whose capacity may differ (a resumed run given more steps
        sizes its buffer anew): the saved rows go in oldest first and, if they do not all fit, the newest
        are kept, so every row below ``size`` is a real transition and the next write overwrites the oldest."""
        data, position, size = state["data"], int(state["position"]), int(state["size"])
        if data is None:
            self.data, self.position, self.size = None, 0, 0
            return
        if next(iter(_leaves(data))).shape[0] == self.capacity:  # the same ring, as it was
            self.data = map_batch(data, lambda t: t.to(self.device))
            self.position, self.size = position % self.capacity, size
            return
        # The filled rows are the first ``size`` (files saved before the filled rows alone were saved hold the
        # whole allocation), oldest first once rolled to the write position (a ring that has not wrapped
        # was written up to position == size, and rolls onto itself).
        kept = min(size, self.capacity)
        rows = map_batch(data, lambda t: t[:size].roll(-position, 0)[size - kept:].to(self.device))
        self.data = _allocate(rows, (self.capacity,), self.device)
        write_batch(self.data, rows, slice(0, kept))
        self.position, self.size = kept % self.capacity, kept


def _leaves(batch: Batch):
    for v in batch.values():
        if isinstance(v, dict):
            yield from _leaves(v)
        else:
            yield v
