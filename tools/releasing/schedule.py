"""The schedule: the backlog cut into runs, each within every limit of ``recipes/limits.yaml``.

**The rule.** The backlog's compile groups (``tools.plan.stages``: a group's shards and cells go
in one run, so that its cells read the shards of their own run) are taken in the policy's order:
by default newest torch series first, then the packages in the policy's ranking, then newest
CUDA, newest Python, and Linux x86_64 before aarch64 before Windows. A run takes each group in
that order that still fits every limit beside the groups it holds (first fit), so the highest
priority that fits is always in the next run. A group whose cells need another recipe's wheels
(torch_sparse needs torch_scatter's) waits until those are published, by an earlier run: its
cells then download them from the index instead of building them again. A group that can't fit
even an empty run (a wheel over the asset size or the disk, a job over the budget) is
**refused** by name, with the reason, and the rest drain.

**A run's figures** (:class:`RunFigures`), each checked against its limit: jobs per matrix,
the plan job's outputs in UTF-16 bytes (:mod:`tools.releasing.batch`, the real text), release
assets (a wheel and its ``.metadata``), a wheel's size, artifacts made (the wheels and the
reports of each cell job, a cache and a report per shard, the plan and the site), REST requests
(the release and publish jobs', and each cell job's lookup and download of its shard caches; no
more an hour over the run than the paced share) and content-creating ones, the hours the
release's pacing takes, cache bytes saved (cell jobs without shards save their compiler cache,
shards theirs), the disk its
release and publish jobs need for the wheels, its longest job, its wall hours
(:func:`wall_hours`: the jobs laid out at the account's concurrency and each matrix's
max-parallel) and its runner-hours (every job: plan, shards, cells, release, publish).

**Stated rules** (not measured on a runner; each figure says why): a wheel's size is its recipe's
``build.wheel_mib_per_arch`` (measured) times its archs, else :data:`DEFAULT_WHEEL_MIB_PER_ARCH`;
a compiler cache is about the size of the wheel's code it compiled (:data:`CACHE_SHARE`);
transfers run at :data:`TRANSFER_MIB_PER_S`; the small jobs' setup is
:data:`SMALL_JOB_SETUP_HOURS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from tools.builder.needs import is_wheel_of
from tools.core.errors import PlanError
from tools.core.platforms import tag_platform
from tools.core.variant import PLATFORM_PART
from tools.core.variant import job_id, shard_id
from tools.plan.groups import groups, read_units
from tools.plan.limits import Limits
from tools.plan.cells import Cell
from tools.plan.recipes.model import Recipe
from tools.plan.runners import Runners
from tools.plan.stages import GroupPlan, Release, matrix_key, plan_group, toolchain_cells
from tools.plan.table import Table, python_key, version_key
from tools.sitegen.ledger_file import Entry
from .backlog import History, backlog
from .batch import STAGES, Batch, output_bytes

#: A wheel's size per arch for a recipe that states none (``build.wheel_mib_per_arch``): above
#: mamba_ssm's measured 37 MiB and below flash_attn's 59 (docs/measurements.md): an over-estimate for the small
#: kernels, which only makes runs smaller.
DEFAULT_WHEEL_MIB_PER_ARCH = 40
#: A compiler cache's size beside the code it compiled, stated: ccache keeps each object
#: compressed, about what the wheel holds of it (the SASS and PTX of each arch, zip-compressed).
CACHE_SHARE = 1.0
#: Artifact and release transfers inside GitHub, stated: 50 MiB/s.
TRANSFER_MIB_PER_S = 50
#: The plan job: check out, set up Python, install the tools (``.[farm]``), plan. Stated.
PLAN_HOURS = 5 / 60
#: The setup of the release and publish jobs (check out, Python, the tools), stated.
SMALL_JOB_SETUP_HOURS = 5 / 60
#: Indexing one wheel (read, check, write its .metadata and pages), stated from the index's
#: hostile-input suites, which index a wheel in well under a second here.
INDEX_SECONDS_PER_WHEEL = 2
#: Deploying the site (upload-pages-artifact, deploy-pages), stated.
DEPLOY_HOURS = 3 / 60
#: One provenance attestation over every wheel of a run (signing and storing it), stated.
ATTEST_HOURS = 2 / 60
#: REST calls of a run besides those per file and per page: the Pages site (twice), the
#: release's view, create and edit, the releases list (publish).
FIXED_REST_CALLS = 6
#: Artifacts every run makes besides its cells' and shards': the plan and the site.
RUN_ARTIFACTS = 2


def wheel_bytes(cell: Cell, recipe: Recipe) -> int:
    """A cell's wheel size, estimated: the recipe's measured MiB per arch (else the stated
    :data:`DEFAULT_WHEEL_MIB_PER_ARCH`) times its archs."""
    per_arch = recipe.build.wheel_mib_per_arch or DEFAULT_WHEEL_MIB_PER_ARCH
    return int(per_arch * max(1, len(cell.archs)) * 2**20)


@dataclass(frozen=True)
class Item:
    """One compile group of the backlog: what a run takes whole."""

    plan: GroupPlan
    cells: tuple[Cell, ...]
    #: Each cell's wheel, estimated (:func:`wheel_bytes`).
    wheels: tuple[int, ...]
    #: The compiler cache of each job that saves one: every shard's, or every cell job's when
    #: the group has no shards (its cells then compile their kernels).
    caches: tuple[int, ...]
    #: Ids of the cells its cells need (another recipe's, published before it runs).
    needs: frozenset[str]

    @property
    def platform(self) -> str:
        """The wheel platform of the group."""
        return self.cells[0].platform

    @property
    def id(self) -> str:
        """The group's id."""
        return self.plan.group.id


