"""robolearn: batched simulation, learning algorithms and robot drivers behind one Controller interface.

Start with :mod:`robolearn.interfaces`. Python entry points::

    from robolearn import load_config, train
    result = train(load_config("ppo_cartpole", ["runner.total_steps=200000"]))
"""

import os
import sys

# MuJoCo picks its OpenGL backend when first imported. Without a display, use
# OSMesa (software, Debian's libosmesa6) unless the user chose one (e.g. egl on a GPU).
if sys.platform.startswith("linux") and "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "osmesa"
    os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from robolearn.config import load_config  # noqa: E402
from robolearn.interfaces import Agent, Controller, Obs, Step, VecEnv  # noqa: E402


def train(*args, **kwargs):
    """See :func:`robolearn.runner.train` (imported lazily: it pulls in sims and policies)."""
    from robolearn.runner import train as _train

    return _train(*args, **kwargs)


__all__ = ["Agent", "Controller", "Obs", "Step", "VecEnv", "load_config", "train"]
