"""The coverage matrix of the front page: per project, which Python versions each (version,
variant index) pair has, yanked wheels marked, and the wheels that are in no variant index; and,
where the index is built with the recipes, what is missing: per recipe, the cells the table allows
that have no wheel yet, and why (not built yet, the package isn't known to support that torch yet,
or a build failed, linked to its report)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from markupsafe import Markup
from packaging.utils import canonicalize_name

from .ledger import Entry
from .placement import FileView, version_key, wheel_tags
from tools.plan.recipe import Recipe, load_all
from tools.plan.table import Table, load_table
from .templating import jinja_env
from tools.core.variant import Variant, cell_id
from .wheelread import parse_version


@lru_cache(maxsize=None)
def _python_labels(tags: str) -> tuple[str, ...]:
    """``cp311-...`` -> ``3.11``; ``py3`` -> ``py3``; ``cp39-abi3-...`` and ``py39-none-...``
    (one build for every Python from 3.9 on: abi3, or no Python C API) -> ``3.9+`` (for the matrix)."""
    py, abi, _plat = tags.split("-")
    labels = []
    for tag in py.split("."):
        if tag.startswith("cp") and tag[2:].isdigit() and len(tag) >= 4:
            label = f"{tag[2]}.{tag[3:]}"
            labels.append(label + "+" if abi == "abi3" else label)
        elif tag.startswith("py") and tag[2:].isdigit() and len(tag) >= 4:
            labels.append(f"{tag[2]}.{tag[3:]}+")
        else:
            labels.append(tag)
    return tuple(labels)


def _python_sort_key(label: str) -> tuple:
    """Python versions numerically (3.10 after 3.9), then other tags (``py3``) by name."""
    head = label.rstrip("+")
    if head.replace(".", "").isdigit():
        return (0, version_key(head), label)
    return (1, (), label)


ONLY_COMBINED = "simple/ only"


def coverage_matrix(views: Mapping[str, FileView], placed: Mapping[Variant, list[Entry]]) -> list[dict[str, Any]]:
    """Per project: which Python versions exist for each (version, variant index) pair.

    Columns are the variant indexes the project appears in, then "simple/ only" for its wheels in
    no variant index (no CUDA/torch identity, or a C++ ABI no official torch of that pair uses).
    """
    # Wheel tags per (project, public version, column) first, in one flat dict: the loop runs once
    # per placed file, the Python versions are worked out once per distinct tag.
    tags_in: dict[tuple[str, str, str], set[tuple[str, bool]]] = defaultdict(set)
    in_variant: set[str] = set()
    for variant, placed_entries in placed.items():
        column = variant.index_path
        for e in placed_entries:
            in_variant.add(e.filename)
            f = views[e.filename]
            tags_in[(f.project, e.version.partition("+")[0], column)].add((wheel_tags(e.filename), f.yanked is not None))
    names: dict[str, tuple] = {}
    for f in views.values():
        e = f.entry
        # The display name is the newest release's, as on the project pages.
        if f.project not in names or f.sort_key > names[f.project][0]:
            names[f.project] = (f.sort_key, e.name)
        if e.filename not in in_variant:
            key = (f.project, e.version.partition("+")[0], ONLY_COMBINED)
            tags_in[key].add((wheel_tags(e.filename), f.yanked is not None))
    # Per cell: Python version -> "yes", or "yanked" when every wheel for it there is yanked.
    cells: dict[str, dict[str, dict[str, dict[str, str]]]] = defaultdict(lambda: defaultdict(dict))
    for (project, public, column), tags in tags_in.items():
        state: dict[str, str] = {}
        for tag, yanked in tags:
            for python in _python_labels(tag):
                if not yanked or state.get(python) != "yes":
                    state[python] = "yanked" if yanked else "yes"
        cells[project][public][column] = state
    order = {v.index_path: i for i, v in enumerate(placed)}
    order[ONLY_COMBINED] = len(order)
    matrix = []
    for project in sorted(cells):
        rows = cells[project]
        columns = sorted({c for cols in rows.values() for c in cols}, key=order.__getitem__)
        pythons = sorted({p for cols in rows.values() for ps in cols.values() for p in ps}, key=_python_sort_key)
        versions = sorted(rows, key=parse_version, reverse=True)
        matrix.append({
            "name": names[project][1],
            "normalized": project,
            "columns": [{"path": c, "label": c} for c in columns],
            "pythons": pythons,
            "rows": [
                {
                    "version": version,
                    "cells": [
                        _coverage_cell(tuple((p, rows[version][c].get(p, "no")) for p in pythons))
                        if c in rows[version] else None
                        for c in columns
                    ],
                }
                for version in versions
            ],
        })
    return matrix


@lru_cache(maxsize=4096)
def _coverage_cell(pills: tuple[tuple[str, str], ...]) -> Markup:
    """One matrix cell, rendered once per distinct pattern (an index has few).

    ``pills``: ``(python, state)``, state "yes", "yanked" or "no".
    """
    return Markup(jinja_env().get_template("coverage_cell.html").render(pills=pills))


# --------------------------------------------------------------------------- missing cells


def load_reports(reports_dir: Path) -> dict[str, dict[str, Any]]:
    """Build reports by cell id (``<dir>/<cell>/report.json``, as tools.build writes them);
    an unreadable one is skipped: the page then says "not built yet", never a wrong reason."""
    reports = {}
    for path in sorted(Path(reports_dir).glob("*/report.json")):
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(report, dict):
            reports[str(report.get("cell") or path.parent.name)] = report
    return reports


def _covers(filename: str, python: str) -> bool:
    """Whether a wheel's tags install on CPython ``python`` (cp312, abi3 from its minimum, py3)."""
    for label in _python_labels(wheel_tags(filename)):
        if label == python or (label.endswith("+")
                               and version_key(label[:-1]) <= version_key(python)):
            return True
        if label.startswith("py3"):
            return True
    return False