@dataclass(frozen=True)
class RunFigures:
    """One run of the schedule, counted (see the module docstring)."""

    cells: tuple[str, ...]
    shards: int
    wheels: int
    wheel_bytes: int
    release_assets: int
    largest_wheel_bytes: int
    artifacts: int
    rest_calls: int
    content_calls: int
    plan_output_utf16_bytes: int
    cache_bytes_saved: int
    disk_bytes: int
    matrix_jobs: dict[str, int]
    longest_job_hours: float
    release_job_hours: float
    wall_hours: float
    runner_hours: float

    def to_json(self) -> dict[str, Any]:
        """The run as the schedule's JSON prints it."""
        return {"cells": len(self.cells), "shards": self.shards, "wheels": self.wheels,
                "wheel_bytes": self.wheel_bytes, "release_assets": self.release_assets,
                "largest_wheel_bytes": self.largest_wheel_bytes, "artifacts": self.artifacts,
                "rest_calls": self.rest_calls, "content_calls": self.content_calls,
                "plan_output_utf16_bytes": self.plan_output_utf16_bytes,
                "cache_bytes_saved": self.cache_bytes_saved, "disk_bytes": self.disk_bytes,
                "matrix_jobs": self.matrix_jobs,
                "longest_job_hours": round(self.longest_job_hours, 2),
                "release_job_hours": round(self.release_job_hours, 2),
                "wall_hours": round(self.wall_hours, 2),
                "runner_hours": round(self.runner_hours, 1), "cell_ids": list(self.cells)}


@dataclass(frozen=True)
class Refusal:
    """Cells no run can take, and why."""

    cells: tuple[str, ...]
    why: str

    def to_json(self) -> dict[str, Any]:
        """The refusal as the schedule's JSON prints it."""
        return {"cells": list(self.cells), "why": self.why}


