"""``python -m tools.refresh``: refresh: follow the registry, and propose the change to the table and the recipes.

The command only; the logic is ``tools.upstream.refresh``.
"""

import sys

from tools.upstream.refresh import main

if __name__ == "__main__":
    sys.exit(main())
