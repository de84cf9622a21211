"""Strict JSON for what robolearn writes for other programs: ``controller.json``, ``eval.json``,
``deploy.json`` and the ``--json`` lines of the command line.

Python writes a float JSON has no number for as ``Infinity`` or ``NaN``, which ``jq``, JavaScript and other
strict readers refuse; a diverged replay or an infinite task setting (hopper's ``healthy_z_range``) has them.
They are written as the strings of :data:`NON_FINITE` instead, and :func:`from_finite_json` reads them back
(files of older exports, which wrote ``Infinity``, read as before).
"""

from __future__ import annotations

import json
import math
from typing import Any

NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
"""The strings that stand for the floats strict JSON has no number for."""


def finite_json(value: Any) -> Any:
    """``value`` (JSON data) with every infinite or NaN float as its :data:`NON_FINITE` string."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else "inf" if value > 0 else "-inf"
    if isinstance(value, (list, tuple)):
        return [finite_json(item) for item in value]
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    return value


def from_finite_json(value: Any) -> Any:
    """``value`` read from JSON with the :data:`NON_FINITE` strings as the floats they stand for."""
    if isinstance(value, str):
        return NON_FINITE.get(value, value)
    if isinstance(value, list):
        return [from_finite_json(item) for item in value]
    if isinstance(value, dict):
        return {key: from_finite_json(item) for key, item in value.items()}
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` of ``value`` as strict JSON (``kwargs``: ``indent``, ``default``...)."""
    return json.dumps(finite_json(value), allow_nan=False, **kwargs)
