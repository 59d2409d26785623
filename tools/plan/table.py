"""The global compatibility table (``recipes/table.yaml``): facts every recipe shares.

Which torch series exist, for which Python and CUDA versions, with which manylinux baseline and
C++ ABI; what each CUDA version's nvcc can compile, torch's own default arch list for it, the
oldest driver that runs it and the builder image that ships it; the wheel platforms and, per
torch series, which CUDA builds of torch exist on the platforms other than Linux x86_64
(``tools.plan.table_platforms``). Recipes narrow this table; they never restate it.

A torch entry may be a release candidate: ``candidate: {git: "<commit>", index: "<url>"}`` says
that ``release`` is not on PyPI yet but on PyTorch's test index (``index``, which has a
``cu<XYZ>/`` folder per CUDA variant), built from ``git`` (``torch/version.py``'s ``git_version``;
the test index names a candidate by its final version, so the commit is what tells two candidates
apart). Its cells build against that torch and publish into the pre-release variant index only
(``tools.core.variant``); when the final release reaches PyPI, the refresh drops ``candidate:``
and the row is the release row. A candidate row is newer than every release row: the candidate
of a patch release would otherwise stand in for a series that has a final.

A torch entry may carry ``relax_nvcc_check: {"<cuda>": "<reason>"}``: for cells of those CUDA
versions the builder image's nvcc is a newer major than the CUDA that torch build was compiled
with, so torch's ``cpp_extension`` refuses to build until its nvcc version check is relaxed (the
container backend does it and reports it). Only where the table says so: anywhere else a major
mismatch is a real error.

The table's shape (its keys, each value's type, the version, arch, glibc, tag and commit
patterns) is the JSON Schema ``table.schema.json`` beside this module, which editors read too
(``tools.plan.jsonshape``); the rules across fields (a series' CUDA versions in the CUDA table,
default archs within the toolkit's, a release of its own series, platform names the cell ids
know) are here and in ``tools.plan.table_platforms``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from packaging.version import InvalidVersion, Version

from tools import RECIPES_DIR
from tools.core.errors import TableError
from .table_images import ImagePythons, check_images_named, missing_python, parse_images
from .table_platforms import (DEFAULT, TablePlatform, TorchOnPlatform, parse_platforms,
                              parse_torch_platforms)
from .jsonshape import check_shape, load_schema
from .schema import Problems, load_yaml
from tools.core.variant import DEFAULT_PLATFORM, dotted_key, split_python

TABLE_PATH = RECIPES_DIR / "table.yaml"
#: The table's shape (keys, types, patterns): a JSON Schema (draft 2020-12) shipped beside this
#: module, published for editors (``tools.plan.jsonshape``).
TABLE_SCHEMA_FILE = Path(__file__).with_name("table.schema.json")


@dataclass(frozen=True)
class Candidate:
    """A torch release candidate: the commit it was built from and the index serving it."""

    git: str
    index: str

    def torch_index(self, cuda: str) -> str:
        """The candidate index's folder for one CUDA variant: ``.../whl/test/cu132``."""
        return f"{self.index.rstrip('/')}/cu{cuda.replace('.', '')}"


@dataclass(frozen=True)
class CudaEntry:
    """One CUDA toolkit version."""

    version: str
    archs: tuple[str, ...]
    default_archs: tuple[str, ...]
    min_driver: str
    image: str
    source: str
    note: str = ""

    @property
    def major(self) -> int:
        """The major version: torch requires nvcc's major to match its own CUDA's."""
        return int(self.version.split(".")[0])

    def uncompilable(self, archs: tuple[str, ...] | list[str]) -> list[str]:
        """The archs of ``archs`` this CUDA version's nvcc cannot compile, in the given order
        (the one check behind a recipe's arch list and ``--archs``)."""
        return [a for a in archs if a not in self.archs]


@dataclass(frozen=True)
class TorchEntry:
    """One torch release series (``2.9``), as published."""

    series: str
    release: str
    python: tuple[str, ...]
    cuda: tuple[str, ...]
    pypi_cuda: str
    manylinux: str
    cxx11_abi: bool
    source: str
    note: str = ""
    #: (CUDA version, reason) pairs whose builds need torch's nvcc version check relaxed.
    relax_nvcc_check: tuple[tuple[str, str], ...] = ()
    #: Set when ``release`` is a release candidate, not yet on PyPI (see the module docstring).
    candidate: Candidate | None = None
    #: The CUDA builds of this series on platforms other than Linux x86_64, by platform
    #: (``tools.plan.table_platforms``); a platform not listed has none the table knows of.
    platforms: dict[str, TorchOnPlatform] = field(default_factory=dict)
    #: The free-threaded CPythons (``3.14t``) the release has Linux x86_64 wheels for: each
    #: ``3.Xt`` names the build of a ``3.X`` in ``python``.
    free_threaded: tuple[str, ...] = ()

    def cuda_on(self, platform: str) -> tuple[str, ...]:
        """The CUDA versions this series has a torch build for on ``platform``."""
        if platform == DEFAULT_PLATFORM:
            return self.cuda
        entry = self.platforms.get(platform)
        return entry.cuda if entry else ()

    def pypi_cuda_on(self, platform: str) -> str | None:
        """The CUDA version of PyPI's wheel of this series for ``platform``; None when PyPI's
        wheel there is CPU-only (or the table knows of no build there)."""
        if platform == DEFAULT_PLATFORM:
            return self.pypi_cuda
        entry = self.platforms.get(platform)
        return entry.pypi_cuda if entry else None

    def nvcc_check_relaxed(self, cuda: str) -> str | None:
        """Why torch's nvcc version check is relaxed for ``cuda`` cells, or None (it isn't)."""
        return dict(self.relax_nvcc_check).get(cuda)


