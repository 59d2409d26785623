"""``python -m tools.repair``: ``auditwheel repair`` with torch's and the driver's libraries excluded.

    python -m tools.repair WHEEL --out-dir DIR [--plat P] [--exclude PATTERN]... [--no-strip] [--log FILE]

The command only; the logic is ``tools.finish.auditwheel_repair``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.core.errors import cli
from tools.finish.auditwheel_repair import repair_wheel


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.repair``."""
    ap = argparse.ArgumentParser(prog="python -m tools.repair",
                                 description="Run auditwheel repair with torch's and the driver's "
                                             "libraries excluded.")
    ap.add_argument("wheel", type=Path, help="the wheel to repair")
    ap.add_argument("--out-dir", type=Path, required=True, metavar="DIR",
                    help="where the repaired wheel goes")
    ap.add_argument("--plat", default="auto",
                    help="'auto' (most compatible) or a policy, e.g. manylinux_2_28_x86_64")
    ap.add_argument("--exclude", action="append", default=[],
                    help="another soname pattern to leave out (repeatable)")
    ap.add_argument("--no-strip", dest="strip", action="store_false",
                    help="keep the binaries' debug symbols")
    ap.add_argument("--log", type=Path, metavar="FILE", help="write auditwheel's output here")
    return ap


@cli
def main(argv: list[str] | None = None) -> int:
    """``python -m tools.repair WHEEL --out-dir DIR [--plat P] [--exclude PATTERN]...``"""
    args = parser().parse_args(argv)
    result = repair_wheel(args.wheel, args.out_dir, plat=args.plat,
                          extra_excludes=tuple(args.exclude), strip=args.strip, log=args.log)
    print(f"{result.wheel} ({', '.join(result.platform_tags)}; "
          f"{result.size_before} -> {result.size_after} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
