"""The ``platforms:`` block of a torch row the refresh writes: which CUDA builds of a series new
to the table exist on the table's platforms other than Linux x86_64 (``linux_aarch64``,
``win_amd64``; ``tools.plan.table_platforms``).

Per platform, from what ``tools.upstream.registry.read_platform`` read: PyPI's file names for it
and one wheel's ``torch/version.py`` (``pypi_cuda``: its CUDA version, null for a CPU-only
build). The ``cuda`` list is the ``+cuXYZ`` wheels of that platform on torch's own index where
that page answers; where it doesn't, the table's stated rule (its comment and the existing
rows' notes): Windows takes the series' Linux x86_64 list (PyTorch's binary build matrix builds
its Windows wheels from the same list), another platform only PyPI's own CUDA build, and none
when PyPI's wheel there is CPU-only. A platform PyPI has no file for gets ``pypi_cuda: null,
cuda: []`` and a note saying so: nothing is planned on it. Every entry says in ``source`` which
files were read, and in ``note`` which values rest on an index that was not read.

A value that would not load is left out, never bent: a CUDA version the table has no entry (or,
for a container platform, no builder image) for is dropped from the list with a note; a
platform whose PyPI build is such a CUDA version, or whose wheel did not say its CUDA build,
gets no entry (no cell planned there) and a note for a person.
"""

from __future__ import annotations

from ruamel.yaml.comments import CommentedMap

from tools.core.variant import DEFAULT_PLATFORM
from tools.plan.table import Table, version_key
from .registry import TORCH_VARIANTS, PlatformFacts, TorchFacts
from .yamltext import flow, quoted

#: Platforms whose CUDA list, where torch's own index is not read, is the series' Linux x86_64
#: list (PyTorch's binary build matrix builds its Windows wheels from the same list; aarch64 has
#: one of its own).
SAME_LIST_AS_X86 = ("win_amd64",)
#: How the notes name a platform's wheel ("PyPI's Windows wheel is CPU-only").
WORDS = {"linux_aarch64": "aarch64", "win_amd64": "Windows"}
#: Why a list rests on a rule: torch's own index could not be read.
NOT_READ = f"torch's own index, {TORCH_VARIANTS}, could not be read by the refresh"
WINDOWS_RULE = ("the series' Linux x86_64 CUDA list, because PyTorch's binary build matrix "
                "(.github/scripts/generate_binary_build_matrix.py) builds its Windows wheels from "
                "the same CUDA list as Linux x86_64 (aarch64 has a list of its own). Check the "
                "cu<XYZ> folders of PyTorch's index before relying on one")


def platforms_block(facts: TorchFacts, row_cuda: list[str], table: Table,
                    variants: dict[str, dict[str, set[str]]] | None, date: str
                    ) -> tuple[CommentedMap | None, list[str], list[str]]:
    """(the row's ``platforms:`` block, or None when the table has no other platform or none
    gets an entry; the change lines; the notes for a person) for a series new to the table.
    ``row_cuda``: the row's own (Linux x86_64) CUDA list; ``variants``: platform -> release ->
    the CUDA versions of its ``+cuXYZ`` wheels on torch's own index, None where that page was
    not read."""
    block = CommentedMap()
    changes: list[str] = []
    notes: list[str] = []
    for name in table.platforms:
        if name == DEFAULT_PLATFORM:
            continue
        pf = facts.platforms.get(name)
        if pf is None:
            continue
        seen = None if variants is None else variants.get(name, {}).get(facts.release, set())
        entry = _entry(facts.series, pf, row_cuda, table, seen, date, changes, notes)
        if entry is not None:
            block[name] = entry
    return (block or None), changes, notes


