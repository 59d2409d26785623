"""Build environment: the recipe's variables, the arch list, job sizing, reproducibility.

``MAX_JOBS`` and ``NVCC_THREADS`` are sized from the cores and the memory actually available
(including a container's cgroup limit) and the recipe's per-job memory estimate, so a build is
not OOM-killed (exit 137) yet doesn't crawl at one job when the machine can take more.

Every backend's build variables come from :func:`build_env`, so a cell gets the compiler
variables of the OS it builds on (``tools.hostplat``: a Windows (``win_amd64``) cell MSVC's, on the
Windows runner's host backend; a Linux cell none).
"""

from __future__ import annotations

import os
from pathlib import Path

from tools.hostplat import HostOS, current, for_platform
from tools.plan.cells import Cell
from tools.plan.recipes.model import Recipe
# The sizing arithmetic is the plan's: it sizes the jobs of the runner a release is planned for
# with the same rule a build sizes its own machine (re-exported here for the build steps).
from tools.plan.sizing import MEMORY_HEADROOM, Sizing, size_jobs  # noqa: F401

#: 2019-12-31T00:00:00Z: a fixed timestamp so that two builds of a cell give identical wheels.
DEFAULT_SOURCE_DATE_EPOCH = 1577750400


def available_memory_gib(meminfo: Path = Path("/proc/meminfo"),
                         cgroup: Path = Path("/sys/fs/cgroup/memory.max"), *,
                         host: HostOS = current()) -> float:
    """The memory a build may use now, in GiB, as ``host`` (default: this machine's) reads it:
    on Linux MemAvailable, capped by a cgroup v2 memory limit when one is set (containers); on
    Windows the available physical memory."""
    return host.available_memory(meminfo, cgroup) / 2**30


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


def build_env(recipe: Recipe, cell: Cell, sizing: Sizing, *, archs: tuple[str, ...],
              cuda_home: str | None, source_date_epoch: int = DEFAULT_SOURCE_DATE_EPOCH
              ) -> dict[str, str]:
    """The variables a cell's build sets (on top of the inherited environment).

    The arch list goes both to TORCH_CUDA_ARCH_LIST (torch's cpp_extension reads it when the
    package adds no -gencode flags of its own; without it, a GPU-less builder compiles torch's
    whole default list) and to the package's own variable when it has one. The compiler
    variables of the OS the cell builds on come last (``HostOS.compiler_env``: a Windows cell
    MSVC's, a Linux cell none).
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
    env.update(for_platform(cell.platform).compiler_env(cell.torch, env))
    return env
