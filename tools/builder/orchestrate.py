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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from tools import ROOT
from tools.backends.base import Backend, BuildOptions, BuildResult
from tools.backends.containerized import ContainerBackend
from tools.backends.engine import ReadinessCheck, first_ready, readiness
from tools.backends.host import HostBackend
from tools.core.errors import ToolchainError
from tools.kernels.check import GpuFinder, find_gpu
from tools.plan.job import BuildJob, Inputs
from tools.pipeline.report import Progress
from tools.pipeline.shardcache import candidates
from tools.plan.cells import Cell
from tools.plan.groups import cell_group
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


@dataclass(frozen=True)
class ContainerSettings:
    """What only the container backend takes (``tools.backends.containerized.ContainerBackend``)."""

    #: docker or podman (default: the first that can build from the image).
    engine: str | None = None
    #: Replaces the table's image for the cell's CUDA (a local stand-in, a mirror).
    image: str | None = None
    memory_gib: int | None = None
    cpus: int | None = None
    #: Whether an engine can build from an image (for ``auto`` and the container backend).
    can_build: ReadinessCheck = readiness


@dataclass(frozen=True)
class BuildRequest:
    """How to build a cell, as ``python -m tools.build`` (and ``nox -s build-<cell id>``) asks.

    The cells it needs are built by the same request, into their own folder: one object handed
    down, so nothing is re-forwarded (or dropped) by hand."""

    #: ``auto``, ``host`` or ``container`` (``auto``: the container when an engine can build).
    backend: str = "auto"
    #: ``--archs`` (``90`` or ``80,90``), checked against the toolkit; None: the cell's.
    archs: str | None = None
    inputs: Inputs = Inputs()
    #: Where the wheel goes once every check passed.
    out_dir: Path = DEFAULT_OUT
    #: Per-cell work directories: ``<work_root>/<cell id>``.
    work_root: Path = DEFAULT_WORK
    #: Plan only (the container backend prints the cibuildwheel command).
    dry_run: bool = False
    #: Compile through ccache (``tools.pipeline.ccache``; the container mounts the same cache).
    cache: bool = True
    #: A directory of kernel shard caches (``<group>-shard<k>``, from ``python -m tools.shard
    #: run``): the build reads its compile group's, read-only.
    shard_caches: Path | None = None
    container: ContainerSettings = ContainerSettings()
    #: Build on the host against this existing interpreter's torch (implies ``host``).
    python: Path | None = None
    #: Which GPU the kernel check may use (``tools.kernels.check.find_gpu``).
    gpu_finder: GpuFinder = find_gpu
    #: Where progress lines go (default: stderr).
    stream: TextIO | None = None


def build_cell(cell: Cell, planned: Planned, request: BuildRequest = BuildRequest()) -> BuildResult:
    """Build ``cell``, a cell of ``planned``, as ``request`` says, and return what its backend
    answered (the report is also written to ``<work>/<cell id>/report.json``).

    The cells it needs are taken from ``planned`` and their wheels found in the output
    directory or the inputs' wheelhouse, else built first by the same request
    (``tools.builder.needs``). Raises the step's CuwheelsError on failure, after writing the
    report.
    """
    recipe, table, inputs = planned.recipe(cell), planned.table, request.inputs
    backend, settings = request.backend, request.container
    if request.python is not None:
        if backend == "container":
            raise ToolchainError("--interpreter builds against an interpreter on this machine; the "
                                 "container backend brings its own",
                                 hint="drop --backend container (--interpreter implies host)")
        backend = "host"
    chosen, why, engine = choose_backend(backend, settings.engine,
                                         settings.image or cell.image, settings.can_build)
    if request.python is not None:
        why = f"--interpreter {request.python}"
    cell_archs = resolve_archs(cell, request.archs, table)
    needed: tuple[Path, ...] = ()
    if cell.needs and not request.dry_run:
        def build_needed(other: Cell, out: Path) -> Path:
            # The same request, on the backend and engine chosen here; the wheel goes to
            # ``out``, not to the output directory (the needed cell's own build publishes it).
            result = build_cell(other, planned, replace(
                request, backend=chosen, out_dir=out,
                container=replace(settings, engine=engine)))
            assert result.wheel is not None   # only a dry run builds nothing
            return result.wheel

        needed = provide(cell, planned.needed(cell),
                         search=tuple(d for d in (request.out_dir, inputs.wheelhouse) if d),
                         into=request.work_root / cell.id / "needs", build=build_needed,
                         say=lambda line: print(f"[{cell.id}] {line}",
                                                file=request.stream or sys.stderr))
    runner: Backend
    if chosen == "container":
        runner = ContainerBackend(engine=engine, image=settings.image,
                                  memory_gib=settings.memory_gib, cpus=settings.cpus,
                                  can_build=settings.can_build)
    else:
        runner = HostBackend(inputs=inputs, python=request.python, cells=planned.cells,
                             gpu_finder=request.gpu_finder)
    progress = Progress(cell.id, runner.steps, request.stream or sys.stderr)
    progress.say(f"backend: {runner.name} ({why})")
    shard_caches = request.shard_caches
    result = runner.build(BuildJob(cell, recipe, table), progress=progress, options=BuildOptions(
        archs=cell_archs, out_dir=request.out_dir, work_root=request.work_root, why=why,
        sdist=inputs.sdist, sdist_dir=inputs.sdist_dir, needed=needed, cache=request.cache,
        dry_run=request.dry_run,
        shard_caches=tuple(candidates(shard_caches, cell_group(cell, recipe))) if shard_caches
        else ()))
    result.report.why = result.report.why or why
    return result
