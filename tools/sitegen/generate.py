"""The package index: a static site that pip and uv install from, plus a page for people.

    python -m tools.index --wheels dist --site build/site --base-url https://host/files

(the command is tools/index.py; this module is the order of the steps, build_index).

Layout of the site (``--site``, INDEX_DIR)::

    index.html                                   for people: coverage matrix, pip and uv commands
    ledger.json                                  copy of the ledger this site was built from
    cuwheels-select.pyz                          the selector as one file (tools.selector.bundle), to download
    selector.json                                facts the selector reads from the site (tools.selector.facts)
    simple/index.html, simple/index.json         every project (PEP 503 / PEP 691 root)
    simple/<project>/index.html, index.json      every file of <project>
    cu128/torch2.8/simple/...                    variant index: only wheels for CUDA 12.8 + torch 2.8
    cu12/torch2.8/simple/...                     variant index for "any CUDA 12.x" wheels
    docs/                                        the docs site (make docs DOCS_DIR=<site>/docs; the publish job)
    .index-fingerprints.json                     what each project page was rendered from

and beside it, never published: ``.<name>.prev`` (the previous site, until the next run),
``.<name>.hashcache.json`` (size, mtime, ctime, inode and sha256 of wheels already read),
``.<name>.lock``; beside the ledger, ``.<ledger name>.lock``.

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
wheel's METADATA is extracted to ``<wheel>.metadata`` beside it in ``--wheels``, so uploading
that directory to ``--base-url`` puts the PEP 658 file at the wheel's URL + ``.metadata``.

Ledger: the ledger is the authority (tools.sitegen.ledger_file; the site publishes the one it was
built from as ``ledger.json``). Pages are rendered from it, not from the wheels on disk, so a
``--wheels`` holding only a new batch keeps everything published before. A known file name
arriving with another sha256 stops the run (files are immutable), and so does a site listing a
file the ledger lacks or records with another sha256; a file spelled otherwise but the same to
installers (project, version, build tag, tags) is left out; files leave the index only through
``--remove FILENAME``, recorded in the ledger, and stay out until ``--restore FILENAME``. A missing
``--ledger`` is refused, unless ``--init-ledger`` starts it from the site's own ``ledger.json``
(or empty, where there is no site), or ``--start-over`` starts it empty over a site and names
every file that site loses. The ledger's lock is held from reading it to swapping the site in,
so two runs with different sites can't both merge into it. The ledger and the wheels may not sit
inside the site, which is replaced whole.

Incremental: a wheel already in the ledger whose size, mtime, ctime and inode match the hash
cache (machine-local) is not read again, and a project page whose inputs (its files as published,
their yank status, tools.sitegen.render and the templates) have the fingerprint recorded in the
current site is linked from it instead of rendered.

Order of writes: a new wheel's ``.metadata`` is written when it is read; the new site is written
into a staging directory; then the ledger (to a temporary file, fsynced and ``os.replace``-d);
then the site is swapped in at once: a site only ever lists what the ledger records, and a run
that fails before the swap (a full disk included) leaves the site and the ledger as they were.

Exit status: 0 when every wheel was indexed; 11 (IndexBuildError) when the index could not be
built (nothing changed; a file system error, a full disk included, is named with the step and
the path), or when some wheels were left out (each named with its reason; the rest is published).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import wraps
from pathlib import Path

from .frontpage import load_planned
from tools.core.errors import IndexBuildError
from tools.core.regularfile import FileTooLarge, read_regular
from .ledger_file import (
    MAX_LEDGER_BYTES, Ledger, Removal, atomic_write, dump_ledger, lock_path, parse_ledger_document, read_ledger_text,
    url_problem,
)
from .ledger_check import check_ledger
from .render import json_text, render_site
from .scan import CACHE_SCHEMA, Rejected, load_hash_cache, scan_wheels, utc_timestamp
from .swap import (
    WrittenPages, check_replaceable, delete_in_background, locked, recover, reuser, side_path, swap_in,
)
from tools.plan.table import TABLE_PATH, load_table
from .yanks import check_nothing_dropped, check_yanked, load_yanked, partial_yanks


def _read_site_copy(output_dir: Path) -> str | None:
    """The current site's copy of the ledger it was built from (None: no site)."""
    path = output_dir / "ledger.json"
    try:
        return read_regular(path, MAX_LEDGER_BYTES).decode("utf-8")
    except FileNotFoundError:
        return None
    except FileTooLarge:
        raise IndexBuildError(f"{path} is over {MAX_LEDGER_BYTES >> 20} MiB, the most a ledger is read to",
                              hint="the site's ledger.json was changed by hand: restore the site") from None
    except UnicodeDecodeError as exc:
        raise IndexBuildError(f"{path} is not UTF-8 text: {exc}",
                              hint="the site's ledger.json was changed by hand: restore the site") from None


