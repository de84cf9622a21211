"""The worlds an automatic reset touches: an index list, or a mask over every world.

Listing the worlds whose episode ended (``done.nonzero()``) is free on CPU, and on a GPU it is a host
sync every step: the CPU has to wait for the queue to drain to learn how many there are. There a
:class:`~sims.task.TaskEnv` whose task allows it resets by the mask instead: every world draws, and the
masked ones take their draw. It tells wrappers which way it went (``info["reset_ids"]``, or none), and
they write their own per-world state the same way through :class:`Worlds`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


def where_rows(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Rows of ``a`` where ``mask`` ``(num_worlds,)`` else rows of ``b``, for any trailing shape."""
    return torch.where(mask.view(-1, *([1] * (a.dim() - 1))), a, b)


def zero_rows(mask: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``value`` ``(num_worlds, ...)`` with its rows where ``mask`` set to zero."""
    return value.masked_fill(mask.view(-1, *([1] * (value.dim() - 1))), 0)


def put_rows_(mask: torch.Tensor, rows: torch.Tensor, target: torch.Tensor) -> None:
    """``target``'s rows where ``mask`` ``(num_worlds,)`` replaced by those of ``rows``, in place: one kernel
    (:func:`where_rows` then a copy is two, and these run for every world on every step of a GPU env)."""
    torch.where(mask.view(-1, *([1] * (target.dim() - 1))), rows.to(target.dtype), target, out=target)


@dataclass(frozen=True)
class Worlds:
    """Either ``ids`` (indices) or ``mask`` (one bool per world)."""

    ids: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    @classmethod
    def of_step(cls, info: dict[str, Any], done: torch.Tensor) -> Worlds:
        """The worlds an env's step reset: its ``info["reset_ids"]`` where it listed them, else ``done``."""
        ids = info.get("reset_ids")
        return cls(mask=done) if ids is None else cls(ids=ids)

    def __len__(self) -> int:
        """How many draws a reset makes: one per listed world, or one for every world."""
        return len(self.ids) if self.ids is not None else len(self.mask)

    @property
    def maybe_any(self) -> bool:
        """False only when the list is known to be empty (read on the host: never a sync)."""
        return self.ids is None or len(self.ids) > 0

    def take(self, values: torch.Tensor) -> torch.Tensor:
        """The rows of ``values`` ``(num_worlds, ...)`` a reset draws for."""
        return values if self.ids is None else values[self.ids]

    def merged(self, target: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``target`` with these worlds' rows replaced by ``rows`` (as :meth:`take` shapes them)."""
        return where_rows(self.mask, rows, target) if self.ids is None else target.index_put((self.ids,), rows)

    def put_(self, target: torch.Tensor, rows: torch.Tensor) -> None:
        """:meth:`merged`, in place."""
        if self.ids is None:
            put_rows_(self.mask, rows, target)
        else:
            target[self.ids] = rows.to(target.dtype)

    def fill(self, line: Any, values: torch.Tensor) -> None:
        """Make these worlds' rows of ``values`` ``(num_worlds, ...)`` the whole past of ``line`` (a
        :class:`~sims.delay.DelayLine`): a new episode has no past."""
        if self.ids is None:
            line.fill_where(self.mask, values)
        else:
            line.fill(self.ids, values[self.ids])

    def set_model_field(self, sim: Any, name: str, rows: torch.Tensor, **kwargs: Any) -> None:
        """Model field ``name`` of these worlds set to ``rows`` on backend ``sim``."""
        if self.ids is None:
            sim.set_model_field_where(name, self.mask, rows, **kwargs)
        else:
            sim.set_model_field(name, rows, self.ids, **kwargs)
