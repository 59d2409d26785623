"""Build one matrix cell: choose a backend, run it, report.

``python -m tools.build CELL_ID [--backend host|container|auto] [--archs 90] [--sdist PATH]``
(what ``nox -s build-<cell id>`` runs). The backends are peers this module calls:
``tools.backends.host.build_host`` (this machine's toolchain) and ``tools.backends.container.build_container``
(cibuildwheel in the cell's manylinux image); ``auto`` takes the container only when an engine
can start a container from the cell's image, here or pulled (``tools.backends.engine.readiness``), and
otherwise says why it fell back to the host. Every step is timed and reported; the wheel reaches ``wheelhouse/``
only after every check passed, and the build report (JSON) says what each check found. A
failure names the step, explains itself and exits non-zero.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tools import RECIPES_DIR, ROOT
from tools.backends.container import CONTAINER_STEPS, build_container
from tools.backends.engine import ReadinessCheck, first_ready, readiness
from tools.core.errors import ToolchainError, cli
from tools.backends.host import EXISTING_PYTHON_STEPS, HOST_STEPS, build_host
from tools.kernels.check import GpuFinder, find_gpu
from tools.plan.matrix import Cell, find_cell, load_cell, plan
from .needs import provide
from tools.pipeline.report import Progress, reporting
from tools.plan.recipe import load_all
from tools.plan.table import TABLE_PATH, Table, arch_key

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


def build_cell(cell_id: str, *, backend: str = "auto", archs: str | None = None,
               sdist: Path | None = None, sdist_dir: Path | None = None,
               wheelhouse: Path | None = None, offline: bool = False,
               torch_index: str | None = None, out_dir: Path = DEFAULT_OUT,
               work_root: Path = DEFAULT_WORK, recipes_root: Path = RECIPES_DIR,
               table_path: Path = TABLE_PATH, engine: str | None = None,
               dry_run: bool = False, memory_gib: int | None = None, cpus: int | None = None,
               image: str | None = None, stream=None, can_build: ReadinessCheck = readiness,
               python: Path | None = None, gpu_finder: GpuFinder = find_gpu, cache: bool = True
               ) -> dict[str, Any]:
    """Build one cell and return its report (also written to ``<work>/report.json``).

    ``can_build`` says whether an engine can build from an image (for ``auto`` and the container
    backend); ``image`` replaces the table's image for the cell's CUDA. ``python`` builds on the
    host against that existing interpreter's torch. ``gpu_finder`` answers which GPU the kernel
    check may use (``tools.kernels.check.find_gpu``). ``cache``: both backends compile through
    ccache (``tools.pipeline.ccache``; the container mounts the same cache directory).
    Raises the step's CuwheelsError on failure, after writing the report.
    """
    cell, recipe, table = load_cell(cell_id, recipes_root, table_path)
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
        def build_needed(need_id: str, out: Path) -> Path:
            # The same backend, archs and sources as this build; the wheel goes to ``out``,
            # not to the output directory (the needed cell's own build publishes it).
            return Path(build_cell(
                need_id, backend=chosen, archs=archs, sdist_dir=sdist_dir,
                wheelhouse=wheelhouse, offline=offline, torch_index=torch_index, out_dir=out,
                work_root=work_root, recipes_root=recipes_root, table_path=table_path,
                engine=engine, memory_gib=memory_gib, cpus=cpus, image=image, stream=stream,
                can_build=can_build, python=python, gpu_finder=gpu_finder, cache=cache)["wheel"])

        cells = plan(load_all(recipes_root, table), table)
        needed = provide(cell, [find_cell(n, cells) for n in cell.needs],
                         search=tuple(d for d in (out_dir, wheelhouse) if d),
                         into=work_root / cell.id / "needs", build=build_needed,
                         say=lambda line: print(f"[{cell.id}] {line}", file=stream or sys.stderr))
    if chosen == "container":
        progress = Progress(cell.id, CONTAINER_STEPS, stream or sys.stderr)
        progress.say(f"backend: container ({why})")
        report = build_container(cell, recipe, table, archs=cell_archs, engine=engine,
                                 dry_run=dry_run, out_dir=out_dir, work_root=work_root,
                                 progress=progress, sdist=sdist, sdist_dir=sdist_dir,
                                 memory_gib=memory_gib, cpus=cpus, image=image, can_build=can_build,
                                 cache=cache, needed=needed)
        report.setdefault("why", why)
        return report
    progress = Progress(cell.id, EXISTING_PYTHON_STEPS if python else HOST_STEPS,
                        stream or sys.stderr)
    progress.say(f"backend: host ({why})")
    if dry_run:
        raise ToolchainError("--dry-run is for the container backend (it prints the "
                             "cibuildwheel command)", hint="add --backend container")
    work = work_root / cell.id
    work.mkdir(parents=True, exist_ok=True)
    for stale in ("compile.log", "python.log", "repair.log", "ccache-stats.log"):
        (work / stale).unlink(missing_ok=True)
    report: dict[str, Any] = {"cell": cell.id, "backend": "host", "why": why,
                              "archs": list(cell_archs), "label": cell.label,
                              "verdict": "failed"}
    if needed:
        report["needs"] = [str(p) for p in needed]
    with reporting(work / "report.json", report, progress):
        wheel = build_host(cell, recipe, table, archs=cell_archs, work=work, out_dir=out_dir,
                           progress=progress, sdist=sdist, sdist_dir=sdist_dir,
                           wheelhouse=wheelhouse, offline=offline,
                           torch_index_override=torch_index, python=python,
                           gpu_finder=gpu_finder, cache=cache, needed=needed)
        report.update(verdict="passed", wheel=str(wheel))
    return report


@cli
def main(argv: list[str] | None = None) -> int:
    """Build one cell (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m tools.build", description=__doc__.split("\n")[0])
    ap.add_argument("cell", help="cell id, e.g. causal_conv1d-3.11-cu130 (python -m tools.matrix"
                                 " --format ids lists them)")
    ap.add_argument("--backend", choices=["auto", "host", "container"], default="auto")
    ap.add_argument("--engine", choices=["docker", "podman"], help="container engine")
    ap.add_argument("--image", help="container backend: build in this image instead of the "
                                    "table's (e.g. a local stand-in: python -m tools.localimage)")
    ap.add_argument("--archs", help="override the arch list for a local build: 90 or 80,90")
    ap.add_argument("--sdist", type=Path, help="use this sdist file instead of downloading")
    ap.add_argument("--sdist-dir", type=Path, help="take the sdist from this directory")
    ap.add_argument("--wheelhouse", type=Path,
                    help="a directory of wheels (torch, build deps) to install from")
    ap.add_argument("--offline", action="store_true",
                    help="no network: install only from --wheelhouse (with --python: install "
                         "nothing; needs --sdist or --sdist-dir)")
    ap.add_argument("--python", type=Path,
                    help="host backend: build against this existing interpreter's torch and "
                         "build requirements as they are (no venv, no download)")
    ap.add_argument("--torch-index", help="index URL for the cell's torch build")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where verified wheels go")
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK, help="per-cell work directories")
    ap.add_argument("--recipes", type=Path, default=RECIPES_DIR, help="recipes directory")
    ap.add_argument("--table", type=Path, default=TABLE_PATH, help="compatibility table")
    ap.add_argument("--dry-run", action="store_true",
                    help="container backend: print the cibuildwheel command and stop")
    ap.add_argument("--memory", type=int, metavar="GIB",
                    help="container backend: memory limit (default: available memory - 1 GiB)")
    ap.add_argument("--cpus", type=int, help="container backend: CPU limit (default: all)")
    ap.add_argument("--no-cache", action="store_true",
                    help="compile without the compiler cache (ccache in "
                         "$CUWHEELS_CCACHE_DIR, default ~/.cache/cuwheels/ccache; the "
                         "container backend mounts it)")
    args = ap.parse_args(argv)
    if args.offline and not args.wheelhouse and not args.python:
        ap.error("--offline needs --wheelhouse (or --python, an environment that has "
                 "everything)")
    if args.offline and not (args.sdist or args.sdist_dir):
        ap.error("--offline needs --sdist or --sdist-dir (the sdist can't be downloaded)")
    report = build_cell(args.cell, backend=args.backend, archs=args.archs, sdist=args.sdist,
                        sdist_dir=args.sdist_dir, wheelhouse=args.wheelhouse,
                        offline=args.offline, torch_index=args.torch_index, out_dir=args.out,
                        work_root=args.work, recipes_root=args.recipes,
                        table_path=args.table, engine=args.engine,
                        dry_run=args.dry_run, memory_gib=args.memory, cpus=args.cpus,
                        image=args.image, python=args.python, cache=not args.no_cache)
    if report.get("wheel"):
        print(report["wheel"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
