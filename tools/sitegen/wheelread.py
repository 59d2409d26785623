"""Reading one wheel for the index: check it, hash it, read its METADATA, write its ``.metadata``.

``index_wheel`` is everything the index does with a new wheel's bytes, and the only place it is
done: in the index's own process for a small batch, in worker processes (tools.core.workers, through
``indexer``) for a large one, with the same result either way. A wheel is read once: the hash
reads it through, and the zip directory and the ``.dist-info`` files, written last in a wheel,
come from its last 32 KiB, just read and still in the page cache.

A wheel is left out (WheelRejected, with the reason shown to people) for an invalid filename, an
unreadable zip or one pip and uv would read otherwise than the index (an end record's count that
disagrees with the central directory, a local header that disagrees with its central record, bytes
no record accounts for, overlapping entries, a name decoded otherwise by other tools:
tools.sitegen.wheelzip), a wheel pip refuses to install (a member with an absolute or ``..`` path,
an encrypted or duplicated member, no or several ``.dist-info`` directories, one not named for the
project, no METADATA, WHEEL or RECORD, a Wheel-Version other than 1.x), a METADATA whose Name,
Version or Requires-Python is stated twice or folded over several lines (read by the email parser
pip uses: parse_metadata_headers), a METADATA, WHEEL or build manifest over its size cap
(MAX_METADATA, MAX_WHEEL_FILE, MAX_MANIFEST: checked before a byte is decompressed, and the
decompression itself is bounded), a METADATA whose Name or Version disagrees with the filename, an
invalid Requires-Python, a compiled member (``.so``, ``.pyd``, ``.dll``) for another machine than
its platform tag names (an x86_64 ``.so`` in an aarch64 wheel, an ELF file in a Windows wheel:
tools.core.binarch), a build manifest that can't be read or contradicts the local label or names a
CUDA or torch version that is no ASCII dotted version (tools.core.variant.is_dotted_digits), or a
``.metadata`` file that can't be written. Anything else reading a crafted file raises (the zip
module's RuntimeError for an encrypted member, a RecursionError...) leaves that file out the same
way, named with its reason: one wheel never stops the run. The zip is read, and its member list
checked, by tools.sitegen.wheelzip.

Only what reading a wheel needs is imported here (no Jinja2, no YAML): every worker imports this
module at its start.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from email.feedparser import headerRE
from email.parser import HeaderParser
from functools import lru_cache
from typing import Any
from urllib.parse import quote

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import parse_tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from tools.core.binarch import HEAD_BYTES, NotABinary, expected_for, is_binary_name, mismatch, read_binary
from tools.core.digest import hash_fd
from tools.core.errors import IndexBuildError
from tools.core.regularfile import NotRegularFile, open_fd
from .ledger_file import FILENAME_CHARS, Entry, encode_entry, entry_from_json
from .wheelzip import Unsupported, WheelRejected, ZipDirectory, ZipfileMembers, check_members, shown
from tools.core.manifest import MANIFEST_NAME, parse_manifest, variant_from_manifest
from tools.core.variant import Variant, parse_label


#: The most bytes of METADATA read from a wheel. A real one is tens of KB (torch's: 30 KB, with
#: its README); the cap keeps a small crafted wheel from making the index hold, and publish as
#: ``.metadata``, hundreds of megabytes.
MAX_METADATA = 4 << 20
#: The most bytes of the build manifest (cuwheels.json), a few KB in a real wheel.
MAX_MANIFEST = 1 << 20
#: The most bytes of the WHEEL file, a few lines in a real wheel.
MAX_WHEEL_FILE = 64 << 10
#: The most compiled members whose headers are read from one wheel (a real wheel has tens).
MAX_BINARIES = 4096
#: The most bytes of one SBOM document under ``.dist-info/sboms/`` (PEP 770), hashed for the
#: ledger: the project's own is a few KB, auditwheel's a few more.
MAX_SBOM = 16 << 20
#: The most SBOM documents hashed from one wheel (a real one has one or two).
MAX_SBOMS = 32
#: The longest reason shown for a file left out: the rest of a crafted value is not printed.
MAX_REASON = 400


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
    #: GPU code per extension module (the manifest's ``archs.found``), or None
    archs: dict[str, dict[str, list[str]]] | None = None
    #: The sha256 of each SBOM document under ``.dist-info/sboms/`` (PEP 770), by its path in
    #: the wheel, or None: the wheel has none
    sboms: dict[str, str] | None = None


def check_filename(filename: str) -> tuple[str, Version]:
    """The (normalized name, version) a wheel filename states, or WheelRejected naming the rule."""
    try:
        name, version, _build, _tags = _parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise WheelRejected(f"invalid wheel filename: {exc}") from None
    if not FILENAME_CHARS.fullmatch(filename):
        # packaging checks the name and version parts but not the tags; a URL-safe name also
        # keeps one link per line on the pages.
        raise WheelRejected(f"invalid wheel filename: characters outside [A-Za-z0-9._+!-]: {filename!r}")
    return name, version


def _parse_wheel_filename(filename: str) -> tuple[str, Version, tuple, frozenset]:
    """packaging's parse_wheel_filename, in two cached halves: the wheels of one release for
    several Pythons share the ``name-version[-build]`` part, and a batch has few distinct tags.

    Parsing the version is most of the cost of checking a file name, and the same name and
    version are parsed once per batch instead of once per wheel. The halves accept exactly what
    packaging accepts whole (tests/test_wheelread.py checks a table of names against it); a name
    either half refuses is parsed whole again, so that packaging's error quotes it.
    """
    head, dash, tags = filename[:-4].rpartition("-")  # "name-version[-build]-py-abi", "plat"
    head, dash2, abi = head.rpartition("-")
    head, dash3, py = head.rpartition("-")
    try:
        if not (filename.endswith(".whl") and dash and dash2 and dash3):
            raise InvalidWheelFilename(filename)
        return (*_parse_head(head), _parse_tag(f"{py}-{abi}-{tags}"))
    except (InvalidWheelFilename, InvalidVersion, ValueError):
        # packaging decides, on the whole name: it raises with the name quoted.
        return parse_wheel_filename(filename)


@lru_cache(maxsize=4096)
def _parse_head(head: str) -> tuple[str, Version, tuple]:
    name, version, build, _tags = parse_wheel_filename(f"{head}-py3-none-any.whl")
    return name, version, build


def wheel_identity(filename: str) -> tuple[str, Version, tuple, frozenset] | None:
    """What installers tell apart in a wheel file name: (normalized project, version, build tag,
    tags); None for a name that is not a wheel's.

    Two names with one identity are one wheel to pip and uv: ``Flash_Attn-2.8.3.0-...`` and
    ``flash_attn-2.8.3-...``, or ``py2.py3-none-any`` and ``py3.py2-none-any``. The build tag is
    part of it: a rebuild is published under a new build number.
    """
    try:
        return _parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None


def project_of(filename: str) -> str:
    """The normalized project a wheel file name starts with (its first dash-separated part)."""
    return _canonical_project(filename.partition("-")[0])


@lru_cache(maxsize=4096)
def _canonical_project(part: str) -> str:
    # A ledger of thousands of files names a few dozen projects: normalized once each.
    return canonicalize_name(part)


@lru_cache(maxsize=256)
def _parse_tag(tag: str) -> frozenset:
    return parse_tag(tag)


@lru_cache(maxsize=None)
def parse_version(text: str) -> Version:
    """``Version(text)``, parsed once per distinct text in a process (one per release, not per
    wheel: parsing is most of the cost of comparing versions). Raises InvalidVersion."""
    return Version(text)


def parse_metadata_headers(data: bytes, what: str = "METADATA") -> dict[str, list[str]]:
    """Every value of each header of a METADATA (or WHEEL: ``what``) document, by lower-cased
    name, in order, read as pip reads it: UTF-8, then the standard library's email parser
    (importlib.metadata's ``email.message_from_string``, pip's Parser for WHEEL), so that folded
    lines, ``\\r\\n`` and ``\\r`` line ends, and the line that ends the headers are what pip sees.

    Only the headers are given to the parser: its own rule (``email.feedparser.headerRE``) finds
    where they end, and the body (a README of tens of KB) would cost it ten times as much.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WheelRejected(f"{what} is not UTF-8: {exc}") from None
    # Up to the blank line, or the first line that is no header: the body starts there.
    end = _HEADER_LINES.match(text).end()
    headers: dict[str, list[str]] = {}
    for key, value in HeaderParser().parsestr(text[:end]).items():
        headers.setdefault(key.lower(), []).append(str(value))
    return headers


