"""One plan that travels (``tools.builder.planned``): planned once from the recipes, or read from
what ``python -m tools.matrix --format json`` printed, with the cells a cell needs taken from the
same plan; a plan file that is not one, or older than its recipe, is a named error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tools import ROOT
from tools.builder.planned import Planned
from tools.core.errors import PlanError
from tools.plan.cells import Cell, plan


def _listing(tmp_path, *extra: str) -> str:
    """What the planner's command prints for the test world."""
    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", "json",
                           "--recipes", str(tmp_path / "recipes"),
                           "--table", str(tmp_path / "table.yaml"), *extra],
                          cwd=ROOT, capture_output=True, text=True, check=True, timeout=120)
    return proc.stdout


def test_made_once_it_holds_the_cells_their_recipes_and_what_each_needs(dependent_world):
    planned = Planned.make(dependent_world / "recipes", dependent_world / "table.yaml")
    dep = planned.cell("dep_ext-3.12-cu130-torch2.9")
    assert planned.recipe(dep).package == "dep_ext" and planned.recipe(dep).depends
    assert planned.needed(dep) == [planned.cell("demo_ext-3.12-cu130-torch2.9")]
    assert planned.needed(planned.cell("demo_ext-3.12-cu129")) == []
    with pytest.raises(PlanError, match="no cell 'dep_ext-3.9-cu130' in the plan"):
        planned.cell("dep_ext-3.9-cu130")


def test_read_from_the_planners_output_it_is_the_same_plan(dependent_world):
    made = Planned.make(dependent_world / "recipes", dependent_world / "table.yaml")
    path = dependent_world / "plan.json"
    path.write_text(_listing(dependent_world))
    read = Planned.read(path, dependent_world / "recipes", dependent_world / "table.yaml")
    assert read.cells == made.cells and read.source == str(path)
    assert read.recipes == {}                       # nothing read before it is asked for
    dep = read.cell("dep_ext-3.12-cu130-torch2.9")
    assert read.recipe(dep) == made.recipe(dep) and list(read.recipes) == ["dep_ext"]
    assert read.needed(dep) == made.needed(dep)


def test_every_cell_of_the_repository_survives_the_round_trip():
    """The repository's plan, collapsed stable-ABI cells included (their pin carries the one
    field the listing leaves out)."""
    cells = plan()
    assert any(c.torch_abi == "stable" for c in cells)
    assert [Cell.from_json(json.loads(json.dumps(c.to_json()))) for c in cells] == cells


@pytest.mark.parametrize("text, says, fix", [
    (None, "no plan there", "python -m tools.matrix --format json >"),
    ("[{", "not JSON", "write it again"),
    ('{"include": []}', "a plan is a JSON list of cells, not dict", "not --format github"),
    ('[{"id": "x"}]', "cell 0: not a planned cell (missing package", "plan it again"),
])
def test_a_file_that_is_no_plan_is_named(tmp_path, text, says, fix):
    path = tmp_path / "plan.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(PlanError) as info:
        Planned.read(path)
    assert str(info.value).startswith(f"{path}: ") and says in str(info.value)
    assert fix in info.value.hint


def test_a_plan_older_than_its_recipe_is_refused(world, tmp_path):
    world()
    path = tmp_path / "plan.json"
    path.write_text(_listing(tmp_path))
    recipe = tmp_path / "recipes" / "demo_ext" / "recipe.yaml"
    data = yaml.safe_load(recipe.read_text())
    # a new release since the plan was made
    data["source"].update(version="1.0.1", sdist="demo_ext-1.0.1.tar.gz",
                          url="https://files.example.invalid/demo_ext-1.0.1.tar.gz")
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    planned = Planned.read(path, tmp_path / "recipes", tmp_path / "table.yaml")
    cell = planned.cell("demo_ext-3.12-cu129")
    with pytest.raises(PlanError) as info:
        planned.recipe(cell)
    assert info.value.message == (f"{path}: cell demo_ext-3.12-cu129 is demo_ext 1.0.0, but "
                                  f"{recipe} now says 1.0.1")
    assert "plan again" in info.value.hint
