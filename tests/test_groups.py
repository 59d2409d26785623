"""tools.plan.groups: compile groups (ids, keys, the cells they feed), a recipe's unit list read
strictly, and the split of a group's units into shards."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from tools.core.errors import PlanError
from tools.core.variant import shard_id
from tools.plan.groups import (UNITS_FILE, cell_group, group_key, groups, kernel_span,
                               python_free, read_units, sources_digest, split,
                               stale_spans)
from tools.plan.cells import plan
from tools.plan.recipes.model import load_all
from tools.plan.table import load_table
from tools.sharding import shard_build

UNITS = {
    "schema": 1, "version": "2.0.0",
    "read_from": {"cell": "flashy-3.12-cu126", "torch": "2.9.1", "cuda": "12.6"},
    "cost": {"cuda": {"seconds": 100, "reason": "stated rule for the tests"},
             "c++": {"seconds": 30, "reason": "stated rule for the tests"}},
    "units": {"c++": ["csrc/api.cpp"], "cuda": ["csrc/a.cu", "csrc/b.cu", "csrc/c.cu"]},
    "measured": {"csrc/b.cu": 250},
}


@pytest.fixture
def flashy(world):
    """(table, the flashy recipe, its cells, a writer of its units.yaml)."""
    table, recipes, cells = world()
    recipe = next(r for r in recipes if r.package == "flashy")

    def write(data: dict) -> None:
        (recipe.folder / UNITS_FILE).write_text(yaml.safe_dump(data, sort_keys=False))
    return table, recipe, [c for c in cells if c.package == "flashy"], write


def test_a_group_is_its_cells_without_the_python(world):
    _, recipes, cells = world()
    found = groups(cells, recipes)
    by_id = {g.id: g for g in found}
    g = by_id["flashy-cu126"]
    assert g.cells == tuple(c.id for c in cells if c.package == "flashy" and c.default_torch)
    assert len(g.cells) > 1 and all(c.startswith("flashy-3.") for c in g.cells)
    assert g.package == "flashy" and len(g.key) == 16
    assert by_id["flashy-cu126-torch2.9"].key != g.key          # another torch series
    # every cell is in exactly one group, groups in the order of their first cell
    assert sorted(c for g in found for c in g.cells) == sorted(c.id for c in cells)
    assert [g.id for g in found] == list(dict.fromkeys(
        c.id.split("-", 2)[0] + "-" + c.id.split("-", 2)[2] for c in cells))


def test_the_key_changes_with_what_decides_the_kernel_objects(flashy):
    _, recipe, cells, _ = flashy
    cell = cells[0]
    key = group_key(cell, recipe)
    assert group_key(replace(cell, python="3.13"), recipe) == key     # the Python doesn't
    assert group_key(replace(cell, archs=("90",)), recipe) != key
    env = replace(recipe.env[0], value="-O2")
    assert group_key(cell, replace(recipe, env=(env,))) != key
    patch = recipe.patches[0].path
    patch.write_text(patch.read_text() + "# one more line\n")
    assert group_key(cell, recipe) != key                              # the patch's bytes


def test_read_units(flashy):
    _, recipe, _, write = flashy
    assert read_units(recipe) is None                                  # none written yet
    write(UNITS)
    units = read_units(recipe)
    assert units.sharded() == ("csrc/a.cu", "csrc/b.cu", "csrc/c.cu")
    assert units.seconds("csrc/a.cu") == 100 and units.seconds("csrc/b.cu") == 250
    assert units.seconds("csrc/api.cpp", "c++") == 30
    assert units.cost["cuda"].reason == "stated rule for the tests"


@pytest.mark.parametrize("change,message", [
    (lambda d: d.update(version="1.9.0"),
     "version: the units were read from flashy 1.9.0, the recipe builds 2.0.0\n    fix: read "
     "them again: python -m tools.shard units <a cell of flashy> --write"),
    (lambda d: d["measured"].update({"csrc/gone.cu": 10}),
     "measured.csrc/gone.cu: is not one of the units listed"),
    (lambda d: d["cost"].pop("c++"), "cost.c++: must be a mapping, got nothing (null)"),
    (lambda d: d["cost"]["cuda"].update(reason="guess"),
     "cost.cuda.reason: reason is too short to explain anything"),
    (lambda d: d.update(schema=2), "schema: must be 1"),
    (lambda d: d["units"].update(cuda=[]), "units.cuda: must not be empty"),
])
def test_a_bad_unit_list_is_refused(flashy, change, message):
    _, recipe, _, write = flashy
    data = yaml.safe_load(yaml.safe_dump(UNITS))
    change(data)
    write(data)
    with pytest.raises(PlanError) as info:
        read_units(recipe)
    assert message in str(info.value) and str(recipe.folder / UNITS_FILE) in str(info.value)


def test_every_recipes_unit_list_is_read():
    table = load_table()
    for recipe in load_all(table=table):
        units = read_units(recipe)
        assert units is not None, f"{recipe.package} has no {UNITS_FILE}"
        assert units.version == recipe.source.version
        assert units.sharded(), recipe.package
        assert units.cost["cuda"].seconds > 0


@pytest.mark.parametrize("loads,count,expect", [
    # the longest first into the lightest shard; each shard keeps the input's order
    ([("a", 5), ("b", 3), ("c", 3), ("d", 1)], 2, [("a", "d"), ("b", "c")]),
    ([("a", 1), ("b", 1), ("c", 1), ("d", 1)], 2, [("a", "c"), ("b", "d")]),
    # more shards than units: one unit each
    ([("a", 1), ("b", 2)], 5, [("b",), ("a",)]),
    ([("a", 1)], 1, [("a",)]),
])
def test_split(loads, count, expect):
    assert split(loads, count) == expect
    assert split(loads, count) == split(list(loads), count)            # reproducible


def test_split_needs_a_shard():
    with pytest.raises(PlanError, match="at least one shard, not 0"):
        split([("a", 1)], 0)


def test_the_plan_and_the_shard_split_and_name_alike(flashy):
    _, recipe, _, write = flashy
    write(UNITS)
    units = read_units(recipe)
    loads = [(u, units.seconds(u) * 2) for u in units.sharded()]
    # what python -m tools.shard run compiles for shard K of N is what the plan estimated
    assert shard_build.shard_units(units, 2, ("80", "90")) == split(loads, 2)
    assert shard_id("flashy-cu126", 2) == "flashy-cu126-shard2"


def test_the_repository_plan_groups_every_cell():
    table = load_table()
    recipes = load_all(table=table)
    cells = plan(recipes, table)
    found = groups(cells, recipes)
    assert sum(len(g.cells) for g in found) == len(cells)
    assert len({g.id for g in found}) == len(found)


# --------------------------------------------------------------------------- kernels shared by torch series


def _span(cells, cuda=None):
    """The torch series of flashy's first CUDA version with more than one, newest first."""
    by_cuda: dict[str, list[str]] = {}
    for c in cells:
        if c.python == cells[0].python:
            by_cuda.setdefault(c.cuda, []).append(c.torch)
    cuda = cuda or next(k for k, v in by_cuda.items() if len(v) > 1)
    return cuda, sorted(set(by_cuda[cuda]), key=lambda t: tuple(map(int, t.split("."))),
                        reverse=True)


