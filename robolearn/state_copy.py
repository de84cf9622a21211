"""A copy of a nested state (an agent's ``state_dict``) in buffers kept from one copy to the next.

The runner copies the agent's state at every iteration's start, so that a Ctrl+C in the iteration can go
back to it. ``copy.deepcopy`` allocates and fills each tensor anew: about six torch ops per tensor, 520 for a
Go1 PPO agent's 85 tensors, each a kernel launch on a GPU. Once the buffers exist, :class:`StateCopy` fills
them with one ``torch._foreach_copy_`` (a few multi-tensor kernels on a GPU, one op here).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten


class StateCopy:
    """``take(state)`` returns a copy of ``state`` (nested dicts, lists and tuples of tensors and Python values)
    whose tensors are this object's buffers: valid until the next ``take``, which overwrites them in place.
    New buffers are made when the state's structure, or a tensor's shape, dtype or device, changes (the
    optimizer's moments appear after its first step)."""

    def __init__(self) -> None:
        self._spec: Any = None
        self._buffers: list[torch.Tensor] = []

    def take(self, state: Any) -> Any:
        leaves, spec = tree_flatten(state)
        tensors = [leaf.detach() for leaf in leaves if isinstance(leaf, torch.Tensor)]
        if self._fits(spec, tensors):
            torch._foreach_copy_(self._buffers, tensors)
        else:
            self._spec, self._buffers = spec, [tensor.clone() for tensor in tensors]
        buffers = iter(self._buffers)
        return tree_unflatten([next(buffers) if isinstance(leaf, torch.Tensor) else copy.deepcopy(leaf)
                               for leaf in leaves], spec)

    def _fits(self, spec: Any, tensors: list[torch.Tensor]) -> bool:
        return spec == self._spec and all(
            (buffer.shape, buffer.dtype, buffer.device) == (tensor.shape, tensor.dtype, tensor.device)
            for buffer, tensor in zip(self._buffers, tensors))
