"""Which process is training a run directory, so that two never write one run.

A training process holds an exclusive ``flock`` on ``<run>/run.lock`` (which names its pid,
host and start time) until it ends. The kernel drops the lock when the process dies, so a
killed run never leaves a stale claim behind: a leftover file without a lock means "not in
use". A second ``train --resume`` of the same run is refused instead of interleaving its
checkpoints with the first's, and ``robolearn list`` tells a run that is training now from
one that stopped unfinished. Advisory and POSIX-only (``fcntl``), as the rest of the CLI.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from datetime import datetime
from pathlib import Path

from robolearn.config import ConfigError

LOCK_NAME = "run.lock"


class RunLock:
    """The claim of this process on ``run_dir`` while it trains; ``release()`` (or exit) frees it."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        while True:
            self._file = open(self.path, "a+")
            if not _lock(self._file):
                self._file.close()
                raise ConfigError(f"{run_dir}: being trained now by {_holder_text(self.path)}; two processes "
                                  "writing one run would interleave its checkpoints. Wait for it to end, or stop "
                                  "it (Ctrl+C saves a checkpoint) and resume then") from None
            if _same_file(self._file, self.path):
                break
            self._file.close()  # locked a file its holder unlinked on release just now: take the new one
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"pid {os.getpid()} on {socket.gethostname()} since {datetime.now():%Y-%m-%d %H:%M:%S}\n")
        self._file.flush()

    def release(self) -> None:
        if self._file.closed:
            return
        self.path.unlink(missing_ok=True)  # while still held: nobody else can be reading it as "in use"
        self._file.close()  # drops the lock


def _lock(file) -> bool:
    """Take ``file``'s exclusive lock, waiting up to ~1 s: a `robolearn list` holds a shared one for an instant."""
    for _ in range(20):
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            time.sleep(0.05)
    return False


def holder(run_dir: Path) -> str | None:
    """Who trains ``run_dir`` now ("pid 123 on host since ..."), or None when nobody does."""
    path = Path(run_dir) / LOCK_NAME
    try:
        with open(path) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _holder_text(path)
    except FileNotFoundError:
        pass
    return None


def _same_file(file, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(file.fileno()), os.stat(path))
    except FileNotFoundError:
        return False


def _holder_text(path: Path) -> str:
    try:
        return path.read_text().strip() or "another process"
    except OSError:
        return "another process"
