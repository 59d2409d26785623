"""``python -m tools.index``: the package index: a static site that pip and uv install from, plus a page for people.

The command: it parses the arguments, runs ``tools.sitegen.generate.build_index`` and prints what
it did; exit 11 (IndexBuildError) when the index could not be built or when wheels were left out.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.core.cliopts import option
from tools.core.digest import PARALLEL_MIN_BYTES
from tools.core.errors import IndexBuildError, cli
from tools.core.workers import default_jobs
from tools.sitegen import generate

#: Defaults of the command line, relative to where it runs (the repository root).
DEFAULT_YANKED = Path("index/yanked.yaml")


def default_ledger(output_dir: Path) -> Path:
    """The ledger of a run given no ``--ledger``: beside the site (``site`` ->
    ``site-ledger.json``), as ``make index`` keeps it. Never the repository's
    ``index/ledger.json``, which only seeds a first deployment: a hand run would rewrite it."""
    return output_dir.parent / f"{output_dir.name}-ledger.json"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.index``: build the index; exit 11 if it couldn't or if wheels were left out."""
    parser = argparse.ArgumentParser(prog="python -m tools.index",
                                     description="Build the package index: a static site pip and uv "
                                     "install from, plus a page for people.")
    option(parser, "--wheels", "--wheels-dir", required=True, type=Path, metavar="DIR",
           help="wheels of this batch (their .metadata files are written beside them)")
    option(parser, "--site", "--output-dir", required=True, type=Path, metavar="DIR",
           help="the site (INDEX_DIR), replaced atomically")
    parser.add_argument("--base-url", required=True, help="URL the wheels directory is uploaded to")
    parser.add_argument("--ledger", type=Path, default=None, metavar="FILE",
                        help="record of everything published (default: beside the site, "
                        "<site>-ledger.json)")
    parser.add_argument("--init-ledger", action="store_true",
                        help="start --ledger if it doesn't exist: from the site's own ledger.json when "
                        "--site holds a site (nothing published is lost), else empty")
    parser.add_argument("--start-over", action="store_true",
                        help="start a new, empty ledger (--ledger must not exist) even though the site at "
                        "--site publishes files: each one it loses is named")
    parser.add_argument("--yanked", type=Path, default=None,
                        help=f"yank list {{filename: reason}} (default: {DEFAULT_YANKED} when it exists)")
    parser.add_argument("--site-url", default=None, help="public URL of the site, for the commands on its front page")
    parser.add_argument("--remove", action="append", default=[], metavar="FILENAME",
                        help="take a published file out of the index; the ledger records it and keeps it "
                        "out (repeatable; deliberate only)")
    parser.add_argument("--restore", action="append", default=[], metavar="FILENAME",
                        help="put a removed file back in the index as it was published (repeatable)")
    parser.add_argument("--jobs", type=_jobs, default=None, metavar="N",
                        help="worker processes reading a large batch of wheels (default: the CPUs available; "
                        f"batches under {PARALLEL_MIN_BYTES >> 20} MiB are read in this process)")
    parser.add_argument("--recipes", type=Path, default=None, metavar="DIR",
                        help="recipes folder: the front page then lists the cells with no wheel yet, and why")
    parser.add_argument("--table", type=Path, default=None, metavar="FILE",
                        help="compatibility table of the run, for the variant indexes, selector.json and the "
                        "front page (default: DIR/table.yaml with --recipes, else recipes/table.yaml)")
    parser.add_argument("--reports", type=Path, default=None, metavar="DIR",
                        help="build reports (<DIR>/<cell>/report.json, e.g. build-cells): failed cells link to theirs")
    parser.add_argument("--verbose", action="store_true", help="print the time each step took")
    return _run(parser.parse_args(argv))


def _jobs(text: str) -> int:
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes (a whole number, 1 or more)")
    return jobs


@cli
def _run(args: argparse.Namespace) -> int:
    if args.ledger is None:
        args.ledger = default_ledger(args.site)
    yanked = args.yanked
    if yanked is None and DEFAULT_YANKED.exists():
        yanked = DEFAULT_YANKED
    report = generate.build_index(generate.IndexRun(
        wheels_dir=args.wheels,
        output_dir=args.site,
        base_url=args.base_url,
        ledger_path=args.ledger,
        yanked_path=yanked,
        site_url=args.site_url,
        init_ledger=args.init_ledger,
        start_over=args.start_over,
        remove=args.remove,
        restore=args.restore,
        jobs=args.jobs if args.jobs is not None else default_jobs(),
        recipes_dir=args.recipes,
        reports_dir=args.reports,
        table_path=args.table,
    ))
    print(
        f"index: {report.files} files in {report.projects} projects, "
        f"{len(report.variant_indexes)} variant indexes -> {args.site} "
        f"({len(report.added)} new, {report.hashed} hashed, {len(report.removed)} removed)"
    )
    if report.ledger_origin == "site":
        print(f"  ledger {args.ledger} started from the site's own ledger.json")
    for fn in report.removed:
        print(f"  removed: {fn}")
    for fn in report.restored:
        print(f"  restored: {fn}")
    for fn in report.kept_out:
        print(f"  left out, removed from the index: {fn} (--restore {fn} publishes it again)")
    for warning in report.partial_yanks:
        print(f"  warning: {warning}")
    if report.dropped:
        print(f"  started over: {len(report.dropped)} file(s) the site published are no longer listed:")
        for fn in report.dropped:
            print(f"  dropped: {fn}")
    if args.verbose:
        print(f"  {report.reused_pages} project pages reused; seconds: "
              + ", ".join(f"{step} {seconds:.3f}" for step, seconds in report.timings.items()))
    if report.rejected:
        raise IndexBuildError(
            f"{len(report.rejected)} file(s) left out; the rest is published:\n  "
            + "\n  ".join(r.line() for r in report.rejected)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
