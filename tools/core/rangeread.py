"""A remote file read with HTTP range requests: zipfile reads a wheel's directory and the members
it needs, never the rest of the wheel.

The selector reads a wheel's build manifest this way (a few kilobytes of a wheel that may weigh a
gigabyte), tools.upstream.registry a torch wheel's metadata and one library, and tools.abicheck
the libraries that hold torch's stable shim. Each caller turns :class:`RangeUnsupported` and
:class:`RangeLimitExceeded` into its own failure class; network errors are urllib's own
(``URLError``, ``HTTPError``, ``OSError``), and an answer shorter than the range asked for is a
``ConnectionError``.
"""

from __future__ import annotations

import io
import urllib.request
from collections.abc import Callable
from typing import Any

#: Bytes per request unless the caller says otherwise: zipfile's reads of a directory and a
#: small member fit in one or two.
DEFAULT_BLOCK = 1 << 16
#: Bytes of fetched blocks kept for later reads (the blocks of the read in progress are always
#: kept, however large).
DEFAULT_CACHE = 32 << 20


class RangeUnsupported(Exception):
    """The server answered a range request with something else than ``206 Partial Content``."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.message = message
        self.status = status


class RangeLimitExceeded(Exception):
    """A read would take the bytes fetched past the reader's ``max_fetched``."""

    def __init__(self, message: str, limit: int):
        super().__init__(message)
        self.message = message
        self.limit = limit


