"""The pin rule: once a version is published, what an installer takes for it never changes.

``pip install name==version`` (and uv's pick for it) chooses among the files of that version by
the installing machine's tag priority (packaging.tags: the order ``sys_tags()`` yields), then by
build tag. So a later file of a published version takes the version over wherever it ranks at
least as high as every published file: ``...-manylinux_2_34_x86_64.whl`` beside a published
``...-manylinux_2_28_x86_64.whl`` (on glibc 2.34 and newer), ``py311-none-any`` beside
``py3-none-any`` (on Python 3.11), a platform wheel beside an ``any`` one; where two files rank
the same (``py2.py3`` beside ``py3``), pip and uv may each pick either.

The rule (``takeovers``): a new file of a published (project, version) is refused when some
machine that installs a published file of that version would rank the new file at least as high
as every published file of it: that machine's pin would change bytes. A new file that only
serves machines no published file of the version serves (another Python, another architecture,
an older glibc than any published file needs) is how a release grows, and is published. A file
under a higher build tag than every published file of the version is a deliberate rebuild
(``build.number`` in the recipe, with its reason) and is published: a build tag is the one way a
pin may move, and the file name says so. Removed files count as published (``--restore`` brings
them back as they were).

Machines are enumerated from the tags of the files compared, not assumed: every Python version
those tags name (and each CPython free-threaded build from 3.13), on every platform they name
(each manylinux/musllinux level and macOS version a tag names, each architecture), ranked as
packaging.tags ranks them; the ranks only change at levels some tag names, so those are enough.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import NamedTuple

from packaging.tags import Tag, compatible_tags, cpython_tags, generic_tags, mac_platforms

from .ledger_file import Entry, Removal
from .wheelread import project_of, wheel_identity

#: The highest CPython 3 minor version tried beyond those a tag names (a ``py3`` wheel installs
#: on every one; what ranks change between 3.0 and here is what the tags name).
NEWEST_MINOR = 16

_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(.+)", re.ASCII)
_MUSLLINUX = re.compile(r"musllinux_(\d+)_(\d+)_(.+)", re.ASCII)
_MACOS = re.compile(r"macosx_(\d+)_(\d+)_(.+)", re.ASCII)
_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_PY = re.compile(r"(?:py|cp)(\d)(\d*)", re.ASCII)
#: The architectures a fat macOS tag runs on.
_MAC_ARCHS = {"universal2": ("x86_64", "arm64"), "universal": ("x86_64", "i386"), "intel": ("x86_64", "i386"),
              "fat64": ("x86_64",), "fat32": ("i386",), "fat": ("i386",)}


class InstallMachine(NamedTuple):
    """One kind of installing machine: its name for a message, and every tag it installs, best
    first (what packaging.tags.sys_tags would yield on it)."""

    name: str
    order: tuple[Tag, ...]


def _platform_lists(platforms: set[str]) -> list[list[str]]:
    """The platform lists (best first, as packaging.tags.platform_tags gives them) of the
    machines the ``platforms`` tags name: one per glibc/musl level, macOS version and
    architecture named, one per other platform tag."""
    lists: list[list[str]] = []
    glibc: dict[str, set[tuple[int, int]]] = defaultdict(set)
    musl: dict[str, set[tuple[int, int]]] = defaultdict(set)
    bare: set[str] = set()
    for p in platforms:
        legacy = p.partition("_")
        if legacy[0] in _LEGACY and legacy[2]:
            glibc[legacy[2]].add(_LEGACY[legacy[0]])
        elif m := _MANYLINUX.fullmatch(p):
            glibc[m[3]].add((int(m[1]), int(m[2])))
        elif m := _MUSLLINUX.fullmatch(p):
            musl[m[3]].add((int(m[1]), int(m[2])))
        elif m := _MACOS.fullmatch(p):
            for arch in _MAC_ARCHS.get(m[3], (m[3],)):
                lists.append(list(mac_platforms((int(m[1]), int(m[2])), arch)))
        elif p.startswith("linux_"):
            bare.add(p[len("linux_"):])
        elif p != "any":
            lists.append([p])
    for arch in bare:
        if not glibc[arch] and not musl[arch]:
            glibc[arch].add((2, 17))  # a machine that installs linux_ARCH and nothing newer
    for arch, levels in glibc.items():
        for major, minor in levels:
            # packaging's order: newest level first, the legacy aliases beside their level.
            names = []
            for m in range(minor, -1, -1):
                names.append(f"manylinux_{major}_{m}_{arch}")
                names += [f"{alias}_{arch}" for alias, level in _LEGACY.items() if level == (major, m)]
            lists.append([*names, f"linux_{arch}"])
    for arch, levels in musl.items():
        for major, minor in levels:
            lists.append([*(f"musllinux_{major}_{m}_{arch}" for m in range(minor, -1, -1)), f"linux_{arch}"])
    return lists or [["linux_x86_64"]]  # only "any" named: one machine stands for all


def _pythons(interpreters: set[str]) -> list[tuple[int, int]]:
    """The Python versions whose ranking the ``interpreters`` tags can tell apart."""
    majors = {3}
    newest = NEWEST_MINOR
    for t in interpreters:
        if m := _PY.fullmatch(t):
            majors.add(int(m[1]))
            if m[2]:
                newest = max(newest, int(m[2]))
    return [(major, minor) for major in sorted(majors) for minor in range(newest + 1 if major == 3 else 8)]


def machines(tags: Iterable[Tag]) -> Iterator[InstallMachine]:
    """Every kind of machine whose ranking of ``tags`` may differ: CPython (and its
    free-threaded builds from 3.13), and any other interpreter the tags name, on every platform
    they name."""
    tags = frozenset(tags)
    others = sorted({(t.interpreter, t.abi) for t in tags if not _PY.fullmatch(t.interpreter)})
    for platforms in _platform_lists({t.platform for t in tags}):
        top = platforms[0]
        for version in _pythons({t.interpreter for t in tags}):
            cp = f"cp{version[0]}{version[1]}"
            for abi in ([cp, cp + "t"] if version >= (3, 13) else [cp]):
                threads = " free-threaded" if abi.endswith("t") else ""
                yield InstallMachine(f"CPython {version[0]}.{version[1]}{threads} on {top}",
                              _order(version, cp, abi, tuple(platforms), generic=False))
            for interpreter, abi in others:
                yield InstallMachine(f"{interpreter} (Python {version[0]}.{version[1]}) on {top}",
                              _order(version, interpreter, abi, tuple(platforms), generic=True))


@lru_cache(maxsize=4096)
def _order(version: tuple[int, int], interpreter: str, abi: str, platforms: tuple[str, ...], *,
           generic: bool) -> tuple[Tag, ...]:
    # One machine's tags, made once per process: the files of many versions share machines.
    first = generic_tags(interpreter, [abi], platforms) if generic else cpython_tags(version, [abi], platforms)
    return (*first, *compatible_tags(version, interpreter, platforms))


def _ranks(order: Iterable[Tag], wanted: frozenset[Tag]) -> dict[Tag, int]:
    """Each of ``wanted``'s tags the machine installs, with its rank (0 best)."""
    ranks: dict[Tag, int] = {}
    for i, tag in enumerate(order):
        if tag in wanted and tag not in ranks:
            ranks[tag] = i
    return ranks


