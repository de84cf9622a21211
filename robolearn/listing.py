"""Lists and counts in messages: the first few items, then how many more, so an error about 3,000 episodes stays a
line; "1 episode", not "1 episodes"."""

from __future__ import annotations

from collections.abc import Sequence


def few(items: Sequence[object], shown: int = 5, sep: str = ", ") -> str:
    """``items`` for a message: the first ``shown``, then ``and N more``; ``nothing`` for none."""
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return sep.join(map(str, items[:shown])) + more if items else "nothing"


def counted(n: int, noun: str) -> str:
    """``"1 episode"``, ``"10 episodes"``: ``n`` and ``noun``, plural where ``n`` is not 1."""
    return f"{n:,} {noun}{'s' * (n != 1)}"
