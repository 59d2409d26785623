"""StepCounter of long steps (tools.core.progress): a live line on a terminal (a real pty here),
plain periodic lines in a log; and the two commands that show it, run for real."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

from tools import ROOT
from tools.core.progress import StepCounter
from wheelfactory import make_wheel

TIMEOUT = 120


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def drain_pty(master: int, into: bytearray) -> threading.Thread:
    """Read the pty's other end until it closes (a full pty buffer would block the writer)."""
    def run():
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: every writer closed its end
                return
            if not chunk:
                return
            into.extend(chunk)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_log_gets_a_line_every_n_items_and_a_last_one():
    out, clock = io.StringIO(), Clock()
    with StepCounter("reading new wheels", 250, stream=out, every=100, clock=clock) as p:
        for i in range(250):
            clock.now += 0.01
            p.advance(f"w{i}.whl")
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        "reading new wheels: 100/250", "reading new wheels: 200/250", "reading new wheels: 250/250"]
    assert "\r" not in out.getvalue()


def test_a_log_gets_a_line_every_interval_when_items_are_slow():
    out, clock = io.StringIO(), Clock()
    p = StepCounter("reading the registry", stream=out, every=100, interval=10, clock=clock)
    for seconds in (4, 4, 4, 4, 4, 4):  # a line at 12 s and at 24 s
        clock.now += seconds
        p.advance("torch/json")
    p.close()
    assert out.getvalue().splitlines() == ["reading the registry: 3 (12 s)",
                                           "reading the registry: 6 (24 s)"]


def test_a_short_step_prints_nothing_in_a_log():
    out = io.StringIO()
    with StepCounter("reading new wheels", 3, stream=out) as p:
        for name in ("a", "b", "c"):
            p.advance(name)
    assert out.getvalue() == ""


def test_a_terminal_gets_one_live_line_cleared_at_the_end():
    master, slave = pty.openpty()
    got = bytearray()
    reader = drain_pty(master, got)
    clock = Clock()
    with os.fdopen(slave, "w") as tty:
        with StepCounter("reading new wheels", 3, stream=tty, clock=clock) as p:
            assert p.live
            for name in ("a.whl", "b.whl", "c.whl"):
                clock.now += 1
                p.advance(name)
    reader.join(timeout=10)
    os.close(master)
    text = got.decode()
    assert "\n" not in text.replace("\r\n", "")  # never a new line: rewritten in place
    assert "\rreading new wheels: 1/3 a.whl" in text and "\rreading new wheels: 3/3 c.whl" in text
    assert text.endswith("\r" + " " * len("reading new wheels: 3/3 c.whl") + "\r")


def _wheels(directory: Path, count: int) -> Path:
    directory.mkdir()
    for i in range(count):
        make_wheel(directory, f"pkg{i:03d}", "1.0", tag="py3-none-any")
    return directory


def test_the_index_shows_a_live_line_on_a_terminal(tmp_path):
    wheels = _wheels(tmp_path / "w", 3)
    master, slave = pty.openpty()
    got = bytearray()
    reader = drain_pty(master, got)
    proc = subprocess.run([sys.executable, "-m", "tools.index", "--wheels", str(wheels), "--site",
                           str(tmp_path / "site"), "--base-url", "https://files.example/v1",
                           "--init-ledger"], cwd=ROOT, stdout=subprocess.PIPE, stderr=slave,
                          text=True, timeout=TIMEOUT)
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    assert proc.returncode == 0
    assert "\rreading new wheels: 1/3 pkg000-1.0-py3-none-any.whl" in got.decode()
    assert "\rreading new wheels: 3/3 pkg002-1.0-py3-none-any.whl" in got.decode()
    assert "index: 3 files in 3 projects" in proc.stdout


def test_the_index_prints_periodic_lines_in_a_log(tmp_path):
    wheels = _wheels(tmp_path / "w", 120)
    proc = subprocess.run([sys.executable, "-m", "tools.index", "--wheels", str(wheels), "--site",
                           str(tmp_path / "site"), "--base-url", "https://files.example/v1",
                           "--init-ledger", "--jobs", "1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    lines = [line.split(" (")[0] for line in proc.stderr.splitlines()]
    assert lines == ["reading new wheels: 100/120", "reading new wheels: 120/120"]
