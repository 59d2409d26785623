"""tools.core.digest: file hashes, in this process or in worker processes, always the same and in order."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys

import pytest

from tools.core import digest
from tools.core import workers


@pytest.fixture
def files(tmp_path):
    """Files of sizes around the read size, with different bytes each."""
    paths = []
    for i, size in enumerate([0, 1, digest.CHUNK - 1, digest.CHUNK, digest.CHUNK + 1, 3 * digest.CHUNK + 7]):
        path = tmp_path / f"f{i}"
        path.write_bytes(os.urandom(size))
        paths.append(str(path))
    return paths


def expected(path: str) -> tuple[str, int]:
    data = open(path, "rb").read()
    return hashlib.sha256(data).hexdigest(), len(data)


def test_sha256_file_matches_hashlib(files):
    for path in files:
        assert digest.sha256_file(path) == expected(path)[0]


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_hash_files_gives_every_result_in_order_with_errors_in_place(files, tmp_path, jobs):
    missing = str(tmp_path / "gone")
    paths = [*files[:3], missing, str(tmp_path), *files[3:]]  # a missing file and a directory
    results = list(digest.hash_files(paths, jobs=jobs))
    assert len(results) == len(paths)
    assert isinstance(results[3], FileNotFoundError) and results[3].filename == missing
    assert isinstance(results[4], IsADirectoryError)
    assert [r for i, r in enumerate(results) if i not in (3, 4)] == [expected(p) for p in files]


def test_workers_only_for_a_large_batch_and_enough_work_for_each():
    big = digest.PARALLEL_MIN_BYTES
    assert digest.jobs_for([big // 2, big // 2], 2) == 2
    assert digest.jobs_for([big // 2, big // 2 - 1], 2) == 1  # too small to repay starting workers
    assert digest.jobs_for([big, big], 1) == 1  # one CPU
    assert digest.jobs_for([2 * big], 8) == 1  # one file: nothing to share
    assert digest.jobs_for([big // 8] * 8, 64) == 4  # a quarter of the threshold each
    assert digest.jobs_for([big // 2] * 2, 64) == 2  # never one worker alone: that is no faster
    assert digest.jobs_for([big] * 100, 64) == 64
    assert digest.jobs_for([big] * 3, 64) == 3  # never more workers than files
    assert digest.jobs_for([1, 1], 2, min_bytes=2) == 2


@pytest.mark.parametrize("jobs, workers", [(1, None), (2, 2), (3, 3)])
def test_jobs_is_the_number_of_workers(files, monkeypatch, jobs, workers):
    started = []
    real = digest.map_in_workers
    monkeypatch.setattr(digest, "map_in_workers", lambda target, paths, workers: started.append(workers)
                        or real(target, paths, workers=workers))
    assert list(digest.hash_files(files, jobs=jobs)) == [expected(p) for p in files]
    assert started == ([workers] if workers else [])


def test_files_of_a_worker_that_dies_are_hashed_here(files, monkeypatch):
    # Workers that read a little of their input and exit without a word, as if killed.
    monkeypatch.setattr(workers, "worker_command",
                        lambda target, args=(): [sys.executable, "-c", "import os; os.read(0, 100)"])
    assert list(digest.hash_files(files, jobs=3)) == [expected(p) for p in files]


def test_worker_reports_errors_as_the_same_oserror(tmp_path):
    proc = subprocess.run(workers.worker_command("tools.core.digest:hasher"),
                          input=f"{tmp_path / 'gone'}\0{tmp_path}\0".encode(),
                          capture_output=True, timeout=60, check=True)
    lines = proc.stdout.decode().splitlines()
    assert [line.split()[:2] for line in lines] == [["err", str(errno.ENOENT)], ["err", str(errno.EISDIR)]]
    err = digest.parse_hash_line(lines[0], "gone")
    assert isinstance(err, FileNotFoundError) and err.filename == "gone"
