"""The package index: a static site that pip and uv install from, plus a page for people.

    python -m tools.index --wheels-dir dist --output-dir build/site --base-url https://host/files

Layout of the site (``--output-dir``, INDEX_DIR)::

    index.html                                   for people: coverage matrix, pip and uv commands
    ledger.json                                  copy of the ledger this site was built from
    simple/index.html, simple/index.json         every project (PEP 503 / PEP 691 root)
    simple/<project>/index.html, index.json      every file of <project>
    cu128/torch2.8/simple/...                    variant index: only wheels for CUDA 12.8 + torch 2.8
    cu12/torch2.8/simple/...                     variant index for "any CUDA 12.x" wheels (see below)

HTML pages follow PEP 503 (normalized names, trailing slashes, ``#sha256=`` on every link), PEP 629
(``pypi:repository-version``), PEP 592 (``data-yanked``) and PEP 658/714 (``data-core-metadata``
and ``data-dist-info-metadata``). Each page has a PEP 691 JSON twin (API 1.1, PEP 700: ``size``,
``upload-time``, ``versions``) as ``index.json`` in the same directory: static hosting can't
negotiate content types, so JSON clients must be pointed at ``.../simple/<project>/index.json``
explicitly there; ``python -m tools.serve`` negotiates (``Accept``) and serves either at the
directory URL.

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

Ledger and yanks: pages are rendered from the ledger (tools.ledger), not from the wheels on disk,
so a ``--wheels-dir`` holding only a new batch keeps everything published before; a known file
name arriving with another sha256 stops the run (files are immutable); files leave the index only
through ``--remove FILENAME``; and a run refuses to drop files the current site lists that the
ledger lacks. ``--yanked`` (``index/yanked.yaml``) maps file names to yank reasons, applied on
every page that lists the file.

Incremental: a wheel already in the ledger whose size and mtime match the hash cache
(``.<INDEX_DIR name>.hashcache.json`` beside INDEX_DIR, machine-local) is not read again.

Atomic output: the new site is written into a temporary directory beside INDEX_DIR and swapped in
with one ``renameat2(RENAME_EXCHANGE)``; where the kernel or file system lacks it, two renames are
used and a run killed between them leaves the old site at ``.<name>.old``, put back by the next
run. The ledger and every ``.metadata`` file are written to a temporary file and ``os.replace``-d.
A lock file (``.<name>.lock``) keeps two runs off the same site.

Exit status: 0 when every wheel was indexed; 11 (IndexBuildError) when the index could not be
built (nothing changed) or when some wheels were left out (each named with its reason; the rest
is published).
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
import zipfile
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .errors import IndexBuildError, cli
from .ledger import Entry, atomic_write, dump_ledger, load_ledger, write_ledger
from .manifest import read_manifest, variant_from_manifest
from .variant import Variant, parse_label

#: PEP 629 / PEP 691 API version of every page: 1.1 is PEP 700 (size, upload-time, versions).
API_VERSION = "1.1"
#: Wheels up to this size are read into memory once, hashed and opened as zips from that buffer;
#: larger ones are hashed in chunks and their zip directory read from disk.
SLURP_LIMIT = 64 << 20
_CHUNK = 1 << 20

TEMPLATES = Path(__file__).parent / "templates"


# --------------------------------------------------------------------------- reading wheels


class WheelRejected(Exception):
    """A wheel that can't be indexed; the message is the reason shown to people."""


@dataclass(frozen=True)
class Rejected:
    """A file left out of the index, and why."""

    filename: str
    reason: str


@dataclass(frozen=True)
class WheelFacts:
    """What the index learns from a wheel's bytes."""

    sha256: str
    size: int
    metadata: bytes
    name: str
    version: str
    requires_python: str | None
    variant: Variant | None


def check_filename(filename: str) -> tuple[str, Version]:
    """The (normalized name, version) a wheel filename states, or WheelRejected naming the rule."""
    try:
        name, version, _build, _tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise WheelRejected(f"invalid wheel filename: {exc}") from None
    return name, version


