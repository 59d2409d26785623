"""``python -m tools.abicheck``: aBI kinds: check that a wheel's binaries depend on no more than its recipe's ``abi`` claims.

The command only; the logic is ``tools.finish.abicheck``.
"""

import sys

from tools.finish.abicheck import main

if __name__ == "__main__":
    sys.exit(main())
