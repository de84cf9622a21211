"""Where a warning about how the caller set something up is said: at the caller's own line, however deep in our
packages (and torch's ``no_grad`` wrappers) the code that warns is."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

_HERE = Path(__file__).parents[1]
_OURS = tuple(str(folder) + os.sep  # (a separator: robolearn_scripts/ is not ours)
              for folder in [_HERE / name for name in ("robolearn", "sims", "hardware", "policies")]
              + [Path(torch.__file__).parent])


def outside_us() -> int:
    """The ``stacklevel`` of the first caller outside robolearn's packages and torch, for ``warnings.warn`` in the
    function that calls this."""
    frame, level = sys._getframe(2), 2  # (2: the caller of the function that warns)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_OURS):  # (the outermost frame at most:
        frame, level = frame.f_back, level + 1  # a level past it would be said as 'sys:1')
    return level
