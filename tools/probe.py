"""``python -m tools.probe``: probe build: compile a cell's heaviest translation units the way its real build would.

The command line only; the logic is ``tools.probing.probe_build``. The cell is planned once, here.
"""

import argparse
import signal
import sys
from pathlib import Path

from tools import RECIPES_DIR
from tools.core.errors import CompileError, ProbeError, cli
from tools.plan.job import Inputs, load_job
from tools.plan.recipes.model import load_all
from tools.plan.table import TABLE_PATH, load_table
from tools.probing import kernelsame, probe_build, records


@cli
def main(argv: list[str] | None = None) -> int:
    """Probe one cell (see ``tools.probing.probe_build``)."""
    ap = argparse.ArgumentParser(prog="python -m tools.probe",
                                 description="Probe build: compile a cell's heaviest translation "
                                             "units the way its real build would.")
    ap.add_argument("cell", nargs="?", help="cell id, e.g. mamba_ssm-3.11-cu130-torch2.13")
    ap.add_argument("--summary", type=Path, metavar="WORK",
                    help="print the probes' results under WORK (a --work directory) as the "
                         "README's markdown table, and probe nothing")
    ap.add_argument("--due", action="store_true",
                    help="print the kernel records due for measuring (never measured, other "
                         "sources, a torch series not measured: tools/probing/records.py), each "
                         "with the command that measures it, and probe nothing")
    ap.add_argument("--across-torch", action="store_true",
                    help="compile nothing: preprocess the cell's CUDA units against every torch "
                         "series its CUDA version builds and say which units differ and which "
                         "torch headers make them differ (tools/probing/kernelsame.py)")
    ap.add_argument("--write", action="store_true",
                    help="with --across-torch: record the torch series that share the kernels "
                         "in the recipe's units.yaml (kernels:), which the plan groups by")
    ap.add_argument("--toolkit-stand-in", action="store_true",
                    help="with --across-torch: preprocess with this machine's CUDA toolkit "
                         "answering as the cell's CUDA version, where no such compiler is here")
    ap.add_argument("--units", help="comma-separated units to compile (paths in the source "
                                    "tree, or their file names), instead of the heaviest")
    ap.add_argument("--count", type=int, default=probe_build.DEFAULT_COUNT,
                    help="how many of the heaviest CUDA units to compile, besides the heaviest "
                         f"C++ unit (default {probe_build.DEFAULT_COUNT})")
    ap.add_argument("--archs", help="arch list to probe, e.g. 90 (default: the cell's)")
    ap.add_argument("--sdist", type=Path, help="use this sdist file instead of downloading")
    ap.add_argument("--sdist-dir", type=Path, help="take the sdist from this directory")
    ap.add_argument("--wheelhouse", type=Path, help="wheels (torch, build deps) to install from")
    ap.add_argument("--offline", action="store_true", help="install only from --wheelhouse")
    ap.add_argument("--torch-index", help="index URL for the cell's torch build")
    ap.add_argument("--work", type=Path, default=probe_build.DEFAULT_WORK,
                    help="per-cell work directories")
    ap.add_argument("--recipes", type=Path, default=RECIPES_DIR, help="recipes directory")
    ap.add_argument("--table", type=Path, default=TABLE_PATH, help="compatibility table")
    ap.add_argument("--unit-timeout", type=float, default=probe_build.UNIT_TIMEOUT,
                    help="seconds one unit may take (default %(default)s)")
    args = ap.parse_args(argv)
    # A terminated probe unwinds (and so stops the compiler it started) like an interrupted one.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if args.summary:
        rows = probe_build.table_rows(args.summary, args.recipes)
        if not rows:
            raise ProbeError(f"{args.summary}: no <cell>/probe/probe.json below it",
                             hint="pass the --work directory the probes wrote to "
                                  f"(default {probe_build.DEFAULT_WORK})")
        print("\n".join([probe_build.TABLE_HEADER, *rows]))
        return 0
    if args.due:
        table = load_table(args.table)
        print(records.due_table(*records.due_records(load_all(args.recipes, table), table)))
        return 0
    if not args.cell:
        ap.error("name a cell to probe (or --summary WORK, or --due)")
    if args.write and not args.across_torch:
        ap.error("--write records what --across-torch measures: give both")
    if args.toolkit_stand_in and not args.across_torch:
        ap.error("--toolkit-stand-in is for measuring with --across-torch only: give both")
    if args.offline and not args.wheelhouse:
        ap.error("--offline needs --wheelhouse")
    if args.count < 1:
        ap.error("--count must be at least 1")
    units = tuple(u.strip() for u in (args.units or "").split(",") if u.strip())
    job = load_job(args.cell, args.recipes, args.table)
    inputs = Inputs(sdist=args.sdist, sdist_dir=args.sdist_dir, wheelhouse=args.wheelhouse,
                    offline=args.offline, torch_index=args.torch_index)
    if args.across_torch:
        print(kernelsame.across_torch(job, inputs, args.work, write=args.write,
                                      stand_in=args.toolkit_stand_in)["table"])
        return 0
    try:
        report = probe_build.probe_cell(job, probe_build.ProbeRequest(
            units=units, count=args.count, archs=args.archs, inputs=inputs, work_root=args.work,
            unit_timeout=args.unit_timeout))
    except CompileError:
        path = args.work / job.id / "probe" / "probe.json"
        if path.is_file():
            print(probe_build.format_report(probe_build.read_report(path)))
        raise
    print(probe_build.format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
