"""Probe build: compile a cell's heaviest translation units the way its real build would.

``python -m tools.probe CELL [--units a.cu,b.cu] [--count N] [--archs 90]`` runs the cell's real
toolchain, source (download, sha256, patches) and python (venv, torch, build requirements) steps,
then reads the compile commands of the package's own build (``tools.probing.compdb``: the build runs
with a stand-in ninja that records every command line and compiles nothing). It then runs a few
of those command lines itself, one at a time, and measures each: wall time, and peak memory of
the compiler's whole process tree (nvcc, cicc, ptxas, ...), sampled from /proc. Nothing real is
linked, no wheel is kept.

Which units: those named with ``--units``, else the recipe's ``probe.units``, else the heaviest
CUDA unit(s) and the heaviest C++ unit by a stated heuristic (``select_units``). A source
compiled for several extensions (PyG's packages build each one for CPU and CUDA) is one unit:
its first command line.

The result says what ``build.job_memory_gib`` the measurement supports against the recipe's
figure, and is written to ``<work>/<cell>/probe/probe.json``. A unit that fails is named with the
compiler's first error; a probe that would need more memory than the machine has is refused
before anything starts; a build that writes no compile commands is a ProbeError saying why.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tools import RECIPES_DIR, ROOT
from tools.builder.orchestrate import resolve_archs
from tools.core.errors import CompileError, ProbeError
from tools.hostplat import HostOS, current
from tools.pipeline.buildenv import available_memory_gib, build_env, size_jobs
from tools.pipeline.compilelog import failing_file
from tools.pipeline.report import Progress, reporting_json
from tools.pipeline.build_toolchain import build_process_env
from tools.pipeline.prelude import prepare
from tools.plan.job import BuildJob, Inputs
from tools.plan.recipes.model import Recipe, load_recipe
from .compdb import Unit, capture_commands

PROBE_STEPS = ["toolchain", "source", "python", "commands", "compile"]
DEFAULT_WORK = ROOT / "build-cells"
#: CUDA units compiled when neither --units nor the recipe names any (plus one C++ unit).
DEFAULT_COUNT = 1
#: How often the compiler's process tree is sampled; a peak shorter than this can be missed,
#: which is why the largest single process (from wait4) is also kept as a floor.
SAMPLE_SECONDS = 0.2
#: One unit may not run longer than this (flash-attn's heaviest take ~10 min with one thread).
UNIT_TIMEOUT = 2 * 3600
#: job_memory_gib is suggested in steps of this many GiB, rounded up.
MEMORY_STEP = 0.5
_INCLUDE = re.compile(rb'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


@dataclass
class UnitResult:
    """What compiling one unit took, or how it failed."""

    unit: str
    kind: str
    ok: bool
    seconds: float
    peak_tree_gib: float
    peak_process_gib: float
    exit_status: int
    log: str
    first_error: str | None = None
    #: The machine's 1-minute load average when the unit finished: seconds measured on a busy
    #: machine are longer than the unit's own cost.
    load_average: float | None = None


@dataclass
class ProbeReport:
    """The probe's findings for one cell."""

    cell: str
    archs: list[str]
    nvcc_threads: int
    recipe_job_memory_gib: float
    units: list[UnitResult] = field(default_factory=list)
    commands_recorded: int = 0
    selection: str = ""
    per_thread_gib: float | None = None
    supported_job_memory_gib: float | None = None
    memory_verdict: str = ""
    verdict: str = "failed"


def threads_for(recipe: Recipe) -> int:
    """nvcc threads per unit in a probe: the package's own when it fixes them, else 1 (so that
    the measurement is the per-thread figure job_memory_gib stands for)."""
    return recipe.build.nvcc_threads if recipe.build.nvcc_threads_fixed else 1


def estimate_gib(recipe: Recipe, archs: tuple[str, ...]) -> float:
    """The recipe's own estimate of one unit's peak: job_memory_gib per thread in flight
    (nvcc runs at most one thread per arch)."""
    return recipe.build.job_memory_gib * min(threads_for(recipe), max(1, len(archs)))


