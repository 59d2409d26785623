"""Needs: the wheels of the cells a cell needs (its recipe's ``depends``), found or built first.

torch_sparse's Python code imports torch_scatter, so its wheel can't pass the import check (a
fresh venv with the wheel and torch) alone, and users need torch_scatter's wheel for the same
Python, CUDA and torch. The plan links each cell to the cells it needs (``Cell.needs``,
``tools.plan.cells.link_needs``); the finish step writes a ``Requires-Dist`` on each; and before a
build starts, this step finds each needed cell's wheel in the directories given (the build's
output directory, its wheelhouse) or builds that cell first, into the cell's own work
directory, not the output: the dependency's own build publishes it. The import check (and the
kernel check) then install those wheels beside the cell's.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from tools.core.errors import PlanError, VerifyError
from tools.core.variant import opt_python_dir
from tools.plan.cells import Cell

#: Builds one needed cell (of the same plan) into a directory and returns its wheel.
BuildNeeded = Callable[[Cell, Path], Path]


def is_wheel_of(path: Path, cell: Cell, dist: str) -> bool:
    """Whether ``path`` is the wheel ``cell``'s build makes: distribution ``dist``, version
    ``<cell version>+<cell label>``, and for a per-Python build, that Python's tag."""
    try:
        name, version, _, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename:
        return False
    if canonicalize_name(name) != canonicalize_name(dist):
        return False
    if version != Version(f"{cell.version}+{cell.label}"):
        return False
    if cell.python_abi == "cpython":
        # interpreter and ABI both: a 3.14 cell's wheel is cp314-cp314, never the free-threaded
        # build's cp314-cp314t beside it (same version, same label)
        interpreter, abi = opt_python_dir(cell.python).split("-")
        return any(t.interpreter == interpreter and t.abi == abi for t in tags)
    return True


def find_wheel(cell: Cell, dist: str, dirs: tuple[Path, ...]) -> Path | None:
    """``cell``'s wheel in the first of ``dirs`` holding one; of several builds of it there
    (a raised build number), the highest, as pip would choose."""
    for folder in dirs:
        if not folder.is_dir():
            continue
        found = [p for p in folder.glob("*.whl") if is_wheel_of(p, cell, dist)]
        if found:
            return max(found, key=lambda p: parse_wheel_filename(p.name)[2] or (0, ""))
    return None


def provide(cell: Cell, needed: list[Cell], *, search: tuple[Path, ...], into: Path,
            build: BuildNeeded, say: Callable[[str], None]) -> tuple[Path, ...]:
    """The wheel of each of ``needed`` (the cells ``cell.needs`` names, in order, from the plan
    ``cell`` comes from), copied into ``into``: found in ``search``, else built first with
    ``build``. A built wheel that isn't the needed cell's is a VerifyError naming both."""
    if len(needed) != len(cell.needs_dist):
        raise PlanError(f"{cell.id}: {len(needed)} needed cells for "
                         f"{len(cell.needs_dist)} dependencies",
                         hint="pass the cells that cell.needs names, in order")
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    out = []
    for other, dist in zip(needed, cell.needs_dist):
        wheel = find_wheel(other, dist, search)
        if wheel is not None:
            say(f"needs {other.id}: {wheel}")
        else:
            where = ", ".join(str(d) for d in search) or "no directory"
            say(f"needs {other.id}: no wheel of it in {where}; building it first")
            wheel = build(other, into / "build")
            if not is_wheel_of(wheel, other, dist):
                raise VerifyError(f"{cell.id} needs {other.id}, whose build made {wheel.name}",
                                 hint=f"expected {dist}-{other.version}+{other.label} for "
                                      f"Python {other.python}")
        copied = into / wheel.name
        shutil.copy2(wheel, copied)
        out.append(copied)
    return tuple(out)
