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
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools import ROOT

#: Seconds between two looks at whether the command has ended.
POLL_S = 0.01


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
    def bound() -> None:
        # In the child between fork and exec: a group of its own, so that killing the group
        # also ends whatever it started, and the limit the command then inherits.
        os.setpgid(0, 0)
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=err, preexec_fn=bound)
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
        return Run(proc.returncode, out.read().decode("utf-8", "replace"),
                   err.read().decode("utf-8", "replace"), elapsed, usage.ru_maxrss / 1024)
