"""Whether one wheel of a variant index fits the machine, and if not, why.

Every check but the GPU arch looks at the file name and the page alone; the arch check may read
the wheel's build manifest (tools.selector.client), so it is made only for the wheels that pass
the others, newest first, and at most ``PEEK_MAX`` times per answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from packaging import tags
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from tools.core.manifest import MANIFEST_NAME, archs_found
from tools.core.variant import Variant, parse_label
from .client import Index, IndexFile, parse_archs, visible
from .detect import Machine, release
from .facts import SiteFacts
from .gpu import arch_problem, module_archs

#: At most this many wheels' manifests are read for one answer (each costs a few requests).
PEEK_MAX = 3

_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


@dataclass(frozen=True)
class WheelName:
    """A wheel file name, as packaging parses it, with its tag fields as spelled in the name."""

    filename: str
    version: Version
    build: tuple[()] | tuple[int, str]
    tags: frozenset[tags.Tag]
    python: str
    abi: str
    platform: str

    @property
    def version_text(self) -> str:
        """The version as the file name spells it (local label included, case kept)."""
        return self.filename.split("-")[1]


def parse_wheel(filename: str) -> WheelName | None:
    """``flash_attn-2.8.3+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl`` -> its parts;
    None for a name that is not a valid wheel file name."""
    try:
        _, version, build, tag_set = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    python, abi, plat = filename[:-4].split("-")[-3:]
    return WheelName(filename, version, build, tag_set, python, abi, plat)


def same_public(a: Version, b: str | Version) -> bool:
    """Whether two versions are equal ignoring the local label (``2.8.3`` == ``2.8.3.0+cu128``)."""
    other = b if isinstance(b, Version) else Version(b)
    return Version(a.public) == Version(other.public)


@lru_cache(maxsize=None)
def _interpreter_abis(implementation: str, python: tuple[int, int], free_threaded: bool) -> frozenset[tuple[str, str]]:
    """The (interpreter, abi) pairs of the wheel tags this interpreter installs, as pip computes them."""
    if implementation == "cp":
        supported = list(tags.cpython_tags(python, abis=[f"cp{python[0]}{python[1]}" + ("t" if free_threaded else "")],
                                           platforms=["any"]))
    else:
        supported = list(tags.generic_tags(f"{implementation}{python[0]}{python[1]}", abis=["none"], platforms=["any"]))
    supported += tags.compatible_tags(python, f"{implementation}{python[0]}{python[1]}", platforms=["any"])
    return frozenset((t.interpreter, t.abi) for t in supported)


def python_fits(wheel: WheelName, m: Machine) -> bool:
    """Whether the wheel's python/abi tags fit the interpreter (cpXY, abi3, pyX, none)."""
    ok = _interpreter_abis(m.implementation, (m.python[0], m.python[1]), m.free_threaded)
    return any((t.interpreter, t.abi) in ok for t in wheel.tags)


def python_allowed(spec: str, python: tuple[int, ...]) -> bool | None:
    """Whether a Requires-Python specifier allows ``python`` (``(3, 11, 7)``); None if unreadable."""
    try:
        return SpecifierSet(spec).contains(".".join(map(str, python)), prereleases=True)
    except InvalidSpecifier:
        return None


