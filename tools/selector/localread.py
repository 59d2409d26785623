"""What the selector reads from this machine, each read bounded in size and time.

Detection and the doctor read files a user's environment holds (torch's ``version.py`` and
``libc10.so``, ``/proc/driver/nvidia/version``, an error log) and the output of programs on PATH
(``nvidia-smi``, a probe in a subprocess). Any of them may be something else than it seems: a
FIFO nobody writes (opening or reading it waits forever), a device (``/dev/zero`` never ends), a
file of gigabytes, a program that prints without end or never exits. So:

* a file is read only if it is a regular file (tools.core.regularfile: opened with
  ``O_NONBLOCK``, checked with ``fstat`` on the open descriptor), and at most a cap of bytes;
* a program's output is read while it runs, at most a cap of bytes per stream (past it the
  program is killed), and the program is killed at its timeout.

Each function says why it read nothing (or not all) in words a note can carry; none raises for a
file or program that misbehaves. Only the standard library, in Python 3.8's dialect: this module
ships in the selector's zipapp.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tools.core import regularfile

#: The most bytes of torch's version.py read (a real one is under 1 KB).
VERSION_PY_LIMIT = 1 << 20
#: The most bytes of a /proc file read (the driver's version is one line).
PROC_LIMIT = 64 << 10
#: The most bytes of libc10.so scanned for its C++ ABI (a real one is 1 to 2 MB).
LIBRARY_LIMIT = 256 << 20
#: The most bytes of a distribution's METADATA read (torch's is a few KB).
METADATA_LIMIT = 1 << 20
#: The most bytes of a distribution's RECORD read (one line a file: torch's is about 2 MB).
RECORD_LIMIT = 64 << 20
#: The most bytes a probe may print on each of stdout and stderr (nvidia-smi prints a line a GPU).
OUTPUT_LIMIT = 1 << 20
#: The size of one read of a file scan or a program's output.
_CHUNK = 1 << 16
_POSIX = os.name == "posix"


def _size_words(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"


def read_text(path: Path, limit: int) -> tuple[str | None, str]:
    """(text, "") of the regular file ``path`` (UTF-8, undecodable bytes replaced), or (None,
    why) when it is missing, not a regular file, or over ``limit`` bytes."""
    try:
        data = regularfile.read_regular(path, limit)
    except regularfile.NotRegularFile as exc:
        return None, f"{path} is {exc.kind}, not a regular file"
    except regularfile.FileTooLarge:
        return None, f"{path} is larger than {_size_words(limit)}, the most read of it"
    except OSError as exc:
        return None, f"{path} can't be read ({exc.strerror or exc})"
    return data.decode("utf-8", "replace"), ""


def read_tail(path: Path, limit: int) -> tuple[str | None, str]:
    """(text, note) of the regular file ``path``: all of it, or its last ``limit`` bytes when it
    is larger (the note then says so: the end of a log is where its error is); (None, why) when
    it is missing or not a regular file."""
    try:
        with regularfile.open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                f.seek(size - limit)
            data = f.read(limit)
    except regularfile.NotRegularFile as exc:
        return None, f"{path} is {exc.kind}, not a regular file"
    except OSError as exc:
        return None, f"{path} can't be read ({exc.strerror or exc})"
    note = f"read the last {_size_words(limit)} of {path} ({size} bytes)" if size > limit else ""
    return data.decode("utf-8", "replace"), note


def contains(path: Path, needle: bytes, limit: int) -> tuple[bool | None, int, str]:
    """(whether ``needle`` is in the regular file ``path``, bytes scanned, why not known): the
    file is read a chunk at a time, at most ``limit`` bytes (memory stays at two chunks); None
    with why when it can't be read, or ``needle`` isn't in its first ``limit`` bytes of more."""
    scanned, tail = 0, b""
    try:
        with regularfile.open_regular(path) as f:
            while scanned < limit:
                chunk = f.read(min(_CHUNK, limit - scanned))
                if not chunk:
                    return False, scanned, ""
                scanned += len(chunk)
                if needle in tail + chunk:
                    return True, scanned, ""
                tail = chunk[-(len(needle) - 1):] if len(needle) > 1 else b""
            if not f.read(1):
                return False, scanned, ""
    except regularfile.NotRegularFile as exc:
        return None, scanned, f"{path} is {exc.kind}, not a regular file"
    except OSError as exc:
        return None, scanned, f"{path} can't be read ({exc.strerror or exc})"
    return None, scanned, f"{path} is larger than {_size_words(limit)}, the most scanned of it"


def dist_text(dist: Any, name: str, limit: int = METADATA_LIMIT) -> tuple[str | None, str]:
    """(text, "") of the file ``name`` of an installed distribution's metadata directory
    (``METADATA``, ``RECORD``, ``cuwheels.json``...), read as :func:`read_text` reads; (None,
    why) when it is missing or can't be read. A distribution importlib.metadata didn't find in a
    directory (another finder's) is asked for the file itself."""
    where = getattr(dist, "_path", None)  # importlib.metadata.PathDistribution's directory
    if where is None:
        text = dist.read_text(name)
        return text, "" if text is not None else f"the distribution has no {name}"
    return read_text(Path(str(where)) / name, limit)


def dist_headers(dist: Any) -> tuple[dict[str, str], str]:
    """(headers, "") of an installed distribution's METADATA (or an egg's PKG-INFO), keys
    lowercased, the first of each kept; ({}, why) when neither can be read."""
    first_why = ""
    for name in ("METADATA", "PKG-INFO"):
        text, why = dist_text(dist, name)
        if text is None:
            first_why = first_why or why  # METADATA's reason is the one to give
            continue
        headers: dict[str, str] = {}
        for line in text.splitlines():
            if not line.strip():
                break  # the headers end at the first blank line
            key, sep, value = line.partition(":")
            if sep and not key.startswith((" ", "\t")):
                headers.setdefault(key.strip().lower(), value.strip())
        return headers, ""
    return {}, first_why


def dist_version(dist: Any) -> tuple[str | None, str]:
    """(version, "") of an installed distribution (:func:`dist_headers`); (None, why) when its
    metadata can't be read or names no version."""
    headers, why = dist_headers(dist)
    if headers.get("version"):
        return headers["version"], ""
    return None, why or "its METADATA names no Version"


@dataclass
class Output:
    """How a program ran: its exit status (None: killed), its output (decoded, undecodable
    bytes replaced) and ``problem``, why it was stopped ("" when it ended by itself)."""

    returncode: int | None
    stdout: str
    stderr: str
    problem: str = ""


class _Drain(threading.Thread):
    """Reads one pipe of a program into memory, at most ``limit`` bytes; past them it stops
    reading and kills the program (whose writes then fail instead of filling memory)."""

    def __init__(self, pipe: IO[bytes], limit: int, proc: subprocess.Popen):
        super().__init__(daemon=True)
        self.pipe, self.limit, self.proc = pipe, limit, proc
        self.chunks: list[bytes] = []
        self.size = 0
        self.over = False

    def run(self) -> None:
        try:
            while True:
                chunk = self.pipe.read1(_CHUNK) if hasattr(self.pipe, "read1") else self.pipe.read(_CHUNK)
                if not chunk:
                    return
                keep = chunk[:self.limit - self.size]
                self.chunks.append(keep)
                self.size += len(keep)
                if len(keep) < len(chunk):
                    self.over = True
                    _kill(self.proc)
                    return
        except (OSError, ValueError):
            return

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", "replace")


def _kill(proc: subprocess.Popen) -> None:
    """Kill the program and, on POSIX, what it started (its own session: a pipeline in a script
    would go on writing to the pipe after the script itself is gone)."""
    try:
        if _POSIX:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except OSError:
        pass


def run_capped(cmd: list[str], *, timeout: float, limit: int = OUTPUT_LIMIT) -> Output | None:
    """Run ``cmd`` (stdin from the null device), reading at most ``limit`` bytes of each of its
    stdout and stderr and waiting at most ``timeout`` seconds: past either it is killed and
    ``problem`` says which. None when it can't be started."""
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=_POSIX)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    drains = [_Drain(proc.stdout, limit, proc), _Drain(proc.stderr, limit, proc)]  # type: ignore[arg-type]
    for d in drains:
        d.start()
    problem = ""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        problem = f"{os.path.basename(cmd[0])} gave no complete answer within {timeout:g} s"
        proc.wait()
    for d in drains:
        # A child it started may hold the pipe open: the output read so far is what counts.
        d.join(timeout=2 if not _POSIX else 0.5)
        if d.is_alive():
            _kill(proc)
            d.join(timeout=2)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None and not any(d.is_alive() for d in drains):
            pipe.close()
    if any(d.over for d in drains):
        problem = f"{os.path.basename(cmd[0])} printed more than {_size_words(limit)}, the most read of it"
    return Output(None if problem else proc.returncode, drains[0].text(), drains[1].text(), problem)
