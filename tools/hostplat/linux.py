"""Linux, as a build host (``tools.hostplat.base.HostOS``): the manylinux containers and the
Linux runners. Executables have no suffix, a venv's interpreter is ``bin/python``, command lines
are POSIX shell words, a compiler cache masquerades as ``c++``, and a unit's process tree is a
session whose memory is read from ``/proc``.

What needs POSIX (``O_NOFOLLOW``, ``wait4``, ``killpg``, ``sysconf``) is read when called, never at
import: Windows imports this module too (``tools.hostplat`` lists every host).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .base import COPY_BYTES, FOLDER, HARDLINK, SYMLINK, TreeMember, file_mode

name = "linux"
markers: Mapping[str, str] = {"sys_platform": "linux", "os_name": "posix",
                              "platform_system": "Linux"}
path_separators = ("/",)
object_suffix = ".o"
script_launchers = False
execs = True


def exe_name(program: str) -> str:
    """``program`` itself: Linux executables have no suffix."""
    return program


def venv_python(venv: Path) -> Path:
    """``bin/python`` of the venv."""
    return venv / "bin" / "python"


def join_command(args: Sequence[str]) -> str:
    """A POSIX shell command line (``shlex.join``)."""
    return shlex.join(args)


def compiler_links(names: tuple[str, ...]) -> tuple[str, ...]:
    """Every one of ``names``: torch's ninja rules run ``c++``, which the link sends through
    ccache."""
    return names


def stand_in_object(path: Path) -> Path | None:
    """``cc -c -x c /dev/null -o path`` (``gcc`` when there is no ``cc``)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([cc, "-c", "-x", "c", "/dev/null", "-o", str(path)],
                          capture_output=True, timeout=120)
    return path if proc.returncode == 0 else None


def _tree_rss(session: int, page: int) -> int:
    """Summed RSS (bytes) of every live process in ``session``."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        # after "pid (comm)": state ppid pgrp session ... rss is field 24 of stat overall
        if int(fields[3]) == session:
            total += int(fields[21]) * page
    return total


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL to the session ``proc`` leads (:func:`measure` starts it in its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def measure(command: str, *, cwd: Path, env: dict[str, str], log: Path, timeout: float,
            sample: float) -> tuple[int, float, int, int]:
    """The command line under ``/bin/sh`` in its own session. The tree's peak is the summed RSS
    of the session's processes every ``sample`` seconds; the single peak is wait4's largest
    max RSS, which covers every descendant that was waited for (Linux counts the spawning
    process's resident pages to a child until it execs, so this process's own size is a floor
    of it)."""
    page = os.sysconf("SC_PAGE_SIZE")
    start = time.monotonic()
    with log.open("w") as fh:
        fh.write(f"$ cd {cwd} && {command}\n")
        fh.flush()
        proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=cwd, env=env, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
    peak, deadline = 0, start + timeout
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, _tree_rss(proc.pid, page))
            if time.monotonic() > deadline:
                kill_tree(proc)
            time.sleep(sample)
    except BaseException:
        # The compiler runs in its own session: stopping the probe must stop it too.
        kill_tree(proc)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(proc.pid, 0)
        proc.returncode = -9
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
    seconds = time.monotonic() - start
    single = usage.ru_maxrss * 1024  # KiB on Linux
    return proc.returncode, seconds, max(peak, single), single


def _dir_flags() -> int:
    """How each folder is opened (read when called: Windows' os has none of these flags)."""
    return os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _folder(root: int, parts: tuple[str, ...]) -> int:
    """A descriptor of the folder ``parts`` below ``root``, made where missing; no part is
    followed if it is a link."""
    fd = os.dup(root)
    try:
        for part in parts:
            try:
                below = os.open(part, _dir_flags(), dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, 0o777, dir_fd=fd)
                below = os.open(part, _dir_flags(), dir_fd=fd)
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write(tar: tarfile.TarFile, entries: Sequence[TreeMember], root: int) -> None:
    """Write the members below the folder ``root``: files, folders and hard links in archive
    order, then symbolic links, then the folders' times."""
    for entry in entries:
        if entry.kind == SYMLINK:
            continue
        member = entry.member
        if entry.kind == FOLDER:
            os.close(_folder(root, entry.parts))
            continue
        parent = _folder(root, entry.parts[:-1])
        try:
            if entry.kind == HARDLINK:
                src_dir = _folder(root, entry.source[:-1])
                try:
                    os.link(entry.source[-1], entry.parts[-1], src_dir_fd=src_dir,
                            dst_dir_fd=parent, follow_symlinks=False)
                finally:
                    os.close(src_dir)
                continue
            fd = os.open(entry.parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                         os.O_CLOEXEC, 0o600, dir_fd=parent)
            with os.fdopen(fd, "wb") as out, tar.extractfile(member) as data:
                while chunk := data.read(COPY_BYTES):
                    out.write(chunk)
                out.flush()  # a write after the time is set would set it again
                os.fchmod(out.fileno(), file_mode(member.mode))
                os.utime(out.fileno(), (member.mtime, member.mtime))
        finally:
            os.close(parent)
    for entry in entries:
        if entry.kind == SYMLINK:
            parent = _folder(root, entry.parts[:-1])
            try:
                os.symlink(entry.member.linkname, entry.parts[-1], dir_fd=parent)
            finally:
                os.close(parent)
    for entry in reversed(entries):
        if entry.kind == FOLDER:
            parent = _folder(root, entry.parts[:-1])
            try:
                os.utime(entry.parts[-1], (entry.member.mtime, entry.member.mtime),
                         dir_fd=parent, follow_symlinks=False)
            finally:
                os.close(parent)


def write_tree(tar: tarfile.TarFile, entries: Sequence[TreeMember], dest: Path) -> None:
    """Every folder opened below the one before with ``O_NOFOLLOW`` (``dir_fd``), every file
    created with ``O_EXCL``, symbolic links made last: no write can follow a link."""
    root = os.open(dest, _dir_flags())
    try:
        _write(tar, entries, root)
    finally:
        os.close(root)


def available_memory(meminfo: Path, cgroup: Path) -> int:
    """MemAvailable of ``meminfo`` (``sysconf``'s available pages without it), capped by a
    cgroup v2 memory limit when ``cgroup`` sets one (containers)."""
    avail = None
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    if avail is None:
        avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    try:
        limit = cgroup.read_text().strip()
        if limit != "max":
            avail = min(avail, int(limit))
    except (OSError, ValueError):
        pass
    return avail


def compiler_env(torch: str, env: Mapping[str, str]) -> dict[str, str]:
    """None: a Linux cell's compilers (gcc, nvcc) need no variables of their own."""
    return {}
