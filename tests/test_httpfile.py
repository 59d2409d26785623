"""tools.sitegen.httpfile: the caching, compression and range rules of tools.serve, header by
header (tests/test_serve.py checks them over real connections)."""

from __future__ import annotations

import gzip
import os

import pytest

from tools.sitegen import httpfile
from tools.sitegen.httpfile import Unsatisfiable, Validators, accepts_gzip, byte_range, gzipped, not_modified


@pytest.mark.parametrize("header, expected", [
    (None, None), ("", None),
    ("bytes=0-3", (0, 3)), ("bytes=5-", (5, 99)), ("bytes=-4", (96, 99)),
    ("bytes=90-1000", (90, 99)),      # clipped to the file
    ("bytes=-1000", (0, 99)),         # a suffix longer than the file: all of it
    ("BYTES = 1 - 2", (1, 2)),        # unit case and spaces
    ("bytes=0-1,4-5", None),          # several ranges: the whole file
    ("bytes=5-2", None),              # last before first: not a range, ignored
    ("items=0-3", None), ("bytes=a-b", None), ("bytes=-", None), ("bytes=²-3", None),
    ("bytes=" + "9" * 40 + "-", None),  # beyond any file: unreadable, ignored
])
def test_byte_range(header, expected):
    assert byte_range(header, 100) == expected


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=500-600", "bytes=-0"])
def test_a_range_outside_the_file_is_unsatisfiable(header):
    with pytest.raises(Unsatisfiable):
        byte_range(header, 100)
    with pytest.raises(Unsatisfiable):
        byte_range("bytes=-5", 0)


@pytest.mark.parametrize("header, expected", [
    (None, False), ("", False), ("gzip", True), ("br, gzip;q=0.5", True), ("gzip;q=0", False),
    ("identity", False), ("*", True), ("*;q=0", False), ("gzip;q=0, *", False), ("x-gzip", True),
    ("GZIP;Q=1", True), ("gzip;q=zz", False),
])
def test_accepts_gzip(header, expected):
    assert accepts_gzip(header) is expected


def test_conditional_requests(tmp_path):
    path = tmp_path / "page.html"
    path.write_text("x")
    os.utime(path, (1_700_000_000, 1_700_000_000))
    v = Validators.of(path.stat())
    assert v.last_modified == "Tue, 14 Nov 2023 22:13:20 GMT"
    assert v.encoded("gzip") == v.etag[:-1] + '-gzip"' != v.etag
    assert not_modified(v.etag, None, v.etag, v.mtime)
    assert not_modified(f'"other", W/{v.etag}', None, v.etag, v.mtime)  # weak comparison
    assert not_modified("*", None, v.etag, v.mtime)
    assert not not_modified('"other"', None, v.etag, v.mtime)
    # If-None-Match decides when present, even against a date that would match.
    assert not not_modified('"other"', v.last_modified, v.etag, v.mtime)
    assert not_modified(None, v.last_modified, v.etag, v.mtime)
    assert not not_modified(None, "Sat, 01 Jan 2000 00:00:00 GMT", v.etag, v.mtime)
    for unreadable in ("yesterday", "", "Tue, 14 Nov 2023 22:13:20", "Tue, 99 Nov 2023 22:13:20 GMT"):
        assert not not_modified(None, unreadable, v.etag, v.mtime), unreadable
    assert httpfile.if_range_holds(None, v) and httpfile.if_range_holds(v.etag, v)
    assert httpfile.if_range_holds(v.last_modified, v)
    assert not httpfile.if_range_holds('"stale"', v) and not httpfile.if_range_holds(f"W/{v.etag}", v)


def test_a_page_is_compressed_again_once_rewritten(tmp_path):
    path = tmp_path / "index.html"
    path.write_text("<html>one</html>")
    st = path.stat()
    assert gzip.decompress(gzipped(str(path), st.st_size, st.st_mtime_ns)) == b"<html>one</html>"
    path.write_text("<html>two, longer</html>")
    st = path.stat()
    assert gzip.decompress(gzipped(str(path), st.st_size, st.st_mtime_ns)) == b"<html>two, longer</html>"
    # A size that no longer matches the file (rewritten between stat and read): not compressed.
    assert gzipped(str(path), st.st_size + 1, st.st_mtime_ns) is None
