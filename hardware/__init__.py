"""Real-robot drivers, the safety layer and emulators for tests.

A Robot (``hardware/robot.py``) is a :class:`robolearn.interfaces.VecEnv` with ``num_envs == 1`` plus
``with robot:`` (connect, and a safe stop on every exit), the safety layer and a watchdog. A driver for
another robot subclasses it and implements the link and the task; ``hardware/dxl_arm.py`` is one.
"""
