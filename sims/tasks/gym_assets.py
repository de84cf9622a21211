"""The MJCF files that ship inside the installed ``gymnasium`` package.

The Gymnasium-compatible tasks load these rather than copies, so their physics
is exactly the one published returns were measured on.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium


def gym_asset(filename: str) -> str:
    """Path of ``gymnasium/envs/mujoco/assets/<filename>``."""
    path = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / filename
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is gymnasium[mujoco] installed?")
    return str(path)
