"""The wheel platforms of the compatibility table: ``platforms:`` and ``torch.<series>.platforms``.

A **platform** is where a wheel installs (``linux_x86_64``, ``linux_aarch64``, ``win_amd64``):
its wheel platform tag (a pattern, ``manylinux_{manylinux}_aarch64``, filled with the torch
series' glibc baseline), and how its cells are built: ``container`` (cibuildwheel in a builder
image per CUDA version: ``images``, or for Linux x86_64 the table's ``cuda.<X.Y>.image``) or
``native`` (cibuildwheel on the runner itself, with the ``toolchain`` it states). Where the
platform's toolkit or torch's own wheels differ from the CUDA table's lists, ``archs`` (what
its nvcc compiles) and ``default_archs`` (torch's list for its wheels there) say so per CUDA
version.

Per torch series, ``torch.<series>.platforms.<platform>: {pypi_cuda, cuda, source}`` says which
CUDA builds of torch exist for a platform other than Linux x86_64 (whose facts are the series
row itself): ``pypi_cuda`` the CUDA version of PyPI's wheel for that platform, or null when
PyPI's wheel there is CPU-only; ``cuda`` every CUDA build known (the others are on PyTorch's own
per-CUDA index). A series without an entry for a platform has no CUDA build there that the table
knows of: no cell of that series is planned on it.

The id part of each platform is ``tools.core.variant.PLATFORM_PART``'s: the table may name only
the platforms listed there. Each entry's shape (its keys, the tag's characters, the two ways of
building, each arch's form) is the table's JSON Schema (``table.schema.json``), checked before
these parsers run; the rules here are the ones across fields and against the CUDA table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tools.core.platforms import PLATFORMS, Platform
from tools.core.variant import DEFAULT_PLATFORM, PLATFORM_PART
from .schema import Problems



@dataclass(frozen=True)
class TablePlatform:
    """One wheel platform of the table (see the module docstring): how its wheels are tagged
    and built. Which platform it is (OS, arch) is its :attr:`identity`."""

    name: str
    tag: str
    build: str
    source: str
    #: CUDA version -> builder image, for a container platform other than Linux x86_64 (whose
    #: images are the CUDA table's).
    images: dict[str, str] = field(default_factory=dict)
    #: What a native build needs on its runner, in words (Visual Studio 2022, CUDA's installer).
    toolchain: str = ""
    #: CUDA version -> what that toolkit's nvcc compiles on this platform, where it differs from
    #: the CUDA table's ``archs``.
    archs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: CUDA version -> torch's own arch list for its wheels on this platform, where it differs.
    default_archs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    note: str = ""

    @property
    def identity(self) -> Platform:
        """The platform itself (``tools.core.platforms``): its OS and arch, as the selector
        knows it."""
        return PLATFORMS[self.name]

    def wheel_tag(self, manylinux: str) -> str:
        """The wheel platform tag of a cell on this platform: ``manylinux_2_28_aarch64``."""
        return self.tag.replace("{manylinux}", manylinux)


@dataclass(frozen=True)
class TorchOnPlatform:
    """Which CUDA builds of one torch series exist for one platform."""

    platform: str
    #: The CUDA version of PyPI's wheel for the platform; None: PyPI's wheel is CPU-only.
    pypi_cuda: str | None
    cuda: tuple[str, ...]
    source: str
    note: str = ""


#: Linux x86_64 when a table has no ``platforms:`` (every cell was Linux x86_64 before).
DEFAULT = TablePlatform(DEFAULT_PLATFORM, "manylinux_{manylinux}_x86_64", "container",
                   "the table's own torch rows and CUDA images, all read from Linux x86_64 wheels")


def _arch_lists(p: Problems, raw: Any, where: str, cudas: dict[str, Any]
                ) -> dict[str, tuple[str, ...]]:
    """A ``{"<cuda>": [archs]}`` mapping of a platform entry (each arch's shape is the
    schema's)."""
    out: dict[str, tuple[str, ...]] = {}
    for cuda, value in (raw or {}).items():
        at = f"{where}.{cuda}"
        if cuda not in cudas:
            p.add(at, f"CUDA {cuda!r} has no entry under cuda:", "use a CUDA version of cuda:")
        elif p.usable(at) and value and not any(item.startswith(f"{at}[") for item in p.items):
            # a list with an arch the schema named stands for nothing: the CUDA table's holds
            out[str(cuda)] = tuple(value)
    return out


def parse_platforms(p: Problems, raw: Any, cudas: dict[str, Any]) -> dict[str, TablePlatform]:
    """The table's ``platforms:`` section (``cudas``: its CUDA entries, by version), its shape
    already checked against the schema; every problem goes to ``p``. Without the section, Linux x86_64 alone (:data:`DEFAULT`)."""
    if raw is None:
        return {DEFAULT_PLATFORM: DEFAULT}
    out: dict[str, TablePlatform] = {}
    for name, value in raw.items():
        where = f"platforms.{name}"
        if name not in PLATFORM_PART:
            p.add(where, "is not a platform the cell ids have a part for",
                  f"use one of {', '.join(PLATFORM_PART)}, or add its id part to "
                  "tools/core/variant.py PLATFORM_PART")
            continue
        m = p.shaped(value, where)
        if m is None:
            continue
        images: dict[str, str] = {}
        for cuda, image in (m.get("images") or {}).items():
            if cuda not in cudas:
                p.add(f"{where}.images.{cuda}", f"CUDA {cuda!r} has no entry under cuda:")
            elif p.usable(f"{where}.images.{cuda}"):
                images[str(cuda)] = image
        if m["build"] == "container" and name != DEFAULT_PLATFORM and not images:
            p.add(f"{where}.images", "a container platform needs a builder image per CUDA "
                  "version", 'add images: {"13.0": "<image>:cuda13.0"}')
        if m["build"] == "native" and not m.get("toolchain"):
            p.add(f"{where}.toolchain", "a native platform must say what its runner needs",
                  "add toolchain: the compiler and CUDA installer the build uses")
        archs = _arch_lists(p, m.get("archs"), f"{where}.archs", cudas)
        defaults = _arch_lists(p, m.get("default_archs"), f"{where}.default_archs", cudas)
        for cuda, listed in defaults.items():
            known = archs.get(cuda) or tuple(cudas[cuda].archs)
            for arch in listed if known else ():  # an empty archs list is named already
                if arch not in known:
                    p.add(f"{where}.default_archs.{cuda}",
                          f"sm_{arch} is not in what CUDA {cuda} compiles on {name}")
        out[str(name)] = TablePlatform(str(name), m["tag"], m["build"], m["source"], images,
                                  m.get("toolchain", ""), archs, defaults, m.get("note", ""))
    if DEFAULT_PLATFORM not in out and DEFAULT_PLATFORM not in (raw or {}):
        p.add(f"platforms.{DEFAULT_PLATFORM}", "required key is missing",
              "the torch rows and CUDA images are Linux x86_64's: list it")
    return out


def parse_torch_platforms(p: Problems, raw: Any, where: str, platforms: dict[str, TablePlatform],
                          cudas: dict[str, Any]) -> dict[str, TorchOnPlatform]:
    """One torch row's ``platforms:`` (``where``: its key path)."""
    out: dict[str, TorchOnPlatform] = {}
    for name, value in (raw or {}).items():
        at = f"{where}.{name}"
        if name == DEFAULT_PLATFORM:
            p.add(at, f"{DEFAULT_PLATFORM} is the row itself",
                  "write its facts in the row (cuda, pypi_cuda), not under platforms")
            continue
        if name not in platforms:
            p.add(at, "is not a platform of the table",
                  f"use one of {', '.join(platforms)}, or add it under platforms:")
            continue
        m = p.shaped(value, at)
        if m is None:
            continue
        listed = tuple(m["cuda"])
        for cuda in listed:
            if cuda not in cudas:
                p.add(f"{at}.cuda", f"CUDA {cuda} has no entry under cuda:",
                      f'add "{cuda}" to cuda:')
            elif platforms[name].build == "container" and cuda not in platforms[name].images:
                p.add(f"{at}.cuda", f"CUDA {cuda} has no builder image for {name}",
                      f'add "{cuda}" to platforms.{name}.images')
        if m["pypi_cuda"] is not None and m["pypi_cuda"] not in listed:
            p.add(f"{at}.pypi_cuda", f"CUDA {m['pypi_cuda']} is not in this entry's cuda list",
                  f'add "{m["pypi_cuda"]}" to {at}.cuda')
        out[str(name)] = TorchOnPlatform(str(name), m["pypi_cuda"], tuple(listed), m["source"],
                                         m.get("note", ""))
    return out
