"""Scanning a batch: which wheels of ``--wheels-dir`` are new, which are known, which are refused.

Known wheels are compared with the ledger (size, then sha256 unless the machine-local hash cache
vouches for them), new ones are read by tools.sitegen.wheelread.index_wheel (here for a small batch, by
worker processes for a large one: tools.core.workers), always with the results taken in file-name
order, so the outcome is the same whatever the number of processes.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tools.core.digest import hash_files, jobs_for
from tools.core.errors import IndexBuildError
from .ledger import Entry
from .wheelread import WheelRejected, index_wheel, parse_indexed, read_wheel_metadata
from tools.core.workers import map_in_workers


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
    tools.sitegen.wheelread.index_wheel, which writes its ``.metadata`` beside it; a known wheel's missing
    ``.metadata`` is read into ``scan.metadata_restores``. Nothing else is written here. With
    ``jobs`` > 1, a large batch is read by up to ``jobs`` worker processes (tools.core.workers).
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
