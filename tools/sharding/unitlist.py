"""Write a recipe's unit list (``units.yaml``, read by ``tools.plan.groups``) from its build.

``python -m tools.shard units CELL [--write]`` runs the cell's toolchain, source and python
steps and reads the package's own compile commands through the stand-in ninja, as the probe
does (``tools.probing.compdb``), then lists the translation units by kind. The cost block keeps
what the file had (a measured figure and its reason survive a re-read); a new file gets the
stated default rule (:data:`DEFAULT_COST`) and, per unit the recipe's probe measured, nothing
until a person adds it under ``measured`` with the probe's figure.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

import yaml

from tools.pipeline.report import Progress
from tools.plan.groups import UNITS_FILE, UNITS_SCHEMA
from tools.plan.cells import Cell
from tools.plan.job import BuildJob, Inputs
from tools.plan.recipes.model import Recipe
from tools.plan.schema import load_yaml
from tools.core.errors import PlanError
from tools.probing.compdb import Unit, read_build

#: The estimate of a unit without a measurement, per kind (CUDA: per arch), and the rule's why.
DEFAULT_COST = {
    "cuda": {"seconds": 120, "reason": "stated rule, not measured: 120 s per unit and arch, about "
                                       "the middle of the probe table's heaviest CUDA units on a "
                                       "2-core machine (41-916 s)"},
    "c++": {"seconds": 60, "reason": "stated rule, not measured: 60 s per unit, about the probe "
                                     "table's C++ units on a 2-core machine (41-176 s)"},
    "c": {"seconds": 5, "reason": "stated rule, not measured: plain C units compile in seconds"},
}

HEADER = """\
# The translation units of {package} {version}'s own build, as its ninja file lists them: read
# with `python -m tools.shard units {cell} --write` (torch {torch}, CUDA {cuda}). The plan splits
# the CUDA units into kernel shards (tools/plan/groups.py); a shard refuses to run when the build
# lists other units. cost: the estimate of one unit (CUDA: per arch) with its reason; measured:
# seconds per arch the probe measured for a unit, which override the estimate.
"""


def read_build_units(job: BuildJob, work: Path, inputs: Inputs = Inputs(),
                     stream: TextIO | None = None) -> tuple[list[Unit], str]:
    """The cell's build's translation units, and the torch version they were read with."""
    progress = Progress(job.id, ["toolchain", "source", "python", "commands"],
                        stream or sys.stderr)
    read = read_build(job, work, inputs, progress)
    return read.units, read.prelude.python.torch_version


def render_units(cell: Cell, recipe: Recipe, units: list[Unit], torch: str) -> str:
    """The text of ``units.yaml`` for these units (see the module docstring)."""
    path = recipe.folder / UNITS_FILE
    old = load_yaml(path, PlanError) if path.is_file() else {}
    old = old if isinstance(old, dict) else {}
    by_kind: dict[str, list[str]] = {}
    for unit in units:
        by_kind.setdefault(unit.kind, []).append(unit.name)
    old_cost = old.get("cost") if isinstance(old.get("cost"), dict) else {}
    cost = {kind: old_cost.get(kind, DEFAULT_COST.get(kind, DEFAULT_COST["c++"]))
            for kind in by_kind}
    names = {u.name for u in units}
    measured = {u: s for u, s in (old.get("measured") or {}).items() if u in names}
    data = {"schema": UNITS_SCHEMA, "version": recipe.source.version,
            "read_from": {"cell": cell.id, "torch": torch, "cuda": cell.cuda},
            "cost": cost, "units": by_kind}
    if measured:
        data["measured"] = measured
    if isinstance(old.get("unit_archs"), dict):
        data["unit_archs"] = old["unit_archs"]      # the package's own rule, written by hand
    for block in ("kernels", "python_free"):
        if isinstance(old.get(block), dict) and old.get("version") == recipe.source.version:
            # what python -m tools.probe CELL --across-torch --write measured (the torch spans,
            # the units without Python headers) stays while the version does; a new version's
            # units are measured again
            data[block] = old[block]
    header = HEADER.format(package=recipe.package, version=recipe.source.version, cell=cell.id,
                           torch=torch, cuda=cell.cuda)
    return header + yaml.safe_dump(data, sort_keys=False, width=100)
