"""The front page's two tables: the coverage matrix, per project, of which Python versions each
(version, variant index) pair has, yanked wheels marked, and the wheels that are in no variant
index; and, where the index is built with the recipes, what is missing: per recipe, the cells the
planner plans (tools.plan.cells) that have no wheel in the index yet, and why (not built yet, or
a build failed, linked to its report), beside the (CUDA, torch) pairs of the table the recipe
builds no cell of, each with its real reason (unbuilt_reason: no CUDA entry for that version,
an exclusion and the recipe's words for it, the series outside the recipe's range for that CUDA
version or outside the package's own torch range), and the platforms the recipe excludes.

A planned cell is published when, in each variant index it serves (its CUDA version with every
torch series it serves), a wheel of the recipe's project and version is placed
(tools.sitegen.placement) whose tags install on every Python the cell serves, on the cell's
platform (its wheel platform tag: an aarch64 or a Windows wheel of the same version, in the same
index, is another cell's). The index decides
this from the wheels as it places them (their variant, from the build manifest or the label, and
their tags), not from the cell id a build manifest records: the ledger the pages are rendered
from keeps no cell id, a wheel built elsewhere has no manifest, and an id names the build that was
asked for, not what the wheel serves (a stable-ABI cell keeps its id when its recipe adds a torch
series that the wheel already published was never checked against).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from markupsafe import Markup
from packaging.tags import Tag
from packaging.utils import canonicalize_name

from .ledger_file import Entry
from .placement import (FileView, place_variants, project_name, version_key, wheel_platforms_of,
                        wheel_tags)
from tools.pipeline.buildreport import BuildReport, ReportError, read_report
from tools.plan.cells import Cell, left_out, plan
from tools.plan.recipes.freethreaded import is_free_threaded
from tools.plan.recipes.model import Recipe, load_all
from tools.plan.table import Table, python_key
from tools.core.platforms import PLATFORMS
from .templating import jinja_env
from tools.core.platforms import tag_platform
from tools.core.variant import PLATFORM_PART, Variant
from .wheelread import parse_version


@lru_cache(maxsize=None)
def python_labels(tags: frozenset[Tag]) -> tuple[str, ...]:
    """The Pythons a wheel's tags name, for the matrix: ``cp311`` -> ``3.11``; ``py3`` -> ``py3``;
    ``cp39-abi3-...`` and ``py39-none-...`` (one build for every Python from 3.9 on: abi3, or no
    Python C API) -> ``3.9+``."""
    # A wheel is abi3 only when every tag is: a compressed ``abi3.none`` also names a
    # version-specific build, so its CPython tags mean one version each.
    abi3 = {t.abi for t in tags} == {"abi3"}
    labels = []
    for interpreter, abi in sorted({(t.interpreter, t.abi) for t in tags}):
        if interpreter.startswith("cp") and interpreter[2:].isdigit() and len(interpreter) >= 4:
            label = f"{interpreter[2]}.{interpreter[3:]}"
            # a free-threaded build (cp314-cp314t) is a Python of its own: 3.14t
            labels.append(label + "+" if abi3 else label + ("t" if abi == interpreter + "t" else ""))
        elif interpreter.startswith("py") and interpreter[2:].isdigit() and len(interpreter) >= 4:
            labels.append(f"{interpreter[2]}.{interpreter[3:]}+")
        else:
            labels.append(interpreter)
    return tuple(dict.fromkeys(labels))


def python_sort_key(label: str) -> tuple:
    """Python versions numerically (3.10 after 3.9), then other tags (``py3``) by name."""
    head = label.rstrip("+")
    if head.removesuffix("t").replace(".", "").isdigit():
        return (0, python_key(head), label)
    return (1, (), label)


ONLY_COMBINED = "simple/ only"


def wheel_platform(tags: frozenset[Tag]) -> str:
    """The wheel platform of the table (``linux_x86_64``, ``linux_aarch64``, ``win_amd64``) a
    wheel's tags install on, or its first platform tag when it is none of those."""
    for tag in sorted(tags, key=str):
        found = tag_platform(tag.platform)
        if found:
            return found[0]
    return min((t.platform for t in tags), default="")