@dataclass(frozen=True)
class Schedule:
    """The runs that drain the backlog, the refusals, and the totals."""

    runs: tuple[tuple[Item, ...], ...]
    figures: tuple[RunFigures, ...]
    refused: tuple[Refusal, ...]
    limits: Limits
    #: The backlog's account: planned, published, given up, and what the plan no longer has.
    backlog: dict[str, Any] = field(default_factory=dict)

    def totals(self) -> dict[str, Any]:
        """Runs, cells, runner-hours, wall days (each run's wall hours plus the wait for the next
        cron start) and the manual actions the drain needs (a refused cell needs a person)."""
        wall = sum(f.wall_hours for f in self.figures) + self.limits.cron_hours * len(self.runs)
        return {"runs": len(self.runs), "cells": sum(len(f.cells) for f in self.figures),
                "shards": sum(f.shards for f in self.figures),
                "runner_hours": round(sum(f.runner_hours for f in self.figures), 1),
                "wall_days": round(wall / 24, 2),
                "wheel_bytes": sum(f.wheel_bytes for f in self.figures),
                "refused_cells": sum(len(r.cells) for r in self.refused),
                "manual_actions": sum(len(r.cells) for r in self.refused)}

    def to_json(self) -> dict[str, Any]:
        """The schedule as ``--format schedule`` prints it."""
        lim = self.limits
        return {"rule": {"order": list(lim.order), "packages": list(lim.packages),
                         "tries": lim.tries, "limits_file": lim.path.name},
                "backlog": self.backlog, "totals": self.totals(),
                "runs": [{"run": i, **f.to_json()} for i, f in enumerate(self.figures, 1)],
                "refused": [r.to_json() for r in self.refused]}


def _items(cells: list[Cell], recipes: list[Recipe], runners: Runners, limits: Limits,
           stored: frozenset[str] = frozenset()) -> tuple[list[Item], list[Refusal]]:
    """The backlog's compile groups as items, and the groups refused before any run: a job
    over its budget (``plan_group``'s error), a wheel over the asset size or the disk."""
    by_package = {r.package: r for r in recipes}
    units = {p: read_units(by_package[p]) for p in dict.fromkeys(c.package for c in cells)}
    cell_of = {c.id: c for c in cells}
    items, refused = [], []
    for g in groups(cells, recipes):
        first, recipe = cell_of[g.cells[0]], by_package[g.package]
        mine = tuple(cell_of[c] for c in g.cells)
        try:
            plan = plan_group(g, recipe, runners.for_package(g.package, first.platform),
                              first.archs, units[g.package], g.key in stored)
        except PlanError as exc:
            refused.append(Refusal(g.cells, str(exc)))
            continue
        wheels = tuple(wheel_bytes(c, recipe) for c in mine)
        big = max(wheels)
        if big >= limits.asset_bytes or big > limits.wheel_disk_bytes:
            refused.append(Refusal(g.cells, f"{g.id}: a wheel is estimated at "
                                   f"{big / 2**20:.0f} MiB, over GitHub's asset size "
                                   f"({limits.asset_bytes / 2**30:g} GiB) or the release job's "
                                   f"disk ({limits.wheel_disk_bytes / 2**30:g} GiB)"))
            continue
        if plan.shards:
            kernels = max(1, len(plan.units.sharded()))
            caches = tuple(int(wheels[0] * CACHE_SHARE * len(part) / kernels)
                           for part in plan.shards)
        elif plan.stored:  # its kernels are the store's: its cells save no cache of their own
            caches = ()
        else:  # each cell job saves one cache: what its cells compiled
            size = dict(zip(g.cells, wheels))
            caches = tuple(int(sum(size[c] for c in job) * CACHE_SHARE) for job in plan.jobs)
        needs = frozenset(n for c in mine for n in c.needs)
        items.append(Item(plan, mine, wheels, caches, needs))
    return items, refused


def priority(item: Item, limits: Limits) -> tuple:
    """The sort key of an item under the policy's order (see the module docstring)."""
    rank = {p: i for i, p in enumerate(limits.packages)}
    platforms = list(PLATFORM_PART)
    c = item.cells[0]
    newest_python = max((x.python for x in item.cells), key=python_key)
    keys = {"torch": tuple(-n for n in version_key(c.torch)),
            "package": (rank.get(c.package, len(rank)), c.package),
            "cuda": tuple(-n for n in version_key(c.cuda)),
            "python": tuple(-n for n in python_key(newest_python)),
            "platform": (platforms.index(c.platform),)}
    return tuple(keys[k] for k in limits.order) + (item.id,)


