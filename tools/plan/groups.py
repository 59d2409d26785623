"""Compile groups and kernel shards: the plan's answer to "the same kernels, once".

Cells that compile the same kernel objects form a **compile group**: the same package version
(sdist and patches), CUDA version, torch series, arch list and build variables, differing only
in the Python they are built for. Kernel units (a package's CUDA translation units) never
include ``Python.h``, so one compile of them serves every cell of the group; only the binding
unit and the link depend on the Python (see ``tools.pipeline.ccache``).

A group's id is its cells' id without the Python part (``tools.core.variant.group_id``):
``flash_attn-3.12-cu130`` and ``flash_attn-3.11-cu130`` are both in ``flash_attn-cu130``. Its
**key** is a digest of everything that decides the kernel objects; a shard's cache carries the
key, and a cell uses only caches with its own group's key.

The group's CUDA units come from the recipe's **unit list**, ``units.yaml`` beside
``recipe.yaml``: the units of the package's own build as its ninja file lists them (written by
``python -m tools.shard units CELL --write``, which reads them the way the probe does). The
units are split into **shards** (:func:`split`): each shard compiles its part through the
compiler cache into a cache of its own, and the cells read every shard's cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from tools.core.errors import PlanError
from tools.core.variant import DEFAULT_PLATFORM, PLATFORM_PART, cuda_nodot, group_id
from .cells import Cell
from .recipes.model import Recipe
from .schema import Problems, load_yaml

#: The unit list's file name, beside recipe.yaml.
UNITS_FILE = "units.yaml"
UNITS_SCHEMA = 1
#: The unit kinds a shard compiles. C++ units compile in the cells: the binding unit includes
#: ``Python.h`` (a per-Python object) and C++ units are cheap next to the CUDA ones.
SHARDED_KINDS = ("cuda",)


@dataclass(frozen=True)
class UnitCost:
    """The estimated seconds of one unit per arch (CUDA) or per compile (C++), and why."""

    seconds: float
    reason: str


@dataclass(frozen=True)
class KernelSpan:
    """The torch series of one CUDA version whose CUDA units all preprocess the same (measured),
    on one platform, and the digest of that text. A record of one series (``measured`` naming
    others) says that no two of the series measured share their kernels: it shares nothing,
    and it keeps the refresh from measuring those series again (``tools.probing.records``)."""

    cuda: str
    platform: str
    torch: tuple[str, ...]
    #: sha256 over every CUDA unit's preprocessed-text digest: what the group's key holds.
    digest: str
    #: :func:`sources_digest` of the recipe it was measured with: another sdist or patch and
    #: the record no longer says anything (the series compile their own kernels until measured
    #: again).
    sources: str
    read_with: str = ""
    #: What preprocessed the units where it was not the CUDA version's own toolkit (the
    #: probe's ``--toolkit-stand-in``: CUDA 12.x measured with CUDA 13's nvcc answering as it).
    toolkit: str = ""
    #: Every series the probe measured, ``torch`` among them (empty: ``torch`` alone).
    measured: tuple[str, ...] = ()

    @property
    def shares(self) -> bool:
        """Do two series or more share the kernels (else: a measurement that none do)?"""
        return len(self.torch) >= 2

    @property
    def measured_series(self) -> tuple[str, ...]:
        """The series the probe measured: ``measured``, or ``torch`` where it is not given."""
        return self.measured or self.torch


@dataclass(frozen=True)
class PythonFree:
    """A measurement (``python -m tools.probe CELL --across-torch`` counts the headers, and its
    ``kernels.json`` holds this entry when there are none; a person copies it into
    ``units.yaml`` once a second Python's build has shown the kernels hitting, because no
    header is necessary, not enough): a recipe's CUDA units, preprocessed for these torch
    series of one CUDA version on one platform, include no header of Python's, so the cells of
    one series, which differ only in Python, compile the same kernel objects. Its group then compiles them once when that costs fewer runner-hours
    (``tools.plan.stages``); without it each cell that fits a job compiles its own."""

    cuda: str
    platform: str
    torch: tuple[str, ...]
    #: :func:`sources_digest` of the recipe it was measured with (another sdist or patch and
    #: the record says nothing until measured again).
    sources: str
    read_with: str = ""


@dataclass(frozen=True)
class UnitList:
    """A recipe's ``units.yaml``: its build's translation units by kind, and their cost."""

    path: Path
    version: str
    units: dict[str, tuple[str, ...]]         # kind -> unit names (paths in the source tree)
    cost: dict[str, UnitCost]                 # kind -> cost of one unit (per arch for cuda)
    measured: dict[str, float]                # unit -> measured seconds per arch (the probe's)
    #: CUDA version -> the torch series that share its kernels (the ``kernels:`` block)
    kernels: dict[str, KernelSpan] = field(default_factory=dict)
    #: CUDA version -> the torch series whose CUDA units include no Python header (the
    #: ``python_free:`` block)
    python_free: dict[str, PythonFree] = field(default_factory=dict)
    #: file-name ending -> the archs a unit so named compiles for, whatever the cell's list
    #: (the ``unit_archs:`` block: a package whose build gives some units their own -gencode)
    unit_archs: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def sharded(self) -> tuple[str, ...]:
        """The units shards compile, in the file's order."""
        return tuple(u for kind in SHARDED_KINDS for u in self.units.get(kind, ()))

    def seconds(self, unit: str, kind: str = "cuda") -> float:
        """One unit's estimated seconds per arch: measured where the probe measured it, else
        the kind's stated cost."""
        return self.measured.get(unit, self.cost[kind].seconds)

    def archs_of(self, unit: str, archs: tuple[str, ...]) -> int:
        """How many of the cell's ``archs`` the CUDA unit compiles for: all of them, unless
        ``unit_archs`` names its ending (then those of its archs the cell has)."""
        for ending, own in self.unit_archs.items():
            if unit.endswith(ending):
                return len(set(own) & set(archs))
        return len(archs)

    def unit_seconds(self, unit: str, archs: tuple[str, ...]) -> float:
        """One CUDA unit's estimated seconds for a cell's ``archs``."""
        return self.seconds(unit) * self.archs_of(unit, archs)


