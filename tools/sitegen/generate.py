"""The package index: a static site that pip and uv install from, plus a page for people.

    python -m tools.index --wheels-dir dist --output-dir build/site --base-url https://host/files

Layout of the site (``--output-dir``, INDEX_DIR)::

    index.html                                   for people: coverage matrix, pip and uv commands
    ledger.json                                  copy of the ledger this site was built from
    cuwheels-select.pyz                          the selector as one file (tools.selector.bundle), to download
    selector.json                                facts the selector reads from the site (tools.selector.facts)
    simple/index.html, simple/index.json         every project (PEP 503 / PEP 691 root)
    simple/<project>/index.html, index.json      every file of <project>
    cu128/torch2.8/simple/...                    variant index: only wheels for CUDA 12.8 + torch 2.8
    cu12/torch2.8/simple/...                     variant index for "any CUDA 12.x" wheels
    .index-fingerprints.json                     what each project page was rendered from

and beside it, never published: ``.<name>.prev`` (the previous site, until the next run),
``.<name>.hashcache.json`` (size, mtime and sha256 of wheels already read), ``.<name>.lock``.

This module is the command and the order of the steps (build_index); each step is its own module:

* tools.sitegen.scan: the batch against the ledger: known wheels compared, new ones read
  (tools.sitegen.wheelread, in worker processes for a batch of 256 MiB or more: ``--jobs``, default the
  CPUs available), results in file-name order, so the site is the same byte for byte whatever
  the number of processes;
* tools.sitegen.yanks: the yank list (``--yanked``, ``index/yanked.yaml``) and the refusal to lose files;
* tools.sitegen.placement: which files each variant index (one CUDA, torch pair) lists;
* tools.sitegen.render (with tools.sitegen.frontpage, the front page's matrix): every page, from the ledger;
* tools.sitegen.swap: writing the pages, reusing unchanged ones, the lock and the atomic swap.

Wheels are not copied into the site: each link points at ``--base-url`` + the file name, and the
wheel's METADATA is extracted to ``<wheel>.metadata`` beside it in ``--wheels-dir``, so uploading
that directory to ``--base-url`` puts the PEP 658 file at the wheel's URL + ``.metadata``.

Ledger: pages are rendered from the ledger (tools.ledger; the site publishes the one it was built
from as ``ledger.json``), not from the wheels on disk, so a ``--wheels-dir`` holding only a new
batch keeps everything published before; a known file name arriving with another sha256 stops the
run (files are immutable); files leave the index only through ``--remove FILENAME``; and a run
refuses to drop files the current site lists that the ledger lacks.

Incremental: a wheel already in the ledger whose size and mtime match the hash cache (machine-
local) is not read again, and a project page whose inputs (its files as published, their yank
status, tools.sitegen.render and the templates) have the fingerprint recorded in the current site is
linked from it instead of rendered.

Order of writes: a new wheel's ``.metadata`` is written when it is read, then the ledger (to a
temporary file, fsynced and ``os.replace``-d), then the site, swapped in at once: a site only
ever lists what the ledger records.

Exit status: 0 when every wheel was indexed; 11 (IndexBuildError) when the index could not be
built (nothing changed) or when some wheels were left out (each named with its reason; the rest
is published).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .frontpage import missing_for
from tools.core.digest import PARALLEL_MIN_BYTES
from tools.core.errors import IndexBuildError, cli
from .ledger import atomic_write, dump_ledger, parse_ledger, read_ledger_text
from .render import json_text, render_site
from .scan import Rejected, scan_wheels
from .swap import (
    WrittenPages, check_replaceable, delete_in_background, locked, recover, reuser, side_path, swap_in,
)
from tools.core.workers import default_jobs
from .yanks import check_nothing_dropped, check_yanked, load_yanked

#: Defaults of the command line, relative to where it runs (the repository root).
DEFAULT_LEDGER = Path("index/ledger.json")
DEFAULT_YANKED = Path("index/yanked.yaml")


def _load_cache(path: Path) -> dict[str, list]:
    """The hash cache beside the site (``{path: [size, mtime_ns, sha256]}``); empty when unreadable."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return doc["files"] if doc.get("schema") == 1 else {}
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return {}  # a cache: when in doubt, hash again


