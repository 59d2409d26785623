"""A kernel shard: one part of a compile group's CUDA units, compiled into a cache of its own.

``python -m tools.shard run GROUP --shard K/N`` runs the group's first cell's real toolchain,
source and python steps (the kernel units don't depend on the Python, so any of the group's
Pythons gives the same objects), reads the package's own compile commands the way the probe does
(``tools.probing.compdb``), with the compiler cache switched on exactly as a cell's build has it
(``tools.pipeline.ccache``), and compiles shard K's units (``tools.plan.groups.split``) with those
command lines, ``MAX_JOBS`` at a time. The results go only into the shard's cache directory
(ccache's file storage, which a cell then reads as remote storage, read-only).

The shard cache holds ``shard.json``: the group, its key, the shard, its units and, when it
finished, ``complete: true`` with each unit's seconds. It is written before the first unit
compiles, so a shard stopped half-way leaves a partial cache that says so; a cell uses what is
in it and compiles the rest.

Refused: a unit list that no longer matches the package's build (the sdist, a patch or a
variable changed since ``units.yaml`` was written), naming both sides of the difference.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from tools.backends.base import BuildOptions
from tools.backends.containerized import ContainerBackend
from tools.backends.shardninja import ContainerShard
from tools.core.errors import CompileError, PlanError
from tools.core.variant import shard_id
from tools.pipeline import ccache
from tools.pipeline.buildreport import BuildReport
from tools.pipeline.shardcache import ShardResult, write_record
from tools.pipeline.buildenv import (available_memory_gib, build_env, size_for,
                                     usable_cores)
from tools.pipeline.report import Progress, reporting
from tools.pipeline.build_toolchain import build_process_env
from tools.pipeline.prelude import prepare
from tools.plan.groups import UNITS_FILE, Group, UnitList, group_key, read_units, split
from tools.plan.job import BuildJob, Inputs
from tools.probing.compdb import Unit, capture_commands
from tools.probing.probe_build import UNIT_TIMEOUT, first_error, measure

SHARD_STEPS = ["toolchain", "source", "python", "commands", "compile"]


def shard_units(units: UnitList, count: int, archs: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The group's sharded units in ``count`` shards of about equal estimated time (the
    plan's split: ``tools.plan.stages``)."""
    return split([(u, units.unit_seconds(u, archs)) for u in units.sharded()], count)


def check_units(found: list[Unit], units: UnitList) -> list[Unit]:
    """The captured units the unit list shards, in its order; PlanError naming the difference
    when the package's build lists other CUDA units than ``units.yaml``."""
    by_name = {u.name: u for u in found if u.kind == "cuda"}
    planned = set(units.sharded())
    added, gone = sorted(set(by_name) - planned), sorted(planned - set(by_name))
    if added or gone:
        def some(names: list[str]) -> str:
            return ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8
                                           else "") if names else "none"
        raise PlanError(
            f"{units.path}: the package's build no longer compiles the units the plan shards: "
            f"in the build, not in the list: {some(added)}; in the list, not in the build: "
            f"{some(gone)}",
            hint="the sdist, a patch or a build variable changed since the list was written: "
                 "write it again with python -m tools.shard units <cell> --write")
    return [by_name[name] for name in units.sharded()]


@dataclass(frozen=True)
class ShardTarget:
    """What a shard build makes: shard ``index`` of ``count`` of ``group``, compiled with the
    toolchain and Python of ``job``'s cell (one of the group's) for ``archs``."""

    group: Group
    index: int
    count: int
    job: BuildJob
    archs: tuple[str, ...]

    @property
    def id(self) -> str:
        """The shard's id (``<group>-shard<k>``): its cache's and its work directory's name."""
        return shard_id(self.group.id, self.index)