def _simulate(stages: dict[str, list[float]], concurrent: int, caps: dict[str, int],
              after: dict[str, str]) -> float:
    """The hours until every job of ``stages`` (stage -> job hours) has finished, started as
    GitHub would: at most ``concurrent`` at once, at most ``caps[stage]`` of a stage at once, a
    stage in ``after`` only when the stage it names has finished; longest first in a stage."""
    pending = {s: sorted(h, reverse=True) for s, h in stages.items()}
    running: list[tuple[float, str]] = []
    done: set[str] = {s for s, h in pending.items() if not h}
    now = 0.0
    for _ in range(sum(len(h) for h in pending.values()) * 2 + 2):
        for stage, jobs in pending.items():
            ready = after.get(stage) is None or after[stage] in done
            while (jobs and ready and len(running) < concurrent
                   and sum(1 for _, s in running if s == stage) < caps.get(stage, concurrent)):
                running.append((now + jobs.pop(0), stage))
        if not running:
            break
        running.sort()
        now, stage = running.pop(0)
        if not pending[stage] and all(s != stage for _, s in running):
            done.add(stage)
    return now


def wall_hours(stages: dict[str, list[float]], limits: Limits, small: list[float]) -> float:
    """A run's wall hours: the plan job, then the shard and cell stages at the account's
    concurrency and each platform's max-parallel (a platform's ``cells2`` after its shards),
    then ``small`` (release, publish) one after another."""
    platform_of = {matrix_key(s, p): p for p in PLATFORM_PART for s in STAGES}
    caps = {name: limits.max_parallel.get(platform_of[name], limits.concurrent_jobs)
            for name in stages}
    after = {name: name.replace("cells2", "shards") for name in stages
             if name.startswith("cells2")}
    return PLAN_HOURS + _simulate(stages, limits.concurrent_jobs, caps, after) + sum(small)


def cache_share(items: list[Item] | tuple[Item, ...], limits: Limits) -> int:
    """The bytes each job of a run that saves a compiler cache may save: the repository's cache
    shared evenly among them, so that a run never evicts its own caches (each job trims its
    cache to this before saving it; ``ccache_save_bytes`` in its entry)."""
    jobs = sum(len(i.caches) for i in items)
    return limits.cache_bytes // max(1, jobs)


def _small_jobs(n: int, jobs: int, shards: int, total: int,
                limits: Limits) -> dict[str, float]:
    """The request counts of a run of ``n`` cells in ``jobs`` cell jobs, ``shards`` shards and
    ``total`` wheel bytes, and the hours of its release and publish jobs (the release paced by
    the limits)."""
    assets = 2 * n
    artifacts = 2 * jobs + 2 * shards + RUN_ARTIFACTS
    pages = math.ceil(artifacts / limits.artifacts_per_page)
    asset_pages = math.ceil(assets / limits.artifacts_per_page)
    # release: list the run's artifacts, download each cell job's wheels, the asset list before
    # and after, every upload; publish: list the artifacts, download each cell job's reports,
    # the release's assets, each wheel.
    content = assets + 2
    rest = FIXED_REST_CALLS + 2 * pages + 3 * asset_pages + assets + 2 * jobs + n
    transfer = total / 2**20 / TRANSFER_MIB_PER_S / 3600
    index = n * INDEX_SECONDS_PER_WHEEL / 3600
    paced = max(content / limits.paced(limits.content_requests_per_hour),
                content / limits.paced(limits.content_requests_per_minute) / 60,
                rest / limits.paced(limits.rest_requests_per_hour) / 2, transfer)
    return {"assets": assets, "artifacts": artifacts, "content": content, "rest": rest,
            "release": SMALL_JOB_SETUP_HOURS + transfer + index + ATTEST_HOURS + paced,
            "publish": SMALL_JOB_SETUP_HOURS + transfer + index + DEPLOY_HOURS}


