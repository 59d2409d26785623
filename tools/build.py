"""``python -m tools.build``: build one matrix cell: choose a backend, run it, report.

``python -m tools.build CELL_ID [--backend host|container|auto] [--archs 90] [--sdist PATH]``
(what ``nox -s build-<cell id>`` runs). The command line only: it plans once (or reads the plan
``--plan`` names) and hands the planned cell to ``tools.builder.orchestrate.build_cell``; it
prints the published wheel.
"""

import argparse
import sys
from pathlib import Path

from tools import RECIPES_DIR
from tools.builder.orchestrate import (DEFAULT_OUT, DEFAULT_WORK, BuildRequest, ContainerSettings,
                                      build_cell)
from tools.builder.planned import Planned
from tools.core.cliopts import option
from tools.core.errors import cli
from tools.plan.job import Inputs
from tools.plan.table import TABLE_PATH


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.build``."""
    ap = argparse.ArgumentParser(prog="python -m tools.build",
                                 description="Build one matrix cell: choose a backend, run it, "
                                             "report.")
    ap.add_argument("cell", help="cell id, e.g. causal_conv1d-3.11-cu130 (python -m tools.matrix"
                                 " --format ids lists them)")
    ap.add_argument("--backend", choices=["auto", "host", "container"], default="auto",
                    help="host: this machine's toolchain; container: the cell's image, as CI; "
                         "auto (default): the container where an engine runs, else the host")
    ap.add_argument("--engine", choices=["docker", "podman"], help="container engine")
    ap.add_argument("--image", help="container backend: build in this image instead of the "
                                    "table's (e.g. a local stand-in: python -m tools.localimage)")
    ap.add_argument("--archs", help="override the arch list for a local build: 90 or 80,90")
    ap.add_argument("--sdist", type=Path, help="use this sdist file instead of downloading")
    ap.add_argument("--sdist-dir", type=Path, help="take the sdist from this directory")
    ap.add_argument("--wheelhouse", type=Path,
                    help="a directory of wheels (torch, build deps) to install from")
    ap.add_argument("--offline", action="store_true",
                    help="no network: install only from --wheelhouse (with --interpreter: install "
                         "nothing; needs --sdist or --sdist-dir)")
    option(ap, "--interpreter", "--python", type=Path, metavar="PATH",
           help="host backend: build against this existing interpreter's torch and "
                "build requirements as they are (no venv, no download)")
    ap.add_argument("--torch-index", help="index URL for the cell's torch build")
    option(ap, "--wheels", "--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
           help="where verified wheels go (default %(default)s)")
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK, help="per-cell work directories")
    ap.add_argument("--recipes", type=Path, default=RECIPES_DIR, help="recipes directory")
    ap.add_argument("--table", type=Path, default=TABLE_PATH, help="compatibility table")
    ap.add_argument("--plan", type=Path, metavar="FILE",
                    help="take the cell and the cells it needs from this plan (what `python -m "
                         "tools.matrix --format json` prints) instead of planning again")
    ap.add_argument("--dry-run", action="store_true",
                    help="container backend: print the cibuildwheel command and stop")
    ap.add_argument("--memory", type=int, metavar="GIB",
                    help="container backend: memory limit (default: available memory - 1 GiB)")
    ap.add_argument("--cpus", type=int, help="container backend: CPU limit (default: all)")
    ap.add_argument("--no-cache", action="store_true",
                    help="compile without the compiler cache (ccache in "
                         "$CUWHEELS_CCACHE_DIR, default ~/.cache/cuwheels/ccache; the "
                         "container backend mounts it)")
    ap.add_argument("--shard-caches", type=Path, metavar="DIR",
                    help="a directory of kernel shard caches (<group>-shard<k>, from python -m "
                         "tools.shard run): the build reads its compile group's, read-only")
    return ap


@cli
def main(argv: list[str] | None = None) -> int:
    """Build one cell (see the module docstring)."""
    ap = parser()
    args = ap.parse_args(argv)
    if args.offline and not args.wheelhouse and not args.interpreter:
        ap.error("--offline needs --wheelhouse (or --interpreter, an environment that has "
                 "everything)")
    if args.offline and not (args.sdist or args.sdist_dir):
        ap.error("--offline needs --sdist or --sdist-dir (the sdist can't be downloaded)")
    planned = (Planned.read(args.plan, args.recipes, args.table) if args.plan
               else Planned.make(args.recipes, args.table))
    inputs = Inputs(sdist=args.sdist, sdist_dir=args.sdist_dir, wheelhouse=args.wheelhouse,
                    offline=args.offline, torch_index=args.torch_index)
    container = ContainerSettings(engine=args.engine, image=args.image, memory_gib=args.memory,
                                  cpus=args.cpus)
    result = build_cell(planned.cell(args.cell), planned, BuildRequest(
        backend=args.backend, archs=args.archs, inputs=inputs, out_dir=args.wheels,
        work_root=args.work, dry_run=args.dry_run, cache=not args.no_cache,
        shard_caches=args.shard_caches, container=container, python=args.interpreter))
    if result.wheel:
        print(result.wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
