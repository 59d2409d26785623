"""The output formats of the planned cells: what ``python -m tools.matrix --format`` prints.

Each format is a plain function of the cells, or of the staged release made of them
(``tools.plan.stages``: groups, shards, estimates; the counts formats also of the recipes and the
table), that returns the text without its final newline; ``render`` picks one by its name. The
bytes are a contract: CI reads ``github`` (every stage's matrices), nox reads ``json``, scripts
read ``ids`` and ``groups``, and ``counts-md`` is the table the docs' Packages page shows.
"""

from __future__ import annotations

import json
from collections import Counter

from tools.core.errors import PlanError
from tools.core.variant import DEFAULT_PLATFORM
from . import newseries
from .cells import Cell, counts, left_out, plan
from .recipes.freethreaded import is_free_threaded
from .recipes.model import Recipe
from .runners import Runners
from .stages import Release, plan_release
from .table import Table

#: The format names ``render`` knows, ``json`` (the default) first.
FORMATS = ("json", "github", "ids", "groups", "counts", "counts-md", "new-series",
           "new-series-md")
#: The formats made from the staged release, which need the runner file.
STAGED = ("github", "groups", "counts", "counts-md", "new-series", "new-series-md")

#: The counts tables' second column, as both formats head it.
ABI_HEADING = "abi (python + torch)"


def as_json(cells: list[Cell]) -> str:
    """The cells as an indented JSON list (what nox reads to make one session per cell)."""
    return json.dumps([c.to_json() for c in cells], indent=2)


def as_github(release: Release) -> str:
    """Every stage's GitHub Actions matrix in one object on one line: ``shards``, ``cells1``,
    ``cells2`` and each other platform's (``shards_aarch64``, ...; ``Release.matrices``), each
    ``{"include": [...]}`` for a job's ``strategy.matrix`` through ``fromJSON``."""
    return json.dumps(release.matrices(), separators=(",", ":"))


def as_ids(cells: list[Cell]) -> str:
    """One cell id a line."""
    return "\n".join(c.id for c in cells)


def as_groups(release: Release) -> str:
    """One compile group id a line, in plan order (what ``python -m tools.shard run`` takes)."""
    return "\n".join(g.group.id for g in release.groups)


#: The counts tables' columns after the package and its abi: (key, plain-text heading,
#: Markdown heading). ``hours`` and ``per_cell_hours`` are estimated runner-hours.
COLUMNS = (("before", "before", "before"), ("after", "after", "after"),
           ("groups", "groups", "groups"), ("shards", "shards", "shards"),
           ("hours", "runner-h", "runner-hours"),
           ("per_cell_hours", "per-cell-h", "one job per cell"))


def counts_rows(cells: list[Cell], recipes: list[Recipe], table: Table,
                runners: Runners, stored: frozenset[str] = frozenset()) -> list[dict]:
    """``counts`` of the recipes that have a cell among ``cells`` (every recipe's row counts all
    of its cells, whichever of them were selected), with the compile groups and shards of the
    recipe's full plan on its runner, and the estimated runner-hours of that plan (``hours``)
    and of one job per cell without shards (``per_cell_hours``); ``stored``: the group keys
    the kernel store covers (``tools.plan.stored``)."""
    chosen = {(c.package, c.platform) for c in cells}
    release = plan_release([c for c in plan(recipes, table) if (c.package, c.platform) in chosen],
                           recipes, runners, stored=stored)
    rows = []
    for row in counts(recipes, table):
        if (row["package"], row["platform"]) not in chosen:
            continue
        mine = [g for g in release.groups if g.group.package == row["package"]
                and g.group.platform == row["platform"]]
        rows.append({**row, "groups": len(mine), "shards": sum(len(g.shards) for g in mine),
                     "hours": round(sum(g.hours for g in mine), 1),
                     "per_cell_hours": round(sum(g.per_cell_hours for g in mine), 1)})
    return rows


def _total(rows: list[dict], key: str) -> int | float:
    total = sum(r[key] for r in rows)
    return round(total, 1) if isinstance(total, float) else total


