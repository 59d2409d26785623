"""``python -m tools.demo``: ``make demo``: from a fresh clone to "pip installed a wheel we built, from an index we emitted".

The command only; the logic is ``tools.devtools.demo``.
"""

import sys

from tools.devtools.demo import main

if __name__ == "__main__":
    sys.exit(main())