def test_a_measured_span_makes_one_group_of_its_torch_series(flashy):
    _, recipe, cells, write = flashy
    cuda, series = _span(cells)
    before = {g.id: g for g in groups(cells, [recipe])}
    write({**UNITS, "kernels": {cuda: {"platform": "linux_x86_64", "torch": series,
                                       "digest": "d" * 64, "sources": sources_digest(recipe),
                                       "read_with": "a test"}}})
    after = {g.id: g for g in groups(cells, [recipe])}
    shared = f"flashy-cu{cuda.replace('.', '')}-kernels"
    members = [c for c in cells if c.cuda == cuda and c.torch in series]
    assert set(after[shared].cells) == {c.id for c in members}
    # every one of those series had a group of its own before, and has none now
    had = {gid for gid, g in before.items() if set(g.cells) & {c.id for c in members}}
    assert len(had) == len(series) and shared not in before
    assert len(before) - len(after) == len(series) - 1
    # one key for all of them: the measured text's digest stands for the torch series
    assert {group_key(c, recipe) for c in members} == {after[shared].key}
    span = kernel_span(members[0], recipe)
    assert span.torch == tuple(series) and span.digest == "d" * 64
    # another digest is another key: caches of the old text are not read
    write({**UNITS, "kernels": {cuda: {"platform": "linux_x86_64", "torch": series,
                                       "digest": "e" * 64, "sources": sources_digest(recipe)}}})
    assert group_key(members[0], recipe) != after[shared].key
    # the cells of other CUDA versions keep their groups
    assert all(g in after for g in before if not g.startswith(f"flashy-cu{cuda.replace('.', '')}"))


