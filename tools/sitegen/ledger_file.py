"""The ledger: the record of every file the index has ever published.

The index is rebuilt from the ledger, not from whatever wheels happen to be on disk, so a run fed
only a new batch keeps everything published before, and a page can be rendered without the old
wheel files. Files are immutable: an entry, once written, is never changed by a build (the same
filename with another sha256 is refused by tools.index), and an entry only leaves the ledger when
someone names it (``python -m tools.index --remove FILENAME``), never because a file is missing.

Location: wherever ``--ledger`` says (``make index``: ``LEDGER``, default ``site-ledger.json``).
Every site the index builds carries the ledger it was built from at ``<site>/ledger.json``, so the
deployed site is its own record: the publishing workflow fetches that copy and merges the new
batch into it, and the repository's ``index/ledger.json`` (empty) is only where the first
deployment starts. A run whose ``--ledger`` does not exist is refused, unless ``--init-ledger``
starts it: from the site's own ``ledger.json`` when ``--site`` holds a site (nothing
published is lost), empty otherwise; only ``--start-over`` publishes over a site without its
files, and names each one. A local demo passes its own ``LEDGER``, so that URLs of a local
server never enter a real ledger.

Format (JSON, schema 5), one file per line so that a diff shows exactly what was published::

    {"schema": 5, "files": {
    "flash_attn-2.8.3+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl": {"archs": {"flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so": {"ptx": ["120"], "sass": ["80", "90", "120"]}}, "metadata_sha256": "...", "name": "flash-attn", "requires_python": ">=3.9", "sboms": {"flash_attn-2.8.3+cu128.torch2.8.dist-info/sboms/cuwheels.cdx.json": "..."}, "sha256": "...", "size": 123, "upload_time": "2026-11-21T19:30:00.000000Z", "url": "https://.../flash_attn-2.8.3%2Bcu128.torch2.8-....whl", "variant": {"cuda": "12.8", "cxx11_abi": true, "serves": null, "torch": "2.8"}, "version": "2.8.3+cu128.torch2.8"}
    }, "removed": {
    "flash_attn-2.8.2+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl": {..., "removed_time": "2026-12-01T08:00:00.000000Z", ...}
    }}

``url`` is where the file was published (the wheel's ``.metadata`` is at the same URL plus
``.metadata``); it is fixed when the file is first published, so a later batch may live elsewhere.
``variant`` is null for a wheel with no CUDA/torch identity. ``archs`` is the GPU code found in
each extension module (the build manifest's ``archs.found``, as ``{module: {"ptx": [...], "sass":
[...]}}``), recorded when the file is first published; null for a wheel without a manifest, or one
whose manifest records none. ``sboms`` is the sha256 of each SBOM document the wheel carries under
``.dist-info/sboms/`` (PEP 770: the build's CycloneDX bill of materials, and auditwheel's where it
grafted a library), by its path in the wheel; null for a wheel with none. The wheel's own sha256
already covers those bytes; the digest names the document itself, for a scanner or an audit that
holds the SBOM and not the wheel.

``removed`` records each file taken out with ``--remove``: its entry as it was published, plus
``removed_time``. A removed file stays out: the same name in a later batch is compared with the
recorded bytes (other bytes stop the run, as for a published name) and left out, and a file of
the same (project, version, build tag, tags) under another name is refused, until
``--restore FILENAME`` puts the entry back as it was.

Before publishing, ``python -m tools.ledger hold-back --ledger L --wheels D --to H`` moves the
wheels of a batch whose file names the ledger already has (published or removed) to H (a re-run
of a build, or a rebuild without a new version or build number), saying which, so that only new
files are released.

Schema 3 added ``serves`` to ``variant``: null for a build for its one torch series, or the list
of torch series a stable-ABI build serves (listed in each one's variant index; ``torch`` is the
series it was built against). Schema 4 adds ``removed``, schema 5 ``sboms``.

Schemas 1 (no ``archs``), 2 (no ``variant.serves``), 3 (no ``removed``) and 4 (no ``sboms``) are
still read: their entries get ``archs: null`` / ``serves: null`` / ``sboms: null``, and the next
write is schema 5. A reader refuses
a newer schema than its own, and any key it doesn't know (rather than silently drop it).

A run holds ``.<ledger name>.lock`` beside the ledger from reading it to swapping its site in, so
that two runs with different sites can't both merge into the same ledger.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from tools.core.errors import IndexBuildError
from tools.core.regularfile import FileTooLarge, read_regular
from tools.core.variant import Variant

_encode_str = json.encoder.encode_basestring_ascii

#: Bumped when a key changes meaning; a reader refuses a schema it doesn't know.
LEDGER_SCHEMA = 5
#: Schemas this reader accepts: 1 is schema 2 without ``archs``, 2 is 3 without ``variant.serves``,
#: 3 is 4 without ``removed``, 4 is 5 without ``sboms``.
READABLE_SCHEMAS = (1, 2, 3, 4, 5)

_KEYS_1 = frozenset({
    "name", "version", "url", "sha256", "size", "upload_time", "requires_python",
    "metadata_sha256", "variant",
})
_KEYS = _KEYS_1 | {"archs"}
_KEYS_BY_SCHEMA = {1: _KEYS_1, 2: _KEYS, 3: _KEYS, 4: _KEYS, 5: _KEYS | {"sboms"}}
_ARCH_KEYS = {"sass", "ptx"}
_VARIANT_KEYS_2 = frozenset({"cuda", "torch", "cxx11_abi"})
_VARIANT_KEYS_BY_SCHEMA = {1: _VARIANT_KEYS_2, 2: _VARIANT_KEYS_2, 3: _VARIANT_KEYS_2 | {"serves"},
                           4: _VARIANT_KEYS_2 | {"serves"}, 5: _VARIANT_KEYS_2 | {"serves"}}
#: The keys of the document itself, per schema: a key a reader doesn't know is refused, not dropped.
_DOC_KEYS = {1: {"schema", "files"}, 2: {"schema", "files"}, 3: {"schema", "files"},
             4: {"schema", "files", "removed"}, 5: {"schema", "files", "removed"}}


class Entry(NamedTuple):
    """One published file: everything the index pages say about it.

    A named tuple, not a dataclass: a 10,000-file ledger makes 10,000 of them on every run.
    """

    filename: str
    name: str
    version: str
    url: str
    sha256: str
    size: int
    upload_time: str
    requires_python: str | None
    metadata_sha256: str
    variant: Variant | None
    #: ``{module: {"sass": [...], "ptx": [...]}}`` from the build manifest, or None
    archs: dict[str, dict[str, list[str]]] | None = None
    #: ``{path in the wheel: sha256}`` of its SBOM documents (``.dist-info/sboms/``), or None
    sboms: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry as its ledger object (the filename is the key, not a field)."""
        variant = None
        if self.variant is not None:
            variant = {
                "cuda": self.variant.cuda,
                "torch": self.variant.torch,
                "cxx11_abi": self.variant.cxx11_abi,
                "serves": list(self.variant.serves) or None,
            }
        return {
            "name": self.name,
            "version": self.version,
            "url": self.url,
            "sha256": self.sha256,
            "size": self.size,
            "upload_time": self.upload_time,
            "requires_python": self.requires_python,
            "metadata_sha256": self.metadata_sha256,
            "variant": variant,
            "archs": self.archs,
            "sboms": self.sboms,
        }


