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
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from tools.core.errors import CompileError, ToolchainError
from tools.core.variant import group_id, torch_series
from tools.finish.raw import FinishSettings, RawWheel
from tools.finish.steps import finish_wheel, record_kernel_check
from tools.finish.checks import smoke_test, smoke_test_existing, smoke_venv
from tools.kernels.check import GpuFinder, find_gpu, raise_if_failed, run_check, summary
from tools.pipeline import ccache, shardcache
from tools.pipeline.buildenv import available_memory_gib, build_env, size_for, usable_cores
from tools.pipeline.compilelog import failing_file
from tools.pipeline.prelude import prepare
from tools.plan.job import BuildJob, Inputs
from tools.pipeline.report import Progress, Step, reporting
from tools.pipeline.wheelhouse import publish
from tools.pipeline.build_toolchain import (BuildPython, build_process_env, pip_wheel_command,
                                            torch_info)
from tools.pipeline.venvs import PackageSources, venv_python
from tools.plan.groups import group_key, read_units
from tools.plan.cells import Cell, torch_index
from tools.plan.recipe_model import Recipe
from tools.plan.table import Table
from .base import BuildOptions, BuildResult

#: The host backend's steps, as the progress lines and the report name them.
HOST_STEPS = ["toolchain", "source", "python", "compile", "repair", "inspect", "metadata",
              "verify", "kernels", "publish"]
#: The steps with ``--python``: the given interpreter is checked first, before anything else.
EXISTING_PYTHON_STEPS = ["python", *(s for s in HOST_STEPS if s != "python")]

_VERSION_QUERY = "import sys; print('%d.%d' % sys.version_info[:2])"
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
    """Check an existing interpreter (``--python``) for ``cell`` before anything compiles: it
    runs, it is the cell's Python version, its torch imports and is a CUDA build of the cell's
    CUDA major and torch series (and the table's C++ ABI), and the recipe's build requirements
    (and pip, which runs the build) are installed. Nothing is installed or downloaded: each
    failure is a ToolchainError naming what is wrong and how to fix it; where the interpreter
    fits another cell of ``cells`` (the plan ``cell`` comes from), the fix names that cell.
    """
    python = Path(python)
    flag = f"--python {python}"
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


_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


@dataclass(frozen=True)
class PipWheel:
    """The package's own build as the host backend runs it: ``pip wheel`` of ``tree`` with
    ``python`` into ``out_dir`` (``isolation``: the recipe's; ``offline``: no index)."""

    python: Path
    tree: Path
    out_dir: Path
    isolation: bool = True
    offline: bool = False


