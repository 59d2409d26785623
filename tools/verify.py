"""``python -m tools.verify``: the static checks a built wheel must pass before it is published.

    python -m tools.verify WHEEL --torch-lib DIR --torch-version V [--archs 80 90]

Its platform tags, its torch ABI and its GPU archs; the import smoke test needs the build's cell.
The command only; the logic is ``tools.finish.checks``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.core.errors import cli
from tools.finish.checks import check_wheel


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.verify``."""
    ap = argparse.ArgumentParser(prog="python -m tools.verify",
                                 description="Check a built wheel's tags, torch ABI and GPU archs "
                                             "before it is published.")
    ap.add_argument("wheel", type=Path, help="the built wheel")
    ap.add_argument("--torch-lib", type=Path, required=True,
                    help="site-packages/torch/lib of the torch to check against")
    ap.add_argument("--torch-version", required=True, help="the torch version, e.g. 2.9.1")
    ap.add_argument("--archs", nargs="*", default=[],
                    help="archs that must have SASS, e.g. 80 90 100a")
    return ap


@cli
def main(argv: list[str] | None = None) -> int:
    """``python -m tools.verify WHEEL --torch-lib DIR --torch-version V [--archs 80 90]``"""
    args = parser().parse_args(argv)
    report = check_wheel(args.wheel, torch_lib=args.torch_lib, torch_version=args.torch_version,
                         archs=tuple(args.archs))
    print(f"{args.wheel.name}: {', '.join(report.platforms)}; {report.abi.checked} torch symbols "
          f"resolve in torch {args.torch_version}")
    for name, arch in sorted(report.archs.items()):
        print(f"  {name}: sass {' '.join(arch.sass) or '-'}; ptx {' '.join(arch.ptx) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