def _entry(series: str, pf: PlatformFacts, row_cuda: list[str], table: Table,
           seen: set[str] | None, date: str, changes: list[str], notes: list[str]
           ) -> CommentedMap | None:
    name, release = pf.platform, pf.release
    word = WORDS.get(name, name)
    plat = table.platforms[name]
    by = f"by tools.refresh on {date}"  # the end of every source
    if not pf.tags:
        note = (f"PyPI has no {name} file of torch {release}, so no {name} cell of {series} is "
                "planned")
        if seen:
            note += (f"; torch's own index lists CUDA {', '.join(_sorted(seen))} for it: add "
                     "them by hand once checked")
        changes.append(f"torch {series} on {name}: PyPI has no {name} file; no cell planned")
        return _map(None, [], f"PyPI JSON releases['{release}'] (no file name ends in "
                    f"{plat.tag.replace('{manylinux}', '*')}.whl); {by}", note)
    if not pf.known:
        why = "; ".join(pf.notes) or "its CUDA build was not read"
        notes.append(f"new torch series {series}: its {name} entry is left out, so no {name} "
                     f"cell of it is planned: {why}; add platforms.{name} to the row by hand")
        return None
    said = ", ".join(filter(None, [pf.local, "cuda None" if pf.cpu_only else
                                   None if pf.local else f"cuda {pf.cuda}"]))
    read = f"torch/version.py of {pf.wheel} ({said}), read with HTTP range requests"
    if pf.cpu_only:
        read += f": PyPI's {word} wheel is CPU-only"
    source = f"PyPI JSON releases['{release}'] ({pf.files}); {read}"
    note = ""
    if seen is not None:
        wanted = set(seen) | ({pf.cuda} if pf.cuda else set())
        source += f"; cuda: {TORCH_VARIANTS} (torch-{release}+cuXYZ {name} wheels)"
        if not wanted:
            note = (f"PyPI's {word} wheel is CPU-only and torch's own index lists no +cuXYZ "
                    f"{name} wheel of {release}, so no {name} cell of {series} is planned")
    elif name in SAME_LIST_AS_X86:
        wanted = set(row_cuda) | ({pf.cuda} if pf.cuda else set())
        note = f"cuda: not read ({NOT_READ}); {WINDOWS_RULE}"
    elif pf.cuda:
        wanted = {pf.cuda}
        note = ("Only PyPI's build is recorded: the other CUDA variants on PyTorch's own index "
                f"were not read ({NOT_READ})")
    else:
        wanted = set()
        note = (f"PyPI's {word} wheel is CPU-only; which {word} CUDA builds PyTorch's own index "
                f"holds for {series} was not read ({NOT_READ}), so no {word} cell of {series} is "
                "planned")
    cuda, dropped = [], []
    for c in _sorted(wanted):
        if c not in table.cuda:
            dropped.append(f"CUDA {c} (the table has no cuda: entry for it)")
        elif plat.build == "container" and c not in plat.images:
            dropped.append(f"CUDA {c} (platforms.{name}.images has no builder image for it)")
        else:
            cuda.append(c)
    if pf.cuda and pf.cuda not in cuda:
        why = next(d for d in dropped if d.startswith(f"CUDA {pf.cuda} "))
        notes.append(f"new torch series {series}: its {name} entry is left out, so no {name} "
                     f"cell of it is planned: PyPI's {word} wheel is {why}; add it, then "
                     f"platforms.{name} to the row")
        return None
    if dropped:
        notes.append(f"torch {series} on {name}: not listed: {'; '.join(dropped)}; add the "
                     "entry or image to plan those cells")
    changes.append(f"torch {series} on {name}: "
                   + (f"PyPI's wheel is CUDA {pf.cuda}" if pf.cuda else "PyPI's wheel is CPU-only")
                   + (f"; CUDA {', '.join(cuda)}" if cuda else "; no cell planned"))
    return _map(pf.cuda, cuda, f"{source}; {by}", note)


def _sorted(versions: set[str]) -> list[str]:
    return sorted(versions, key=version_key)


def _map(pypi_cuda: str | None, cuda: list[str], source: str, note: str) -> CommentedMap:
    """One platform's entry in flow style, keyed as the table's rows are."""
    m = CommentedMap()
    m["pypi_cuda"] = quoted(pypi_cuda) if pypi_cuda else None
    m["cuda"] = flow(cuda)
    m["source"] = quoted(source)
    if note:
        m["note"] = quoted(note)
    m.fa.set_flow_style()
    return m
