"""Scanning a batch: which wheels of ``--wheels`` are new, which are known, which are refused.

Known wheels (published, or removed: the ledger keeps both) are compared with the ledger (size,
then sha256 unless the machine-local hash cache vouches for them), new ones are read by
tools.sitegen.wheelread.index_wheel (here for a small batch, by worker processes for a large one:
tools.core.workers), always with the results taken in file-name order, so the outcome is the same
whatever the number of processes.

The hash cache vouches for a file only when its size, mtime, inode change time (ctime) and inode
number are the ones recorded: size and mtime alone are what a file rewritten in place can keep
(``os.utime``), while the ctime is set by the kernel on every change and no caller can set it back.

Each directory entry that is no wheel file is that entry's rejection, never the run's end: one
that can't be looked at (a symbolic link that loops), one that is not a regular file, a name that
is not a wheel's, and a hidden entry named like a killed run's temporary ``.metadata`` file that is
not a regular file (left as it is; a real leftover older than a minute is removed).

A new file is refused before it is read when installers would take it for a wheel the ledger
already has under another name (wheelread.wheel_identity: normalized project, version, build tag
and tags), published or removed, or for another new file of the batch; and when installers would
take it instead of a published file of its version (tools.sitegen.pins: the pin rule).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tools.core.digest import hash_files, jobs_for
from tools.core.progress import StepCounter
from tools.core.errors import IndexBuildError
from tools.core.regularfile import read_regular
from .ledger_file import Entry, Removal
from .pins import takeovers
from .wheelread import (
    WheelRejected, index_wheel, parse_indexed, project_of, read_wheel_metadata, wheel_identity,
)
from tools.core.workers import map_in_workers


#: Bumped when the hash cache's records change: a cache of another schema is not read.
CACHE_SCHEMA = 2
#: The largest hash cache read (a record is about 200 bytes): a larger file is no cache.
MAX_CACHE = 256 << 20


@dataclass(frozen=True)
class Rejected:
    """A file left out of the index, and why."""

    filename: str
    reason: str

    def line(self) -> str:
        """``filename: reason`` for a terminal: control characters (a crafted name) escaped."""
        return f"{printable(self.filename)}: {printable(self.reason)}"


def printable(text: str) -> str:
    """``text`` with every non-printable character escaped (``\\x1b``, ``\\n``, a surrogate)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


@dataclass
class Scan:
    """The outcome of reading ``--wheels`` against the ledger."""

    entries: dict[str, Entry]
    added: list[str] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    hashed: int = 0
    #: known wheel's filename -> its METADATA, to write again as ``<wheel>.metadata`` beside it
    metadata_restores: dict[str, bytes] = field(default_factory=dict)
    cache: dict[str, list] = field(default_factory=dict)
    #: removed files found in the batch with their recorded bytes: left out, as removed
    kept_out: list[str] = field(default_factory=list)


def load_hash_cache(path: Path) -> dict[str, list]:
    """The hash cache (``{path: [size, mtime_ns, ctime_ns, inode, sha256]}``); empty when unreadable."""
    try:
        doc = json.loads(read_regular(path, limit=MAX_CACHE))
        files = doc["files"] if doc.get("schema") == CACHE_SCHEMA else {}
    except (OSError, ValueError, KeyError, AttributeError, TypeError, RecursionError):
        return {}  # a cache: when in doubt, hash again
    return files if isinstance(files, dict) else {}


