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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TextIO

import yaml

from tools.core.errors import ProbeError
from tools.core.variant import DEFAULT_PLATFORM, torch_series
from tools.pipeline.build_toolchain import build_process_env, find_nvcc
from tools.pipeline.ccache import site_packages
from tools.pipeline.report import Progress
from tools.plan.cells import Cell, plan
from tools.plan.groups import UNITS_FILE, record_key, sources_digest
from tools.plan.job import BuildJob, Inputs
from tools.plan.recipes.model import load_all
from tools.plan.table import version_key
from . import toolkitstandin
from .compdb import Unit, read_build

STEPS = ["toolchain", "source", "python", "commands", "preprocess"]
#: One unit's preprocessing (flash-attn's take about 2 s).
PREPROCESS_TIMEOUT = 600
#: Options that write a dependency file beside the object; with -E they would write it beside
#: the preprocessed text instead, or refuse.
_DEPENDENCY_FLAGS = {"--generate-dependencies-with-compile", "-MD", "-MMD"}
_DEPENDENCY_VALUE_FLAGS = {"--dependency-output", "-MF", "-MT", "-MQ"}
_LINE_MARKER = re.compile(r'^#\s*(?:line\s+)?\d+\s+"([^"]*)"', re.M)
#: A macro definition or removal on a command line, as torch's extension builder writes them.
_MACRO_OPTION = re.compile(r"^-[DU]([A-Za-z_][A-Za-z0-9_]*)")


def siblings(job: BuildJob) -> list[Cell]:
    """The planned cells that differ from ``job``'s cell only in the torch series, newest
    first (the cell's own among them)."""
    cell = job.cell
    # the recipes it depends on too: the plan links a cell to the cells it needs
    recipes = [job.recipe]
    if job.recipe.depends:
        recipes = load_all(job.recipe.folder.parent, job.table)
    same = [c for c in plan(recipes, job.table)
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
    #: the normalized command line itself, so that a difference can be shown option by option
    command: str = ""
    #: how many of Python's headers it includes (``Python.h`` through ``torch/extension.h``):
    #: a unit that includes none compiles the same for every Python
    python_headers: int = 0
    #: its ``-D``/``-U`` options whose macro no file the unit includes names: they can't reach
    #: the text or the object, and the compiler cache leaves them out of its key too
    #: (preprocessor mode hashes the text, not the options that only act through it), so
    #: ``flags`` is the command line without them
    inert: list[str] = field(default_factory=list)


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
    #: where they differ: each option some series give the unit and others don't, with the
    #: series that give it (``-std=c++17 (2.8)``)
    differing_options: list[str] = field(default_factory=list)
    #: options that differ between the series but are inert (:attr:`UnitText.inert`): they
    #: don't make the unit differ
    inert_differences: list[str] = field(default_factory=list)


class MacroUse:
    """Whether a file names a macro, each file read once however many units include it."""

    def __init__(self):
        self._texts: dict[str, str] = {}
        self._named: dict[tuple[str, str], bool] = {}

    def named(self, name: str, files: set[str]) -> bool:
        """Does any of ``files`` contain ``name`` (as text: a conservative test, a longer
        identifier containing it counts too)? An unreadable file counts as naming it."""
        for path in files:
            key = (path, name)
            if key not in self._named:
                if path not in self._texts:
                    try:
                        self._texts[path] = Path(path).read_text(errors="replace")
                    except OSError:
                        self._texts[path] = name
                self._named[key] = name in self._texts[path]
            if self._named[key]:
                return True
        return False


def inert_options(argv: list[str], text: str, cwd: Path | str, uses: MacroUse) -> list[str]:
    """The ``-D``/``-U`` options of ``argv`` whose macro no file of the preprocessed ``text``
    names (its line markers list every file it came from; relative ones are under ``cwd``)."""
    files = {m if m.startswith("/") else str(Path(cwd) / m)
             for m in _LINE_MARKER.findall(text) if not m.startswith("<")}
    return [a for a in argv if (m := _MACRO_OPTION.match(a)) and not uses.named(m[1], files)]


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
                    replacements: dict[str, str], uses: MacroUse | None = None,
                    python_include: str | None = None) -> UnitText:
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
    inert = inert_options(argv, text, unit.directory, uses or MacroUse())
    decides = normalize(shlex.join(a for a in argv if a != str(out) and a not in inert),
                        replacements)
    out.unlink()   # flash-attn's are 10 MB each; the digest is what is kept
    python = len(included_under(text, python_include)) if python_include else 0
    return UnitText(digest, headers.digests(text), hashlib.sha256(decides.encode()).hexdigest(),
                    line, python, inert)