def compile_wheel(build: PipWheel, env: dict[str, str], log: Path, *,
                  on_line: Callable[[str], None] | None = None, timeout: float = 6 * 3600,
                  path_prefix: tuple[str, ...] = ()) -> Path:
    """Run the package's own build (``pip wheel``) and return the unrepaired wheel.

    Every line goes to ``log``; ninja's ``[N/M]`` progress lines go to ``on_line``. A failure
    raises CompileError naming the file that failed, the exit status (137: OOM-killed) and the
    log. ``path_prefix`` goes first on PATH (the compiler cache's ``c++``); an inherited
    PYTHONPATH is dropped, one in ``env`` is kept.
    """
    python, tree, out_dir = build.python, build.tree, build.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = pip_wheel_command(python, tree, out_dir, isolation=build.isolation,
                            offline=build.offline)
    full_env = build_process_env(python, env, first_on_path=tuple(map(Path, path_prefix)))
    start = time.monotonic()
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        proc = subprocess.Popen(cmd, cwd=tree, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            if on_line and _PROGRESS.match(line.strip()):
                on_line(line.strip())
            if time.monotonic() - start > timeout:
                proc.kill()
                break
        code = proc.wait()
    if code != 0:
        text = log.read_text(errors="replace")
        culprit = failing_file(text)
        if code in (-9, 137) or "Killed" in text[-5000:]:
            raise CompileError(
                f"the compile was killed (exit {code}), most likely out of memory; log: {log}",
                hint="lower MAX_JOBS (raise build.job_memory_gib in the recipe), or build on a "
                     "machine with more memory")
        where = f" while compiling {culprit}" if culprit else ""
        raise CompileError(f"the package's build failed (exit {code}){where}; full log: {log}",
                           hint="read the first error in the log; a patch in the recipe may be "
                                "needed for this CUDA/torch version")
    wheels = sorted(out_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise CompileError(f"the build made {len(wheels)} wheels in {out_dir}, expected one")
    return wheels[0]


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


def _report_cache(setup: ccache.CompilerCache, step: Step, progress: Progress) -> None:
    """Put the build's cache hits and misses in the report, also after a failed compile (an
    unreadable stats log is noted, never hides the compile's own error)."""
    try:
        stats = ccache.read_stats(setup)
    except ToolchainError as exc:
        step.detail["cache"]["stats_error"] = str(exc)
        return
    step.detail["cache"].update(hits=stats.hits, direct_hits=stats.direct_hits,
                                preprocessed_hits=stats.preprocessed_hits, misses=stats.misses,
                                counters=stats.counters)
    progress.say(f"compiler cache: {stats.summary}")


def _report_units(setup: ccache.CompilerCache, use: shardcache.ShardUse, recipe: Recipe,
                  step: Step, progress: Progress) -> None:
    """Put each unit's cache result in the report, each miss with its reason."""
    units = read_units(recipe)
    per_unit = shardcache.sort_results(ccache.unit_results(setup.stats_log), use,
                                       units.sharded() if units else ())
    step.detail["cache"]["per_unit"] = per_unit
    progress.say(f"shard caches: {per_unit['shard_hits']} unit(s) read from "
                 f"{len(use.used)} shard cache(s), {len(per_unit['misses'])} compiled here")
    for miss in per_unit["misses"]:
        progress.say(f"  compiled here: {miss['unit']}: {miss['why']}")


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
        report: dict[str, Any] = {"cell": cell.id, "backend": self.name, "why": options.why,
                                  "archs": list(options.archs), "label": cell.label,
                                  "verdict": "failed"}
        if options.needed:
            report["needs"] = [str(p) for p in options.needed]
        with reporting(work / "report.json", report, progress):
            wheel = self._run(job, options, work, progress)
            report.update(verdict="passed", wheel=str(wheel))
        return BuildResult(report, wheel)

    @staticmethod
    def _shards(cell: Cell, recipe: Recipe, options: BuildOptions,
                progress: Progress) -> shardcache.ShardUse | None:
        """Which offered shard caches the build reads (None when none were offered)."""
        if not options.shard_caches:
            return None
        use = shardcache.choose(list(options.shard_caches), group=group_id(cell.id),
                                key=group_key(cell, recipe))
        for refused in use.refused:
            progress.say(f"shard cache not read: {refused['cache']}: {refused['why']}")
        progress.say(f"shard caches read: {len(use.used)}"
                     + (f" (partial: {', '.join(use.partial)})" if use.partial else ""))
        return use

    def _existing(self, job: BuildJob, step: Step) -> BuildPython:
        """The ``python`` step with ``--python``: that interpreter checked against the cell."""
        bp = check_existing_python(self.python, job.cell, job.recipe, job.table,
                                   cells=self.cells)
        step.detail.update(python=str(bp.python), existing=True, torch=bp.torch_version,
                           torch_cuda=bp.torch_cuda, cxx11_abi=bp.cxx11_abi)
        return bp

    def _run(self, job: BuildJob, options: BuildOptions, work: Path, progress: Progress) -> Path:
        """Every step, in ``work``; returns the published wheel."""
        cell, recipe, table = job.cell, job.recipe, job.table
        python, archs = self.python, options.archs
        wheelhouse, offline = self.inputs.wheelhouse, self.inputs.offline

        existing = None
        if python is not None:
            # Checked first: an interpreter that can't build this cell stops before anything
            # is fetched.
            existing = progress.run("python", lambda step: self._existing(job, step))
        prelude = prepare(job, work, self.inputs, progress, python=existing)
        nvcc, prepared, bp = prelude.nvcc, prelude.source, prelude.python

        sizing = size_for(recipe, archs, cores=usable_cores(),
                          available_gib=available_memory_gib())
        env = build_env(recipe, cell, sizing, archs=archs, cuda_home=nvcc.cuda_home)

        def compile_(step: Step) -> Path:
            use = self._shards(cell, recipe, options, progress) if options.cache else None
            if use is not None:
                env.update(use.env)   # the shards' command lines are the cell's
                step.detail["shards"] = use.describe()
            progress.say(f"sizing: {sizing.note}")
            progress.say("environment: "
                         + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
            step.detail.update(env=env, sizing=asdict(sizing), log=str(work / "compile.log"))
            setup = ccache.prepare(work, site=ccache.site_packages(bp.python),
                                   cuda_home=nvcc.cuda_home) if options.cache else None
            if setup:
                progress.say(f"compiler cache: ccache {setup.version} in {setup.directory} "
                             "(--no-cache builds without it)")
                step.detail["cache"] = setup.describe()
                if use is not None and use.used:
                    setup.env.update(ccache.shard_reader_env(use.used))
            else:
                step.detail["cache"] = {"tool": None, "why": "--no-cache"}
            last = [0.0]

            def on_line(line: str) -> None:
                now = time.monotonic()
                if now - last[0] > 5:
                    last[0] = now
                    counter = line.split("]", 1)[0] + "]"
                    # torch may pass -c twice
                    source = re.search(r"\s-c\s+(?:-c\s+)*(\S+)", line)
                    name = Path(source.group(1)).name if source else line[len(counter):80]
                    progress.say(f"compiling {counter} {name}")
            try:
                build = PipWheel(bp.python, prepared.tree, work / "dist",
                                 isolation=recipe.build.isolation, offline=offline)
                return compile_wheel(build,
                                     {**env, **(setup.env if setup else ccache.disabled_env())},
                                     work / "compile.log", on_line=on_line,
                                     path_prefix=setup.path_prefix if setup else ())
            finally:
                if setup:
                    _report_cache(setup, step, progress)
                if setup and use is not None:
                    _report_units(setup, use, recipe, step, progress)

        raw = progress.run("compile", compile_)
        final, manifest = finish_wheel(
            RawWheel(raw, cell, recipe, archs, bp.torch_lib, bp.torch_version, bp.torch_cuda,
                     backend="host", nvcc=nvcc.path), work, progress,
            FinishSettings(manifest_extra={"existing_python": True} if python is not None
                           else None))

        def verify(step: Step) -> tuple[Path, tuple[Path, ...]]:
            """The import smoke test; returns the Python and path the kernel check runs with."""
            if python is not None:
                seconds, site = smoke_test_existing(final, python=bp.python,
                                                    torch_series=cell.torch,
                                                    imports=recipe.imports,
                                                    workdir=work / "smoke",
                                                    extra_wheels=options.needed)
                step.detail.update(smoke_test="passed", imports=list(recipe.imports),
                                   seconds=seconds, python=str(bp.python))
                return bp.python, (site,)
            index = self.inputs.torch_index or torch_index(cell, table)
            seconds = smoke_test(final, python=cell.python,
                                 torch_requirement=cell.torch_requirement,
                                 torch_version=cell.torch_version, imports=recipe.imports,
                                 workdir=work / "smoke", sources=PackageSources(
                                     extra_index_urls=(index,) if index else (),
                                     find_links=(wheelhouse,) if wheelhouse else (),
                                     offline=offline),
                                 extra_wheels=options.needed)
            step.detail.update(smoke_test="passed", imports=list(recipe.imports),
                               seconds=seconds)
            return venv_python(smoke_venv(work / "smoke")), ()

        check_python, check_path = progress.run("verify", verify)

        def kernels(step: Step) -> Path:
            checked, kept = check_kernels(final, manifest, cell=cell, recipe=recipe,
                                          installed=Installed(check_python, check_path),
                                          work=work, gpu_finder=self.gpu_finder,
                                          detail=step.detail)
            progress.say(f"kernel check: {kept['verdict']}"
                         + (f" on {kept['gpu']}" if kept.get("gpu") else ""))
            return checked

        checked = progress.run("kernels", kernels)
        return progress.run("publish", lambda step: publish(checked, options.out_dir, step))
