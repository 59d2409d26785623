"""Do a recipe's kernel units depend on the torch series? Preprocess them against each one.

A compile group used to be one package version x CUDA x **torch series** x platform, so every
torch series compiled the kernels again. Whether that is needed is a property of the units'
text: the compiler cache keys an object on the unit's preprocessed source (``tools.pipeline.
ccache``: one torch path, ``base_dir``, preprocessor mode), so a kernel unit whose preprocessed
source is the same against two torch series gives the same object, and a cell of one series can
read what the other compiled.

``python -m tools.probe CELL --across-torch`` measures it, compiling nothing. For the cell and
every planned cell beside it that differs only in the torch series (same package, Python, CUDA
and platform), it runs the probe's steps (toolchain, source with the patches of that series, a
venv with that torch), reads the package's compile commands through the stand-in ninja
(``tools.probing.compdb``), and runs each CUDA unit's own command line with ``-E`` in place of
``-c``. The text is hashed after the paths that differ by construction between two cells (the
cell's work directory, the venv's site-packages) are replaced by fixed names, as the compiler
cache's own setup makes them equal; so is the command line, whose other options (``-O3``, the
C++ standard) decide the object too. A unit is **the same** when every series gives one text
and one command line; otherwise the report names, per unit, the torch headers it includes whose bytes differ between
the series: what a patch would have to take out of the kernel units.

The result is written to ``<work>/<cell>/kernels/kernels.json`` and printed as a table.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

import yaml

from tools.core.errors import ProbeError
from tools.core.variant import torch_series
from tools.pipeline.build_toolchain import build_process_env
from tools.pipeline.ccache import site_packages
from tools.pipeline.report import Progress
from tools.plan.cells import Cell, plan
from tools.plan.groups import UNITS_FILE, sources_digest
from tools.plan.job import BuildJob, Inputs
from tools.plan.table import version_key
from .compdb import Unit, read_build

STEPS = ["toolchain", "source", "python", "commands", "preprocess"]
#: One unit's preprocessing (flash-attn's take about 2 s).
PREPROCESS_TIMEOUT = 600
#: Options that write a dependency file beside the object; with -E they would write it beside
#: the preprocessed text instead, or refuse.
_DEPENDENCY_FLAGS = {"--generate-dependencies-with-compile", "-MD", "-MMD"}
_DEPENDENCY_VALUE_FLAGS = {"--dependency-output", "-MF", "-MT", "-MQ"}
_LINE_MARKER = re.compile(r'^#\s*(?:line\s+)?\d+\s+"([^"]*)"', re.M)


def siblings(job: BuildJob) -> list[Cell]:
    """The planned cells that differ from ``job``'s cell only in the torch series, newest
    first (the cell's own among them)."""
    cell = job.cell
    same = [c for c in plan([job.recipe], job.table)
            if (c.package, c.python, c.cuda, c.platform, c.archs)
            == (cell.package, cell.python, cell.cuda, cell.platform, cell.archs)]
    return sorted(same, key=lambda c: version_key(c.torch), reverse=True)


def preprocess_argv(command: str, out: Path) -> list[str]:
    """A unit's compile command line (from the ninja file) turned into one that writes the
    preprocessed text to ``out``: ``-c`` becomes ``-E``, the object becomes ``out``, and the
    dependency-file options are dropped. ProbeError when the line has no ``-c`` or ``-o``."""
    argv = shlex.split(command)
    if "-c" not in argv or "-o" not in argv:
        raise ProbeError(f"not a compile command (no -c or -o): {command[:200]}",
                         hint="the probe reads the commands torch's ninja file lists; a "
                              "package that compiles another way can't be measured here")
    result: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg in _DEPENDENCY_FLAGS:
            continue
        if arg in _DEPENDENCY_VALUE_FLAGS:
            skip = True
            continue
        if arg == "-c":
            result.append("-E")
        elif i > 0 and argv[i - 1] == "-o":
            result[-1:] = ["-o", str(out)]
        else:
            result.append(arg)
    return result


def normalize(text: str, replacements: dict[str, str]) -> str:
    """``text`` with each path prefix (key) replaced by its fixed name (value), longest first."""
    for old in sorted(replacements, key=len, reverse=True):
        text = text.replace(old, replacements[old])
    return text


def included_under(text: str, root: str) -> list[str]:
    """The files under ``root`` that the preprocessed ``text`` includes (its line markers), as
    paths relative to ``root``, sorted."""
    prefix = root.rstrip("/") + "/"
    return sorted({m[len(prefix):] for m in _LINE_MARKER.findall(text) if m.startswith(prefix)})


@dataclass
class UnitText:
    """One unit preprocessed against one torch series."""

    digest: str                        # sha256 of the normalized text
    #: torch headers it includes: path under torch/include -> sha256 of the header's bytes
    torch_headers: dict[str, str] = field(default_factory=dict)
    #: sha256 of the normalized command line: options that don't reach the text (-O3,
    #: --use_fast_math, ...) still decide the object, and the compiler cache hashes them
    flags: str = ""


@dataclass
class SeriesKernels:
    """Every CUDA unit of one cell, preprocessed."""

    cell: str
    torch: str
    units: dict[str, UnitText] = field(default_factory=dict)


@dataclass
class UnitVerdict:
    """One unit across the series: the same or not, and which torch headers differ."""

    unit: str
    same: bool
    digests: dict[str, str]                                   # torch series -> digest
    torch_headers: int                                        # how many it includes
    differing_headers: list[str] = field(default_factory=list)
    #: the command lines differ (another C++ standard, other options), whatever the text
    flags_differ: bool = False


class TorchHeaders:
    """One torch's ``include`` directory, each header hashed once however many units
    include it (flash_attn's 72 units include the same 180)."""

    def __init__(self, root: Path):
        self.root = root
        self._digests: dict[str, str] = {}

    def digests(self, text: str) -> dict[str, str]:
        """The headers under the root that the preprocessed ``text`` includes -> sha256."""
        out = {}
        for rel in included_under(text, str(self.root)):
            if rel not in self._digests:
                self._digests[rel] = hashlib.sha256((self.root / rel).read_bytes()).hexdigest()
            out[rel] = self._digests[rel]
        return out


def preprocess_unit(unit: Unit, env: dict[str, str] | None, out: Path, headers: TorchHeaders,
                    replacements: dict[str, str]) -> UnitText:
    """Preprocess ``unit`` with its own command line into ``out`` and describe the text."""
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = preprocess_argv(unit.command, out)
    try:
        proc = subprocess.run(argv, cwd=unit.directory, env=env, capture_output=True, text=True,
                              timeout=PREPROCESS_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ProbeError(f"{unit.name}: preprocessing ran over {PREPROCESS_TIMEOUT} s") from None
    if proc.returncode != 0 or not out.is_file():
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise ProbeError(f"{unit.name}: preprocessing failed (exit {proc.returncode}):\n{tail}",
                         hint="the unit does not compile against this torch series with the "
                              "recipe's patches: probe it (python -m tools.probe CELL --units "
                              f"{Path(unit.name).name}) to see the first error")
    text = out.read_text(errors="replace")
    digest = hashlib.sha256(normalize(text, replacements).encode()).hexdigest()
    line = normalize(shlex.join(a for a in argv if a != str(out)), replacements)
    out.unlink()   # flash-attn's are 10 MB each; the digest is what is kept
    return UnitText(digest, headers.digests(text), hashlib.sha256(line.encode()).hexdigest())


def measure_series(job: BuildJob, inputs: Inputs, work: Path, progress: Progress
                   ) -> SeriesKernels:
    """Preprocess every CUDA unit of ``job``'s cell (see the module docstring)."""
    read = read_build(job, work, inputs, progress)
    units = [u for u in read.units if u.kind == "cuda"]
    if not units:
        raise ProbeError(f"{job.id}: the build lists no CUDA units",
                         hint="a package without CUDA units has no kernels to share")
    bp = read.prelude.python
    site = site_packages(bp.python)
    replacements = {str(work.resolve()): "<work>", str(work): "<work>",
                    str(site): "<site-packages>"}
    process_env = build_process_env(bp.python, read.env)
    headers = TorchHeaders(site / "torch" / "include")
    result = SeriesKernels(job.id, bp.torch_version)

    def preprocess(step):
        for unit in units:
            result.units[unit.name] = preprocess_unit(
                unit, process_env, work / "preprocessed" / (Path(unit.name).name + ".ii"),
                headers, replacements)
        step.detail.update(units=len(units))

    progress.run("preprocess", preprocess)
    return result


def compare(series: list[SeriesKernels]) -> list[UnitVerdict]:
    """Each unit's verdict across ``series`` (units every series lists, in the first's order).
    A unit one series lists and another doesn't is not the same there: its entry says so."""
    names = list(series[0].units)
    for s in series[1:]:
        names += [n for n in s.units if n not in names]
    verdicts = []
    for name in names:
        texts = {s.torch: s.units.get(name) for s in series}
        digests = {t: (u.digest if u else "absent") for t, u in texts.items()}
        present = [u for u in texts.values() if u]
        headers = sorted({h for u in present for h in u.torch_headers})
        differing = [h for h in headers
                     if len({u.torch_headers.get(h) for u in present}) > 1]
        flags_differ = len({u.flags for u in present}) > 1
        same = len(set(digests.values())) == 1 and not flags_differ
        verdicts.append(UnitVerdict(name, same, digests, len(headers), differing, flags_differ))
    return verdicts


def combined_digest(kernels: SeriesKernels) -> str:
    """One digest of every CUDA unit's text in one series: what a kernel group's key holds."""
    lines = "".join(f"{name} {u.digest} {u.flags}\n" for name, u in sorted(kernels.units.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def span_record(job: BuildJob, series: list[SeriesKernels]) -> dict | None:
    """The ``kernels:`` entry of ``units.yaml`` for ``job``'s CUDA version: the series whose
    units all preprocess like the newest one's (two at least), None when no other does."""
    newest = combined_digest(series[0])
    same = [s for s in series if combined_digest(s) == newest]
    if len(same) < 2:
        return None
    return {"platform": job.cell.platform,
            "torch": [torch_series(s.torch) for s in same],
            "digest": newest, "sources": sources_digest(job.recipe),
            "units": len(series[0].units),
            "read_with": f"python -m tools.probe {job.id} --across-torch --write "
                         f"(torch {', '.join(s.torch for s in same)})"}


def write_span(units_path: Path, cuda: str, record: dict | None) -> None:
    """Put ``record`` under ``kernels.<cuda>`` in ``units_path`` (or remove the entry when it
    is None). Only the ``kernels:`` block is rewritten, at the end of the file: every other
    line, comments included, stays as it was."""
    text = units_path.read_text()
    data = yaml.safe_load(text) or {}
    kernels = dict(data.get("kernels") or {})
    if record is None:
        kernels.pop(cuda, None)
    else:
        kernels[cuda] = record
    lines = text.splitlines(keepends=True)
    kept, inside = [], False
    for line in lines:
        if line.startswith("kernels:"):
            inside = True
            continue
        if inside and line.strip() and not line[0].isspace():
            inside = False          # the next top-level key or comment
        if not inside:
            kept.append(line)
    body = "".join(kept)
    if body and not body.endswith("\n"):
        body += "\n"
    if kernels:
        body += yaml.safe_dump({"kernels": kernels}, sort_keys=False, width=100)
    tmp = units_path.with_suffix(".tmp")
    tmp.write_text(body)
    tmp.replace(units_path)


def format_table(cell: str, series: list[SeriesKernels], verdicts: list[UnitVerdict]) -> str:
    """The verdicts as a markdown summary: counts, then each unit that is not the same."""
    same = [v for v in verdicts if v.same]
    torches = ", ".join(s.torch for s in series)
    lines = [f"{cell}: {len(same)} of {len(verdicts)} CUDA units preprocess the same against "
             f"torch {torches}", ""]
    differ = [v for v in verdicts if not v.same]
    if differ:
        lines += ["| unit | torch headers it includes | of them differing between the series "
                  "| command lines |", "| --- | --- | --- | --- |"]
        for v in differ:
            shown = ", ".join(f"`{h}`" for h in v.differing_headers[:6])
            more = len(v.differing_headers) - 6
            lines.append(f"| `{v.unit}` | {v.torch_headers} | {len(v.differing_headers)}: "
                         f"{shown}{f' and {more} more' if more > 0 else ''} | "
                         f"{'differ' if v.flags_differ else 'the same'} |")
    return "\n".join(lines)


def across_torch(job: BuildJob, inputs: Inputs, work_root: Path, stream: TextIO | None = None,
                 *, write: bool = False) -> dict:
    """Measure ``job``'s cell and its torch siblings; write and return the record. ``write``:
    also record the series that share the kernels in the recipe's ``units.yaml`` (or remove
    the CUDA version's entry when none do)."""
    cells = siblings(job)
    if len(cells) < 2:
        raise ProbeError(f"{job.id}: its CUDA version builds one torch series here "
                         f"({job.cell.torch}), so there is nothing to compare",
                         hint="pick a cell whose CUDA version the recipe pairs with several "
                              "torch series (python -m tools.matrix --package "
                              f"{job.cell.package} --format ids)")
    series = []
    for cell in cells:
        progress = Progress(cell.id, STEPS, stream or sys.stderr)
        series.append(measure_series(BuildJob(cell, job.recipe, job.table), inputs,
                                     work_root / cell.id / "kernels", progress))
    verdicts = compare(series)
    record = {"cell": job.id, "cuda": job.cell.cuda, "torch": [s.torch for s in series],
              "same": sum(v.same for v in verdicts), "units": len(verdicts),
              "span": span_record(job, series),
              "verdicts": [asdict(v) for v in verdicts],
              "series": [asdict(s) for s in series]}
    out = work_root / job.id / "kernels" / "kernels.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    if write:
        write_span(job.recipe.folder / UNITS_FILE, job.cell.cuda, record["span"])
    table = format_table(job.id, series, verdicts)
    span = record["span"]
    record["table"] = table + "\n\n" + (
        f"kernels shared by torch {', '.join(span['torch'])} (digest {span['digest'][:16]})"
        if span else "no other series preprocesses like the newest: each compiles its kernels")
    return record
