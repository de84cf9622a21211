"""One process trains a run at a time, and a killed one leaves no claim behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from robolearn.config import ConfigError
from robolearn.run_lock import LOCK_NAME, RunLock, holder

HOLD = "import sys; from robolearn.run_lock import RunLock; lock = RunLock(sys.argv[1]); print('held', flush=True); sys.stdin.read()"


def test_a_run_held_by_another_process_is_refused_until_that_process_dies(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        assert holder(tmp_path).startswith(f"pid {other.pid} on ")
        with pytest.raises(ConfigError, match=rf"being trained now by pid {other.pid} on .*Ctrl\+C saves a checkpoint"):
            RunLock(tmp_path)
    finally:
        other.send_signal(signal.SIGKILL)  # no release: the kernel drops the lock with the process
        other.wait()
    assert (tmp_path / LOCK_NAME).is_file() and holder(tmp_path) is None  # the leftover file claims nothing
    lock = RunLock(tmp_path)
    assert holder(tmp_path).startswith(f"pid {os.getpid()} on ")
    lock.release()
    assert holder(tmp_path) is None and not (tmp_path / LOCK_NAME).exists()
    lock.release()  # twice is harmless