class RangeReader(io.RawIOBase):
    """A read-only, seekable file over HTTP range requests, in aligned blocks of ``block`` bytes.

    ``size``: the file's length when the caller knows it (a simple-API page lists it); None asks
    the server with a one-byte range request (its ``Content-Range`` says the length).
    ``whole_file_limit``: when the server ignores the ``Range`` header and answers 200 with the
    whole file, a file up to this size is taken whole; a larger one (or any, at 0) raises
    :class:`RangeUnsupported`. ``user_agent``: the ``User-Agent`` header, when given (urllib's
    own otherwise). ``requests`` and ``fetched`` count what was asked and received.
    ``max_fetched``: the most bytes all requests together may bring (None: no cap); a read that
    would pass it raises :class:`RangeLimitExceeded` before anything is fetched or allocated, so
    that a zip directory claiming gigabytes costs nothing. ``opener``: opens a
    ``urllib.request.Request`` and returns the response (``urlopen`` with ``timeout`` when None):
    how a caller applies its own rules to every request (which hosts, until when).
    """

    def __init__(self, url: str, size: int | None = None, *, block: int = DEFAULT_BLOCK,
                 timeout: float = 30, user_agent: str | None = None,
                 whole_file_limit: int = 0, cache_bytes: int = DEFAULT_CACHE,
                 max_fetched: int | None = None,
                 opener: Callable[[urllib.request.Request], Any] | None = None):
        super().__init__()
        self.url, self.block, self.timeout = url, block, timeout
        self.user_agent, self.whole_file_limit, self.cache_bytes = user_agent, whole_file_limit, cache_bytes
        self.max_fetched, self.opener = max_fetched, opener
        self.pos = 0
        self.requests = 0
        self.fetched = 0
        self._blocks: dict[int, bytes] = {}
        self._cached = 0
        self.size = self._remote_size() if size is None else size

    def readable(self) -> bool:
        """Always: the file is for reading."""
        return True

    def seekable(self) -> bool:
        """Always: a range request can start anywhere."""
        return True

    def tell(self) -> int:
        """The current position."""
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move to ``offset`` from the start, the current position or the end; nothing is fetched."""
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes from the current position (the rest of the file for -1 or None).

        Checked against ``max_fetched`` first: io's own ``read`` allocates the whole buffer
        before it asks for a byte."""
        left = max(0, self.size - self.pos)
        wanted = left if size is None or size < 0 else min(size, left)
        self._check_limit(wanted)
        return super().read(wanted)

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` from the current position, fetching the blocks not held yet in one
        request; the number of bytes read (0 at the end of the file)."""
        end = min(self.size, self.pos + len(buffer))
        if end <= self.pos:
            return 0
        first, last = self.pos // self.block, (end - 1) // self.block
        missing = [i for i in range(first, last + 1) if i not in self._blocks]
        if missing:
            self._fetch(missing[0] * self.block, min(self.size, (missing[-1] + 1) * self.block))
        # Re-inserted: the blocks just read are the last to be evicted.
        wanted = [self._blocks.pop(i) for i in range(first, last + 1)]
        for i, data in zip(range(first, last + 1), wanted):
            self._blocks[i] = data
        chunk = b"".join(wanted)[self.pos - first * self.block: end - first * self.block]
        buffer[: len(chunk)] = chunk
        self.pos += len(chunk)
        self._evict(keep=range(first, last + 1))
        return len(chunk)

    def prefetch_tail(self) -> None:
        """Fetch the last block (a zip's end of central directory record, and usually the
        directory). Called before zipfile opens the file, it keeps a network error a network
        error: inside zipfile every OSError of that first read becomes "File is not a zip file"."""
        lo = max(0, self.size - self.block) // self.block * self.block
        self._fetch(lo, self.size)

    def _request(self, lo: int, hi: int) -> Any:
        """The open response to a request for bytes ``lo`` to ``hi`` (inclusive)."""
        headers = {"Range": f"bytes={lo}-{hi}"}
        if self.user_agent:
            headers["User-Agent"] = self.user_agent
        self.requests += 1
        request = urllib.request.Request(self.url, headers=headers)
        if self.opener is not None:
            return self.opener(request)
        return urllib.request.urlopen(request, timeout=self.timeout)

    def _check_limit(self, more: int) -> None:
        """RangeLimitExceeded when fetching ``more`` bytes would pass ``max_fetched``."""
        if self.max_fetched is not None and self.fetched + more > self.max_fetched:
            raise RangeLimitExceeded(
                f"{self.url}: reading {more} more bytes would fetch more than {self.max_fetched} "
                f"bytes of it ({self.fetched} fetched so far)", self.max_fetched)

    def _remote_size(self) -> int:
        with self._request(0, 0) as resp:
            if resp.status != 206:
                raise RangeUnsupported(f"{self.url}: range request answered {resp.status}, not 206",
                                       resp.status)
            total = resp.headers.get("Content-Range", "").rpartition("/")[2]
        if not total.isdigit():
            raise RangeUnsupported(f"{self.url}: the server answered no Content-Range to a range "
                                   "request", 206)
        return int(total)

    def _fetch(self, lo: int, hi: int) -> None:
        """Fetch bytes ``lo`` (block-aligned) up to ``hi`` (exclusive) into the block cache."""
        self._check_limit(hi - lo)
        with self._request(lo, hi - 1) as resp:
            # Never more than asked for: a longer answer would fill the next block with a piece.
            if resp.status == 206:
                data, start, expected = resp.read(hi - lo), lo, hi - lo
            elif self.size <= self.whole_file_limit:
                self._check_limit(self.size)
                data, start, expected = resp.read(self.size), 0, self.size
            else:
                raise RangeUnsupported(f"{self.url}: range request answered {resp.status}, not 206",
                                       resp.status)
        # A short answer would leave holes in the blocks that a read expects to find.
        if len(data) != expected:
            raise ConnectionError(f"{self.url}: asked for {expected} bytes from byte {start}, the "
                                  f"answer held {len(data)}")
        self.fetched += len(data)
        for i in range(start // self.block, (start + len(data) + self.block - 1) // self.block):
            piece = data[i * self.block - start: (i + 1) * self.block - start]
            self._cached += len(piece) - len(self._blocks.get(i, b""))
            self._blocks[i] = piece

    def _evict(self, keep: range) -> None:
        """Drop the least recently read blocks outside ``keep`` until the cache fits ``cache_bytes``."""
        while self._cached > self.cache_bytes:
            oldest = next((i for i in self._blocks if i not in keep), None)
            if oldest is None:
                break
            self._cached -= len(self._blocks.pop(oldest))
