"""``python -m tools.repair``: repair step: ``auditwheel repair`` with torch's and the driver's libraries excluded.

The command only; the logic is ``tools.finish.repair``.
"""

import sys

from tools.finish.repair import main

if __name__ == "__main__":
    sys.exit(main())
