"""Lists in messages: the first few items, then how many more, so an error about 3,000 episodes stays a line."""

from __future__ import annotations

from collections.abc import Sequence


def few(items: Sequence[object], shown: int = 5, sep: str = ", ") -> str:
    """``items`` for a message: the first ``shown``, then ``and N more``; ``nothing`` for none."""
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return sep.join(map(str, items[:shown])) + more if items else "nothing"