def _read_or_none(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _listed_files(site_copy: str | None, output_dir: Path) -> list[str]:
    """The files the current site lists, from its copy of the ledger it was built from."""
    if site_copy is None:
        return []
    try:
        return list(json.loads(site_copy).get("files", {}))
    except (ValueError, AttributeError) as exc:
        raise IndexBuildError(f"{output_dir / 'ledger.json'} is not a ledger: {exc}") from None


@dataclass(frozen=True)
class BuildReport:
    """What one build did."""

    files: int
    added: tuple[str, ...]
    removed: tuple[str, ...]
    rejected: tuple[Rejected, ...]
    hashed: int
    projects: int
    variant_indexes: tuple[str, ...]
    #: project pages (HTML and JSON) copied from the previous site instead of rendered
    reused_pages: int = 0
    #: seconds spent in each step (scan, ledger, render+write, swap...), for the benchmark
    timings: dict[str, float] = field(default_factory=dict)


def build_index(
    *,
    wheels_dir: Path,
    output_dir: Path,
    base_url: str,
    ledger_path: Path,
    yanked_path: Path | None = None,
    site_url: str | None = None,
    init_ledger: bool = False,
    remove: Sequence[str] = (),
    now: datetime | None = None,
    jobs: int = 1,
    recipes_dir: Path | None = None,
    reports_dir: Path | None = None,
) -> BuildReport:
    """Index the wheels in ``wheels_dir`` together with everything in the ledger.

    Writes each new wheel's ``.metadata`` beside it, then the ledger, then swaps the new site in
    at ``output_dir``. Raises IndexBuildError (changing nothing) for a changed immutable file, a
    bad yank list, a missing ledger, or a site that would lose files. ``jobs``: the most worker
    processes that read a large batch of wheels (see tools.core.workers). ``recipes_dir``: the front
    page also says, per recipe, which cells have no wheel yet and why (with the build reports
    under ``reports_dir``, ``<cell>/report.json``, for the failed ones).
    """
    wheels_dir, output_dir, ledger_path = Path(wheels_dir), Path(output_dir).absolute(), Path(ledger_path)
    if not base_url:
        raise IndexBuildError("--base-url is empty", hint="give the URL the wheels directory is uploaded to")
    if not wheels_dir.is_dir():
        raise IndexBuildError(f"wheels directory {wheels_dir} does not exist")
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    cache_path = side_path(output_dir, "hashcache.json")
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        now_ = time.perf_counter()
        timings[step] = now_ - clock
        clock = now_

    with locked(side_path(output_dir, "lock")):
        reaper = delete_in_background(recover(output_dir))
        try:
            check_replaceable(output_dir)
            ledger_before = read_ledger_text(ledger_path, init=init_ledger)
            site_copy = _read_or_none(output_dir / "ledger.json")
            # The ledger the current site was built from, unchanged: its entries were checked then.
            trusted = ledger_before is not None and site_copy == ledger_before
            ledger = {} if ledger_before is None else parse_ledger(ledger_before, source=str(ledger_path),
                                                                   trusted=trusted)
            yanked = load_yanked(Path(yanked_path) if yanked_path else None)
            cache = _load_cache(cache_path)
            lap("load")
            # New wheels' .metadata files are written as each is read (tools.sitegen.wheelread.index_wheel).
            scan = scan_wheels(wheels_dir, ledger, cache, base_url=base_url,
                               now=now or datetime.now(timezone.utc), jobs=jobs)
            # A known wheel's .metadata is trusted when present, so restoring one is atomic.
            for fn, data in scan.metadata_restores.items():
                atomic_write(wheels_dir / (fn + ".metadata"), data)
            lap("scan")
            entries = scan.entries
            for fn in remove:
                if fn not in entries:
                    raise IndexBuildError(f"--remove {fn}: no such file in the ledger")
                del entries[fn]  # its wheel and .metadata stay where they were uploaded
            if not trusted:
                check_nothing_dropped(_listed_files(site_copy, output_dir), entries, remove)
            check_yanked(yanked, entries, source=str(yanked_path))
            ledger_text = dump_ledger(entries, base=(ledger_before, ledger) if trusted else None)
            if entries != ledger or ledger_text != ledger_before:
                # (The text differs too for a ledger of an older schema, rewritten as the current.)
                # The ledger goes first: a site may only ever list what the ledger records.
                atomic_write(ledger_path, ledger_text.encode("utf-8"), durable=True)
            lap("ledger")
            staging = Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}.new-"))
            try:
                os.chmod(staging, 0o755)  # mkdtemp makes it 0700; the site is for a web server to read
                missing, reports = (missing_for(recipes_dir, reports_dir, entries.values())
                                    if recipes_dir else (None, None))
                site = render_site(entries, yanked, site_url=site_url, ledger_text=ledger_text,
                                   pages=WrittenPages(staging), reuse=reuser(output_dir, staging),
                                   missing=missing, reports=reports)
                lap("render+write")
                swap_in(staging, output_dir)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            if scan.cache != cache:
                atomic_write(cache_path, json_text({"schema": 1, "files": scan.cache}).encode("utf-8"))
            lap("swap")
        finally:
            reaper.join()
            lap("cleanup")
    return BuildReport(
        files=len(entries),
        added=tuple(scan.added),
        removed=tuple(remove),
        rejected=tuple(scan.rejected),
        hashed=scan.hashed,
        projects=len(site.projects),
        variant_indexes=site.variant_indexes,
        reused_pages=site.reused,
        timings=timings,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.index``: build the index; exit 11 if it couldn't or if wheels were left out."""
    parser = argparse.ArgumentParser(prog="python -m tools.index", description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheels-dir", required=True, type=Path,
                        help="wheels of this batch (their .metadata files are written beside them)")
    parser.add_argument("--output-dir", required=True, type=Path, help="the site (INDEX_DIR), replaced atomically")
    parser.add_argument("--base-url", required=True, help="URL the wheels directory is uploaded to")
    parser.add_argument("--ledger", type=Path, default=DEFAULT_LEDGER, help="record of everything published")
    parser.add_argument("--init-ledger", action="store_true",
                        help="start a new, empty ledger if --ledger doesn't exist")
    parser.add_argument("--yanked", type=Path, default=None,
                        help=f"yank list {{filename: reason}} (default: {DEFAULT_YANKED} when it exists)")
    parser.add_argument("--site-url", default=None, help="public URL of the site, for the commands on its front page")
    parser.add_argument("--remove", action="append", default=[], metavar="FILENAME",
                        help="delete a published file from the index (repeatable; deliberate only)")
    parser.add_argument("--jobs", type=_jobs, default=None, metavar="N",
                        help="worker processes reading a large batch of wheels (default: the CPUs available, "
                        f"{default_jobs()} here; batches under {PARALLEL_MIN_BYTES >> 20} MiB are read in this process)")
    parser.add_argument("--recipes", type=Path, default=None, metavar="DIR",
                        help="recipes folder: the front page then lists the cells with no wheel yet, and why")
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
    yanked = args.yanked
    if yanked is None and DEFAULT_YANKED.exists():
        yanked = DEFAULT_YANKED
    report = build_index(
        wheels_dir=args.wheels_dir,
        output_dir=args.output_dir,
        base_url=args.base_url,
        ledger_path=args.ledger,
        yanked_path=yanked,
        site_url=args.site_url,
        init_ledger=args.init_ledger,
        remove=args.remove,
        jobs=args.jobs if args.jobs is not None else default_jobs(),
        recipes_dir=args.recipes,
        reports_dir=args.reports,
    )
    print(
        f"index: {report.files} files in {report.projects} projects, "
        f"{len(report.variant_indexes)} variant indexes -> {args.output_dir} "
        f"({len(report.added)} new, {report.hashed} hashed, {len(report.removed)} removed)"
    )
    for fn in report.removed:
        print(f"  removed: {fn}")
    if args.verbose:
        print(f"  {report.reused_pages} project pages reused; seconds: "
              + ", ".join(f"{step} {seconds:.3f}" for step, seconds in report.timings.items()))
    if report.rejected:
        raise IndexBuildError(
            f"{len(report.rejected)} file(s) left out; the rest is published:\n  "
            + "\n  ".join(f"{r.filename}: {r.reason}" for r in report.rejected)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