def _record(st: os.stat_result, sha256: str) -> list:
    """A hash cache record: what the file's inode says now, and the hash of its bytes."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, sha256]


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
    removed: Mapping[str, Removal] | None = None,
) -> Scan:
    """Merge the wheels in ``wheels_dir`` into the ledger (its files: ``ledger``, its removals:
    ``removed``).

    A wheel known to the ledger is not hashed again when the hash cache has its path with the same
    size, mtime, ctime and inode. Known wheels are checked first: a known file name (published or
    removed) with other contents raises IndexBuildError before any new wheel is read; a removed one
    with its recorded bytes stays out (``scan.kept_out``). A new wheel that is a known one under
    another spelling is refused unread. Each other new wheel is then read by
    tools.sitegen.wheelread.index_wheel, which writes its ``.metadata`` beside it; a known wheel's
    missing ``.metadata`` is read into ``scan.metadata_restores``. Nothing else is written here.
    With ``jobs`` > 1, a large batch is read by up to ``jobs`` worker processes
    (tools.core.workers).
    """
    removed = removed or {}
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
            if (why := _stale_temporary(d, stale)) is not None:
                scan.rejected.append(Rejected(fn, why))
            continue
        if fn.endswith(".metadata"):
            continue
        try:
            # Both follow a symbolic link: one that loops (ELOOP) or can't be read is this
            # entry's rejection, never the run's end.
            is_file = d.is_file()
            st = d.stat() if is_file else None
        except OSError as exc:
            scan.rejected.append(Rejected(fn, f"unreadable directory entry ({exc.strerror or exc}): wheels "
                                              "must be plain files sitting directly in the directory"))
            continue
        if st is None:
            scan.rejected.append(Rejected(fn, "not a regular file: wheels must sit directly in the directory"))
            continue
        if not fn.endswith(".whl"):
            scan.rejected.append(Rejected(fn, "not a wheel: only .whl files are indexed"))
            continue
        key = f"{directory}/{fn}"  # the hash cache is keyed by absolute path
        known = ledger.get(fn) or (removed[fn].entry if fn in removed else None)
        if known is None:
            new.append((fn, key, st))
        elif st.st_size != known.size:
            conflicts.append(f"{fn}: {st.st_size} bytes, {_published(fn, removed)} with {known.size} bytes")
        elif (cached := cache.get(key)) is not None and cached == _record(st, known.sha256):
            scan.cache[key] = cached
            _known_as_published(Path(key), known, fn in removed, names, scan)
        else:
            unsure.append((fn, key, st, known))
    # Published before but not in the hash cache: only the bytes are compared (the wheel was
    # validated when it was published).
    sizes = [u[2].st_size for u in unsure]
    hashes = hash_files([u[1] for u in unsure], jobs=jobs_for(sizes, jobs))
    checking = StepCounter("checking published wheels", len(unsure))
    for (fn, key, st, known), hashed in zip(unsure, hashes, strict=True):
        checking.advance(fn)
        if isinstance(hashed, OSError):
            conflicts.append(f"{fn}: published, but this copy can't be read: {hashed}")
            continue
        sha256 = hashed[0]
        scan.hashed += 1
        if sha256 != known.sha256:
            conflicts.append(f"{fn}: sha256 {sha256}, {_published(fn, removed)} with {known.sha256}")
            continue
        scan.cache[key] = _record(st, sha256)
        _known_as_published(Path(key), known, fn in removed, names, scan)
    checking.close()
    if conflicts:
        raise IndexBuildError(
            "files are immutable, and these differ from what was published under the same name:\n  "
            + "\n  ".join(conflicts),
            hint="a rebuilt wheel needs a new file name (bump the version or its build tag); "
            "nothing was changed",
        )
    clashes = identity_clashes([n[0] for n in new], ledger, removed)
    # A new file of a published version that installers would take instead of a published one
    # (tools.sitegen.pins): refused unread, like a respelling.
    clashes.update(takeovers([n[0] for n in new if n[0] not in clashes], ledger, removed))
    for fn in sorted(clashes):
        scan.rejected.append(Rejected(fn, clashes[fn]))
    new = [n for n in new if n[0] not in clashes]
    # Each new wheel is read once, checked, and its .metadata written (tools.sitegen.wheelread), by
    # worker processes for a large batch, here otherwise; in order either way.
    paths = [n[1] for n in new]
    use = jobs_for([n[2].st_size for n in new], jobs)
    if use > 1:
        lines = map_in_workers("tools.sitegen.wheelread:indexer", paths, workers=use, args=(base_url, upload_time))
    else:
        lines = (None for _ in new)
    # closing(): an error here stops the workers at once, not when the traceback is collected.
    written: dict[str, str] = {}  # .metadata files written here, for hard links (wheelread.write_metadata)
    with closing(lines), StepCounter("reading new wheels", len(new)) as reading:
        for (fn, key, st), line in zip(new, lines, strict=True):
            reading.advance(fn)
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
                # The stat taken before reading: a file changed since is read again next time.
                scan.cache[key] = _record(st, outcome.sha256)
    scan.rejected.sort(key=lambda r: r.filename)
    return scan


def _stale_temporary(d: os.DirEntry, stale: float) -> str | None:
    """Remove ``d`` when it is a temporary file a killed run left (a restored .metadata goes
    through a hidden one) and older than ``stale``; the reason it is left out when it is named
    like one but is no plain file, or can't be removed; None for any other hidden name (skipped)."""
    if not (d.name.endswith(".tmp") and ".metadata." in d.name):
        return None
    try:
        st = d.stat(follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            return ("named like a temporary .metadata file of a killed run, but not a regular file: "
                    "left as it is; remove it")
        if st.st_mtime < stale:
            os.unlink(d.path)
    except FileNotFoundError:
        pass  # gone already
    except OSError as exc:
        return f"a temporary .metadata file of a killed run that can't be removed ({exc.strerror or exc}): remove it"
    return None


def _published(fn: str, removed: Mapping[str, Removal]) -> str:
    return "published (and removed since)" if fn in removed else "published"


def _known_as_published(path: Path, known: Entry, is_removed: bool, names: set[str], scan: Scan) -> None:
    """A known wheel found with its recorded bytes: a removed one stays out; a published one's
    missing ``.metadata`` is restored."""
    if is_removed:
        scan.kept_out.append(path.name)
    elif path.name + ".metadata" not in names:
        _restore_metadata(path, known, scan)


def identity_clashes(new: Iterable[str], ledger: Mapping[str, Entry],
                     removed: Mapping[str, Removal]) -> dict[str, str]:
    """The new file names installers would take for a known wheel or for another new one, each
    with the reason it is refused (wheelread.wheel_identity).

    Only the ledger's files of the batch's projects are parsed: a batch adds to a few projects of
    a ledger of thousands of files.
    """
    idents = {fn: ident for fn in new if (ident := wheel_identity(fn)) is not None}
    projects = {ident[0] for ident in idents.values()}
    known: dict[tuple, str] = {}
    for fn in (*ledger, *removed):
        if project_of(fn) in projects and (ident := wheel_identity(fn)) is not None:
            known.setdefault(ident, fn)
    by_ident: dict[tuple, list[str]] = defaultdict(list)
    for fn, ident in idents.items():
        by_ident[ident].append(fn)
    reasons = {}
    for ident, names in by_ident.items():
        name, version, build, _tags = ident
        what = f"{name} {version}" + (f" build {build[0]}{build[1]}" if build else "")
        other = known.get(ident)
        for fn in names:
            if other is not None:
                reasons[fn] = (
                    f"installers take it for {other}, {_published(other, removed)} (same {what} and tags, "
                    "spelled otherwise): one wheel is published under one name; a rebuild needs a new "
                    "build number"
                )
            elif len(names) > 1:
                twin = next(n for n in names if n != fn)
                reasons[fn] = (
                    f"installers take it for {twin} of this batch (same {what} and tags, spelled "
                    "otherwise): keep one of the two"
                )
    return reasons


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
