"""Free-threaded CPythons (``3.14t``): the table's rows, a recipe's ``free_threaded`` block, the
cells planned for them and their ids; every bad entry named with the rule and the fix."""

from __future__ import annotations

import copy

import pytest

from tests.conftest import MINI_TABLE
from tests.test_table_platforms import with_platforms
from tools.core.errors import RecipeError, TableError
from tools.core.variant import parse_cell_id
from tools.plan.cells import cells_for, uncollapsed_count
from tools.plan.recipes.freethreaded import base_python, is_free_threaded
from tools.plan.recipes.model import load_all, load_recipe
from tools.plan.table import load_table, parse_table

FREE = {"pythons": ["3.14t"], "reason": "built for real with a free-threaded CPython 3.14"}


def _table(tmp_path, **free):
    data = with_platforms()
    for series, pythons in free.items():
        data["torch"][series.replace("_", ".")]["free_threaded"] = pythons
    return parse_table(data, tmp_path / "table.yaml")


def test_free_threaded_cells_follow_the_table_rows_and_stay_on_linux_x86_64(
        write_recipe, good_recipe, tmp_path):
    # 2.10 has cp314t (and cp313t) wheels, 2.9 none in this table; 2.10 also builds on aarch64
    # and Windows, where no free-threaded cell is planned
    table = _table(tmp_path, **{"2_10": ["3.13t", "3.14t"]})
    good_recipe["free_threaded"] = FREE
    recipe = load_recipe(write_recipe(good_recipe), table)
    cells = cells_for(recipe, table)
    free = [c for c in cells if is_free_threaded(c.python)]
    assert [c.id for c in free] == ["demo_ext-3.14t-cu130"]
    (cell,) = free
    assert (cell.torch, cell.platform, cell.serves_python, cell.python_abi) == \
        ("2.10", "linux_x86_64", ("3.14t",), "cpython")
    # its normal sibling is planned as before, and counted once more in the uncollapsed count
    assert "demo_ext-3.14-cu130" in {c.id for c in cells}
    assert uncollapsed_count(recipe, table) == len([c for c in cells if c.platform == "linux_x86_64"])
    # without the block: not one
    del good_recipe["free_threaded"]
    plain = load_recipe(write_recipe(good_recipe), table)
    assert not [c for c in cells_for(plain, table) if is_free_threaded(c.python)]


def test_an_empty_list_plans_none_and_keeps_the_reason(write_recipe, good_recipe, tmp_path):
    table = _table(tmp_path, **{"2_10": ["3.14t"]})
    good_recipe["free_threaded"] = {"pythons": [], "reason": "its binding was never probed there"}
    recipe = load_recipe(write_recipe(good_recipe), table)
    assert recipe.free_threaded.reason == "its binding was never probed there"
    assert not [c for c in cells_for(recipe, table) if is_free_threaded(c.python)]


@pytest.mark.parametrize("block, abi, expect", [
    ({"pythons": ["3.13t"], "reason": "torch has cp313t wheels"}, None,
     ["free_threaded.pythons: 3.13t cannot be built: cibuildwheel 4.x",
      "fix: remove '3.13t' (3.14t and later are built)"]),
    ({"pythons": ["3.14t", "3.14t"], "reason": "built for real with it"}, None,
     ["free_threaded.pythons"]),
    ({"pythons": ["3.14"], "reason": "built for real with it"}, None,
     ["free_threaded.pythons[0]: '3.14' is not a free-threaded CPython version like \"3.14t\"",
      'fix: write major.minor and t, quoted: "3.14t"']),
    ({"pythons": ["3.14t"]}, None, ["free_threaded.reason: required key is missing"]),
    ({"pythons": ["3.14t"], "reason": "yes"}, None, ["reason is too short"]),
    ({"pythons": ["3.14t"], "reason": "built for real with it"},
     {"python": "abi3", "python_from": "3.10", "torch": "exact", "reason": "limited API since 3.10"},
     ["an abi3 wheel does not install on a free-threaded CPython"]),
    ({"pythons": ["3.14t"], "reason": "built for real with it"},
     {"python": "none", "torch": "exact", "reason": "a torch op library without Python's API"},
     ["py3-none wheel (abi: none) already installs on free-threaded CPythons"]),
])
def test_a_bad_block_is_named_with_its_rule_and_fix(write_recipe, good_recipe, tmp_path, block,
                                                   abi, expect):
    table = _table(tmp_path, **{"2_10": ["3.14t"]})
    good_recipe["free_threaded"] = block
    if abi:
        good_recipe["abi"] = abi
    with pytest.raises(RecipeError) as err:
        load_recipe(write_recipe(good_recipe), table)
    for text in expect:
        assert text in str(err.value)


