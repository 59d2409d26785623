"""The matrix's output formats, called as functions on the test world (demo_ext and flashy on the
mini table, planned for GitHub's standard runner) and through ``python -m tools.matrix`` on the
repository's own recipes."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from tools import ROOT
from tools.core.errors import PlanError
from tools.plan.formats import (FORMATS, STAGED, as_github, as_groups, as_ids, as_json,
                                counts_markdown, counts_rows, counts_text, render)
from tools.plan.cells import counts, plan, select
from tools.plan.runners import load_runners
from tools.plan.stages import plan_release
from tools.plan.table import load_table

#: The repository's runner file: GitHub's standard runner.
RUNNERS = load_runners()


@pytest.fixture
def planned(world):
    """(table, recipes, cells) of the test world."""
    return world()


def release_of(planned):
    table, recipes, cells = planned
    return plan_release(cells, recipes, RUNNERS, cells)


def test_ids_one_a_line(planned):
    _, _, cells = planned
    text = as_ids(cells)
    assert text.splitlines() == [c.id for c in cells]
    assert not text.endswith("\n")          # the command's print adds the one newline
    assert as_ids([]) == ""


def test_json_carries_every_cell_in_order(planned):
    _, _, cells = planned
    rows = json.loads(as_json(cells))
    assert [r["id"] for r in rows] == [c.id for c in cells]
    assert rows == [c.to_json() for c in cells]


def test_github_holds_every_stages_matrices_on_one_compact_line(planned):
    _, _, cells = planned
    release = release_of(planned)
    github = as_github(release)
    assert "\n" not in github and ", " not in github
    doc = json.loads(github)
    assert doc == release.matrices()
    assert list(doc)[:3] == ["shards", "cells1", "cells2"]  # then each other platform's
    assert all(set(m) == {"include"} for m in doc.values())
    # each cell job: what its cells share, then each cell's own fields and estimate
    jobs = doc["cells1"]["include"] + doc["cells2"]["include"]
    assert sorted(c["id"] for j in jobs for c in j["cells"]) == sorted(c.id for c in cells)
    by_id = {c.id: c for c in cells}
    for job in jobs:
        assert set(job) == {"id", "group", "package", "platform", "image", "cuda", "python",
                            "shards", "runner", "estimate_hours", "budget_minutes",
                            "ccache_prefix", "cells"}
        for entry in job["cells"]:
            cell = by_id[entry["id"]].to_json()
            assert entry == {**cell, "estimate_hours": entry["estimate_hours"]}
            assert (cell["platform"], cell["image"], cell["cuda"]) == \
                (job["platform"], job["image"], job["cuda"])
        # the compiler cache's key prefix: Linux x86_64's as before platforms, others name theirs
        assert job["ccache_prefix"].startswith("ccache-")
    assert as_json(cells[:1]).startswith('[\n  {\n    "id": ')
    empty = json.loads(as_github(plan_release([], [], RUNNERS)))
    # every platform's matrices, each empty: the workflow skips a job whose matrix is
    assert empty == {f"{m}{part}": {"include": []} for part in ("", "_aarch64", "_win")
                     for m in ("shards", "cells1", "cells2")} and as_json([]) == "[]"


def test_groups_one_id_a_line(planned):
    release = release_of(planned)
    text = as_groups(release)
    assert text.splitlines() == [g.group.id for g in release.groups]
    assert "flashy-cu126" in text.splitlines() and not text.endswith("\n")


ROWS = [
    {"package": "demo_ext", "platform": "linux_x86_64", "abi": "cpython + exact", "before": 14,
     "after": 14, "groups": 4, "shards": 0, "hours": 21.5, "per_cell_hours": 21.5},
    {"package": "a_much_longer_name", "platform": "linux_x86_64", "abi": "none + stable>=2.8",
     "before": 9, "after": 1, "groups": 1, "shards": 3, "hours": 13.2, "per_cell_hours": 10.4},
]
#: The same recipe on a second platform: a total per platform, then the total.
ROWS_ARM = ROWS + [{**ROWS[0], "platform": "linux_aarch64", "hours": 20.0, "per_cell_hours": 20.0}]


@pytest.mark.parametrize("rows,lines", [
    (ROWS, ["package             platform      abi (python + torch)          before  after  "
            "groups  shards  runner-h  per-cell-h",
            "demo_ext            linux_x86_64  cpython + exact                   14     14  "
            "     4       0      21.5        21.5",
            "a_much_longer_name  linux_x86_64  none + stable>=2.8                 9      1  "
            "     1       3      13.2        10.4",
            "total                                                               23     15  "
            "     5       3      34.7        31.9"]),
    # Two platforms: a total line per platform, then the whole.
    (ROWS_ARM, ["package             platform       abi (python + torch)          before  after  "
                "groups  shards  runner-h  per-cell-h",
                "demo_ext            linux_x86_64   cpython + exact                   14     14  "
                "     4       0      21.5        21.5",
                "a_much_longer_name  linux_x86_64   none + stable>=2.8                 9      1  "
                "     1       3      13.2        10.4",
                "demo_ext            linux_aarch64  cpython + exact                   14     14  "
                "     4       0      20.0        20.0",
                "total               linux_x86_64                                     23     15  "
                "     5       3      34.7        31.9",
                "total               linux_aarch64                                    14     14  "
                "     4       0      20.0        20.0",
                "total                                                                37     29  "
                "     9       3      54.7        51.9"]),
    # No rows: the package column is as wide as its heading, the totals are 0.
    ([], ["package  platform  abi (python + torch)          before  after  groups  shards  "
          "runner-h  per-cell-h",
          "total                                                 0      0       0       0  "
          "       0           0"]),
])
def test_counts_text(rows, lines):
    assert counts_text(rows).splitlines() == lines


@pytest.mark.parametrize("rows,lines", [
    (ROWS, ["| package | platform | abi (python + torch) | before | after | groups | shards "
            "| runner-hours | one job per cell |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            "| demo_ext | linux_x86_64 | cpython + exact | 14 | 14 | 4 | 0 | 21.5 | 21.5 |",
            "| a_much_longer_name | linux_x86_64 | none + stable>=2.8 | 9 | 1 | 1 | 3 | 13.2 "
            "| 10.4 |",
            "| total | | | 23 | 15 | 5 | 3 | 34.7 | 31.9 |"]),
    (ROWS_ARM[2:] + ROWS[:1], [
        "| package | platform | abi (python + torch) | before | after | groups | shards "
        "| runner-hours | one job per cell |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        "| demo_ext | linux_aarch64 | cpython + exact | 14 | 14 | 4 | 0 | 20.0 | 20.0 |",
        "| demo_ext | linux_x86_64 | cpython + exact | 14 | 14 | 4 | 0 | 21.5 | 21.5 |",
        "| total | linux_aarch64 | | 14 | 14 | 4 | 0 | 20.0 | 20.0 |",
        "| total | linux_x86_64 | | 14 | 14 | 4 | 0 | 21.5 | 21.5 |",
        "| total | | | 28 | 28 | 8 | 0 | 41.5 | 41.5 |"]),
    ([], ["| package | platform | abi (python + torch) | before | after | groups | shards "
          "| runner-hours | one job per cell |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
          "| total | | | 0 | 0 | 0 | 0 | 0 | 0 |"]),
])
def test_counts_markdown(rows, lines):
    assert counts_markdown(rows).splitlines() == lines


def test_counts_rows_are_the_recipes_of_the_selected_cells(planned):
    table, recipes, cells = planned
    flashy = select(cells, packages=["flashy"], pythons=["3.12"])
    rows = counts_rows(flashy, recipes, table, RUNNERS)
    # The row counts every cell of the recipe, not only the selected ones.
    (row,) = rows
    assert {k: row[k] for k in ("package", "platform", "abi", "before", "after")} == \
        next(r for r in counts(recipes, table) if r["package"] == "flashy")
    assert row["after"] == len([c for c in cells if c.package == "flashy"]) == 9
    # and its whole plan's groups; without a unit list, no shards and the stated rule's hours
    release = plan_release([c for c in cells if c.package == "flashy"], recipes, RUNNERS)
    assert row["groups"] == len(release.groups) == 2 and row["shards"] == 0
    # its cells share their jobs' setups: fewer runner-hours than a job per cell
    assert row["hours"] == round(release.hours()[0], 1) < row["per_cell_hours"]
    assert row["per_cell_hours"] == round(release.hours()[1], 1)
    assert counts_rows([], recipes, table, RUNNERS) == []


def test_a_collapsed_recipe_counts_fewer_builds(planned):
    table, recipes, _ = planned
    demo = next(r for r in recipes if r.package == "demo_ext")
    stable = replace(demo, abi=replace(demo.abi, python="none", torch="stable", torch_from="2.8"))
    (row,) = counts_rows(plan([stable], table), [stable], table, RUNNERS)
    assert {k: row[k] for k in ("package", "abi", "before", "after", "groups")} == \
        {"package": "demo_ext", "abi": "none + stable>=2.8", "before": 14, "after": 2,
         "groups": 2}


def test_render_picks_the_format_by_name(planned):
    table, recipes, cells = planned
    assert render("ids", cells, recipes, table) == as_ids(cells)
    assert render("json", cells, recipes, table) == as_json(cells)
    release = release_of(planned)
    assert render("github", cells, recipes, table, RUNNERS) == as_github(release)
    assert render("groups", cells, recipes, table, RUNNERS) == as_groups(release)
    rows = counts_rows(cells, recipes, table, RUNNERS)
    assert render("counts", cells, recipes, table, RUNNERS) == counts_text(rows)
    assert render("counts-md", cells, recipes, table, RUNNERS) == counts_markdown(rows)
    assert set(FORMATS) == {"json", "github", "ids", "groups", "counts", "counts-md",
                            "new-series", "new-series-md"}
    with pytest.raises(PlanError, match="no output format 'yaml'") as info:
        render("yaml", cells, recipes, table)
    assert "counts-md" in info.value.hint
    # the stages' formats plan for a runner, and say so when they have none
    for name in STAGED:
        with pytest.raises(PlanError, match=f"--format {name} plans the release's stages"):
            render(name, cells, recipes, table)


def test_counts_md_agrees_with_counts_for_the_repositorys_recipes():
    """The README's table is ``--format counts-md``: the same rows and totals as ``counts``."""
    def run(fmt: str) -> list[list[str]]:
        proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", fmt], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        # the table: counts goes on after a blank line (the free-threaded cells, any left out)
        return proc.stdout.split("\n\n")[0].splitlines()

    text, markdown = run("counts"), run("counts-md")
    table = load_table()
    assert markdown[0] == ("| package | platform | abi (python + torch) | before | after | "
                           "groups | shards | runner-hours | one job per cell |")
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in markdown[2:]]
    assert [c[0] for c in cells] == [line.split()[0] for line in text[1:]]
    for row, line in zip(cells, text[1:]):
        assert row[3:] == line.split()[-6:]
        assert " ".join(row[1:3]).split() == line.split()[1:-6]
    assert int(cells[-1][4]) == len(plan())
    # one total per platform, each that platform's cells
    totals = {c[1]: int(c[4]) for c in cells if c[0] == "total" and c[1]}
    assert totals == {p: sum(1 for c in plan() if c.platform == p) for p in table.platforms}
    # a full release as planned costs fewer runner-hours than one job per cell
    assert float(cells[-1][7]) < float(cells[-1][8])
