"""The staged release: compile groups, their kernel shards and the cells, each job estimated.

A release runs in stages: the **shards** of every compile group that needs them (each compiles
part of the group's CUDA units into a cache of its own, ``python -m tools.shard run``), then the
**cells** (each reads its group's shard caches, so only its Python-dependent units, the link and
the checks run; ``python -m tools.build CELL --shard-caches DIR``). Every job is estimated for the
runner its recipe is planned on (``tools.plan.runners``), and the plan refuses to exceed a limit
of GitHub's or of the runner's.

**The estimate.** A job is its runner's stated setup (``setup_minutes``: the builder image, the
tools, the cell's torch) plus its compile plus, for a cell, the finish (:data:`FINISH_MINUTES`).
The compile comes from the recipe's unit list (``tools.plan.groups.UnitList``: each unit's
seconds per arch, measured by the probe where it measured the unit, else the kind's stated cost)
and the job sizing a build on that runner gets (``tools.plan.sizing.size_jobs`` with the runner's
cores and build memory and the recipe's ``job_memory_gib``, ``nvcc_threads`` and archs):
``MAX_JOBS`` jobs of ``min(threads, archs)`` nvcc threads each, at most one a core, are the
compiles in flight (:func:`streams`). CUDA units take ``seconds x archs / streams``, but never
less than the longest unit alone (``seconds x ceil(archs / threads)``); the other units (C++,
compiled in every cell) take ``seconds / min(cores, MAX_JOBS)``, never less than the longest. A
kernel unit a cell reads from a shard's cache costs :data:`CACHE_HIT_SECONDS`. A recipe without a
unit list is estimated by :data:`NO_UNITS_SECONDS_PER_ARCH`.

**Cell jobs.** A group's cells are built by **cell jobs**, each of one or more of its cells one
after another after one setup (``python -m tools.build`` once a cell, in the same job): the
builder image is pulled and the tools installed once, and each further cell costs only its own
torch and container (:data:`NEXT_CELL_MINUTES`) besides its compile and finish. The cells of a
group share everything the setup prepares (platform, CUDA, image, shards), and differ in their
Python and, in a group that spans torch series, their torch. A group's cells are split into the
fewest jobs whose every one fits the runner's budget, as evenly as they go
(:func:`pack_cells`): a cell that needs the whole budget is a job of its own, as before.

**How many shards.** A group whose one cell (compiling everything) fits its runner's budget needs
no shards: each of its cells compiles its kernels. A group whose kernels several torch series
share (``tools.plan.groups.kernel_span``) gets one shard anyway when that costs fewer
runner-hours: one shard compiling the kernels once, plus every cell reading them, against every
cell compiling them; so does a group whose CUDA units were measured to include no Python
header (``tools.plan.groups.python_free``), whose cells, one per Python, compile the same
kernels. Otherwise its CUDA units are split (``tools.plan.groups.split``, the split ``python
-m tools.shard run`` makes) into the fewest shards whose every job fits the budget, starting
from ``ceil(kernel hours / (budget - setup))``.
A unit that doesn't fit a shard of its own, or a cell that doesn't fit even with every kernel
from the shards, is a PlanError naming the group, the runner and the budget.

**Matrices.** The shard jobs are one matrix and the cell jobs :data:`CELL_MATRICES`, each at
most :data:`MATRIX_LIMIT` jobs, GitHub's limit; a plan over it is a PlanError naming the limit and
the group where it was crossed. GitHub's ``needs`` waits for a whole job, every entry of its
matrix, so the cell jobs are ordered by what they wait for: ``cells1`` holds those that read no
shard (in plan order, at most 256), which start at once, beside the shards; ``cells2`` those that
read shards, and those of the first kind that did not fit ``cells1``, which start when every
shard has finished.

**Platforms.** Each wheel platform has matrices of its own, named with its id part
(``tools.core.variant.PLATFORM_PART``): ``shards``, ``cells1`` and ``cells2`` for Linux x86_64,
``shards_aarch64``, ``cells1_aarch64``, ``cells2_aarch64`` for Linux aarch64, ``..._win`` for
Windows, each within GitHub's limit on its own: a platform's jobs run on its own runners (and
the Windows ones with other steps), and a compile group never spans two platforms (a group id
keeps the cell id's platform part).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tools.core.errors import PlanError
from tools.core.variant import DEFAULT_PLATFORM, PLATFORM_PART
from tools.core.variant import job_id, shard_id
from .groups import Group, UnitList, cell_group, groups, read_units, split
from .cells import Cell
from .recipes.model import Recipe
from .runners import Runner, Runners
from .sizing import Sizing, size_jobs
from .stored import stored_why

#: GitHub runs at most this many jobs from one matrix (docs.github.com, "Running variations of
#: jobs in a workflow": "A matrix will generate a maximum of 256 jobs per workflow run").
MATRIX_LIMIT = 256
#: The cell matrices the workflow has per platform (jobs cells1 and cells2 of wheels.yml, and
#: their per-platform twins): room for 512 cell jobs a platform, 150 on Linux x86_64 today (see
#: the module docstring for which go where).
CELL_MATRICES = 2
#: A cell's finish, stated: the link, repair, inspection, metadata and import check. The full
#: mamba_ssm build (docs/contributing/probes.md, "What the probes found") spent 10 s repairing, inspecting and
#: labelling and 60 s on the import check; linking a large extension takes minutes. 10 minutes.
FINISH_MINUTES = 10
#: A kernel unit a cell reads from a shard's cache, stated: the causal_conv1d benchmark
#: (docs/design/compiler-cache.md) read its three kernel units from a cache in 12 s together.
CACHE_HIT_SECONDS = 4
#: A cell job's each cell after its first, on top of that cell's compile and finish, stated:
#: the job's setup (the builder image, about 9 GB compressed, and the tools) is done once, but
#: each cell installs its own torch (one wheel of about 1 GB for its Python and series: the
#: NVIDIA libraries it requires are py3 wheels, the same files for every Python, which pip's
#: cache already holds) and starts its own container: 10 minutes.
NEXT_CELL_MINUTES = 10
#: A recipe with no unit list, stated: the full mamba_ssm build compiled for 43 min 23 s for one
#: arch with one job (docs/contributing/probes.md, "What the probes found"), so 2603 s per arch of compile, divided
#: among the compiles in flight.
NO_UNITS_SECONDS_PER_ARCH = 2603


@dataclass(frozen=True)
class GroupPlan:
    """One compile group as planned: its runner, sizing, shards and estimates, and why it has
    the shards it has."""

    group: Group
    runner: Runner
    sizing: Sizing
    archs: tuple[str, ...]
    units: UnitList | None
    #: The units of each shard (none: the cells compile everything).
    shards: tuple[tuple[str, ...], ...]
    shard_hours: tuple[float, ...]
    #: One cell of the group as planned (reading the shards when there are any).
    cell_hours: float
    #: One cell compiling everything: the job a plan of one job per cell would have.
    whole_hours: float
    why: str
    #: Its cells read every kernel from the kernel store (``tools.plan.stored``): no shards.
    stored: bool = False
    #: Its cell jobs (:func:`pack_cells`), each the ids of the cells it builds in order, and
    #: each one's estimate; empty until :func:`plan_group` packs them.
    jobs: tuple[tuple[str, ...], ...] = ()
    job_hours: tuple[float, ...] = ()

    @property
    def hours(self) -> float:
        """The runner-hours of the group as planned: every shard and every cell job."""
        return sum(self.shard_hours) + sum(self.job_hours)

    @property
    def per_cell_hours(self) -> float:
        """The runner-hours of the group with one job per cell and no shards."""
        return self.whole_hours * len(self.group.cells)


def streams(sizing: Sizing, archs: int) -> int:
    """Compiles in flight: ``MAX_JOBS`` jobs of ``min(threads, archs)`` nvcc threads, at most
    one a core."""
    return max(1, min(sizing.cores, sizing.max_jobs * min(sizing.nvcc_threads, max(1, archs))))


def cuda_seconds(units: UnitList, names: tuple[str, ...], sizing: Sizing,
                 archs: tuple[str, ...]) -> float:
    """The wall seconds of compiling the CUDA units ``names`` for the cell's ``archs`` (see
    the module docstring; a unit the unit list gives archs of its own, ``unit_archs``,
    compiles for those of them the cell has)."""
    if not names:
        return 0.0
    total = sum(units.unit_seconds(u, archs) for u in names)
    threads = max(1, min(sizing.nvcc_threads, max(1, len(archs))))
    longest = max(units.seconds(u) * math.ceil(max(1, units.archs_of(u, archs)) / threads)
                  for u in names)
    return max(total / streams(sizing, len(archs)), longest)


def cell_unit_seconds(units: UnitList, sizing: Sizing) -> float:
    """The wall seconds of the units every cell compiles itself (all but the CUDA ones)."""
    names = [(u, kind) for kind, listed in units.units.items() if kind != "cuda"
             for u in listed]
    if not names:
        return 0.0
    seconds = [units.seconds(u, kind) for u, kind in names]
    return max(sum(seconds) / max(1, min(sizing.cores, sizing.max_jobs)), max(seconds))


def reading_hours(runner: Runner, units: UnitList, sizing: Sizing) -> float:
    """One cell reading every kernel from a cache (shards, the kernel store): the runner's
    setup, a hit per kernel, the units every cell compiles, the finish."""
    return (runner.setup_hours
            + _hours(CACHE_HIT_SECONDS * len(units.sharded()) / max(1, sizing.max_jobs))
            + _hours(cell_unit_seconds(units, sizing)) + FINISH_MINUTES / 60)


def _hours(seconds: float) -> float:
    return seconds / 3600


def job_hours(cells: int, first: float, setup: float) -> float:
    """A cell job of ``cells`` cells whose one alone is ``first`` hours (``setup`` of them the
    runner's setup): the setup once, each further cell its compile, finish and
    :data:`NEXT_CELL_MINUTES`."""
    return first + (cells - 1) * (first - setup + NEXT_CELL_MINUTES / 60)


def pack_cells(cells: tuple[str, ...], first: float, setup: float,
               budget: float) -> tuple[tuple[str, ...], ...]:
    """``cells`` (in order) as the fewest cell jobs whose every one fits ``budget`` hours, their
    sizes differing by one at most (see the module docstring); a cell alone over the budget is
    still a job of its own (the plan refuses it elsewhere)."""
    if not cells:
        return ()
    count = next((k for k in range(1, len(cells) + 1)
                  if job_hours(math.ceil(len(cells) / k), first, setup) <= budget), len(cells))
    size, extra = divmod(len(cells), count)
    out, at = [], 0
    for k in range(count):
        n = size + (1 if k < extra else 0)
        out.append(tuple(cells[at:at + n]))
        at += n
    return tuple(out)


def plan_group(group: Group, recipe: Recipe, runner: Runner, archs: tuple[str, ...],
               units: UnitList | None, stored: bool = False) -> GroupPlan:
    """Size one group for its runner: its shards, its cell jobs and every job's estimate (see
    the module docstring); PlanError when a job can't fit the runner's budget. ``stored``: the
    kernel store holds every kernel unit of the group's key (``tools.plan.stored``)."""
    planned = _sized(group, recipe, runner, archs, units, stored)
    setup = runner.setup_hours
    jobs = pack_cells(group.cells, planned.cell_hours, setup, runner.budget_hours)
    return replace(planned, jobs=jobs,
                   job_hours=tuple(job_hours(len(j), planned.cell_hours, setup) for j in jobs))


