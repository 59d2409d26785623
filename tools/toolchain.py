"""``python -m tools.toolchain``: find (or get) what a host build compiles with, and print where.

``python -m tools.toolchain cuda-home`` prints the CUDA toolkit root a build takes for CUDA_HOME:
this machine's (``$CUDA_HOME``, ``/usr/local/cuda``, nvcc on PATH), else the pinned CUDA 13.0
from PyPI's nvidia packages, installed once into the cache, saying so on stderr
(``tools.pipeline.cudakit``). ``python -m tools.toolchain python 3.11 3.12`` prints each
version's interpreter, found wherever this machine keeps one or installed by uv
(``tools.pipeline.pythons``). ``.ci/run`` runs both before the tests.
"""

from __future__ import annotations

import argparse
import sys

from tools.core.errors import cli
from tools.pipeline.build_toolchain import find_nvcc
from tools.pipeline.venvs import find_python


@cli
def main(argv: list[str] | None = None) -> int:
    """Print the toolkit root, or each Python's interpreter (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m tools.toolchain",
                                 description="Find (or get) what a host build compiles with, and "
                                             "print where.")
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("cuda-home", help="print the CUDA toolkit root (installing CUDA 13.0 from "
                                     "PyPI when this machine has none)")
    pythons = sub.add_parser("python", help="print each version's interpreter (installing it "
                                            "with uv when this machine has none)")
    pythons.add_argument("versions", nargs="+", metavar="X.Y", help="Python versions, e.g. 3.12")
    pythons.add_argument("--no-install", action="store_true",
                         help="only look: never download a Python")
    args = ap.parse_args(argv)
    if args.what == "cuda-home":
        print(find_nvcc().cuda_home)
    else:
        for version in args.versions:
            print(find_python(version, install=not args.no_install))
    return 0


if __name__ == "__main__":
    sys.exit(main())