def python_include(python: Path) -> str:
    """The directory of ``python``'s own headers (``Python.h``), as torch's extension builder
    finds it."""
    proc = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['include'])"], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise ProbeError(f"{python} did not say where its headers are: {proc.stderr[-400:]}")
    return proc.stdout.strip().splitlines()[-1]


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
    uses = MacroUse()
    include = python_include(bp.python)

    def preprocess(step):
        for unit in units:
            result.units[unit.name] = preprocess_unit(
                unit, process_env, work / "preprocessed" / (Path(unit.name).name + ".ii"),
                headers, replacements, uses, include)
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
        options = option_differences({t: _without(u.command, u.inert) for t, u in texts.items()
                                      if u}) if flags_differ else []
        inert = {a for u in present for a in u.inert}
        ignored = [o for o in option_differences({t: u.command for t, u in texts.items() if u})
                   if o.split(" (")[0] in inert] if inert else []
        verdicts.append(UnitVerdict(name, same, digests, len(headers), differing, flags_differ,
                                    options, ignored))
    return verdicts


def _without(line: str, inert: list[str]) -> str:
    return shlex.join(a for a in shlex.split(line) if a not in inert)


def _series(torch: str) -> str:
    try:
        return torch_series(torch)
    except ValueError:          # a name that is not a torch version: shown as it is
        return torch


def option_differences(commands: dict[str, str]) -> list[str]:
    """The options of ``commands`` (torch version -> command line) that not every series has,
    each with the series that have it, in command-line order."""
    split = {torch: shlex.split(line) for torch, line in commands.items()}
    out: list[str] = []
    for torch, argv in split.items():
        for arg in argv:
            having = [_series(t) for t, other in split.items() if arg in other]
            entry = f"{arg} ({', '.join(having)})"
            if len(having) < len(split) and entry not in out:
                out.append(entry)
    return out