#: The header lines at the start of a text, by the email parser's own rule for a header line
#: (``email.feedparser.headerRE``), each ended as it ends them (``\r\n``, ``\r`` or ``\n``, never
#: str.splitlines's other separators, which email.parser leaves inside a value).
_HEADER_LINES = re.compile("(?:" + headerRE.pattern.removeprefix("^") + r"[^\r\n]*(?:\r\n|\r|\n|\Z))*")


def metadata_field(headers: dict[str, list[str]], field: str, what: str = "METADATA") -> str | None:
    """The one value of ``field`` (None when absent); WheelRejected when it is stated twice
    (installers take the first, packaging.metadata refuses it) or folded over several lines
    (pip keeps the line break in the value, uv joins the lines)."""
    values = headers.get(field.lower())
    if not values:
        return None
    if len(values) > 1:
        raise WheelRejected(f"{what} states {field} {len(values)} times: state it once")
    if "\n" in values[0] or "\r" in values[0]:
        raise WheelRejected(f"{what}'s {field} spans several lines ({shown(values[0])}): pip keeps the line break, "
                            "uv joins the lines; write it on one line")
    return values[0]  # as pip reads it: "demo " is not "demo"


def check_wheel_file(data: bytes) -> None:
    """WheelRejected unless the WHEEL file states a Wheel-Version pip installs (1.x)."""
    version = (parse_metadata_headers(data, "WHEEL").get("wheel-version") or [None])[0]  # pip reads the first
    major = (version or "").partition(".")[0]
    if not major.isdigit() or int(major) != 1:
        raise WheelRejected(f"WHEEL states Wheel-Version {shown(version or '')}: pip installs only 1.x")


