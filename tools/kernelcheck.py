"""``python -m tools.kernelcheck``: the kernel check: a recipe's ``check.py`` run on a GPU against plain-torch references.

The command only; the logic is ``tools.kernels.check``.
"""

import sys

from tools.kernels.check import main

if __name__ == "__main__":
    sys.exit(main())
