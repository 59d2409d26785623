"""What a new torch series costs: its cells, with the kernels of its CUDA version already built.

``python -m tools.matrix --format new-series`` (and ``new-series-md``, the docs' table) prices
the next torch series (the newest in ``recipes/table.yaml`` plus one minor, paired with the same
CUDA versions, Pythons and platforms as the newest) on one platform, recipe by recipe, from the
plan the recipes as committed would make for it:

- **A recipe whose kernel units were measured torch-free** (a ``kernels:`` span in its
  ``units.yaml`` for a CUDA version of the platform, measured with its sdist and patches as
  committed: its patched units include no torch header, so the series of that CUDA version
  preprocess them alike) needs no kernel compiled for the new series: the kernel cache of its
  CUDA version (kept between runs) serves its cells, which compile only their binding and link
  (planned as a group the kernel store covers: no shard, each cell reading every kernel, the
  cells in cell jobs sharing their setup). This rests on the
  new series measuring like the others, which ``python -m tools.probe CELL --across-torch
  --write`` checks when the series arrives; the group key follows the measured text, so until
  then the series compiles its own kernels: the price without the cache, beside it.
- **Any other recipe** compiles its kernels for the new series: its groups as the plan sizes
  them (shards and cells). A recipe whose CUDA units were measured to include no Python header
  (``python_free:``, for a CUDA version of the platform) is priced that way for the new series
  too (one compile of its kernels for all its Pythons, when that is cheaper): what its units
  include comes from its own sources, which the new series doesn't change, and the probe
  measures the new series' units when it arrives.
- **A recipe on torch's stable ABI** (one build per CUDA version for every series) adds no
  cell: it costs nothing.

Every figure is the plan's own estimate (``tools.plan.stages``: the runner's stated setup, the
units' measured or stated seconds, the finish); the rule that makes each is in that module.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tools.core.variant import DEFAULT_PLATFORM
from .cells import Cell, plan
from .groups import groups, read_units, sources_digest
from .recipes.model import Recipe, load_recipe
from .runners import Runners
from .stages import plan_group
from .table import Table, version_key


@dataclass(frozen=True)
class SeriesPrice:
    """One recipe's cost of a new torch series on one platform."""

    package: str
    cells: int
    groups: int
    #: runner-hours with the kernel cache of its CUDA version present
    hours: float
    #: runner-hours compiling every kernel for the new series
    hours_compiled: float
    why: str


def next_series(table: Table) -> str:
    """The series after the table's newest: its minor plus one (``2.15`` -> ``2.16``)."""
    newest = max(table.torch, key=version_key)
    major, minor = newest.split(".")[:2]
    return f"{major}.{int(minor) + 1}"


def with_series(table: Table, series: str) -> Table:
    """``table`` with ``series`` added as a copy of its newest series (the same CUDA versions,
    Pythons, platforms and ABI): what the refresh would record for a series like the last."""
    newest = table.torch[max(table.torch, key=version_key)]
    entry = replace(newest, series=series, release=f"{series}.0",
                    note=f"a series priced as a copy of {newest.series} (not released)")
    return replace(table, torch={series: entry, **table.torch})


def _measured(recipe: Recipe, platform: str) -> tuple[set[str], set[str]]:
    """The CUDA versions on ``platform`` whose kernels ``recipe`` has measured torch-free
    (spans), and those whose CUDA units it has measured Python-free, with its sources as
    committed."""
    units = read_units(recipe)
    if units is None:
        return set(), set()
    now = sources_digest(recipe)
    spans = {s.cuda for s in units.kernels.values()
             if s.shares and s.platform == platform and s.sources == now}
    free = {f.cuda for f in units.python_free.values()
            if f.platform == platform and f.sources == now}
    return spans, free


def price_new_series(recipes: list[Recipe], table: Table, runners: Runners,
                     platform: str = DEFAULT_PLATFORM) -> tuple[str, list[SeriesPrice]]:
    """The next series and, per recipe with cells in it on ``platform``, what it costs (see the
    module docstring)."""
    series = next_series(table)
    bigger = with_series(table, series)
    # each recipe read again against the larger table: a range open at its top takes the series
    recipes = [load_recipe(r.folder, bigger) for r in recipes]
    cells = [c for c in plan(recipes, bigger) if c.torch == series and c.platform == platform
             and c.torch_abi != "stable"]
    prices = []
    for recipe in recipes:
        mine: list[Cell] = [c for c in cells if c.package == recipe.package]
        if not mine:
            continue
        spans, free = _measured(recipe, platform)
        runner = runners.for_package(recipe.package, platform)
        units = read_units(recipe)
        hours = compiled = 0.0
        mine_groups = groups(mine, [recipe])
        for group in mine_groups:
            archs = next(c for c in mine if c.id == group.cells[0]).archs
            group = replace(group, python_free=bool(free))
            planned = plan_group(group, recipe, runner, archs, units)
            compiled += planned.hours
            # its kernels in the cache: planned as a group the kernel store covers (no shard,
            # each cell reading every kernel, the cells in cell jobs)
            hours += plan_group(group, recipe, runner, archs, units, stored=True).hours \
                if spans and units else planned.hours
        n_groups = len(mine_groups)
        if spans:
            why = (f"kernel units measured torch-free (CUDA {', '.join(sorted(spans))}): its "
                   "cells read the kernel cache of their CUDA version")
        else:
            why = ("its kernel units take torch's headers: compiled for the series"
                   + (f", once for all Pythons (measured without Python headers, CUDA "
                      f"{', '.join(sorted(free))})" if free else ""))
        prices.append(SeriesPrice(recipe.package, len(mine), n_groups, round(hours, 1),
                                  round(compiled, 1), why))
    return series, prices


def as_text(series: str, platform: str, prices: list[SeriesPrice]) -> str:
    """The prices as a plain table, with the total (``--format new-series``)."""
    lines = [f"a new torch series ({series}) on {platform}", "",
             f"{'package':15}{'cells':>6}{'groups':>8}{'runner-h':>10}{'compiled':>10}  why"]
    for p in prices:
        lines.append(f"{p.package:15}{p.cells:>6}{p.groups:>8}{p.hours:>10.1f}"
                     f"{p.hours_compiled:>10.1f}  {p.why}")
    lines.append(f"{'total':15}{sum(p.cells for p in prices):>6}"
                 f"{sum(p.groups for p in prices):>8}{sum(p.hours for p in prices):>10.1f}"
                 f"{sum(p.hours_compiled for p in prices):>10.1f}")
    return "\n".join(lines)


def as_markdown(series: str, platform: str, prices: list[SeriesPrice]) -> str:
    """The prices as the docs' table (``--format new-series-md``)."""
    lines = [f"A new torch series (priced as {series}, a copy of the newest) on {platform}:", "",
             "| package | cells | groups | runner-hours, kernel cache present | every kernel "
             "compiled | why |", "| --- | ---: | ---: | ---: | ---: | --- |"]
    for p in prices:
        lines.append(f"| {p.package} | {p.cells} | {p.groups} | {p.hours:.1f} | "
                     f"{p.hours_compiled:.1f} | {p.why} |")
    lines.append(f"| **total** | {sum(p.cells for p in prices)} | "
                 f"{sum(p.groups for p in prices)} | **{sum(p.hours for p in prices):.1f}** | "
                 f"{sum(p.hours_compiled for p in prices):.1f} | |")
    return "\n".join(lines)
