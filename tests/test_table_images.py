"""The builder images' Pythons (tools.plan.table_images): the table's ``images:``, the cells an
image can't build left out with the reason, and every bad entry named with the rule and fix."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from tests.conftest import MINI_TABLE
from tools import ROOT
from tools.core.errors import TableError
from tools.plan.cells import cells_for, left_out, plan
from tools.plan.formats import left_out_text
from tools.plan.recipes.model import load_all, load_recipe
from tools.plan.table import load_table, parse_table

IMAGES = {f"pytorch/manylinux2_28-builder:cuda{c}": {
    "pythons": ["3.10", "3.11", "3.12", "3.13", "3.14"], "source": "test listing"}
    for c in ("12.6", "12.9", "13.0")}


def _table(tmp_path, images=None):
    data = copy.deepcopy(MINI_TABLE)
    data["images"] = copy.deepcopy(IMAGES if images is None else images)
    return parse_table(data, tmp_path / "table.yaml")


def test_a_cell_whose_image_lacks_its_python_is_left_out_and_said(write_recipe, good_recipe,
                                                                 tmp_path):
    images = copy.deepcopy(IMAGES)
    images["pytorch/manylinux2_28-builder:cuda13.0"]["pythons"] = ["3.10", "3.11", "3.12"]
    table = _table(tmp_path, images)
    recipe = load_recipe(write_recipe(good_recipe), table)
    planned = {c.id for c in cells_for(recipe, table)}
    gaps = dict(left_out(recipe, table))
    # CUDA 13.0 builds 2.10 (its default) and 2.9, for 3.10 to 3.14: 3.13 and 3.14 are left out
    assert set(gaps) == {"demo_ext-3.13-cu130", "demo_ext-3.14-cu130",
                         "demo_ext-3.13-cu130-torch2.9", "demo_ext-3.14-cu130-torch2.9"}
    assert not planned & set(gaps) and "demo_ext-3.12-cu130" in planned
    assert gaps["demo_ext-3.14-cu130"] == (
        "pytorch/manylinux2_28-builder:cuda13.0 has no /opt/python/cp314-cp314 (the table's "
        "images: lists 3.10, 3.11, 3.12)")
    text = left_out_text([recipe], table, {"demo_ext"})
    assert "not planned: 4 cell(s) whose builder image lacks their Python" in text
    assert "  demo_ext-3.14-cu130: pytorch/manylinux2_28-builder:cuda13.0 has no" in text


def test_the_free_threaded_folder_is_its_own(write_recipe, good_recipe, tmp_path):
    data = copy.deepcopy(MINI_TABLE)
    data["torch"]["2.10"]["free_threaded"] = ["3.14t"]
    data["images"] = copy.deepcopy(IMAGES)          # 3.14 but not 3.14t
    table = parse_table(data, tmp_path / "table.yaml")
    good_recipe["free_threaded"] = {"pythons": ["3.14t"], "reason": "built with a real 3.14t"}
    recipe = load_recipe(write_recipe(good_recipe), table)
    assert dict(left_out(recipe, table)) == {"demo_ext-3.14t-cu130": (
        "pytorch/manylinux2_28-builder:cuda13.0 has no /opt/python/cp314-cp314t (the table's "
        "images: lists 3.10, 3.11, 3.12, 3.13, 3.14)")}


def test_a_table_without_images_checks_nothing(write_recipe, good_recipe, tmp_path):
    table = parse_table(copy.deepcopy(MINI_TABLE), tmp_path / "table.yaml")
    recipe = load_recipe(write_recipe(good_recipe), table)
    assert table.images == {} and left_out(recipe, table) == []


@pytest.mark.parametrize("change, expect", [
    (lambda i: i.pop("pytorch/manylinux2_28-builder:cuda12.9"),
     ["cuda.12.9.image: the image pytorch/manylinux2_28-builder:cuda12.9 has no entry under "
      "images:", "python -m tools.refresh --images lists them"]),
    (lambda i: i["pytorch/manylinux2_28-builder:cuda13.0"].update(pythons=["3.12", "3.12"]),
     ["images.pytorch/manylinux2_28-builder:cuda13.0.pythons"]),
    (lambda i: i["pytorch/manylinux2_28-builder:cuda13.0"].update(pythons=["cp312"]),
     ['is not a CPython version like "3.12" or "3.14t"']),
    (lambda i: i["pytorch/manylinux2_28-builder:cuda13.0"].update(pythons=[]),
     ["must not be empty"]),
    (lambda i: i["pytorch/manylinux2_28-builder:cuda13.0"].pop("source"),
     ["images.pytorch/manylinux2_28-builder:cuda13.0.source: required key is missing"]),
    (lambda i: i["pytorch/manylinux2_28-builder:cuda13.0"].update(digest="latest"),
     ["is not an image digest"]),
])
def test_a_bad_images_entry_is_named_with_its_rule_and_fix(tmp_path, change, expect):
    images = copy.deepcopy(IMAGES)
    change(images)
    with pytest.raises(TableError) as err:
        _table(tmp_path, images)
    for text in expect:
        assert text in str(err.value)


def test_the_repository_table_names_every_image_and_plans_no_cell_its_image_lacks():
    table = load_table()
    used = {table.image(c, p) for p in table.platforms for c in table.cuda} - {""}
    assert used <= set(table.images), used - set(table.images)
    assert all(len(i.source) > 20 for i in table.images.values())
    recipes = load_all(table=table)
    for c in plan(recipes, table):
        assert table.image_lacks(c.image, c.python) is None, c.id
    assert [g for r in recipes for g in left_out(r, table)] == []


def test_counts_says_nothing_when_nothing_is_left_out():
    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", "counts"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "not planned" not in proc.stdout
