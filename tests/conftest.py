"""Suite-wide setup: robolearn picks a headless GL backend (OSMesa) when there is no
display, and must do so before any test module imports mujoco."""

import robolearn  # noqa: F401