def inspect_wheel(path: str | os.PathLike) -> WheelFacts:
    """Hash a wheel and read what the index needs from it.

    Raises WheelRejected for an invalid filename, an unreadable zip, a missing METADATA, a METADATA
    whose Name or Version disagrees with the filename, or a build manifest that contradicts the
    local label; OSError when the file can't be read.
    """
    filename = os.path.basename(path)
    dist, file_version = check_filename(filename)
    fd = _open_regular(path)
    try:
        sha256, size = hash_fd(fd)
        metadata, name, version, requires_python, variant, archs, sboms = _read_zip(
            fd, filename, dist, file_version, size=size)
    finally:
        os.close(fd)
    return WheelFacts(sha256, size, metadata, name, version, requires_python, variant, archs, sboms)


def read_wheel_metadata(path: str | os.PathLike) -> bytes:
    """The METADATA bytes of a wheel (no hashing), to restore a missing ``.metadata`` file."""
    filename = os.path.basename(path)
    dist, version = check_filename(filename)
    fd = _open_regular(path)
    try:
        return _read_zip(fd, filename, dist, version, size=os.fstat(fd).st_size)[0]
    finally:
        os.close(fd)


def _open_regular(path: str | os.PathLike) -> int:
    """A read-only descriptor of the regular file at ``path``; WheelRejected for anything else.

    (tools.core.regularfile: a FIFO put where a wheel was listed never hangs the open itself.)
    """
    try:
        return open_fd(path)
    except NotRegularFile:
        raise WheelRejected("not a regular file: wheels must be plain files") from None


