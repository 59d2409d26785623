"""The output formats of the planned cells: what ``python -m tools.matrix --format`` prints.

Each format is a plain function of the cells (the counts formats also of the recipes and the
table they come from) that returns the text without its final newline; ``render`` picks one by
its name. The bytes are a contract: CI reads ``github``, nox reads ``json``, scripts read
``ids``, and ``counts-md`` is the table the README shows.
"""

from __future__ import annotations

import json

from tools.core.errors import PlanError
from .matrix import Cell, counts
from .recipe import Recipe
from .table import Table

#: The format names ``render`` knows, ``json`` (the default) first.
FORMATS = ("json", "github", "ids", "counts", "counts-md")

#: The counts tables' second column, as both formats head it.
ABI_HEADING = "abi (python + torch)"


def as_json(cells: list[Cell]) -> str:
    """The cells as an indented JSON list (what nox reads to make one session per cell)."""
    return json.dumps([c.to_json() for c in cells], indent=2)


def as_github(cells: list[Cell]) -> str:
    """A GitHub Actions ``matrix`` object on one line (``{"include": [...]}``), for a job's
    ``strategy.matrix`` through ``fromJSON``."""
    return json.dumps({"include": [c.to_json() for c in cells]}, separators=(",", ":"))


def as_ids(cells: list[Cell]) -> str:
    """One cell id a line."""
    return "\n".join(c.id for c in cells)


def counts_rows(cells: list[Cell], recipes: list[Recipe], table: Table) -> list[dict]:
    """``counts`` of the recipes that have a cell among ``cells`` (every recipe's row counts all
    of its cells, whichever of them were selected)."""
    chosen = {c.package for c in cells}
    return [row for row in counts(recipes, table) if row["package"] in chosen]


def counts_text(rows: list[dict]) -> str:
    """The counts as an aligned plain-text table with a total line."""
    width = max([len(r["package"]) for r in rows] + [len("package")])
    lines = [f"{'package':<{width}}  {ABI_HEADING:<28}  before  after"]
    lines += [f"{r['package']:<{width}}  {r['abi']:<28}  {r['before']:>6}  {r['after']:>5}"
              for r in rows]
    lines.append(f"{'total':<{width}}  {'':<28}  {sum(r['before'] for r in rows):>6}  "
                 f"{sum(r['after'] for r in rows):>5}")
    return "\n".join(lines)


def counts_markdown(rows: list[dict]) -> str:
    """The counts as a Markdown table with a total row: the README's table, generated."""
    lines = [f"| package | {ABI_HEADING} | before | after |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['package']} | {r['abi']} | {r['before']} | {r['after']} |" for r in rows]
    lines.append(f"| total | | {sum(r['before'] for r in rows)} | "
                 f"{sum(r['after'] for r in rows)} |")
    return "\n".join(lines)


def render(name: str, cells: list[Cell], recipes: list[Recipe], table: Table) -> str:
    """The cells in the format called ``name`` (one of :data:`FORMATS`)."""
    if name not in FORMATS:
        raise PlanError(f"no output format {name!r}", hint=f"use one of: {', '.join(FORMATS)}")
    if name == "counts":
        return counts_text(counts_rows(cells, recipes, table))
    if name == "counts-md":
        return counts_markdown(counts_rows(cells, recipes, table))
    return {"json": as_json, "github": as_github, "ids": as_ids}[name](cells)
