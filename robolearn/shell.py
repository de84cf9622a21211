"""Command lines printed for a person to paste: ``robolearn train --resume RUN`` and the like.

A run's folder is named after its config's ``name``, which may hold spaces or quotes; printed bare, the
pasted command would split it into several arguments.
"""

from __future__ import annotations

import shlex
from pathlib import Path


def shell(*words: str | Path) -> str:
    """``words`` as one command line, each quoted only where a shell needs it."""
    return " ".join(shlex.quote(str(word)) for word in words)


def train_anew(run: str | Path, *flags: str) -> str:
    """The command that trains ``run``'s settings anew, into a new folder beside it: the run's own
    ``config.yaml`` (as it resolved them when it started), for a run with nothing to resume."""
    return shell("robolearn", "train", Path(run) / "config.yaml", *flags)
