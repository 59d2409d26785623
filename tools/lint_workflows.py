"""``python -m tools.lint_workflows``: lint and audit the GitHub workflows: actionlint, zizmor and the workflow JSON schema.

The command only: it runs every check of ``tools.devtools.workflow_audit`` on the files, prints
each finding, and exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import sys

from tools.core.errors import cli
from tools.devtools.workflow_audit import display_path, lint, workflow_files


@cli
def main(argv: list[str] | None = None) -> int:
    """Print every finding; exit 1 when there is one."""
    ap = argparse.ArgumentParser(prog="python -m tools.lint_workflows",
                                 description="Lint and audit the GitHub workflows: actionlint, "
                                             "zizmor and the workflow JSON schema.")
    ap.add_argument("files", nargs="*", help="workflow files (default: .github/workflows/*.yml)")
    args = ap.parse_args(argv)
    files = workflow_files(args.files)
    findings = lint(files)
    for finding in findings:
        print(finding)
    names = ", ".join(display_path(f) for f in files)
    if findings:
        print(f"{len(findings)} finding(s) in {names}", file=sys.stderr)
        return 1
    print(f"workflows clean (actionlint, zizmor, schema): {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
