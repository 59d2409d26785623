"""``python -m tools.container``: container backend: cibuildwheel in the cell's manylinux CUDA image, the path CI publishes from.

The command only; the logic is ``tools.backends.container``.
"""

import sys

from tools.backends.container import main

if __name__ == "__main__":
    sys.exit(main())