def test_a_series_outside_the_span_or_another_platform_keeps_its_group(flashy):
    _, recipe, cells, write = flashy
    cuda, series = _span(cells)
    write({**UNITS, "kernels": {cuda: {"platform": "linux_x86_64", "torch": series[:2],
                                       "digest": "d" * 64, "sources": sources_digest(recipe)}}})
    for cell in cells:
        shared = cell.cuda == cuda and cell.torch in series[:2]
        assert (cell_group(cell, recipe).endswith("-kernels")) == shared, cell.id
    arm = {"platform": "linux_aarch64", "torch": series, "digest": "d" * 64,
           "sources": sources_digest(recipe)}
    write({**UNITS, "kernels": {f"{cuda}-aarch64": arm}})
    assert not any(cell_group(c, recipe).endswith("-kernels") for c in cells
                   if c.platform == "linux_x86_64")
    # each platform keeps its own record: Linux x86_64's beside aarch64's, read apart
    write({**UNITS, "kernels": {cuda: {**arm, "platform": "linux_x86_64", "torch": list(series)},
                                f"{cuda}-aarch64": arm}})
    units = read_units(recipe)
    assert {k: (s.cuda, s.platform) for k, s in units.kernels.items()} == {
        cuda: (cuda, "linux_x86_64"), f"{cuda}-aarch64": (cuda, "linux_aarch64")}
    assert all(cell_group(c, recipe).endswith("-kernels") for c in cells
               if c.cuda == cuda and c.torch in series and c.platform == "linux_x86_64")
    # a record under another platform's key is refused, naming the key it needs
    write({**UNITS, "kernels": {cuda: arm}})
    with pytest.raises(PlanError, match=f"is measured on linux_aarch64, so its key is "
                                        f"'{cuda}-aarch64'"):
        read_units(recipe)


def test_a_span_measured_with_other_patches_is_ignored_until_measured_again(flashy):
    _, recipe, cells, write = flashy
    cuda, series = _span(cells)
    write({**UNITS, "kernels": {cuda: {"platform": "linux_x86_64", "torch": series,
                                       "digest": "d" * 64, "sources": sources_digest(recipe)}}})
    member = next(c for c in cells if c.cuda == cuda and c.torch == series[0])
    assert kernel_span(member, recipe) is not None
    assert stale_spans(recipe) == []
    patch = recipe.patches[0].path
    patch.write_text(patch.read_text() + "# applies to one series only, say\n")
    assert kernel_span(member, recipe) is None
    assert not cell_group(member, recipe).endswith("-kernels")
    assert [s.cuda for s in stale_spans(recipe)] == [cuda]       # python -m tools.recipe says so


