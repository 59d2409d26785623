"""tools.selector.localread: every read of this machine bounded, on real files, FIFOs, devices
and real programs (``sh``, ``yes``, ``sleep``), each with a short cap or timeout so that a
failure to bound shows as a slow or a memory-hungry test, never a hung one (every program is
killed by the function under test or, failing that, by its timeout)."""

from __future__ import annotations

import importlib.metadata
import os
import sys
import time
from pathlib import Path

import pytest

from tools.selector import localread


def test_read_text_reads_a_regular_file(tmp_path):
    path = tmp_path / "version.py"
    path.write_bytes(b"cuda = '12.8'\n\xff\n")
    assert localread.read_text(path, 100) == ("cuda = '12.8'\n\ufffd\n", "")


@pytest.mark.parametrize("kind, why", [("fifo", "is a FIFO, not a regular file"),
                                       ("device", "is a device, not a regular file"),
                                       ("large", "is larger than 1 KiB, the most read of it"),
                                       ("missing", "can't be read (No such file or directory)")])
def test_read_text_refuses_what_is_not_a_small_regular_file(tmp_path, kind, why):
    path = tmp_path / "version.py"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "large":
        path.write_bytes(b"x" * 1025)
    start = time.monotonic()
    text, reason = localread.read_text(path, 1024)
    assert text is None and reason == f"{path} {why}"
    assert time.monotonic() - start < 5


def test_read_tail_keeps_the_end_of_a_large_log(tmp_path):
    log = tmp_path / "build.log"
    log.write_bytes(b"noise\n" * 10_000 + b"ImportError: undefined symbol: x\n")
    text, note = localread.read_tail(log, 1 << 10)
    assert len(text) == 1 << 10 and text.endswith("ImportError: undefined symbol: x\n")
    assert note == f"read the last 1 KiB of {log} ({log.stat().st_size} bytes)"
    assert localread.read_tail(log, 1 << 20) == (log.read_text(), "")


def test_read_tail_refuses_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "error.log")
    assert localread.read_tail(tmp_path / "error.log", 1 << 20) == (
        None, f"{tmp_path / 'error.log'} is a FIFO, not a regular file")


def test_contains_finds_a_needle_across_two_chunks(tmp_path):
    lib = tmp_path / "libc10.so"
    boundary = 1 << 16  # localread's chunk
    lib.write_bytes(b"\0" * (boundary - 4) + b"St7__cxx11" + b"\0" * 100)
    assert localread.contains(lib, b"St7__cxx11", 1 << 20)[0] is True
    lib.write_bytes(b"\0" * 300_000)
    assert localread.contains(lib, b"St7__cxx11", 1 << 20) == (False, 300_000, "")


def test_contains_stops_at_its_limit(tmp_path):
    lib = tmp_path / "libc10.so"
    with open(lib, "wb") as f:
        f.truncate(8 << 20)
    found, scanned, why = localread.contains(lib, b"St7__cxx11", 1 << 20)
    assert (found, scanned) == (None, 1 << 20) and why.endswith("is larger than 1 MiB, the most scanned of it")
    assert localread.contains(Path("/dev/zero"), b"x", 1 << 20)[2] == "/dev/zero is a device, not a regular file"


def test_run_capped_returns_what_a_program_printed():
    out = localread.run_capped([sys.executable, "-c", "import sys; print('9.0, 570.86.10'); sys.exit(3)"],
                               timeout=30)
    assert (out.returncode, out.stdout, out.problem) == (3, "9.0, 570.86.10\n", "")


def test_run_capped_kills_a_program_that_prints_without_end():
    start = time.monotonic()
    out = localread.run_capped(["yes", "9.0, 570.86.10, NVIDIA H100"], timeout=30, limit=1 << 20)
    assert out.returncode is None and out.problem == "yes printed more than 1 MiB, the most read of it"
    assert len(out.stdout) == 1 << 20 and time.monotonic() - start < 10


def test_run_capped_kills_a_program_that_never_ends():
    start = time.monotonic()
    out = localread.run_capped(["sleep", "60"], timeout=0.5)
    assert out.returncode is None and out.problem == "sleep gave no complete answer within 0.5 s"
    assert time.monotonic() - start < 5


def test_run_capped_does_not_wait_for_what_the_program_left_behind():
    """A script that ends at once but leaves a child holding its output pipe open."""
    start = time.monotonic()
    out = localread.run_capped(["sh", "-c", "sleep 60 & echo done"], timeout=30)
    assert out.returncode == 0 and out.stdout == "done\n" and time.monotonic() - start < 10


def test_run_capped_says_none_for_a_program_that_cannot_start(tmp_path):
    assert localread.run_capped([str(tmp_path / "nvidia-smi")], timeout=5) is None


def _dist(tmp_path: Path, metadata: bytes | None) -> importlib.metadata.PathDistribution:
    info = tmp_path / "torch-2.8.0+cu128.dist-info"
    info.mkdir()
    if metadata is not None:
        (info / "METADATA").write_bytes(metadata)
    return importlib.metadata.PathDistribution(info)


def test_dist_version_reads_the_headers_only(tmp_path):
    dist = _dist(tmp_path, b"Metadata-Version: 2.1\nName: torch\nVersion: 2.8.0+cu128\n\nVersion: 9.9 (the body)\n")
    assert localread.dist_version(dist) == ("2.8.0+cu128", "")
    assert localread.dist_headers(dist)[0]["name"] == "torch"


def test_dist_metadata_that_is_a_fifo_is_named_not_waited_for(tmp_path):
    dist = _dist(tmp_path, None)
    os.mkfifo(tmp_path / "torch-2.8.0+cu128.dist-info" / "METADATA")
    version, why = localread.dist_version(dist)
    assert version is None and why.endswith("METADATA is a FIFO, not a regular file")
    assert localread.dist_text(dist, "RECORD")[0] is None


def test_dist_text_caps_what_it_reads(tmp_path):
    dist = _dist(tmp_path, b"Version: 1\n")
    with open(tmp_path / "torch-2.8.0+cu128.dist-info" / "RECORD", "wb") as f:
        f.truncate(3 << 20)
    assert localread.dist_text(dist, "RECORD", 1 << 20)[1].endswith("is larger than 1 MiB, the most read of it")