def check_memory(recipe: Recipe, archs: tuple[str, ...], available_gib: float) -> None:
    """Refuse, before anything starts, a probe whose units the recipe says need more memory
    than is available."""
    need = estimate_gib(recipe, archs)
    if need > available_gib:
        threads = min(threads_for(recipe), max(1, len(archs)))
        raise ProbeError(
            f"{recipe.path} (build.job_memory_gib: {recipe.build.job_memory_gib:g}) says one "
            f"unit needs about {need:.1f} GiB ({threads} nvcc thread(s) x "
            f"{recipe.build.job_memory_gib:g} GiB), but only {available_gib:.1f} GiB is "
            "available here",
            hint="free memory, probe fewer archs at once (--archs 90), or run the probe on a "
                 "machine with more memory; if the figure is too high, measure it there and "
                 "lower job_memory_gib")



def _includes(path: Path, cache: dict[Path, list[bytes]]) -> list[bytes]:
    if path not in cache:
        try:
            cache[path] = _INCLUDE.findall(path.read_bytes())
        except OSError:
            cache[path] = []
    return cache[path]


def include_weight(unit: Unit, tree: Path, cache: dict[Path, list[bytes]] | None = None) -> int:
    """Bytes of the unit's source plus every header it reaches, directly or not, inside the
    source tree (resolved against the including file's folder and the command's ``-I`` folders
    that lie in the tree). torch's, CUDA's and the system's headers are the same for every unit
    of a build, so they are left out."""
    cache = {} if cache is None else cache
    root = tree.resolve()
    args = shlex.split(unit.command)
    dirs = []
    for i, arg in enumerate(args):
        inc = arg[2:] if arg.startswith("-I") and len(arg) > 2 else (
            args[i + 1] if arg in ("-I", "-isystem") and i + 1 < len(args) else None)
        if inc:
            d = (unit.directory / inc).resolve()
            if d.is_relative_to(root) and d.is_dir():
                dirs.append(d)
    start = (root / unit.name) if not Path(unit.name).is_absolute() else Path(unit.name)
    seen, stack, total = set(), [start.resolve()], 0
    while stack:
        path = stack.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        total += path.stat().st_size
        for name in _includes(path, cache):
            for d in (path.parent, *dirs):
                candidate = (d / name.decode(errors="replace")).resolve()
                if candidate.is_relative_to(root) and candidate.is_file():
                    stack.append(candidate)
                    break
    return total


def rank_units(units: list[Unit], tree: Path) -> list[Unit]:
    """The units heaviest first: CUDA before C++ (a CUDA unit runs cicc and ptxas once per arch
    and dominates time and memory), then by ``include_weight``, largest first; then by name."""
    cache: dict[Path, list[bytes]] = {}
    weighted = [Unit(**{**asdict(u), "weight": include_weight(u, tree, cache)}) for u in units]
    order = {"cuda": 0, "c++": 1, "c": 2}
    return sorted(weighted, key=lambda u: (order[u.kind], -u.weight, u.name))


def select_units(units: list[Unit], wanted: tuple[str, ...], *, count: int, tree: Path,
                 where: str) -> tuple[list[Unit], str]:
    """The units to compile and a sentence saying how they were chosen: each of ``wanted`` (a
    path in the tree, or its tail such as ``foo.cu``), else the ``count`` heaviest CUDA units
    and the heaviest C++ unit.

    Both kinds, because they fail for different reasons: CUDA units decide time and memory,
    while a C++ unit compiles torch's headers with the host compiler and the package's own
    ``-std=``, which is where a new torch series breaks a package first (torch 2.13's headers
    need C++20)."""
    ranked = rank_units(units, tree)
    if not wanted:
        cuda = [u for u in ranked if u.kind == "cuda"]
        host = [u for u in ranked if u.kind != "cuda"]
        chosen = cuda[:count] + host[:1] if cuda else host[:count]
        return chosen, (f"{len(chosen)} of {len(ranked)}: the heaviest CUDA and C++ units (the "
                        "bytes of the unit and the headers it includes from the source tree)")
    chosen = []
    for name in wanted:
        hits = [u for u in ranked if u.name == name or u.name.endswith("/" + name.lstrip("/"))]
        if len(hits) != 1:
            some = ", ".join(u.name for u in ranked[:8])
            what = "matches no unit" if not hits else \
                f"matches {len(hits)} units ({', '.join(u.name for u in hits[:4])})"
            raise ProbeError(f"{where}: {name!r} {what} of this build",
                             hint=f"name a unit by its path in the source tree; the heaviest "
                                  f"are: {some}")
        chosen.append(hits[0])
    return chosen, f"named by {where}"


