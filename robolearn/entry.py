"""The ``robolearn`` command's entry point: imports the command line, and with it torch (a second or two),
where a Ctrl+C is an "interrupted" and exit status 130 like one later, not a traceback of the import."""

from __future__ import annotations

import sys


def main() -> int:
    try:
        from robolearn.cli import main as command_line
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return command_line()