def check_binaries(zf: Any, platforms: frozenset[str]) -> None:
    """WheelRejected unless every compiled member of the wheel (tools.core.binarch.is_binary_name)
    is an ELF or PE file for the machine its ``platforms`` tags name: a mislabelled wheel installs
    on a machine it can't load on. Only the first HEAD_BYTES of each are inflated."""
    if not any(expected_for(p) is not None for p in platforms):
        return  # py3-none-any, macOS...: nothing this index checks
    names = [name for name, _flags in zf.members() if is_binary_name(name) and not name.endswith("/")]
    if len(names) > MAX_BINARIES:
        raise WheelRejected(f"{len(names)} compiled files, over the {MAX_BINARIES} whose headers the "
                            "index reads (a real wheel has tens)")
    for name in names:
        try:
            binary = read_binary(zf.head(name, HEAD_BYTES))
        except NotABinary as exc:
            raise WheelRejected(f"{shown(name)} can't be read as a binary: {exc}") from None
        if binary is not None and (why := mismatch(shown(name), binary, sorted(platforms))) is not None:
            raise WheelRejected(why)


def sbom_digests(zf: Any, info_dir: str) -> dict[str, str] | None:
    """The sha256 of each SBOM document of a wheel (the members under ``<info_dir>/sboms/``,
    PEP 770), by member name; None when it has none. WheelRejected for more than
    :data:`MAX_SBOMS` of them or one over :data:`MAX_SBOM` bytes (read with the same checks as
    every member the index reads)."""
    names = sorted(n for n, _flags in zf.members()
                   if n.startswith(f"{info_dir}/sboms/") and not n.endswith("/"))
    if len(names) > MAX_SBOMS:
        raise WheelRejected(f"{len(names)} SBOM documents under {shown(info_dir)}/sboms/, over the "
                            f"{MAX_SBOMS} the index reads (a real wheel has one or two)")
    return {n: hashlib.sha256(zf.read(n, MAX_SBOM)).hexdigest() for n in names} or None


def _read_members(zf: Any, dist: str,
                  platforms: frozenset[str]) -> tuple[bytes, dict | None, dict[str, str] | None]:
    """METADATA, the parsed build manifest (None: none) and the SBOM digests (:func:`sbom_digests`)
    of a wheel, checked as pip would, and its binaries checked against its ``platforms`` tags."""
    info_dir, has_manifest = check_members(zf.members(), dist)
    check_binaries(zf, platforms)
    check_wheel_file(zf.read(f"{info_dir}/WHEEL", MAX_WHEEL_FILE))
    metadata = zf.read(f"{info_dir}/METADATA", MAX_METADATA)
    sboms = sbom_digests(zf, info_dir)
    if not has_manifest:
        return metadata, None, sboms
    member = f"{info_dir}/{MANIFEST_NAME}"
    data = zf.read(member, MAX_MANIFEST)
    try:
        return metadata, parse_manifest(data, member), sboms
    except ValueError as exc:  # not JSON (UnicodeDecodeError too), or not an object
        raise WheelRejected(f"unreadable build manifest (cuwheels.json): {exc}") from None
    except RecursionError:
        raise WheelRejected("unreadable build manifest (cuwheels.json): its JSON is nested too deeply") from None


def _read_zip(fd: int, filename: str, dist: str, file_version: Version, *, size: int):
    """Read and check METADATA (and the manifest) from a wheel of ``size`` bytes open as ``fd``.

    Every failure is this file's WheelRejected: whatever a crafted file makes the zip module or a
    parser raise is about that file, and never stops the run reading the others.
    """
    try:
        return _read_and_check(fd, filename, dist, file_version, size=size)
    except WheelRejected:
        raise
    except Exception as exc:  # RuntimeError, RecursionError, MemoryError...: see the docstring
        raise WheelRejected(f"unreadable wheel ({type(exc).__name__}): {exc}") from None


