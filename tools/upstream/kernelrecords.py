"""The refresh's kernel records: the records due as a matrix of jobs, and their measurements written.

``python -m tools.refresh --kernel-plan FILE --kernel-records DIR`` runs after the proposal is
written, so both are of the recipes and table it proposes: a new series' row makes its records
due, and the measurements of it apply to it. The rules are ``tools.probing.records``'.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

from tools.core.errors import TableError
from tools.plan.recipes.model import load_all
from tools.plan.runners import load_runners
from tools.plan.schema import load_yaml
from tools.plan.table import parse_table
from tools.probing.records import apply_records, due_records, due_table, record_matrix
from .follow import write_all


@dataclass(frozen=True)
class KernelRecords:
    """What the refresh says of the kernel records: its summary's section, and the records'
    change as a diff when it was not written."""

    section: str
    diff: str = ""


def kernel_records(recipes_dir: Path, table_path: Path | None, *, records: Path | None,
                   plan_file: Path | None, runners: Path | None, write: bool) -> KernelRecords:
    """Write the measurements under ``records`` into the recipes (with ``write``; else their
    diff), then the records still due into ``plan_file`` as a GitHub matrix (each job on the
    runner ``runners`` names for its recipe and platform, default ``recipes/runners.yaml``)."""
    # Read again, not load_table's cached copy: the refresh has just rewritten the file.
    path = table_path or recipes_dir / "table.yaml"
    table = parse_table(load_yaml(path, TableError), path)
    lines = ["", "### Kernel records", ""]
    diff = ""
    if records:
        applied = apply_records(records, recipes_dir, table)
        if write:
            write_all(applied.new, applied.old)
        else:
            diff = "".join(line for file, new in applied.new.items()
                           for line in difflib.unified_diff(
                               applied.old[file].splitlines(True), new.splitlines(True),
                               f"a/{file.parent.name}/{file.name}",
                               f"b/{file.parent.name}/{file.name}"))
        lines += [f"- {line}" for line in applied.lines] or [f"- no measurement in {records}"]
    if plan_file:
        recipes = load_all(recipes_dir, table)
        due, skipped = due_records(recipes, table)
        chosen = load_runners(runners or recipes_dir / "runners.yaml",
                              {r.package for r in recipes})
        plan_file.write_text(json.dumps(record_matrix(due, chosen)) + "\n", encoding="utf-8")
        lines += ["Due for measuring (`--kernel-plan`):", "", due_table(due, skipped)]
    return KernelRecords("\n".join(lines) + "\n", diff)
