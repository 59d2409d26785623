"""tools.plan.stages: a release's compile groups sized for their runners, the shards each needs, every
job's estimate, the matrices the workflow runs, and the limits the plan refuses to cross; and the
repository's own release on GitHub's standard runner."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import yaml

from tools.core.errors import PlanError
from tools.plan import stages
from tools.plan.groups import UNITS_FILE, groups, read_units, split
from tools.plan.cells import plan
from tools.plan.recipes.model import load_all
from tools.plan.runners import load_runners, parse_runners
from tools.plan.sizing import size_jobs
from tools.plan.stages import (CACHE_HIT_SECONDS, FINISH_MINUTES, MATRIX_LIMIT,
                               NEXT_CELL_MINUTES, NO_UNITS_SECONDS_PER_ARCH, cuda_seconds,
                               job_hours, pack_cells, plan_group, plan_release, streams)
from tools.plan.table import load_table

RUNNER = {"label": "ubuntu-24.04", "cores": 4, "memory_gib": 16, "build_memory_gib": 13.5,
          "disk_gib": 14, "job_limit_hours": 6, "budget_hours": 5, "setup_minutes": 45,
          "reason": "GitHub's standard runner for the tests"}

#: flashy's units: 12 CUDA units of 1500 s per arch (two archs: 80, 90), one C++ unit.
UNITS = {
    "schema": 1, "version": "2.0.0",
    "cost": {"cuda": {"seconds": 1500, "reason": "stated rule for the tests"},
             "c++": {"seconds": 120, "reason": "stated rule for the tests"}},
    "units": {"c++": ["csrc/api.cpp"], "cuda": [f"csrc/k{i:02}.cu" for i in range(12)]},
}


def runners(**default):
    return parse_runners({"schema": 1, "default": {**RUNNER, **default}},
                         load_table().path.with_name("test-runners.yaml"))


@pytest.fixture
def flashy(world):
    """(recipes, cells, flashy's recipe, its first group, a writer of its units.yaml)."""
    table, recipes, cells = world()
    recipe = next(r for r in recipes if r.package == "flashy")
    group = next(g for g in groups(cells, recipes) if g.id == "flashy-cu126")

    def write(data=UNITS) -> None:
        (recipe.folder / UNITS_FILE).write_text(yaml.safe_dump(data, sort_keys=False))
    return recipes, cells, recipe, group, write


def test_streams_are_the_compiles_in_flight():
    one = size_jobs(cores=4, available_gib=13.5, job_memory_gib=7.0, nvcc_threads=2, archs=4)
    assert (one.max_jobs, one.nvcc_threads) == (1, 1) and streams(one, 4) == 1  # flash_attn
    three = size_jobs(cores=4, available_gib=13.5, job_memory_gib=3.0, nvcc_threads=None, archs=7)
    assert streams(three, 7) == 3
    # threads only help with as many archs, and never past the cores
    wide = size_jobs(cores=4, available_gib=64, job_memory_gib=2.0, nvcc_threads=4, archs=4)
    assert streams(wide, 4) == 4 and streams(wide, 1) == min(4, wide.max_jobs)


def test_cuda_seconds_never_beat_the_longest_unit(flashy):
    recipes, _, recipe, _, write = flashy
    write()
    units = read_units(recipe)
    three = size_jobs(cores=4, available_gib=13.5, job_memory_gib=3.0, nvcc_threads=None, archs=2)
    names = units.sharded()
    archs = ("80", "90")
    assert cuda_seconds(units, names, three, archs) == pytest.approx(
        12 * 1500 * 2 / streams(three, 2))
    # one unit: the jobs can't share it; without threads its two archs run one after the other
    assert cuda_seconds(units, names[:1], three, archs) == 3000
    assert cuda_seconds(units, (), three, archs) == 0


def test_units_with_archs_of_their_own_cost_only_those(flashy):
    """flash_attn_3's _sm90.cu units compile for 90a alone whatever the cell's list: the
    estimate counts each unit's own archs (``unit_archs:`` in units.yaml), not the cell's."""
    recipes, _, recipe, _, write = flashy
    write()
    units = read_units(recipe)
    names = units.sharded()
    three = size_jobs(cores=4, available_gib=13.5, job_memory_gib=3.0, nvcc_threads=None, archs=2)
    own = replace(units, unit_archs={names[0][-4:]: ("90",)})
    assert own.archs_of(names[0], ("80", "90")) == 1 and own.archs_of(names[0], ("80",)) == 0
    assert own.unit_seconds(names[0], ("80", "90")) == units.seconds(names[0])
    every = sum(units.unit_seconds(u, ("80", "90")) for u in names)
    assert sum(own.unit_seconds(u, ("80", "90")) for u in names) < every
    assert cuda_seconds(own, names[:1], three, ("80", "90")) == units.seconds(names[0])


def test_a_group_whose_cell_fits_has_no_shards(flashy):
    recipes, cells, recipe, group, write = flashy
    write()
    planned = plan_group(group, recipe, runners(budget_hours=20, job_limit_hours=24).default,
                         ("80", "90"), read_units(recipe))
    assert planned.shards == () and planned.shard_hours == ()
    assert planned.cell_hours == planned.whole_hours
    assert planned.why.startswith("one cell fits the budget (")
    assert planned.why.endswith("no shards, each cell compiles its kernels")
    assert planned.per_cell_hours == planned.whole_hours * len(group.cells)
    # its four cells in cell jobs: two of two in a budget of 20 h (all four would be over)
    setup = runners().default.setup_hours
    assert planned.jobs == (group.cells[:2], group.cells[2:])
    assert planned.job_hours == (job_hours(2, planned.whole_hours, setup),) * 2
    assert job_hours(4, planned.whole_hours, setup) > 20 >= job_hours(2, planned.whole_hours, setup)
    # a job's later cell costs its compile, finish and the stated next-cell minutes, not the setup
    assert planned.hours == pytest.approx(4 * planned.whole_hours
                                          - 2 * (setup - NEXT_CELL_MINUTES / 60))


def test_cells_are_packed_into_the_fewest_even_jobs_that_fit():
    cells = tuple(f"c{i}" for i in range(7))
    # 1 h a cell alone, 0.75 h of it setup: each further cell 0.25 + 1/6 h
    assert pack_cells(cells, 1.0, 0.75, 10) == (cells,)
    assert job_hours(7, 1.0, 0.75) == pytest.approx(1 + 6 * (0.25 + NEXT_CELL_MINUTES / 60))
    # room for 4 a job: two jobs, 4 and 3, not 4 and... as evenly as they go
    budget = job_hours(4, 1.0, 0.75)
    assert pack_cells(cells, 1.0, 0.75, budget) == (cells[:4], cells[4:])
    assert [len(j) for j in pack_cells(cells, 1.0, 0.75, job_hours(2, 1.0, 0.75))] == [2, 2, 2, 1]
    # a cell that needs the whole budget is a job alone; one over it still one (refused elsewhere)
    assert pack_cells(cells[:3], 5.0, 0.75, 5.0) == tuple((c,) for c in cells[:3])
    assert pack_cells(cells[:2], 6.0, 0.75, 5.0) == (("c0",), ("c1",))
    assert pack_cells((), 1.0, 0.75, 5.0) == ()


def test_a_group_over_the_budget_gets_the_fewest_shards_that_fit(flashy):
    recipes, cells, recipe, group, write = flashy
    write()
    runner = runners().default
    units = read_units(recipe)
    planned = plan_group(group, recipe, runner, ("80", "90"), units)
    # flashy: 4 GiB a thread, 4 threads wanted: in 13.5 GiB (11.5 usable) two threads in one job
    assert (planned.sizing.max_jobs, planned.sizing.nvcc_threads) == (1, 2)
    # 12 units x 1500 s x 2 archs over 2 compiles in flight: 5 h, plus the C++ unit and setup
    assert planned.whole_hours == pytest.approx(0.75 + 18000 / 3600 + 120 / 3600
                                                + FINISH_MINUTES / 60)
    loads = [(u, units.seconds(u) * 2) for u in units.sharded()]
    assert len(planned.shards) == 2
    assert list(planned.shards) == split(loads, 2)                    # tools.shard's split
    assert planned.shard_hours == pytest.approx((0.75 + 2.5, 0.75 + 2.5))
    assert planned.why == ("one cell compiling everything is 6.0 h on ubuntu-24.04 (4 cores, "
                           "13.5 GiB for the build), over the 5 h budget: 2 shards of at most "
                           "3.2 h")
    # the cells read every kernel from the shards: setup, the hits, the C++ unit, the finish
    assert planned.cell_hours == pytest.approx(
        0.75 + (12 * CACHE_HIT_SECONDS + 120) / 3600 + FINISH_MINUTES / 60)
    assert planned.hours < planned.per_cell_hours


def test_the_shard_count_is_the_fewest_that_fit(flashy):
    recipes, cells, recipe, group, write = flashy
    write({**UNITS, "cost": {**UNITS["cost"], "cuda": {"seconds": 3000,
                                                       "reason": "stated rule for the tests"}}})
    units = read_units(recipe)
    runner = runners().default
    planned = plan_group(group, recipe, runner, ("80", "90"), units)
    # 12 x 3000 s x 2 archs / 2 in flight = 10 h of kernels, 4.25 h room a job: 3 shards
    assert len(planned.shards) == 3 == math.ceil(10 / (5 - 0.75))
    assert [len(p) for p in planned.shards] == [4, 4, 4]
    assert max(planned.shard_hours) == pytest.approx(0.75 + 4 * 6000 / 2 / 3600)
    assert planned.why.endswith("3 shards of at most 4.1 h")
    # with a larger runner (a fork's), the same group needs fewer
    big = runners(cores=16, memory_gib=64, build_memory_gib=60).default
    assert len(plan_group(group, recipe, big, ("80", "90"), units).shards) < 3


def test_a_unit_that_cant_fit_a_job_is_a_plan_error(flashy):
    recipes, cells, recipe, group, write = flashy
    write({**UNITS, "measured": {"csrc/k03.cu": 20000}})
    with pytest.raises(PlanError) as info:
        plan_group(group, recipe, runners().default, ("80", "90"), read_units(recipe))
    assert str(info.value) == (
        "flashy-cu126: its unit csrc/k03.cu alone is a shard of 6.3 h on ubuntu-24.04 (4 cores, "
        "13.5 GiB for the build), over the 5 h budget per job\n  fix: give the recipe a larger "
        "runner (packages: in the runner file), or fewer archs")


def test_a_cell_that_cant_fit_even_with_the_shards_is_a_plan_error(flashy):
    recipes, cells, recipe, group, write = flashy
    write({**UNITS, "cost": {**UNITS["cost"], "c++": {"seconds": 20000,
                                                      "reason": "stated rule for the tests"}}})
    with pytest.raises(PlanError) as info:
        plan_group(group, recipe, runners().default, ("80", "90"), read_units(recipe))
    assert str(info.value).startswith(
        "flashy-cu126: a cell is estimated at 6.5 h on ubuntu-24.04 (4 cores, 13.5 GiB for the "
        "build) even with every kernel from the shards, over the 5 h budget per job")


def test_a_group_without_a_unit_list(flashy):
    recipes, cells, recipe, group, _ = flashy
    planned = plan_group(group, recipe, runners().default, ("80", "90"), None)
    assert planned.shards == () and planned.units is None
    compile_h = NO_UNITS_SECONDS_PER_ARCH * 2 / streams(planned.sizing, 2) / 3600
    assert planned.cell_hours == pytest.approx(0.75 + compile_h + FINISH_MINUTES / 60)
    assert planned.why.startswith("no unit list: each cell compiles everything")
    with pytest.raises(PlanError) as info:
        plan_group(group, recipe, runners(setup_minutes=290).default, ("80", "90"), None)
    assert "and flashy has no unit list to shard" in str(info.value)
    assert "python -m tools.shard units flashy-3.10-cu126 --write" in info.value.hint


def test_the_release_jobs_and_matrices(flashy):
    recipes, cells, recipe, group, write = flashy
    write()
    release = plan_release(cells, recipes, runners())
    shards = release.shard_jobs()
    mine = [s for s in shards if s["group"] == "flashy-cu126"]
    assert [s["id"] for s in mine] == [f"flashy-cu126-shard{k}" for k in range(1, len(mine) + 1)]
    first = mine[0]
    assert set(first) == {"id", "group", "key", "package", "platform", "shard", "of", "cell",
                          "python", "cuda", "image", "archs", "units", "runner", "estimate_hours",
                          "budget_minutes", "cache_key"}
    assert first["platform"] == "linux_x86_64"
    assert (first["shard"], first["of"], first["cell"], first["runner"], first["budget_minutes"]) \
        == (1, len(mine), group.cells[0], "ubuntu-24.04", 300)
    assert first["key"] == group.key and first["archs"] == ["80", "90"]
    assert first["cache_key"] == f"shard-flashy-cu126-shard1-{group.key}-of{len(mine)}"
    cell_jobs = release.cell_jobs()
    # every cell in exactly one cell job, each job's cells of one group, in plan order
    assert sorted(c["id"] for j in cell_jobs for c in j["cells"]) == sorted(c.id for c in cells)
    assert [j["id"] for j in cell_jobs] == [
        f"{g.group.id}-job{k}" for g in release.groups for k in range(1, len(g.jobs) + 1)]
    job = next(j for j in cell_jobs if j["cells"][0]["id"] == group.cells[0])
    assert job["id"] == "flashy-cu126-job1" and [c["id"] for c in job["cells"]] == list(group.cells)
    assert job["group"] == "flashy-cu126" and job["shards"] == [s["id"] for s in mine]
    assert (job["python"], job["cuda"], job["image"]) == ("3.10", "12.6", first["image"])
    planned = release.group_of()[group.cells[0]]
    assert job["estimate_hours"] == round(planned.job_hours[0], 2) < first["estimate_hours"]
    assert {c["estimate_hours"] for c in job["cells"]} == {round(planned.cell_hours, 2)}
    demo = next(c for c in cell_jobs if c["package"] == "demo_ext")
    assert demo["shards"] == []                                  # no unit list: no shards
    matrices = release.matrices()
    assert list(matrices) == ["shards", "cells1", "cells2", "shards_aarch64", "cells1_aarch64",
                              "cells2_aarch64", "shards_win", "cells1_win", "cells2_win"]
    assert all(m == {"include": []} for k, m in matrices.items() if "_" in k)  # x86_64 only
    assert matrices["shards"]["include"] == shards
    # cells1: the cells that wait for no shard, in plan order; cells2: those that read shards
    assert matrices["cells1"]["include"] == [c for c in cell_jobs if not c["shards"]]
    assert matrices["cells2"]["include"] == [c for c in cell_jobs if c["shards"]]
    assert demo in matrices["cells1"]["include"] and job in matrices["cells2"]["include"]
    # the shards of a selection compile with the group's first cell of the full plan
    some = [c for c in cells if c.id == group.cells[1]]
    again = plan_release(some, recipes, runners(), cells).shard_jobs()
    assert again[0]["cell"] == group.cells[0]


def test_a_matrix_over_githubs_limit_is_a_plan_error(flashy, monkeypatch):
    recipes, cells, recipe, group, write = flashy
    write()
    release = plan_release(cells, recipes, runners())
    count = len(release.shard_jobs())
    monkeypatch.setattr(stages, "MATRIX_LIMIT", count - 1)
    with pytest.raises(PlanError) as info:
        release.matrices()
    assert str(info.value).startswith(
        f"the shard matrix would hold {count} jobs, over GitHub's limit of {count - 1} per "
        f"matrix (crossed at group flashy-cu126-torch2.9)")
    # the cells: those that read no shard first (they start at once), then those that do
    monkeypatch.setattr(stages, "MATRIX_LIMIT", 256)
    jobs = release.matrices()
    free = [j for j in release.cell_jobs() if not j["shards"]]
    assert jobs["cells1"]["include"] == free
    assert jobs["cells2"]["include"] == [j for j in release.cell_jobs() if j["shards"]]
    # a first matrix of 2: the rest goes to the second, which overflows at the third (the
    # cells' matrices alone: at this limit the shard matrix would be over first)
    with pytest.raises(PlanError) as info:
        stages.platform_matrices([], release.cell_jobs(), 2)
    rest = free[2:] + jobs["cells2"]["include"]
    assert len(rest) > 2
    assert str(info.value).startswith(
        f"the cells would need more than 2 matrices of GitHub's limit of 2 jobs: "
        f"{len(rest) - 2} too many (crossed at group {rest[2]['group']})")
    assert "raise tools.plan.stages.CELL_MATRICES" in info.value.hint


def test_the_repositorys_release_fits_githubs_standard_runner():
    """Issue 25's bar: the full plan for every recipe on the standard runner (4 cores, 16 GB,
    6 h) has no matrix over 256 jobs and no job estimated over the 5 h budget, on every
    platform (each on its own runner, in matrices of its own)."""
    table = load_table()
    recipes = load_all(table=table)
    runner = load_runners(packages={r.package for r in recipes})
    assert runner.default.label == "ubuntu-24.04" and runner.packages == {}
    cells = plan(recipes, table)
    release = plan_release(cells, recipes, runner)
    matrices = release.matrices()
    assert all(len(m["include"]) <= MATRIX_LIMIT for m in matrices.values())
    jobs = [j for m in matrices.values() for j in m["include"]]
    assert len(jobs) == sum(len(g.jobs) + len(g.shards) for g in release.groups)
    assert sum(len(j["cells"]) for j in jobs if "cells" in j) == len(cells)
    assert sum(len(g.jobs) for g in release.groups) < len(cells) / 2  # cells share a setup
    assert max(j["estimate_hours"] for j in jobs) <= runner.default.budget_hours
    # every platform has cells, each job in its own platform's matrices on its runner
    labels = {"": "ubuntu-24.04", "_aarch64": "ubuntu-24.04-arm", "_win": "windows-2022"}
    for suffix, label in labels.items():
        mine = [j for name in ("shards", "cells1", "cells2")
                for j in matrices[name + suffix]["include"]]
        assert mine and {j["runner"] for j in mine} == {label}, suffix
        assert len({j["platform"] for j in mine}) == 1
    # the compiler cache's key prefix: Linux x86_64's as CI always made it, the platform
    # after ccache- on the others, so that no platform's key starts like another's
    by_platform: dict[str, set[str]] = {}
    for job in release.cell_jobs():
        prefix = job["ccache_prefix"]
        old = f"ccache-{job['package']}-cu{job['cuda']}-torch{job['cells'][0]['torch']}"
        if job["platform"] == "linux_x86_64":
            assert prefix == old
        else:
            assert prefix == old.replace("ccache-", f"ccache-{job['platform']}-", 1)
        by_platform.setdefault(job["platform"], set()).add(prefix + "-")
    assert set(by_platform) == {"linux_x86_64", "linux_aarch64", "win_amd64"}
    for platform, prefixes in by_platform.items():
        others = set().union(*(p for k, p in by_platform.items() if k != platform))
        assert not any(o.startswith(p) for p in prefixes for o in others), platform
    # flash_attn can't build in one job there: its groups are sharded
    flash = [g for g in release.groups if g.group.package == "flash_attn"]
    assert flash and all(g.whole_hours > 5 and len(g.shards) >= 2 for g in flash)
    planned, per_cell = release.hours()
    assert planned < per_cell


def test_a_changed_runner_file_changes_the_plan_not_the_cells(tmp_path):
    table = load_table()
    recipes = load_all(table=table)
    cells = [c for c in plan(recipes, table) if c.package == "flash_attn"
             and c.platform == "linux_x86_64"]  # the override is for Linux x86_64 jobs
    data = yaml.safe_load((table.path.with_name("runners.yaml")).read_text())
    big = copy.deepcopy(data)
    big["packages"] = {"flash_attn": {"label": "linux-16-core", "cores": 16, "memory_gib": 64,
                                      "build_memory_gib": 60, "reason": "a fork's larger runner"}}
    path = tmp_path / "runners.yaml"
    path.write_text(yaml.safe_dump(big))
    small = plan_release(cells, recipes, load_runners(packages={r.package for r in recipes}))
    large = plan_release(cells, recipes, load_runners(path, {r.package for r in recipes}))
    assert [c["id"] for j in small.cell_jobs() for c in j["cells"]] == \
        [c["id"] for j in large.cell_jobs() for c in j["cells"]]
    assert len(large.shard_jobs()) < len(small.shard_jobs())
    assert {j["runner"] for j in large.shard_jobs() + large.cell_jobs()} == {"linux-16-core"}


def test_a_group_measured_python_free_compiles_its_kernels_once_when_that_is_cheaper(flashy):
    """A group whose one cell fits a job: unmeasured, each of its cells compiles the kernels
    (a unit that includes Python.h would miss in the other Pythons' cells); measured to
    include no Python header, one shard compiles them for all its cells, because that costs
    fewer runner-hours."""
    recipes, cells, recipe, group, write = flashy
    write()
    runner = runners(budget_hours=20, job_limit_hours=24).default
    units = read_units(recipe)
    unmeasured = plan_group(group, recipe, runner, ("80", "90"), units)
    assert unmeasured.shards == ()
    measured = plan_group(replace(group, python_free=True), recipe, runner, ("80", "90"),
                          units)
    assert len(measured.shards) == 1 and measured.hours < unmeasured.hours
    assert "would compile the same kernels" in measured.why
    # a group of one cell gains nothing from a shard
    single = replace(group, python_free=True, cells=group.cells[:1])
    assert plan_group(single, recipe, runner, ("80", "90"), units).shards == ()
