"""Build one planned cell: choose a backend, find or build the wheels it needs, run it.

What ``python -m tools.build CELL_ID`` (and ``nox -s build-<cell id>``) runs, with the cell
planned once by the command and handed down (``tools.builder.planned``): the cells it needs come
from the same plan. The backends are peers called the same way (``tools.backends.base.Backend``):
``tools.backends.host.HostBackend`` (this machine's toolchain) and
``tools.backends.containerized.ContainerBackend`` (cibuildwheel in the cell's manylinux image);
``auto`` takes the container only when an engine can start a container from the cell's image,
here or pulled (``tools.backends.engine.readiness``), and otherwise says why it fell back to the
host. Every step is timed and reported by the backend; the wheel reaches ``wheelhouse/`` only
after every check passed, and the build report (JSON) says what each check found. A failure
names the step, explains itself and exits non-zero.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tools import ROOT
from tools.backends.base import Backend, BuildOptions, BuildResult
from tools.backends.containerized import ContainerBackend
from tools.backends.engine import ReadinessCheck, first_ready, readiness
from tools.backends.host import HostBackend
from tools.core.errors import ToolchainError
from tools.core.variant import group_id
from tools.kernels.check import GpuFinder, find_gpu
from tools.pipeline.report import Progress
from tools.pipeline.shardcache import candidates
from tools.plan.cells import Cell
from tools.plan.table import Table, arch_key
from .needs import provide
from .planned import Planned

DEFAULT_OUT = ROOT / "wheelhouse"
DEFAULT_WORK = ROOT / "build-cells"


def resolve_archs(cell: Cell, override: str | None, table: Table) -> tuple[str, ...]:
    """The cell's arch list, or ``--archs`` (``90`` or ``80,90``) checked against the toolkit."""
    if not override:
        return cell.archs
    archs = tuple(sorted({a.strip().removeprefix("sm_") for a in override.replace(";", ",")
                          .split(",") if a.strip()}, key=arch_key))
    entry = table.cuda[cell.cuda]
    bad = entry.uncompilable(archs)
    if bad:
        raise ToolchainError(f"--archs {override}: CUDA {cell.cuda} cannot compile "
                             f"{', '.join('sm_' + b for b in bad)}",
                             hint=f"CUDA {cell.cuda} compiles {', '.join(entry.archs)}")
    # A recipe that lists 90a (or 100f) needs that target's arch-specific instructions: built
    # for plain sm_90, CUTLASS's SM90 kernels compile to empty bodies and return garbage without
    # an error (xformers' fp8 2:4 GEMM returned 3.35e38 on an H100 when built with --archs 90).
    featured = {a.rstrip("af"): a for a in cell.archs if a[-1:] in ("a", "f")}
    dropped = [a for a in archs if a in featured and a not in cell.archs]
    if dropped:
        wanted = [featured[a] for a in dropped]
        raise ToolchainError(
            f"--archs {override}: the cell {cell.id} is built for "
            f"{', '.join('sm_' + a for a in wanted)}, and "
            f"{', '.join('sm_' + a for a in dropped)} lacks the arch-specific instructions "
            f"its kernels are written for (they would compile to nothing and compute garbage)",
            hint="name the arch as the recipe does: --archs "
                 + ",".join(featured.get(a, a) for a in archs))
    return archs


def choose_backend(requested: str, engine: str | None, image: str,
                   can_build: ReadinessCheck = readiness) -> tuple[str, str, str | None]:
    """Resolve ``auto``: container when an engine can build from ``image``, otherwise host.
    Returns (backend, why, the engine that can build or None)."""
    if requested != "auto":
        return requested, f"--backend {requested}", engine
    found, reasons = first_ready(engine, image, can_build)
    if found:
        return "container", f"auto: {found.engine}: {found.why}", found.engine
    return "host", ("auto: no container engine can build from " + image + " here (" +
                    "; ".join(reasons) + "), using host"), None