def figures(items: list[Item] | tuple[Item, ...], release: Release,
            limits: Limits) -> RunFigures:
    """Count one run of ``items`` (planned as ``release``; see the module docstring)."""
    share = cache_share(items, limits)
    batch = Batch(release, {}, limits.jobs_per_matrix, share)
    stages = batch.stages()
    hours = {j["id"]: j["estimate_hours"] for jobs in stages.values() for j in jobs}
    cells = tuple(c.id for i in items for c in i.cells)
    shards = sum(len(i.plan.shards) for i in items)
    total = sum(sum(i.wheels) for i in items)
    cell_jobs = sum(len(i.plan.jobs) for i in items)
    small = _small_jobs(len(cells), cell_jobs, shards, total, limits)
    by_stage = {name: [hours[j["id"]] for j in jobs] for name, jobs in stages.items()}
    jobs_h = [h for hs in by_stage.values() for h in hs]
    tail = [small["release"], small["publish"]]
    return RunFigures(
        cells=cells, shards=shards, wheels=len(cells), wheel_bytes=total,
        release_assets=small["assets"],
        largest_wheel_bytes=max((w for i in items for w in i.wheels), default=0),
        # the cell jobs' calls too: each reads its shard caches by name, a lookup and a
        # download each
        artifacts=small["artifacts"], content_calls=small["content"],
        rest_calls=small["rest"] + 2 * sum(len(i.plan.jobs) * len(i.plan.shards) for i in items),
        plan_output_utf16_bytes=output_bytes(batch.outputs()),
        cache_bytes_saved=sum(min(c, share) for i in items for c in i.caches), disk_bytes=total,
        matrix_jobs={k: len(v) for k, v in stages.items() if v},
        longest_job_hours=max(jobs_h + tail), release_job_hours=small["release"],
        wall_hours=wall_hours(by_stage, limits, tail),
        runner_hours=PLAN_HOURS + sum(jobs_h) + sum(tail))


def violations(f: RunFigures, limits: Limits, budget_hours: float) -> list[str]:
    """Every limit one run's figures break (empty: the run fits)."""
    out = []
    checks = (
        ("plan job outputs (UTF-16 bytes)", f.plan_output_utf16_bytes, limits.job_output_bytes),
        ("release assets", f.release_assets, limits.assets_per_release),
        ("artifacts", f.artifacts, limits.artifacts_per_run - 1),
        ("cache bytes saved", f.cache_bytes_saved, limits.cache_bytes),
        ("disk for the wheels (bytes)", f.disk_bytes, limits.wheel_disk_bytes),
        ("largest wheel (bytes)", f.largest_wheel_bytes, limits.asset_bytes - 1),
        ("content-creating requests in the release job",
         f.content_calls, limits.paced(limits.content_requests_per_hour) * budget_hours),
        ("release job hours", f.release_job_hours, budget_hours),
        ("REST requests an hour over the run", f.rest_calls / max(1.0, f.wall_hours),
         limits.paced(limits.rest_requests_per_hour)),
        ("longest job hours", f.longest_job_hours, limits.job_hours))
    for name, value, limit in checks:
        if value > limit:
            out.append(f"{name}: {value:g} over {limit:g}")
    for stage, jobs in f.matrix_jobs.items():
        if jobs > limits.jobs_per_matrix:
            out.append(f"{stage}: {jobs} jobs over {limits.jobs_per_matrix} per matrix")
    return out


def _release(items: list[Item] | tuple[Item, ...], toolchain: dict[str, Cell]) -> Release:
    cells = tuple(c for i in items for c in i.cells)
    return Release(tuple(i.plan for i in items), cells, toolchain)


