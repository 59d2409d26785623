"""Run a command bounded in time and memory, and measure it: the runner of the hostile suites.

    from bounded import run_bounded
    run = run_bounded([sys.executable, "-m", "tools.index", ...], seconds=60, address_space=4 << 30)
    assert run.returncode == 11 and run.peak_rss_mib < 200, run

The command runs in a process group of its own under an address-space limit (``RLIMIT_AS``, set
in the child before it executes, so a read without a bound fails there instead of swapping the
machine), with stdin from ``/dev/null`` and its output in temporary files (a pipe nobody reads
while the command runs would fill and block it). It is polled with ``os.wait4`` until it ends or
``seconds`` pass; past them its whole process group is killed. ``wait4``'s resource usage gives
its peak resident memory, that of any child it waited for included.

The command is started by a small launcher (``LAUNCHER``, a fresh interpreter) rather than
forked from the test process: Linux counts the forking process's resident pages to the child's
peak until it executes (exec keeps the old memory's high-water mark), so a command forked from a
pytest worker grown to 218 MiB by earlier test files would measure 218 MiB whatever it did. The
launcher sets the limit, runs the command, and writes the peak ``wait4`` gives it to a file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools import ROOT

#: Seconds between two looks at whether the command has ended.
POLL_S = 0.01
#: Run as ``python -c LAUNCHER LIMIT REPORT CMD...``: the address-space limit, then the command
#: as its child, its peak resident KiB written to REPORT, its exit status (or signal) passed on.
LAUNCHER = """
import os, resource, signal, sys
limit, report, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
pid = os.fork()
if pid == 0:
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        sys.stderr.write(f"{cmd[0]}: {exc}\\n")
        sys.stderr.flush()
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(report, "w") as f:
    f.write(str(usage.ru_maxrss))
code = os.waitstatus_to_exitcode(status)
if code < 0:
    if -code not in (signal.SIGKILL, signal.SIGSTOP):  # their handlers can't be set, nor need be
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


@dataclass(frozen=True)
class Run:
    """How one bounded run ended: its exit status (negative: the signal that ended it, -9 when
    it ran past its seconds), its output decoded as UTF-8 (undecodable bytes replaced), its wall
    seconds and its peak resident memory in MiB."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss_mib: float


def run_bounded(cmd: Sequence[str], *, seconds: float, address_space: int,
                env: Mapping[str, str] | None = None, cwd: Path = ROOT) -> Run:
    """Run ``cmd`` in ``cwd`` with ``env`` (None: this process's environment) under
    ``address_space`` bytes of address space, kill its process group once it has run
    ``seconds``, and say how it ended (:class:`Run`)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(mode="r") as report:
        start = time.monotonic()
        # A session of its own: killing its process group also ends whatever it started.
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(address_space), report.name, *cmd],
                                cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        while not pid and time.monotonic() - start < seconds:
            time.sleep(POLL_S)
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if not pid:
            os.killpg(proc.pid, signal.SIGKILL)
            _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.monotonic() - start
        # Reaped by wait4 above: with its return code set, Popen never waits for it again.
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        # The launcher's measure; killed past its seconds it wrote none, and the launcher's
        # own (an upper bound) stands in.
        peak_kib = int(report.read() or usage.ru_maxrss)
        return Run(proc.returncode, out.read().decode("utf-8", "replace"),
                   err.read().decode("utf-8", "replace"), elapsed, peak_kib / 1024)
