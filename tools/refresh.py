"""``python -m tools.refresh``: refresh: follow the registry, and propose the change to the table and the recipes.

The command only: it reads the registry with ``tools.upstream.follow.propose``, prints the change
as a unified diff (or writes it with ``--write``, every file or none) and the summary on stderr.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from datetime import date
from pathlib import Path

from tools import RECIPES_DIR
from tools.core.errors import ToolchainError, cli
from tools.core.progress import StepCounter
from tools.upstream.follow import propose, summary, write_all
from tools.upstream.images import propose_images
from tools.upstream.kernelrecords import kernel_records
from tools.upstream.registry import PYPI_JSON, TORCH_TEST, TORCH_VARIANTS, Registry
from tools.upstream.verdicts import probe_matrix


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.refresh``."""
    ap = argparse.ArgumentParser(prog="python -m tools.refresh", description="Follow the registry and propose the change to the "
                                 "table and the recipes (a diff, or --write).")
    ap.add_argument("--write", action="store_true", help="apply the change (all files or none)")
    ap.add_argument("--summary", type=Path, metavar="FILE",
                    help="also write the summary (markdown) here, e.g. for a pull request")
    ap.add_argument("--probe-plan", type=Path, metavar="FILE",
                    help="write the cells to probe against what is new (a GitHub matrix, JSON)")
    ap.add_argument("--probes", type=Path, metavar="DIR",
                    help="probe reports (probe.json files, any layout) of those cells: the "
                         "summary gives each recipe's verdict, and a failure an exclusion (a "
                         "folder that isn't there holds no report: every cell 'not probed')")
    ap.add_argument("--kernel-plan", type=Path, metavar="FILE",
                    help="write the kernel records due (tools/probing/records.py: never measured, "
                         "other sources, a torch series not measured), of the recipes as "
                         "written, as a GitHub matrix (JSON) of probe jobs, each on its "
                         "platform's runner")
    ap.add_argument("--kernel-records", type=Path, metavar="DIR",
                    help="the kernels.json files those jobs wrote (any layout): each "
                         "measurement of the recipes as they are now is written into its "
                         "units.yaml, the others said in the summary and left out")
    ap.add_argument("--runners", type=Path, metavar="FILE",
                    help="--kernel-plan: the runner file whose labels the jobs run on (default: "
                         "RECIPES/runners.yaml; in CI the repository variable CUWHEELS_RUNNERS)")
    ap.add_argument("--reprobe", action="append", default=[], metavar="SERIES",
                    help="also probe every recipe against this series the table already has, as "
                         "if it were new (repeatable): its cells join --probe-plan, its verdicts "
                         "the summary, and a failure excludes it")
    ap.add_argument("--recipes", type=Path, default=RECIPES_DIR, help="recipes folder")
    ap.add_argument("--table", type=Path, help="compatibility table (default: RECIPES/table.yaml)")
    ap.add_argument("--pypi", default=PYPI_JSON, help="the JSON API's base URL")
    ap.add_argument("--torch-variants", default=TORCH_VARIANTS,
                    help="torch's index page listing every variant")
    ap.add_argument("--rc", action="store_true",
                    help="also propose a row for a release candidate on PyTorch's test index (a "
                         "series newer than the table's; its cells build into the pre-release "
                         "index only)")
    ap.add_argument("--torch-test", default=TORCH_TEST,
                    help="PyTorch's test index page listing torch's files (read with --rc)")
    ap.add_argument("--images", action="store_true",
                    help="instead: list /opt/python in each builder image of the table's "
                         "images: with --engine (pulling it) and propose those entries")
    ap.add_argument("--engine", default="docker",
                    help="the container engine --images runs (default %(default)s)")
    ap.add_argument("--date", help="the date written into sources (default: today)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds per request")
    return ap


@cli
def main(argv: list[str] | None = None) -> int:
    """``python -m tools.refresh``: print the registry's change to the table and the recipes as
    a diff, or apply it with ``--write``."""
    args = parser().parse_args(argv)
    if args.images:
        return _images(args)
    with StepCounter("reading the registry") as reads:
        registry = Registry(args.pypi, args.torch_variants, args.timeout, test=args.torch_test,
                            progress=reads)
        proposal = propose(registry, recipes_dir=args.recipes, table_path=args.table,
                           date=args.date, probes=args.probes, rc=args.rc,
                           reprobe=tuple(args.reprobe))
    text = summary(proposal)
    if args.probe_plan:
        args.probe_plan.write_text(json.dumps(probe_matrix(proposal.targets)) + "\n",
                                   encoding="utf-8")
    if args.write:
        write_all(proposal.new, proposal.old)
        print(f"wrote {len(proposal.new)} file(s)" if proposal.new else "nothing to change",
              file=sys.stderr)
    else:
        sys.stdout.write(proposal.diff(args.recipes.resolve().parent))
    # After the proposal is written: the records are of the recipes and table it proposes
    # (a new series' row makes its records due, and its measurements apply to it).
    text += _kernel_records(args)
    if args.summary:
        args.summary.write_text(text, encoding="utf-8")
    print(text, file=sys.stderr)
    return 0


def _kernel_records(args: argparse.Namespace) -> str:
    """``--kernel-records`` and ``--kernel-plan`` (``tools.upstream.kernelrecords``): the
    summary's section, the records' diff printed without ``--write``."""
    if not (args.kernel_plan or args.kernel_records):
        return ""
    found = kernel_records(args.recipes, args.table, records=args.kernel_records,
                           plan_file=args.kernel_plan, runners=args.runners, write=args.write)
    sys.stdout.write(found.diff)
    return found.section


def _images(args: argparse.Namespace) -> int:
    """``--images``: the builder images' Pythons read from the images (tools.upstream.images)."""
    table = args.table or args.recipes / "table.yaml"
    proposal = propose_images(table, args.engine, args.date or date.today().isoformat())
    if args.write:
        write_all({table: proposal.new} if proposal.new != proposal.old else {},
                  {table: proposal.old})
        print("wrote 1 file(s)" if proposal.new != proposal.old else "nothing to change",
              file=sys.stderr)
    else:
        sys.stdout.write("".join(difflib.unified_diff(
            proposal.old.splitlines(True), proposal.new.splitlines(True), f"a/{table.name}",
            f"b/{table.name}")))
    print(proposal.summary(), file=sys.stderr)
    if not any(not it.error for it in proposal.listings):
        raise ToolchainError(f"no builder image could be listed with {args.engine} (each one's "
                             "reason is above)", hint="run it where the engine runs and can pull "
                             "the images (a GitHub runner), or pass --engine podman")
    return 0


if __name__ == "__main__":
    sys.exit(main())
