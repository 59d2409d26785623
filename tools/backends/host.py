"""Host backend: build a cell with this machine's toolchain, in a fresh venv per cell.

:class:`HostBackend` (a ``tools.backends.base.Backend``) runs every step here: toolchain ->
source -> python -> compile -> the finish stage (``tools.finish.steps``) -> verify (import smoke
test) -> kernels -> publish, with the toolchain of ``tools.pipeline.build_toolchain``. Wheels built
here need this host's glibc or newer (auditwheel tags them accordingly, e.g. manylinux_2_34 on
Debian 12); the container backend builds the broadly installable manylinux_2_28 wheels CI
publishes.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from tools.core.errors import ToolchainError
from tools.core.variant import torch_series
from tools.finish.raw import FinishSettings, RawWheel
from tools.finish.steps import finish_wheel, record_kernel_check
from tools.finish.checks import smoke_test, smoke_test_existing, smoke_venv
from tools.kernels.check import GpuFinder, find_gpu, raise_if_failed, run_check, summary
from tools.pipeline.compile import CompileSettings, compile_package
from tools.pipeline.prelude import prepare
from tools.plan.job import BuildJob, Inputs
from tools.pipeline.buildreport import BuildReport
from tools.pipeline.report import Progress, Step, reporting
from tools.pipeline.wheelhouse import publish
from tools.pipeline.build_toolchain import BuildPython, torch_info
from tools.pipeline.venvs import PackageSources, venv_python
from tools.plan.cells import Cell, torch_index
from tools.plan.recipes.model import Recipe
from tools.plan.table import Table
from .base import BuildOptions, BuildResult

#: The host backend's steps, as the progress lines and the report name them.
HOST_STEPS = ["toolchain", "source", "python", "compile", "repair", "inspect", "metadata",
              "verify", "kernels", "publish"]
#: The steps with ``--interpreter``: the given interpreter is checked first, before anything else.
EXISTING_PYTHON_STEPS = ["python", *(s for s in HOST_STEPS if s != "python")]

#: Prints the interpreter's Python as a cell spells it: ``3.12``, ``3.14t`` (free-threaded).
_VERSION_QUERY = ("import sys, sysconfig; print('%d.%d' % sys.version_info[:2] + "
                  "('t' if sysconfig.get_config_var('Py_GIL_DISABLED') else ''))")
#: Prints the installed version of each distribution named in argv (null when absent).
_DISTS_QUERY = ("import json, sys, importlib.metadata as m\n"
                "def v(n):\n"
                "    try:\n        return m.version(n)\n"
                "    except m.PackageNotFoundError:\n        return None\n"
                "print(json.dumps({n: v(n) for n in sys.argv[1:]}))")


def _sibling(cells: Sequence[Cell], cell: Cell, *, python: str, torch: str) -> Cell | None:
    """The cell of ``cells`` (a plan) that builds ``cell``'s package for its CUDA with this
    Python and torch series, if the plan has one."""
    return next((c for c in cells if c.package == cell.package and c.cuda == cell.cuda
                 and c.python == python and c.torch == torch), None)


def check_existing_python(python: Path, cell: Cell, recipe: Recipe, table: Table, *,
                          cells: Sequence[Cell] = ()) -> BuildPython:
    """Check an existing interpreter (``--interpreter``) for ``cell`` before anything compiles: it
    runs, it is the cell's Python version, its torch imports and is a CUDA build of the cell's
    CUDA major and torch series (and the table's C++ ABI), and the recipe's build requirements
    (and pip, which runs the build) are installed. Nothing is installed or downloaded: each
    failure is a ToolchainError naming what is wrong and how to fix it; where the interpreter
    fits another cell of ``cells`` (the plan ``cell`` comes from), the fix names that cell.
    """
    python = Path(python)
    flag = f"--interpreter {python}"
    if not python.is_file() or not os.access(python, os.X_OK):
        raise ToolchainError(f"{flag}: no executable interpreter there",
                             hint="give the path of the environment's python, e.g. "
                                  "/path/to/venv/bin/python")
    proc = subprocess.run([str(python), "-c", _VERSION_QUERY], capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0:
        raise ToolchainError(f"{flag} does not run: {proc.stderr.strip()[-400:]}")
    version = proc.stdout.strip()
    if version != cell.python:
        same = _sibling(cells, cell, python=version, torch=cell.torch)
        raise ToolchainError(f"{flag} is Python {version}; cell {cell.id} is for Python "
                             f"{cell.python}",
                             hint=(f"build the cell of that interpreter ({same.id}) or give a "
                                   if same else "give a ") + f"Python {cell.python} interpreter")
    info = torch_info(python, hint=f"install the cell's torch ({cell.torch_requirement}, "
                                    f"a CUDA {cell.cuda.split('.')[0]} build) into that "
                                    "environment")
    if not info["cuda"]:
        raise ToolchainError(f"{flag} has torch {info['v']}, a CPU build: CUDA extensions "
                             "need a CUDA build of torch",
                             hint=f"install a CUDA {cell.cuda.split('.')[0]} build of torch "
                                  f"{cell.torch} into that environment (e.g. from "
                                  "https://download.pytorch.org/whl/)")
    have, want = info["cuda"].split(".")[0], cell.cuda.split(".")[0]
    if have != want and not table.torch[cell.torch].nvcc_check_relaxed(cell.cuda):
        raise ToolchainError(f"{flag} has torch {info['v']}, built with CUDA {info['cuda']}; "
                             f"cell {cell.id} is for CUDA {cell.cuda}",
                             hint=f"build a cu{have}x cell with that environment, or give one "
                                  f"whose torch is a CUDA {want} build")
    series = torch_series(info["v"])
    if series != cell.torch:
        other = _sibling(cells, cell, python=cell.python, torch=series)
        raise ToolchainError(f"{flag} has torch {info['v']}; cell {cell.id} builds against "
                             f"torch {cell.torch} (its wheel is labelled and pinned for it)",
                             hint=f"build {other.id}, the cell of that torch" if other else
                                  f"the recipe builds no CUDA {cell.cuda} wheel for torch "
                                  f"{series}; give an environment with torch {cell.torch}")
    if info["abi"] != cell.cxx11_abi:
        raise ToolchainError(f"{flag} has torch {info['v']} with cxx11_abi={info['abi']}; "
                             f"the table says {cell.cxx11_abi} for torch {cell.torch}",
                             hint="use the official torch build of that series")
    if recipe.build.isolation:
        raise ToolchainError(f"{flag}: {recipe.package} builds with build isolation, which "
                             "installs its own build requirements, torch included",
                             hint="use the default venv backend for this recipe")
    missing = missing_requirements(python, ["pip", *(d.requirement
                                                     for d in recipe.build.requires)])
    if missing:
        quoted = " ".join(f"'{r}'" for r, _ in missing)
        named = ", ".join(r if v is None else f"{r} (has {v})" for r, v in missing)
        raise ToolchainError(f"{flag} lacks build requirements of {recipe.package}: "
                             f"{named} (nothing is installed into an existing environment)",
                             hint=f"{python} -m pip install {quoted} (offline: add "
                                  "--no-index --find-links DIR_WITH_WHEELS)")
    return BuildPython(python, info["v"], info["cuda"], Path(info["lib"]), info["abi"])


def missing_requirements(python: Path, requirements: list[str]
                         ) -> list[tuple[str, str | None]]:
    """Those of ``requirements`` (PEP 508 strings) that ``python``'s environment doesn't
    satisfy, each with the version installed (None: not installed)."""
    reqs = [Requirement(r) for r in requirements]
    proc = subprocess.run([str(python), "-c", _DISTS_QUERY, *(r.name for r in reqs)],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise ToolchainError(f"could not list the packages of {python}: "
                             f"{proc.stderr.strip()[-400:]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    missing = []
    for text, req in zip(requirements, reqs):
        version = found.get(req.name)
        try:
            ok = version is not None and req.specifier.contains(Version(version),
                                                                prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            missing.append((text, version))
    return missing


@dataclass(frozen=True)
class Installed:
    """Where a wheel is installed: the interpreter, and what goes first on its path."""

    python: Path
    pythonpath: tuple[Path, ...] = ()


def check_kernels(wheel: Path, manifest: dict, *, cell: Cell, recipe: Recipe,
                  installed: Installed, work: Path, gpu_finder: GpuFinder = find_gpu,
                  device: str = "cuda", detail: dict | None = None) -> tuple[Path, dict]:
    """Run the recipe's kernel check where ``wheel`` is ``installed`` and return
    the wheel to publish (``<work>/checked``, its manifest holding the check's summary) with
    that summary. A failing or broken check raises VerifyError naming op, dtype, shape, error
    and tolerance, and nothing is written; no GPU, or no check in the recipe, is recorded as
    not run. ``detail`` (the step's report entry) receives the summary either way.
    """
    if recipe.check is None:
        result = {"verdict": "not run: the recipe has no kernel check", "results": []}
    else:
        result = run_check(recipe.check.path, installed.python, workdir=work / "kernelcheck",
                           device=device, pythonpath=installed.pythonpath, gpu_finder=gpu_finder)
    kept = summary(result)
    if detail is not None:
        detail.update(kernel_check=kept)
    raise_if_failed(result, what=wheel.name)
    checked, _ = record_kernel_check(wheel, manifest, kept, cell=cell, recipe=recipe,
                                     out_dir=work / "checked")
    return checked, kept


@dataclass(frozen=True)
class HostBackend:
    """The host backend (a ``tools.backends.base.Backend``): every step on this machine.

    ``python``: build against that existing interpreter's torch and build requirements, as
    they are (checked first; no venv, nothing installed); ``cells``: the plan the built cell
    comes from, whose cells its errors name. Otherwise a fresh venv gets the cell's torch from
    the inputs' ``torch_index`` (default: the cell's CUDA index) and its build requirements,
    from their ``wheelhouse`` too, or only from there when ``offline``. ``gpu_finder`` says which GPU the
    kernel check may use (none: the check is recorded as not run).
    """

    name: ClassVar[str] = "host"
    #: Where the fresh venv's torch and build requirements come from (the sdist comes with
    #: the build's options).
    inputs: Inputs = Inputs()
    python: Path | None = None
    cells: tuple[Cell, ...] = ()
    gpu_finder: GpuFinder = find_gpu

    @property
    def steps(self) -> list[str]:
        """The host's steps; with ``python`` the interpreter is checked first."""
        return EXISTING_PYTHON_STEPS if self.python is not None else HOST_STEPS

    def build(self, job: BuildJob, *, options: BuildOptions, progress: Progress) -> BuildResult:
        """Build the cell here and publish its wheel; the report goes to
        ``<work_root>/<cell id>/report.json`` however the build ends. The compiler cache's hits
        and misses go in the compile step's report; ``options.needed`` are installed beside the
        wheel for the import and kernel checks."""
        if options.dry_run:
            raise ToolchainError("--dry-run is for the container backend (it prints the "
                                 "cibuildwheel command)", hint="add --backend container")
        cell = job.cell
        work = options.work_root / cell.id
        work.mkdir(parents=True, exist_ok=True)
        for stale in ("compile.log", "python.log", "repair.log", "ccache-stats.log"):
            (work / stale).unlink(missing_ok=True)
        report = BuildReport(cell.id, self.name, why=options.why, archs=list(options.archs),
                             label=cell.label,
                             needs=[str(p) for p in options.needed] or None)
        with reporting(work / "report.json", report, progress):
            wheel = self._run(job, options, work, progress)
            report.verdict, report.wheel = "passed", str(wheel)
        return BuildResult(report, wheel)

    def _existing(self, job: BuildJob, step: Step) -> BuildPython:
        """The ``python`` step with ``--interpreter``: that interpreter checked against the cell."""
        bp = check_existing_python(self.python, job.cell, job.recipe, job.table,
                                   cells=self.cells)
        step.detail.update(python=str(bp.python), existing=True, torch=bp.torch_version,
                           torch_cuda=bp.torch_cuda, cxx11_abi=bp.cxx11_abi)
        return bp

    def _run(self, job: BuildJob, options: BuildOptions, work: Path, progress: Progress) -> Path:
        """Every step, in ``work``; returns the published wheel."""
        cell, recipe, python = job.cell, job.recipe, self.python
        existing = None
        if python is not None:
            # Checked first: an interpreter that can't build this cell stops before anything
            # is fetched.
            existing = progress.run("python", lambda step: self._existing(job, step))
        prelude = prepare(job, work, self.inputs, progress, python=existing)
        settings = CompileSettings(options.archs, cache=options.cache,
                                   shard_caches=options.shard_caches, offline=self.inputs.offline)
        raw = progress.run("compile", lambda step: compile_package(job, prelude, settings, work,
                                                                   step, progress))
        bp = prelude.python
        final, manifest = finish_wheel(
            RawWheel(raw, cell, recipe, options.archs, bp.torch_lib, bp.torch_version,
                     bp.torch_cuda, backend="host", nvcc=prelude.nvcc.path), work, progress,
            FinishSettings(manifest_extra={"existing_python": True} if python is not None
                           else None))
        installed = progress.run("verify", lambda step: self._verify(
            job, final, bp, options.needed, work, step))
        checked = progress.run("kernels", lambda step: self._kernels(
            job, final, manifest, installed, work, step, progress))
        return progress.run("publish", lambda step: publish(checked, options.out_dir, step))

    def _verify(self, job: BuildJob, final: Path, bp: BuildPython, needed: tuple[Path, ...],
                work: Path, step: Step) -> Installed:
        """The ``verify`` step, the import smoke test: in a fresh venv with the cell's torch,
        or with ``--interpreter`` in that interpreter (the wheel unpacked beside it); returns where
        the kernel check runs."""
        cell, recipe = job.cell, job.recipe
        if self.python is not None:
            seconds, site = smoke_test_existing(final, python=bp.python, torch_series=cell.torch,
                                                imports=recipe.imports, workdir=work / "smoke",
                                                extra_wheels=needed)
            step.detail.update(smoke_test="passed", imports=list(recipe.imports),
                               seconds=seconds, python=str(bp.python))
            return Installed(bp.python, (site,))
        index = self.inputs.torch_index or torch_index(cell, job.table)
        wheelhouse = self.inputs.wheelhouse
        seconds = smoke_test(final, python=cell.python, torch_requirement=cell.torch_requirement,
                             torch_version=cell.torch_version, imports=recipe.imports,
                             workdir=work / "smoke", sources=PackageSources(
                                 extra_index_urls=(index,) if index else (),
                                 find_links=(wheelhouse,) if wheelhouse else (),
                                 offline=self.inputs.offline),
                             extra_wheels=needed)
        step.detail.update(smoke_test="passed", imports=list(recipe.imports), seconds=seconds)
        return Installed(venv_python(smoke_venv(work / "smoke")))

    def _kernels(self, job: BuildJob, final: Path, manifest: dict, installed: Installed,
                 work: Path, step: Step, progress: Progress) -> Path:
        """The ``kernels`` step: the recipe's kernel check where the wheel is installed."""
        checked, kept = check_kernels(final, manifest, cell=job.cell, recipe=job.recipe,
                                      installed=installed, work=work,
                                      gpu_finder=self.gpu_finder, detail=step.detail)
        progress.say(f"kernel check: {kept['verdict']}"
                     + (f" on {kept['gpu']}" if kept.get("gpu") else ""))
        return checked