def measure(command: str, *, cwd: Path, env: dict[str, str], log: Path,
            timeout: float = UNIT_TIMEOUT, host: HostOS = current()) -> tuple[int, float, int, int]:
    """Run one shell command line in its own process tree and measure it, the way of ``host``
    (default: this machine's; ``HostOS.measure``).

    Returns (exit status, wall seconds, peak summed RSS of the tree's processes sampled every
    SAMPLE_SECONDS, largest single process's max RSS from wait4, which covers every descendant
    that was waited for; Linux counts the spawning process's resident pages to a child until it
    execs, so this process's own size is a floor of it). A command past ``timeout`` is killed
    (status -9).

    On Windows there is no /proc, wait4 or session: the command runs under ``cmd.exe``, a
    command past ``timeout`` has its process tree killed (``taskkill /T /F``, status -9 all the
    same), and memory is not measured: both peaks are 0.
    """
    return host.measure(command, cwd=cwd, env=env, log=log, timeout=timeout,
                        sample=SAMPLE_SECONDS)


def first_error(text: str) -> str | None:
    """The compiler's first error in a unit's output (file:line: message), else the first line
    that says error or fatal."""
    if found := failing_file(text):
        return found
    for line in text.splitlines()[1:]:
        if re.search(r"\berror\b|\bfatal\b", line, re.I):
            return line.strip()[:240]
    return None


def _gib(n: int) -> float:
    return round(n / 2**30, 2)


def compile_units(units: list[Unit], env: dict[str, str], logs: Path, progress: Progress,
                  *, timeout: float = UNIT_TIMEOUT) -> list[UnitResult]:
    """Compile each unit with its recorded command line, one at a time, and measure it."""
    logs.mkdir(parents=True, exist_ok=True)
    results = []
    for i, unit in enumerate(units, 1):
        unit.output.parent.mkdir(parents=True, exist_ok=True)
        unit.output.unlink(missing_ok=True)   # the stand-in object, or an earlier probe's
        log = logs / (re.sub(r"[^A-Za-z0-9_.-]", "_", unit.name) + ".log")
        progress.say(f"unit {i}/{len(units)}: {unit.name} ...")
        status, seconds, tree, single = measure(unit.command, cwd=unit.directory, env=env,
                                                log=log, timeout=timeout)
        ok = status == 0 and unit.output.is_file()
        result = UnitResult(unit.name, unit.kind, ok, round(seconds, 1), _gib(tree),
                            _gib(single), status, str(log),
                            load_average=round(os.getloadavg()[0], 1))
        if not ok:
            text = log.read_text(errors="replace")
            result.first_error = (first_error(text) or f"exit {status}, no error line"
                                  if status != -9 else f"killed after {timeout:.0f} s")
        progress.say(f"unit {i}/{len(units)}: {unit.name} "
                     f"{'ok' if ok else 'FAILED'} in {seconds:.0f} s, peak {_gib(tree)} GiB"
                     + ("" if ok else f": {result.first_error}"))
        results.append(result)
    return results