def parse_metadata_headers(data: bytes) -> dict[str, str]:
    """The first value of each header of a METADATA document (lower-cased keys).

    A hand parser, not email.parser: that one costs more per wheel than hashing a small wheel.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WheelRejected(f"METADATA is not UTF-8: {exc}") from None
    headers: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        if not line or line[0] in " \t":
            continue  # continuation lines only ever extend Description/License
        key, sep, value = line.partition(":")
        if sep:
            headers.setdefault(key.strip().lower(), value.strip())
    return headers


def _find_metadata(zf: zipfile.ZipFile, dist: str, version: str) -> str:
    """The archive name of the wheel's METADATA (``<name>-<version>.dist-info/METADATA``)."""
    candidates = [
        n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
    ]
    if not candidates:
        raise WheelRejected("no METADATA: the wheel has no <name>-<version>.dist-info/METADATA")
    if len(candidates) > 1:
        wanted = [n for n in candidates if n.startswith(f"{dist}-{version}.dist-info/")]
        if len(wanted) != 1:
            raise WheelRejected(f"several .dist-info directories hold a METADATA: {sorted(candidates)}")
        return wanted[0]
    return candidates[0]


def inspect_wheel(path: Path, *, size: int | None = None) -> WheelFacts:
    """Hash a wheel and read what the index needs from it, reading its bytes from disk once.

    Raises WheelRejected for an invalid filename, an unreadable zip, a missing METADATA, a METADATA
    whose Name or Version disagrees with the filename, or a build manifest that contradicts the
    local label.
    """
    filename = path.name
    dist, file_version = check_filename(filename)
    if size is None:
        size = path.stat().st_size
    with open(path, "rb") as f:
        if size <= SLURP_LIMIT:
            data = f.read()
            sha256 = hashlib.sha256(data).hexdigest()
            facts = _read_zip(io.BytesIO(data), filename, dist, file_version)
        else:
            sha256 = _hash_stream(f)
            f.seek(0)
            facts = _read_zip(f, filename, dist, file_version)
    metadata, name, version, requires_python, variant = facts
    return WheelFacts(sha256, size, metadata, name, version, requires_python, variant)


def hash_file(path: Path) -> str:
    """The sha256 of a file, read in chunks."""
    with open(path, "rb") as f:
        return _hash_stream(f)


def _hash_stream(f: Any) -> str:
    digest = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    while n := f.readinto(buf):
        digest.update(view[:n])
    return digest.hexdigest()


def read_wheel_metadata(path: Path) -> bytes:
    """The METADATA bytes of a wheel (no hashing), to restore a missing ``.metadata`` file."""
    dist, version = check_filename(path.name)
    with open(path, "rb") as f:
        return _read_zip(f, path.name, dist, version)[0]


def _read_zip(source: Any, filename: str, dist: str, file_version: Version):
    raw_dist, raw_version = filename[:-4].split("-")[:2]
    try:
        with zipfile.ZipFile(source) as zf:
            member = _find_metadata(zf, raw_dist, raw_version)
            metadata = zf.read(member)
            try:
                manifest = read_manifest(zf)
            except (ValueError, UnicodeDecodeError) as exc:
                raise WheelRejected(f"unreadable build manifest (cuwheels.json): {exc}") from None
    except WheelRejected:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError,
            NotImplementedError, ValueError) as exc:
        raise WheelRejected(f"unreadable zip: {exc}") from None

    headers = parse_metadata_headers(metadata)
    name, version = headers.get("name"), headers.get("version")
    if not name or not version:
        raise WheelRejected("METADATA lacks a Name or a Version")
    if canonicalize_name(name) != dist:
        raise WheelRejected(f"METADATA Name {name!r} disagrees with the filename ({dist!r})")
    try:
        if Version(version) != file_version:
            raise WheelRejected(
                f"METADATA Version {version!r} disagrees with the filename ({str(file_version)!r}); "
                "pip refuses such a wheel (a renamed file: set the local label at build time)"
            )
    except InvalidVersion:
        raise WheelRejected(f"METADATA Version {version!r} is not a valid version") from None
    requires_python = headers.get("requires-python") or None
    if requires_python is not None:
        try:
            SpecifierSet(requires_python)
        except InvalidSpecifier:
            raise WheelRejected(f"METADATA Requires-Python {requires_python!r} is invalid") from None

    label = raw_version.partition("+")[2]
    label_variant = parse_label(label) if label else None
    variant = label_variant
    if manifest is not None:
        try:
            manifest_variant = variant_from_manifest(manifest)
        except (ValueError, AttributeError, TypeError) as exc:
            raise WheelRejected(f"unreadable build manifest (cuwheels.json): {exc}") from None
        if manifest_variant is not None:
            if label_variant is not None and not _agrees(manifest_variant, label_variant):
                raise WheelRejected(
                    f"build manifest says CUDA {manifest_variant.cuda} / torch {manifest_variant.torch} "
                    f"but the local label {label!r} says CUDA {label_variant.cuda} / torch {label_variant.torch}"
                )
            variant = manifest_variant
    return metadata, name, version, requires_python, variant


