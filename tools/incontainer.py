"""``python -m tools.incontainer``: the commands cibuildwheel runs inside the builder image, from the staged copy of the tools.

The command line only; the logic is ``tools.backends.inside``.
"""

import argparse
import sys
from pathlib import Path

from tools.backends import inside
from tools.backends.cibw import CONTAINER_TORCH
from tools.backends.result import CONTAINER_RESULT, write_result
from tools.core.cliopts import option
from tools.core.errors import ToolchainError, cli


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.incontainer``."""
    ap = argparse.ArgumentParser(prog="python -m tools.incontainer",
                                 description="The commands cibuildwheel runs inside the builder "
                                             "image, from the staged copy of the tools.")
    sub = ap.add_subparsers(dest="command", required=True)
    tc = sub.add_parser("toolchain", help="check the image's nvcc against the cell's CUDA")
    tc.add_argument("--cell-file", type=Path, required=True,
                    help="the planned cell (cell.json, staged beside the tools)")
    rx = sub.add_parser("relax-nvcc-check", help="relax torch's nvcc major-version check")
    option(rx, "--interpreter", "--python", required=True, metavar="PATH",
           help="the build venv's interpreter")
    fi = sub.add_parser("finish", help="repair, inspect, label the wheel")
    fi.add_argument("wheel", type=Path, help="the wheel the build made")
    fi.add_argument("dest_dir", type=Path, help="where the finished wheel goes")
    fi.add_argument("--cell-file", type=Path, required=True,
                    help="the planned cell (cell.json, staged beside the tools)")
    fi.add_argument("--archs", required=True, help="comma-separated: 80,90")
    option(fi, "--interpreter", "--build-python", required=True, metavar="PATH",
           help="the build venv's interpreter")
    fi.add_argument("--recipe-revision", default="unknown",
                    help="the recipe's git revision, for the manifest")
    fi.add_argument("--plat", help="auditwheel's target (default: the cell's manylinux tag; "
                                   "auto: the lowest the wheel allows)")
    fi.add_argument("--image", help="the image it runs in, for the manifest")
    cc = sub.add_parser("ccache", help="the compiler cache: set it up, or say what it did")
    cc.add_argument("action", choices=["setup", "stats"],
                    help="setup: before the build; stats: after it")
    option(cc, "--interpreter", "--python", metavar="PATH", help="setup: the build venv's interpreter")
    cc.add_argument("--result-dir", type=Path, default=Path(str(CONTAINER_RESULT)),
                    help="stats: where the result file goes (default: the mounted folder)")
    sr = sub.add_parser("shard-result", help="hand a kernel shard's record back to the host")
    sr.add_argument("record", type=Path, help="the shard's shard.json")
    sr.add_argument("--result-dir", type=Path, default=Path(str(CONTAINER_RESULT)),
                    help="where the result file goes (default: the mounted folder)")
    return ap


@cli
def main(argv: list[str] | None = None) -> int:
    """Run one in-image command (see ``tools.backends.inside``)."""
    args = parser().parse_args(argv)
    if args.command == "toolchain":
        cell = inside.read_cell(args.cell_file)
        nvcc, note = inside.check_toolchain(cell)
        print(f"nvcc {nvcc.version} at {nvcc.path} for {cell.id}" + (f" ({note})" if note else ""))
    elif args.command == "ccache" and args.action == "setup":
        if not args.interpreter:
            raise ToolchainError("ccache setup needs --interpreter (the build venv's interpreter)")
        cache = inside.ccache_setup(args.interpreter)
        print(f"compiler cache: ccache {cache.version} in {cache.directory}, torch at "
              f"{CONTAINER_TORCH}, base_dir {cache.env['CCACHE_BASEDIR']}")
    elif args.command == "ccache":
        line, result = inside.ccache_result()
        print(line)
        print(f"result: {write_result(args.result_dir, result)}")
    elif args.command == "shard-result":
        print(f"result: {write_result(args.result_dir, inside.shard_result(args.record))}")
    elif args.command == "relax-nvcc-check":
        print(f"relaxed torch's nvcc major-version check in {inside.relax_installed(args.interpreter)}")
    else:
        out = inside.finish(args.wheel, args.dest_dir, cell=inside.read_cell(args.cell_file),
                            archs=tuple(a for a in args.archs.split(",") if a),
                            build_python=args.interpreter,
                            recipe_revision=args.recipe_revision, plat=args.plat,
                            image=args.image)
        print(f"finished: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