def run_shard(target: ShardTarget, *, work_root: Path, cache_root: Path,
              inputs: Inputs = Inputs(), unit_timeout: float = UNIT_TIMEOUT,
              stream: TextIO | None = None) -> ShardResult:
    """Compile ``target`` into ``<cache_root>/<shard id>``; the build report, with the shard's
    record as its ``shard``, goes to ``<work_root>/<shard id>/report.json``. PlanError when the recipe has no unit list or the
    build's units differ from it; CompileError naming each unit that failed."""
    group, index, count, archs = target.group, target.index, target.count, target.archs
    cell, recipe = target.job.cell, target.job.recipe
    units = read_units(recipe)
    if units is None:
        raise PlanError(f"{recipe.folder}: no {UNITS_FILE}, so {group.id} has no shards",
                        hint=f"write it: python -m tools.shard units {cell.id} --write")
    if not 1 <= index <= count:
        raise PlanError(f"shard {index}/{count}: K must be from 1 to N")
    if group_key(cell, recipe) != group.key or cell.id not in group.cells:
        raise PlanError(f"{cell.id} is not a cell of {group.id}")
    parts = shard_units(units, count, tuple(archs))
    if index > len(parts):
        raise PlanError(f"{group.id} has {len(units.sharded())} units, so at most "
                        f"{len(parts)} shards, not {count}")
    mine = parts[index - 1]
    sid = target.id
    work, cache = work_root / sid, cache_root / sid
    work.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    progress = Progress(sid, SHARD_STEPS, stream or sys.stderr)
    report = ShardResult(sid, group.id, group.key, index, count, list(mine), list(archs),
                         estimate_seconds=round(sum(units.unit_seconds(u, tuple(archs))
                                                    for u in mine), 1))
    built = BuildReport(cell.id, "host", why="a kernel shard", archs=list(archs),
                        label=cell.label, shard=report)
    with reporting(work / "report.json", built, progress):
        try:
            _run(report, target, units, work, cache, progress, inputs, unit_timeout)
        finally:
            built.verdict = report.verdict
    return report


def _run(report: ShardResult, target: ShardTarget, units: UnitList, work: Path, cache: Path,
         progress: Progress, inputs: Inputs, unit_timeout: float) -> None:
    cell, recipe, archs = target.job.cell, target.job.recipe, target.archs
    prelude = prepare(target.job, work, inputs, progress)
    nvcc, tree, bp = prelude.nvcc, prelude.source.tree, prelude.python
    sizing = size_for(recipe, archs, cores=usable_cores(), available_gib=available_memory_gib())
    env = build_env(recipe, cell, sizing, archs=archs, cuda_home=nvcc.cuda_home)
    # A cell reads the shards only if its command lines are the shard's: the one variable that
    # reaches them and depends on the machine (nvcc's --threads) is recorded for the cells.
    report.env = {k: env[k] for k in ("NVCC_THREADS",) if k in env}
    scratch = work / "ccache-local"
    shutil.rmtree(scratch, ignore_errors=True)
    setup = ccache.prepare(work, site=ccache.site_packages(bp.python),
                           cuda_home=nvcc.cuda_home, directory=scratch)
    cached_env = {**env, **setup.env, **ccache.shard_writer_env(cache)}

    def commands(step):
        found = capture_commands(bp.python, tree, cached_env, work,
                                 isolation=recipe.build.isolation)
        step.detail.update(recorded=len(found))
        return check_units(found, units)

    planned = {u.name: u for u in progress.run("commands", commands)}
    chosen = [planned[name] for name in report.units]
    write_record(cache, report)   # before the first unit: a stopped shard says it is partial
    progress.say(f"sizing: {sizing.note}; {len(chosen)} unit(s), estimated "
                 f"{report.estimate_seconds / 3600:.2f} h on the runner the plan was made for")

    def compile_(step):
        process_env = build_process_env(bp.python, cached_env,
                                        first_on_path=setup.path_prefix)
        failures = _compile(chosen, process_env, work / "units", progress, report,
                            jobs=sizing.max_jobs, timeout=unit_timeout)
        step.detail.update(seconds=report.seconds, jobs=sizing.max_jobs,
                           stats=ccache.unit_results(setup.stats_log))
        if failures:
            raise CompileError("; ".join(failures),
                               hint="read the unit's log; the same unit fails in the cells")
        report.complete, report.verdict = True, "passed"
        write_record(cache, report)

    progress.run("compile", compile_)