def _starting_ledger(ledger_path: Path, exists: bool, site: Ledger | None, output_dir: Path, *, init: bool,
                     start_over: bool) -> str:
    """Where this run's ledger comes from: ``ledger`` (the file), ``site`` (a missing ledger started
    from the site's own copy: ``init``) or ``new`` (empty); IndexBuildError for a missing ledger
    that would lose what the site publishes. ``exists``: whether the ledger file exists."""
    if exists:
        if start_over:
            raise IndexBuildError(
                f"--start-over: ledger {ledger_path} exists",
                hint="--start-over only starts a ledger where there is none; to drop everything it "
                "records, move it aside first (it is the record of what was published)",
            )
        return "ledger"
    if start_over or (init and site is None):
        return "new"
    if init:
        return "site"
    if site is None:
        raise IndexBuildError(f"ledger {ledger_path} does not exist",
                              hint="pass the right --ledger, or --init-ledger to start a new, empty index")
    raise IndexBuildError(
        f"ledger {ledger_path} does not exist, and the site {output_dir} publishes {len(site.files)} file(s)",
        hint="pass the right --ledger; or --init-ledger to start it from the site's own ledger.json "
        "(nothing published is lost); or --start-over to publish a new index without those files",
    )


def _check_apart(output_dir: Path, **paths: Path) -> None:
    """Refuse a ledger or a wheels directory inside the site: the site is replaced whole."""
    site = output_dir.resolve()
    for what, path in paths.items():
        resolved = Path(path).absolute().resolve()
        if resolved == site or site in resolved.parents:
            raise IndexBuildError(
                f"--{what.replace('_', '-')} {path} is inside the site {output_dir}",
                hint="every run replaces the site whole (its ledger.json is only a copy): keep the "
                "ledger and the wheels outside it",
            )


