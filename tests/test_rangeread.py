"""tools.core.rangeread: a remote file read with HTTP range requests, against a real HTTP server on
127.0.0.1 that honours ranges, ignores them, or answers without the file's length."""

from __future__ import annotations

import io
import os
import re
import threading
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tools.core.rangeread import RangeLimitExceeded, RangeReader, RangeUnsupported

#: How long a test server answers before it stops on its own.
SERVER_LIFETIME = 60


class _Handler(BaseHTTPRequestHandler):
    """Serves ``data``; ``ranges``: honour ``Range``; ``length``: send ``Content-Range``'s total;
    ``delay``: seconds to wait before answering; ``short``: answer half the range asked for.
    Every request's headers go to ``seen``."""

    data = b""
    ranges = True
    length = True
    delay = 0.0
    short = False
    seen: list[dict[str, str]] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.seen.append(dict(self.headers))
        if self.delay:
            time.sleep(self.delay)
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if not (self.ranges and m):
            self.send_response(200)
            self.send_header("Content-Length", str(len(self.data)))
            self.end_headers()
            self.wfile.write(self.data)
            return
        lo, hi = int(m[1]), min(int(m[2]), len(self.data) - 1)
        body = self.data[lo:hi + 1]
        if self.short:
            body, hi = body[:len(body) // 2], lo + len(body) // 2 - 1
        self.send_response(206)
        total = len(self.data) if self.length else "*"
        self.send_header("Content-Range", f"bytes {lo}-{hi}/{total}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextmanager
def serve(data: bytes, **settings) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """(URL of ``data``, the headers of every request) while a server on 127.0.0.1 answers; it
    stops when the block ends, or by itself after SERVER_LIFETIME seconds."""
    seen: list[dict[str, str]] = []
    handler = type("Handler", (_Handler,), {"data": data, "seen": seen, **settings})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.timeout = 0.1
    stop = threading.Event()
    deadline = time.monotonic() + SERVER_LIFETIME

    def loop() -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            server.handle_request()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/file.whl", seen
    finally:
        stop.set()
        thread.join(timeout=10)
        server.server_close()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """Requests to 127.0.0.1 go straight to the test server, whatever proxy the machine sets."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def _wheel(tmp_path, payload: int = 1 << 20) -> bytes:
    """A zip with a payload first (stored: the zip is as large as it) and a small member last,
    as a wheel's ``.dist-info`` comes after its package."""
    path = tmp_path / "w.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zipfile.ZipInfo("pkg/payload.bin"), _payload(payload))
        zf.writestr("pkg-1.0.dist-info/cuwheels.json", b'{"cuda": "12.8"}')
    return path.read_bytes()


def _payload(size: int) -> bytes:
    """``size`` bytes, the same in every call."""
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def test_zipfile_reads_one_member_without_the_rest(tmp_path):
    data = _wheel(tmp_path)
    with serve(data) as (url, seen):
        reader = RangeReader(url, len(data), user_agent="cuwheels-test/1")
        reader.prefetch_tail()
        with zipfile.ZipFile(reader) as zf:
            assert zf.read("pkg-1.0.dist-info/cuwheels.json") == b'{"cuda": "12.8"}'
    assert reader.fetched < len(data) // 8
    assert reader.requests == len(seen) <= 3
    # aligned blocks, the first one the file's last, and the agent asked for
    first = re.fullmatch(r"bytes=(\d+)-(\d+)", seen[0]["Range"])
    assert int(first[1]) % reader.block == 0 and int(first[2]) == len(data) - 1
    assert {h["User-Agent"] for h in seen} == {"cuwheels-test/1"}


def test_the_size_is_asked_when_not_given(tmp_path):
    data = _wheel(tmp_path, payload=100_000)
    with serve(data) as (url, seen):
        reader = RangeReader(url, block=4096)
        assert reader.size == len(data)
        assert seen[0]["Range"] == "bytes=0-0" and reader.fetched == 0
        assert "Python-urllib" in seen[0]["User-Agent"]  # urllib's own agent unless one is given
        reader.seek(-22, io.SEEK_END)  # the end of central directory record
        assert reader.read(4) == b"PK\x05\x06"
        assert reader.tell() == len(data) - 18
        assert reader.read(100) == data[-18:]
        assert reader.read(1) == b""  # at the end
    assert reader.requests == 2


def test_a_whole_file_answer_is_taken_when_small_enough(tmp_path):
    data = _wheel(tmp_path, payload=50_000)
    with serve(data, ranges=False) as (url, seen):
        reader = RangeReader(url, len(data), block=4096, whole_file_limit=len(data))
        with zipfile.ZipFile(reader) as zf:
            assert zf.read("pkg/payload.bin") == _payload(50_000)
    assert reader.requests == len(seen) == 1 and reader.fetched == len(data)


@pytest.mark.parametrize("size", [None, "given"])
def test_a_server_without_ranges_is_refused(tmp_path, size):
    data = _wheel(tmp_path, payload=10_000)
    with serve(data, ranges=False) as (url, _):
        with pytest.raises(RangeUnsupported, match="range request answered 200, not 206") as exc:
            reader = RangeReader(url, len(data) if size else None, whole_file_limit=len(data) - 1)
            reader.read(10)
    assert exc.value.status == 200 and exc.value.message.startswith(url)


def test_a_range_answer_without_the_length_is_refused(tmp_path):
    with serve(b"x" * 1000, length=False) as (url, _):
        with pytest.raises(RangeUnsupported, match="no Content-Range"):
            RangeReader(url)


def test_the_cache_keeps_the_last_blocks_read(tmp_path):
    data = os.urandom(10 * 4096)
    with serve(data) as (url, seen):
        reader = RangeReader(url, len(data), block=4096, cache_bytes=2 * 4096)
        for block in (0, 1, 2):  # three blocks read, two kept: 1 and 2
            reader.seek(block * 4096)
            assert reader.read(4096) == data[block * 4096:(block + 1) * 4096]
        assert reader.requests == 3
        reader.seek(2 * 4096 + 10)
        assert reader.read(10) == data[2 * 4096 + 10:2 * 4096 + 20]
        assert reader.requests == 3  # still held
        reader.seek(0)
        assert reader.read(5) == data[:5]
        assert reader.requests == 4  # evicted, fetched again
        # a read larger than the cache still returns every byte, in one request
        reader.seek(4096 + 100)
        assert reader.read(5 * 4096) == data[4096 + 100:6 * 4096 + 100]
        assert reader.requests == 5
    assert len(seen) == 5


def test_a_slow_server_times_out(tmp_path):
    with serve(b"x" * 1000, delay=2.0) as (url, _):
        start = time.monotonic()
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            RangeReader(url, 1000, timeout=0.5).read(10)
        assert time.monotonic() - start < 1.9


def test_a_closed_port_is_urllibs_error():
    with serve(b"") as (url, _):
        pass  # stopped and closed: nothing listens on its port now
    with pytest.raises(urllib.error.URLError):
        RangeReader(url, 100, timeout=5).read(1)


def test_a_read_past_the_cap_is_refused_before_anything_is_fetched(tmp_path):
    data = os.urandom(40_000)
    with serve(data) as (url, seen):
        reader = RangeReader(url, len(data), block=4096, max_fetched=10_000)
        assert reader.read(4096) == data[:4096]
        with pytest.raises(RangeLimitExceeded, match="would fetch more than 10000 bytes") as exc:
            reader.read(8192)
        assert exc.value.limit == 10_000 and reader.requests == len(seen) == 1
    # A zip directory claiming a terabyte: refused before io allocates a buffer for it.
    claimed = RangeReader(url, 1 << 40, max_fetched=1 << 20)
    with pytest.raises(RangeLimitExceeded):
        claimed.read(1 << 40)
    assert claimed.requests == 0


def test_a_whole_file_answer_counts_against_the_cap(tmp_path):
    data = _wheel(tmp_path, payload=50_000)
    with serve(data, ranges=False) as (url, _):
        reader = RangeReader(url, len(data), block=4096, whole_file_limit=len(data), max_fetched=len(data) - 1)
        with pytest.raises(RangeLimitExceeded):
            reader.read(10)


def test_every_request_goes_through_the_opener(tmp_path):
    data = _wheel(tmp_path)
    opened = []

    def opener(request):
        opened.append(request.get_header("Range"))
        return urllib.request.urlopen(request, timeout=30)

    with serve(data) as (url, seen):
        reader = RangeReader(url, len(data), opener=opener)
        reader.prefetch_tail()
        with zipfile.ZipFile(reader) as zf:
            assert zf.read("pkg-1.0.dist-info/cuwheels.json") == b'{"cuda": "12.8"}'
    assert opened == [h["Range"] for h in seen] and len(opened) == reader.requests


def test_a_short_answer_is_a_connection_error(tmp_path):
    data = os.urandom(20_000)
    with serve(data, short=True) as (url, _):
        with pytest.raises(ConnectionError, match="asked for 4096 bytes from byte 0, the answer held 2048"):
            RangeReader(url, len(data), block=4096).read(10)