def _compile(units: list[Unit], env: dict[str, str], logs: Path, progress: Progress,
             report: ShardResult, *, jobs: int, timeout: float) -> list[str]:
    """Compile ``units`` with their recorded command lines, ``jobs`` at a time; each unit's
    seconds go into ``report``; returns one line per failed unit."""
    logs.mkdir(parents=True, exist_ok=True)
    total, done, failures = len(units), [0], []
    start = time.monotonic()

    def one(unit: Unit) -> None:
        unit.output.parent.mkdir(parents=True, exist_ok=True)
        unit.output.unlink(missing_ok=True)   # the capture's stand-in object
        log = logs / (re.sub(r"[^A-Za-z0-9_.-]", "_", unit.name) + ".log")
        status, seconds, _tree, _single = measure(unit.command, cwd=unit.directory, env=env,
                                                  log=log, timeout=timeout)
        done[0] += 1
        if status == 0 and unit.output.is_file():
            report.seconds[unit.name] = round(seconds, 1)
            progress.say(f"unit {done[0]}/{total}: {unit.name} in {seconds:.0f} s "
                         f"({(time.monotonic() - start) / 60:.1f} min so far)")
        else:
            text = log.read_text(errors="replace")
            why = first_error(text) or f"exit {status}"
            failures.append(f"{unit.name} failed: {why} (log: {log})")
            progress.say(f"unit {done[0]}/{total}: {unit.name} FAILED: {why}")

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, units))
    return failures


def run_container_shard(target: ShardTarget, *, work_root: Path, cache_root: Path,
                        engine: str | None = None, image: str | None = None,
                        inputs: Inputs = Inputs(), stream: TextIO | None = None
                        ) -> ShardResult:
    """Compile ``target`` through the container backend (``ContainerBackend.build_shard``): the
    cell's own cibuildwheel build in its image (``image``: another one; ``engine``: docker or
    podman), with a stand-in ninja that builds only the shard's objects
    (``tools.backends.shardninja``), so the command lines are exactly those of the group's
    container cells. Returns the shard's record as the container handed it back; the build
    report goes to ``<work_root>/<shard id>/report.json``."""
    group, index, count, archs = target.group, target.index, target.count, target.archs
    cell, recipe = target.job.cell, target.job.recipe
    units = read_units(recipe)
    if units is None:
        raise PlanError(f"{recipe.folder}: no {UNITS_FILE}, so {group.id} has no shards",
                        hint=f"write it: python -m tools.shard units {cell.id} --write")
    parts = shard_units(units, count, tuple(archs))
    if not 1 <= index <= len(parts):
        raise PlanError(f"{group.id} has {len(units.sharded())} units, so shards 1 to "
                        f"{len(parts)}, not {index}/{count}")
    sid = shard_id(group.id, index)
    mine = parts[index - 1]
    record = ShardResult(sid, group.id, group.key, index, count, list(mine), list(archs),
                         estimate_seconds=round(sum(units.unit_seconds(u, tuple(archs))
                                                    for u in mine), 1))
    backend = ContainerBackend(engine=engine, image=image)
    progress = Progress(sid, backend.steps, stream or sys.stderr)
    options = BuildOptions(archs=archs, out_dir=work_root / sid / "unused", work_root=work_root,
                           why="a kernel shard", sdist=inputs.sdist, sdist_dir=inputs.sdist_dir)
    # The backend works in <work_root>/<cell id>: a shard of that cell gets its own directory.
    return backend.build_shard(target.job, ContainerShard(cache_root / sid, record,
                                                          units.sharded()),
                               options=replace(options, work_root=work_root / sid),
                               progress=progress)