def combined_digest(kernels: SeriesKernels) -> str:
    """One digest of every CUDA unit's text in one series: what a kernel group's key holds."""
    lines = "".join(f"{name} {u.digest} {u.flags}\n" for name, u in sorted(kernels.units.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def span_record(job: BuildJob, series: list[SeriesKernels], toolkit: str | None = None
                ) -> dict:
    """The ``kernels:`` entry of ``units.yaml`` for ``job``'s CUDA version: the largest set of
    series whose units all preprocess alike (of two equal sets, the one with the newer
    series), under ``torch``, and every series measured under ``measured`` where that is more.
    When no two series preprocess alike, ``torch`` is the newest alone: the record then says
    so, shares nothing, and keeps those series from being measured again. A new series that
    differs from the rest so leaves their span as it was, rather than ending it.
    ``toolkit``: what preprocessed them, where it was not the cell's own CUDA version."""
    classes: dict[str, list[SeriesKernels]] = {}
    for s in series:                                    # newest first, so each class is too
        classes.setdefault(combined_digest(s), []).append(s)
    # max keeps the first of equals: the class holding the newest series comes first
    digest, same = max(classes.items(), key=lambda item: len(item[1]))
    record = {"platform": job.cell.platform,
              "torch": [torch_series(s.torch) for s in same],
              "digest": digest, "sources": sources_digest(job.recipe),
              "units": len(series[0].units),
              "read_with": f"python -m tools.probe {job.id} --across-torch --write"
                           f"{' --toolkit-stand-in' if toolkit else ''} "
                           f"(torch {', '.join(s.torch for s in series)})"}
    if len(same) < len(series):
        record["measured"] = [torch_series(s.torch) for s in series]
    if toolkit:
        record["toolkit"] = toolkit
    return record


def python_free_record(job: BuildJob, series: list[SeriesKernels], toolkit: str | None = None
                       ) -> dict | None:
    """The ``python_free:`` entry of ``units.yaml`` for ``job``'s CUDA version: every series
    measured, when none of their CUDA units includes a Python header; None otherwise."""
    if any(u.python_headers for s in series for u in s.units.values()):
        return None
    record = {"platform": job.cell.platform, "torch": [torch_series(s.torch) for s in series],
              "sources": sources_digest(job.recipe), "units": len(series[0].units),
              "read_with": f"python -m tools.probe {job.id} --across-torch --write"
                           f"{' --toolkit-stand-in' if toolkit else ''}"}
    if toolkit:
        record["toolkit"] = toolkit
    return record


#: The blocks the probe writes at the end of ``units.yaml``, in this order.
MEASURED_BLOCKS = ("kernels", "python_free")


def write_span(units_path: Path, cuda: str, record: dict | None, *, block: str = "kernels",
               platform: str = DEFAULT_PLATFORM) -> None:
    """Put ``record`` under ``<block>.<key>`` in ``units_path`` (or remove the entry when it
    is None): :func:`with_span` of the file's text, written whole or not at all."""
    text = with_span(units_path.read_text(), cuda, record, block=block, platform=platform)
    tmp = units_path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(units_path)


def continued(text: str, cuda: str, record: dict) -> dict:
    """``record`` (a ``kernels:`` span), with the digest of the record ``units.yaml``'s ``text``
    already holds under its key when that one was measured with the same sources and every
    series it shares is among ``record``'s: a measurement that adds a series (the refresh's, on
    another machine, whose system headers give the text another digest) keeps the group's key,
    and with it the kernel store's entries the earlier series' builds left."""
    key = record_key(cuda, record["platform"])
    old = ((yaml.safe_load(text) or {}).get("kernels") or {}).get(key)
    if (isinstance(old, dict) and old.get("sources") == record.get("sources")
            and len(old.get("torch") or ()) >= 2 and len(record.get("torch") or ()) >= 2
            and set(old["torch"]) <= set(record["torch"]) and "digest" in old):
        return {**record, "digest": old["digest"]}
    return record


def with_span(text: str, cuda: str, record: dict | None, *, block: str = "kernels",
              platform: str = DEFAULT_PLATFORM) -> str:
    """``units.yaml``'s ``text`` with ``record`` under ``<block>.<key>`` (or that entry
    removed when it is None), the key ``cuda`` and ``platform``'s
    (``tools.plan.groups.record_key``: each platform keeps its own); ``block`` is one of
    :data:`MEASURED_BLOCKS`; a ``kernels:`` record keeps the digest :func:`continued` says.
    Only those blocks are rewritten, at the end of the file: every other line, comments
    included, stays as it was."""
    if record is not None and block == "kernels":
        record = continued(text, cuda, record)
    key = record_key(cuda, record["platform"] if record else platform)
    data = yaml.safe_load(text) or {}
    blocks = {name: dict(data.get(name) or {}) for name in MEASURED_BLOCKS}
    if record is None:
        blocks[block].pop(key, None)
    else:
        blocks[block][key] = record
    kept, inside = [], False
    for line in text.splitlines(keepends=True):
        if any(line.startswith(f"{name}:") for name in MEASURED_BLOCKS):
            inside = True
            continue
        if inside and line.strip() and not line[0].isspace():
            inside = False          # the next top-level key or comment
        if not inside:
            kept.append(line)
    body = "".join(kept)
    if body and not body.endswith("\n"):
        body += "\n"
    for name in MEASURED_BLOCKS:
        if blocks[name]:
            body += yaml.safe_dump({name: blocks[name]}, sort_keys=False, width=100)
    return body


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
                         f"{command_cell(v)} |")
    bound = sorted({name for s in series for name, u in s.units.items() if u.python_headers})
    lines += ["", f"{len(bound)} of {len(verdicts)} CUDA units include Python's headers"
                  + (f" ({', '.join(f'`{b}`' for b in bound[:3])}"
                     f"{' ...' if len(bound) > 3 else ''}): each Python compiles them"
                     if bound else ": the Pythons of a series share them")]
    inert = sorted({o for v in same for o in v.inert_differences})
    if inert:
        lines += ["", f"Options that differ between the series but no file the units include "
                      f"names (inert, left out as the compiler cache leaves them out): "
                      f"{', '.join(f'`{o}`' for o in inert)}"]
    return "\n".join(lines)


def command_cell(verdict: UnitVerdict) -> str:
    """The table's command-line column for one unit: the same, or the options that differ."""
    if not verdict.flags_differ:
        inert = ", ".join(f"`{o}`" for o in verdict.inert_differences[:3])
        return f"the same (inert: {inert})" if inert else "the same"
    shown = ", ".join(f"`{o}`" for o in verdict.differing_options[:4])
    more = len(verdict.differing_options) - 4
    return f"differ: {shown}{f' and {more} more' if more > 0 else ''}" if shown else "differ"


def across_torch(job: BuildJob, inputs: Inputs, work_root: Path, stream: TextIO | None = None,
                 *, write: bool = False, stand_in: bool = False) -> dict:
    """Measure ``job``'s cell and its torch siblings; write and return the record. ``write``:
    also record the series that share the kernels in the recipe's ``units.yaml``
    (:func:`span_record`: a record of one series when no two do). ``stand_in``: preprocess with this machine's
    toolkit standing in for the cell's CUDA version (``tools.probing.toolkitstandin``), and
    say so in the record."""
    toolkit = None
    if stand_in:
        real = find_nvcc()
        inputs = replace(inputs, toolkit=toolkitstandin.make(real, job.cell.cuda, work_root))
        toolkit = (f"nvcc {real.version} standing in for CUDA {job.cell.cuda} (no CUDA "
                   f"{job.cell.cuda} compiler here): the torch headers and the command lines "
                   f"are CUDA {job.cell.cuda}'s, the CUDA headers {real.version}'s, and the "
                   f"archs {real.version} lacks left out")
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
              "span": span_record(job, series, toolkit),
              "python_free": python_free_record(job, series, toolkit),
              "verdicts": [asdict(v) for v in verdicts],
              "series": [asdict(s) for s in series]}
    out = work_root / job.id / "kernels" / "kernels.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    if write:
        # Only the span: a unit without Python's headers is necessary for the Pythons of a series
        # to share its object, not enough (torch_scatter's patched units had none and still
        # missed in a second Python's build), so a python_free: record is written by hand,
        # from kernels.json's, once a second Python's build has shown the kernels hitting.
        write_span(job.recipe.folder / UNITS_FILE, job.cell.cuda, record["span"],
                   platform=job.cell.platform)
    table = format_table(job.id, series, verdicts)
    span = record["span"]
    record["table"] = table + "\n\n" + (
        f"kernels shared by torch {', '.join(span['torch'])} (digest {span['digest'][:16]})"
        + (f"; measured apart: {', '.join(sorted(set(span['measured']) - set(span['torch'])))}"
           if "measured" in span else "")
        if len(span["torch"]) >= 2
        else "no two series preprocess alike: each compiles its kernels")
    return record