def build_cell(cell: Cell, planned: Planned, *, backend: str = "auto",
               archs: str | None = None, sdist: Path | None = None,
               sdist_dir: Path | None = None, wheelhouse: Path | None = None,
               offline: bool = False, torch_index: str | None = None,
               out_dir: Path = DEFAULT_OUT, work_root: Path = DEFAULT_WORK,
               engine: str | None = None, dry_run: bool = False, memory_gib: int | None = None,
               cpus: int | None = None, image: str | None = None, stream=None,
               can_build: ReadinessCheck = readiness, python: Path | None = None,
               gpu_finder: GpuFinder = find_gpu, cache: bool = True,
               shard_caches: Path | None = None) -> BuildResult:
    """Build ``cell``, a cell of ``planned``, and return what its backend answered (the report
    is also written to ``<work>/<cell id>/report.json``).

    The cells it needs are taken from ``planned`` and their wheels found in ``out_dir`` or
    ``wheelhouse``, else built first the same way (``tools.builder.needs``). ``can_build`` says
    whether an engine can build from an image (for ``auto`` and the container backend);
    ``image`` replaces the table's image for the cell's CUDA. ``python`` builds on the host
    against that existing interpreter's torch. ``gpu_finder`` answers which GPU the kernel
    check may use (``tools.kernels.check.find_gpu``). ``cache``: both backends compile through
    ccache (``tools.pipeline.ccache``; the container mounts the same cache directory).
    ``shard_caches``: a directory of kernel shard caches (``<group>-shard<k>``, written by
    ``python -m tools.shard run``); the build reads its compile group's, read-only.
    Raises the step's CuwheelsError on failure, after writing the report.
    """
    recipe, table = planned.recipe(cell), planned.table
    if python is not None:
        if backend == "container":
            raise ToolchainError("--python builds against an interpreter on this machine; the "
                                 "container backend brings its own",
                                 hint="drop --backend container (--python implies host)")
        backend = "host"
    chosen, why, engine = choose_backend(backend, engine, image or cell.image, can_build)
    if python is not None:
        why = f"--python {python}"
    cell_archs = resolve_archs(cell, archs, table)
    needed: tuple[Path, ...] = ()
    if cell.needs and not dry_run:
        def build_needed(other: Cell, out: Path) -> Path:
            # The same backend, archs and sources as this build; the wheel goes to ``out``,
            # not to the output directory (the needed cell's own build publishes it).
            result = build_cell(
                other, planned, backend=chosen, archs=archs, sdist_dir=sdist_dir,
                wheelhouse=wheelhouse, offline=offline, torch_index=torch_index, out_dir=out,
                work_root=work_root, engine=engine, memory_gib=memory_gib, cpus=cpus,
                image=image, stream=stream, can_build=can_build, python=python,
                gpu_finder=gpu_finder, cache=cache)
            assert result.wheel is not None   # only a dry run builds nothing
            return result.wheel

        needed = provide(cell, planned.needed(cell),
                         search=tuple(d for d in (out_dir, wheelhouse) if d),
                         into=work_root / cell.id / "needs", build=build_needed,
                         say=lambda line: print(f"[{cell.id}] {line}", file=stream or sys.stderr))
    runner: Backend
    if chosen == "container":
        runner = ContainerBackend(engine=engine, image=image, memory_gib=memory_gib, cpus=cpus,
                                  can_build=can_build)
    else:
        runner = HostBackend(wheelhouse=wheelhouse, offline=offline, torch_index=torch_index,
                             python=python, cells=planned.cells, gpu_finder=gpu_finder)
    progress = Progress(cell.id, runner.steps, stream or sys.stderr)
    progress.say(f"backend: {runner.name} ({why})")
    result = runner.build(cell, recipe, table, progress=progress, options=BuildOptions(
        archs=cell_archs, out_dir=out_dir, work_root=work_root, why=why, sdist=sdist,
        sdist_dir=sdist_dir, needed=needed, cache=cache, dry_run=dry_run,
        shard_caches=tuple(candidates(shard_caches, group_id(cell.id)))
        if shard_caches else ()))
    result.report.setdefault("why", why)
    return result
