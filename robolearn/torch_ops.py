"""Count the torch ops a piece of code dispatches: on a GPU, each is a kernel launch.

At a few thousand worlds an env step's torch math is bound by launches, not arithmetic: every op costs
the host a few microseconds to dispatch and the GPU one kernel, whatever its size. So the number of ops
per step is what the step's fixed cost scales with, and it can be counted on a CPU. :class:`TorchOps`
(a ``TorchDispatchMode``: it sees each aten op after autograd and composite ops are taken apart, as the
device does) counts them; ``benchmarks/step_launches.py`` tables a Go1 step's against mjlab's, and a test
holds the Go1 step to a budget.
"""

from __future__ import annotations

import collections
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that only make a new view of memory: no kernel, no allocation
VIEWS = frozenset({
    "view", "_unsafe_view", "as_strided", "t", "expand", "detach", "alias", "slice", "select", "unsqueeze",
    "squeeze", "permute", "transpose", "split", "split_with_sizes", "unbind", "_reshape_alias", "lift_fresh",
    "unfold", "diagonal", "narrow", "chunk", "view_as_real", "view_as_complex"})


class TorchOps(TorchDispatchMode):
    """Within ``with TorchOps() as ops:``, ``ops.counts`` counts the aten ops dispatched (views excepted) by
    name, while ``ops.counting`` is set (the default)."""

    def __init__(self, counting: bool = True) -> None:
        super().__init__()
        self.counting = counting
        self.counts: collections.Counter[str] = collections.Counter()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = func.overloadpacket.__name__
        if self.counting and name not in VIEWS:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))