def _sized(group: Group, recipe: Recipe, runner: Runner, archs: tuple[str, ...],
           units: UnitList | None, stored: bool) -> GroupPlan:
    """The group's shards and one cell's estimate, before its cells are packed into jobs."""
    sizing = size_jobs(cores=runner.cores, available_gib=runner.build_memory_gib,
                       job_memory_gib=recipe.build.job_memory_gib,
                       nvcc_threads=recipe.build.nvcc_threads,
                       fixed_threads=recipe.build.nvcc_threads_fixed, archs=len(archs))
    setup, finish, budget = runner.setup_hours, FINISH_MINUTES / 60, runner.budget_hours
    on = f"on {runner.label} ({runner.cores} cores, {runner.build_memory_gib:g} GiB for the build)"
    if units is None:
        compile_h = _hours(NO_UNITS_SECONDS_PER_ARCH * len(archs) / streams(sizing, len(archs)))
        whole = setup + compile_h + finish
        if whole > budget:
            raise PlanError(
                f"{group.id}: one cell is estimated at {whole:.1f} h {on}, over the "
                f"{budget:g} h budget per job, and {recipe.package} has no unit list to shard",
                hint=f"write it: python -m tools.shard units {group.cells[0]} --write")
        return GroupPlan(group, runner, sizing, archs, None, (), (), whole, whole,
                         f"no unit list: each cell compiles everything, estimated by the stated "
                         f"rule ({NO_UNITS_SECONDS_PER_ARCH} s per arch)")
    kernels = units.sharded()
    cell_units = _hours(cell_unit_seconds(units, sizing))
    whole = setup + _hours(cuda_seconds(units, kernels, sizing, archs)) + cell_units + finish
    cell = reading_hours(runner, units, sizing)
    cells = len(group.cells)
    if stored and cell <= budget:  # every kernel from the kernel store: as from shards, none run
        return GroupPlan(group, runner, sizing, archs, units, (), (), cell, whole,
                         stored_why(cell, budget, on), stored=True)
    if whole <= budget:
        # Fits without shards: a group whose kernels are measured to be the same for all its
        # cells (several torch series share them, or its CUDA units include no Python header)
        # still gets one when it compiles them once for all its cells instead of once per
        # cell (the shard's setup is the price). Unmeasured groups don't: a unit that includes
        # Python.h would miss in every other Python's cell.
        one = setup + _hours(cuda_seconds(units, kernels, sizing, archs))
        if not (group.shared or group.python_free) or one + cells * cell >= cells * whole:
            return GroupPlan(group, runner, sizing, archs, units, (), (), whole, whole,
                             f"one cell fits the budget ({whole:.1f} of {budget:g} h {on}) and "
                             f"a shard would not save runner-hours: no shards, each cell "
                             f"compiles its kernels")
        return GroupPlan(group, runner, sizing, archs, units, (tuple(kernels),), (one,), cell,
                         whole, f"one cell fits the budget ({whole:.1f} of {budget:g} h {on}), "
                                 f"but its {cells} cells would compile the same kernels "
                                 f"{cells} times: one shard of {one:.1f} h compiles them once")
    if cell > budget:
        raise PlanError(f"{group.id}: a cell is estimated at {cell:.1f} h {on} even with every "
                        f"kernel from the shards, over the {budget:g} h budget per job",
                        hint="give the recipe a larger runner (packages: in the runner file)")
    loads = [(u, units.unit_seconds(u, archs)) for u in kernels]
    room = budget - setup
    start = max(1, math.ceil(_hours(cuda_seconds(units, kernels, sizing, archs)) / room))
    for count in range(min(start, len(kernels)), len(kernels) + 1):
        parts = tuple(split(loads, count))
        hours = tuple(setup + _hours(cuda_seconds(units, part, sizing, archs))
                      for part in parts)
        if max(hours) <= budget:
            return GroupPlan(group, runner, sizing, archs, units, parts, hours, cell, whole,
                             f"one cell compiling everything is {whole:.1f} h {on}, over the "
                             f"{budget:g} h budget: {len(parts)} shards of at most "
                             f"{max(hours):.1f} h")
    heavy = max(kernels, key=units.seconds)
    raise PlanError(f"{group.id}: its unit {heavy} alone is a shard of {max(hours):.1f} h {on}, "
                    f"over the {budget:g} h budget per job",
                    hint="give the recipe a larger runner (packages: in the runner file), or "
                         "fewer archs")


