"""The MJCF files that ship inside the installed ``gymnasium`` package.

The Gymnasium-compatible tasks load these rather than copies, so their physics
is exactly the one published returns were measured on.
"""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium
import mujoco


def gym_asset(filename: str) -> str:
    """Path of ``gymnasium/envs/mujoco/assets/<filename>``."""
    path = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / filename
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is gymnasium[mujoco] installed?")
    return str(path)


def gym_model(filename: str) -> mujoco.MjModel:
    """The compiled model of ``gym_asset(filename)``. A ``settotalmass`` compiler attribute (half_cheetah's),
    which MuJoCo deprecates (a warning on every load, and an error once removed), is applied as MuJoCo says to:
    ``mj_setTotalmass`` and ``mj_setConst`` on the compiled model, which gives the same model to the bit."""
    path = gym_asset(filename)
    text = Path(path).read_text()
    total = re.search(r'\s+settotalmass="([^"]+)"', text)
    if total is None or "file=" in text:  # meshes or includes resolve against the file's folder: loaded from it
        return mujoco.MjModel.from_xml_path(path)
    model = mujoco.MjModel.from_xml_string(text.replace(total.group(0), "", 1))
    mujoco.mj_setTotalmass(model, float(total.group(1)))
    mujoco.mj_setConst(model, mujoco.MjData(model))
    return model