def _read_and_check(fd: int, filename: str, dist: str, file_version: Version, *, size: int):
    raw_version = filename[:-4].split("-")[1]
    platforms = frozenset(tag.platform for tag in _parse_wheel_filename(filename)[3])
    try:
        directory = ZipDirectory(fd, size)  # the layout, checked as pip and uv would
        try:
            metadata, manifest, sboms = _read_members(directory, dist, platforms)
        except (Unsupported, zlib.error):
            with open(fd, "rb", closefd=False) as f:
                f.seek(0)
                with zipfile.ZipFile(f) as zf:
                    metadata, manifest, sboms = _read_members(
                        ZipfileMembers(zf, directory.members()), dist, platforms)
    except WheelRejected:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError,
            NotImplementedError, ValueError) as exc:
        raise WheelRejected(f"unreadable zip: {exc}") from None

    headers = parse_metadata_headers(metadata)
    name, version = metadata_field(headers, "Name"), metadata_field(headers, "Version")
    if not name or not version:
        raise WheelRejected("METADATA lacks a Name or a Version")
    if canonicalize_name(name) != dist:
        raise WheelRejected(f"METADATA Name {name!r} disagrees with the filename ({dist!r})")
    try:
        # The same spelling is the same version: parse only when they differ.
        if version != raw_version and parse_version(version) != file_version:
            raise WheelRejected(
                f"METADATA Version {version!r} disagrees with the filename ({str(file_version)!r}); "
                "pip refuses such a wheel (a renamed file: set the local label at build time)"
            )
    except InvalidVersion:
        raise WheelRejected(f"METADATA Version {version!r} is not a valid version") from None
    requires_python = metadata_field(headers, "Requires-Python") or None
    if requires_python is not None and not _valid_specifier(requires_python):
        raise WheelRejected(f"METADATA Requires-Python {requires_python!r} is invalid")

    label = raw_version.partition("+")[2]
    label_variant = parse_label(label) if label else None
    variant = label_variant
    archs = None
    if manifest is not None:
        archs = manifest_archs(manifest)
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
    return metadata, name, version, requires_python, variant, archs, sboms


def manifest_archs(manifest: Any) -> dict[str, dict[str, list[str]]] | None:
    """The GPU code a manifest found per module (``archs.found``) in the ledger's shape, or None
    when it records none; WheelRejected for one that isn't ``{module: {sass: [...], ptx: [...]}}``."""
    archs = manifest.get("archs") if isinstance(manifest, dict) else None
    found = archs.get("found") if isinstance(archs, dict) else None
    if found is None:
        return None
    if not isinstance(found, dict):
        raise WheelRejected(f"unreadable build manifest (cuwheels.json): archs.found is not a mapping: {found!r}")
    out: dict[str, dict[str, list[str]]] = {}
    for module, report in found.items():
        if not isinstance(module, str) or not module or not isinstance(report, dict):
            raise WheelRejected(f"unreadable build manifest (cuwheels.json): archs.found[{module!r}] is {report!r}")
        out[module] = {}
        for key in ("ptx", "sass"):
            value = report.get(key) or []
            if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                raise WheelRejected(
                    f"unreadable build manifest (cuwheels.json): archs.found[{module!r}].{key} is not a list of strings"
                )
            out[module][key] = list(value)
    return out


@lru_cache(maxsize=1024)
def _valid_specifier(text: str) -> bool:
    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        return False
    return True


def _agrees(manifest: Variant, label: Variant) -> bool:
    if manifest.torch != label.torch:
        return False
    if label.exact_cuda:
        return manifest.cuda == label.cuda
    return manifest.cuda.split(".")[0] == label.cuda


def file_url(base_url: str, filename: str) -> str:
    """Where ``filename`` is published: ``+`` is percent-encoded (some hosts read it as a space)."""
    if FILENAME_CHARS.fullmatch(filename):
        # What quote() gives for these characters, without its per-character Python loop.
        quoted = filename.replace("!", "%21").replace("+", "%2B")
    else:
        quoted = quote(filename)
    return f"{base_url.rstrip('/')}/{quoted}"


def write_metadata(target: str, data: bytes, *, twin: str | None = None) -> None:
    """Write ``data`` as a new file at ``target``: a hard link to ``twin`` where one is given.

    ``twin`` is a ``.metadata`` file of this batch holding exactly these bytes. Wheels of one
    release for several Pythons (cp310 ... cp313) have the same METADATA, so most ``.metadata``
    files of a batch are such twins, and a hard link costs a directory entry where a new file
    costs an inode: under half the time on tmpfs, and on this project's development disk (ext4),
    where creating a file took from 20 µs to 0.8 ms of kernel time from one run to the next, a
    steady 20 µs. Where no link can be made (another file system, none allowed), the bytes are
    written.

    A file already at ``target`` (left by a killed run) is replaced, never written through: it
    may be a hard link shared with another wheel's ``.metadata``. A write that fails leaves no
    file at ``target``; the OSError is raised.
    """
    try:
        _create(target, data, twin)
    except FileExistsError:
        # Left by a killed run: replaced, never written through (it may be a link shared with
        # another wheel's .metadata). A directory in the way raises IsADirectoryError here.
        os.unlink(target)
        _create(target, data, twin)


