"""Work on many files in worker processes, with the results handed back in order.

The index reads every new wheel (hash, zip directory, METADATA, the ``.metadata`` file beside
it), and a full build reads them all: that is most of its cost, and it divides between processes
(threads don't help: the per-wheel work is Python code holding the GIL). ``map_in_workers`` runs a
function over a list of strings (file paths) in worker processes and yields each result in the
order of the list, so the caller's output never depends on how the work was shared.

Workers are plain subprocesses (``python -c`` running ``serve``), not multiprocessing: its
"spawn" start re-imports the caller's ``__main__`` in every worker (the whole index tool, or a
user's script without a ``__main__`` guard, which then fails), and "fork" can deadlock a child of
a process that runs threads. A worker imports only the module that holds its function.

Protocol: items go to a worker's stdin NUL-terminated, round-robin in tasks of up to
``MAX_TASK_ITEMS``, from a feeder thread; a worker writes one line per item to its stdout. The
function's result must be one line of text (no newline in it). Nothing waits on anything but
the next result in order, so no pipe can fill up in a circle.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence

#: Items per task sent to a worker: few enough round trips, small enough to keep every worker busy.
MAX_TASK_ITEMS = 64


def default_jobs() -> int:
    """Processes to use by default: the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def map_in_workers(target: str, items: Sequence[str], *, workers: int,
                   args: Sequence[str] = ()) -> Iterator[str | None]:
    """The result line of ``target``'s function for each of ``items``, in order, from ``workers`` processes.

    ``target`` is ``"package.module:factory"``; each worker calls ``factory(*args)`` once (the
    ``args`` are strings) and applies the function it returns to every item it is given. An item
    whose worker died (killed, out of memory) before answering yields None: the caller does that
    one itself. A consumer that stops early (an exception in its loop, ``close()``) kills the
    workers: the rest of the work is not wanted.
    """
    if not items:
        return
    per_task = max(1, min(MAX_TASK_ITEMS, len(items) // (workers * 4)))
    tasks = [items[i: i + per_task] for i in range(0, len(items), per_task)]
    workers = max(1, min(workers, len(tasks)))
    procs = [
        subprocess.Popen(worker_command(target, args), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for _ in range(workers)
    ]

    def feed() -> None:
        try:
            for i, task in enumerate(tasks):
                pipe = procs[i % workers].stdin
                pipe.write(b"".join(os.fsencode(item) + b"\0" for item in task))
                pipe.flush()
        except (BrokenPipeError, ValueError):  # a worker gone, or a consumer that stopped early
            pass
        finally:
            for proc in procs:
                try:
                    proc.stdin.close()
                except BrokenPipeError:
                    pass

    feeder = threading.Thread(target=feed, name="workers-feeder", daemon=True)
    feeder.start()
    finished = False
    try:
        for i, task in enumerate(tasks):
            out = procs[i % workers].stdout
            for _item in task:
                line = out.readline()
                yield line[:-1].decode("utf-8") if line.endswith(b"\n") else None
        finished = True
    finally:
        if not finished:
            for proc in procs:
                proc.kill()
        feeder.join(timeout=10)
        for proc in procs:
            proc.wait()
            proc.stdout.close()


def worker_command(target: str, args: Sequence[str] = ()) -> list[str]:
    """The command line of one worker process running ``target`` (see map_in_workers)."""
    # The parent of this ``tools`` package goes first on the path: the worker must import this
    # very package (this file is tools/core/workers.py).
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = (f"import sys; sys.path.insert(0, {package_parent!r}); "
            f"from tools.core.workers import serve; serve(sys.argv[1], sys.argv[2:])")
    return [sys.executable, "-c", code, target, *args]


def resolve(target: str) -> Callable[..., Callable[[str], str]]:
    """The factory named by ``"package.module:factory"``."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def serve(target: str, args: Sequence[str]) -> None:
    """A worker's main loop: NUL-terminated items on stdin, one result line each on stdout."""
    func = resolve(target)(*args)
    out = sys.stdout.buffer
    pending = b""
    while chunk := sys.stdin.buffer.read1(1 << 16):
        *items, pending = (pending + chunk).split(b"\0")
        for raw in items:
            out.write(func(os.fsdecode(raw)).encode("utf-8") + b"\n")
        out.flush()  # once per batch read: a write per item costs the consumer a wake-up per item