@contextmanager
def _writing(what: str, hint: str) -> Iterator[None]:
    """Turn a file system error of one write step into an IndexBuildError naming the step."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            hint = f"the file system is full: free space there and run again; {hint}"
        raise IndexBuildError(f"{what} failed: {exc}", hint=hint) from None


def _table_path(table_path: Path | None, recipes_dir: Path | None) -> Path:
    """The run's table: the one named, else the recipes folder's, else recipes/table.yaml."""
    if table_path is not None:
        return Path(table_path)
    return Path(recipes_dir) / "table.yaml" if recipes_dir is not None else TABLE_PATH


@dataclass(frozen=True)
class IndexReport:
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
    #: files put back with --restore
    restored: tuple[str, ...] = ()
    #: removed files found in the batch with their recorded bytes, left out
    kept_out: tuple[str, ...] = ()
    #: files the previous site published that this one doesn't (--start-over only)
    dropped: tuple[str, ...] = ()
    #: where the ledger came from: "ledger" (--ledger), "site" (the site's copy), "new" (empty)
    ledger_origin: str = "ledger"
    #: a warning per version the yank list yanks only some files of (tools.sitegen.yanks.partial_yanks)
    partial_yanks: tuple[str, ...] = ()


def _os_errors_named(func: Callable[..., IndexReport]) -> Callable[..., IndexReport]:
    """Turn a file system error no step named (reading the site, the wheels directory, a lock
    file) into an IndexBuildError: a message and exit 11, never a traceback."""
    @wraps(func)
    def wrapper(*args, **kwargs) -> IndexReport:
        try:
            return func(*args, **kwargs)
        except OSError as exc:
            raise IndexBuildError(f"the index could not be built: {exc}",
                                  hint="nothing was published; fix the file or directory named and run again",
                                  ) from None
    return wrapper


@dataclass(frozen=True)
class IndexRun:
    """One run of the index: what it reads, where it writes, and what it changes.

    ``remove`` takes files out (recorded in the ledger), ``restore`` puts removed ones back.
    ``jobs``: the most worker processes that read a large batch of wheels (see
    tools.core.workers). ``recipes_dir``: the front page also says, per recipe, which planned
    cells have no wheel yet and why (with the build reports under ``reports_dir``,
    ``<cell>/report.json``, for the failed ones). ``table_path``: the compatibility table of the
    run (default: ``recipes_dir``'s ``table.yaml``, else recipes/table.yaml), loaded once, with
    the recipes, before anything is written. ``init_ledger`` and ``start_over``: see the
    module's docstring.
    """

    wheels_dir: Path
    output_dir: Path
    base_url: str
    ledger_path: Path
    yanked_path: Path | None = None
    site_url: str | None = None
    init_ledger: bool = False
    start_over: bool = False
    remove: Sequence[str] = ()
    restore: Sequence[str] = ()
    now: datetime | None = None
    jobs: int = 1
    recipes_dir: Path | None = None
    reports_dir: Path | None = None
    table_path: Path | None = None


@_os_errors_named
def build_index(run: IndexRun) -> IndexReport:
    """Index the wheels in ``wheels_dir`` together with everything in the ledger.

    Writes each new wheel's ``.metadata`` beside it, the new site into a staging directory, then
    the ledger, then swaps the new site in at ``output_dir``. Raises IndexBuildError (changing
    neither the site nor the ledger) for a changed immutable file, a bad yank list, a missing
    ledger (see the module's docstring: ``init_ledger``, ``start_over``), a site that would lose
    or change files, a ledger or site held by another run, or a file system error (a full disk).
    """
    wheels_dir, output_dir, ledger_path = (Path(run.wheels_dir), Path(run.output_dir).absolute(),
                                           Path(run.ledger_path))
    base_url, yanked_path, site_url, remove, restore = (run.base_url, run.yanked_path,
                                                        run.site_url, run.remove, run.restore)
    init_ledger, start_over, now, jobs = run.init_ledger, run.start_over, run.now, run.jobs
    recipes_dir, reports_dir, table_path = run.recipes_dir, run.reports_dir, run.table_path
    if not base_url:
        raise IndexBuildError("--base-url is empty", hint="give the URL the wheels directory is uploaded to")
    if problem := url_problem(base_url):
        raise IndexBuildError(f"--base-url {base_url[:200]!r} {problem}",
                              hint="give the http(s) URL the wheels directory is uploaded to")
    if not wheels_dir.is_dir():
        raise IndexBuildError(f"wheels directory {wheels_dir} does not exist")
    _check_apart(output_dir, ledger=ledger_path, wheels_dir=wheels_dir)
    both = sorted(set(remove) & set(restore))
    if both:
        raise IndexBuildError(f"--remove and --restore both name {', '.join(both)}", hint="name each file once")
    now = now or datetime.now(timezone.utc)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    cache_path = side_path(output_dir, "hashcache.json")
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        now_ = time.perf_counter()
        timings[step] = now_ - clock
        clock = now_

    # The ledger's lock, not only the site's: two runs with different sites and one ledger would
    # otherwise each merge into the ledger they read, and the second write would drop the first's.
    with locked(lock_path(ledger_path)), locked(side_path(output_dir, "lock")):
        reaper = delete_in_background(recover(output_dir))
        try:
            check_replaceable(output_dir)
            site_copy = _read_site_copy(output_dir)
            ledger_text = read_ledger_text(ledger_path, init=True)
            # The ledger the current site was built from, unchanged: its entries were checked then.
            trusted = ledger_text is not None and site_copy == ledger_text
            site = None
            if site_copy is not None and not trusted:
                site = parse_ledger_document(site_copy, source=str(output_dir / "ledger.json"))
                check_ledger(site, source=str(output_dir / "ledger.json"))
            origin = _starting_ledger(ledger_path, ledger_text is not None, site, output_dir,
                                      init=init_ledger, start_over=start_over)
            if origin == "site":
                ledger, ledger_text = site, site_copy
            elif origin == "new":
                ledger, ledger_text = Ledger({}, {}), None
            else:
                ledger = parse_ledger_document(ledger_text, source=str(ledger_path), trusted=trusted)
                if not trusted:
                    check_ledger(ledger, source=str(ledger_path))
            yanked = load_yanked(Path(yanked_path) if yanked_path else None)
            table = load_table(_table_path(table_path, recipes_dir))
            planned = load_planned(Path(recipes_dir), table, reports_dir) if recipes_dir else None
            files, removals = dict(ledger.files), dict(ledger.removed)
            for fn in restore:
                if fn not in removals:
                    raise IndexBuildError(f"--restore {fn}: the ledger records no removal of {fn}",
                                          hint="--restore takes a file name from the ledger's \"removed\"")
                files[fn] = removals.pop(fn).entry
            cache = load_hash_cache(cache_path)
            lap("load")
            # New wheels' .metadata files are written as each is read (tools.sitegen.wheelread.index_wheel).
            scan = scan_wheels(wheels_dir, files, cache, removed=removals, base_url=base_url, now=now, jobs=jobs)
            # A known wheel's .metadata is trusted when present, so restoring one is atomic.
            with _writing("restoring a known wheel's .metadata", "the site and the ledger are unchanged"):
                for fn, data in scan.metadata_restores.items():
                    atomic_write(wheels_dir / (fn + ".metadata"), data)
            lap("scan")
            entries = scan.entries
            for fn in remove:
                if fn not in entries:
                    known = f"already removed ({removals[fn].removed_time})" if fn in removals else "no such file"
                    raise IndexBuildError(f"--remove {fn}: {known} in the ledger")
                # Its wheel and .metadata stay where they were uploaded; the ledger keeps its entry.
                removals[fn] = Removal(entries.pop(fn), utc_timestamp(now))
            dropped: tuple[str, ...] = ()
            if start_over and site is not None:
                dropped = tuple(sorted(site.files.keys() - entries.keys()))
            elif site is not None:
                check_nothing_dropped(site.files, entries, removals)
            check_yanked(yanked, entries, source=str(yanked_path))
            new_text = dump_ledger(entries, removed=removals, base=(ledger_text, ledger) if trusted else None)
            lap("ledger")
            staging = Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}.new-"))
            try:
                with _writing(f"writing the new site in {staging}", "the site and the ledger are unchanged"):
                    os.chmod(staging, 0o755)  # mkdtemp makes it 0700; the site is for a web server to read
                    site_pages = render_site(entries, yanked, table=table, site_url=site_url, ledger_text=new_text,
                                             pages=WrittenPages(staging), reuse=reuser(output_dir, staging),
                                             planned=planned)
                lap("render+write")
                if origin != "ledger" or new_text != ledger_text:
                    # (The text differs too for a ledger of an older schema, rewritten as the current.)
                    # The ledger goes before the swap: a site may only ever list what the ledger records.
                    with _writing(f"writing the ledger {ledger_path}", "the site and the ledger are unchanged"):
                        atomic_write(ledger_path, new_text.encode("utf-8"), durable=True)
                with _writing(f"swapping the new site in at {output_dir}",
                              "the ledger records the new files and the next run publishes them"):
                    swap_in(staging, output_dir)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            if scan.cache != cache:
                try:
                    atomic_write(cache_path, json_text({"schema": CACHE_SCHEMA, "files": scan.cache}).encode("utf-8"))
                except OSError:
                    pass  # a cache: the next run hashes again what it can't vouch for
            lap("swap")
        finally:
            reaper.join()
            lap("cleanup")
    return IndexReport(
        files=len(entries),
        added=tuple(scan.added),
        removed=tuple(remove),
        rejected=tuple(scan.rejected),
        hashed=scan.hashed,
        projects=len(site_pages.projects),
        variant_indexes=site_pages.variant_indexes,
        reused_pages=site_pages.reused,
        timings=timings,
        restored=tuple(restore),
        kept_out=tuple(scan.kept_out),
        dropped=dropped,
        ledger_origin=origin,
        partial_yanks=tuple(partial_yanks(yanked, entries)),
    )
