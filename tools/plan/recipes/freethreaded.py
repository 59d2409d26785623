"""The recipe's ``free_threaded`` block: which free-threaded CPythons (PEP 703, ``cp314t``) it is
built for.

A free-threaded CPython is its own interpreter ABI (``cp314-cp314t``): an extension built for
``cp314`` does not load there, and torch publishes separate ``cp314t`` wheels. So a recipe opts
in per free-threaded Python, with the reason (what a build for it was checked with), or lists none
and says why not. Cells are planned where a torch series' row of the table has the Python
(``free_threaded``), on Linux x86_64 only (``PLATFORM``).

What is refused, with the rule and the fix:

- ``3.13t``: cibuildwheel 4.x, which the container backend runs, no longer builds it ("cibuildwheel
  4.x no longer supports Python 3.13 free-threading", its ``__main__``), and pypa/manylinux dropped
  it from its images on 2026-05-07 (638a3185);
- a free-threaded Python whose normal build the recipe's ``python`` specifier leaves out;
- Pythons on a recipe whose ``abi`` is ``abi3``: CPython's limited API has no free-threaded form
  before 3.15 (PEP 803's abi3t), so an abi3 wheel never installs on ``3.14t``. A recipe with
  ``abi: none`` needs no block: its ``py3-none`` wheel installs on any CPython, free-threaded too.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.specifiers import SpecifierSet

from .shape import check_block_shape
from ..schema import Problems
from tools.core.variant import DEFAULT_PLATFORM, split_python

#: The only platform free-threaded cells are planned on: the table's ``free_threaded`` lists are
#: read from torch's manylinux_2_28_x86_64 files, and Windows' 3.14t link fails in a community
#: farm (``LNK1104: python314t.lib``); aarch64 was not probed.
PLATFORM = DEFAULT_PLATFORM

#: Free-threaded Pythons no cell is planned for, whatever a recipe says, and why.
UNBUILDABLE = {
    "3.13t": "cibuildwheel 4.x (the container backend's) no longer builds 3.13 free-threaded, and "
             "pypa/manylinux removed it from its images on 2026-05-07",
}


@dataclass(frozen=True)
class FreeThreaded:
    """The free-threaded CPythons a recipe is built for (``("3.14t",)``), and why."""

    pythons: tuple[str, ...]
    reason: str


def is_free_threaded(python: str) -> bool:
    """Whether a cell's Python (``3.14t``) is a free-threaded build."""
    return split_python(python)[1]


def base_python(python: str) -> str:
    """The CPython version of a cell's Python: ``3.14t`` -> ``3.14``, ``3.12`` -> ``3.12``."""
    return split_python(python)[0]


def parse_free_threaded(p: Problems, raw: object, spec: SpecifierSet,
                        abi_python: str) -> FreeThreaded | None:
    """``free_threaded``: the Pythons (``3.14t``, each once, buildable, inside ``python``) and
    the reason; None when the recipe has no block."""
    if raw is None:
        return None
    check_block_shape(p, raw, "free_threaded")
    m = p.shaped(raw, "free_threaded")
    if m is None:
        return None
    p.reason(m["reason"], "free_threaded.reason")
    pythons = tuple(m["pythons"])
    p.once(pythons, "free_threaded.pythons", "Python")
    for py in pythons:
        if py in UNBUILDABLE:
            p.add("free_threaded.pythons", f"{py} cannot be built: {UNBUILDABLE[py]}",
                  f"remove {py!r} (3.14t and later are built)")
        elif not spec.contains(f"{base_python(py)}.0", prereleases=True):
            p.add("free_threaded.pythons", f"{py} is a build of Python {base_python(py)}, which "
                  f"python {str(spec)!r} leaves out",
                  f"remove {py!r}, or widen python: to include {base_python(py)}")
    if pythons and abi_python == "abi3":
        p.add("free_threaded.pythons", "an abi3 wheel does not install on a free-threaded "
              "CPython (the limited API has no free-threaded form before 3.15)",
              "use pythons: [] and say so in the reason")
    elif pythons and abi_python == "none":
        p.add("free_threaded.pythons", "the recipe's py3-none wheel (abi: none) already installs "
              "on free-threaded CPythons", "use pythons: [] and say so in the reason")
    return FreeThreaded(pythons, m["reason"])
