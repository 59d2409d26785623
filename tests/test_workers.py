"""tools.core.workers: an ordered map over worker processes that survives workers dying and consumers leaving."""

from __future__ import annotations

import os
import subprocess

import pytest

from tools.core import workers


def tagger(prefix: str):
    """A worker factory for these tests: each item comes back with the factory's argument and the pid."""
    def tag(item: str) -> str:
        if item == "explode":
            os._exit(3)  # a worker that dies without a word, as if killed
        return f"{prefix}:{ascii(item) if not item.isalnum() else item}:{os.getpid()}"
    return tag


TARGET = "tests.test_workers:tagger"


@pytest.mark.parametrize("count, n", [
    (1, 1),      # one item, one worker
    (7, 3),      # fewer items than tasks per worker: tasks of one
    (1000, 2),   # tasks of MAX_TASK_ITEMS, round-robin
    (5, 64),     # more workers asked for than tasks: only as many as tasks start
])
def test_results_come_back_in_order_from_several_workers(count, n):
    items = [f"item{i}" for i in range(count)]
    lines = list(workers.map_in_workers(TARGET, items, workers=n, args=("p",)))
    assert [line.rsplit(":", 1)[0] for line in lines] == [f"p:{item}" for item in items]
    pids = {line.rsplit(":", 1)[1] for line in lines}
    assert str(os.getpid()) not in pids
    assert len(pids) == min(n, count)


def test_no_items_starts_nothing(monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", None)  # any start would fail
    assert list(workers.map_in_workers(TARGET, [], workers=4, args=("p",))) == []


def test_items_may_be_any_file_name():
    # Not UTF-8 (surrogate-escaped, as os.listdir gives it), a space, a newline: each goes
    # through the pipe and comes back as it was (the tagger answers with its ascii()).
    items = [os.fsdecode(b"caf\xe9.whl"), "a b.whl", "line\nbreak.whl"]
    lines = list(workers.map_in_workers(TARGET, items, workers=2, args=("p",)))
    assert [line.rsplit(":", 1)[0] for line in lines] == [f"p:{ascii(item)}" for item in items]


def test_an_item_whose_worker_died_comes_back_as_none():
    items = ["a", "b", "explode", "c", "d", "e"]
    lines = list(workers.map_in_workers(TARGET, items, workers=2, args=("p",)))
    assert len(lines) == len(items)
    assert lines[2] is None
    # The dead worker's other items are None too; the other worker's come back.
    answered = [item for item, line in zip(items, lines) if line is not None]
    assert answered and "explode" not in answered
    for item, line in zip(items, lines):
        assert line is None or line.startswith(f"p:{item}:")


@pytest.mark.timeout(60)
def test_a_consumer_that_stops_early_stops_the_workers(tmp_path):
    # The last item is a FIFO nobody writes to; a worker that got to it would wait forever, so
    # closing the results early returns only if the workers are stopped rather than waited for.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    items = [str(tmp_path / f"missing{i}") for i in range(400)] + [str(fifo)]
    try:
        results = workers.map_in_workers("tools.core.digest:hasher", items, workers=3)
        assert next(results).startswith("err ")
        results.close()  # what an error raised in the caller's loop does to the generator
    finally:
        try:  # release a worker stuck on the FIFO, if the test failed
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def test_worker_command_runs_this_package_from_anywhere(tmp_path):
    proc = subprocess.run(workers.worker_command(TARGET, ["q"]), input=b"one\0two\0", cwd=tmp_path,
                          capture_output=True, timeout=60, check=True)
    assert [line.rsplit(":", 1)[0] for line in proc.stdout.decode().splitlines()] == ["q:one", "q:two"]


def test_default_jobs_is_the_cpus_this_process_may_use():
    assert workers.default_jobs() == len(os.sched_getaffinity(0))


def test_resolve_names_the_factory():
    assert workers.resolve(TARGET).__qualname__ == "tagger"
    with pytest.raises(ModuleNotFoundError):
        workers.resolve("tools.no_such_module:f")
