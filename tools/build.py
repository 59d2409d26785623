"""``python -m tools.build``: build one matrix cell: choose a backend, run it, report.

The command only; the logic is ``tools.builder.orchestrate``.
"""

import sys

from tools.builder.orchestrate import main

if __name__ == "__main__":
    sys.exit(main())
