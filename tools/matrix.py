"""``python -m tools.matrix``: the build matrix: recipes x table -> cells, one id per cell, one cell per distinct build.

The command only; the logic is ``tools.plan.matrix``.
"""

import sys

from tools.plan.matrix import main

if __name__ == "__main__":
    sys.exit(main())
