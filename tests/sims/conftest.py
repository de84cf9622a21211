"""Shared setup for the simulator tests: headless rendering through OSMesa."""

import os

# Must be set before mujoco creates a GL context; an explicit setting wins.
os.environ.setdefault("MUJOCO_GL", "osmesa")
