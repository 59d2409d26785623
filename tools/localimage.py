"""``python -m tools.localimage``: a local stand-in for PyTorch's CUDA builder image, for machines that can pull no image.

The command only; the logic is ``tools.devtools.localimage``.
"""

import sys

from tools.devtools.localimage import main

if __name__ == "__main__":
    sys.exit(main())