def _agrees(manifest: Variant, label: Variant) -> bool:
    if manifest.torch != label.torch:
        return False
    if label.exact_cuda:
        return manifest.cuda == label.cuda
    return manifest.cuda.split(".")[0] == label.cuda


# --------------------------------------------------------------------------- scanning


@dataclass
class Scan:
    """The outcome of reading ``--wheels-dir`` against the ledger."""

    entries: dict[str, Entry]
    added: list[str] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    hashed: int = 0
    metadata_writes: dict[Path, bytes] = field(default_factory=dict)
    cache: dict[str, list] = field(default_factory=dict)


def file_url(base_url: str, filename: str) -> str:
    """Where ``filename`` is published: ``+`` is percent-encoded (some hosts read it as a space)."""
    return f"{base_url.rstrip('/')}/{quote(filename)}"


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
) -> Scan:
    """Merge the wheels in ``wheels_dir`` into the ledger; nothing is written here.

    A wheel known to the ledger is not hashed again when the hash cache has its path with the same
    size and mtime. Raises IndexBuildError when a known file name has other contents.
    """
    scan = Scan(entries=dict(ledger))
    conflicts: list[str] = []
    upload_time = utc_timestamp(now)
    with os.scandir(wheels_dir) as it:
        dirents = sorted(it, key=lambda d: d.name)
    names = {d.name for d in dirents}
    for d in dirents:
        fn = d.name
        if fn.startswith(".") or fn.endswith(".metadata"):
            continue  # our own .metadata files and hidden files (temporary writes)
        if not d.is_file():
            scan.rejected.append(Rejected(fn, "not a regular file: wheels must sit directly in the directory"))
            continue
        if not fn.endswith(".whl"):
            scan.rejected.append(Rejected(fn, "not a wheel: only .whl files are indexed"))
            continue
        st = d.stat()
        path = Path(d.path)
        key = str(path.absolute())
        known = ledger.get(fn)
        cached = cache.get(key)
        if (
            known is not None
            and cached is not None
            and cached[:2] == [st.st_size, st.st_mtime_ns]
            and cached[2] == known.sha256
            and st.st_size == known.size
        ):
            scan.cache[key] = cached
            if fn + ".metadata" not in names:
                _restore_metadata(path, known, scan)
            continue
        if known is not None:
            # Published before: only the bytes are compared; the wheel was validated back then.
            if st.st_size != known.size:
                conflicts.append(f"{fn}: {st.st_size} bytes, published with {known.size} bytes")
                continue
            sha256 = hash_file(path)
            scan.hashed += 1
            if sha256 != known.sha256:
                conflicts.append(f"{fn}: sha256 {sha256}, published with {known.sha256}")
                continue
            scan.cache[key] = [st.st_size, st.st_mtime_ns, sha256]
            if fn + ".metadata" not in names:
                _restore_metadata(path, known, scan)
            continue
        try:
            facts = inspect_wheel(path, size=st.st_size)
        except WheelRejected as exc:
            scan.rejected.append(Rejected(fn, str(exc)))
            continue
        except OSError as exc:
            scan.rejected.append(Rejected(fn, f"unreadable file: {exc}"))
            continue
        scan.hashed += 1
        scan.entries[fn] = Entry(
            filename=fn,
            name=facts.name,
            version=facts.version,
            url=file_url(base_url, fn),
            sha256=facts.sha256,
            size=facts.size,
            upload_time=upload_time,
            requires_python=facts.requires_python,
            metadata_sha256=hashlib.sha256(facts.metadata).hexdigest(),
            variant=facts.variant,
        )
        scan.added.append(fn)
        scan.cache[key] = [st.st_size, st.st_mtime_ns, facts.sha256]
        scan.metadata_writes[path.with_name(fn + ".metadata")] = facts.metadata
    if conflicts:
        raise IndexBuildError(
            "files are immutable, and these differ from what was published under the same name:\n  "
            + "\n  ".join(conflicts),
            hint="a rebuilt wheel needs a new file name (bump the version or its build tag); "
            "nothing was changed",
        )
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
    scan.metadata_writes[path.with_name(path.name + ".metadata")] = metadata