def read_units(recipe: Recipe) -> UnitList | None:
    """The recipe's unit list, None when it has none; PlanError naming the file, the field and
    the fix when it is malformed or written for another version of the package."""
    path = recipe.folder / UNITS_FILE
    if not path.is_file():
        return None
    return parse_units(path, recipe.package, recipe.source.version)


def parse_units(path: Path, package: str, version: str) -> UnitList:
    """The unit list in ``path`` for ``package`` ``version``, checked as the plan checks a
    recipe's (PlanError naming the file, the field and the fix)."""
    stat = path.stat()
    # A plan asks once per cell (its group's id and key); the file is read once per version.
    return _read_units(path, stat.st_mtime_ns, stat.st_size, package, version)


_DIGEST = re.compile(r"[0-9a-f]{64}")


@functools.lru_cache(maxsize=64)
def _read_units(path: Path, _mtime: int, _size: int, package: str, version: str) -> UnitList:
    raw = load_yaml(path, PlanError)
    p = Problems(path, PlanError)
    m = p.entry(raw, "", {"schema": int, "version": str, "units": dict, "cost": dict},
                {"read_from": dict, "measured": dict, "kernels": dict, "python_free": dict,
                 "unit_archs": dict})
    if m is None:
        p.raise_if_any()
        raise PlanError(f"{path}: not a unit list")
    if m["schema"] != UNITS_SCHEMA:
        p.add("schema", f"must be {UNITS_SCHEMA}", "write the file again: python -m tools.shard "
                                                   "units <cell> --write")
    if m["version"] != version:
        p.add("version", f"the units were read from {package} {m['version']}, the recipe "
                         f"builds {version}",
              f"read them again: python -m tools.shard units <a cell of {package}> --write")
    units: dict[str, tuple[str, ...]] = {}
    for kind, names in m["units"].items():
        got = p.strings(names, f"units.{kind}")
        if got is not None:
            units[str(kind)] = got
    cost: dict[str, UnitCost] = {}
    for kind in units:
        entry = p.entry(m["cost"].get(kind), f"cost.{kind}", {"seconds": (int, float),
                                                              "reason": str})
        if entry is not None:
            p.reason(entry["reason"], f"cost.{kind}.reason")
            cost[kind] = UnitCost(float(entry["seconds"]), entry["reason"])
    measured: dict[str, float] = {}
    known = {u for names in units.values() for u in names}
    for unit, seconds in (m.get("measured") or {}).items():
        if unit not in known:
            p.add(f"measured.{unit}", "is not one of the units listed",
                  "remove it or list the unit under units")
        elif p.typed(seconds, f"measured.{unit}", (int, float)):
            measured[unit] = float(seconds)
    kernels = _read_spans(m.get("kernels") or {}, p)
    python_free = _read_python_free(m.get("python_free") or {}, p)
    unit_archs = _read_unit_archs(m.get("unit_archs"), p)
    p.raise_if_any()
    return UnitList(path, m["version"], units, cost, measured, kernels, python_free, unit_archs)