def judge_memory(report: ProbeReport, recipe: Recipe) -> None:
    """Fill in the per-thread peak, the job_memory_gib it supports and the verdict on the
    recipe's figure."""
    done = [u for u in report.units if u.ok]
    if not done:
        return
    # A CUDA unit runs up to this many cicc/ptxas at once; a C++ unit is one compiler process,
    # and a build reserves at least one thread's worth for it.
    in_flight = min(report.nvcc_threads, max(1, len(report.archs)))
    per_thread = max(u.peak_tree_gib / (in_flight if u.kind == "cuda" else 1) for u in done)
    supported = math.ceil(per_thread / MEMORY_STEP) * MEMORY_STEP
    report.per_thread_gib = round(per_thread, 2)
    report.supported_job_memory_gib = supported
    have = recipe.build.job_memory_gib
    if have >= per_thread:
        report.memory_verdict = (f"the recipe's job_memory_gib {have:g} covers the measured "
                                 f"{per_thread:.2f} GiB per nvcc thread or C++ compile")
    else:
        report.memory_verdict = (f"the recipe's job_memory_gib {have:g} is below the measured "
                                 f"{per_thread:.2f} GiB per nvcc thread or C++ compile: raise "
                                 f"it to {supported:g} in {recipe.path}")


@dataclass(frozen=True)
class ProbeRequest:
    """What ``python -m tools.probe`` asks of a probe."""

    #: The units to compile (file names or paths); empty: the recipe's ``probe.units``, else
    #: the heaviest ``count`` found.
    units: tuple[str, ...] = ()
    count: int = DEFAULT_COUNT
    #: ``--archs``; None: the cell's.
    archs: str | None = None
    inputs: Inputs = Inputs()
    work_root: Path = DEFAULT_WORK
    #: This machine's memory, for the check before anything runs (None: measured).
    available_gib: float | None = None
    unit_timeout: float = UNIT_TIMEOUT
    stream: TextIO | None = None


def probe_cell(job: BuildJob, request: ProbeRequest = ProbeRequest()) -> ProbeReport:
    """Probe one planned cell (see the module docstring); the report is also written to
    ``<work_root>/<cell>/probe/probe.json``. Raises ProbeError (memory, no commands, unknown
    unit) or CompileError (a unit failed, each failure named) after writing the report."""
    cell, recipe = job.cell, job.recipe
    cell_archs = resolve_archs(cell, request.archs, job.table)
    check_memory(recipe, cell_archs, available_memory_gib() if request.available_gib is None
                 else request.available_gib)
    work = request.work_root / cell.id / "probe"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    progress = Progress(cell.id, PROBE_STEPS, request.stream or sys.stderr)
    report = ProbeReport(cell.id, list(cell_archs), min(threads_for(recipe), len(cell_archs)),
                         recipe.build.job_memory_gib)
    data: dict[str, Any] = {}
    with reporting_json(work / "probe.json", data, progress):
        try:
            _probe(job, request, cell_archs, report, work, progress, data)
        finally:
            data.update(asdict(report))
    return report


def _probe(job: BuildJob, request: ProbeRequest, archs: tuple[str, ...], report: ProbeReport,
           work: Path, progress: Progress, data: dict[str, Any]) -> None:
    cell, recipe = job.cell, job.recipe
    prelude = prepare(job, work, request.inputs, progress)
    nvcc, tree, bp = prelude.nvcc, prelude.source.tree, prelude.python
    data["torch"] = bp.torch_version
    # One job, and one nvcc thread unless the package fixes its own: the figures are per thread.
    sizing = size_jobs(cores=1, available_gib=available_memory_gib(),
                       job_memory_gib=recipe.build.job_memory_gib, nvcc_threads=1,
                       archs=len(archs))
    env = build_env(recipe, cell, sizing, archs=archs, cuda_home=nvcc.cuda_home)
    data["env"] = env

    def commands(step):
        found = capture_commands(bp.python, tree, env, work, isolation=recipe.build.isolation)
        step.detail.update(recorded=len(found))
        return found

    found = progress.run("commands", commands)
    report.commands_recorded = len(found)
    units = request.units
    where = "--units" if units else f"{recipe.path} (probe.units)"
    chosen, report.selection = select_units(found, units or (recipe.probe.units if recipe.probe
                                                             else ()),
                                            count=request.count, tree=tree, where=where)
    progress.say(f"units ({report.selection}): {', '.join(u.name for u in chosen)}")

    def compile_(step):
        results = compile_units(chosen, build_process_env(bp.python, env), work / "units",
                                progress, timeout=request.unit_timeout)
        step.detail.update(units=[asdict(r) for r in results])
        report.units = results
        judge_memory(report, recipe)
        failed = [r for r in results if not r.ok]
        if failed:
            raise CompileError(
                "; ".join(f"{r.unit} failed: {r.first_error} (log: {r.log})" for r in failed),
                hint="read the unit's log; a patch or a flag in the recipe may be needed for "
                     "this CUDA/torch version")
        report.verdict = "passed"

    progress.run("compile", compile_)


