"""Windows, as a build host (``tools.hostplat.base.HostOS``): the win_amd64 runners, where the
host backend builds natively with MSVC. Executables end in ``.exe``, a venv's interpreter is
``Scripts\\python.exe``, a path may use ``\\``, command lines are quoted as
``subprocess.list2cmdline`` does, torch's build runs ``cl`` (no ``c++`` to masquerade as), and
there is no ``/proc``, ``wait4``, session, ``dir_fd`` or ``O_NOFOLLOW``.

The MSVC variables of a Windows cell (:func:`compiler_env`):

- ``DISTUTILS_USE_SDK=1``: setuptools uses the MSVC environment the runner's developer prompt
  set up instead of looking for its own (torch's cpp_extension warns without it).
- torch 2.13's headers need C++20 and MSVC's conformance mode in host code: ``/permissive-
  /std:c++20`` in ``CXXFLAGS``, which reach cl.exe for the ``.cpp`` files only. They must not
  reach the cl.exe that nvcc runs (cudafe++ crashes): a package whose setup.py hard-codes
  ``/std:c++17`` still needs a recipe patch. Both from mjun0812/flash-attention-prebuild-wheels
  (``build_windows.ps1``, ``.github/workflows/_build_windows.yml``), whose workflow builds
  flash-attn on ``windows-2022`` runners.

Every function here runs on Linux too (the tests run both hosts on any machine), except
:func:`physical_memory_available`, which calls kernel32.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tools.plan.table import version_key
from .base import COPY_BYTES, FOLDER, HARDLINK, SYMLINK, TreeMember, file_mode

name = "windows"
markers: Mapping[str, str] = {"sys_platform": "win32", "os_name": "nt",
                              "platform_system": "Windows"}
path_separators = ("/", "\\")
object_suffix = ".obj"
script_launchers = True
execs = False

#: The first torch series whose headers MSVC compiles only as C++20 in conformance mode.
CXX20_FROM = "2.13"
#: The host-only C++ flags for those (see the module docstring): in ``CXXFLAGS``, which
#: setuptools hands to cl.exe for ``.cpp`` files and never to nvcc.
MSVC_CXX20 = "/permissive- /std:c++20"


def exe_name(program: str) -> str:
    """``program.exe``: Windows finds only ``.exe`` files on PATH."""
    return f"{program}.exe"


def venv_python(venv: Path) -> Path:
    """``Scripts\\python.exe`` of the venv."""
    return venv / "Scripts" / "python.exe"


def join_command(args: Sequence[str]) -> str:
    """A Windows command line (``subprocess.list2cmdline``: double quotes around an argument
    with spaces, such as a toolkit under ``C:\\Program Files``)."""
    return subprocess.list2cmdline(args)


def compiler_links(names: tuple[str, ...]) -> tuple[str, ...]:
    """None: torch's Windows build runs MSVC's ``cl``, not ``c++``; only nvcc goes through the
    cache there (``PYTORCH_NVCC``)."""
    return ()


def stand_in_object(path: Path) -> Path | None:
    """MSVC's ``cl /c`` of an empty ``.c`` file beside ``path`` (``stand-in.obj``), which is
    removed after."""
    cc = shutil.which("cl")
    if cc is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    empty = path.with_suffix(".c")
    empty.write_text("")
    try:
        proc = subprocess.run([cc, "/nologo", "/c", str(empty), f"/Fo{path}"],
                              capture_output=True, timeout=120)
    finally:
        empty.unlink(missing_ok=True)
    return path if proc.returncode == 0 and path.is_file() else None


def kill_tree(proc: subprocess.Popen) -> None:
    """``taskkill /T /F`` of ``proc`` and every process it started; ``proc`` alone when
    taskkill can't."""
    try:
        done = subprocess.run(["taskkill", "/T", "/F", "/PID", str(proc.pid)],
                              capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        done = False
    if not done and proc.poll() is None:
        proc.kill()


def measure(command: str, *, cwd: Path, env: dict[str, str], log: Path, timeout: float,
            sample: float) -> tuple[int, float, int, int]:
    """The command line under ``cmd.exe`` (``shell=True``), polled every ``sample`` seconds;
    memory is not measured (both peaks 0): there is no /proc, wait4 or session."""
    start = time.monotonic()
    with log.open("w") as fh:
        fh.write(f"$ cd {cwd} && {command}\n")
        fh.flush()
        proc = subprocess.Popen(command, shell=True, cwd=cwd, env=env, stdout=fh,
                                stderr=subprocess.STDOUT)
    deadline, killed = start + timeout, False
    try:
        while proc.poll() is None:
            if not killed and time.monotonic() > deadline:
                kill_tree(proc)
                killed = True
            time.sleep(sample)
    except BaseException:
        # stopping the shard must stop the compiler it started
        kill_tree(proc)
        proc.wait()
        raise
    return -9 if killed else proc.returncode, time.monotonic() - start, 0, 0


def write_tree(tar: tarfile.TarFile, entries: Sequence[TreeMember], dest: Path) -> None:
    """Each member by its path under ``dest`` (no ``dir_fd``, no ``O_NOFOLLOW``), in Linux's
    order (files, folders and hard links, then symbolic links, then the folders' times). No
    write can go through a link all the same: ``dest`` was made empty, the plan refused every
    member below a link and every link leaving the tree, and links are made after every other
    write."""
    for entry in entries:
        if entry.kind == SYMLINK:
            continue
        target = dest.joinpath(*entry.parts)
        if entry.kind == FOLDER:
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.kind == HARDLINK:
            os.link(dest.joinpath(*entry.source), target)
            continue
        with open(target, "xb") as out, tar.extractfile(entry.member) as data:
            shutil.copyfileobj(data, out, COPY_BYTES)
        os.chmod(target, file_mode(entry.member.mode))  # Windows keeps only the read-only bit
        os.utime(target, (entry.member.mtime, entry.member.mtime))
    for entry in entries:
        if entry.kind == SYMLINK:
            target = dest.joinpath(*entry.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            linkname = entry.member.linkname.replace("/", os.sep)
            os.symlink(linkname, target,
                       target_is_directory=(target.parent / linkname).is_dir())
    for entry in reversed(entries):
        if entry.kind == FOLDER:
            os.utime(dest.joinpath(*entry.parts), (entry.member.mtime, entry.member.mtime))


def physical_memory_available() -> int:
    """Bytes of physical memory available now, as ``GlobalMemoryStatusEx`` says
    (``ullAvailPhys``); only on Windows."""
    class MemoryStatusEx(ctypes.Structure):
        _fields_ = [("dwLength", ctypes.c_uint32), ("dwMemoryLoad", ctypes.c_uint32),
                    *((field, ctypes.c_uint64) for field in (
                        "ullTotalPhys", "ullAvailPhys", "ullTotalPageFile", "ullAvailPageFile",
                        "ullTotalVirtual", "ullAvailVirtual", "ullAvailExtendedVirtual"))]

    status = MemoryStatusEx()
    status.dwLength = ctypes.sizeof(MemoryStatusEx)
    if not ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
        raise ctypes.WinError()  # type: ignore[attr-defined]
    return status.ullAvailPhys


def available_memory(meminfo: Path, cgroup: Path) -> int:
    """The available physical memory (:func:`physical_memory_available`): Windows has no
    ``meminfo``, no cgroup and no ``os.sysconf``."""
    return physical_memory_available()


def compiler_env(torch: str, env: Mapping[str, str]) -> dict[str, str]:
    """The MSVC variables (see the module docstring): ``DISTUTILS_USE_SDK=1`` and, from torch
    :data:`CXX20_FROM`, :data:`MSVC_CXX20` in ``CXXFLAGS``. Flags ``env`` already has in
    ``CXXFLAGS`` (a recipe's) are kept and come after ours, so that where they differ (a
    ``/std:``) they win, as cl.exe lets the last one win; ours are not repeated when they are
    all there already."""
    out = {"DISTUTILS_USE_SDK": "1"}
    if version_key(torch) >= version_key(CXX20_FROM):
        own = env.get("CXXFLAGS", "").split()
        if not set(MSVC_CXX20.split()) <= set(own):
            out["CXXFLAGS"] = " ".join([MSVC_CXX20, *own])
    return out
