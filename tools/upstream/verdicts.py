"""Probe verdicts for the refresh: which cell of each recipe is probed against a torch series new
to the table (or a new CUDA variant of a series), and what the probe reports say.

A series the refresh adds to the table is planned, with no recipe edit, for every recipe whose
torch range includes it (``tools.plan.recipes.torch``); whether those cells compile is not known
until they build, for hours. A probe (``tools.probing.probe_build``) answers in minutes. So the refresh
names one cell per recipe and new pair (:func:`probe_targets`, what ``--probe-plan`` writes for
the workflow's parallel probe jobs), and a second run reads the ``probe.json`` files those jobs
wrote (``--probes DIR``) and says per recipe: compiles / fails at ``<unit>: <first error>`` / not
probed (why) (:func:`judge`). A recipe that fails gets an exclusion in the same proposal
(``tools.upstream.exclusions``).

Only a unit that failed to compile is a failure of the recipe. A probe that stopped before its
compile step (torch could not be installed, the build wrote no compile commands) says nothing
about the recipe: it is "not probed", with the step and its error, and nothing is excluded.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from tools.plan.cells import cells_for
from tools.plan.recipes.model import Recipe
from tools.plan.table import Table, version_key
from tools.probing.probe_build import ProbeReport, read_report

#: The one arch a refresh probe compiles for: a probe of every arch takes as long as the build's
#: heaviest unit times the archs. sm_90 is what the recorded probes (docs/contributing/probes.md) measured; 90a first,
#: for recipes whose Hopper kernels exist only for 90a (xformers' sm_90 list is 90a).
PROBE_ARCHS = ("90a", "90")
#: Compiler paths in a first error, shortened to what a reader can find: the sdist's tree and
#: torch's installed headers.
_TREE_RE = re.compile(r"\S*/probe/src/[^/\s]+/")
_SITE_RE = re.compile(r"\S*/site-packages/")


@dataclass(frozen=True)
class ProbeTarget:
    """One recipe against one new (series, CUDA) pair: the cell probed, or why none is."""

    package: str
    series: str
    #: The CUDA version of a new variant of an existing series; None for a new series (every
    #: CUDA version the table publishes it for).
    cuda: str | None
    #: The cell probed, its CUDA version and the ``--archs`` it is probed with; None: not probed.
    cell: str | None = None
    cell_cuda: str | None = None
    archs: str = ""
    #: The CUDA versions the recipe builds this series for (of the pair): what a failure excludes.
    builds: tuple[str, ...] = ()
    #: Why the recipe has no cell of the pair (its range, its CUDA versions, an exclusion).
    why: str = ""


@dataclass(frozen=True)
class Verdict:
    """What the probe of one target found."""

    target: ProbeTarget
    #: ``compiles``, ``fails`` or ``not probed``.
    state: str
    #: The summary's words after the recipe's name.
    text: str
    #: For ``fails``: the unit and the compiler's first error (paths shortened).
    unit: str = ""
    error: str = ""


def added_pairs(old: Table, new: Table) -> list[tuple[str, str | None]]:
    """What ``new`` publishes that ``old`` doesn't: ``(series, None)`` for a new series,
    ``(series, cuda)`` for a new CUDA variant of a series ``old`` has, in table order."""
    out: list[tuple[str, str | None]] = []
    for series, entry in new.torch.items():
        if series not in old.torch:
            out.append((series, None))
            continue
        out += [(series, cuda) for cuda in entry.cuda if cuda not in old.torch[series].cuda]
    return out


def probe_arch(archs: tuple[str, ...]) -> str:
    """The arch a refresh probe compiles for (:data:`PROBE_ARCHS`), else the cell's newest."""
    return next((a for a in PROBE_ARCHS if a in archs), archs[-1] if archs else "")


