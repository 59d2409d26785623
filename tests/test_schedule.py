"""tools.releasing.schedule and backlog: the full plan's backlog cut into runs that keep every
limit of recipes/limits.yaml; the priority rule; needs; refusals; the ledger and the attempts."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tools.core.errors import PlanError
from tools.core.variant import Variant
from tools.plan.limits import load_limits
from tools.plan.cells import plan
from tools.plan.recipes.model import load_all
from tools.plan.runners import load_runners
from tools.plan.stages import plan_release
from tools.plan.table import load_table, version_key
from tools.plan.formats import as_github
from tools.releasing.backlog import (Attempt, History, backlog, dump_attempts, load_attempts, record,
                                     write_attempts)
from tools.releasing.batch import Batch, output_bytes
from tools.releasing.schedule import make_schedule, violations, wheel_bytes
from tools.sitegen.ledger_file import Entry


@pytest.fixture(scope="module")
def world():
    table = load_table()
    recipes = load_all()
    cells = plan(recipes, table)
    return table, recipes, cells, load_runners(), load_limits()


@pytest.fixture(scope="module")
def full(world):
    table, recipes, cells, runners, limits = world
    return make_schedule(cells, cells, recipes, runners, limits)


def test_the_full_plan_drains_in_runs_that_keep_every_limit(world, full):
    _, _, cells, runners, limits = world
    totals = full.totals()
    assert totals["manual_actions"] == 0 and not full.refused
    # every planned cell in exactly one run
    scheduled = [c for f in full.figures for c in f.cells]
    assert sorted(scheduled) == sorted(c.id for c in cells)
    assert totals["runs"] == len(full.runs) >= 2
    for f in full.figures:
        assert violations(f, limits, runners.default.budget_hours) == []
        # the same limits, read off the figures directly
        assert f.plan_output_utf16_bytes < limits.job_output_bytes
        assert f.release_assets <= limits.assets_per_release
        assert f.artifacts < limits.artifacts_per_run
        assert f.cache_bytes_saved <= limits.cache_bytes
        assert f.disk_bytes <= limits.wheel_disk_bytes
        assert all(n <= limits.jobs_per_matrix for n in f.matrix_jobs.values())
        assert f.longest_job_hours <= limits.job_hours
        assert f.content_calls <= limits.paced(limits.content_requests_per_hour) * 5
    # the totals count every job: more runner-hours than the shards and cells alone
    release = plan_release(cells, world[1], runners)
    assert totals["runner_hours"] > release.hours()[0]


def test_the_old_single_release_output_was_over_githubs_limit_and_the_batch_is_far_under(world,
                                                                                        full):
    table, recipes, cells, runners, limits = world
    everything = as_github(plan_release(cells, recipes, runners, cells))
    # the figure, reproduced: the whole plan in one job's outputs, about 1.48 MB
    assert len(everything.encode("utf-16-le")) > limits.job_output_bytes
    biggest = max(full.figures, key=lambda f: f.plan_output_utf16_bytes)
    assert biggest.plan_output_utf16_bytes < limits.job_output_bytes / 10


def test_newest_torch_and_the_first_ranked_package_go_first(world, full):
    first = full.runs[0][0]
    newest = max((c.torch for c in world[2]), key=version_key)
    assert first.cells[0].torch == newest and first.cells[0].package == "flash_attn"
    # within a run, the groups are in priority order: never an older series before a newer one
    # of the same package and platform
    for run in full.runs:
        seen: dict = {}
        for item in run:
            c = item.cells[0]
            key = (c.package, c.platform, c.cuda)
            assert version_key(c.torch) <= seen.get(key, version_key(c.torch))
            seen[key] = version_key(c.torch)


def test_a_cell_runs_only_after_the_cells_it_needs_are_published(full):
    run_of = {c: i for i, f in enumerate(full.figures) for c in f.cells}
    needing = [c for run in full.runs for item in run for c in item.cells if c.needs]
    assert needing, "torch_sparse needs torch_scatter"
    for cell in needing:
        for need in cell.needs:
            assert run_of[need] < run_of[cell.id]


def test_tighter_limits_make_more_runs_each_within_them(world, full):
    table, recipes, cells, runners, limits = world
    tight = replace(limits, disk_mnt_gib=0, disk_root_gib=14, assets_per_release=200)
    small = make_schedule(cells, cells, recipes, runners, tight)
    assert len(small.runs) > len(full.runs) and not small.refused
    for f in small.figures:
        assert violations(f, tight, runners.default.budget_hours) == []
        assert f.release_assets <= 200 and f.disk_bytes <= tight.wheel_disk_bytes


def test_a_cell_that_fits_no_run_is_refused_by_name_and_the_rest_drain(world):
    table, recipes, cells, runners, limits = world
    # flash_attn's wheels stated at 1100 MiB an arch (CUDA 12.6 builds two archs): over GitHub's 2 GiB an asset
    big = [replace(r, build=replace(r.build, wheel_mib_per_arch=1100))
           if r.package == "flash_attn" else r for r in recipes]
    some = [c for c in cells if c.package in ("flash_attn", "mamba_ssm")]
    assert all(wheel_bytes(c, big[[r.package for r in big].index("flash_attn")]) > 2**31
               for c in some if c.package == "flash_attn")
    recipes, tight = big, limits
    got = make_schedule(some, cells, recipes, runners, tight)
    refused = {c for r in got.refused for c in r.cells}
    assert refused and all(c.startswith("flash_attn-") for c in refused)
    assert all("asset size" in r.why and r.why.startswith("flash_attn-") for r in got.refused)
    assert got.totals()["manual_actions"] == len(refused)
    scheduled = {c for f in got.figures for c in f.cells}
    assert scheduled == {c.id for c in some} - refused


def test_a_cell_whose_need_is_given_up_is_refused_saying_so(world):
    table, recipes, cells, runners, limits = world
    sparse = next(c for c in cells if c.needs)
    got = make_schedule([c for c in cells if c.package in ("torch_sparse", "torch_scatter")],
                        cells, recipes, runners, limits, unavailable=frozenset(sparse.needs))
    why = next(r.why for r in got.refused if sparse.id in r.cells)
    assert "needs" in why and sparse.needs[0] in why


def _entry_for(cell, name="causal-conv1d"):
    tag = f"cp{cell.python.replace('.', '')}"
    filename = (f"{name.replace('-', '_')}-{cell.version}+{cell.label}-{tag}-{tag}-"
                f"{cell.platform_tag}.whl")
    return Entry(filename, name, f"{cell.version}+{cell.label}", f"https://x/{filename}",
                 "0" * 64, 1, "2026-11-27T00:00:00.000000Z", ">=3.9", "0" * 64,
                 Variant(cell.cuda, cell.torch, True))


def test_published_cells_leave_the_backlog_and_unplanned_files_are_reported(world):
    table, recipes, cells, runners, limits = world
    cell = next(c for c in cells if c.package == "causal_conv1d")
    old = replace(cell, version="0.0.1")
    entries = [_entry_for(cell), _entry_for(old)]
    prints = {r.package: "p" for r in recipes}
    log = backlog(cells, recipes, table, History(entries), prints, limits.tries)
    assert cell.id in log.published and cell.id not in {c.id for c in log.cells}
    assert len(log.cells) == len(cells) - 1
    assert log.unplanned_files == 1  # causal-conv1d 0.0.1: no recipe plans it now


def test_a_cell_is_given_up_after_its_tries_and_tried_again_when_its_recipe_changes(world):
    table, recipes, cells, runners, limits = world
    cell = cells[0]
    cell_of = {c.id: c for c in cells}
    prints = {r.package: "v1" for r in recipes}
    attempts: dict = {}
    for n in range(1, limits.tries + 1):
        attempts = record(attempts, {cell.id: "compile failed"}, prints, cell_of, {})
        assert attempts[cell.id].tries == n
    log = backlog(cells, recipes, table, History(attempts=attempts), prints, limits.tries)
    assert cell.id in log.given_up and cell.id not in {c.id for c in log.cells}
    # the recipe, the table or the runner file changed: tried again from zero
    changed = {**prints, cell.package: "v2"}
    log = backlog(cells, recipes, table, History(attempts=attempts), changed, limits.tries)
    assert cell.id in {c.id for c in log.cells}
    assert record(attempts, {cell.id: "again"}, changed, cell_of)[cell.id].tries == 1
    # a cell that built leaves the file; ids the plan no longer has are reported
    assert cell.id not in record(attempts, {cell.id: None}, prints, cell_of)
    gone = {**attempts, "ghost-3.12-cu128": Attempt(1, "x", "e")}
    assert backlog(cells, recipes, table, History(attempts=gone), prints, 3).unplanned_attempts == (
        "ghost-3.12-cu128",)


def test_the_attempts_file_round_trips_and_a_bad_one_is_named(tmp_path):
    path = tmp_path / "attempts.json"
    attempts = {"a-3.12-cu128": Attempt(2, "f", "boom", "https://r")}
    write_attempts(path, attempts)
    assert load_attempts(path) == attempts
    assert json.loads(dump_attempts(attempts))["schema"] == 1
    assert load_attempts(tmp_path / "missing.json") == {}
    for text in ("{", '{"schema": 9, "cells": {}}',
                 '{"schema": 1, "cells": {"a": {"tries": 0, "fingerprint": "", "error": "", '
                 '"report": ""}}}'):
        path.write_text(text)
        with pytest.raises(PlanError, match="attempts.json"):
            load_attempts(path)


def test_the_batch_outputs_carry_ids_and_runners_only(world, full):
    table, recipes, cells, runners, limits = world
    from tools.releasing.schedule import _release
    batch = Batch(_release(full.runs[0], {}), {}, limits.jobs_per_matrix, 123)
    outs = batch.outputs()
    entries = [e for k, v in outs.items() if not k.endswith("count")
               for e in json.loads(v)["include"]]
    assert entries and all(set(e) == {"id", "runner"} for e in entries)
    assert int(outs["count"]) == len(full.figures[0].cells)
    assert output_bytes(outs) == full.figures[0].plan_output_utf16_bytes
    # the artifact holds the full entries, each job's cache share among them
    doc = batch.document()
    jobs = [j for js in doc["stages"].values() for j in js]
    assert all(j["ccache_save_bytes"] == 123 for j in jobs)
    assert {j["id"] for j in jobs} == {e["id"] for e in entries}


def test_released_wheels_the_ledger_lacks_yet_count_as_published(world):
    from tools.releasing.backlog import pending_entries
    table, recipes, cells, runners, limits = world
    cell = next(c for c in cells if c.package == "causal_conv1d")
    tag = f"cp{cell.python.replace('.', '')}"
    name = f"causal_conv1d-{cell.version}+{cell.label}-{tag}-{tag}-{cell.platform_tag}.whl"
    entries = pending_entries([name, "notes.md", "not-a-wheel.whl"])
    assert [e.filename for e in entries] == [name]
    assert (entries[0].variant.cuda, entries[0].variant.torch) == (cell.cuda, cell.torch)
    log = backlog(cells, recipes, table, History(entries), {r.package: "p" for r in recipes}, 3)
    assert log.published == {cell.id}


def test_a_cell_needing_a_released_wheel_waits_until_it_is_indexed(world):
    """torch_scatter's wheel is in a release the ledger lacks yet: not built again, and the
    torch_sparse cell that needs it runs after the run whose publish indexes it (its job
    downloads the wheel from the index, which has it only then)."""
    from tools.releasing.backlog import pending_entries
    from tools.releasing.schedule import first_batch
    table, recipes, cells, runners, limits = world
    sparse = next(c for c in cells if c.needs)
    (need,) = sparse.needs
    scatter = next(c for c in cells if c.id == need)
    tag = f"cp{scatter.python.replace('.', '')}"
    name = (f"torch_scatter-{scatter.version}+{scatter.label}-{tag}-{tag}-"
            f"{scatter.platform_tag}.whl")
    released = pending_entries([name])
    log = backlog(cells, recipes, table, History(pending=released),
                  {r.package: "p" for r in recipes}, 3)
    assert log.pending == {scatter.id} and not log.published
    assert scatter.id not in {c.id for c in log.cells}
    got = make_schedule([sparse], cells, recipes, runners, limits, log.published,
                        pending=log.pending)
    assert not got.refused
    # run 1 builds nothing (its publish indexes the release); run 2 builds the cell
    assert [f.cells for f in got.figures] == [(), (sparse.id,)]
    batch = first_batch(got, cells, recipes, [])
    assert batch.outputs()["count"] == "0"


def test_a_needing_cells_job_gets_the_published_wheel_of_its_platform(world):
    """The batch's entry of a torch_sparse cell names the ledger's torch_scatter wheel it needs:
    the one of its own platform (an aarch64 wheel of the same version is another cell's)."""
    from tools.releasing.schedule import first_batch, needed_wheels
    table, recipes, cells, runners, limits = world
    sparse = next(c for c in cells if c.needs and c.platform == "linux_x86_64")
    scatter = next(c for c in cells if c.id == sparse.needs[0])
    tag = f"cp{scatter.python.replace('.', '')}"
    ours = _entry_for(scatter, "torch-scatter")
    other = ours._replace(filename=ours.filename.replace("x86_64", "aarch64"),
                          url=ours.url.replace("x86_64", "aarch64"))
    assert tag in ours.filename and other.filename != ours.filename
    got = make_schedule([sparse], cells, recipes, runners, limits, frozenset({scatter.id}))
    batch = first_batch(got, cells, recipes, [other, ours])
    (entry,) = [c for js in batch.document()["stages"].values() for j in js
                for c in j.get("cells", ()) if c["id"] == sparse.id]
    assert entry["needs_wheels"] == [{"cell": scatter.id, "file": ours.filename,
                                      "url": ours.url, "sha256": ours.sha256}]
    # not in the ledger: a plan error naming both cells
    with pytest.raises(PlanError, match=f"{sparse.id} needs {scatter.id}"):
        needed_wheels(got.runs[0], cells, recipes, [other])