class Removal(NamedTuple):
    """A file taken out of the index with ``--remove``: its entry as published, and when it left."""

    entry: Entry
    removed_time: str

    def to_json(self) -> dict[str, Any]:
        """The removal as its ledger object: the entry's keys plus ``removed_time``."""
        return {**self.entry.to_json(), "removed_time": self.removed_time}


class Ledger(NamedTuple):
    """A whole ledger document: the files the index publishes, and the ones removed from it."""

    files: dict[str, Entry]
    removed: dict[str, Removal]


_HEX = frozenset("0123456789abcdef")
#: What a published file name may contain: what packaging accepts in a wheel name, minus what
#: would need quoting in a URL or escaping in HTML (``+`` and ``!`` are percent-encoded in URLs).
FILENAME_CHARS = re.compile(r"[A-Za-z0-9._+!-]+")


#: RFC 3339 in UTC with an optional fraction, the form PEP 700 asks ``upload-time`` to have.
_RFC3339_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z", re.ASCII)
#: What a published URL may contain: printable ASCII without what would need escaping in an HTML
#: attribute or break a link (quotes, angle brackets, backslash, backtick, space).
_URL_CHARS = re.compile(r"[!#-&(-;=?-\[\]_a-z|~]+", re.ASCII | re.IGNORECASE)
#: The largest ledger (or site copy of it) read: an entry is about 600 bytes to 1.5 KiB, so this
#: is some 170,000 files, 200 releases of the whole planned matrix; a larger file is a mistake
#: or an attack, refused before it is parsed (a 3 GiB one would not fit in memory).
MAX_LEDGER_BYTES = 256 << 20


