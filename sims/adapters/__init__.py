"""Adapters between our VecEnv and other simulators' and learners' APIs."""
