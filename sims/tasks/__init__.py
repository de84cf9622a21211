"""Tasks: small classes over batched MuJoCo state (see :class:`sims.task.Task`)."""
