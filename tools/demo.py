"""``python -m tools.demo``: ``make demo``: from a fresh clone to "pip installed a wheel we built, from an index we emitted".

The command only: it runs ``tools.devtools.walkthrough.run_demo`` (which announces each step) and
prints where everything is and how to point pip and uv at the index.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.core.errors import cli
from tools.devtools.walkthrough import DEFAULT_ARCHS, DEFAULT_PACKAGE, DEMO_DIR, run_demo, summary


@cli
def main(argv: list[str] | None = None) -> int:
    """Run the demo (see tools.devtools.walkthrough)."""
    ap = argparse.ArgumentParser(prog="python -m tools.demo",
                                 description="From a fresh clone to pip installing a wheel built "
                                             "here, from an index emitted here (make demo).")
    ap.add_argument("--package", default=DEFAULT_PACKAGE,
                    help="the recipe to build (default %(default)s)")
    ap.add_argument("--python", default="%d.%d" % sys.version_info[:2],
                    help="Python version to build for (default: this one)")
    ap.add_argument("--cuda", help="CUDA version (default: the local nvcc's)")
    ap.add_argument("--archs", default=DEFAULT_ARCHS,
                    help="arch list to compile (default 90: one arch keeps it to minutes)")
    ap.add_argument("--dir", type=Path, default=DEMO_DIR, help="where the demo writes")
    ap.add_argument("--port", type=int, default=0, help="port for the local index (0: any)")
    args = ap.parse_args(argv)
    result = run_demo(package=args.package, python=args.python, cuda=args.cuda, archs=args.archs,
                      out_dir=args.dir, port=args.port)
    print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
