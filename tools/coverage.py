"""The coverage matrix of the front page: per project, which Python versions each (version,
variant index) pair has, yanked wheels marked, and the wheels that are in no variant index."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from markupsafe import Markup

from .ledger import Entry
from .placement import FileView, version_key, wheel_tags
from .templating import jinja_env
from .variant import Variant
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