def _read_unit_archs(raw: dict | None, p: Problems) -> dict[str, tuple[str, ...]]:
    """``unit_archs: {reason, endings: {<file-name ending>: [archs]}}``: the units whose build
    compiles them for their own archs (flash_attn_3's _sm90.cu units for 90a alone)."""
    if raw is None:
        return {}
    e = p.entry(raw, "unit_archs", {"reason": str, "endings": dict})
    if e is None:
        return {}
    p.reason(e["reason"], "unit_archs.reason")
    out = {}
    for ending, archs in e["endings"].items():
        got = p.strings(archs, f"unit_archs.endings.{ending}")
        if got is not None:
            out[str(ending)] = got
    return out


def _platform_and_torch(e: dict, where: str, p: Problems, fix: str) -> tuple[str, ...] | None:
    """A measured record's platform, checked, and its torch series (None when not strings)."""
    if e["platform"] not in PLATFORM_PART:
        p.add(f"{where}.platform", f"{e['platform']!r} is not a wheel platform (one of "
                                   f"{', '.join(PLATFORM_PART)})", fix)
    return p.strings(e["torch"], f"{where}.torch")


def record_key(cuda: str, platform: str) -> str:
    """The key of a measured record (``kernels:``, ``python_free:``) in ``units.yaml``: the
    CUDA version, with the cell id's platform part for a platform other than Linux x86_64
    (``13.0``, ``13.0-aarch64``, ``13.0-win``), so each platform keeps its own measurement."""
    part = PLATFORM_PART.get(platform, platform)
    return f"{cuda}-{part}" if part else cuda


def _keyed(key: object, e: dict, where: str, p: Problems, fix: str) -> str | None:
    """The CUDA version of a record whose key is :func:`record_key` of it and its platform;
    None (and a problem) otherwise."""
    cuda = str(key).split("-", 1)[0]
    if e["platform"] in PLATFORM_PART and record_key(cuda, e["platform"]) != str(key):
        p.add(where, f"is measured on {e['platform']}, so its key is "
                     f"{record_key(cuda, e['platform'])!r}, not {str(key)!r}", fix)
        return None
    return cuda


def _read_spans(block: dict, p: Problems) -> dict[str, KernelSpan]:
    fix = "measure it again: python -m tools.probe <cell> --across-torch --write"
    spans: dict[str, KernelSpan] = {}
    for key, entry in block.items():
        where = f"kernels.{key}"
        e = p.entry(entry, where, {"platform": str, "torch": list, "digest": str,
                                   "sources": str}, {"read_with": str, "units": int,
                                                     "toolkit": str, "measured": list})
        if e is None:
            continue
        cuda = _keyed(key, e, where, p, fix)
        torch = _platform_and_torch(e, where, p, fix)
        measured = p.strings(e["measured"], f"{where}.measured") if "measured" in e else ()
        ok = torch is not None and measured is not None
        if ok and not set(torch) <= set(measured or torch):
            p.add(f"{where}.measured", f"lacks {', '.join(sorted(set(torch) - set(measured)))}"
                                       ": every series under torch was measured", fix)
            ok = False
        if ok and len(measured or torch) < 2:
            p.add(f"{where}.torch", "names fewer than two torch series measured: there is "
                                    "nothing to share (a record of one series names the others "
                                    "measured under measured)", fix)
            ok = False
        bad = [k for k in ("digest", "sources") if not _DIGEST.fullmatch(e[k])]
        for k in bad:
            p.add(f"{where}.{k}", "must be a sha256 (64 lowercase hex digits)", fix)
        if not bad and ok and cuda is not None:
            spans[str(key)] = KernelSpan(cuda, e["platform"], tuple(torch), e["digest"],
                                         e["sources"], e.get("read_with", ""),
                                         e.get("toolkit", ""), tuple(measured or ()))
    return spans


