"""A copy of a nested state (an agent's ``state_dict``) in buffers kept from one copy to the next.

The runner copies the agent's state at every iteration's start, so that a Ctrl+C in the iteration can go
back to it. ``copy.deepcopy`` allocates and fills each tensor anew: about 7 dispatched torch ops per tensor
(534 for a Go1 PPO agent's 76 tensors; an allocation, metadata and one copy kernel each). Once the buffers
exist, :class:`StateCopy` fills them with one ``torch._foreach_copy_`` per dtype and device (the multi-tensor
kernels a GPU runs only for tensors of one dtype): three ops here, a few kernels on a GPU.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten


class StateCopy:
    """``take(state)`` returns a copy of ``state`` (nested dicts, lists and tuples of tensors and Python values)
    whose tensors are this object's buffers: valid until the next ``take``, which overwrites them in place
    (load it with :func:`fresh`, so that what loads it does not keep the buffers as its own).
    New buffers are made when the state's structure, or a tensor's shape, dtype or device, changes (the
    optimizer's moments appear after its first step)."""

    def __init__(self) -> None:
        self._spec: Any = None
        self._buffers: list[torch.Tensor] = []
        self._groups: list[list[int]] = []  # indices of the buffers of each (device, dtype)

    def take(self, state: Any) -> Any:
        leaves, spec = tree_flatten(state)
        tensors = [leaf.detach() for leaf in leaves if isinstance(leaf, torch.Tensor)]
        if self._fits(spec, tensors):
            for group in self._groups:
                torch._foreach_copy_([self._buffers[i] for i in group], [tensors[i] for i in group])
        else:
            self._spec, self._buffers = spec, [tensor.clone() for tensor in tensors]
            groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
            for i, tensor in enumerate(tensors):
                groups.setdefault((tensor.device, tensor.dtype), []).append(i)
            self._groups = list(groups.values())
        buffers = iter(self._buffers)
        return tree_unflatten([next(buffers) if isinstance(leaf, torch.Tensor) else copy.deepcopy(leaf)
                               for leaf in leaves], spec)

    def _fits(self, spec: Any, tensors: list[torch.Tensor]) -> bool:
        return spec == self._spec and all(
            (buffer.shape, buffer.dtype, buffer.device) == (tensor.shape, tensor.dtype, tensor.device)
            for buffer, tensor in zip(self._buffers, tensors))


def fresh(state: Any) -> Any:
    """``state`` with its tensors cloned: what to load from a :class:`StateCopy` copy. An optimizer's
    ``load_state_dict`` keeps the tensors it is given when their dtype and device already fit, and the live
    moments would then be the copy's buffers, which the next ``take`` and every step after would change."""
    return tree_map(lambda leaf: leaf.clone() if isinstance(leaf, torch.Tensor) else leaf, state)