#: The plan job's outputs besides the jobs' entries, at most: every stage's name twice, its
#: matrix's brackets and count, and ``count`` (UTF-16 bytes).
_OUTPUT_OVERHEAD = 2 * (len(PLATFORM_PART) * len(STAGES) * 60 + 16)


class _Tally:
    """The running counts of a run being filled: :meth:`admit` takes an item only when the run
    still keeps every limit with it (the same limits :func:`violations` checks)."""

    def __init__(self, limits: Limits, budget: float):
        self.limits, self.budget = limits, budget
        self.cells = self.cell_jobs = self.shards = self.bytes = self.output = 0
        self.free: dict[str, int] = {}
        self.sharded: dict[str, int] = {}
        self.shard_jobs: dict[str, int] = {}

    def admit(self, item: Item) -> bool:
        """Add ``item`` when the run keeps every limit with it; say whether it was added."""
        lim, p = self.limits, item.platform
        n, k = len(item.cells), len(item.plan.jobs)
        shards = len(item.plan.shards)
        free = self.free.get(p, 0) + (0 if shards else k)
        sharded = self.sharded.get(p, 0) + (k if shards else 0)
        shard_jobs = self.shard_jobs.get(p, 0) + shards
        runner = item.plan.runner.label
        jobs = (*(job_id(item.id, j) for j in range(1, k + 1)),
                *(shard_id(item.id, j) for j in range(1, shards + 1)))
        output = self.output + 2 * sum(len(f'{{"id":"{j}","runner":"{runner}"}},') for j in jobs)
        cells, all_shards = self.cells + n, self.shards + shards
        cell_jobs = self.cell_jobs + k
        total = self.bytes + sum(item.wheels)
        small = _small_jobs(cells, cell_jobs, all_shards, total, lim)
        first = min(free, lim.jobs_per_matrix)
        fits = (shard_jobs <= lim.jobs_per_matrix and free - first + sharded <= lim.jobs_per_matrix
                and output + _OUTPUT_OVERHEAD <= lim.job_output_bytes
                and small["assets"] <= lim.assets_per_release
                and small["artifacts"] < lim.artifacts_per_run
                and total <= lim.wheel_disk_bytes
                and small["content"] <= lim.paced(lim.content_requests_per_hour) * self.budget
                and small["release"] <= self.budget)
        if fits:
            self.cells, self.shards, self.bytes, self.output = cells, all_shards, total, output
            self.cell_jobs = cell_jobs
            self.free[p], self.sharded[p], self.shard_jobs[p] = free, sharded, shard_jobs
        return fits