def probe_targets(added: list[tuple[str, str | None]], table: Table,
                  recipes: list[Recipe]) -> list[ProbeTarget]:
    """Per added pair and recipe: the cell to probe, or why there is none.

    One cell per recipe and new series, not one per CUDA version: a probe compiles torch's
    headers, the same in every CUDA variant of a series, with the runner's one nvcc. The cell is
    of the series' PyPI CUDA where the recipe builds it, else of the newest CUDA version it
    builds the series for; its lowest Python (the first cell planned)."""
    out = []
    for series, cuda in added:
        for recipe in recipes:
            cells = [c for c in cells_for(recipe, table)
                     if series in (c.serves_torch or (c.torch,)) and cuda in (None, c.cuda)]
            if not cells:
                cudas = [cuda] if cuda else list(table.torch[series].cuda)
                why = "; ".join(dict.fromkeys(
                    w for c in cudas if (w := recipe.why_not(series, c, table))))
                out.append(ProbeTarget(recipe.package, series, cuda, why=why or "no cell planned"))
                continue
            builds = tuple(dict.fromkeys(c.cuda for c in cells))
            pypi = table.torch[series].pypi_cuda
            chosen = pypi if pypi in builds else max(builds, key=version_key)
            cell = next(c for c in cells if c.cuda == chosen)
            out.append(ProbeTarget(recipe.package, series, cuda, cell.id, cell.cuda,
                              probe_arch(cell.archs), builds))
    return out


def probe_matrix(targets: list[ProbeTarget]) -> dict:
    """The probe jobs as a GitHub matrix (``{"include": [...]}``), one per target with a cell."""
    return {"include": [{"package": t.package, "series": t.series, "cell": t.cell,
                         "archs": t.archs} for t in targets if t.cell]}


def read_reports(folder: Path) -> dict[str, tuple[ProbeReport | None, dict, str]]:
    """Every ``probe.json`` under ``folder`` (the probe jobs' artifacts, in any layout), by the
    cell it names: (the report, its raw JSON, where it is). A file that is not a probe report is
    kept with the report None and the reason, under the folder it lies in."""
    found: dict[str, tuple[ProbeReport | None, dict, str]] = {}
    for path in sorted(folder.rglob("probe.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            report = read_report(path)
        except (OSError, ValueError, TypeError) as exc:
            found[path.parent.parent.name] = (None, {}, f"{path}: {type(exc).__name__}: {exc}")
            continue
        found[report.cell] = (report, data, str(path))
    return found


def shorten(error: str) -> str:
    """A compiler's first error with the probe's work paths left out (``csrc/a.cu:3: ...``,
    ``torch/include/ATen/ATen.h:4:2: ...``), on one line."""
    text = _SITE_RE.sub("", _TREE_RE.sub("", error))
    return " ".join(text.split())


def judge(target: ProbeTarget, reports: dict[str, tuple[ProbeReport | None, dict, str]] | None
          ) -> Verdict:
    """The verdict on one target from the probe reports (None: none were given)."""
    if target.cell is None:
        return Verdict(target, "not probed", f"not probed ({target.why})")
    if reports is None:
        return Verdict(target, "not probed",
                       f"not probed yet (`python -m tools.probe {target.cell} --archs "
                       f"{target.archs}`; the refresh workflow's probe jobs run it)")
    if target.cell not in reports:
        return Verdict(target, "not probed", f"not probed (no probe report for {target.cell}: "
                                             "its probe job did not finish; see the run's log)")
    report, data, where = reports[target.cell]
    if report is None:
        return Verdict(target, "not probed", f"not probed (its report could not be read: {where})")
    archs = ",".join(report.archs)
    if report.verdict == "passed":
        units = ", ".join(f"{Path(u.unit).name} {u.seconds:.0f} s" for u in report.units)
        return Verdict(target, "compiles", f"compiles ({target.cell}, sm_{archs}: {units})")
    failed = [u for u in report.units if not u.ok]
    if failed:
        unit, error = failed[0].unit, shorten(failed[0].first_error or "no error line")
        return Verdict(target, "fails", f"fails at `{unit}`: {error} ({target.cell}, sm_{archs})",
                       unit, error)
    step = next((s for s in data.get("steps", []) if s.get("status") == "failed"), {})
    message = (data.get("error") or {}).get("message") or step.get("detail", {}).get("error", "")
    first = shorten(str(message).splitlines()[0] if message else "no error recorded")
    return Verdict(target, "not probed", f"not probed (the probe of {target.cell} stopped in its "
                                         f"{step.get('name', 'first')} step: {first})")


def verdict_lines(verdicts: list[Verdict]) -> list[str]:
    """The summary's lines: per new pair, one per recipe."""
    lines = []
    for v in verdicts:
        t = v.target
        pair = f"torch {t.series}" + (f" (CUDA {t.cuda})" if t.cuda else "")
        lines.append(f"{pair}, {t.package}: {v.text}")
    return lines
