"""The package index: a static site that pip and uv install from, plus a page for people.

    python -m tools.index --wheels-dir dist --output-dir build/site --base-url https://host/files

(the command is tools/index.py; this module is the order of the steps, build_index).

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

Each step of build_index is its own module:

* tools.sitegen.scan: the batch against the ledger: known wheels compared, new ones read
  (tools.sitegen.wheelread, in worker processes for a batch of 256 MiB or more: ``--jobs``, default the
  CPUs available), results in file-name order, so the site is the same byte for byte whatever
  the number of processes;
* tools.sitegen.yanks: the yank list (``--yanked``, ``index/yanked.yaml``) and the refusal to lose files;
* tools.sitegen.placement: which files each variant index (one CUDA, torch pair) lists;
* tools.sitegen.render (with tools.sitegen.frontpage, the front page's matrix and what is missing):
  every page, from the ledger;
* tools.sitegen.swap: writing the pages, reusing unchanged ones, the lock and the atomic swap.

One run reads one compatibility table (``table_path``; by default ``table.yaml`` of the recipes
folder when one is given, else recipes/table.yaml): the placement (each torch series' C++ ABI),
the selector's ``selector.json`` and the front page's planned cells all come from it.

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

import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .frontpage import load_planned
from tools.core.errors import IndexBuildError
from .ledger import atomic_write, dump_ledger, parse_ledger, read_ledger_text
from .render import json_text, render_site
from .scan import Rejected, scan_wheels
from .swap import (
    WrittenPages, check_replaceable, delete_in_background, locked, recover, reuser, side_path, swap_in,
)
from tools.plan.table import TABLE_PATH, load_table
from .yanks import check_nothing_dropped, check_yanked, load_yanked


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


def _table_path(table_path: Path | None, recipes_dir: Path | None) -> Path:
    """The run's table: the one named, else the recipes folder's, else recipes/table.yaml."""
    if table_path is not None:
        return Path(table_path)
    return Path(recipes_dir) / "table.yaml" if recipes_dir is not None else TABLE_PATH


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
    table_path: Path | None = None,
) -> BuildReport:
    """Index the wheels in ``wheels_dir`` together with everything in the ledger.

    Writes each new wheel's ``.metadata`` beside it, then the ledger, then swaps the new site in
    at ``output_dir``. Raises IndexBuildError (changing nothing) for a changed immutable file, a
    bad yank list, a missing ledger, or a site that would lose files. ``jobs``: the most worker
    processes that read a large batch of wheels (see tools.core.workers). ``recipes_dir``: the front
    page also says, per recipe, which planned cells have no wheel yet and why (with the build
    reports under ``reports_dir``, ``<cell>/report.json``, for the failed ones). ``table_path``:
    the compatibility table of the run (default: ``recipes_dir``'s ``table.yaml``, else
    recipes/table.yaml), loaded once, with the recipes, before anything is written.
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
            table = load_table(_table_path(table_path, recipes_dir))
            planned = load_planned(Path(recipes_dir), table, reports_dir) if recipes_dir else None
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
                site = render_site(entries, yanked, table=table, site_url=site_url,
                                   ledger_text=ledger_text, pages=WrittenPages(staging),
                                   reuse=reuser(output_dir, staging), planned=planned)
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