def make_schedule(cells: list[Cell], everything: list[Cell], recipes: list[Recipe],
                  runners: Runners, limits: Limits, published: frozenset[str] = frozenset(),
                  unavailable: frozenset[str] = frozenset(),
                  stored: frozenset[str] = frozenset(),
                  pending: frozenset[str] = frozenset()) -> Schedule:
    """The runs that drain ``cells`` (the backlog, from the full plan ``everything``), given the
    cells already ``published``, those ``pending`` (released, indexed by the first run's
    publish: a cell that needs one waits for the second run), those ``unavailable`` (given
    up on: a cell that needs one is refused) and the group keys the kernel store covers
    (``stored``: ``tools.plan.stored``). See the module docstring for the rule."""
    toolchain = toolchain_cells(everything, recipes)
    items, refused = _items(cells, recipes, runners, limits, stored)
    items.sort(key=lambda i: priority(i, limits))
    budget = runners.default.budget_hours
    done = set(published)
    blocked = set(unavailable) | {c for r in refused for c in r.cells}
    runs: list[tuple[Item, ...]] = []
    figs: list[RunFigures] = []
    waiting = items
    for _ in range(len(items) + 2):
        for item in list(waiting):
            bad = sorted(item.needs & blocked)
            if bad:
                waiting.remove(item)
                blocked |= {c.id for c in item.cells}
                refused.append(Refusal(tuple(c.id for c in item.cells),
                                       f"{item.id}: needs {', '.join(bad)}, which no run builds "
                                       "(refused, or given up after its tries)"))
        if not waiting:
            break
        tally = _Tally(limits, budget)
        run = [i for i in waiting if i.needs <= done and tally.admit(i)]
        if not run and not pending <= done:
            # All that is left waits on the released wheels: this run builds nothing, its
            # publish indexes them, and the next run takes what needs them.
            runs.append(())
            figs.append(figures([], _release([], toolchain), limits))
            done |= pending
            continue
        if not run:
            for item in waiting:
                if item.needs <= done:
                    why = (f"{item.id}: does not fit a run of its own: "
                           + "; ".join(violations(figures([item], _release([item], toolchain),
                                                          limits), limits, budget)))
                else:
                    why = (f"{item.id}: needs {', '.join(sorted(item.needs - done))}, which no "
                           "run builds")
                refused.append(Refusal(tuple(c.id for c in item.cells), why))
            break
        fig = figures(run, _release(run, toolchain), limits)
        wrong = violations(fig, limits, budget)
        if wrong:
            raise PlanError(f"run {len(runs) + 1} of the schedule breaks its limits: "
                            + "; ".join(wrong), hint="a bug of tools.releasing.schedule: report it")
        runs.append(tuple(run))
        figs.append(fig)
        done |= {c.id for i in run for c in i.cells} | pending
        taken = {i.id for i in run}
        waiting = [i for i in waiting if i.id not in taken]
    return Schedule(tuple(runs), tuple(figs), tuple(refused), limits)


def first_batch(schedule: Schedule, everything: list[Cell], recipes: list[Recipe],
                entries: list[Entry]) -> Batch:
    """The batch of the schedule's first run (no jobs: nothing to build), with the published
    wheels its cells need (:func:`needed_wheels`)."""
    run = schedule.runs[0] if schedule.runs else ()
    return Batch(_release(run, toolchain_cells(everything, recipes)),
                 needed_wheels(run, everything, recipes, entries),
                 schedule.limits.jobs_per_matrix, cache_share(run, schedule.limits))


