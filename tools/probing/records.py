"""Kernel records kept current: which ``kernels:`` records are due, and the measured ones written.

A ``kernels:`` record in a recipe's ``units.yaml`` (``tools.plan.groups.KernelSpan``) is a
measurement: the torch series of one CUDA version on one platform whose CUDA units preprocess
alike (``python -m tools.probe CELL --across-torch``, ``tools.probing.kernelsame``). The plan
gives those series one kernel group, so a series the record lacks compiles its own kernels. A
record therefore goes stale in three ways, and this module says which records are due
(:func:`due_records`):

- **never measured**: a CUDA version and platform the recipe builds for two torch series or
  more, with no record (Linux aarch64 and CUDA 12.6 could not be measured on the development
  machine);
- **other sources**: the sdist or a patch changed since (the record's ``sources``);
- **a series not measured**: the table gained a torch series (the refresh's new row) that the
  record's ``measured`` series lack.

Only recipes that have shown kernels shared somewhere (a ``kernels:`` record of two series or
more) are followed: the others' CUDA units take torch's API, and measuring them again would only
say so again. A measurement in which no two series agree is kept as a record of one series (its
``measured`` naming the others), so the same series are not measured every day.

The refresh workflow measures what is due on each platform's own runner (:func:`record_matrix`:
the runner file's label for the recipe and platform), one job per record, and writes what they
measured into the recipes (:func:`apply_records`), in the same pull request as the new series.
Windows is not measured: the probe preprocesses through gcc's command lines and line markers and
has never run with MSVC, so a Windows group stays one per torch series (an upper bound; the
compiler cache still decides what a cell compiles).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tools.core.errors import CuwheelsError
from tools.pipeline.cudakit import CUDA as RUNNER_CUDA
from tools.plan.cells import Cell, plan
from tools.plan.groups import UNITS_FILE, parse_units, read_units, record_key, sources_digest
from tools.plan.recipes.freethreaded import is_free_threaded
from tools.plan.recipes.model import Recipe, load_all
from tools.plan.runners import Runners
from tools.plan.table import Table, version_key
from .kernelsame import with_span

#: Platforms the probe does not measure, and why (the refresh's summary says it).
NOT_MEASURED = {"win_amd64": "the probe preprocesses through gcc's command lines and has never "
                             "run with MSVC: its groups stay one per torch series"}
#: GitHub's limit on one matrix's jobs; the rest are measured by the next run.
MATRIX_LIMIT = 256


@dataclass(frozen=True)
class Due:
    """One record to measure: the recipe, CUDA version and platform, the cell the probe runs
    with ``--across-torch`` (its torch series the newest), the series it measures, and why."""

    package: str
    cuda: str
    platform: str
    cell: str
    series: tuple[str, ...]
    why: str

    @property
    def key(self) -> str:
        """The record's key in ``units.yaml`` (``tools.plan.groups.record_key``)."""
        return record_key(self.cuda, self.platform)

    @property
    def stand_in(self) -> bool:
        """Is the runner's CUDA toolkit (PyPI's, :data:`RUNNER_CUDA`) another version than the
        cell's, so that the probe measures with ``--toolkit-stand-in``?"""
        return self.cuda != RUNNER_CUDA


def followed(recipe: Recipe) -> bool:
    """Has the recipe shown kernels shared by torch series somewhere (a record of two series or
    more, whatever its sources)? Only such recipes are measured again."""
    units = read_units(recipe)
    return units is not None and any(s.shares for s in units.kernels.values())


def _probe_cells(cells: list[Cell]) -> list[Cell]:
    """The cells of one CUDA version and platform the probe measures together: those of the
    Python that the most torch series build (of equals, a Python that isn't free-threaded, then
    plan order), newest series first."""
    by_python: dict[str, list[Cell]] = {}
    for cell in cells:
        by_python.setdefault(cell.python, []).append(cell)
    best = max(by_python.values(), key=lambda cs: (len({c.torch for c in cs}),
                                                     not is_free_threaded(cs[0].python)))
    return sorted(best, key=lambda c: version_key(c.torch), reverse=True)


def due_records(recipes: list[Recipe], table: Table) -> tuple[list[Due], list[str]]:
    """The records due for measuring (see the module docstring), in plan order, and a line for
    each record that is due but not measured here (a platform in :data:`NOT_MEASURED`)."""
    cells = plan(recipes, table)
    due: list[Due] = []
    skipped: list[str] = []
    for recipe in recipes:
        if not followed(recipe):
            continue
        units = read_units(recipe)
        now = sources_digest(recipe)
        keyed: dict[tuple[str, str], list[Cell]] = {}
        for c in cells:
            if c.package == recipe.package and c.torch_abi == "exact":
                keyed.setdefault((c.cuda, c.platform), []).append(c)
        for (cuda, platform), mine in keyed.items():
            chosen = _probe_cells(mine)
            series = tuple(c.torch for c in chosen)
            if len(series) < 2:
                continue                        # one series: nothing to share
            record = units.kernels.get(record_key(cuda, platform))
            if record is None:
                why = "never measured"
            elif record.sources != now:
                why = "measured with other sources (the sdist or a patch changed since)"
            elif missing := [s for s in series if s not in record.measured_series]:
                why = f"torch {', '.join(missing)} not measured"
            else:
                continue
            if platform in NOT_MEASURED:
                skipped.append(f"{recipe.package} CUDA {cuda} on {platform}: {why}; not "
                               f"measured, {NOT_MEASURED[platform]}")
                continue
            due.append(Due(recipe.package, cuda, platform, chosen[0].id, series, why))
    return due, skipped


