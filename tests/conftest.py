"""Suite-wide setup.

- robolearn picks a headless GL backend (OSMesa) when there is no display, and
  must do so before any test module imports mujoco.
- Tests that press Ctrl+C (SIGINT) need Python's KeyboardInterrupt handler even
  when the suite was started in the background, where SIGINT arrives ignored.
"""

import signal

import robolearn  # noqa: F401

signal.signal(signal.SIGINT, signal.default_int_handler)
