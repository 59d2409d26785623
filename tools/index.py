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
    cu12/torch2.8/simple/...                     variant index for "any CUDA 12.x" wheels (see below)
    .index-fingerprints.json                     what each project page was rendered from

and beside it, never published: ``.<name>.prev`` (the previous site, until the next run),
``.<name>.hashcache.json`` (size, mtime and sha256 of wheels already read), ``.<name>.lock``.

HTML pages follow PEP 503 (normalized names, trailing slashes, ``#sha256=`` on every link), PEP 629
(``pypi:repository-version``), PEP 592 (``data-yanked``) and PEP 658/714 (``data-core-metadata``
and ``data-dist-info-metadata``). Each page has a PEP 691 JSON twin (API 1.1, PEP 700: ``size``,
``upload-time``, ``versions``) as ``index.json`` in the same directory: static hosting can't
negotiate content types, so JSON clients must be pointed at ``.../simple/<project>/index.json``
explicitly there; ``python -m tools.serve`` negotiates (``Accept``) and serves either at the
directory URL. Every file with a variant also carries, in the JSON only, a private key (PEP 691
reserves ``_`` keys; pip and uv ignore them) read by tools.selector, so that it can check the GPU
arch without reading the wheel::

    "_cuwheels": {"cuda": "12.8", "torch": "2.8", "cxx11_abi": true,
                  "archs": {"<module>": {"ptx": [...], "sass": [...]}} or null}

(``archs``: the ledger's, i.e. the build manifest's ``archs.found``.)

Wheels are not copied into the site: each link points at ``--base-url`` + the file name, and the
wheel's METADATA is extracted to ``<wheel>.metadata`` beside it in ``--wheels-dir``, so uploading
that directory to ``--base-url`` puts the PEP 658 file at the wheel's URL + ``.metadata``.

Variant indexes. A wheel's (CUDA, torch) identity comes from the build manifest inside it
(tools.manifest) where there is one, otherwise from its local version label
(tools.variant.parse_label: ours ``cu128.torch2.8``, Dao-AILab's ``cu12torch2.8cxx11abiTRUE``,
``cu128torch2.8``, ``cu.12.8.torch.2.10``, PyG's ``pt28cu128``). A wheel with neither is listed
only in the combined ``simple/``. Every variant index holds one (CUDA, torch) pair, so the highest
local label can never pull in a binary built for another torch (see FACTS.md). Two rules keep the
choice unambiguous inside one variant index:

* C++ ABI: a wheel whose label states a C++ ABI goes to a variant index only when that is the ABI
  of the official torch wheels for the pair (see ``official_cxx11_abi``); otherwise pip would pick
  ``...cxx11abiTRUE`` over ``...cxx11abiFALSE`` by string order. Such a wheel is still in
  ``simple/``.
* ``cu12`` ("any CUDA 12.x", Dao-AILab's convention) wheels are placed in their own
  ``cu12/torch2.8/`` index *and* in every exact CUDA 12.x index of the same torch that exists in the
  site (``cu126/torch2.8``, ``cu128/torch2.8``...), so a user only ever has to pick the index that
  matches ``torch.version.cuda``. Where that index already has a wheel of the same project,
  version and wheel tags built for exactly that CUDA, the exact build wins and the generic one is
  left out of that index. No exact index is invented for a CUDA minor nothing was built for.

Ledger and yanks: pages are rendered from the ledger (tools.ledger; the site publishes the one it
was built from as ``ledger.json``), not from the wheels on disk, so a ``--wheels-dir`` holding only
a new batch keeps everything published before; a known file
name arriving with another sha256 stops the run (files are immutable); files leave the index only
through ``--remove FILENAME``; and a run refuses to drop files the current site lists that the
ledger lacks. ``--yanked`` (``index/yanked.yaml``) maps file names to yank reasons, applied on
every page that lists the file.

Incremental: a wheel already in the ledger whose size and mtime match the hash cache (machine-
local) is not read again, and a project page whose inputs (its files as published, their yank
status, this module and the templates) have the fingerprint recorded in the current site is copied
from it instead of rendered. Every other file's link is rendered once, in one template pass,
however many pages list it.

Reading new wheels, which is most of a full build (hash, zip directory, METADATA checks, the
``.metadata`` file: tools.wheelread): a batch of 256 MiB or more is shared between up to
``--jobs`` worker processes (tools.workers; ``--jobs`` defaults to the CPUs available), with the
results taken in file-name order, so the site is the same byte for byte whatever the number of
processes; a smaller batch is read here.

Atomic output: the new site is written into a temporary directory beside INDEX_DIR and swapped in
with one ``renameat2(RENAME_EXCHANGE)``; where the kernel or file system lacks it, two renames are
used and a run killed between them leaves the old site at ``.<name>.prev``, put back by the next
run. The previous site stays at ``.<name>.prev`` until the next run (a rollback is one ``mv``).
The ledger is written to a temporary file, fsynced and ``os.replace``-d; a new wheel's
``.metadata`` is written before the ledger records the wheel (see build_index). A lock file
(``.<name>.lock``) keeps two runs off the same site.

Exit status: 0 when every wheel was indexed; 11 (IndexBuildError) when the index could not be
built (nothing changed) or when some wheels were left out (each named with its reason; the rest
is published).
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import jinja2
import yaml
from markupsafe import Markup
from packaging.utils import canonicalize_name

from .digest import PARALLEL_MIN_BYTES, hash_files, jobs_for
from .errors import IndexBuildError, cli
from .ledger import Entry, atomic_write, dump_ledger, parse_ledger, read_ledger_text
from .selector.bundle import site_files as selector_site_files
from .variant import Variant
from .wheelread import WheelRejected, index_wheel, parse_indexed, parse_version, read_wheel_metadata
from .workers import default_jobs, map_in_workers

#: PEP 629 / PEP 691 API version of every page: 1.1 is PEP 700 (size, upload-time, versions).
API_VERSION = "1.1"
#: Bumped when what a page says about a file changes (2: the JSON's ``_cuwheels``); part of every
#: page fingerprint, so a site built before is rendered again rather than reused.
PAGE_FORMAT = 2

TEMPLATES = Path(__file__).parent / "templates"
#: Defaults of the command line, relative to where it runs (the repository root).
DEFAULT_LEDGER = Path("index/ledger.json")
DEFAULT_YANKED = Path("index/yanked.yaml")


# --------------------------------------------------------------------------- scanning


@dataclass(frozen=True)
class Rejected:
    """A file left out of the index, and why."""

    filename: str
    reason: str


@dataclass
class Scan:
    """The outcome of reading ``--wheels-dir`` against the ledger."""

    entries: dict[str, Entry]
    added: list[str] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    hashed: int = 0
    #: known wheel's filename -> its METADATA, to write again as ``<wheel>.metadata`` beside it
    metadata_restores: dict[str, bytes] = field(default_factory=dict)
    cache: dict[str, list] = field(default_factory=dict)


def utc_timestamp(moment: datetime) -> str:
    """PEP 700's upload-time format: ISO 8601, UTC, microseconds, ``Z``."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def scan_wheels(
    wheels_dir: Path,
    ledger: Mapping[str, Entry],
    cache: Mapping[str, list],
    *,
    base_url: str,
    now: datetime,
    jobs: int = 1,
) -> Scan:
    """Merge the wheels in ``wheels_dir`` into the ledger.

    A wheel known to the ledger is not hashed again when the hash cache has its path with the same
    size and mtime. Known wheels are checked first: a known file name with other contents raises
    IndexBuildError before any new wheel is read. Each new wheel is then read by
    tools.wheelread.index_wheel, which writes its ``.metadata`` beside it; a known wheel's missing
    ``.metadata`` is read into ``scan.metadata_restores``. Nothing else is written here. With
    ``jobs`` > 1, a large batch is read by up to ``jobs`` worker processes (tools.workers).
    """
    scan = Scan(entries=dict(ledger))
    conflicts: list[str] = []
    upload_time = utc_timestamp(now)
    with os.scandir(wheels_dir) as it:
        dirents = sorted(it, key=lambda d: d.name)
    names = {d.name for d in dirents}
    directory = os.path.abspath(wheels_dir)
    new: list[tuple[str, str, os.stat_result]] = []
    unsure: list[tuple[str, str, os.stat_result, Entry]] = []
    stale = time.time() - 60
    for d in dirents:
        fn = d.name
        if fn.startswith("."):
            # A restored .metadata goes through a hidden temporary file: a killed run may leave one.
            if fn.endswith(".tmp") and ".metadata." in fn and d.stat().st_mtime < stale:
                os.unlink(d.path)
            continue
        if fn.endswith(".metadata"):
            continue
        if not d.is_file():
            scan.rejected.append(Rejected(fn, "not a regular file: wheels must sit directly in the directory"))
            continue
        if not fn.endswith(".whl"):
            scan.rejected.append(Rejected(fn, "not a wheel: only .whl files are indexed"))
            continue
        st = d.stat()
        key = f"{directory}/{fn}"  # the hash cache is keyed by absolute path
        known = ledger.get(fn)
        if known is None:
            new.append((fn, key, st))
        elif st.st_size != known.size:
            conflicts.append(f"{fn}: {st.st_size} bytes, published with {known.size} bytes")
        elif (cached := cache.get(key)) is not None and cached == [st.st_size, st.st_mtime_ns, known.sha256]:
            scan.cache[key] = cached
            if fn + ".metadata" not in names:
                _restore_metadata(Path(key), known, scan)
        else:
            unsure.append((fn, key, st, known))
    # Published before but not in the hash cache: only the bytes are compared (the wheel was
    # validated when it was published).
    sizes = [u[2].st_size for u in unsure]
    hashes = hash_files([u[1] for u in unsure], jobs=jobs_for(sizes, jobs))
    for (fn, key, st, known), hashed in zip(unsure, hashes, strict=True):
        if isinstance(hashed, OSError):
            conflicts.append(f"{fn}: published, but this copy can't be read: {hashed}")
            continue
        sha256 = hashed[0]
        scan.hashed += 1
        if sha256 != known.sha256:
            conflicts.append(f"{fn}: sha256 {sha256}, published with {known.sha256}")
            continue
        scan.cache[key] = [st.st_size, st.st_mtime_ns, sha256]
        if fn + ".metadata" not in names:
            _restore_metadata(Path(key), known, scan)
    if conflicts:
        raise IndexBuildError(
            "files are immutable, and these differ from what was published under the same name:\n  "
            + "\n  ".join(conflicts),
            hint="a rebuilt wheel needs a new file name (bump the version or its build tag); "
            "nothing was changed",
        )
    # Each new wheel is read once, checked, and its .metadata written (tools.wheelread), by
    # worker processes for a large batch, here otherwise; in order either way.
    paths = [n[1] for n in new]
    use = jobs_for([n[2].st_size for n in new], jobs)
    if use > 1:
        lines = map_in_workers("tools.wheelread:indexer", paths, workers=use, args=(base_url, upload_time))
    else:
        lines = (None for _ in new)
    # closing(): an error here stops the workers at once, not when the traceback is collected.
    written: dict[str, str] = {}  # .metadata files written here, for hard links (wheelread.write_metadata)
    with closing(lines):
        for (fn, key, st), line in zip(new, lines, strict=True):
            if line is None:  # no workers, or this wheel's worker died
                outcome = index_wheel(key, base_url=base_url, upload_time=upload_time, written=written)
            else:
                outcome = parse_indexed(line, fn)
            if isinstance(outcome, str):
                scan.rejected.append(Rejected(fn, outcome))
                continue
            scan.hashed += 1
            scan.entries[fn] = outcome
            scan.added.append(fn)
            if outcome.size == st.st_size:
                # The mtime listed before reading: a file changed since is read again next time.
                scan.cache[key] = [st.st_size, st.st_mtime_ns, outcome.sha256]
    return scan


def _restore_metadata(path: Path, known: Entry, scan: Scan) -> None:
    """Re-extract a known wheel's missing ``.metadata`` (its bytes are checked, not re-hashed)."""
    try:
        metadata = read_wheel_metadata(path)
    except WheelRejected as exc:
        raise IndexBuildError(f"{path.name}: published, but its METADATA can't be read again: {exc}") from None
    if hashlib.sha256(metadata).hexdigest() != known.metadata_sha256:
        raise IndexBuildError(
            f"{path.name}: its METADATA no longer matches the published metadata sha256",
            hint="the file on disk is not the one published: restore it",
        )
    scan.metadata_restores[path.name] = metadata


# --------------------------------------------------------------------------- yanks and removals


def load_yanked(path: Path | None) -> dict[str, str]:
    """The yank list: ``{filename: reason}`` (an empty reason yanks without one); None: no list."""
    if path is None:
        return {}
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IndexBuildError(f"yank list {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise IndexBuildError(f"yank list {path} is not valid YAML: {exc}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise IndexBuildError(
            f"yank list {path} must be a mapping of wheel filename to reason, got {type(doc).__name__}"
        )
    yanked: dict[str, str] = {}
    for filename, reason in doc.items():
        if not isinstance(filename, str) or not (reason is None or isinstance(reason, str)):
            raise IndexBuildError(
                f"yank list {path}: entry {filename!r}: {reason!r} is not 'filename: reason'"
            )
        if reason and not reason.isprintable():
            raise IndexBuildError(f"yank list {path}: the reason for {filename} must be one line of text")
        yanked[filename] = reason or ""
    return yanked


def check_yanked(yanked: Mapping[str, str], entries: Mapping[str, Entry], *, source: str) -> None:
    """Refuse a yank list naming files the index doesn't have (a typo would yank nothing)."""
    unknown = sorted(set(yanked) - set(entries))
    if unknown:
        raise IndexBuildError(
            f"yank list {source} names files that were never published: {', '.join(unknown)}",
            hint="yank entries are exact wheel file names, as listed in the ledger",
        )


def check_nothing_dropped(previous: Iterable[str], entries: Mapping[str, Entry], removed: Iterable[str]) -> None:
    """Refuse to publish a site that silently lacks files the previous site listed."""
    dropped = sorted(set(previous) - set(entries) - set(removed))
    if dropped:
        shown = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
        raise IndexBuildError(
            f"the current site publishes {len(dropped)} file(s) the ledger doesn't have: {shown}",
            hint="use the ledger this site was built from; to delete files on purpose, "
            "pass --remove FILENAME for each",
        )


# --------------------------------------------------------------------------- variant placement

#: torch series whose official wheels use the pre-C++11 ABI, except for the CUDA builds listed.
#: torch >= 2.7 uses the new ABI everywhere (pytorch/pytorch#143962); in 2.6 only the CUDA 12.6
#: builds did (pytorch/pytorch#142064). recipes/table.yaml records the ABI of each series' PyPI
#: build; test_index checks that this rule agrees with it. The rule is kept here rather than read
#: from the table because loading the table costs a quarter of a second, a quarter of the budget
#: of an incremental run, and it also covers series older than the table.
_NEW_ABI_FROM = (2, 7)
_NEW_ABI_EXCEPTIONS = {("12.6", "2.6")}


def official_cxx11_abi(cuda: str, torch: str) -> bool:
    """Whether the official torch wheels for (CUDA, torch) are built with the C++11 ABI."""
    if _version_key(torch) >= _NEW_ABI_FROM:
        return True
    return (cuda, torch) in _NEW_ABI_EXCEPTIONS


@lru_cache(maxsize=None)
def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def variant_sort_key(variant: Variant) -> tuple:
    """Numeric order of variant indexes: CUDA, then torch (``torch2.10`` after ``torch2.9``)."""
    return (_version_key(variant.cuda), _version_key(variant.torch))


@lru_cache(maxsize=None)
def _canonical(name: str) -> str:
    return canonicalize_name(name)


@lru_cache(maxsize=None)
def _tags(filename: str) -> str:
    """The ``python-abi-platform`` part of a wheel filename (validated when it was published)."""
    return "-".join(filename[:-4].rsplit("-", 3)[-3:])


def _identity(e: Entry) -> tuple[str, str, str]:
    """(project, public version, wheel tags): what an exact build and a generic one share."""
    return (_canonical(e.name), e.version.partition("+")[0], _tags(e.filename))


def _abi_fits(variant: Variant, cuda: str) -> bool:
    """A wheel fits a (cuda, torch) index when it states no C++ ABI or the official torch's one."""
    return variant.cxx11_abi is None or variant.cxx11_abi == official_cxx11_abi(cuda, variant.torch)


def place_variants(entries: Iterable[Entry]) -> dict[Variant, list[Entry]]:
    """Which files each variant index lists, keyed by ``Variant(cuda, torch)`` (no ABI).

    See the module docstring for the rules (C++ ABI, ``cu12`` wheels).
    """
    # (cuda, torch) tuples, not Variant objects, while placing: a frozen dataclass hashes and
    # compares in Python, and this runs once per placed file.
    placed: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    generic: list[Entry] = []
    for e in entries:
        v = e.variant
        if v is None:
            continue
        # A major-only CUDA ("12") matches no exception: the torch series' general ABI applies.
        if v.cxx11_abi is not None and not _abi_fits(v, v.cuda):
            continue
        placed[(v.cuda, v.torch)].append(e)
        if "." not in v.cuda:
            generic.append(e)
    if generic:
        # Exact indexes by (CUDA major, torch): where a generic wheel of that pair may also go.
        targets: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
        for cuda, torch in list(placed):
            if "." in cuda:
                targets[(cuda.split(".")[0], torch)].append((cuda, torch))
        built_exactly = {k: {_identity(e) for e in placed[k]} for ks in targets.values() for k in ks}
        for e in generic:
            v = e.variant
            ident = None
            for k in targets.get((v.cuda, v.torch), ()):
                ident = ident or _identity(e)
                if _abi_fits(v, k[0]) and ident not in built_exactly[k]:
                    placed[k].append(e)
    variants = {Variant(cuda, torch): files for (cuda, torch), files in placed.items()}
    return dict(sorted(variants.items(), key=lambda kv: variant_sort_key(kv[0])))


# --------------------------------------------------------------------------- rendering


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


@lru_cache(maxsize=None)
def _python_labels(tags: str) -> tuple[str, ...]:
    """``cp311-...`` -> ``3.11``; ``py3`` -> ``py3``; ``cp39-abi3-...`` -> ``3.9+`` (for the matrix)."""
    py, abi, _plat = tags.split("-")
    labels = []
    for tag in py.split("."):
        if tag.startswith("cp") and tag[2:].isdigit() and len(tag) >= 4:
            label = f"{tag[2]}.{tag[3:]}"
            labels.append(label + "+" if abi == "abi3" else label)
        else:
            labels.append(tag)
    return tuple(labels)


def _python_sort_key(label: str) -> tuple:
    head = label.rstrip("+")
    if head.replace(".", "").isdigit():
        return (0, _version_key(head), label)
    return (1, (), label)


class _Link(NamedTuple):
    """What a project page's link says about a file (attributes: Jinja's fastest lookup)."""

    filename: str
    url: str
    sha256: str
    requires_python: str | None
    metadata_sha256: str
    yanked: str | None


@dataclass
class _File:
    """One file as every page shows it; its HTML and JSON are rendered once, when first needed."""

    entry: Entry
    project: str
    yanked: str | None
    sort_key: tuple
    html: str | None = None
    json: str | None = None


def _file_views(entries: Mapping[str, Entry], yanked: Mapping[str, str]) -> dict[str, _File]:
    """Every file with its project and sort key, in page order (nothing rendered yet)."""
    ordered = list(entries.values())
    # Versions are compared as PEP 440 versions, once per distinct version, not once per file.
    rank = {v: i for i, v in enumerate(sorted({e.version for e in ordered}, key=parse_version))}
    views = [
        _File(e, _canonical(e.name), yanked.get(e.filename), (rank[e.version], e.filename)) for e in ordered
    ]
    # Sorted once here; every page lists its files in this order (a stable subset of it).
    views.sort(key=_sort_key)
    return {f.entry.filename: f for f in views}


def _render_files(files: Iterable[_File]) -> None:
    """Render the link and JSON object of every file not rendered yet: one template pass."""
    todo = list({id(f): f for f in files if f.html is None}.values())
    links = [
        _Link(f.entry.filename, f.entry.url, f.entry.sha256, f.entry.requires_python,
              f.entry.metadata_sha256, f.yanked)
        for f in todo
    ]
    lines = _env().get_template("simple_links.html").render(files=links).split("\n")[:-1]
    if len(lines) != len(todo):
        raise AssertionError("a link spans lines: a file name or yank reason has a line break")
    for f, line in zip(todo, lines, strict=True):
        f.html = line
        f.json = _file_json(f.entry, f.yanked)


def _file_json(e: Entry, reason: str | None) -> str:
    """A file's PEP 691/700 object, encoded by hand: json.dumps per file dominates an incremental
    run (test_index checks the output against json.loads)."""
    s = _encode_str
    yanked = "false" if reason is None else (s(reason) if reason else "true")
    requires = f'"requires-python":{s(e.requires_python)},' if e.requires_python else ""
    meta = f'{{"sha256":{s(e.metadata_sha256)}}}'
    extra = ""
    if e.variant is not None:
        # Private build data for tools.select (PEP 691 reserves "_" keys; installers ignore them).
        v = e.variant
        abi = "null" if v.cxx11_abi is None else ("true" if v.cxx11_abi else "false")
        archs = "null" if e.archs is None else json.dumps(e.archs, separators=(",", ":"), sort_keys=True)
        extra = f',"_cuwheels":{{"cuda":{s(v.cuda)},"torch":{s(v.torch)},"cxx11_abi":{abi},"archs":{archs}}}'
    return (
        f'{{"filename":{s(e.filename)},"url":{s(e.url)},"hashes":{{"sha256":{s(e.sha256)}}},{requires}'
        f'"core-metadata":{meta},"dist-info-metadata":{meta},"yanked":{yanked},"size":{int(e.size)},'
        f'"upload-time":{s(e.upload_time)}{extra}}}'
    )


_encode_str = json.encoder.encode_basestring_ascii


@lru_cache(maxsize=None)
def _normalized_version(text: str) -> str:
    return str(parse_version(text))


def _sort_key(f: _File) -> tuple:
    return f.sort_key


def _json_text(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


@lru_cache(maxsize=1)
def render_identity() -> str:
    """A hash of everything that shapes a page besides its files: this module and the templates.

    Part of every page fingerprint, so a change to either renders every page again.
    """
    digest = hashlib.sha256(f"{API_VERSION} {PAGE_FORMAT}".encode())
    for path in [Path(__file__), *sorted(TEMPLATES.glob("*.html"))]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def page_fingerprint(path: str, files: Sequence[_File]) -> str:
    """What a project page depends on: its path, its files (as published, with yank status).

    A file's variant and archs are not listed: like its bytes, they never change under one sha256.
    """
    digest = hashlib.sha256(f"{render_identity()}\n{path}\n".encode())
    digest.update("\n".join(
        f"{f.entry.filename} {f.entry.sha256} {f.entry.upload_time} {f.entry.url} {f.entry.name} {f.yanked!r}"
        for f in files
    ).encode())
    return digest.hexdigest()


#: Page path -> fingerprint of every project page, kept in the site (so it is swapped with it).
FINGERPRINTS = ".index-fingerprints.json"

#: ``reuse(page path, fingerprint)``: put the previous site's page at that path in the new site
#: and return True when it was rendered from the same inputs; else return False.
Reuse = Callable[[str, str], bool]


def variant_title(variant: Variant) -> str:
    """``CUDA 12.8 · torch 2.8``, or ``any CUDA 12.x · torch 2.8`` for a major-only CUDA."""
    cuda = f"CUDA {variant.cuda}" if variant.exact_cuda else f"any CUDA {variant.cuda}.x"
    return f"{cuda} · torch {variant.torch}"


@dataclass(frozen=True)
class Site:
    """A rendered site: ``pages`` maps each relative path to its bytes."""

    pages: dict[str, bytes]
    projects: tuple[str, ...]
    variant_indexes: tuple[str, ...]
    #: project pages taken unchanged from the previous site (both HTML and JSON count)
    reused: int = 0


def render_site(
    entries: Mapping[str, Entry],
    yanked: Mapping[str, str],
    *,
    site_url: str | None = None,
    ledger_text: str | None = None,
    pages: dict[str, bytes] | None = None,
    reuse: Reuse | None = None,
) -> Site:
    """Every page of the site; writes nothing itself (``pages`` may be a dict that writes).

    A project page whose fingerprint (page_fingerprint) matches the previous site's is left to
    ``reuse`` instead of being rendered again (it is then not in ``pages``); every other page is
    rendered, each file's link once whatever the number of pages listing it.
    """
    views = _file_views(entries, yanked)
    pages = {} if pages is None else pages
    placed = place_variants(entries.values())
    indexes: list[tuple[str, str | None, list[_File]]] = [("", None, list(views.values()))]
    for variant, placed_entries in placed.items():
        files = sorted((views[e.filename] for e in placed_entries), key=_sort_key)
        indexes.append((f"{variant.index_path}/", variant_title(variant), files))

    fingerprints: dict[str, str] = {}
    todo: list[tuple[str, str, str, list[_File]]] = []
    roots: list[tuple[str, str | None, list[dict[str, str]]]] = []
    reused = 0
    for prefix, title, files in indexes:
        by_project: dict[str, list[_File]] = defaultdict(list)
        for f in files:
            by_project[f.project].append(f)
        projects = []
        for normalized in sorted(by_project):
            group = by_project[normalized]
            # The display name is the one the newest release spells (a project may rename itself).
            name = group[-1].entry.name
            projects.append({"name": name, "normalized": normalized})
            base = f"{prefix}simple/{normalized}/"
            fp = page_fingerprint(base, group)
            fingerprints[base + "index.html"] = fingerprints[base + "index.json"] = fp
            if reuse is not None and reuse(base + "index.html", fp) and reuse(base + "index.json", fp):
                reused += 2
            else:
                todo.append((base, normalized, name, group))
        roots.append((prefix, title, projects))

    _render_files(f for *_, group in todo for f in group)
    project_tpl = _env().get_template("simple_project.html")
    for base, normalized, name, group in todo:
        pages[base + "index.html"] = project_tpl.render(
            api_version=API_VERSION, name=name, links=Markup("\n".join(f.html for f in group)),
        ).encode("utf-8")
        versions = [_normalized_version(v) for v in dict.fromkeys(f.entry.version for f in group)]
        pages[base + "index.json"] = (
            f'{{"meta":{{"api-version":"{API_VERSION}"}},"name":{_json_text(normalized)},'
            f'"versions":{_json_text(versions)},"files":[{",".join(f.json for f in group)}]}}'
        ).encode("utf-8")

    root_tpl = _env().get_template("simple_root.html")
    for prefix, title, projects in roots:
        pages[f"{prefix}simple/index.html"] = root_tpl.render(
            api_version=API_VERSION, projects=projects, variant_title=title
        ).encode("utf-8")
        pages[f"{prefix}simple/index.json"] = _json_text({
            "meta": {"api-version": API_VERSION},
            "projects": [{"name": p["name"]} for p in projects],
        }).encode("utf-8")

    variants = [
        {
            "path": variant.index_path,
            "title": variant_title(variant),
            "exact": variant.exact_cuda,
            "uv_name": f"cuwheels-{variant.index_path.replace('/', '-')}",
            "projects": projects,
        }
        for variant, (_prefix, _title, projects) in zip(placed, roots[1:], strict=True)
    ]
    pages["index.html"] = _env().get_template("home.html").render(
        api_version=API_VERSION,
        site_url=(site_url.rstrip("/") + "/") if site_url else None,
        variants=variants,
        matrix=coverage_matrix(views, placed),
        file_count=len(entries),
        yanked_count=sum(1 for fn in yanked if fn in entries),
    ).encode("utf-8")
    for name, data in selector_site_files().items():  # cuwheels-select.pyz and selector.json
        pages[name] = data
    pages["ledger.json"] = (ledger_text if ledger_text is not None else dump_ledger(dict(entries))).encode("utf-8")
    pages[FINGERPRINTS] = _json_text(fingerprints).encode("utf-8")
    return Site(
        pages=pages,
        projects=tuple(p["normalized"] for p in roots[0][2]),
        variant_indexes=tuple(v["path"] for v in variants),
        reused=reused,
    )


ONLY_COMBINED = "simple/ only"


def coverage_matrix(views: Mapping[str, _File], placed: Mapping[Variant, list[Entry]]) -> list[dict[str, Any]]:
    """Per project: which Python versions exist for each (version, variant index) pair.

    Columns are the variant indexes the project appears in, then "simple/ only" for its wheels in
    no variant index (no CUDA/torch identity, or a C++ ABI no official torch of that pair uses).
    """
    # Wheel tags per (project, public version, column) first, in one flat dict: the loop runs once
    # per placed file, the Python versions are worked out once per distinct tag.
    tags_in: dict[tuple[str, str, str], set[tuple[str, bool]]] = defaultdict(set)
    in_variant: set[str] = set()
    for variant, placed_entries in placed.items():
        column = variant.index_path
        for e in placed_entries:
            in_variant.add(e.filename)
            f = views[e.filename]
            tags_in[(f.project, e.version.partition("+")[0], column)].add((_tags(e.filename), f.yanked is not None))
    names: dict[str, tuple] = {}
    for f in views.values():
        e = f.entry
        # The display name is the newest release's, as on the project pages.
        if f.project not in names or f.sort_key > names[f.project][0]:
            names[f.project] = (f.sort_key, e.name)
        if e.filename not in in_variant:
            key = (f.project, e.version.partition("+")[0], ONLY_COMBINED)
            tags_in[key].add((_tags(e.filename), f.yanked is not None))
    # Per cell: Python version -> "yes", or "yanked" when every wheel for it there is yanked.
    cells: dict[str, dict[str, dict[str, dict[str, str]]]] = defaultdict(lambda: defaultdict(dict))
    for (project, public, column), tags in tags_in.items():
        state: dict[str, str] = {}
        for tag, yanked in tags:
            for python in _python_labels(tag):
                if not yanked or state.get(python) != "yes":
                    state[python] = "yanked" if yanked else "yes"
        cells[project][public][column] = state
    order = {v.index_path: i for i, v in enumerate(placed)}
    order[ONLY_COMBINED] = len(order)
    matrix = []
    for project in sorted(cells):
        rows = cells[project]
        columns = sorted({c for cols in rows.values() for c in cols}, key=order.__getitem__)
        pythons = sorted({p for cols in rows.values() for ps in cols.values() for p in ps}, key=_python_sort_key)
        versions = sorted(rows, key=parse_version, reverse=True)
        matrix.append({
            "name": names[project][1],
            "normalized": project,
            "columns": [{"path": c, "label": c} for c in columns],
            "pythons": pythons,
            "rows": [
                {
                    "version": version,
                    "cells": [
                        _coverage_cell(tuple((p, rows[version][c].get(p, "no")) for p in pythons))
                        if c in rows[version] else None
                        for c in columns
                    ],
                }
                for version in versions
            ],
        })
    return matrix


@lru_cache(maxsize=4096)
def _coverage_cell(pills: tuple[tuple[str, str], ...]) -> Markup:
    """One matrix cell, rendered once per distinct pattern (an index has few).

    ``pills``: ``(python, state)``, state "yes", "yanked" or "no".
    """
    return Markup(_env().get_template("coverage_cell.html").render(pills=pills))


# --------------------------------------------------------------------------- atomic output


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2); False where that isn't supported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _side(output_dir: Path, what: str) -> Path:
    """A path beside the site: ``.<name>.<what>``."""
    return output_dir.with_name(f".{output_dir.name}.{what}")


def recover(output_dir: Path) -> list[Path]:
    """Repair what an earlier run left beside the site; return the directories to delete.

    A site moved to ``.<name>.prev`` by a run killed before the new one took its place is put
    back (only then: the ``.<name>.swapping`` marker says so; a site deleted by hand stays
    deleted). Staging directories of killed runs, and the previous site kept by the last run, are
    renamed aside (``.<name>.trash-*``) for the caller to delete while it works.
    """
    prev, swapping = _side(output_dir, "prev"), _side(output_dir, "swapping")
    if swapping.exists():
        if prev.exists() and not output_dir.exists():
            os.rename(prev, output_dir)
        swapping.unlink()
    if prev.exists():
        os.rename(prev, _side(output_dir, f"trash-{os.getpid()}-prev"))
    trash = []
    for pattern in (f".{output_dir.name}.new-*", f".{output_dir.name}.trash-*"):
        trash.extend(output_dir.parent.glob(pattern))
    return trash


def swap_in(staging: Path, output_dir: Path) -> None:
    """Make ``staging`` the site at ``output_dir`` in one atomic step.

    The previous site is kept at ``.<name>.prev`` until the next run (a rollback is one ``mv``).
    """
    prev = _side(output_dir, "prev")
    if not output_dir.exists():
        os.rename(staging, output_dir)
    elif _exchange(staging, output_dir):
        os.rename(staging, prev)  # staging now holds the previous site
    else:
        # No atomic exchange here: a run killed between these two renames leaves the old site
        # at .prev and no site; the marker tells recover() to put it back in the next run.
        swapping = _side(output_dir, "swapping")
        swapping.touch()
        os.rename(output_dir, prev)
        os.rename(staging, output_dir)
        swapping.unlink()


class _WrittenPages(dict):
    """The pages dict render_site fills, writing each page under ``root`` as it is rendered."""

    def __init__(self, root: Path):
        super().__init__()
        self._root = root
        self._made: set[str] = set()

    def __setitem__(self, rel: str, data: bytes) -> None:
        super().__setitem__(rel, data)
        path = os.path.join(self._root, rel)
        parent = os.path.dirname(path)
        if parent not in self._made:
            os.makedirs(parent, exist_ok=True)
            self._made.add(parent)
        try:
            f = open(path, "xb")
        except FileExistsError:
            # A page linked from the current site, then rendered after all: writing through the
            # link would change the current site, so the link goes first.
            os.unlink(path)
            f = open(path, "xb")
        with f:
            f.write(data)


def _delete_in_background(paths: Sequence[Path]) -> threading.Thread:
    """Delete directory trees in a thread: file system calls overlap with this run's work."""
    def reap() -> None:
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)

    thread = threading.Thread(target=reap, name="index-reaper", daemon=True)
    thread.start()
    return thread


def _check_replaceable(output_dir: Path) -> None:
    """Never replace a directory this module didn't make (a mistyped --output-dir would be lost)."""
    if output_dir.exists() and any(output_dir.iterdir()):
        if not (output_dir / "simple" / "index.html").is_file() or not (output_dir / "ledger.json").is_file():
            raise IndexBuildError(
                f"refusing to replace {output_dir}: it is not empty and is not a site built by tools.index",
                hint="point --output-dir at a new directory or at a previous index",
            )


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    import fcntl

    with open(lock_path, "a") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise IndexBuildError(f"another index build holds {lock_path}", hint="wait for it to finish") from None
        yield


def _load_cache(path: Path) -> dict[str, list]:
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


def _reuser(output_dir: Path, staging: Path) -> Reuse:
    """Links the current site's pages whose recorded fingerprint still matches into ``staging``.

    A hard link, not a copy: the page's bytes are neither read nor written again, and the current
    site keeps its own name for them until it is deleted.
    """
    try:
        recorded = json.loads((output_dir / FINGERPRINTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = {}
    if not isinstance(recorded, dict):
        recorded = {}
    made: set[str] = set()

    def reuse(rel: str, fingerprint: str) -> bool:
        if recorded.get(rel) != fingerprint:
            return False
        target = os.path.join(staging, rel)
        parent = os.path.dirname(target)
        try:
            if parent not in made:
                os.makedirs(parent, exist_ok=True)
                made.add(parent)
            os.link(os.path.join(output_dir, rel), target)
        except OSError:
            return False  # gone, or a file system without hard links: render it
        return True

    return reuse


# --------------------------------------------------------------------------- the build


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
) -> BuildReport:
    """Index the wheels in ``wheels_dir`` together with everything in the ledger.

    Writes each new wheel's ``.metadata`` beside it, then the ledger, then swaps the new site in
    at ``output_dir``. Raises IndexBuildError (changing nothing) for a changed immutable file, a
    bad yank list, a missing ledger, or a site that would lose files. ``jobs``: the most worker
    processes that read a large batch of wheels (see tools.workers).
    """
    wheels_dir, output_dir, ledger_path = Path(wheels_dir), Path(output_dir).absolute(), Path(ledger_path)
    if not base_url:
        raise IndexBuildError("--base-url is empty", hint="give the URL the wheels directory is uploaded to")
    if not wheels_dir.is_dir():
        raise IndexBuildError(f"wheels directory {wheels_dir} does not exist")
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    cache_path = _side(output_dir, "hashcache.json")
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        now_ = time.perf_counter()
        timings[step] = now_ - clock
        clock = now_

    with _locked(_side(output_dir, "lock")):
        reaper = _delete_in_background(recover(output_dir))
        try:
            _check_replaceable(output_dir)
            ledger_before = read_ledger_text(ledger_path, init=init_ledger)
            site_copy = _read_or_none(output_dir / "ledger.json")
            # The ledger the current site was built from, unchanged: its entries were checked then.
            trusted = ledger_before is not None and site_copy == ledger_before
            ledger = {} if ledger_before is None else parse_ledger(ledger_before, source=str(ledger_path),
                                                                   trusted=trusted)
            yanked = load_yanked(Path(yanked_path) if yanked_path else None)
            cache = _load_cache(cache_path)
            lap("load")
            # New wheels' .metadata files are written as each is read (tools.wheelread.index_wheel).
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
                site = render_site(entries, yanked, site_url=site_url, ledger_text=ledger_text,
                                   pages=_WrittenPages(staging), reuse=_reuser(output_dir, staging))
                lap("render+write")
                swap_in(staging, output_dir)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            if scan.cache != cache:
                atomic_write(cache_path, _json_text({"schema": 1, "files": scan.cache}).encode("utf-8"))
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