def format_report(report: ProbeReport) -> str:
    """The report as a few lines of text for a person."""
    lines = [f"probe {report.cell}: {report.verdict} (archs {','.join(report.archs)}, "
             f"{report.nvcc_threads} nvcc thread(s); {report.selection})"]
    for u in report.units:
        state = "ok    " if u.ok else "FAILED"
        lines.append(f"  {state} {u.unit}: {u.seconds:.0f} s, peak {u.peak_tree_gib:.2f} GiB "
                     f"(process tree), {u.peak_process_gib:.2f} GiB (largest process)"
                     + ("" if u.ok else f"\n         first error: {u.first_error}"))
    if report.supported_job_memory_gib is not None:
        lines.append(f"  job_memory_gib supported: {report.supported_job_memory_gib:g} "
                     f"({report.memory_verdict})")
    return "\n".join(lines)


#: The header of the probe table (docs/contributing/probes.md) (``--summary``).
TABLE_HEADER = ("| recipe | torch | probe | seconds per unit | peak GiB per unit "
                "| need / recipe's job_memory_gib |\n|---|---|---|---|---|---|")


def table_rows(root: Path, recipes_root: Path = RECIPES_DIR) -> list[str]:
    """One markdown row per ``probe.json`` under ``root`` (a ``--work`` directory): recipe and the
    version of the sdist probed, torch, verdict, each unit's seconds and peak (in the order the
    probe compiled them: CUDA units first), and the per-thread need against the recipe's
    job_memory_gib now (the one recorded at the probe when the recipe is gone). Sorted by
    recipe, newest torch first."""
    rows, recipes = [], {}
    for path in sorted(root.glob("*/probe/probe.json")):
        data = json.loads(path.read_text())
        report = read_report(path)
        package = report.cell.split("-")[0]
        if package not in recipes:
            folder = recipes_root / package
            recipes[package] = (load_recipe(folder).build.job_memory_gib
                                if (folder / "recipe.yaml").is_file()
                                else report.recipe_job_memory_gib)
        sdist = next((s.get("detail", {}).get("sdist", "") for s in data.get("steps", [])
                      if s.get("name") == "source"), "")
        version = sdist.removesuffix(".tar.gz").rpartition("-")[2] or "?"
        torch = str(data.get("torch", "?")).split("+")[0]
        names = ", ".join(f"`{Path(u.unit).name}`" for u in report.units)
        seconds = " + ".join(f"{u.seconds:.0f}" for u in report.units)
        peaks = " / ".join(f"{u.peak_tree_gib:.2f}" for u in report.units)
        need = "-" if report.per_thread_gib is None else f"{report.per_thread_gib:.2f}"
        failed = [u for u in report.units if not u.ok]
        verdict = report.verdict + (f": `{Path(failed[0].unit).name}`" if failed else "")
        key = (package, tuple(-int(x) for x in re.findall(r"\d+", torch)))
        rows.append((key, f"| {package} {version} | {torch} | {verdict} | {seconds} ({names}) "
                          f"| {peaks} | {need} / {recipes[package]:g} |"))
    return [row for _, row in sorted(rows)]


def read_report(path: Path) -> ProbeReport:
    """The probe's findings as a ``probe.json`` holds them (the steps it also holds left out)."""
    data = json.loads(path.read_text())
    fields = {f for f in ProbeReport.__dataclass_fields__}
    out = {k: v for k, v in data.items() if k in fields}
    out["units"] = [UnitResult(**u) for u in out.get("units", [])]
    return ProbeReport(**out)