@dataclass(frozen=True)
class Release:
    """Every stage of a release: the groups as planned, and the cells in plan order."""

    groups: tuple[GroupPlan, ...]
    cells: tuple[Cell, ...]
    #: Per group id, its first cell in the full plan, where the release plans a selection.
    toolchain_cells: dict[str, Cell]

    def cell(self, cell_id: str) -> Cell:
        """The planned cell with this id."""
        return next(c for c in self.cells if c.id == cell_id)

    def group_of(self) -> dict[str, GroupPlan]:
        """Each cell id's group plan."""
        return {cid: g for g in self.groups for cid in g.group.cells}

    def shard_jobs(self) -> list[dict]:
        """One matrix entry per shard: what ``python -m tools.shard run`` and its job need. Its
        ``cell`` is the one whose toolchain and Python the shard compiles with, as ``python -m
        tools.shard run`` takes it: the group's first cell in the full plan."""
        out = []
        for g in self.groups:
            first = self.toolchain_cells.get(g.group.id) or self.cell(g.group.cells[0])
            for k, (part, hours) in enumerate(zip(g.shards, g.shard_hours), 1):
                sid = shard_id(g.group.id, k)
                out.append({"id": sid, "group": g.group.id, "key": g.group.key,
                            "package": g.group.package, "platform": first.platform,
                            "shard": k, "of": len(g.shards),
                            "cell": first.id, "python": first.python, "cuda": first.cuda,
                            "image": first.image, "archs": list(g.archs), "units": len(part),
                            "runner": g.runner.label, "estimate_hours": round(hours, 2),
                            "budget_minutes": round(g.runner.budget_hours * 60),
                            "cache_key": f"shard-{sid}-{g.group.key}-of{len(g.shards)}"})
        return out

    def cell_jobs(self) -> list[dict]:
        """One matrix entry per cell job (:func:`pack_cells`): its id (``<group>-job<k>``), what
        its cells share (group, platform, image, CUDA, the shards they read, runner, budget, the
        compiler cache's key prefix of its first cell, :func:`ccache_prefix`), its estimate, and
        ``cells``: each cell's fields and estimate alone, in the order the job builds them."""
        cell_of = {c.id: c for c in self.cells}
        out = []
        for g in self.groups:
            shards = [shard_id(g.group.id, k) for k in range(1, len(g.shards) + 1)]
            for k, (ids, hours) in enumerate(zip(g.jobs, g.job_hours), 1):
                first = cell_of[ids[0]]
                out.append({"id": job_id(g.group.id, k), "group": g.group.id,
                            "package": g.group.package, "platform": first.platform,
                            "image": first.image, "cuda": first.cuda, "python": first.python,
                            "shards": shards, "runner": g.runner.label,
                            "estimate_hours": round(hours, 2),
                            "budget_minutes": round(g.runner.budget_hours * 60),
                            "ccache_prefix": ccache_prefix(first),
                            "cells": [{**cell_of[c].to_json(),
                                       "estimate_hours": round(g.cell_hours, 2)} for c in ids]})
        return out

    def matrices(self) -> dict[str, dict]:
        """Every stage's matrices, each ``{"include": [...]}``, per platform (:func:`matrix_key`,
        every platform's keys, empty where it has no job): ``shards``, ``cells1`` (cells that
        read no shard) and ``cells2`` (the cells that read shards, and the overflow of
        ``cells1``); PlanError naming GitHub's limit and the group where a matrix would cross
        it."""
        shards, cells = self.shard_jobs(), self.cell_jobs()
        out: dict[str, dict] = {}
        for platform in PLATFORM_PART:
            mine = platform_matrices([j for j in shards if j["platform"] == platform],
                                     [j for j in cells if j["platform"] == platform],
                                     MATRIX_LIMIT)
            out.update({matrix_key(name, platform): m for name, m in mine.items()})
        return out

    def hours(self) -> tuple[float, float]:
        """The estimated runner-hours of the release as planned, and with one job per cell and
        no shards."""
        return (sum(g.hours for g in self.groups), sum(g.per_cell_hours for g in self.groups))


