"""``python -m tools.container``: container backend: cibuildwheel in the cell's manylinux CUDA image, the path CI publishes from.

The command line only (``assemble``, the first command of a dry run's script); the logic is
``tools.backends.containerized``.
"""

import argparse
import sys
from pathlib import Path

from tools import RECIPES_DIR
from tools.backends import containerized
from tools.core.errors import cli
from tools.plan.job import Inputs, load_job
from tools.plan.table import TABLE_PATH


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.container``."""
    ap = argparse.ArgumentParser(prog="python -m tools.container",
                                 description="Container backend: assemble a cell's source and "
                                             "tools for cibuildwheel in its CUDA image.")
    sub = ap.add_subparsers(dest="command", required=True)
    # "stage" is the name the command had; the release's stages are the only stages now.
    st = sub.add_parser("assemble", aliases=["stage"],
                        help="on the host: fetch, verify and patch a cell's source and assemble "
                             "it with this project's tools for cibuildwheel")
    st.add_argument("cell", help="cell id, e.g. causal_conv1d-3.11-cu130")
    st.add_argument("--work", type=Path, required=True, help="per-cell work directories")
    st.add_argument("--recipes", type=Path, default=RECIPES_DIR, help="recipes directory")
    st.add_argument("--table", type=Path, default=TABLE_PATH, help="compatibility table")
    src = st.add_mutually_exclusive_group()
    src.add_argument("--sdist", type=Path, help="use this sdist file instead of downloading")
    src.add_argument("--sdist-dir", type=Path, help="take the sdist from this directory")
    return ap


@cli
def main(argv: list[str] | None = None) -> int:
    """Assemble a cell's source, tools and planned cell (the first command of the printed plan)."""
    args = parser().parse_args(argv)
    job = load_job(args.cell, args.recipes, args.table)
    staged = containerized.assemble(job, args.work / job.id,
                                    Inputs(sdist=args.sdist, sdist_dir=args.sdist_dir))
    print(staged.tree)
    return 0


if __name__ == "__main__":
    sys.exit(main())
