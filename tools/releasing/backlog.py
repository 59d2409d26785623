"""The backlog: every planned cell without a published wheel, less the cells given up on.

**Published** is the front page's rule (``tools.sitegen.frontpage.published_cells``): the
ledger's files, placed in their variant indexes, cover every (torch series, Python) the cell
serves on its platform. The ledger keeps no cell ids, so a file the plan no longer has a cell
for (an older version, a recipe removed) is counted and reported, never an error.

**Attempts** (``attempts.json``, published beside ``ledger.json`` on the site): per cell id, how
many runs in a row failed it, under which **fingerprint** (a digest of its recipe folder, the
table and the runner file), and the last error with its report's address. A cell whose tries
reach the policy's ``tries`` under the current fingerprint is **given up**: it leaves the
backlog and is listed, with its report, on the front page's "what is missing". Any change to its
recipe, the table or the runner file changes the fingerprint, and the cell is tried again from
zero. A cell that builds leaves the attempts file.

Format (JSON, schema 1)::

    {"schema": 1, "cells": {"flash_attn-3.12-cu130-torch2.14": {"tries": 2,
      "fingerprint": "sha256...", "error": "...", "report": "https://..."}}}
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from tools.core.errors import PlanError
from tools.core.variant import parse_label
from tools.plan.cells import Cell
from tools.plan.recipes.model import Recipe
from tools.plan.table import Table
from tools.sitegen.frontpage import published_cells
from tools.sitegen.ledger_file import Entry

ATTEMPTS_SCHEMA = 1
#: The largest attempts file read: 10,000 cells of a few hundred bytes each fit many times.
MAX_ATTEMPTS_BYTES = 16 << 20
#: Characters of an error kept per cell (a build's error names its step and its first lines).
MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class Attempt:
    """One cell's failed runs in a row under one fingerprint, and the last one's error."""

    tries: int
    fingerprint: str
    error: str
    report: str = ""

    def to_json(self) -> dict[str, Any]:
        """The attempt as its attempts-file object."""
        return {"tries": self.tries, "fingerprint": self.fingerprint, "error": self.error,
                "report": self.report}


def fingerprints(recipes: list[Recipe], table_path: Path, runners_path: Path) -> dict[str, str]:
    """Per recipe, the digest of what decides its builds: every file of its folder, the table
    and the runner file (a change to any of them makes a given-up cell worth trying again)."""
    shared = hashlib.sha256()
    for path in (table_path, runners_path):
        shared.update(path.read_bytes())
    out = {}
    for recipe in recipes:
        h = shared.copy()
        for path in sorted(p for p in recipe.folder.rglob("*") if p.is_file()):
            h.update(path.relative_to(recipe.folder).as_posix().encode() + b"\0")
            h.update(path.read_bytes())
        out[recipe.package] = h.hexdigest()
    return out


def load_attempts(path: Path | None) -> dict[str, Attempt]:
    """The attempts file at ``path`` (none, or a missing file: no attempts yet); PlanError naming
    the file, the key and the fix when it isn't one."""
    if path is None or not path.exists():
        return {}
    if path.stat().st_size > MAX_ATTEMPTS_BYTES:
        raise PlanError(f"{path}: larger than {MAX_ATTEMPTS_BYTES} bytes, not an attempts file",
                        hint="start it again: remove the file (every cell is then tried anew)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanError(f"{path}: not JSON ({exc})", hint="remove the file to start it again")
    if not isinstance(doc, dict) or set(doc) != {"schema", "cells"} \
            or doc["schema"] != ATTEMPTS_SCHEMA or not isinstance(doc["cells"], dict):
        raise PlanError(f"{path}: not an attempts file of schema {ATTEMPTS_SCHEMA} "
                        "({\"schema\": 1, \"cells\": {...}})",
                        hint="remove the file to start it again")
    out = {}
    for cell, raw in doc["cells"].items():
        ok = (isinstance(raw, dict) and set(raw) == {"tries", "fingerprint", "error", "report"}
              and type(raw["tries"]) is int and raw["tries"] > 0
              and all(isinstance(raw[k], str) for k in ("fingerprint", "error", "report")))
        if not ok:
            raise PlanError(f"{path}: cells.{cell[:80]}: not an attempt (tries: a whole number "
                            "above 0; fingerprint, error, report: strings)",
                            hint="remove the entry: the cell is then tried anew")
        out[cell] = Attempt(raw["tries"], raw["fingerprint"], raw["error"], raw["report"])
    return out


def dump_attempts(attempts: dict[str, Attempt]) -> str:
    """The attempts file's text: one cell a line, sorted, so that a diff shows what changed."""
    lines = [f"{json.dumps(c)}: {json.dumps(attempts[c].to_json(), sort_keys=True)}"
             for c in sorted(attempts)]
    return '{"schema": %d, "cells": {\n%s\n}}\n' % (ATTEMPTS_SCHEMA, ",\n".join(lines))


def write_attempts(path: Path, attempts: dict[str, Attempt]) -> None:
    """Write the attempts file whole or not at all (a temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(dump_attempts(attempts), encoding="utf-8")
    os.replace(tmp, path)


def record(attempts: dict[str, Attempt], results: dict[str, str | None],
           prints: dict[str, str], cells: dict[str, Cell],
           reports: dict[str, str] | None = None) -> dict[str, Attempt]:
    """The attempts after a run whose cells ended as ``results`` (cell id -> its error, None
    for a cell that built): a failure adds a try under the cell's current fingerprint (from
    zero when the fingerprint changed), a success removes the cell."""
    out = dict(attempts)
    for cell_id, error in results.items():
        if cell_id not in cells:
            continue
        if error is None:
            out.pop(cell_id, None)
            continue
        now = prints[cells[cell_id].package]
        before = out.get(cell_id)
        tries = before.tries + 1 if before and before.fingerprint == now else 1
        out[cell_id] = Attempt(tries, now, error[:MAX_ERROR_CHARS],
                               (reports or {}).get(cell_id, ""))
    return out


def pending_entries(filenames: list[str]) -> list[Entry]:
    """Wheels of complete run releases that the live ledger lacks yet (a run whose publish
    failed or was cancelled: the next publish indexes them), as ledger entries made from their
    file names alone (the variant from the local label), so that the backlog counts them
    published and no run builds them again. A name that isn't a wheel's is left out."""
    out = []
    for name in filenames:
        try:
            dist, version, _, _ = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        variant = parse_label(version.local) if version.local else None
        out.append(Entry(name, str(dist), str(version), "", "", 0, "", None, "", variant))
    return out


@dataclass(frozen=True)
class Backlog:
    """The planned cells split by what the ledger and the attempts say of them."""

    #: Planned cells to build, in plan order.
    cells: tuple[Cell, ...]
    #: Ids of planned cells the ledger publishes.
    published: frozenset[str]
    #: Ids of planned cells only released wheels the ledger lacks yet publish (the next publish
    #: indexes them): not built again, but not downloadable from the index before that.
    pending: frozenset[str]
    #: Planned cells given up on under their current fingerprint, with their last attempt.
    given_up: dict[str, Attempt]
    #: Ledger files no planned cell is published by (reported, not an error).
    unplanned_files: int
    #: Attempts of cell ids the plan no longer has (reported, not an error).
    unplanned_attempts: tuple[str, ...]


@dataclass(frozen=True)
class History:
    """What has happened to the plan so far: the ledger's published ``entries``, the
    ``attempts`` of cells that failed, the ``pending`` wheels of releases the ledger lacks
    yet (:func:`pending_entries`), and the group keys whose kernels earlier runs left in the
    kernel store (``stored``: ``tools.plan.stored``)."""

    entries: Sequence[Entry] = ()
    attempts: Mapping[str, Attempt] = field(default_factory=dict)
    pending: Sequence[Entry] = ()
    stored: frozenset[str] = frozenset()


def backlog(cells: list[Cell], recipes: list[Recipe], table: Table, history: History,
            prints: dict[str, str], tries: int) -> Backlog:
    """The backlog of ``cells`` (the full plan) over ``history`` (a cell with ``tries``
    failures under its recipe's fingerprint, ``prints``, is given up)."""
    entries, attempts, pending = list(history.entries), history.attempts, list(history.pending)
    published = published_cells(cells, recipes, table, entries)
    waiting = (published_cells(cells, recipes, table, [*entries, *pending]) - published
               if pending else set())
    given_up = {c.id: attempts[c.id] for c in cells
                if c.id not in published and c.id in attempts
                and attempts[c.id].fingerprint == prints[c.package]
                and attempts[c.id].tries >= tries}
    planned_versions = {(canonicalize_name(r.source.pypi), r.source.version) for r in recipes}
    unplanned = sum(1 for e in entries
                    if (canonicalize_name(e.name), e.version.partition("+")[0])
                    not in planned_versions)
    ids = {c.id for c in cells}
    done = published | waiting
    return Backlog(tuple(c for c in cells if c.id not in done and c.id not in given_up),
                   frozenset(published), frozenset(waiting), given_up, unplanned,
                   tuple(sorted(a for a in attempts if a not in ids)))
