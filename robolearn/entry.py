"""The ``robolearn`` command's entry point: imports the command line, and with it torch (a second or two),
where a Ctrl+C is an "interrupted" and exit status 130 like one later, not a traceback of the import, and a
package that is not installed says how to install it."""

from __future__ import annotations

import sys

OURS = ("robolearn", "sims", "policies", "hardware")


def main() -> int:
    try:
        from robolearn.cli import main as command_line
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as err:
        if not err.name or err.name.split(".")[0] in OURS:  # a broken checkout of ours: Python's traceback
            raise
        print(f"error: robolearn needs the package '{err.name}', which is not installed; run `bash setup.sh` in "
              "robolearn's folder (it installs torch, MuJoCo and the rest), or `pip install -e .` there",
              file=sys.stderr)
        return 1
    return command_line()
