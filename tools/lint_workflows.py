"""``python -m tools.lint_workflows``: lint and audit the GitHub workflows: actionlint, zizmor and the workflow JSON schema.

The command only; the logic is ``tools.devtools.lint_workflows``.
"""

import sys

from tools.devtools.lint_workflows import main

if __name__ == "__main__":
    sys.exit(main())