# --------------------------------------------------------------------------- yanks and removals


def load_yanked(path: Path | None) -> dict[str, str]:
    """The yank list: ``{filename: reason}`` (an empty reason yanks without one)."""
    if path is None or not path.exists():
        return {}
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
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
#: builds did (pytorch/pytorch#142064). Belongs in the global compatibility table once it exists.
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


def _tags(filename: str) -> str:
    """The ``python-abi-platform`` part of a wheel filename (validated when it was published)."""
    return "-".join(filename[:-4].rsplit("-", 3)[-3:])


def _abi_fits(variant: Variant, cuda: str) -> bool:
    """A wheel fits a (cuda, torch) index when it states no C++ ABI or the official torch's one."""
    return variant.cxx11_abi is None or variant.cxx11_abi == official_cxx11_abi(cuda, variant.torch)


def place_variants(entries: Iterable[Entry]) -> dict[Variant, list[Entry]]:
    """Which files each variant index lists, keyed by ``Variant(cuda, torch)`` (no ABI).

    See the module docstring for the rules (C++ ABI, ``cu12`` wheels).
    """
    placed: dict[Variant, list[Entry]] = defaultdict(list)
    generic: list[Entry] = []
    for e in entries:
        v = e.variant
        if v is None:
            continue
        # A major-only CUDA ("12") matches no exception: the torch series' general ABI applies.
        if not _abi_fits(v, v.cuda):
            continue
        placed[Variant(v.cuda, v.torch)].append(e)
        if not v.exact_cuda:
            generic.append(e)
    if generic:
        exact = [k for k in placed if k.exact_cuda]
        built_exactly = {
            (k, _canonical(e.name), e.version.split("+")[0], _tags(e.filename))
            for k in exact
            for e in placed[k]
        }
        for e in generic:
            v = e.variant
            for k in exact:
                if k.torch != v.torch or k.cuda.split(".")[0] != v.cuda:
                    continue
                if not _abi_fits(v, k.cuda):
                    continue
                if (k, _canonical(e.name), e.version.split("+")[0], _tags(e.filename)) in built_exactly:
                    continue
                placed[k].append(e)
    return dict(sorted(placed.items(), key=lambda kv: variant_sort_key(kv[0])))


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
def _parsed_version(text: str) -> Version:
    return Version(text)


def _python_labels(filename: str) -> list[str]:
    """``cp311`` -> ``3.11``; ``py3`` -> ``py3``; ``cp39-abi3`` -> ``3.9+`` (for the matrix)."""
    py, abi, _plat = filename[:-4].rsplit("-", 3)[-3:]
    labels = []
    for tag in py.split("."):
        if tag.startswith("cp") and tag[2:].isdigit() and len(tag) >= 4:
            label = f"{tag[2]}.{tag[3:]}"
            labels.append(label + "+" if abi == "abi3" else label)
        else:
            labels.append(tag)
    return labels


def _python_sort_key(label: str) -> tuple:
    head = label.rstrip("+")
    if head.replace(".", "").isdigit():
        return (0, _version_key(head), label)
    return (1, (), label)


@dataclass(frozen=True)
class _File:
    """One file as every page shows it (computed once, shared by all the pages listing it)."""

    entry: Entry
    link: dict[str, Any]
    json: dict[str, Any]
    sort_key: tuple


