"""``python -m tools.verify``: checks a built wheel must pass before it is published.

The command only; the logic is ``tools.finish.verify``.
"""

import sys

from tools.finish.verify import main

if __name__ == "__main__":
    sys.exit(main())