@dataclass(frozen=True)
class Table:
    """The whole table, keyed by CUDA version and by torch series."""

    path: Path
    cuda: dict[str, CudaEntry]
    torch: dict[str, TorchEntry]
    #: The wheel platforms, Linux x86_64 first (``tools.plan.table_platforms``).
    platforms: dict[str, TablePlatform] = field(
        default_factory=lambda: {DEFAULT_PLATFORM: DEFAULT})
    #: Each builder image's Pythons (``tools.plan.table_images``); empty: none recorded, and
    #: no cell is checked against its image.
    images: dict[str, ImagePythons] = field(default_factory=dict)

    def image_lacks(self, image: str, python: str) -> str | None:
        """Why ``image`` can't build a cell of ``python`` (it has no such /opt/python), or
        None."""
        return missing_python(self.images, image, python)

    def torch_for_cuda(self, cuda: str, platform: str = DEFAULT_PLATFORM) -> list[str]:
        """Torch series that publish a build for ``cuda`` on ``platform``, oldest first."""
        return [s for s, t in self.torch.items() if cuda in t.cuda_on(platform)]

    def image(self, cuda: str, platform: str = DEFAULT_PLATFORM) -> str:
        """The builder image of ``cuda`` cells on ``platform``: the CUDA table's for Linux
        x86_64, the platform's own for another container platform, empty for a native one."""
        plat = self.platforms[platform]
        if plat.build != "container":
            return ""
        return plat.images.get(cuda) or (self.cuda[cuda].image
                                         if platform == DEFAULT_PLATFORM else "")

    def compilable(self, cuda: str, platform: str = DEFAULT_PLATFORM) -> tuple[str, ...]:
        """The archs ``cuda``'s nvcc compiles on ``platform``."""
        return self.platforms[platform].archs.get(cuda) or self.cuda[cuda].archs

    def default_archs(self, cuda: str, platform: str = DEFAULT_PLATFORM) -> tuple[str, ...]:
        """Torch's own arch list for its ``cuda`` wheels on ``platform``."""
        return self.platforms[platform].default_archs.get(cuda) or self.cuda[cuda].default_archs


def version_key(text: str) -> tuple[int, ...]:
    """Sort ``"2.10"`` after ``"2.9"`` (never as text); ValueError for anything but ASCII digits
    in dot-separated parts (tools.core.variant.dotted_key, the one rule for variant versions)."""
    return dotted_key(text)


def python_key(python: str) -> tuple[int, ...]:
    """Sort a cell's Python: ``"3.14"``, then its free-threaded build ``"3.14t"``, then
    ``"3.15"``; ValueError for anything else (``version_key``'s rule, with one ``t``)."""
    base, free = split_python(python)
    return (*version_key(base), int(free))


def arch_key(arch: str) -> tuple[int, str]:
    """Sort ``"90a"`` after ``"90"`` and ``"100"`` after ``"90"`` (numerically, never as text)."""
    digits = re.match(r"\d+", arch)
    return (int(digits.group()) if digits else 0, arch)