def url_problem(url: str) -> str | None:
    """Why ``url`` can't be a published file's URL (None: it can): an absolute http(s) URL with
    a host, or a reference without a scheme (``/files/x.whl``, resolved against the page)."""
    if not _URL_CHARS.fullmatch(url):
        return "has characters a link can't carry (rule: printable ASCII, no quotes, spaces or angle brackets)"
    scheme, colon, rest = url.partition(":")
    if colon and "/" not in scheme and "?" not in scheme and "#" not in scheme:
        if scheme.lower() not in ("http", "https"):
            return f"has the scheme {scheme[:20]!r} (rule: files are published over http or https only)"
        if not rest.startswith("//") or len(rest) == 2 or rest[2] in "/?#":
            return "has no host (rule: an absolute URL is http(s)://host/...)"
    return None


def is_rfc3339(text: str) -> bool:
    """Whether ``text`` is a real UTC time in the RFC 3339 form the index writes."""
    if not _RFC3339_UTC.fullmatch(text):
        return False
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:  # the 31st of February, hour 25
        return False
    return True


def valid_archs(archs: Any) -> bool:
    """Whether ``archs`` has the shape of an entry's ``archs``: null or {module: {sass, ptx}}."""
    if archs is None:
        return True
    return type(archs) is dict and all(
        type(module) is str and module
        and type(report) is dict and report.keys() == _ARCH_KEYS
        and all(type(v) is list and all(type(a) is str for a in v) for v in report.values())
        for module, report in archs.items()
    )


def valid_sboms(sboms: Any) -> bool:
    """Whether ``sboms`` has the shape of an entry's ``sboms``: null, or a non-empty
    {member path under a .dist-info/sboms/ folder: lowercase hex sha256}."""
    if sboms is None:
        return True
    return type(sboms) is dict and bool(sboms) and all(
        type(path) is str and 0 < len(path) <= 500 and ".dist-info/sboms/" in path
        and path.isprintable() and type(digest) is str and len(digest) == 64
        and _HEX.issuperset(digest)
        for path, digest in sboms.items())