def _create(target: str, data: bytes, twin: str | None) -> None:
    """A new file at ``target`` (FileExistsError if there is one): a link to ``twin``, or ``data``."""
    if twin is not None:
        try:
            os.link(twin, target)
            return
        except FileExistsError:
            raise
        except OSError:
            pass  # no link possible here: write the bytes
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(data)
        while view:
            done = os.write(fd, view)
            if not done:  # never for a regular file; a loop that can't end is worse
                raise OSError(errno.EIO, "a write wrote nothing", target)
            view = view[done:]
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(target)  # never half-written
        raise
    os.close(fd)


def index_wheel(path: str, *, base_url: str, upload_time: str, written: dict[str, str] | None = None) -> Entry | str:
    """Read a new wheel and write its ``.metadata`` beside it: its ledger Entry, or why it is left out.

    ``written`` maps the sha256 of each ``.metadata`` written so far in this batch to its path
    (index_wheel adds to it), so that a second wheel with the same METADATA gets a hard link
    (see write_metadata). The ``.metadata`` is written in place, without a temporary file (that
    would add a rename per wheel to a full build): the ledger, written after every wheel of the
    batch is read, is what makes a file known, and an unknown wheel's ``.metadata`` is always
    written again, so a half-written one left by a killed run is never trusted.
    """
    filename = os.path.basename(path)
    try:
        facts = inspect_wheel(path)
    except WheelRejected as exc:
        return _clip(str(exc))
    except OSError as exc:
        return _clip(f"unreadable file: {exc}")
    target = f"{path}.metadata"
    metadata_sha256 = hashlib.sha256(facts.metadata).hexdigest()
    try:
        write_metadata(target, facts.metadata, twin=None if written is None else written.get(metadata_sha256))
    except OSError as exc:
        return f"its .metadata can't be written beside it: {exc}"
    if written is not None:
        written.setdefault(metadata_sha256, target)
    return Entry(
        filename, facts.name, facts.version, file_url(base_url, filename), facts.sha256, facts.size, upload_time,
        facts.requires_python, metadata_sha256, facts.variant, facts.archs, facts.sboms,
    )


def _clip(reason: str) -> str:
    """A reason cut to MAX_REASON characters (a crafted value may be megabytes long)."""
    return reason if len(reason) <= MAX_REASON else reason[:MAX_REASON] + "..."


def indexer(base_url: str, upload_time: str) -> Callable[[str], str]:
    """The worker function of index_wheel (tools.core.workers): a path in, one line out (see parse_indexed)."""
    written: dict[str, str] = {}  # this worker's .metadata files, for hard links (write_metadata)

    def index_line(path: str) -> str:
        outcome = index_wheel(path, base_url=base_url, upload_time=upload_time, written=written)
        if isinstance(outcome, str):
            return "rejected " + json.dumps(outcome)
        return "ok " + encode_entry(outcome)
    return index_line


def parse_indexed(line: str, filename: str) -> Entry | str:
    """What index_wheel returned in a worker, from the line ``indexer`` made of it."""
    kind, _, rest = line.partition(" ")
    if kind == "rejected":
        return json.loads(rest)
    if kind != "ok":
        raise IndexBuildError(f"{filename}: a worker answered {line[:200]!r}, which is not a result")
    [(name, data)] = json.loads("{" + rest + "}").items()
    if name != filename:
        raise IndexBuildError(f"{filename}: a worker answered for another file, {name!r}")
    # The entry is checked as any ledger entry is: a worker's answer crosses a pipe.
    return entry_from_json(name, data, source="a worker's answer")