def parse_table(data: object, path: Path) -> Table:
    """Validate parsed YAML as the compatibility table, raising TableError with every problem.

    The shape (keys, types, the version, arch, glibc and commit patterns) is
    :data:`TABLE_SCHEMA_FILE`'s; the rules across fields (an arch list against the toolkit's, a
    series' CUDA versions in the CUDA table, a release of its own series) are here."""
    p = Problems(path, TableError)
    # a value that breaks a pattern or an enum is named and still read, as the hand checks did:
    # the rules across fields that use it (default archs within archs) run in the same pass
    check_shape(p, data, TABLE_SCHEMA_FILE, keep_bounded=True)
    top = p.shaped(data, "")
    if top is None:
        p.raise_if_any()
        raise TableError(f"{path}: not a compatibility table")
    cudas: dict[str, CudaEntry] = {}
    for ver, raw in (p.shaped(top.get("cuda"), "cuda") or {}).items():
        where = f"cuda.{ver}"
        if not isinstance(ver, str):
            p.add(where, *_key_rule("cuda"))
            continue
        m = p.shaped(raw, where)
        if m is None:
            continue
        archs, defaults = tuple(m["archs"]), tuple(m["default_archs"])
        for a in defaults if archs else ():  # an empty archs list is named already
            if a not in archs:
                p.add(f"{where}.default_archs", f"sm_{a} is not in this CUDA's archs")
        cudas[ver] = CudaEntry(ver, archs, defaults, m["min_driver"], m["image"], m["source"],
                               m.get("note", ""))
    platforms = parse_platforms(p, top.get("platforms"), cudas)
    torches: dict[str, TorchEntry] = {}
    for series, raw in (p.shaped(top.get("torch"), "torch") or {}).items():
        where = f"torch.{series}"
        if not isinstance(series, str):
            p.add(where, *_key_rule("torch"))
            continue
        m = p.shaped(raw, where)
        if m is None:
            continue
        pythons, cuda_list = tuple(m["python"]), tuple(m["cuda"])
        try:
            if Version(m["release"]).release[:2] != tuple(version_key(series)):
                p.add(f"{where}.release", f"{m['release']} is not a {series}.x release")
        except InvalidVersion:
            p.add(f"{where}.release", f"{m['release']!r} is not a version")
        for c in (*cuda_list, m["pypi_cuda"]):
            if c not in cudas:
                p.add(f"{where}.cuda", f"CUDA {c} has no entry under cuda:", f'add "{c}" to cuda:')
        relax = []
        for cuda, reason in (m.get("relax_nvcc_check") or {}).items():
            at = f"{where}.relax_nvcc_check.{cuda}"
            if cuda not in cuda_list:
                p.add(at, f"CUDA {cuda!r} is not in this torch's cuda list, so no cell builds it",
                      f"use one of {', '.join(cuda_list)} (quoted), or remove the entry")
            elif p.usable(at):
                p.reason(reason, at)
                relax.append((cuda, reason))
        free = tuple(m.get("free_threaded") or ())
        for py in free:
            if py[:-1] not in pythons:
                p.add(f"{where}.free_threaded", f"{py} is the free-threaded build of {py[:-1]}, "
                      f"which is not in this torch's python list",
                      f"add \"{py[:-1]}\" to python:, or remove \"{py}\"")
        candidate = p.shaped(m.get("candidate"), f"{where}.candidate")
        torches[series] = TorchEntry(series, m["release"], pythons,
                                     tuple(sorted(cuda_list, key=version_key)), m["pypi_cuda"],
                                     m["manylinux"], m["cxx11_abi"], m["source"], m.get("note", ""),
                                     tuple(sorted(relax, key=lambda r: version_key(r[0]))),
                                     Candidate(candidate["git"], candidate["index"])
                                     if candidate else None,
                                     parse_torch_platforms(p, m.get("platforms"),
                                                           f"{where}.platforms", platforms,
                                                           cudas),
                                     free)
    releases = [s for s, t in torches.items() if t.candidate is None]
    for series, t in torches.items():
        newer = [r for r in releases if version_key(r) > version_key(series)]
        if t.candidate is not None and newer:
            p.add(f"torch.{series}.candidate", f"a release candidate of {series} is older than "
                  f"the release row{'s' if len(newer) > 1 else ''} {', '.join(newer)}",
                  f"only a series newer than every release has candidates: remove torch.{series}"
                  ".candidate (and use the final release), or the row")
    images = parse_images(p, top.get("images"))
    if "images" in top:
        used = {c.image: f"cuda.{c.version}.image" for c in cudas.values()}
        used |= {img: f"platforms.{name}.images.{cuda}" for name, plat in platforms.items()
                 for cuda, img in plat.images.items()}
        check_images_named(p, images, used)
    p.raise_if_any()
    return Table(path,
                 dict(sorted(cudas.items(), key=lambda kv: version_key(kv[0]))),
                 dict(sorted(torches.items(), key=lambda kv: version_key(kv[0]))),
                 dict(sorted(platforms.items(), key=lambda kv: kv[0] != DEFAULT_PLATFORM)),
                 images)


def _key_rule(section: str) -> tuple[str, str]:
    """The rule and fix of ``section``'s keys (``cuda``, ``torch``), as the schema words them:
    a key YAML read as a number (``12.8:``) breaks the same rule, which the schema, seeing JSON
    text keys, can't tell."""
    names = load_schema(TABLE_SCHEMA_FILE)["properties"][section]["propertyNames"]
    return names["x-rule"], names["x-fix"]


@lru_cache(maxsize=8)
def load_table(path: Path = TABLE_PATH) -> Table:
    """Load and validate the compatibility table (cached: it is read by every step)."""
    return parse_table(load_yaml(path, TableError), path)
