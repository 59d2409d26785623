"""``python -m tools.selector``: see tools.selector.cli."""

import sys

from tools.selector.cli import main

sys.exit(main())