def _read_python_free(block: dict, p: Problems) -> dict[str, PythonFree]:
    fix = "measure it again: python -m tools.probe <cell> --across-torch --write"
    out: dict[str, PythonFree] = {}
    for key, entry in block.items():
        where = f"python_free.{key}"
        e = p.entry(entry, where, {"platform": str, "torch": list, "sources": str},
                    {"read_with": str, "units": int, "toolkit": str})
        if e is None:
            continue
        cuda = _keyed(key, e, where, p, fix)
        torch = _platform_and_torch(e, where, p, fix)
        if not _DIGEST.fullmatch(e["sources"]):
            p.add(f"{where}.sources", "must be a sha256 (64 lowercase hex digits)", fix)
        elif torch is not None and cuda is not None:
            out[str(key)] = PythonFree(cuda, e["platform"], tuple(torch), e["sources"],
                                       e.get("read_with", ""))
    return out


def patch_digests(recipe: Recipe) -> list[list[str]]:
    """``[file, sha256 of its bytes]`` of every patch of the recipe, in order. A plan asks for
    each cell's group key and span: each patch is read once per state of its file."""
    return [list(pair) for pair in _patch_digests(tuple(
        (p.file, str(p.path), p.path.stat().st_mtime_ns, p.path.stat().st_size)
        for p in recipe.patches))]


@functools.lru_cache(maxsize=64)
def _patch_digests(patches: tuple[tuple[str, str, int, int], ...]
                   ) -> tuple[tuple[str, str], ...]:
    return tuple((file, hashlib.sha256(Path(path).read_bytes()).hexdigest())
                 for file, path, _mtime, _size in patches)


def sources_digest(recipe: Recipe) -> str:
    """sha256 of what a kernel measurement depends on in the recipe: the sdist and the bytes
    of every patch."""
    data = [recipe.source.sha256, patch_digests(recipe)]
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()


def stale_spans(recipe: Recipe) -> list[KernelSpan]:
    """The recipe's recorded spans that were measured with another sdist or other patches
    (the plan ignores them until they are measured again)."""
    units = read_units(recipe)
    if units is None:
        return []
    now = sources_digest(recipe)
    return [span for span in units.kernels.values() if span.sources != now]


def kernel_span(cell: Cell, recipe: Recipe) -> KernelSpan | None:
    """The measured span ``cell``'s kernels belong to, None when its torch series compiles its
    own (no record for its CUDA version and platform, its series is not in it, the record says
    no two series share, or it was measured with another sdist or other patches)."""
    units = read_units(recipe)
    span = units.kernels.get(record_key(cell.cuda, cell.platform)) if units else None
    if (span is None or not span.shares or span.platform != cell.platform
            or cell.torch not in span.torch):
        return None
    return span if span.sources == sources_digest(recipe) else None


def python_free(cell: Cell, recipe: Recipe) -> bool:
    """Were ``cell``'s CUDA units measured to include no Python header (:class:`PythonFree`)
    for its CUDA version, platform and torch series, with the recipe's sdist and patches?"""
    units = read_units(recipe)
    record = units.python_free.get(record_key(cell.cuda, cell.platform)) if units else None
    return (record is not None and record.platform == cell.platform
            and cell.torch in record.torch and record.sources == sources_digest(recipe))