def entry_from_json(filename: str, data: Any, *, source: str = "ledger", schema: int = LEDGER_SCHEMA) -> Entry:
    """Parse one ledger object of ``schema``, naming ``source`` and the file in every complaint."""
    keys = _KEYS_BY_SCHEMA[schema]
    where = f"{source}: entry {filename!r}"
    if not FILENAME_CHARS.fullmatch(filename) or not filename.endswith(".whl"):
        raise IndexBuildError(f"{where}: not a wheel file name of [A-Za-z0-9._+!-] characters")
    if not isinstance(data, dict):
        raise IndexBuildError(f"{where} is not an object")
    if data.keys() != keys:
        missing = keys - data.keys()
        unknown = data.keys() - keys
        raise IndexBuildError(
            f"{where} has missing keys {sorted(missing)} / unknown keys {sorted(unknown)}",
            hint=f"schema {schema} entries have exactly: {', '.join(sorted(keys))}",
        )
    for key in ("name", "version", "url", "sha256", "upload_time", "metadata_sha256"):
        if type(data[key]) is not str or not data[key]:
            raise IndexBuildError(f"{where}: {key!r} must be a non-empty string, got {data[key]!r}")
    for key in ("sha256", "metadata_sha256"):
        if len(data[key]) != 64 or not _HEX.issuperset(data[key]):
            raise IndexBuildError(f"{where}: {key!r} is not a lowercase hex sha256: {data[key]!r}")
    if problem := url_problem(data["url"]):
        raise IndexBuildError(f"{where}: 'url' {data['url'][:200]!r} {problem}",
                              hint="a file's URL is where it was published: restore the entry from <site>/ledger.json")
    if not is_rfc3339(data["upload_time"]):
        raise IndexBuildError(
            f"{where}: 'upload_time' {data['upload_time'][:100]!r} is not an RFC 3339 UTC time "
            "(rule: PEP 700's upload-time, as the index writes it: 2026-11-21T19:30:00.000000Z)",
            hint="restore the entry from <site>/ledger.json",
        )
    if not isinstance(data["size"], int) or isinstance(data["size"], bool) or data["size"] < 0:
        raise IndexBuildError(f"{where}: 'size' must be a byte count, got {data['size']!r}")
    if data["requires_python"] is not None and type(data["requires_python"]) is not str:
        raise IndexBuildError(f"{where}: 'requires_python' must be a string or null")
    variant = None
    raw = data["variant"]
    if raw is not None:
        serves = raw.get("serves") if type(raw) is dict else None
        if (
            type(raw) is not dict
            or raw.keys() != _VARIANT_KEYS_BY_SCHEMA[schema]
            or type(raw["cuda"]) is not str
            or type(raw["torch"]) is not str
            or not (raw["cxx11_abi"] is None or type(raw["cxx11_abi"]) is bool)
            or not (serves is None or (type(serves) is list and serves
                                       and all(type(x) is str for x in serves)))
        ):
            shape = "cuda: str, torch: str, cxx11_abi: bool|null" + (
                ", serves: [str]|null" if schema >= 3 else "")
            raise IndexBuildError(f"{where}: 'variant' must be null or {{{shape}}}, got {raw!r}")
        variant = _variant(raw["cuda"], raw["torch"], raw["cxx11_abi"], tuple(serves or ()))
    archs = data.get("archs")
    if not valid_archs(archs):
        raise IndexBuildError(
            f"{where}: 'archs' must be null or {{module: {{sass: [str], ptx: [str]}}}}, got {archs!r}"
        )
    sboms = data.get("sboms")
    if not valid_sboms(sboms):
        raise IndexBuildError(
            f"{where}: 'sboms' must be null or a non-empty {{path under <name>.dist-info/sboms/: "
            f"lowercase hex sha256}}, got {str(sboms)[:200]}",
            hint="the index writes it from the wheel's SBOM documents: restore the entry from "
                 "<site>/ledger.json")
    return Entry(
        filename, data["name"], data["version"], data["url"], data["sha256"], data["size"],
        data["upload_time"], data["requires_python"], data["metadata_sha256"], variant, archs,
        sboms,
    )


@lru_cache(maxsize=None)
def _variant(cuda: str, torch: str, cxx11_abi: bool | None, serves: tuple[str, ...] = ()) -> Variant:
    # An index has a few dozen variants and thousands of files: share one object per variant.
    return Variant(cuda, torch, cxx11_abi, serves)


