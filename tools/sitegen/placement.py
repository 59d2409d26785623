"""Variant placement: which files each variant index (one CUDA, torch pair) lists.

A wheel's (CUDA, torch) identity comes from its build manifest or its local label (tools.core.variant);
a wheel with neither is listed only in the combined ``simple/``. Every variant index holds one
(CUDA, torch) pair, because pip and uv pick the highest local label among the files of one
version: in a shared index a ``+cu128.torch2.9`` wheel would be installed next to torch 2.8 and
fail to load (C++ symbols of torch change between minor versions). Two rules keep the choice
unambiguous inside one variant index:

* C++ ABI: a wheel whose label states a C++ ABI goes to a variant index only when that is the ABI
  of the official torch wheels of its series (``cxx11_abi`` of the series in the compatibility
  table the index run reads, tools.plan.table); otherwise pip would pick ``...cxx11abiTRUE`` over
  ``...cxx11abiFALSE`` by string order. A series the table doesn't have has no known ABI, so such
  a wheel of it stays in ``simple/`` only, as does one of the other ABI. The rule is Linux's
  (libstdc++'s dual ABI): a Windows wheel is placed whatever its label says of the ABI.
* ``cu12`` ("any CUDA 12.x", Dao-AILab's convention) wheels are placed in their own
  ``cu12/torch2.8/`` index *and* in every exact CUDA 12.x index of the same torch that exists in the
  site (``cu126/torch2.8``, ``cu128/torch2.8``...), so a user only ever has to pick the index that
  matches ``torch.version.cuda``. Where that index already has a wheel of the same project,
  version and wheel tags built for exactly that CUDA, the exact build wins and the generic one is
  left out of that index. No exact index is invented for a CUDA minor nothing was built for.
* A build on torch's stable ABI (its variant ``serves`` several torch series, from its build
  manifest) is placed in the variant index of each series it serves, with its own CUDA version:
  one file, ``xformers-0.0.35+cu130.torch2.14-py39-none-...whl``, in ``cu130/torch2.11`` to
  ``cu130/torch2.14``. Its label names the torch it was built against; its ``torch>=X.Y,<N`` pin
  lets pip and uv install it next to each of them.
* A build against a torch release candidate (our label ``cu132.torch2.16rc.git<commit>``,
  tools.core.variant) goes to the pre-release variant index of its pair only
  (``pre/cu132/torch2.16``), never to ``cu132/torch2.16`` nor to the combined ``simple/``: nobody
  installs one without pointing pip or uv at that index. The label is read from the file's
  version, which never changes, so the ledger needs no field for it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from packaging.tags import Tag
from packaging.utils import canonicalize_name, parse_wheel_filename

from tools.plan.table import Table
from tools.plan.table import version_key as _version_key
from .ledger_file import Entry
from tools.core.platforms import wheel_platforms
from tools.core.variant import Variant, is_candidate_label

#: ``tools.plan.table.version_key``, once per distinct text: it runs for every file placed.
version_key = lru_cache(maxsize=None)(_version_key)


def official_cxx11_abi(table: Table, torch: str) -> bool | None:
    """Whether the official torch wheels of series ``torch`` use the C++11 ABI (the table's
    ``cxx11_abi``); None for a series the table doesn't have."""
    entry = table.torch.get(torch)
    return None if entry is None else entry.cxx11_abi


def variant_sort_key(variant: Variant) -> tuple:
    """Numeric order of variant indexes: CUDA, then torch (``torch2.10`` after ``torch2.9``), a
    pre-release index after the release one of its pair."""
    return (version_key(variant.cuda), version_key(variant.torch), variant.prerelease)


@lru_cache(maxsize=None)
def project_name(name: str) -> str:
    """The normalized project name (PEP 503), once per distinct spelling."""
    return canonicalize_name(name)


