"""``python -m robolearn ...`` is the same as the ``robolearn`` command."""

import sys

from robolearn.cli import main

sys.exit(main())
