"""sha256 of files, one at a time or many at once in worker processes.

The index hashes every new wheel, and a full build hashes them all: hashing is most of its cost.
``hash_files`` spreads a batch over worker processes (threads don't help: the GIL hand-offs
between a hashing thread and the thread reading zip directories cost more than they overlap), and
hands the digests back in order, so the caller keeps reading each wheel's zip directory while the
workers hash the next ones.

Only the standard library is imported here: each worker is a fresh interpreter that imports this
module and nothing else.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

#: Read size: small enough to stay in the CPU cache between read and hash.
CHUNK = 256 << 10
#: Below this many bytes in a batch, starting workers (a tenth of a second) costs more than it saves.
PARALLEL_MIN_BYTES = 256 << 20
#: Files per task sent to a worker: few enough round trips, small enough to keep every worker busy.
_MAX_TASK_FILES = 64

_buffers = threading.local()


def hash_stream(f: Any) -> tuple[str, int]:
    """(sha256, size) of what is left in the binary file ``f``, read into a buffer reused per thread.

    A small reused buffer stays in the CPU cache while it is hashed; reading a file into a fresh
    ``bytes`` of its size costs about as much again as hashing it. The buffer is page-aligned
    memory (an anonymous mmap), not a bytearray: malloc places a bytearray this large 16 bytes
    past a page boundary, and the kernel's copy from the page cache into a destination just
    past the source's page offset runs at half speed on some CPUs (4K aliasing; measured here,
    AMD EPYC: 2.9 s instead of 2.1 s to hash 2.5 GB from tmpfs).
    """
    buf = getattr(_buffers, "buf", None)
    if buf is None:
        buf = _buffers.buf = mmap.mmap(-1, CHUNK)
    view = memoryview(buf)
    digest = hashlib.sha256()
    size = 0
    while n := f.readinto(buf):
        digest.update(view[:n])
        size += n
    return digest.hexdigest(), size


def sha256_file(path: str | os.PathLike) -> str:
    """The hex sha256 of a file."""
    with open(path, "rb", buffering=0) as f:
        return hash_stream(f)[0]


def _hash_or_error(path: str) -> tuple[str, int] | OSError:
    try:
        with open(path, "rb", buffering=0) as f:
            return hash_stream(f)
    except OSError as exc:
        return exc


def default_jobs() -> int:
    """Processes to use by default: the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def jobs_for(sizes: Sequence[int], jobs: int, *, min_bytes: int | None = None) -> int:
    """How many of ``jobs`` processes are worth using to hash files of these ``sizes``.

    1 (the caller alone) for fewer than two files or fewer than ``min_bytes`` (default:
    PARALLEL_MIN_BYTES) in all: hashing in the calling process, which reads each file once for
    hash and zip directory alike, is then as fast. Otherwise at most one worker per
    ``min_bytes / 4``, so that each has enough to repay its start.
    """
    if min_bytes is None:
        min_bytes = PARALLEL_MIN_BYTES
    total = sum(sizes)
    if jobs <= 1 or len(sizes) < 2 or total < min_bytes:
        return 1
    return 1 + min(jobs - 1, len(sizes), max(1, total * 4 // max(min_bytes, 1)))


def hash_files(paths: Sequence[str], *, jobs: int = 1) -> Iterator[tuple[str, int] | OSError]:
    """(sha256, size) of each file of ``paths`` in order, or the OSError reading it raised.

    With ``jobs`` > 1, ``jobs - 1`` worker processes hash the files ahead of the consumer, which
    is the last of the ``jobs`` (it has its own work on each result: the index reads the wheel's
    zip directory); with 1, each file is hashed here when its result is asked for. Either way
    the results are the same.
    """
    if jobs > 1 and len(paths) > 1:
        yield from _hash_in_workers(paths, jobs - 1)
    else:
        for path in paths:
            yield _hash_or_error(path)


def _hash_in_workers(paths: Sequence[str], workers: int) -> Iterator[tuple[str, int] | OSError]:
    # Workers are plain subprocesses (``python -c`` running _worker), not multiprocessing: its
    # "spawn" start re-imports the caller's __main__ in every worker (the whole index tool, or a
    # user's script without a __main__ guard, which then fails), and "fork" can deadlock a child
    # of a process that runs threads. Paths go out in tasks, round-robin, from a feeder thread;
    # results come back in the same order, one line per file; nothing waits on anything but the
    # next result in order, so no pipe can fill up in a circle.
    per_task = max(1, min(_MAX_TASK_FILES, len(paths) // (workers * 4)))
    tasks = [paths[i: i + per_task] for i in range(0, len(paths), per_task)]
    workers = min(workers, len(tasks))
    procs = [
        subprocess.Popen(_worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for _ in range(workers)
    ]

    def feed() -> None:
        try:
            for i, task in enumerate(tasks):
                pipe = procs[i % workers].stdin
                pipe.write(b"".join(os.fsencode(p) + b"\0" for p in task))
                pipe.flush()
        except (BrokenPipeError, ValueError):  # a worker gone, or a consumer that stopped early
            pass
        finally:
            for proc in procs:
                try:
                    proc.stdin.close()
                except BrokenPipeError:
                    pass

    feeder = threading.Thread(target=feed, name="digest-feeder", daemon=True)
    feeder.start()
    finished = False
    try:
        for i, task in enumerate(tasks):
            out = procs[i % workers].stdout
            for path in task:
                line = out.readline()
                # A worker that died (killed, out of memory) leaves its files to this process.
                yield _parse_result(line, path) if line.endswith(b"\n") else _hash_or_error(path)
        finished = True
    finally:
        if not finished:  # the consumer stopped early: the rest of the work is not wanted
            for proc in procs:
                proc.kill()
        feeder.join(timeout=10)
        for proc in procs:
            proc.wait()
            proc.stdout.close()


def _worker_command() -> list[str]:
    # This package's parent goes first on the path: the worker must import this very module.
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = f"import sys; sys.path.insert(0, {package_parent!r}); from tools.digest import _worker; _worker()"
    return [sys.executable, "-c", code]


def _parse_result(line: bytes, path: str) -> tuple[str, int] | OSError:
    kind, _, rest = line.rstrip(b"\n").decode("utf-8", "replace").partition(" ")
    if kind == "ok":
        sha256, size = rest.split(" ")
        return sha256, int(size)
    code, _, message = rest.partition(" ")
    return OSError(int(code), message, path)  # OSError(errno, ...) is FileNotFoundError etc.


def _worker() -> None:
    """A hashing process: NUL-terminated paths on stdin, one result line each on stdout."""
    out = sys.stdout.buffer
    pending = b""
    while chunk := sys.stdin.buffer.read1(1 << 16):
        *paths, pending = (pending + chunk).split(b"\0")
        for raw in paths:
            result = _hash_or_error(os.fsdecode(raw))
            if isinstance(result, OSError):
                out.write(f"err {result.errno or 0} {result.strerror or result}\n".encode())
            else:
                out.write(f"ok {result[0]} {result[1]}\n".encode())
        out.flush()  # once per batch read: a write per file costs the consumer a wake-up per file
