"""``python -m tools.recipe``: recipes: ``recipes/<package>/recipe.yaml`` plus ``patches/``, loaded strictly.

The command only; the logic is ``tools.plan.recipe``.
"""

import sys

from tools.plan.recipe import main

if __name__ == "__main__":
    sys.exit(main())
