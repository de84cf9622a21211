"""What robolearn writes for other programs is strict JSON, non-finite floats included, and reads back."""

import json
import math

import numpy as np
import pytest

from robolearn import strict_json


def strict_loads(text: str):
    """json.loads as jq and JavaScript read: Infinity and NaN are errors."""
    def refuse(constant: str):
        raise ValueError(f"{constant} is not strict JSON")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_floats_are_written_as_strings_and_read_back():
    value = {"obs_divergence": [0.5, math.inf, -math.inf, math.nan], "peak": np.float64("nan"), "steps": 3,
             "nested": ({"z": [0.7, math.inf]},)}
    with pytest.raises(ValueError, match="not strict"):
        strict_loads(json.dumps(value))  # what had been written
    read = strict_loads(strict_json.dumps(value, indent=2))
    assert read["obs_divergence"] == [0.5, "inf", "-inf", "nan"] and read["peak"] == "nan"
    back = strict_json.from_finite_json(read)
    assert back["obs_divergence"][:3] == [0.5, math.inf, -math.inf] and math.isnan(back["obs_divergence"][3])
    assert back["nested"] == [{"z": [0.7, math.inf]}] and back["steps"] == 3
    assert strict_json.from_finite_json(json.loads('[Infinity, "other"]')) == [math.inf, "other"]  # older files


def test_objects_json_cannot_write_go_through_default():
    from pathlib import Path

    assert strict_loads(strict_json.dumps({"run": Path("/tmp/x"), "v": math.inf}, default=str)) == {"run": "/tmp/x",
                                                                                                      "v": "inf"}