def parse_ledger_document(text: str, *, source: str = "ledger", trusted: bool = False) -> Ledger:
    """Parse a ledger document (schema 1 to 4): its files and its removals.

    ``trusted`` skips the checks of each file's entry: only for a text this module wrote from
    checked entries (tools.index passes it when the ledger is byte for byte the copy its site was
    built from), because checking 10,000 entries is a large part of adding one file. Removals,
    few, are always checked.
    """
    try:
        # A key written twice would silently lose the first (a second sha256 for one file): a
        # text not known to be this module's own is read with a hook that refuses it.
        doc = json.loads(text) if trusted else json.loads(text, object_pairs_hook=_unique_keys)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError; _unique_keys raises one too
        raise IndexBuildError(f"{source} is not valid JSON: {exc}",
                              hint="restore the ledger from the site it was published with (<site>/ledger.json)",
                              ) from None
    except RecursionError:
        raise IndexBuildError(f"{source} is not a ledger: its JSON is nested too deeply",
                              hint="a ledger is two levels of objects; restore it from <site>/ledger.json") from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema not in READABLE_SCHEMAS or type(schema) is not int or not isinstance(doc.get("files"), dict):
        raise IndexBuildError(
            f"{source} is not a schema-{LEDGER_SCHEMA} ledger "
            f"(want {{\"schema\": {LEDGER_SCHEMA}, \"files\": {{...}}, \"removed\": {{...}}}}; "
            f"schemas 1 to {LEDGER_SCHEMA - 1} are also read)"
        )
    unknown = doc.keys() - _DOC_KEYS[schema]
    missing = _DOC_KEYS[schema] - doc.keys()
    if unknown or missing or not isinstance(doc.get("removed", {}), dict):
        raise IndexBuildError(
            f"{source}: a schema-{schema} ledger has exactly the keys {sorted(_DOC_KEYS[schema])}, "
            f"with objects for files and removed; this one has {sorted(doc.keys())}",
            hint="a key this reader doesn't know is refused rather than dropped: use the tools that wrote it",
        )
    if trusted:
        files = {
            name: Entry(
                name, d["name"], d["version"], d["url"], d["sha256"], d["size"], d["upload_time"],
                d["requires_python"], d["metadata_sha256"],
                None if d["variant"] is None else _variant(d["variant"]["cuda"], d["variant"]["torch"],
                                                           d["variant"]["cxx11_abi"],
                                                           tuple(d["variant"].get("serves") or ())),
                d.get("archs"), d.get("sboms"),
            )
            for name, d in doc["files"].items()
        }
    else:
        files = {name: entry_from_json(name, data, source=source, schema=schema)
                 for name, data in doc["files"].items()}
    removed = {name: _removal_from_json(name, data, source=source, schema=schema)
               for name, data in doc.get("removed", {}).items()}
    both = sorted(files.keys() & removed.keys())
    if both:
        raise IndexBuildError(f"{source}: {', '.join(both[:5])} both published and removed",
                              hint="a file is either in files or in removed; restore the ledger from its site")
    return Ledger(files, removed)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict, or ValueError when a key is written twice."""
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"the key {twice[:200]!r} is written twice")
    return doc


def _removal_from_json(filename: str, data: Any, *, source: str, schema: int) -> Removal:
    """One object of ``removed``: an entry's keys plus ``removed_time``."""
    if not isinstance(data, dict) or type(data.get("removed_time")) is not str or not is_rfc3339(data["removed_time"]):
        raise IndexBuildError(f"{source}: removed {filename!r} must be an entry with a 'removed_time' string, "
                              "an RFC 3339 UTC time (2026-11-21T19:30:00.000000Z)")
    entry = entry_from_json(filename, {k: v for k, v in data.items() if k != "removed_time"},
                            source=f"{source} (removed)", schema=schema)
    return Removal(entry, data["removed_time"])


def parse_ledger(text: str, *, source: str = "ledger", trusted: bool = False) -> dict[str, Entry]:
    """The files a ledger document publishes, ``{filename: Entry}`` (see parse_ledger_document)."""
    return parse_ledger_document(text, source=source, trusted=trusted).files


