"""``python -m tools.index``: the package index: a static site that pip and uv install from, plus a page for people.

The command only; the logic is ``tools.sitegen.generate``.
"""

import sys

from tools.sitegen.generate import main

if __name__ == "__main__":
    sys.exit(main())