def _file_views(entries: Mapping[str, Entry], yanked: Mapping[str, str]) -> dict[str, _File]:
    views = {}
    for fn, e in entries.items():
        reason = yanked.get(fn)
        link = {
            "filename": fn,
            "url": e.url,
            "sha256": e.sha256,
            "requires_python": e.requires_python,
            "metadata_sha256": e.metadata_sha256,
            "yanked": reason,
        }
        doc: dict[str, Any] = {
            "filename": fn,
            "url": e.url,
            "hashes": {"sha256": e.sha256},
        }
        if e.requires_python:
            doc["requires-python"] = e.requires_python
        doc["core-metadata"] = {"sha256": e.metadata_sha256}
        doc["dist-info-metadata"] = {"sha256": e.metadata_sha256}
        doc["yanked"] = (reason or True) if reason is not None else False
        doc["size"] = e.size
        doc["upload-time"] = e.upload_time
        views[fn] = _File(e, link, doc, (_parsed_version(e.version), fn))
    return views


def _json(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _render_simple(
    prefix: str, files: Sequence[_File], pages: dict[str, bytes], *, variant_title: str | None
) -> list[dict[str, str]]:
    """Render one simple index (root + project pages, HTML + JSON) under ``prefix`` into ``pages``."""
    env = _env()
    project_tpl = env.get_template("simple_project.html")
    by_project: dict[str, list[_File]] = defaultdict(list)
    for f in files:
        by_project[_canonical(f.entry.name)].append(f)
    projects = []
    for normalized in sorted(by_project):
        group = sorted(by_project[normalized], key=lambda f: f.sort_key)
        # The display name is the one the newest release spells (a project may rename itself).
        name = group[-1].entry.name
        projects.append({"name": name, "normalized": normalized})
        base = f"{prefix}simple/{normalized}/"
        pages[base + "index.html"] = project_tpl.render(
            api_version=API_VERSION, name=name, files=[f.link for f in group]
        ).encode("utf-8")
        versions = sorted({f.sort_key[0] for f in group})
        pages[base + "index.json"] = _json({
            "meta": {"api-version": API_VERSION},
            "name": normalized,
            "versions": [str(v) for v in versions],
            "files": [f.json for f in group],
        })
    pages[f"{prefix}simple/index.html"] = env.get_template("simple_root.html").render(
        api_version=API_VERSION, projects=projects, variant_title=variant_title
    ).encode("utf-8")
    pages[f"{prefix}simple/index.json"] = _json({
        "meta": {"api-version": API_VERSION},
        "projects": [{"name": p["name"]} for p in projects],
    })
    return projects


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


def render_site(
    entries: Mapping[str, Entry],
    yanked: Mapping[str, str],
    *,
    site_url: str | None = None,
    ledger_text: str | None = None,
) -> Site:
    """Every page of the site (pure: writes nothing)."""
    views = _file_views(entries, yanked)
    pages: dict[str, bytes] = {}
    combined = list(views.values())
    all_projects = _render_simple("", combined, pages, variant_title=None)
    placed = place_variants(entries.values())
    variants = []
    for variant, placed_entries in placed.items():
        path = variant.index_path
        projects = _render_simple(
            f"{path}/", [views[e.filename] for e in placed_entries], pages,
            variant_title=variant_title(variant),
        )
        variants.append({
            "path": path,
            "title": variant_title(variant),
            "exact": variant.exact_cuda,
            "uv_name": f"cuwheels-{path.replace('/', '-')}",
            "projects": projects,
        })
    pages["index.html"] = _env().get_template("home.html").render(
        api_version=API_VERSION,
        site_url=(site_url.rstrip("/") + "/") if site_url else None,
        variants=variants,
        matrix=coverage_matrix(entries.values(), placed),
        file_count=len(entries),
        yanked_count=sum(1 for fn in yanked if fn in entries),
    ).encode("utf-8")
    pages["ledger.json"] = (ledger_text if ledger_text is not None else dump_ledger(dict(entries))).encode("utf-8")
    return Site(
        pages=pages,
        projects=tuple(p["normalized"] for p in all_projects),
        variant_indexes=tuple(v["path"] for v in variants),
    )


def coverage_matrix(entries: Iterable[Entry], placed: Mapping[Variant, list[Entry]]) -> list[dict[str, Any]]:
    """Per project: which Python versions exist for each (version, variant index) pair.

    Columns are the variant indexes the project appears in, then "simple/ only" for its wheels in
    no variant index (no CUDA/torch identity, or a C++ ABI no official torch of that pair uses).
    """
    only_combined = "simple/ only"
    cells: dict[str, dict[str, dict[str, set[str]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(set)))
    names: dict[str, str] = {}
    in_variant: set[str] = set()
    for variant, placed_entries in placed.items():
        for e in placed_entries:
            in_variant.add(e.filename)
            cells[_canonical(e.name)][e.version.split("+")[0]][variant.index_path].update(_python_labels(e.filename))
    for e in entries:
        names.setdefault(_canonical(e.name), e.name)
        if e.filename not in in_variant:
            cells[_canonical(e.name)][e.version.split("+")[0]][only_combined].update(_python_labels(e.filename))
    order = {v.index_path: i for i, v in enumerate(placed)}
    order[only_combined] = len(order)
    matrix = []
    for project in sorted(cells):
        rows = cells[project]
        columns = sorted({c for cols in rows.values() for c in cols}, key=order.__getitem__)
        pythons = sorted({p for cols in rows.values() for ps in cols.values() for p in ps}, key=_python_sort_key)
        versions = sorted(rows, key=_parsed_version, reverse=True)
        matrix.append({
            "name": names[project],
            "normalized": project,
            "columns": [{"path": c, "label": c} for c in columns],
            "pythons": pythons,
            "rows": [
                {
                    "version": version,
                    "cells": [
                        [{"python": p, "present": p in rows[version].get(c, ())} for p in pythons]
                        if c in rows[version] else None
                        for c in columns
                    ],
                }
                for version in versions
            ],
        })
    return matrix


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
    return output_dir.with_name(f".{output_dir.name}.{what}")


def recover(output_dir: Path) -> None:
    """Undo what a killed run left beside the site: put a moved-away site back, drop staging dirs."""
    old = _side(output_dir, "old")
    if old.exists():
        if output_dir.exists():
            shutil.rmtree(old)
        else:
            os.rename(old, output_dir)
    for stale in output_dir.parent.glob(f".{output_dir.name}.new-*"):
        shutil.rmtree(stale, ignore_errors=True)


def swap_in(staging: Path, output_dir: Path) -> None:
    """Make ``staging`` the site at ``output_dir`` in one atomic step; the old site is deleted."""
    if not output_dir.exists():
        os.rename(staging, output_dir)
        return
    if _exchange(staging, output_dir):
        shutil.rmtree(staging)  # it now holds the previous site
        return
    old = _side(output_dir, "old")
    os.rename(output_dir, old)
    os.rename(staging, output_dir)
    shutil.rmtree(old)


def _check_replaceable(output_dir: Path) -> None:
    """Never replace a directory this module didn't make (a mistyped --output-dir would be lost)."""
    if output_dir.exists() and any(output_dir.iterdir()):
        if not (output_dir / "simple" / "index.html").is_file() or not (output_dir / "ledger.json").is_file():
            raise IndexBuildError(
                f"refusing to replace {output_dir}: it is not empty and is not a site built by tools.index",
                hint="point --output-dir at a new directory or at a previous index",
            )


def write_tree(root: Path, pages: Mapping[str, bytes]) -> None:
    """Write ``pages`` under ``root`` (which exists)."""
    made: set[Path] = set()
    for rel, data in pages.items():
        path = root / rel
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        with open(path, "wb") as f:
            f.write(data)


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


def _previous_files(output_dir: Path) -> list[str]:
    try:
        doc = json.loads((output_dir / "ledger.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except ValueError as exc:
        raise IndexBuildError(f"{output_dir / 'ledger.json'} is not valid JSON: {exc}") from None
    return list(doc.get("files", {}))


def _cleanup_temporaries(wheels_dir: Path, older_than: float = 60.0) -> None:
    # .metadata writes go through hidden temp files; a killed run may leave one behind.
    limit = time.time() - older_than
    for tmp in wheels_dir.glob(".*.metadata.*.tmp"):
        try:
            if tmp.stat().st_mtime < limit:
                tmp.unlink()
        except FileNotFoundError:
            pass


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
) -> BuildReport:
    """Index the wheels in ``wheels_dir`` together with everything in the ledger.

    Writes each new wheel's ``.metadata`` beside it, then the ledger, then swaps the new site in
    at ``output_dir``. Raises IndexBuildError (changing nothing) for a changed immutable file, a
    bad yank list, a missing ledger, or a site that would lose files.
    """
    wheels_dir, output_dir = Path(wheels_dir), Path(output_dir).absolute()
    if not base_url:
        raise IndexBuildError("--base-url is empty", hint="give the URL the wheels directory is uploaded to")
    if not wheels_dir.is_dir():
        raise IndexBuildError(f"wheels directory {wheels_dir} does not exist")
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    cache_path = _side(output_dir, "hashcache.json")
    with _locked(_side(output_dir, "lock")):
        recover(output_dir)
        _check_replaceable(output_dir)
        _cleanup_temporaries(wheels_dir)
        ledger = load_ledger(Path(ledger_path), init=init_ledger)
        yanked = load_yanked(Path(yanked_path) if yanked_path else None)
        scan = scan_wheels(
            wheels_dir, ledger, _load_cache(cache_path),
            base_url=base_url, now=now or datetime.now(timezone.utc),
        )
        entries = scan.entries
        for fn in remove:
            if fn not in entries and fn not in ledger:
                raise IndexBuildError(f"--remove {fn}: no such file in the ledger")
            entries.pop(fn, None)
            # A removed file's wheel and .metadata stay where they were uploaded: only the pages forget it.
            scan.metadata_writes.pop(wheels_dir / (fn + ".metadata"), None)
        check_nothing_dropped(_previous_files(output_dir), entries, remove)
        check_yanked(yanked, entries, source=str(yanked_path))

        for path, data in scan.metadata_writes.items():
            atomic_write(path, data)
        ledger_text = dump_ledger(entries)
        if entries != ledger or not Path(ledger_path).exists():
            # The ledger goes first: a site may only ever list what the ledger records.
            atomic_write(Path(ledger_path), ledger_text.encode("utf-8"), durable=True)
        site = render_site(entries, yanked, site_url=site_url, ledger_text=ledger_text)
        staging = Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}.new-"))
        try:
            os.chmod(staging, 0o755)  # mkdtemp makes it 0700; the site is for a web server to read
            write_tree(staging, site.pages)
            swap_in(staging, output_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        atomic_write(cache_path, _json({"schema": 1, "files": scan.cache}))
    return BuildReport(
        files=len(entries),
        added=tuple(scan.added),
        removed=tuple(remove),
        rejected=tuple(scan.rejected),
        hashed=scan.hashed,
        projects=len(site.projects),
        variant_indexes=site.variant_indexes,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.index``: build the index; exit 11 if it couldn't or if wheels were left out."""
    parser = argparse.ArgumentParser(prog="python -m tools.index", description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheels-dir", required=True, type=Path, help="wheels of this batch (gets the .metadata files)")
    parser.add_argument("--output-dir", required=True, type=Path, help="the site (INDEX_DIR), replaced atomically")
    parser.add_argument("--base-url", required=True, help="URL the wheels directory is uploaded to")
    parser.add_argument("--ledger", type=Path, default=Path("index/ledger.json"), help="record of everything published")
    parser.add_argument("--init-ledger", action="store_true", help="start a new, empty ledger if --ledger doesn't exist")
    parser.add_argument("--yanked", type=Path, default=Path("index/yanked.yaml"), help="yank list: {filename: reason}")
    parser.add_argument("--site-url", default=None, help="public URL of the site, for the commands on its front page")
    parser.add_argument("--remove", action="append", default=[], metavar="FILENAME",
                        help="delete a published file from the index (repeatable; deliberate only)")
    return _run(parser.parse_args(argv))


@cli
def _run(args: argparse.Namespace) -> int:
    report = build_index(
        wheels_dir=args.wheels_dir,
        output_dir=args.output_dir,
        base_url=args.base_url,
        ledger_path=args.ledger,
        yanked_path=args.yanked,
        site_url=args.site_url,
        init_ledger=args.init_ledger,
        remove=args.remove,
    )
    print(
        f"index: {report.files} files in {report.projects} projects, "
        f"{len(report.variant_indexes)} variant indexes -> {args.output_dir} "
        f"({len(report.added)} new, {report.hashed} hashed, {len(report.removed)} removed)"
    )
    for fn in report.removed:
        print(f"  removed: {fn}")
    if report.rejected:
        raise IndexBuildError(
            f"{len(report.rejected)} file(s) left out; the rest is published:\n  "
            + "\n  ".join(f"{r.filename}: {r.reason}" for r in report.rejected)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
