"""``python -m tools.probe``: probe build: compile a cell's heaviest translation units the way its real build would.

The command only; the logic is ``tools.probing.probe``.
"""

import sys

from tools.probing.probe import main

if __name__ == "__main__":
    sys.exit(main())