def platform_problem(wheel: WheelName, m: Machine) -> tuple[tuple[str, str] | None, str | None]:
    """((kind, problem) or None, note) for the wheel's platform tag on this OS, CPU arch and glibc;
    kind is ``glibc`` when only the glibc version stands in the way, else ``platform``."""
    problems = []
    for plat in wheel.platform.split("."):
        if plat == "any":
            return None, None
        mm = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", plat)
        legacy = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", plat)
        linux = re.fullmatch(r"linux_(\w+)", plat)
        if mm or legacy:
            need = (int(mm.group(1)), int(mm.group(2))) if mm else _LEGACY_MANYLINUX[legacy.group(1)]
            arch = mm.group(3) if mm else legacy.group(2)
            if m.os != "linux":
                problems.append(("platform", f"it is built for Linux ({plat}), this machine runs {m.os}"))
            elif arch != m.arch:
                problems.append(("platform", f"it is built for {arch} ({plat}), this machine is {m.arch}"))
            elif m.glibc is None and m.libc not in ("glibc", None):
                problems.append(("platform", f"it needs glibc ({plat}), this machine's C library is {m.libc}"))
            elif m.glibc is None:
                return None, f"couldn't check glibc: the wheel needs glibc >= {need[0]}.{need[1]} ({plat})"
            elif m.glibc < need:
                problems.append(("glibc", f"it needs glibc >= {need[0]}.{need[1]} ({plat}), this machine "
                                          f"has glibc {m.glibc[0]}.{m.glibc[1]}"))
            else:
                return None, None
        elif linux and m.os == "linux" and linux.group(1) == m.arch:
            return None, f"{plat} promises no glibc baseline: it may need this machine's glibc or newer"
        elif plat.startswith("win_"):
            if m.os != "windows":
                problems.append(("platform", f"it is built for Windows ({plat}), this machine runs {m.os}"))
            elif plat[4:] != m.arch:
                problems.append(("platform", f"it is built for {plat[4:]} ({plat}), this machine is {m.arch}"))
            else:
                return None, None
        else:
            problems.append(("platform", f"it is built for {plat}, this machine is {m.os} {m.arch}"))
    # A glibc problem is the one to report when another tag of the same wheel is merely foreign.
    problems.sort(key=lambda p: p[0] != "glibc")
    return (problems[0] if problems else ("platform", f"unknown platform tag {wheel.platform}")), None


def driver_problem(cuda: str, m: Machine, facts: SiteFacts | None,
                   facts_note: str = "") -> tuple[str | None, str | None]:
    """(problem, note): is the NVIDIA driver new enough for code built with CUDA ``cuda``?

    A driver version is compared with the site's minimum for that CUDA (``facts``); without the
    facts only the CUDA version the driver reports can be compared, and the note says so.
    """
    major = cuda.split(".")[0]
    need = facts.driver_for(cuda) if facts is not None else None
    if m.driver:
        if need and release(m.driver) < release(need):
            return (f"it is built with CUDA {cuda}, which needs NVIDIA driver >= {need}; this "
                    f"machine's driver is {m.driver}"), None
        if facts is None:
            return None, f"couldn't check the NVIDIA driver {m.driver} against CUDA {cuda}: {facts_note}"
        return None, None
    if m.driver_cuda:
        if int(m.driver_cuda.split(".")[0]) < int(major):
            extra = f" (driver >= {need})" if need else ""
            return (f"it is built with CUDA {cuda}; this machine's driver supports CUDA up to "
                    f"{m.driver_cuda}: update the driver{extra}"), None
        return None, None
    return None, "couldn't check the NVIDIA driver (none detected here)"


@dataclass
class FileCandidate:
    """One wheel of a variant index, with what it was built for and why it doesn't fit."""

    file: IndexFile
    wheel: WheelName
    variant: Variant | None
    index_path: str
    problems: list[tuple[str, str]] = field(default_factory=list)  # (kind, message)
    notes: list[str] = field(default_factory=list)

    @property
    def version(self) -> str:
        """The full version as the file name spells it, local label included."""
        return self.wheel.version_text


def file_variant(f: IndexFile, wheel: WheelName) -> Variant | None:
    """What a file was built for: the index's own data when it gives it (checked by
    tools.selector.client.parse_cuwheels), else the local label."""
    extra = f.extra or {}
    if extra.get("cuda") and extra.get("torch"):
        # A stable-ABI build serves several torch series (the index says which); a label never does.
        return Variant(extra["cuda"], extra["torch"], extra.get("cxx11_abi"), tuple(extra.get("serves", ())))
    label = wheel.version_text.partition("+")[2]
    return parse_label(label) if label else None


