"""``python -m tools.localimage``: a local stand-in for PyTorch's CUDA builder image, for machines that can pull no image.

The command only: it checks the arguments and builds the image with
``tools.devtools.standin_image.build_image`` (which says what it built or reused).
"""

from __future__ import annotations

import argparse
import re
import sys

from tools.core.cliopts import option
from tools.core.errors import ToolchainError, cli
from tools.devtools import armimage
from tools.devtools.standin_image import DEFAULT_PYTHONS, HELPER_PYTHON, build_image


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.localimage``."""
    p = argparse.ArgumentParser(prog="python -m tools.localimage",
                                description="Build a local stand-in for PyTorch's CUDA builder image, "
                                            "for machines that can pull no image.")
    p.add_argument("--cuda", required=True, help="X.Y; must be this machine's toolkit")
    option(p, "--python", "--pythons", default=",".join(DEFAULT_PYTHONS), metavar="X.Y[,X.Y]",
           help=f"comma-separated X.Y (default {','.join(DEFAULT_PYTHONS)}); "
                        f"{HELPER_PYTHON} is always added for cibuildwheel")
    p.add_argument("--name", help="image name (default: localhost/cuwheels-builder:"
                                  "cudaX.Y-bookworm)")
    p.add_argument("--engine", default="podman", help="container engine (default %(default)s)")
    p.add_argument("--arch", choices=["amd64", "arm64"], default="amd64",
                   help="arm64: the aarch64 stand-in, run here under qemu-user "
                        "(tools.devtools.armimage; its Python is Debian's 3.11, so --python "
                        "doesn't apply)")
    p.add_argument("--mirror", help="Debian mirror (default: the one apt uses here)")
    p.add_argument("--rebuild", action="store_true", help="build even if the image exists")
    p.add_argument("--no-start-check", "--no-probe", dest="check_start", action="store_false",
                   help="do not start a container from the image afterwards")
    return p


def parse_pythons(text: str) -> list[str]:
    """``3.10,3.14t`` -> ``["3.10", "3.14t"]``; ToolchainError naming a malformed entry."""
    versions = [v.strip() for v in text.split(",") if v.strip()]
    for v in versions:
        if not re.fullmatch(r"3\.\d{1,2}t?", v):
            raise ToolchainError(f"--python: `{v}` is not a Python version like 3.12 (or "
                                 "3.14t, free-threaded)", hint="pass e.g. --python 3.10,3.12")
    return versions


@cli
def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tools.localimage``."""
    ns = parser().parse_args(argv)
    if not re.fullmatch(r"\d+\.\d+", ns.cuda):
        raise ToolchainError(f"--cuda: `{ns.cuda}` is not a CUDA version like 13.0",
                             hint="pass X.Y, e.g. --cuda 13.0")
    if ns.arch == "arm64":
        armimage.build_image(ns.cuda, name=ns.name, engine=ns.engine, rebuild=ns.rebuild,
                             mirror=ns.mirror, check_start=ns.check_start)
        return 0
    build_image(ns.cuda, parse_pythons(ns.python), name=ns.name, engine=ns.engine,
                rebuild=ns.rebuild, mirror=ns.mirror, check_start=ns.check_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