def ccache_prefix(cell: Cell) -> str:
    """The key prefix of a cell's compiler cache in CI (wheels.yml's cell jobs add
    ``-py<python>-<run>-<attempt>``, and restore another Python's cache by this prefix): the
    package, CUDA and torch series, ``ccache-flash_attn-cu12.8-torch2.10`` on Linux x86_64 (the
    keys CI has always used), with the platform after ``ccache-`` on the others
    (``ccache-linux_aarch64-flash_attn-...``), so that no platform's prefix is the start of
    another platform's key: an aarch64 or Windows build never restores x86_64 objects."""
    where = "" if cell.platform == DEFAULT_PLATFORM else f"{cell.platform}-"
    return f"ccache-{where}{cell.package}-cu{cell.cuda}-torch{cell.torch}"


def matrix_key(name: str, platform: str) -> str:
    """The key of one platform's matrix in ``--format github``: ``cells1`` for Linux x86_64,
    ``cells1_aarch64`` for Linux aarch64 (``tools.core.variant.PLATFORM_PART``)."""
    part = PLATFORM_PART[platform]
    return f"{name}_{part}" if part else name


def platform_matrices(shards: list[dict], jobs: list[dict], limit: int) -> dict[str, dict]:
    """One platform's ``shards``, ``cells1`` and ``cells2`` (see Release.matrices), each matrix
    at most ``limit`` jobs (GitHub's, or a limits file's)."""
    if len(shards) > limit:
        over = shards[limit]["group"]
        raise PlanError(f"the shard matrix would hold {len(shards)} jobs, over GitHub's limit "
                        f"of {limit} per matrix (crossed at group {over})",
                        hint=_FEWER)
    # The cells that wait for nothing first: the first matrix needs no shard.
    cells = [j for j in jobs if not j["shards"]] + [j for j in jobs if j["shards"]]
    free = min(limit, sum(1 for j in cells if not j["shards"]))
    rest, room = cells[free:], (CELL_MATRICES - 1) * limit
    if len(rest) > room:
        raise PlanError(f"the cells would need more than {CELL_MATRICES} matrices of GitHub's "
                        f"limit of {limit} jobs: {len(rest) - room} too many (crossed "
                        f"at group {rest[room]['group']})",
                        hint=_FEWER + "; or add a cell job to wheels.yml and raise "
                                      "tools.plan.stages.CELL_MATRICES")
    out = {"shards": {"include": shards}, "cells1": {"include": cells[:free]}}
    for i in range(1, CELL_MATRICES):
        out[f"cells{i + 1}"] = {"include": rest[(i - 1) * limit:i * limit]}
    return out