def read_ledger_text(path: Path, *, init: bool = False) -> str | None:
    """The ledger's text (None: there is none yet, and ``init`` allows starting one).

    Refusing a missing ledger is what keeps a wrong ``--ledger`` path from silently publishing an
    index without everything published before.
    """
    try:
        return read_regular(path, MAX_LEDGER_BYTES).decode("utf-8")
    except FileTooLarge:
        raise IndexBuildError(f"ledger {path} is over {MAX_LEDGER_BYTES >> 20} MiB, the most a ledger is read to",
                              hint="restore it from the site it was published with (<site>/ledger.json)") from None
    except FileNotFoundError:
        if init:
            return None
        raise IndexBuildError(
            f"ledger {path} does not exist",
            hint="pass the right --ledger, or --init-ledger to start one (from the site's own "
            "ledger.json when --site holds a site)",
        ) from None
    except UnicodeDecodeError as exc:
        raise IndexBuildError(f"ledger {path} is not UTF-8 text: {exc}",
                              hint="restore it from the site it was published with (<site>/ledger.json)") from None
    except OSError as exc:
        raise IndexBuildError(f"ledger {path} can't be read: {exc}") from None


def load_ledger_document(path: Path, *, init: bool = False) -> Ledger:
    """Read the whole ledger at ``path`` (files and removals); see load_ledger."""
    text = read_ledger_text(path, init=init)
    return Ledger({}, {}) if text is None else parse_ledger_document(text, source=str(path))


def load_ledger(path: Path, *, init: bool = False) -> dict[str, Entry]:
    """The files the ledger at ``path`` publishes; a missing ledger is an error unless ``init``
    asks for a new one."""
    return load_ledger_document(path, init=init).files


def lock_path(ledger_path: Path) -> Path:
    """The lock file of a ledger: ``.<name>.lock`` beside it (a file the ledger's writes never replace)."""
    return ledger_path.with_name(f".{ledger_path.name}.lock")


def _null_or(value: Any, encode: Any) -> str:
    return "null" if value is None else encode(value)


def encode_entry(e: Entry) -> str:
    """One ledger line, ``"filename": {...}``: keys sorted, what ``json.dumps(sort_keys=True)`` gives.

    Written by hand because json.dumps per entry is the largest cost of adding one file to a
    10,000-file ledger; test_ledger checks the two agree.
    """
    s = _encode_str
    if e.variant is None:
        variant = "null"
    else:
        abi = {None: "null", True: "true", False: "false"}[e.variant.cxx11_abi]
        serves = "null" if not e.variant.serves else "[" + ", ".join(map(s, e.variant.serves)) + "]"
        variant = (f'{{"cuda": {s(e.variant.cuda)}, "cxx11_abi": {abi}, "serves": {serves}, '
                   f'"torch": {s(e.variant.torch)}}}')
    archs = "null" if e.archs is None else json.dumps(e.archs, sort_keys=True)
    sboms = "null" if e.sboms is None else json.dumps(e.sboms, sort_keys=True)
    return (
        f'{s(e.filename)}: {{"archs": {archs}, "metadata_sha256": {s(e.metadata_sha256)}, "name": {s(e.name)}, '
        f'"requires_python": {_null_or(e.requires_python, s)}, "sboms": {sboms}, "sha256": {s(e.sha256)}, '
        f'"size": {int(e.size)}, '
        f'"upload_time": {s(e.upload_time)}, "url": {s(e.url)}, "variant": {variant}, "version": {s(e.version)}}}'
    )


def dump_ledger(entries: dict[str, Entry], *, removed: dict[str, Removal] | None = None,
                base: tuple[str, Ledger] | None = None) -> str:
    """The ledger document: sorted by filename, one entry per line (readable diffs, fast to write).

    ``removed``: the removals it records. ``base`` is a (text, ledger) pair where the text is what
    this function returned for that ledger: when ``entries`` only adds to its files and the
    removals are the same, the new lines are merged into that text instead of encoding every
    entry again (only a text of this schema: older lines lack keys).
    """
    removed = removed or {}
    if base is not None:
        text, old = base
        lines = text.split("\n")
        if (old.files and removed == old.removed and lines[0] == _header()
                and all(entries.get(fn) is e or entries.get(fn) == e for fn, e in old.files.items())):
            # header, entry lines, then the removals' part, which starts with "}"
            end = next(i for i, line in enumerate(lines) if line.startswith("}"))
            body = [line.rstrip(",") for line in lines[1:end]]
            body += [encode_entry(entries[fn]) for fn in entries.keys() - old.files.keys()]
            body.sort(key=_line_key)
            return _document(body, "\n".join(lines[end:]))
    files = [encode_entry(entries[name]) for name in sorted(entries)]
    return _document(files, _removed_part([_encode_removal(removed[name]) for name in sorted(removed)]))


