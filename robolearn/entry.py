"""The ``robolearn`` command's entry point: imports the command line, and with it torch (a second or two),
where a Ctrl+C is an "interrupted" and exit status 130 like one later, not a traceback of the import, and a
package that is not installed says how to install it."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Callable

OURS = ("robolearn", "sims", "policies", "hardware")


def _a_later_torchrun_rank_of_train() -> bool:
    """Whether this process is a ``train`` rank other than 0 that torchrun started (not a command run where a
    cluster's environment happens to say RANK)."""
    rank = os.environ.get("RANK", "0")
    return (len(sys.argv) > 1 and sys.argv[1] == "train" and "TORCHELASTIC_RUN_ID" in os.environ
            and rank.isdigit() and int(rank) > 0)


def _import_command_line() -> Callable[[], int]:
    """``robolearn.cli.main``, imported with a Ctrl+C during the import remembered: torch imports numpy from C
    and swallows any error of that import, a KeyboardInterrupt too ("Failed to initialize NumPy"), so a Ctrl+C
    then had let the command go on with numpy half-imported (a deploy connected to the arm, then failed as
    "module 'numpy' has no attribute 'matrix'"). Raises KeyboardInterrupt after the import when one came."""
    came: list[int] = []

    def ctrl_c(signum: int, frame: Any) -> None:
        came.append(signum)
        raise KeyboardInterrupt

    ours = (threading.current_thread() is threading.main_thread()  # (signal handlers: the main thread's alone)
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler)  # (an ignored SIGINT stays ignored)
    if ours:
        signal.signal(signal.SIGINT, ctrl_c)
    try:
        from robolearn.cli import main as command_line
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if came:
        raise KeyboardInterrupt
    return command_line


def main() -> int:
    try:
        return _run()
    finally:
        _ctrl_c_ends_the_teardown()


def _ctrl_c_ends_the_teardown() -> None:
    """Once the command is done (a stopped run saved and its resume line said), a Ctrl+C ends the process at once,
    silently, as the shell's 130: raised as KeyboardInterrupt in the interpreter's teardown (atexit callbacks,
    threads joined), the second of a double Ctrl+C had printed a traceback ('Exception ignored in atexit
    callback') under the run's last words. An ignored SIGINT, or a handler of someone else's, is left as it is."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run() -> int:
    try:
        command_line = _import_command_line()
    except KeyboardInterrupt:
        if not _a_later_torchrun_rank_of_train():  # a Ctrl+C as `--nproc` starts reaches every rank: rank 0 says it
            print("interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as err:
        if not err.name or err.name.split(".")[0] in OURS:  # a broken checkout of ours: Python's traceback
            raise
        print(f"error: robolearn needs the package '{err.name}', which is not installed; run `bash setup.sh` in "
              "robolearn's folder (it installs torch, MuJoCo and the rest), or `pip install -e .` there",
              file=sys.stderr)
        return 1
    code = command_line()
    if _a_later_torchrun_rank_of_train():
        # A rank other than 0 (torchrun's) has written nothing of its own and its run is over: it leaves without
        # the interpreter's teardown, in which a C++ thread destroyed while still joinable had aborted it (SIGABRT,
        # "terminate called without an active exception", ~1 in 10 `--nproc 2` runs here), and torchrun then
        # killed rank 0 in the middle of its export. The cause lies in a library's exit path, not found here.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