_FEWER = ("plan fewer cells in one run (--package, --cuda, --torch, --cap), or give the heaviest "
          "recipes larger runners (packages: in the runner file)")


def plan_release(cells: list[Cell], recipes: list[Recipe], runners: Runners,
                 everything: list[Cell] | None = None,
                 stored: frozenset[str] = frozenset()) -> Release:
    """The staged plan of ``cells``: their compile groups sized for each recipe's runner.
    ``everything``: the full plan ``cells`` were selected from, whose first cell of a group is
    the one ``python -m tools.shard run`` compiles the group's shards with. ``stored``: the
    group keys whose every kernel unit the kernel store holds (``tools.plan.stored``)."""
    by_package = {r.package: r for r in recipes}
    units = {p: read_units(by_package[p]) for p in dict.fromkeys(c.package for c in cells)}
    cell_of = {c.id: c for c in cells}
    planned = tuple(
        plan_group(g, by_package[g.package], runners.for_package(g.package, cell_of[g.cells[0]].platform),
                   cell_of[g.cells[0]].archs, units[g.package], g.key in stored)
        for g in groups(cells, recipes))
    return Release(planned, tuple(cells), toolchain_cells(everything or cells, recipes))


def toolchain_cells(everything: list[Cell], recipes: list[Recipe]) -> dict[str, Cell]:
    """Per group id, the group's first cell in the full plan: the one whose toolchain, Python
    and torch ``python -m tools.shard run`` compiles the group's shards with."""
    by_package = {r.package: r for r in recipes}
    out: dict[str, Cell] = {}
    for cell in everything:
        out.setdefault(cell_group(cell, by_package[cell.package]), cell)
    return out
