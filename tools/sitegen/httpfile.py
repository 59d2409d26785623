"""HTTP caching, compression and ranges for tools.serve's files: the parts of RFC 9110/9111 a
package index uses.

``Validators`` gives a file its ETag and Last-Modified from its size and modification time;
``not_modified`` reads ``If-None-Match`` / ``If-Modified-Since`` (a 304); ``accepts_gzip`` reads
``Accept-Encoding``; ``gzipped`` compresses a page once per version of the file (a small cache);
``byte_range`` reads a single ``Range`` (a 206, or a 416 when nothing of the file is asked for).
Each takes header values as the client sent them and never raises on a malformed one: a header
that can't be read is ignored, as RFC 9110 asks of a server.
"""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime
from functools import lru_cache

#: Pages above this size are sent uncompressed: the cache holds a compressed copy of each page.
GZIP_MAX_BYTES = 4 << 20
#: Compressed pages kept (each at most GZIP_MAX_BYTES before compression).
GZIP_CACHE_PAGES = 32

#: One ``bytes`` range: ``first-last``, ``first-`` or ``-suffix`` (ASCII digits only).
_RANGE = re.compile(r"\s*bytes\s*=\s*(\d{0,30})\s*-\s*(\d{0,30})\s*", re.ASCII | re.IGNORECASE)


class Unsatisfiable(Exception):
    """A ``Range`` that asks for nothing inside the file: answered 416."""


@dataclass(frozen=True)
class Validators:
    """A file's ETag (size and modification time, in nanoseconds) and Last-Modified."""

    etag: str
    last_modified: str
    mtime: int

    @classmethod
    def of(cls, st: os.stat_result) -> Validators:
        """The validators of the file ``st`` describes (a file of the site changes only by being
        written again, which changes its mtime or its size)."""
        return cls(f'"{st.st_size:x}-{st.st_mtime_ns:x}"', formatdate(st.st_mtime, usegmt=True),
                   int(st.st_mtime))

    def encoded(self, encoding: str | None) -> str:
        """The ETag of the file sent with ``encoding`` (each encoding is another representation,
        so another strong ETag)."""
        return self.etag if encoding is None else f'{self.etag[:-1]}-{encoding}"'


def _tags(header: str) -> list[str]:
    # Weak comparison (RFC 9110, 8.8.3.2): W/"x" matches "x".
    return [tag.strip().removeprefix("W/") for tag in header.split(",") if tag.strip()]


def not_modified(if_none_match: str | None, if_modified_since: str | None, etag: str,
                 mtime: int) -> bool:
    """Whether a GET or HEAD with these headers is answered 304. If-None-Match decides when
    present, If-Modified-Since only without it (RFC 9110, 13.2.2); a date that can't be read is
    ignored."""
    if if_none_match is not None:
        tags = _tags(if_none_match)
        return "*" in tags or etag in tags
    if if_modified_since is None:
        return False
    try:
        since = parsedate_to_datetime(if_modified_since)
    except (TypeError, ValueError, IndexError, OverflowError):
        return False
    if since.tzinfo is None:  # a date without a zone is not an HTTP date
        return False
    return mtime <= since.timestamp()


def weighted(header: str) -> list[tuple[str, float]]:
    """A list header with q-values (``Accept``, ``Accept-Encoding``) as ``[(token, q)]``, each
    token lowercased; a q that isn't a number counts as 0 (not acceptable), an empty item is
    skipped."""
    found = []
    for part in header.split(","):
        token, *params = (p.strip() for p in part.split(";"))
        if not token:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        found.append((token.lower(), q))
    return found


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether ``Accept-Encoding`` accepts gzip (``gzip`` or ``*`` with a q-value above 0)."""
    if not accept_encoding:
        return False
    weights = dict(weighted(accept_encoding))
    q = weights.get("gzip", weights.get("x-gzip", weights.get("*", 0.0)))
    return q > 0


@lru_cache(maxsize=GZIP_CACHE_PAGES)
def gzipped(path: str, size: int, mtime_ns: int) -> bytes | None:
    """The file at ``path`` compressed (keyed by its size and mtime, so a rewritten file is
    compressed again); None when it is over GZIP_MAX_BYTES or changed while being read."""
    if size > GZIP_MAX_BYTES:
        return None
    with open(path, "rb") as f:
        data = f.read(GZIP_MAX_BYTES + 1)
    if len(data) != size:
        return None
    # mtime=0: the same page compresses to the same bytes, whatever the time.
    return gzip.compress(data, compresslevel=6, mtime=0)


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one byte range ``Range`` asks for, as ``(first, last)`` inclusive, clipped to the
    file; None to send the whole file (no header, another unit, several ranges, or a header
    that can't be read). Unsatisfiable when it asks for nothing inside the file."""
    if not header or "," in header:
        return None
    match = _RANGE.fullmatch(header)
    if match is None:
        return None
    first_text, last_text = match.groups()
    if first_text == "":
        if last_text == "":
            return None
        suffix = int(last_text)  # the last N bytes
        if suffix == 0 or size == 0:
            raise Unsatisfiable(f"bytes=-{suffix} of a {size}-byte file")
        return max(0, size - suffix), size - 1
    first = int(first_text)
    if last_text and int(last_text) < first:
        return None  # not a valid range: ignored (RFC 9110, 14.1.1)
    if first >= size:
        raise Unsatisfiable(f"bytes={first}-{last_text} of a {size}-byte file")
    return first, min(int(last_text) if last_text else size - 1, size - 1)


def if_range_holds(if_range: str | None, validators: Validators) -> bool:
    """Whether a ``Range`` may be honoured: no ``If-Range``, or one naming the file's current
    ETag (strong comparison) or its exact Last-Modified date."""
    if if_range is None:
        return True
    value = if_range.strip()
    if value.startswith(('"', "W/")):
        return value == validators.etag
    return value == validators.last_modified