def _totals(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """The total lines: one per platform when the rows have several, then the whole."""
    platforms = list(dict.fromkeys(r["platform"] for r in rows))
    per = [(f"total {p}", [r for r in rows if r["platform"] == p]) for p in platforms] \
        if len(platforms) > 1 else []
    return per + [("total", rows)]


def counts_text(rows: list[dict]) -> str:
    """The counts as an aligned plain-text table with total lines (per platform, then all)."""
    width = max([len(r["package"]) for r in rows] + [len("package")])
    pwidth = max([len(r["platform"]) for r in rows] + [len("platform")])

    def line(package: str, platform: str, abi: str, values: list) -> str:
        cells = "  ".join(f"{v!s:>{len(h)}}" for v, (_, h, _) in zip(values, COLUMNS))
        return f"{package:<{width}}  {platform:<{pwidth}}  {abi:<28}  {cells}"

    lines = [line("package", "platform", ABI_HEADING, [h for _, h, _ in COLUMNS])]
    lines += [line(r["package"], r["platform"], r["abi"], [r[k] for k, _, _ in COLUMNS])
              for r in rows]
    for name, part in _totals(rows):
        platform = name.removeprefix("total").strip()
        lines.append(line("total", platform, "", [_total(part, k) for k, _, _ in COLUMNS]))
    return "\n".join(lines)


def counts_markdown(rows: list[dict]) -> str:
    """The counts as a Markdown table with total rows: the docs' table, generated."""
    lines = [f"| package | platform | {ABI_HEADING} | " + " | ".join(m for _, _, m in COLUMNS)
             + " |", "| --- | --- | --- | " + " | ".join("---" for _ in COLUMNS) + " |"]
    lines += [f"| {r['package']} | {r['platform']} | {r['abi']} | "
              + " | ".join(str(r[k]) for k, _, _ in COLUMNS) + " |" for r in rows]
    for name, part in _totals(rows):
        platform = name.removeprefix("total").strip()
        lines.append(f"| total | {platform} | | ".replace("|  |", "| |")
                     + " | ".join(str(_total(part, k)) for k, _, _ in COLUMNS) + " |")
    return "\n".join(lines)


def free_threaded_text(cells: list[Cell], packages: set[str]) -> str:
    """How many of the planned cells of ``packages`` are for free-threaded Pythons (``3.14t``),
    by package ("" when none is)."""
    free = [c for c in cells if c.package in packages and is_free_threaded(c.python)]
    if not free:
        return ""
    per = Counter(c.package for c in free)
    pythons = ", ".join(sorted({c.python for c in free}))
    return (f"\n\nfree-threaded cells ({pythons}): {len(free)}, on "
            f"{', '.join(sorted({c.platform for c in free}))}: "
            + ", ".join(f"{pkg} {n}" for pkg, n in sorted(per.items())))


def left_out_text(recipes: list[Recipe], table: Table, packages: set[str]) -> str:
    """The cells of ``packages`` left out because their builder image lacks their Python, each
    with the reason ("" when none is)."""
    gaps = [(cell, why) for r in recipes if r.package in packages for cell, why in left_out(r, table)]
    if not gaps:
        return ""
    return (f"\n\nnot planned: {len(gaps)} cell(s) whose builder image lacks their Python\n"
            + "\n".join(f"  {cell}: {why}" for cell, why in gaps))


def render(name: str, cells: list[Cell], recipes: list[Recipe], table: Table,
           runners: Runners | None = None, stored: frozenset[str] = frozenset()) -> str:
    """The cells in the format called ``name`` (one of :data:`FORMATS`); the :data:`STAGED`
    formats plan the release on ``runners``, the groups whose keys are ``stored`` (the kernel
    store covers them: ``tools.plan.stored``) without shards."""
    if name not in FORMATS:
        raise PlanError(f"no output format {name!r}", hint=f"use one of: {', '.join(FORMATS)}")
    if name in STAGED and runners is None:
        raise PlanError(f"--format {name} plans the release's stages, which needs the runner "
                        "file", hint="pass --runners FILE (recipes/runners.yaml by default)")
    if name == "counts":
        packages = {c.package for c in cells}
        return counts_text(counts_rows(cells, recipes, table, runners, stored)) + \
            free_threaded_text(plan(recipes, table), packages) + \
            left_out_text(recipes, table, packages)
    if name == "counts-md":
        return counts_markdown(counts_rows(cells, recipes, table, runners, stored))
    if name in ("new-series", "new-series-md"):
        platforms = dict.fromkeys(c.platform for c in cells) or {DEFAULT_PLATFORM: None}
        write = newseries.as_markdown if name == "new-series-md" else newseries.as_text
        parts = []
        for platform in platforms:
            series, prices = newseries.price_new_series(recipes, table, runners, platform)
            parts.append(write(series, platform, prices))
        return "\n\n".join(parts)
    if name in ("github", "groups"):
        release = plan_release(cells, recipes, runners, plan(recipes, table), stored)
        return as_github(release) if name == "github" else as_groups(release)
    return {"json": as_json, "ids": as_ids}[name](cells)