def test_a_free_threaded_python_outside_the_recipes_python_is_refused(write_recipe, good_recipe,
                                                                     tmp_path):
    table = _table(tmp_path, **{"2_10": ["3.14t"]})
    good_recipe["python"] = "<3.14"
    good_recipe["free_threaded"] = FREE
    with pytest.raises(RecipeError, match=r"3\.14t is a build of Python 3\.14, which python "
                                          r"'<3\.14' leaves out"):
        load_recipe(write_recipe(good_recipe), table)


def test_a_table_row_names_only_free_threaded_builds_of_its_own_pythons(tmp_path):
    data = copy.deepcopy(MINI_TABLE)
    data["torch"]["2.8"]["free_threaded"] = ["3.14t"]     # 2.8 has no 3.14
    with pytest.raises(TableError) as err:
        parse_table(data, tmp_path / "table.yaml")
    assert "torch.2.8.free_threaded: 3.14t is the free-threaded build of 3.14, which is not in " \
           "this torch's python list" in str(err.value)
    data["torch"]["2.8"]["free_threaded"] = ["3.13"]
    with pytest.raises(TableError, match="is not a free-threaded CPython version"):
        parse_table(data, tmp_path / "table.yaml")


def test_the_repository_table_and_recipes():
    table = load_table()
    # PyPI's file names: cp313t from 2.7 to 2.12.0 (the table's 2.12 row is 2.12.1: none),
    # cp314t from 2.9, cp315t from 2.15
    assert {s: t.free_threaded for s, t in table.torch.items()} == {
        "2.6": (), "2.7": ("3.13t",), "2.8": ("3.13t",), "2.9": ("3.13t", "3.14t"),
        "2.10": ("3.13t", "3.14t"), "2.11": ("3.13t", "3.14t"), "2.12": ("3.14t",),
        "2.13": ("3.14t",), "2.14": ("3.14t",), "2.15": ("3.14t", "3.15t")}
    recipes = load_all(table=table)
    # every recipe says whether it builds free-threaded, and why
    assert all(r.free_threaded is not None for r in recipes), \
        [r.package for r in recipes if r.free_threaded is None]
    built = {r.package for r in recipes if r.free_threaded.pythons}
    assert "causal_conv1d" in built
    cells = [c for r in recipes for c in cells_for(r, table) if is_free_threaded(c.python)]
    assert {c.platform for c in cells} == {"linux_x86_64"}
    assert {c.python for c in cells} <= {"3.14t", "3.15t"}
    assert "causal_conv1d-3.14t-cu130" in {c.id for c in cells}


@pytest.mark.parametrize("text, python", [
    ("causal_conv1d-3.14t-cu130", "3.14t"),
    ("causal_conv1d-3.14t-cu130-torch2.11", "3.14t"),
    ("causal_conv1d-3.14-cu130", "3.14"),
])
def test_cell_ids_carry_the_t(text, python):
    parts = parse_cell_id(text)
    assert parts.python == python
    assert base_python(python) == "3.14"


def test_an_id_with_another_suffix_is_not_a_cell():
    assert parse_cell_id("causal_conv1d-3.14d-cu130") is None


def test_counts_names_the_free_threaded_cells():
    import subprocess
    import sys

    from tools import ROOT
    from tools.plan.cells import plan
    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", "counts"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    free = [c for c in plan() if is_free_threaded(c.python)]
    line = proc.stdout.splitlines()[-1]
    assert line.startswith(f"free-threaded cells (3.14t): {len(free)}, on linux_x86_64: ")
    assert f"causal_conv1d {sum(c.package == 'causal_conv1d' for c in free)}" in line