def record_matrix(due: list[Due], runners: Runners) -> dict:
    """The probe jobs as a GitHub matrix (``{"include": [...]}``), at most
    :data:`MATRIX_LIMIT`: each job's cell, its runner's label (the runner file's, for the recipe
    and the platform) and the probe's ``--toolkit-stand-in`` where the runner's toolkit is
    another CUDA version's."""
    return {"include": [{"package": d.package, "cuda": d.cuda, "platform": d.platform,
                         "cell": d.cell, "runner": runners.for_package(d.package, d.platform).label,
                         "stand_in": "--toolkit-stand-in" if d.stand_in else ""}
                        for d in due[:MATRIX_LIMIT]]}


@dataclass
class Applied:
    """What :func:`apply_records` found: the units files' new and old texts, and a line per
    measurement (written, or why not)."""

    new: dict[Path, str] = field(default_factory=dict)
    old: dict[Path, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


def apply_records(folder: Path, recipes_dir: Path, table: Table) -> Applied:
    """The ``kernels.json`` files under ``folder`` (the probe jobs' artifacts, any layout) as
    new ``units.yaml`` texts of the recipes in ``recipes_dir``. A measurement is written only
    when it is of a planned cell, of the sources the recipe has now and every series it names
    is one the recipe builds for that CUDA version and platform; anything else is a line saying
    why, never an error, and never a change. Each new text is read back by the plan's own
    reader before it is returned."""
    recipes = {r.package: r for r in load_all(recipes_dir, table)}
    cells = {c.id: c for c in plan(list(recipes.values()), table)}
    out = Applied()
    for path in sorted(folder.rglob("kernels.json")):
        where = path.relative_to(folder)
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
            cell_id, span = found["cell"], found["span"]
        except (OSError, ValueError, TypeError, KeyError) as exc:
            out.lines.append(f"`{where}`: not a measurement ({type(exc).__name__}: {exc}); "
                             "not written")
            continue
        cell = cells.get(cell_id) if isinstance(cell_id, str) else None
        if cell is None or not isinstance(span, dict):
            out.lines.append(f"`{where}`: {cell_id!r} is not a planned cell (or the file holds "
                             "no span); not written")
            continue
        recipe = recipes[cell.package]
        label = f"{cell.package} CUDA {cell.cuda} on {cell.platform}"
        builds = {c.torch for c in cells.values() if (c.package, c.cuda, c.platform)
                  == (cell.package, cell.cuda, cell.platform)}
        measured = span.get("measured") or span.get("torch") or []
        if span.get("sources") != sources_digest(recipe):
            out.lines.append(f"{label}: measured with other sources than the recipe's now (the "
                             "sdist or a patch changed): not written")
            continue
        if span.get("platform") != cell.platform or not set(measured) <= builds:
            out.lines.append(f"{label}: measured torch {', '.join(map(str, measured))} on "
                             f"{span.get('platform')}, which this plan doesn't build there: "
                             "not written")
            continue
        units_path = recipe.folder / UNITS_FILE
        if units_path not in out.old:
            out.old[units_path] = units_path.read_text(encoding="utf-8")
        text = with_span(out.new.get(units_path, out.old[units_path]), cell.cuda, span)
        try:
            _check(text, recipe)
        except CuwheelsError as exc:
            out.lines.append(f"{label}: the record is not one the plan reads ({exc.message}): "
                             "not written")
            continue
        out.new[units_path] = text
        torch = span["torch"]
        out.lines.append(
            f"{label}: {span.get('units', '?')} CUDA units alike in torch {', '.join(torch)}: "
            f"one kernel group" + (f"; apart: {', '.join(sorted(set(measured) - set(torch)))}"
                                   if set(measured) - set(torch) else "")
            if len(torch) >= 2 else
            f"{label}: no two of torch {', '.join(measured)} alike: each compiles its kernels "
            "(recorded, so not measured again)")
    return out


def _check(text: str, recipe: Recipe) -> None:
    """PlanError unless ``text`` is a unit list the plan reads for ``recipe``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / UNITS_FILE
        path.write_text(text, encoding="utf-8")
        parse_units(path, recipe.package, recipe.source.version)


def due_table(due: list[Due], skipped: list[str]) -> str:
    """What is due, for people (``python -m tools.probe --due`` and the refresh's summary)."""
    lines = [f"- {d.package} CUDA {d.cuda} on {d.platform} (torch {', '.join(d.series)}): "
             f"{d.why}; measured with `python -m tools.probe {d.cell} --across-torch"
             f"{' --toolkit-stand-in' if d.stand_in else ''}`" for d in due]
    lines += [f"- {s}" for s in skipped]
    return "\n".join(lines) if lines else "- every kernel record is current"