def _encode_removal(r: Removal) -> str:
    # Few and rarely written: the standard encoder, same key order as encode_entry.
    return _encode_str(r.entry.filename) + ": " + json.dumps(r.to_json(), sort_keys=True)


def _line_key(line: str) -> str:
    # '"<filename>": {...}': file names have no characters JSON escapes (FILENAME_CHARS).
    return line[1:line.index('"', 1)]


def _header() -> str:
    return f'{{"schema": {LEDGER_SCHEMA}, "files": {{'


def _removed_part(lines: list[str]) -> str:
    """What follows the file lines: ``}, "removed": {...}}`` and the final newline."""
    if not lines:
        return '}, "removed": {}}\n'
    return '}, "removed": {\n' + ",\n".join(lines) + "\n}}\n"


def _document(lines: list[str], tail: str) -> str:
    if not lines:
        return f'{_header()}{tail}'
    return f'{_header()}\n' + ",\n".join(lines) + "\n" + tail


def write_ledger(path: Path, entries: dict[str, Entry], removed: dict[str, Removal] | None = None) -> None:
    """Write the ledger atomically: a killed run leaves the old ledger or the new one, never half."""
    atomic_write(path, dump_ledger(entries, removed=removed).encode("utf-8"), durable=True)


def atomic_write(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and os.replace.

    ``durable`` also fsyncs the file before the rename, for records that must survive a crash
    of the machine, not just of the process.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates 0600; the file is meant to be read by others (a web server, git).
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# --------------------------------------------------------------------------- before publishing


class HeldBack(NamedTuple):
    """A wheel of a new batch whose file name is already published (or was, and was removed)."""

    filename: str
    #: True when its bytes are the published file's (a re-run), False when they differ (a rebuild)
    same_bytes: bool
    #: True when the ledger records the name as removed (``--remove``): it stays out
    removed: bool = False


class HoldBackReport(NamedTuple):
    """What hold_back_published did to a batch."""

    held: list[HeldBack]
    #: wheels left in the batch: the new files to publish
    remaining: int


def hold_back_published(*, wheels_dir: Path, ledger: Ledger, held_dir: Path) -> HoldBackReport:
    """Move the wheels of ``wheels_dir`` whose names the ledger already has, published or removed
    (and their ``.metadata``), to ``held_dir``, so that only new files are released and indexed.

    A file name never changes bytes once published. A re-run of a build makes the same name again;
    a recipe changed without a new version or build number makes the same name with other bytes
    (the build manifest records the recipe's commit). The published file stays in both cases, and
    a removed one stays removed.
    """
    from tools.core.digest import sha256_file  # only hold-back hashes; the index imports this module

    held = []
    for wheel in sorted(Path(wheels_dir).glob("*.whl")):
        gone = ledger.removed.get(wheel.name)
        entry = ledger.files.get(wheel.name) or (gone.entry if gone else None)
        if entry is None:
            continue
        same = wheel.stat().st_size == entry.size and sha256_file(wheel) == entry.sha256
        held_dir.mkdir(parents=True, exist_ok=True)
        for path in (wheel, wheel.with_name(wheel.name + ".metadata")):
            if path.exists():
                os.replace(path, held_dir / path.name)
        held.append(HeldBack(wheel.name, same, gone is not None))
    return HoldBackReport(held, len(list(Path(wheels_dir).glob("*.whl"))))