def _best(ranks: dict[Tag, int], tags: frozenset) -> tuple[int, Tag] | None:
    found = [(ranks[t], t) for t in tags if t in ranks]
    return min(found, key=lambda x: (x[0], str(x[1]))) if found else None


class Known(NamedTuple):
    """A published file of the version: its name, build tag and tags."""

    filename: str
    build: tuple
    tags: frozenset


def takeover(new: str, tags: frozenset, build: tuple, known: list[Known]) -> str | None:
    """Why ``new`` (with ``tags`` and ``build``) would take over ``known``, the published files
    of its version (None: it can't, or it comes under a higher build tag than all of them)."""
    if not known or build > max(k.build for k in known):
        return None
    everything = frozenset(tags).union(*(k.tags for k in known))
    for machine in machines(everything):
        ranks = _ranks(machine.order, everything)
        mine = _best(ranks, tags)
        if mine is None:
            continue
        theirs = min(((b, k) for k in known if (b := _best(ranks, k.tags))), default=None,
                     key=lambda x: (x[0][0], x[1].filename))
        if theirs is None or mine[0] > theirs[0][0]:
            continue
        (_, their_tag), other = theirs
        how = "above" if mine[0] < theirs[0][0] else "the same as"
        return (f"installers would take it instead of {other.filename} for this version on {machine.name} "
                f"(its tag {mine[1]} ranks {how} {their_tag} there)")
    return None


def with_build_number(filename: str, number: int) -> str:
    """``filename`` with build tag ``number`` (replacing any): the name a rebuild publishes."""
    parts = filename[:-4].split("-")
    head = parts[:2]
    return "-".join([*head, str(number), *parts[-3:]]) + ".whl"


def takeovers(new: Iterable[str], ledger: Mapping[str, Entry], removed: Mapping[str, Removal]) -> dict[str, str]:
    """The new file names that would change what installers take for a published version,
    each with the reason it is refused (the rule: this module's docstring)."""
    idents = {fn: ident for fn in new if (ident := wheel_identity(fn)) is not None}
    projects = {ident[0] for ident in idents.values()}
    published: dict[tuple, list[Known]] = defaultdict(list)
    for fn in (*ledger, *removed):
        if project_of(fn) in projects and (ident := wheel_identity(fn)) is not None:
            published[ident[0], ident[1]].append(Known(fn, ident[2], ident[3]))
    reasons = {}
    for fn, (name, version, build, tags) in idents.items():
        known = sorted(published.get((name, version), ()))
        why = takeover(fn, tags, build, known)
        if why is None:
            continue
        number = max((k.build[0] for k in known if k.build), default=0) + 1
        gone = [k.filename for k in known if k.filename in removed]
        note = f" ({', '.join(gone)} removed since, still its pin once restored)" if gone else ""
        reasons[fn] = (
            f"{why}: a published pin ({name}=={version}) would install other bytes{note} "
            "(rule: a new file of a published version must never be chosen over a published one); "
            f"publish it as a rebuild under a higher build number, e.g. {with_build_number(fn, number)} "
            "(build.number in the recipe)"
        )
    return reasons