def _column(path: str, platform: str) -> str:
    """A coverage column: a variant index (or "simple/ only"), with the platform's id part where
    it isn't Linux x86_64 (``cu130/torch2.14 aarch64``, ``simple/ only win``); a wheel for any
    platform (``none-any``) is unlabelled too."""
    part = "" if platform == "any" else PLATFORM_PART.get(platform, platform)
    return f"{path} {part}" if part else path


def _platform_rank(platform: str) -> tuple[int, str]:
    """The platforms of one index in the cell ids' order: Linux x86_64 (and ``any``) first, then
    aarch64, Windows; a platform the project has no name for after them, by name."""
    if platform == "any":
        return (0, "")
    order = list(PLATFORM_PART)
    return (order.index(platform), "") if platform in order else (len(order), platform)


def coverage_matrix(views: Mapping[str, FileView], placed: Mapping[Variant, list[Entry]]) -> list[dict[str, Any]]:
    """Per project: which Python versions exist for each (version, variant index, platform).

    Columns are the variant indexes the project appears in, one per wheel platform it has wheels
    of there (``cu130/torch2.14`` for Linux x86_64, ``cu130/torch2.14 aarch64``, ``... win``, in
    that order), then "simple/ only" for its wheels in no variant index (no CUDA/torch identity,
    or a C++ ABI no official torch of that pair uses), split by platform the same way.
    """
    # Wheel tags per (project, public version, column) first, in one flat dict: the loop runs once
    # per placed file, the Python versions are worked out once per distinct tag.
    tags_in: dict[tuple[str, str, str], set[tuple[frozenset[Tag], bool]]] = defaultdict(set)
    in_variant: set[str] = set()
    # column -> (its index's path, its platform)
    where: dict[str, tuple[str, str]] = {}
    for variant, placed_entries in placed.items():
        for e in placed_entries:
            in_variant.add(e.filename)
            f = views[e.filename]
            tags = wheel_tags(e.filename)
            platform = wheel_platform(tags)
            column = _column(variant.index_path, platform)
            where[column] = (variant.index_path, platform)
            tags_in[(f.project, e.version.partition("+")[0], column)].add((tags, f.yanked is not None))
    names: dict[str, tuple] = {}
    for f in views.values():
        e = f.entry
        # The display name is the newest release's, as on the project pages.
        if f.project not in names or f.sort_key > names[f.project][0]:
            names[f.project] = (f.sort_key, e.name)
        if e.filename not in in_variant:
            tags = wheel_tags(e.filename)
            platform = wheel_platform(tags)
            column = _column(ONLY_COMBINED, platform)
            where[column] = (ONLY_COMBINED, platform)
            tags_in[(f.project, e.version.partition("+")[0], column)].add((tags, f.yanked is not None))
    # Per cell: Python version -> "yes", or "yanked" when every wheel for it there is yanked.
    cells: dict[str, dict[str, dict[str, dict[str, str]]]] = defaultdict(lambda: defaultdict(dict))
    for (project, public, column), tags in tags_in.items():
        state: dict[str, str] = {}
        for tag, yanked in tags:
            for python in python_labels(tag):
                if not yanked or state.get(python) != "yes":
                    state[python] = "yanked" if yanked else "yes"
        cells[project][public][column] = state
    # Variant indexes in the order placed, then simple/ only; each one's platforms in the cell
    # ids' order (Linux x86_64 first), whatever order the files came in.
    index_order = {v.index_path: i for i, v in enumerate(placed)}
    index_order[ONLY_COMBINED] = len(index_order)
    order = {c: (index_order[path], _platform_rank(platform)) for c, (path, platform) in where.items()}
    matrix = []
    for project in sorted(cells):
        rows = cells[project]
        columns = sorted({c for cols in rows.values() for c in cols}, key=order.__getitem__)
        pythons = sorted({p for cols in rows.values() for ps in cols.values() for p in ps}, key=python_sort_key)
        versions = sorted(rows, key=parse_version, reverse=True)
        matrix.append({
            "name": names[project][1],
            "normalized": project,
            "columns": [{"path": where[c][0], "label": c} for c in columns],
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


def load_reports(reports_dir: Path) -> dict[str, BuildReport]:
    """Build reports by cell id (``<dir>/<cell>/report.json``, as tools.build writes them, read
    through ``tools.pipeline.buildreport.read_report``); an unreadable one (not JSON, another
    schema version or shape) is skipped: the page then says "not built yet", never a wrong
    reason."""
    reports = {}
    for path in sorted(Path(reports_dir).glob("*/report.json")):
        try:
            report = read_report(path)
        except ReportError:
            continue
        reports[report.cell] = report
    return reports


def _covers(filename: str, python: str, platform: str | None) -> bool:
    """Whether a wheel's tags install on CPython ``python`` (cp312, abi3 from its minimum, py3)
    on ``platform`` (``linux_aarch64``; None: a platform the project has no name for, which
    only a wheel tagged with exactly that platform could cover, and none of this project is)."""
    if platform not in wheel_platforms_of(filename):
        return False
    for label in python_labels(wheel_tags(filename)):
        # abi3 (3.9+) covers the normal builds only: no free-threaded limited API before 3.15
        if label == python or (label.endswith("+") and not is_free_threaded(python)
                               and version_key(label[:-1]) <= version_key(python)):
            return True
        if label.startswith("py3"):
            return True
    return False


@dataclass(frozen=True)
class PlanFacts:
    """What the front page compares the index with: the recipes, the cells the planner plans for
    them (tools.plan.cells.plan, each with its one id) and the build reports by cell id."""

    recipes: tuple[Recipe, ...]
    cells: tuple[Cell, ...]
    reports: Mapping[str, BuildReport] = field(default_factory=dict)


def load_planned(recipes_dir: Path, table: Table, reports_dir: Path | None = None) -> PlanFacts:
    """The recipes under ``recipes_dir`` (checked against ``table``), the cells the planner plans
    for them, and the build reports under ``reports_dir`` (``<cell>/report.json``) when given."""
    recipes = load_all(recipes_dir, table)
    return PlanFacts(tuple(recipes), tuple(plan(recipes, table)),
                   load_reports(reports_dir) if reports_dir else {})


def _published_files(placed: Mapping[Variant, list[Entry]]
                     ) -> dict[tuple[str, str, str, str, bool], list[str]]:
    """(project, public version, CUDA, torch series, pre-release) -> the files that variant index
    lists (a release candidate's build never counts for the final's cell, nor the reverse)."""
    have: dict[tuple[str, str, str, str, bool], list[str]] = defaultdict(list)
    for variant, entries in placed.items():
        for e in entries:
            have[(project_name(e.name), e.version.partition("+")[0], variant.cuda,
                  variant.torch, variant.prerelease)].append(e.filename)
    return have


def _is_published(cell: Cell, project: str, version: str,
                  have: Mapping[tuple[str, str, str, str, bool], list[str]]) -> bool:
    """Whether every (torch series, Python) the cell serves has a wheel of ``project``
    ``version`` for the cell's platform in the cell's variant index of that series: the
    aarch64 and the Windows wheels of one version sit beside the x86_64 one in the same index,
    and each is its own cell's."""
    pythons = cell.serves_python or (cell.python,)
    for series in cell.serves_torch or (cell.torch,):
        files = have.get((project, version, cell.cuda, series, bool(cell.candidate)), ())
        if not all(any(_covers(f, python, cell.platform) for f in files) for python in pythons):
            return False
    return True


def published_cells(cells: list[Cell] | tuple[Cell, ...], recipes: list[Recipe] | tuple[Recipe, ...],
                    table: Table, entries: list[Entry]) -> set[str]:
    """The ids of ``cells`` that the ledger's ``entries`` publish, by the front page's rule (see
    the module docstring): what the release's backlog leaves out."""
    have = _published_files(place_variants(entries, table=table))
    by_package = {r.package: r for r in recipes}
    return {c.id for c in cells
            if _is_published(c, canonicalize_name(by_package[c.package].source.pypi),
                             by_package[c.package].source.version, have)}


def _python_shown(cell: Cell) -> str:
    """A cell's Python on the page: ``3.12`` for a per-Python build, ``3.9+`` for one build
    serving every Python from 3.9 on (the coverage matrix's label for its wheel)."""
    if cell.python_abi == "cpython":
        return cell.python
    return min(cell.serves_python, key=version_key) + "+"


def _torch_shown(cell: Cell) -> str:
    """A cell's torch on the page: its series, or every series a stable-ABI build serves."""
    return ", ".join(sorted(cell.serves_torch or (cell.torch,), key=version_key))


def missing_cells(planned: PlanFacts, table: Table,
                  placed: Mapping[Variant, list[Entry]]) -> list[dict[str, Any]]:
    """Per recipe, its planned cells: ``published`` (their ids), and in ``groups`` the others by
    (torch series, CUDA) of the table and why: ``failed`` (a build report with an error; its cell
    links to it) or ``todo`` (not built yet); a pair of the table the recipe builds no cell of is
    a group of kind ``unsupported`` with no cells and the reason unbuilt_reason gives (a short
    ``reason`` and the recipe's own words as ``detail``). ``excluded_platforms``: the platforms
    of the table the recipe excludes, with its reason; ``left_out``: the cells not planned because
    their builder image lacks their Python (``tools.plan.table_images``), with the reason. ``placed``: the variant indexes' files
    (tools.sitegen.placement.place_variants); see the module docstring for when a cell counts as
    published."""
    have = _published_files(placed)
    by_pair: dict[tuple[str, str, str, str], list[Cell]] = defaultdict(list)
    for cell in planned.cells:
        by_pair[(cell.package, cell.torch, cell.cuda, cell.platform)].append(cell)
    out = []
    for recipe in sorted(planned.recipes, key=lambda r: r.package):
        name, version = canonicalize_name(recipe.source.pypi), recipe.source.version
        listed = {t.cuda: t.torch for t in recipe.cuda}
        published, groups = [], []
        for series in sorted(table.torch, key=version_key, reverse=True):
            for cuda in table.torch[series].cuda:
                if series not in listed.get(cuda, ()):
                    if recipe.pythons_for(series, table):
                        reason, detail = unbuilt_reason(recipe, series, cuda, table)
                        groups.append({"cuda": cuda, "torch": series, "kind": "unsupported",
                                       "platform": "", "cells": [], "reason": reason,
                                       "detail": detail})
                    continue
                for platform in table.platforms:
                    cells = by_pair.get((recipe.package, series, cuda, platform), [])
                    if cells:
                        _file_cells(cells, name, version, have, planned, published, groups)
        excluded = [{"platform": PLATFORMS[c.platform].shown if c.platform in PLATFORMS
                     else c.platform, "reason": c.reason}
                    for c in (recipe.platforms or {}).values()
                    if c.exclude and c.platform in table.platforms]
        out.append({"package": recipe.package, "name": recipe.source.pypi, "version": version,
                    "published": published, "groups": groups, "excluded_platforms": excluded,
                    "left_out": [{"cell": cell, "reason": why}
                                 for cell, why in left_out(recipe, table)]})
    return out


def _file_cells(cells: list[Cell], name: str, version: str,
                have: Mapping[tuple[str, str, str, str, bool], list[str]], planned: PlanFacts,
                published: list[str], groups: list[dict[str, Any]]) -> None:
    """The cells of one (torch series, CUDA, platform) of a recipe: each published one's id
    into ``published``, the others into a ``failed`` or ``todo`` group."""
    cuda, platform = cells[0].cuda, cells[0].platform
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for cell in cells:
        if _is_published(cell, name, version, have):
            published.append(cell.id)
            continue
        report = planned.reports.get(cell.id)
        kind = "failed" if report and report.error else "todo"
        rows[kind].append({"python": _python_shown(cell), "cell": cell.id, "report": None,
                           "error": report.error if report and kind == "failed" else None})
    for kind in ("failed", "todo"):
        if rows[kind]:
            # A stable-ABI cell is filed under the series it builds against
            # and says every series it serves.
            groups.append({"cuda": cuda, "torch": _torch_shown(cells[0]), "kind": kind,
                           "platform": platform, "cells": rows[kind],
                           "reason": ("the build failed: see each cell's report"
                                      if kind == "failed" else "not built yet"),
                           "detail": None})


def unbuilt_reason(recipe: Recipe, series: str, cuda: str,
                   table: Table) -> tuple[str, str | None]:
    """Why ``recipe`` builds no cell of torch ``series`` with CUDA ``cuda`` (a pair of the
    table that has a Python the recipe allows), as ``(reason, the recipe's own words or None)``.

    The reason names what the recipe really says, in this order: no entry for that CUDA version
    at all (then it is the CUDA variant that is missing, not the torch series: the reason says
    which CUDA versions that series is built for); an ``exclude:`` entry (its reason); the
    package's own ``torch:`` range, which the series is newer (not supported yet) or older than;
    the CUDA entry's range or list, which leaves the series out (the entry's reason).
    """
    built_for = [t.cuda for t in recipe.cuda if series in t.torch]
    elsewhere = (f"; torch {series} is built for CUDA {', '.join(built_for)}" if built_for
                 else "")
    target = next((t for t in recipe.cuda if t.cuda == cuda), None)
    if target is None:
        return (f"no CUDA {cuda} variant: the recipe builds for CUDA "
                f"{', '.join(t.cuda for t in recipe.cuda)} only{elsewhere}", None)
    excluded = next((x for x in recipe.exclude if x.covers(series, cuda)), None)
    if excluded is not None:
        where = f"with CUDA {cuda}" if excluded.cuda else "with every CUDA version"
        return f"excluded by the recipe: torch {series} {where}{elsewhere}", excluded.reason
    own = recipe.torch_range
    if own is not None and not own.includes(series):
        if version_key(series) < version_key(own.first):
            return (f"the package needs torch {own.first} or newer (the recipe's torch range: "
                    f"{own})", None)
        return (f"torch {series} is not in the recipe's torch range ({own}) yet: the package "
                f"isn't known to support it yet", None)
    if target.range is None:
        return (f"the recipe's CUDA {cuda} build lists torch {', '.join(target.torch)} "
                f"only{elsewhere}", target.reason)
    if not target.range.includes(series):
        newer = target.range.last is not None and \
            version_key(series) > version_key(target.range.last)
        return (f"torch {series} is {'newer' if newer else 'older'} than the recipe's CUDA "
                f"{cuda} range (torch {target.range}){elsewhere}", target.reason)
    # In range and not excluded, yet not built: the recipe's own explanation (its Python).
    return recipe.why_not(series, cuda, table) or "not planned", None


def missing_report_pages(missing: list[dict[str, Any]],
                         reports: Mapping[str, BuildReport]) -> dict[str, bytes]:
    """The build report of each failed cell as a site page (``reports/<cell>.json``), which the
    front page links to; sets each failed cell's ``report`` link."""
    pages = {}
    for recipe in missing:
        for group in recipe["groups"]:
            for c in group["cells"]:
                if group["kind"] == "failed":
                    c["report"] = f"reports/{c['cell']}.json"
                    pages[c["report"]] = (json.dumps(reports[c["cell"]].to_json(), indent=2,
                                                     sort_keys=True, default=str)
                                          + "\n").encode("utf-8")
    return pages
