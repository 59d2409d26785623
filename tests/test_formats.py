"""The matrix's output formats, called as functions on the test world (demo_ext and flashy on the
mini table) and, once, through ``python -m tools.matrix`` on the repository's own recipes."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from tools import ROOT
from tools.core.errors import PlanError
from tools.plan.formats import (FORMATS, as_github, as_ids, as_json, counts_markdown, counts_rows,
                                counts_text, render)
from tools.plan.matrix import counts, plan, select
from tools.plan.recipe import load_all
from tools.plan.table import load_table


@pytest.fixture
def planned(world):
    """(table, recipes, cells) of the test world."""
    return world()


def test_ids_one_a_line(planned):
    _, _, cells = planned
    text = as_ids(cells)
    assert text.splitlines() == [c.id for c in cells]
    assert not text.endswith("\n")          # the command's print adds the one newline
    assert as_ids([]) == ""


@pytest.mark.parametrize("render_cells,unwrap", [
    (as_json, lambda doc: doc),
    (as_github, lambda doc: doc["include"]),
])
def test_json_formats_carry_every_cell_in_order(planned, render_cells, unwrap):
    _, _, cells = planned
    rows = unwrap(json.loads(render_cells(cells)))
    assert [r["id"] for r in rows] == [c.id for c in cells]
    assert rows == [c.to_json() for c in cells]


def test_github_is_one_compact_line_and_json_is_indented(planned):
    _, _, cells = planned
    github = as_github(cells[:2])
    assert "\n" not in github and ", " not in github and github.startswith('{"include":[{"id":')
    assert as_json(cells[:1]).startswith('[\n  {\n    "id": ')
    assert as_github([]) == '{"include":[]}' and as_json([]) == "[]"


ROWS = [
    {"package": "demo_ext", "abi": "cpython + exact", "before": 14, "after": 14},
    {"package": "a_much_longer_name", "abi": "none + stable>=2.8", "before": 9, "after": 1},
]


@pytest.mark.parametrize("rows,lines", [
    (ROWS, ["package             abi (python + torch)          before  after",
            "demo_ext            cpython + exact                   14     14",
            "a_much_longer_name  none + stable>=2.8                 9      1",
            "total                                                 23     15"]),
    # No rows: the package column is as wide as its heading, the totals are 0.
    ([], ["package  abi (python + torch)          before  after",
          "total                                       0      0"]),
])
def test_counts_text(rows, lines):
    assert counts_text(rows).splitlines() == lines


@pytest.mark.parametrize("rows,lines", [
    (ROWS, ["| package | abi (python + torch) | before | after |",
            "| --- | --- | --- | --- |",
            "| demo_ext | cpython + exact | 14 | 14 |",
            "| a_much_longer_name | none + stable>=2.8 | 9 | 1 |",
            "| total | | 23 | 15 |"]),
    ([], ["| package | abi (python + torch) | before | after |", "| --- | --- | --- | --- |",
          "| total | | 0 | 0 |"]),
])
def test_counts_markdown(rows, lines):
    assert counts_markdown(rows).splitlines() == lines


def test_counts_rows_are_the_recipes_of_the_selected_cells(planned):
    table, recipes, cells = planned
    flashy = select(cells, packages=["flashy"], pythons=["3.12"])
    rows = counts_rows(flashy, recipes, table)
    # The row counts every cell of the recipe, not only the selected ones.
    assert rows == [r for r in counts(recipes, table) if r["package"] == "flashy"]
    assert rows[0]["after"] == len([c for c in cells if c.package == "flashy"]) == 9
    assert counts_rows([], recipes, table) == []


def test_a_collapsed_recipe_counts_fewer_builds(planned):
    table, recipes, _ = planned
    demo = next(r for r in recipes if r.package == "demo_ext")
    stable = replace(demo, abi=replace(demo.abi, python="none", torch="stable", torch_from="2.8"))
    (row,) = counts_rows(plan([stable], table), [stable], table)
    assert row == {"package": "demo_ext", "abi": "none + stable>=2.8", "before": 14, "after": 2}


def test_render_picks_the_format_by_name(planned):
    table, recipes, cells = planned
    assert render("ids", cells, recipes, table) == as_ids(cells)
    assert render("json", cells, recipes, table) == as_json(cells)
    assert render("github", cells, recipes, table) == as_github(cells)
    rows = counts_rows(cells, recipes, table)
    assert render("counts", cells, recipes, table) == counts_text(rows)
    assert render("counts-md", cells, recipes, table) == counts_markdown(rows)
    assert set(FORMATS) == {"json", "github", "ids", "counts", "counts-md"}
    with pytest.raises(PlanError, match="no output format 'yaml'") as info:
        render("yaml", cells, recipes, table)
    assert "counts-md" in info.value.hint


def test_counts_md_agrees_with_counts_for_the_repositorys_recipes():
    """The README's table is ``--format counts-md``: the same rows and totals as ``counts``."""
    def run(fmt: str) -> list[list[str]]:
        proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", fmt], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()

    text, markdown = run("counts"), run("counts-md")
    assert markdown[0] == "| package | abi (python + torch) | before | after |"
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in markdown[2:]]
    assert [c[0] for c in cells] == [line.split()[0] for line in text[1:]]
    for row, line in zip(cells, text[1:]):
        assert row[2:] == line.split()[-2:]
        assert row[1] == " ".join(line.split()[1:-2])
    assert int(cells[-1][3]) == len(plan())


def test_the_readmes_matrix_table_is_the_output_of_counts_md():
    """README.md's table between its markers is ``--format counts-md`` for the committed recipes,
    so the README can't drift from the plan (regenerate it with that command when this fails)."""
    readme = (ROOT / "README.md").read_text()
    start = "<!-- generated: python -m tools.matrix --format counts-md -->\n"
    assert readme.count(start) == 1, "README.md lost the marker before the matrix table"
    block = readme.split(start, 1)[1].split("<!-- end generated -->", 1)[0]
    table = load_table()
    recipes = load_all(table=table)
    cells = plan(recipes, table)
    assert block == render("counts-md", cells, recipes, table) + "\n", \
        "README.md's matrix table is stale: paste `python -m tools.matrix --format counts-md`"
