"""The recipe's optional blocks that other pipeline steps read: ``check`` (the GPU kernel check,
``tools.kernelcheck``), ``probe`` (the units ``tools.probe`` compiles) and ``depends`` (other
recipes whose wheel of the same cell this package needs, ``tools.matrix`` and ``tools.builder.needs``).
Parsed strictly, like the rest of a recipe (``tools.recipe``), into a shared ``Problems``: each
block's shape is the recipe schema's (``tools.plan.recipes.shape``), what it names is checked here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .shape import check_block_shape
from ..schema import Problems

#: A recipe folder's (and package key's) name.
PACKAGE_RE = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class KernelCheck:
    """The recipe's GPU kernel check: a file in its folder run by ``tools.kernelcheck``."""

    file: str
    path: Path
    reason: str


@dataclass(frozen=True)
class ProbeSpec:
    """The translation units a probe build compiles by default (paths in the source tree)."""

    units: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Dependency:
    """Another recipe whose wheel, of the same Python, CUDA and torch, this package needs at
    run time: the wheel requires it, and the import check installs it."""

    package: str
    reason: str


#: The check file's conventional name: present in a folder, it must be declared.
CHECK_FILE = "check.py"


def parse_kernel_check(p: Problems, raw: object, folder: Path) -> KernelCheck | None:
    """``check``: a Python file beside recipe.yaml; a ``check.py`` there must be declared."""
    if raw is None:
        if (folder / CHECK_FILE).is_file():
            p.add("check", f"{CHECK_FILE} is in the recipe folder but not declared",
                  f"add check: {{file: {CHECK_FILE}, reason: what it compares}}, or delete it")
        return None
    check_block_shape(p, raw, "check")  # a Python file name alone: the schema's
    m = p.shaped(raw, "check")
    if m is None:
        return None
    p.reason(m["reason"], "check.reason")
    path = folder / m["file"]
    if not path.is_file():
        p.add("check.file", f"{m['file']} is declared but does not exist beside recipe.yaml",
              "add the file or remove the check entry")
    return KernelCheck(m["file"], path, m["reason"])


def parse_probe(p: Problems, raw: object) -> ProbeSpec | None:
    """``probe``: the units a probe compiles by default (paths inside the source tree, never
    absolute or with ``..``), with the reason."""
    if raw is None:
        return None
    check_block_shape(p, raw, "probe")  # each unit a path inside the tree: the schema's
    m = p.shaped(raw, "probe")
    if m is None:
        return None
    p.reason(m["reason"], "probe.reason")
    units = tuple(m["units"])
    p.once(units, "probe.units", "unit")
    return ProbeSpec(units, m["reason"])


def parse_depends(p: Problems, raw: list, package: str) -> tuple[Dependency, ...]:
    """``depends``: other recipes by folder name, each once, never the recipe itself. Whether
    they exist and build every cell this one does is checked where all recipes are known
    (``tools.plan.cells.plan``)."""
    check_block_shape(p, raw, "depends")
    out: list[Dependency] = []
    for i, entry in enumerate(raw if isinstance(raw, list) and p.usable("depends") else ()):
        where = f"depends[{i}]"
        m = p.shaped(entry, where)
        if m is None:
            continue
        p.reason(m["reason"], f"{where}.reason")
        name = m["package"]
        if not PACKAGE_RE.fullmatch(name):
            p.add(f"{where}.package", f"{name!r} is not a recipe folder name",
                  "name the other recipe's folder under recipes/, e.g. torch_scatter")
        elif name == package:
            p.add(f"{where}.package", "a recipe can't depend on itself", "remove the entry")
        elif name in {d.package for d in out}:
            p.add(f"{where}.package", f"{name} is listed twice", "remove one entry")
        else:
            out.append(Dependency(name, m["reason"]))
    return tuple(out)
