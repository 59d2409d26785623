"""``python -m tools.serve``: serve a built index on 127.0.0.1, with the PEP 691 content negotiation static hosting lacks.

The command only; the logic is ``tools.sitegen.serve``.
"""

import sys

from tools.sitegen.serve import main

if __name__ == "__main__":
    sys.exit(main())