def group_key(cell: Cell, recipe: Recipe) -> str:
    """A digest of what decides a group's kernel objects: the sdist, the patches' bytes, CUDA,
    the torch series, the archs, the recipe's build variables and its arch variable; 16 hex.
    A group whose kernels are shared by several torch series (:func:`kernel_span`) has the
    measured text's digest in place of the torch series."""
    data: dict = {
        "package": cell.package, "version": cell.version, "sha256": recipe.source.sha256,
        "patches": patch_digests(recipe),
        "cuda": cell.cuda, "torch": cell.torch, "torch_abi": cell.torch_abi,
        "torch_from": cell.torch_from, "archs": list(cell.archs),
        "env": sorted((v.name, v.value) for v in recipe.env),
        "arch_env": [recipe.arch_env.name, recipe.arch_env.style],
        "nvcc_threads": recipe.build.nvcc_threads,
    }
    span = kernel_span(cell, recipe)
    if span is not None:
        for name in ("torch", "torch_abi", "torch_from"):
            del data[name]
        data["kernels"] = span.digest
    if cell.platform != DEFAULT_PLATFORM:
        # Another platform's objects differ; Linux x86_64 keys stay what they were before
        # platforms were a dimension, so its shard caches stay valid.
        data["platform"] = cell.platform
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Group:
    """A compile group: its id, key and the ids of the cells it feeds."""

    id: str
    key: str
    package: str
    cells: tuple[str, ...]
    #: The wheel platform of its cells (a group never spans two).
    platform: str = DEFAULT_PLATFORM
    #: Its kernels are shared by several torch series (:func:`kernel_span`).
    shared: bool = False
    #: Its CUDA units were measured to include no Python header (:func:`python_free`): its
    #: cells, one per Python, compile the same kernels.
    python_free: bool = False


def groups(cells: list[Cell], recipes: list[Recipe]) -> list[Group]:
    """The compile groups of ``cells``, in the order of their first cell."""
    by_package = {r.package: r for r in recipes}
    out: dict[str, tuple[str, str, list[str], str]] = {}
    shared: set[str] = set()
    free: set[str] = set()
    for cell in cells:
        recipe = by_package[cell.package]
        gid = cell_group(cell, recipe)
        if gid not in out:
            out[gid] = (group_key(cell, recipe), cell.package, [], cell.platform)
            if kernel_span(cell, recipe) is not None:
                shared.add(gid)
            if python_free(cell, recipe):
                free.add(gid)
        out[gid][2].append(cell.id)
    return [Group(gid, key, package, tuple(ids), platform, gid in shared, gid in free)
            for gid, (key, package, ids, platform) in out.items()]


def find_group(group: str, cells: list[Cell], recipes: list[Recipe]) -> Group:
    """The compile group with this id among ``cells``; PlanError when there is none."""
    for found in groups(cells, recipes):
        if found.id == group:
            return found
    raise PlanError(f"no compile group {group!r} in the plan",
                    hint="a group id is a cell id without its Python part; python -m "
                         "tools.matrix --format groups lists them")


#: The last part of a group id whose kernels several torch series share.
SHARED_PART = "kernels"


def cell_group(cell: Cell, recipe: Recipe) -> str:
    """The id of the compile group ``cell`` belongs to: its id without the Python part, or,
    when its kernels are shared by torch series (:func:`kernel_span`),
    ``<package>-cu<nodot>-kernels`` with the platform part (a group id never reads as a cell
    id: its second part starts with ``cu``).

    The id names the shard caches the cell reads; the key (:func:`group_key`) decides whether
    it may."""
    if kernel_span(cell, recipe) is None:
        return group_id(cell.package, cell.cuda, cell.torch_part, cell.platform)
    platform = PLATFORM_PART[cell.platform]
    base = f"{cell.package}-cu{cuda_nodot(cell.cuda)}-{SHARED_PART}"
    return f"{base}-{platform}" if platform else base


def split(units: list[tuple[str, float]], count: int) -> list[tuple[str, ...]]:
    """``units`` (name, seconds) in ``count`` shards of about equal seconds: the longest unit
    first into the lightest shard (ties to the lower shard, so the split is reproducible);
    each shard's units keep the input's order."""
    if count < 1:
        raise PlanError(f"a group needs at least one shard, not {count}")
    count = min(count, max(1, len(units)))
    order = {name: i for i, (name, _) in enumerate(units)}
    loads = [0.0] * count
    parts: list[list[str]] = [[] for _ in range(count)]
    for name, seconds in sorted(units, key=lambda u: (-u[1], order[u[0]])):
        k = min(range(count), key=lambda i: (loads[i], i))
        loads[k] += seconds
        parts[k].append(name)
    return [tuple(sorted(part, key=order.__getitem__)) for part in parts]