def check(c: FileCandidate, m: Machine, facts: SiteFacts | None, facts_note: str = "") -> None:
    """Fill ``c.problems`` and ``c.notes`` for everything but the GPU arch (that may need a download)."""
    if c.file.yanked:
        reason = c.file.yanked if isinstance(c.file.yanked, str) else "no reason given"
        c.problems.append(("yanked", f"it is yanked ({reason})"))
    if not python_fits(c.wheel, m):
        c.problems.append(("python", f"it is for {c.wheel.python}-{c.wheel.abi}, this is Python "
                                     f"{m.python[0]}.{m.python[1]} ({m.python_tag})"))
    if c.file.requires_python:
        ok = python_allowed(c.file.requires_python, tuple(m.python))
        if ok is False:
            c.problems.append(("requires-python", f"it requires Python {c.file.requires_python}, this is "
                                                  f"{'.'.join(map(str, m.python))}"))
    plat, note = platform_problem(c.wheel, m)
    if plat:
        c.problems.append(plat)
    if note:
        c.notes.append(note)
    if c.variant is not None:
        problem, note = driver_problem(c.variant.cuda, m, facts, facts_note)
        if problem:
            c.problems.append(("driver", problem))
        if note:
            c.notes.append(note)
        if c.variant.cxx11_abi is not None and m.cxx11_abi is not None and c.variant.cxx11_abi != m.cxx11_abi:
            c.problems.append(("abi", (
                f"it is built with the {'new (C++11)' if c.variant.cxx11_abi else 'old (pre-C++11)'} C++ ABI, "
                f"this torch uses the {'new' if m.cxx11_abi else 'old'} one: importing it would fail with an "
                "undefined symbol")))


def check_arch(c: FileCandidate, m: Machine, *, index: Index, peek: bool, budget: list[int]) -> None:
    """Add an ``arch`` problem (or a note saying why it wasn't checked) to ``c``, a file of ``index``.

    ``budget`` is a one-item list: the wheel reads left for this answer, shared by its calls.
    """
    if not m.gpus:
        c.notes.append("couldn't check the GPU arch: no GPU detected (pass --sm to check one)")
        return
    extra = c.file.extra or {}
    found: Any = extra.get("archs")
    source = "the index"
    if found is None and "archs" in extra:
        # The index writes what the build manifest says for every file it places (null: no
        # manifest, or none on record), so the wheel, often on another host, is never read.
        c.notes.append(f"skipped the GPU arch check for {c.file.filename}: the index records no GPU "
                       "code for it (a wheel without a build manifest)")
        return
    if found is None:
        if not peek:
            c.notes.append("didn't check the GPU arch (--no-peek)")
            return
        elsewhere = index.not_read(c.file.url)
        if elsewhere:
            c.notes.append(f"skipped the GPU arch check for {c.file.filename}: the index's page lists "
                           f"no GPU archs for it and {elsewhere}")
            return
        if budget[0] <= 0:
            c.notes.append("couldn't check the GPU arch: read enough wheels for one answer")
            return
        budget[0] -= 1
        manifest, how = index.wheel_manifest(c.file.url, c.file.size)
        if manifest is None:
            c.notes.append(f"couldn't check the GPU arch: no build manifest ({how})")
            return
        found = archs_found(manifest)
        if found is not None:
            found = parse_archs(found, visible(c.file.url), f"{MANIFEST_NAME} archs.found")
        source = f"the wheel's {MANIFEST_NAME} ({how})"
    if not found or not module_archs(found):
        c.notes.append("couldn't check the GPU arch: the build manifest lists no GPU code")
        return
    problem = arch_problem(found, m.gpus)
    if problem:
        c.problems.append(("arch", problem))
    else:
        sms = ", ".join(f"sm_{g.sm}" for g in m.gpus)
        c.notes.append(f"GPU arch checked against {source}: kernels for {sms}")
