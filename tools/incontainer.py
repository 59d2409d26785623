"""``python -m tools.incontainer``: the commands cibuildwheel runs inside the builder image, from the staged copy of the tools.

The command only; the logic is ``tools.backends.inside``.
"""

import sys

from tools.backends.inside import main

if __name__ == "__main__":
    sys.exit(main())
