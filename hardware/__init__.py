"""Real-robot drivers, the safety layer and emulators for tests.

A Robot is a :class:`robolearn.interfaces.VecEnv` with ``num_envs == 1`` plus
``connect()``/``close()``; drivers arrive with the deployment issue.
"""
