"""``python -m tools.selector``: see tools.selector.cli."""

import sys

from .cli import main

sys.exit(main())
