"""tools.plan.newseries: what a new torch series costs, recipe by recipe: cells only for a recipe
whose kernel units were measured torch-free (its CUDA version's kernel cache serves them), its
kernels compiled for any other, nothing for a stable-ABI recipe."""

from __future__ import annotations

import yaml

from tools.plan import newseries
from tools.plan.stages import job_hours
from tools.plan.cells import plan
from tools.plan.recipes.model import load_all
from tools.plan.formats import render
from tools.plan.groups import UNITS_FILE, sources_digest
from tools.plan.table import load_table

from test_stages import UNITS, runners



def test_the_next_series_is_a_copy_of_the_newest():
    table = load_table()
    newest = max(table.torch, key=lambda s: tuple(map(int, s.split("."))))
    series = newseries.next_series(table)
    major, minor = newest.split(".")
    assert series == f"{major}.{int(minor) + 1}"
    bigger = newseries.with_series(table, series)
    assert set(bigger.torch) == set(table.torch) | {series}
    copy, last = bigger.torch[series], table.torch[newest]
    assert (copy.cuda, copy.python, copy.platforms) == (last.cuda, last.python, last.platforms)
    assert copy.release == f"{series}.0" and series not in table.torch      # not changed


def test_a_recipe_measured_torch_free_costs_its_cells_only(world):
    table, recipes, _ = world()
    flashy = next(r for r in recipes if r.package == "flashy")
    # its CUDA 12.6 range open at the top, so that a new series with CUDA 12.6 joins it
    data = yaml.safe_load(flashy.path.read_text())
    data["cuda"] = {"12.6": {"torch_from": "2.8", "reason": "every series with CUDA 12.6"}}
    flashy.path.write_text(yaml.safe_dump(data, sort_keys=False))
    recipes = load_all(flashy.folder.parent, table)
    flashy = next(r for r in recipes if r.package == "flashy")
    cells = plan(recipes, table)
    (flashy.folder / UNITS_FILE).write_text(yaml.safe_dump(UNITS, sort_keys=False))
    series, before = newseries.price_new_series(recipes, table, runners())
    mine = {p.package: p for p in before}
    assert series == newseries.next_series(table) and "flashy" in mine
    unmeasured = mine["flashy"]
    assert unmeasured.hours == unmeasured.hours_compiled and "compiled for the series" in \
        unmeasured.why
    # a span measured on one of its CUDA versions: the new series reads the kernel cache
    cuda = next(c.cuda for c in cells if c.package == "flashy")
    torch = sorted({c.torch for c in cells if c.package == "flashy" and c.cuda == cuda})
    (flashy.folder / UNITS_FILE).write_text(yaml.safe_dump({**UNITS, "kernels": {cuda: {
        "platform": "linux_x86_64", "torch": torch * (2 if len(torch) == 1 else 1),
        "digest": "d" * 64, "sources": sources_digest(flashy)}}}, sort_keys=False))
    _, after = newseries.price_new_series(recipes, table, runners())
    measured = next(p for p in after if p.package == "flashy")
    assert measured.cells == unmeasured.cells and measured.hours_compiled == unmeasured.hours
    assert measured.hours < unmeasured.hours and "torch-free" in measured.why
    # what a cell reading every kernel costs: setup, the hits, the C++ unit, the finish; its
    # cells in one cell job, the setup once
    one = 0.75 + (12 * 4 + 120) / 3600 + 10 / 60
    assert measured.hours == round(job_hours(measured.cells, one, 0.75), 1)


def test_the_repository_prices_a_new_series_on_linux_x86_64():
    """The committed recipes: flash_attn and causal_conv1d (patched, measured torch-free) pay
    for cells only; a stable-ABI recipe (xformers) adds no cell."""
    out = render("new-series", [], *_repository())
    assert out.startswith("a new torch series (") and "on linux_x86_64" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[3:]}
    assert "xformers" not in rows
    for package in ("flash_attn", "causal_conv1d"):
        hours, compiled = float(rows[package][3]), float(rows[package][4])
        assert hours < compiled / 2, package
    md = render("new-series-md", [], *_repository())
    assert md.splitlines()[-1].startswith("| **total** |")


def _repository():
    from tools import RECIPES_DIR
    from tools.plan.runners import load_runners
    table = load_table()
    recipes = load_all(RECIPES_DIR, table)
    return recipes, table, load_runners(RECIPES_DIR / "runners.yaml",
                                        {r.package for r in recipes})
