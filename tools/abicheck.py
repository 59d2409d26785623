"""``python -m tools.abicheck``: a wheel's shim symbols and the torch series it loads with, and the
committed shim list of a torch wheel.

    python -m tools.abicheck check WHEEL [--series 2.11,2.13] [--shim-dir DIR]
    python -m tools.abicheck extract TORCH_WHEEL_PATH_OR_URL [--sha256 HEX] [--out DIR]

The command only; the logic is ``tools.finish.abi``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.core.errors import cli
from tools.finish.abi import SHIM_DIR, check_wheel_shims, extract_shim, known_series, write_shim


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.abicheck``."""
    ap = argparse.ArgumentParser(prog="python -m tools.abicheck",
                                 description="Check a wheel's stable-ABI shim symbols against torch "
                                             "series, or extract a torch wheel's shim list.")
    sub = ap.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="list a wheel's shim symbols and the torch series it loads with")
    check.add_argument("wheel", type=Path, help="the wheel to check")
    check.add_argument("--series", help="comma-separated torch series (default: every committed list)")
    check.add_argument("--shim-dir", type=Path, default=SHIM_DIR, metavar="DIR",
                       help="the committed shim lists (default %(default)s)")
    extract = sub.add_parser("extract", help="write the shim list of a torch wheel (path or URL)")
    extract.add_argument("wheel", help="a torch wheel: a local path or the registry's https URL")
    extract.add_argument("--sha256", help="the registry's sha256 of the wheel (recorded; checked "
                                          "for a local file)")
    extract.add_argument("--out", type=Path, default=SHIM_DIR, metavar="DIR",
                         help="where the shim list goes (default %(default)s)")
    return ap


def _check(args: argparse.Namespace) -> int:
    series = args.series.split(",") if args.series else known_series(args.shim_dir)
    found = check_wheel_shims(args.wheel, series, root=args.shim_dir)
    report = found.stable
    for module, names in sorted(report.shim.items()):
        print(f"{module}: {len(names)} stable shim symbols, "
              f"{len(report.not_shim.get(module, ()))} torch C++ symbols, "
              f"{len(found.python[module])} Python C API symbols")
        for name in names:
            print(f"  {name}")
    for s in report.series:
        missing = sorted({n for ns in report.missing.get(s, {}).values() for n in ns})
        print(f"torch {s}: " + ("loads" if not missing else
                                f"{len(missing)} missing: {', '.join(missing)}"))
    if report.not_shim:
        print("not a stable-ABI build: it needs torch C++ symbols, which no shim list covers")
        return 1
    print(f"loads with torch {', '.join(report.loads_with) or 'none of ' + ', '.join(series)}")
    return 0


def _extract(args: argparse.Namespace) -> int:
    shim = extract_shim(args.wheel, sha256=args.sha256)
    path = write_shim(shim, args.out)
    counts = ", ".join(f"{lib} {len(names)}" for lib, names in sorted(shim.libraries.items()))
    print(f"{path}: torch {shim.torch}, {len(shim.symbols)} shim symbols ({counts})")
    return 0


@cli
def main(argv: list[str] | None = None) -> int:
    """``python -m tools.abicheck check WHEEL`` / ``extract TORCH_WHEEL``."""
    args = parser().parse_args(argv)
    return _check(args) if args.command == "check" else _extract(args)


if __name__ == "__main__":
    sys.exit(main())
