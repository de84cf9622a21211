"""What our exports keep beside a format's own files (D4RL's ``robolearn_metadata`` attribute, LeRobot's
``meta/robolearn.json``: task, task settings, reference scores, control period), read back on import.

The file may come from anywhere, so what is read is checked: text that is not a JSON object, or a key an
import uses holding a value of the wrong kind, is warned and left out (the episodes themselves are still
good), rather than failing deep inside the import with a message that names neither file nor key.
"""

from __future__ import annotations

import json
import math
import numbers
import warnings
from typing import Any

def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


# The keys an import reads, and what each must be.
KINDS: dict[str, tuple[str, Any]] = {
    "task": ("a task name (text)", lambda v: isinstance(v, str) and v.strip() != ""),
    "task_kwargs": ("a mapping of task settings", lambda v: isinstance(v, dict)),
    "ref_min_score": ("a finite number", _number),
    "ref_max_score": ("a finite number", _number),
    "control_dt": ("a number of seconds above 0", lambda v: _number(v) and v > 0),
    "unjudged_episodes": ("a list of episode numbers", lambda v: isinstance(v, list) and all(  # (LeRobot's)
        isinstance(i, int) and not isinstance(i, bool) for i in v)),
}


def read_embedded(text: str | bytes, where: str) -> dict[str, Any]:
    """The metadata object in ``text`` (``where`` names its file and key in warnings); {} if unusable."""
    try:
        meta = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as err:
        warnings.warn(f"{where}: not readable JSON ({type(err).__name__}), left out: the task and its settings are "
                      "not known from it", stacklevel=3)
        return {}
    if not isinstance(meta, dict):
        warnings.warn(f"{where}: a JSON {type(meta).__name__}, not an object, left out: the task and its settings "
                      "are not known from it", stacklevel=3)
        return {}
    for key, (kind, fits) in KINDS.items():
        if meta.get(key) is not None and not fits(meta[key]):
            warnings.warn(f"{where}: '{key}' is {meta[key]!r}, not {kind}; left out", stacklevel=3)
            del meta[key]
    refs = [key for key in ("ref_min_score", "ref_max_score") if meta.get(key) is not None]
    if len(refs) == 1:  # a normalized score needs both
        warnings.warn(f"{where}: '{refs[0]}' without its partner (reference scores go in pairs); left out",
                      stacklevel=3)
        del meta[refs[0]]
    return meta