@pytest.mark.parametrize("entry,message", [
    ({"platform": "linux_x86_64", "torch": ["2.9"], "digest": "d" * 64, "sources": "e" * 64},
     "kernels.12.6.torch: names fewer than two torch series measured: there is nothing to share"),
    ({"platform": "linux_x86_64", "torch": ["2.9", "2.8"], "digest": "not a digest",
      "sources": "e" * 64}, "kernels.12.6.digest: must be a sha256 (64 lowercase hex digits)"),
    ({"platform": "linux-x86_64", "torch": ["2.9", "2.8"], "digest": "d" * 64,
      "sources": "e" * 64}, "kernels.12.6.platform: 'linux-x86_64' is not a wheel platform"),
    ({"torch": ["2.9", "2.8"], "digest": "d" * 64, "sources": "e" * 64},
     "kernels.12.6.platform"),
    ({"platform": "linux_x86_64", "torch": ["2.9", "2.8"], "digest": "d" * 64},
     "kernels.12.6.sources"),
    ({"platform": "linux_x86_64", "torch": ["2.9", "2.8"], "measured": ["2.9", "2.7"],
      "digest": "d" * 64, "sources": "e" * 64},
     "kernels.12.6.measured: lacks 2.8: every series under torch was measured"),
    ({"platform": "linux_x86_64", "torch": ["2.9"], "measured": ["2.9"], "digest": "d" * 64,
      "sources": "e" * 64}, "kernels.12.6.torch: names fewer than two torch series measured"),
])
def test_a_bad_kernels_block_is_refused(flashy, entry, message):
    _, recipe, _, write = flashy
    write({**UNITS, "kernels": {"12.6": entry}})
    with pytest.raises(PlanError) as info:
        read_units(recipe)
    assert message in str(info.value)
    # a wrong value asks for a new measurement; a missing key names the key to add
    assert ("python -m tools.probe <cell> --across-torch --write" in str(info.value)
            or "required key is missing" in str(info.value))


def test_a_record_of_one_series_shares_nothing(flashy):
    """A measurement in which no two series agree: read, and every series keeps its group."""
    _, recipe, cells, write = flashy
    cuda, series = _span(cells)
    write({**UNITS, "kernels": {cuda: {"platform": "linux_x86_64", "torch": series[:1],
                                       "measured": list(series), "digest": "d" * 64,
                                       "sources": sources_digest(recipe)}}})
    span, = read_units(recipe).kernels.values()
    assert not span.shares and span.measured_series == tuple(series)
    member = next(c for c in cells if c.cuda == cuda and c.torch == series[0])
    assert kernel_span(member, recipe) is None
    assert not cell_group(member, recipe).endswith("-kernels")


def test_a_python_free_measurement_marks_the_groups_of_its_series(flashy):
    _, recipe, cells, write = flashy
    cuda, series = _span(cells)
    write({**UNITS, "python_free": {cuda: {"platform": "linux_x86_64", "torch": series[:1],
                                           "sources": sources_digest(recipe), "units": 3,
                                           "read_with": "a test"}}})
    marked = {g.id: g.python_free for g in groups(cells, [recipe])}
    for cell in cells:
        expect = (cell.cuda, cell.torch, cell.platform) == (cuda, series[0], "linux_x86_64")
        assert python_free(cell, recipe) == expect, cell.id
        assert marked[cell_group(cell, recipe)] == expect
    # the ids and keys don't change: the measurement says how to plan, not what is built
    write(UNITS)
    assert {g.id: g.key for g in groups(cells, [recipe])} == {
        g.id: g.key for g in groups(cells, [recipe])}
    # measured with other patches: ignored
    write({**UNITS, "python_free": {cuda: {"platform": "linux_x86_64", "torch": series,
                                           "sources": "e" * 64}}})
    assert not any(python_free(c, recipe) for c in cells)


@pytest.mark.parametrize("entry,message", [
    ({"platform": "linux_x86_64", "torch": ["2.9"], "sources": "nope"},
     "python_free.12.6.sources: must be a sha256"),
    ({"platform": "win32", "torch": ["2.9"], "sources": "e" * 64},
     "python_free.12.6.platform: 'win32' is not a wheel platform"),
    ({"platform": "linux_x86_64", "torch": ["2.9"], "sources": "e" * 64, "digest": "d"},
     "python_free.12.6.digest: unknown key"),
])
def test_a_bad_python_free_block_is_refused(flashy, entry, message):
    _, recipe, _, write = flashy
    write({**UNITS, "python_free": {"12.6": entry}})
    with pytest.raises(PlanError, match=message.replace(".", r"\.")):
        read_units(recipe)