@lru_cache(maxsize=None)
def wheel_tags(filename: str) -> frozenset[Tag]:
    """The tags a wheel filename states (``cp311-cp311-manylinux_2_28_x86_64``, a compressed
    ``py2.py3-none-any`` expanded), as packaging reads them; the name was validated when it was
    published."""
    return parse_wheel_filename(filename)[3]


def _identity(e: Entry) -> tuple[str, str, frozenset[Tag]]:
    """(project, public version, wheel tags): what an exact build and a generic one share."""
    return (project_name(e.name), e.version.partition("+")[0], wheel_tags(e.filename))


@lru_cache(maxsize=None)
def is_candidate_build(version: str) -> bool:
    """Whether a file's version carries our label of a build against a torch release candidate
    (``2.8.3+cu132.torch2.16rc.git0123abc``): it is listed in the pre-release index only."""
    local = version.partition("+")[2]
    return bool(local) and "rc.git" in local and is_candidate_label(local)


def _abi_fits(variant: Variant, table: Table, filename: str) -> bool:
    """A wheel fits its variant indexes when it states no C++ ABI or its torch series' official
    one, or is a Windows wheel: the ABI of the table is libstdc++'s, which MSVC builds don't
    have, and Dao-AILab's labels (``+cu12torch2.8cxx11abiFALSE``) say one on Windows too."""
    if variant.cxx11_abi is None or variant.cxx11_abi == official_cxx11_abi(table, variant.torch):
        return True
    return wheel_platforms_of(filename) == WINDOWS


#: What a Windows-only wheel's tags cover.
WINDOWS = frozenset({"win_amd64"})


@lru_cache(maxsize=None)
def wheel_platforms_of(filename: str) -> frozenset[str]:
    """The platforms (tools.core.platforms: ``linux_x86_64``, ``linux_aarch64``, ``win_amd64``)
    a wheel's tags install on; ``any`` is every one, a platform the project has no name for none."""
    return frozenset(p for t in wheel_tags(filename) for p in wheel_platforms(t.platform))


def place_variants(entries: Iterable[Entry], *, table: Table) -> dict[Variant, list[Entry]]:
    """Which files each variant index lists, keyed by ``Variant(cuda, torch)`` (no ABI).

    ``table``: the compatibility table of the index run (the official C++ ABI of each torch
    series). See the module docstring for the rules (C++ ABI, ``cu12`` wheels).
    """
    # (cuda, torch) tuples, not Variant objects, while placing: a frozen dataclass hashes and
    # compares in Python, and this runs once per placed file.
    placed: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    candidates: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    generic: list[Entry] = []
    for e in entries:
        v = e.variant
        if v is None or not _abi_fits(v, table, e.filename):
            continue
        if is_candidate_build(e.version):
            for series in v.served:
                candidates[(v.cuda, series)].append(e)
            continue
        for series in v.served:
            placed[(v.cuda, series)].append(e)
        if "." not in v.cuda:
            generic.append(e)
    if generic:
        # Exact indexes by (CUDA major, torch): where a generic wheel of that pair may also go.
        targets: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
        for cuda, torch in list(placed):
            if "." in cuda:
                targets[(cuda.split(".")[0], torch)].append((cuda, torch))
        built_exactly = {k: {_identity(e) for e in placed[k]} for ks in targets.values() for k in ks}
        for e in generic:
            v = e.variant
            ident = None
            for k in (k for series in v.served for k in targets.get((v.cuda, series), ())):
                ident = ident or _identity(e)
                if ident not in built_exactly[k]:
                    placed[k].append(e)
    variants = {Variant(cuda, torch): files for (cuda, torch), files in placed.items()}
    variants.update({Variant(cuda, torch, prerelease=True): files
                     for (cuda, torch), files in candidates.items()})
    return dict(sorted(variants.items(), key=lambda kv: variant_sort_key(kv[0])))


@dataclass
class FileView:
    """One file as every page shows it; its HTML and JSON are rendered once, when first needed."""

    entry: Entry
    project: str
    yanked: str | None
    sort_key: tuple
    html: str | None = None
    json: str | None = None
