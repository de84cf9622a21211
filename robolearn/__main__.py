"""``python -m robolearn ...`` is the same as the ``robolearn`` command."""

import sys

from robolearn.entry import main

sys.exit(main())