def needed_wheels(items: tuple[Item, ...], everything: list[Cell], recipes: list[Recipe],
                  entries: list[Entry]) -> dict[str, list[dict[str, str]]]:
    """Per cell of a run, the published wheels of the cells it needs (the ledger's file, URL and
    sha256), which its job downloads instead of building them; PlanError when one isn't in the
    ledger (the schedule only takes a group whose needs are published)."""
    cell_of = {c.id: c for c in everything}
    dist = {r.package: canonicalize_name(r.source.pypi) for r in recipes}
    # the ledger's wheels by project, each file name parsed once (a ledger holds thousands)
    by_project: dict[str, list[tuple[Entry, frozenset]]] = {}
    for e in entries:
        try:
            name, _, _, tags = parse_wheel_filename(e.filename)
        except InvalidWheelFilename:
            continue
        platforms = frozenset((tag_platform(t.platform) or ("",))[0] for t in tags)
        by_project.setdefault(canonicalize_name(name), []).append((e, platforms))
    out: dict[str, list[dict[str, str]]] = {}
    for item in items:
        for cell in item.cells:
            for need in cell.needs:
                want = cell_of[need]
                found = [e for e, platforms in by_project.get(dist[want.package], ())
                         if want.platform in platforms
                         and is_wheel_of(Path(e.filename), want, dist[want.package])]
                if not found:
                    raise PlanError(f"{cell.id} needs {need}, whose wheel the ledger lacks",
                                    hint="the schedule runs a cell after what it needs is "
                                         "published; plan again from the live ledger")
                e = max(found, key=lambda x: x.filename)
                out.setdefault(cell.id, []).append({"cell": need, "file": e.filename,
                                                    "url": e.url, "sha256": e.sha256})
    return out


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def as_markdown(schedule: Schedule) -> str:
    """The schedule for people: the rule, the totals and one row a run (``--format
    schedule-md``: the docs' table and the workflow's step summary)."""
    t, lim = schedule.totals(), schedule.limits
    b = schedule.backlog
    lines = [f"**Backlog**: {b.get('backlog', t['cells'])} of {b.get('planned', '?')} planned "
             f"cells ({b.get('published', 0)} published, {b.get('given_up', 0)} given up after "
             f"{lim.tries} tries).",
             f"**Rule**: compile groups by {', '.join(lim.order)} (packages: "
             f"{', '.join(lim.packages)}); each run takes, in that order, every group that still "
             f"fits every limit of `{lim.path.name}`.",
             f"**Totals**: {t['runs']} runs, {t['cells']} cells, {t['shards']} shards, "
             f"{t['runner_hours']} runner-hours, {t['wall_days']} wall days at "
             f"{lim.concurrent_jobs} concurrent jobs (a run every {lim.cron_hours:g} h at most), "
             f"{_gb(t['wheel_bytes'])} of wheels, {t['manual_actions']} manual actions.", "",
             "| run | cells | shards | wheels | assets | artifacts | REST | content | outputs "
             "(UTF-16) | cache saved | disk | longest job (h) | wall (h) | runner-h |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
             "---: | ---: | ---: |"]
    for i, f in enumerate(schedule.figures, 1):
        lines.append(f"| {i} | {len(f.cells)} | {f.shards} | {f.wheels} | {f.release_assets} | "
                     f"{f.artifacts} | {f.rest_calls} | {f.content_calls} | "
                     f"{f.plan_output_utf16_bytes:,} B | {_gb(f.cache_bytes_saved)} | "
                     f"{_gb(f.disk_bytes)} | {f.longest_job_hours:.1f} | {f.wall_hours:.1f} | "
                     f"{f.runner_hours:.0f} |")
    lines += ["", f"Limits: {lim.jobs_per_matrix} jobs a matrix, {lim.job_output_bytes:,} B of "
              f"outputs a job, {lim.assets_per_release} assets a release, "
              f"{lim.artifacts_per_run} artifacts a run, {lim.rest_requests_per_hour} REST and "
              f"{lim.content_requests_per_hour} content-creating requests an hour (paced at "
              f"{lim.rate_share:g} of them), {_gb(lim.cache_bytes)} of cache, "
              f"{_gb(lim.wheel_disk_bytes)} of disk for a run's wheels."]
    for r in schedule.refused:
        lines.append(f"- refused: {', '.join(r.cells)}: {r.why}")
    if not schedule.runs:
        lines.insert(0, "**Nothing to build**: the backlog is empty (every selected cell is "
                        "published, given up on, or refused).\n")
    return "\n".join(lines)


def drain(selected: list[Cell], everything: list[Cell], recipes: list[Recipe], table: Table,
          runners: Runners, limits: Limits, history: History,
          prints: dict[str, str]) -> Schedule:
    """The schedule of the backlog of ``selected`` (cells of the full plan ``everything``) over
    ``history`` (the ledger's entries, the released wheels pending, the attempts): what
    ``--format schedule`` prints and what ``python -m tools.release batch`` takes its first run
    from."""
    log = backlog(everything, recipes, table, history, prints, limits.tries)
    chosen = {c.id for c in selected}
    todo = [c for c in log.cells if c.id in chosen]
    account = {"planned": len(everything), "selected": len(selected),
               "published": len(log.published), "pending": len(log.pending),
               "given_up": len(log.given_up),
               "backlog": len(todo), "unplanned_ledger_files": log.unplanned_files,
               "unplanned_attempts": list(log.unplanned_attempts),
               "given_up_cells": {c: a.to_json() for c, a in sorted(log.given_up.items())}}
    return replace(make_schedule(todo, everything, recipes, runners, limits, log.published,
                                 frozenset(log.given_up), history.stored, log.pending),
                   backlog=account)
