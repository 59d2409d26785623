"""``python -m tools.ledger``: the ledger: the record of every file the index has ever published.

The command only; the logic is ``tools.sitegen.ledger``.
"""

import sys

from tools.sitegen.ledger import main

if __name__ == "__main__":
    sys.exit(main())
