"""Build environment: the recipe's variables, the arch list, job sizing, reproducibility.

``MAX_JOBS`` and ``NVCC_THREADS`` are sized from the cores and the memory actually available
(including a container's cgroup limit) and the recipe's per-job memory estimate, so a build is
not OOM-killed (exit 137) yet doesn't crawl at one job when the machine can take more.

Every backend's build variables come from :func:`build_env`, so a Windows (``win_amd64``) cell
gets its MSVC variables on the backend that builds it (the Windows runner's host backend):

- ``DISTUTILS_USE_SDK=1``: setuptools uses the MSVC environment the runner's developer prompt
  set up instead of looking for its own (torch's cpp_extension warns without it).
- torch 2.13's headers need C++20 and MSVC's conformance mode in host code: ``/permissive-
  /std:c++20`` in ``CXXFLAGS``, which reach cl.exe for the ``.cpp`` files only. They must not
  reach the cl.exe that nvcc runs (cudafe++ crashes): a package whose setup.py hard-codes
  ``/std:c++17`` still needs a recipe patch. Both from mjun0812/flash-attention-prebuild-wheels
  (``build_windows.ps1``, ``.github/workflows/_build_windows.yml``), whose workflow builds
  flash-attn on ``windows-2022`` runners.

A Linux cell gets neither.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from tools.core.hostos import WINDOWS
from tools.core.platforms import PLATFORMS
from tools.plan.cells import Cell
from tools.plan.recipes.model import Recipe
from tools.plan.table import version_key
# The sizing arithmetic is the plan's: it sizes the jobs of the runner a release is planned for
# with the same rule a build sizes its own machine (re-exported here for the build steps).
from tools.plan.sizing import MEMORY_HEADROOM, Sizing, size_jobs  # noqa: F401

#: 2019-12-31T00:00:00Z: a fixed timestamp so that two builds of a cell give identical wheels.
DEFAULT_SOURCE_DATE_EPOCH = 1577750400
#: The first torch series whose headers MSVC compiles only as C++20 in conformance mode.
CXX20_FROM = "2.13"
#: The host-only C++ flags for those (see the module docstring): in ``CXXFLAGS``, which
#: setuptools hands to cl.exe for ``.cpp`` files and never to nvcc.
MSVC_CXX20 = "/permissive- /std:c++20"


def windows_available_memory() -> int:
    """Bytes of physical memory available now, as Windows' ``GlobalMemoryStatusEx`` says
    (``ullAvailPhys``); only on Windows."""
    class MemoryStatusEx(ctypes.Structure):
        _fields_ = [("dwLength", ctypes.c_uint32), ("dwMemoryLoad", ctypes.c_uint32),
                    *((name, ctypes.c_uint64) for name in (
                        "ullTotalPhys", "ullAvailPhys", "ullTotalPageFile", "ullAvailPageFile",
                        "ullTotalVirtual", "ullAvailVirtual", "ullAvailExtendedVirtual"))]

    status = MemoryStatusEx()
    status.dwLength = ctypes.sizeof(MemoryStatusEx)
    if not ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
        raise ctypes.WinError()  # type: ignore[attr-defined]
    return status.ullAvailPhys


def available_memory_gib(meminfo: Path = Path("/proc/meminfo"),
                         cgroup: Path = Path("/sys/fs/cgroup/memory.max"), *,
                         windows: bool = WINDOWS) -> float:
    """MemAvailable, capped by a cgroup v2 memory limit when one is set (containers); on
    Windows (``windows``, default: this machine's) the available physical memory
    (:func:`windows_available_memory`)."""
    if windows:
        return windows_available_memory() / 2**30
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
    return avail / 2**30


def usable_cores() -> int:
    """Cores this process may run on (respects taskset/cgroup cpusets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def size_for(recipe: Recipe, archs: tuple[str, ...], *, cores: int,
             available_gib: float) -> Sizing:
    """size_jobs with a recipe's memory figures and the arch list actually compiled."""
    return size_jobs(cores=cores, available_gib=available_gib,
                     job_memory_gib=recipe.build.job_memory_gib,
                     nvcc_threads=recipe.build.nvcc_threads,
                     fixed_threads=recipe.build.nvcc_threads_fixed, archs=len(archs))


def format_archs(archs: tuple[str, ...], style: str) -> str:
    """``("80", "90a")`` as ``80;90a`` (plain) or ``8.0;9.0a`` (TORCH_CUDA_ARCH_LIST)."""
    if style == "plain":
        return ";".join(archs)
    out = []
    for arch in archs:
        digits = arch.rstrip("af")
        out.append(f"{digits[:-1]}.{digits[-1]}{arch[len(digits):]}")
    return ";".join(out)


def windows_cell(cell: Cell) -> bool:
    """Whether ``cell`` builds for Windows (``win_amd64``), with MSVC."""
    platform = PLATFORMS.get(cell.platform)
    return platform is not None and platform.os == "windows"


def msvc_env(cell: Cell, env: dict[str, str]) -> dict[str, str]:
    """The MSVC variables of a Windows cell whose other variables are ``env`` (see the module
    docstring): ``DISTUTILS_USE_SDK=1`` and, from torch :data:`CXX20_FROM`,
    :data:`MSVC_CXX20` in ``CXXFLAGS``. Flags ``env`` already has in ``CXXFLAGS`` (a recipe's)
    are kept and come after ours, so that where they differ (a ``/std:``) they win, as cl.exe
    lets the last one win; ours are not repeated when they are all there already."""
    out = {"DISTUTILS_USE_SDK": "1"}
    if version_key(cell.torch) >= version_key(CXX20_FROM):
        own = env.get("CXXFLAGS", "").split()
        if not set(MSVC_CXX20.split()) <= set(own):
            out["CXXFLAGS"] = " ".join([MSVC_CXX20, *own])
    return out


def build_env(recipe: Recipe, cell: Cell, sizing: Sizing, *, archs: tuple[str, ...],
              cuda_home: str | None, source_date_epoch: int = DEFAULT_SOURCE_DATE_EPOCH
              ) -> dict[str, str]:
    """The variables a cell's build sets (on top of the inherited environment).

    The arch list goes both to TORCH_CUDA_ARCH_LIST (torch's cpp_extension reads it when the
    package adds no -gencode flags of its own; without it, a GPU-less builder compiles torch's
    whole default list) and to the package's own variable when it has one. A Windows cell
    gets the MSVC variables of :func:`msvc_env` too; a Linux cell none of them.
    """
    env = {v.name: v.value for v in recipe.env}
    env["TORCH_CUDA_ARCH_LIST"] = format_archs(archs, "torch")
    env[recipe.arch_env.name] = format_archs(archs, recipe.arch_env.style)
    env["MAX_JOBS"] = str(sizing.max_jobs)
    if recipe.build.nvcc_threads is not None and not recipe.build.nvcc_threads_fixed:
        env["NVCC_THREADS"] = str(sizing.nvcc_threads)
    env["SOURCE_DATE_EPOCH"] = str(source_date_epoch)
    if cuda_home:
        env["CUDA_HOME"] = cuda_home
    if windows_cell(cell):
        env.update(msvc_env(cell, env))
    return env