def missing_cells(recipes: Iterable[Recipe], table: Table, entries: Iterable[Entry],
                  reports: Mapping[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Per recipe, the cells the table allows (each torch series x its CUDA versions x the
    Pythons both allow) that have no wheel of the recipe's version, grouped by (CUDA, torch) and
    why: ``failed`` (a build report with an error; its cell links to it), ``todo`` (the recipe
    lists the pair: not built yet), or ``unsupported`` (the recipe doesn't list the pair: the
    package isn't known to support that torch with that CUDA yet)."""
    reports = reports or {}
    have: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    for e in entries:
        if e.variant is not None:
            have[(canonicalize_name(e.name), e.version.partition("+")[0], e.variant.cuda,
                  e.variant.torch)].append(e.filename)
    out = []
    for recipe in sorted(recipes, key=lambda r: r.package):
        name, version = canonicalize_name(recipe.source.pypi), recipe.source.version
        listed = {t.cuda: t.torch for t in recipe.cuda}
        groups = []
        for series in sorted(table.torch, key=version_key, reverse=True):
            for cuda in table.torch[series].cuda:
                files = have.get((name, version, cuda, series), [])
                rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
                for python in recipe.pythons_for(series, table):
                    if any(_covers(f, python) for f in files):
                        continue
                    torches = listed.get(cuda, ())
                    cell = cell_id(recipe.package, python, cuda,
                                   None if torches and torches[0] == series else series)
                    report = reports.get(cell)
                    if series not in torches:
                        kind = "unsupported"
                    elif report and report.get("error"):
                        kind = "failed"
                    else:
                        kind = "todo"
                    rows[kind].append({"python": python, "cell": cell, "report": None,
                                       "error": report["error"] if kind == "failed" else None})
                for kind in ("failed", "todo", "unsupported"):
                    if rows[kind]:
                        groups.append({"cuda": cuda, "torch": series, "kind": kind,
                                       "cells": rows[kind],
                                       "reason": _why_missing(kind, recipe, cuda, series, listed)})
        out.append({"package": recipe.package, "name": recipe.source.pypi, "version": version,
                    "groups": groups})
    return out


def _why_missing(kind: str, recipe: Recipe, cuda: str, series: str,
                 listed: Mapping[str, tuple[str, ...]]) -> str:
    if kind == "failed":
        return "the build failed: see each cell's report"
    if kind == "todo":
        return "not built yet"
    if cuda not in listed:
        return (f"the package isn't known to support torch {series} yet: the recipe builds no "
                f"CUDA {cuda} wheels (it lists CUDA {', '.join(listed)})")
    return (f"the package isn't known to support torch {series} yet: for CUDA {cuda} the recipe "
            f"lists torch {', '.join(listed[cuda])}")


def missing_report_pages(missing: list[dict[str, Any]],
                         reports: Mapping[str, dict[str, Any]]) -> dict[str, bytes]:
    """The build report of each failed cell as a site page (``reports/<cell>.json``), which the
    coverage page links to; sets each failed cell's ``report`` link."""
    pages = {}
    for recipe in missing:
        for group in recipe["groups"]:
            for c in group["cells"]:
                if group["kind"] == "failed":
                    c["report"] = f"reports/{c['cell']}.json"
                    pages[c["report"]] = (json.dumps(reports[c["cell"]], indent=2, sort_keys=True,
                                                     default=str) + "\n").encode("utf-8")
    return pages


def missing_for(recipes_dir: Path, reports_dir: Path | None, entries: Iterable[Entry]
                ) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """``missing_cells`` for the recipes under ``recipes_dir`` (with its ``table.yaml``) and the
    build reports under ``reports_dir``; returns (missing, reports) for render_site."""
    table = load_table(Path(recipes_dir) / "table.yaml")
    reports = load_reports(reports_dir) if reports_dir else {}
    return missing_cells(load_all(recipes_dir, table), table, entries, reports), reports
