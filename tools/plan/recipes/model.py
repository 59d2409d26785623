"""Recipes: ``recipes/<package>/recipe.yaml`` plus ``patches/``, loaded strictly.

A recipe is plain data that narrows the global table: which CUDA versions, which torch series for
each (a range of the table's series, ``tools.plan.recipes.torch``), which Python versions and which
GPU architectures one package is built for, and how (its sdist, its own build environment
variables, its patches). Every rule broken is reported with the file, the key, the rule and the
fix; ``python -m tools.recipe`` checks every recipe and exits non-zero when any is wrong.
"""

from __future__ import annotations

import math
import os
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from tools import RECIPES_DIR
from tools.core.errors import RecipeError
from .blocks import (PACKAGE_RE, Dependency, KernelCheck, ProbeSpec, parse_depends,
                            parse_kernel_check, parse_probe)
from .env import ArchEnv, EnvVar, parse_arch_env, parse_env
from .platforms import PlatformChoice, archs_on, parse_platforms
from .torch import (CudaTarget, Exclusion, TorchRange, check_patch_scopes,
                           parse_torch_targets, why_not)
from ..schema import Problems, load_yaml
from ..table import Table, arch_key, load_table, version_key
from tools.core.variant import DEFAULT_PLATFORM

RECIPE_SCHEMA = 1
RECIPE_FILE = "recipe.yaml"

#: What a binary's Python side depends on: ``cpython`` one build per interpreter (``cp312-cp312``),
#: ``abi3`` CPython's limited API from ``python_from`` on (``cp310-abi3``), ``none`` no Python C API
#: at all (a torch op library loaded by ``torch.ops.load_library``; ``py3-none``).
PYTHON_ABIS = ("cpython", "abi3", "none")
#: What it depends on of torch: ``exact`` torch's C++ API, one build per torch series; ``stable``
#: only torch's stable C shim (``aoti_torch_*``, ``torch_*``; ``TORCH_TARGET_VERSION``), one build
#: per CUDA version serving every listed series from ``torch_from`` on.
TORCH_ABIS = ("exact", "stable")
#: The most GiB one compile job may be sized for (flash-attn's, the largest, is 7).
MAX_JOB_MEMORY_GIB = 256
#: The most threads of nvcc's --threads (one per arch of a compile: no list has 64).
MAX_NVCC_THREADS = 64
#: The highest build number (each rebuild of a version raises it by one).
MAX_BUILD_NUMBER = 9999
#: The largest wheel size per arch a recipe may state (GitHub takes release assets under 2 GiB).
MAX_WHEEL_MIB_PER_ARCH = 2048

#: A file name alone: letters, digits and ._+- (PEP 625 sdist names are narrower still).
_FILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
#: A PyPI project name (PEP 508).
_PROJECT_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_PATCH_RE = re.compile(r"\d{4}-[A-Za-z0-9][A-Za-z0-9._-]*\.patch")
_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_SHA_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Source:
    """The registry sdist a recipe builds."""

    pypi: str
    version: str
    sdist: str
    sha256: str
    url: str


@dataclass(frozen=True)
class BuildDep:
    """A build requirement other than torch."""

    requirement: str
    reason: str


@dataclass(frozen=True)
class BuildSpec:
    """How the package is built."""

    isolation: bool
    requires: tuple[BuildDep, ...]
    job_memory_gib: float
    job_memory_reason: str
    nvcc_threads: int | None
    nvcc_threads_fixed: bool = False
    #: The wheels' build tag (``pkg-1.0+cu128.torch2.8-1-cp312-...whl``) when above 0: raised to
    #: publish a rebuild of the same version, since a published file name never changes bytes.
    number: int = 0
    number_reason: str | None = None
    #: The wheel's size per GPU arch it carries, measured (None: the release's stated rule,
    #: ``tools.releasing.sizes``): what the schedule counts against release assets and disks.
    wheel_mib_per_arch: float | None = None
    wheel_mib_reason: str | None = None


@dataclass(frozen=True)
class Abi:
    """What the built binary depends on, which decides how many builds serve the matrix.

    The default (no ``abi:`` block) is one build per Python and per torch series.
    """

    python: str = "cpython"
    python_from: str | None = None
    torch: str = "exact"
    torch_from: str | None = None
    reason: str | None = None

    @property
    def collapsed(self) -> bool:
        """True when one build serves several Pythons or several torch series."""
        return self.python != "cpython" or self.torch != "exact"


@dataclass(frozen=True)
class Patch:
    """A patch file applied to the extracted sdist, in order."""

    file: str
    path: Path
    reason: str
    upstream: str
    #: The torch series the patch is written for (``torch_from``, optionally ``torch_to``), when
    #: it says: each must be a series the recipe builds (``recipes.torch.check_patch_scopes``).
    #: It is applied to every build like any patch; the patch itself decides what differs.
    torch_from: str | None = None
    torch_to: str | None = None


@dataclass(frozen=True)
class Recipe:
    """A validated recipe."""

    package: str
    summary: str
    path: Path
    source: Source
    imports: tuple[str, ...]
    python: SpecifierSet
    cuda: tuple[CudaTarget, ...]
    archs: dict[str, tuple[str, ...]] | None
    arch_env: ArchEnv
    env: tuple[EnvVar, ...]
    build: BuildSpec
    patches: tuple[Patch, ...]
    abi: Abi = Abi()
    check: KernelCheck | None = None
    #: Units ``python -m tools.probe`` compiles instead of its own pick of the heaviest, and why.
    probe: ProbeSpec | None = None
    #: Recipes whose wheel of the same cell this package imports (``depends``).
    depends: tuple[Dependency, ...] = ()
    #: The torch series the package supports (``torch: {from, to}``), which every CUDA
    #: version's range narrows; None when the recipe gives none.
    torch_range: TorchRange | None = None
    #: (torch series, CUDA version) pairs a range includes that are not built (``exclude``).
    exclude: tuple[Exclusion, ...] = ()
    #: What the recipe says about each platform it names (``tools.plan.recipes.platforms``);
    #: a platform it doesn't name is built like Linux x86_64.
    platforms: dict[str, PlatformChoice] | None = None

    def builds_on(self, platform: str) -> bool:
        """Whether the recipe plans cells on ``platform`` (one of the table's)."""
        choice = (self.platforms or {}).get(platform)
        return choice is None or not choice.exclude

    @property
    def folder(self) -> Path:
        """The recipe's folder."""
        return self.path.parent

    def target(self, cuda: str) -> CudaTarget:
        """The recipe's entry for one CUDA version."""
        for t in self.cuda:
            if t.cuda == cuda:
                return t
        raise KeyError(cuda)

    def why_not(self, series: str, cuda: str, table: Table) -> str | None:
        """Why no cell of torch ``series`` with ``cuda`` is built, in words; None if one is."""
        return why_not(self.cuda, self.exclude, self.python, series, cuda, table)

    def archs_for(self, cuda: str, table: Table, platform: str = DEFAULT_PLATFORM
                  ) -> tuple[str, ...]:
        """The arch list built for ``cuda`` on ``platform``: the recipe's platform entry's own,
        else the recipe's, else torch's default list there."""
        if platform == DEFAULT_PLATFORM:
            if self.archs is None:
                return table.cuda[cuda].default_archs
            return self.archs.get(cuda, self.archs.get("*", ()))
        return archs_on((self.platforms or {}).get(platform), cuda, self.archs, table, platform)

    def pythons_for(self, torch: str, table: Table) -> list[str]:
        """Python versions built against torch series ``torch``: the table's, narrowed."""
        return [py for py in table.torch[torch].python
                if self.python.contains(f"{py}.0", prereleases=True)]

    def served_pythons(self, torches: tuple[str, ...] | list[str], table: Table) -> list[str]:
        """Python versions one build serves across ``torches``: every one of theirs for
        ``abi: none``, those from ``python_from`` on for ``abi3``, sorted."""
        found = {py for series in torches for py in self.pythons_for(series, table)}
        if self.abi.python == "abi3" and self.abi.python_from:
            found = {py for py in found if version_key(py) >= version_key(self.abi.python_from)}
        return sorted(found, key=version_key)


def parse_recipe(data: object, path: Path, table: Table) -> Recipe:
    """Validate parsed YAML as a recipe at ``path`` (which fixes the package and patch folder)."""
    p = Problems(path, RecipeError)
    top = p.mapping(data, "", {
        "schema": int, "package": str, "summary": str, "source": dict, "imports": list,
        "python": str, "cuda": dict, "archs": (str, dict), "arch_env": dict, "build": dict,
    }, {"env": dict, "patches": list, "abi": dict, "check": dict, "probe": dict,
        "depends": list, "torch": dict, "exclude": list, "platforms": dict})
    if top is None:
        p.raise_if_any()
    if "schema" in top and top["schema"] != RECIPE_SCHEMA:
        p.add("schema", f"version {top['schema']} is not understood", f"use schema: {RECIPE_SCHEMA}")

    package = top.get("package", "")
    if package and package != path.parent.name:
        p.add("package", f"{package!r} differs from the folder name {path.parent.name!r}",
              "the package key and the recipe folder must have the same name")
    elif package and not PACKAGE_RE.fullmatch(package):
        p.add("package", f"{package!r} must be lowercase letters, digits and underscores",
              f"use {re.sub(r'[^a-z0-9_]', '_', package.lower())!r} (also rename the folder)")

    source = _source(p, top.get("source"))
    imports = p.strings(top["imports"], "imports") if "imports" in top else None
    for i, mod in enumerate(imports or ()):
        if not _MODULE_RE.fullmatch(mod):
            p.add(f"imports[{i}]", f"{mod!r} is not an importable module name")
    p.once(imports, "imports", "module")

    spec = SpecifierSet()
    if "python" in top:
        try:
            spec = SpecifierSet(top["python"])
        except InvalidSpecifier:
            p.add("python", f"{top['python']!r} is not a PEP 440 specifier", 'write e.g. ">=3.9"')

    torch = parse_torch_targets(p, top.get("cuda"), top.get("torch"), top.get("exclude"),
                                table, spec)
    targets = torch.cuda
    archs = _archs(p, top.get("archs"), targets, table)
    arch_env = parse_arch_env(p, top.get("arch_env"))
    env = parse_env(p, top.get("env") or {}, arch_env)
    build = _build(p, top.get("build"))
    patches = _patches(p, top.get("patches") or [], path.parent / "patches")
    check_patch_scopes(p, patches, torch, table, spec)
    abi = _abi(p, top["abi"], targets, table) if "abi" in top else Abi()
    check = parse_kernel_check(p, top.get("check"), path.parent)
    probe = parse_probe(p, top.get("probe"))
    depends = parse_depends(p, top.get("depends") or [], package)
    platforms = parse_platforms(p, top.get("platforms"), tuple(t.cuda for t in targets), archs,
                                table)

    p.raise_if_any()
    return Recipe(package, top["summary"], path, source, imports, spec, targets, archs, arch_env,
                  env, build, patches, abi, check, probe, depends, torch.range, torch.exclude,
                  platforms)


def _source(p: Problems, raw: object) -> Source | None:
    m = p.entry(raw, "source", {"pypi": str, "version": str, "sdist": str, "sha256": str,
                                "url": str})
    if m is None:
        return None
    if not _SHA_RE.fullmatch(m["sha256"]):
        p.add("source.sha256", f"{m['sha256']!r} is not 64 lowercase hex digits",
              "copy the sha256 digest from the registry's file listing")
    if not _PROJECT_RE.fullmatch(m["pypi"]):
        p.add("source.pypi", f"{m['pypi']!r} is not a PyPI project name",
              "write the name as the registry spells it, e.g. causal-conv1d")
    try:
        Version(m["version"])
    except InvalidVersion:
        p.add("source.version", f"{m['version']!r} is not a PEP 440 version",
              "write the release as the registry lists it, e.g. \"1.7.0\"")
    stem = m["sdist"].removesuffix(".tar.gz")
    if not _FILE_NAME_RE.fullmatch(m["sdist"]) or ".." in m["sdist"]:
        # It becomes a path in the work folder: written there, and deleted on a hash mismatch.
        p.add("source.sdist", f"{m['sdist']!r} is not a plain file name",
              "write the sdist's file name alone, e.g. causal_conv1d-1.7.0.tar.gz: no folders, "
              "no '..'")
    elif not m["sdist"].endswith(".tar.gz"):
        p.add("source.sdist", f"{m['sdist']!r} is not a .tar.gz sdist")
    elif canonicalize_name(stem.rsplit("-", 1)[0]) != canonicalize_name(m["pypi"]) or \
            stem.rsplit("-", 1)[-1] != m["version"]:
        p.add("source.sdist", f"{m['sdist']!r} is not the sdist of {m['pypi']} {m['version']}",
              f"expected {m['pypi'].replace('-', '_')}-{m['version']}.tar.gz")
    _source_url(p, m["url"], m["sdist"])
    return Source(m["pypi"], m["version"], m["sdist"], m["sha256"], m["url"])


def _source_url(p: Problems, url: str, sdist: str) -> None:
    """``source.url``: https, a host alone (no user, password or port), no query or fragment,
    ending in the sdist's name. Which host it may be is the download's to check
    (``tools.pipeline.source``)."""
    fix = "copy the URL from the registry's file listing"
    if _CONTROL_RE.search(url) or " " in url:
        p.add("source.url", "contains spaces or control characters", fix)
        return
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:  # a bracketed host that is no IPv6 address
        p.add("source.url", f"{url!r} is not a URL ({exc})", fix)
        return
    if "@" in parts.netloc:
        p.add("source.url", f"{url!r} has a user name or password before '@': the download "
              f"would go to {parts.hostname!r}", fix)
    elif ":" in parts.netloc.rsplit("]", 1)[-1]:
        p.add("source.url", f"{url!r} names a port", fix)
    elif parts.query or parts.fragment or "?" in url or "#" in url:
        p.add("source.url", f"{url!r} has a query or fragment", fix)
    elif parts.scheme != "https" or not parts.hostname or not url.endswith("/" + sdist):
        p.add("source.url", "must be an https URL ending in the sdist file name", fix)


def _abi(p: Problems, raw: object, targets: tuple[CudaTarget, ...], table: Table) -> Abi:
    m = p.entry(raw, "abi", {"python": str, "torch": str, "reason": str},
                {"python_from": str, "torch_from": str})
    if m is None:
        return Abi()
    p.reason(m["reason"], "abi.reason")
    python, torch = m["python"], m["torch"]
    if python not in PYTHON_ABIS:
        p.add("abi.python", f"{python!r} is not one of {', '.join(PYTHON_ABIS)}",
              "cpython: one build per interpreter; abi3: the limited API (with python_from); "
              "none: no Python C API")
    if torch not in TORCH_ABIS:
        p.add("abi.torch", f"{torch!r} is not one of {', '.join(TORCH_ABIS)}",
              "exact: torch's C++ API, one build per series; stable: only the stable C shim "
              "(with torch_from)")
    python_from, torch_from = m.get("python_from"), m.get("torch_from")
    if python == "abi3" and python_from is None:
        p.add("abi.python_from", "abi3 needs the oldest Python whose limited API the build targets",
              'add python_from: "3.10" (the X.Y of its cpXY-abi3 wheel tag)')
    elif python != "abi3" and python_from is not None:
        p.add("abi.python_from", f"only means something for python: abi3 (this is {python!r})",
              "remove it")
    elif python_from is not None and not re.fullmatch(r"3\.\d+", python_from):
        p.add("abi.python_from", f"{python_from!r} is not a Python version like \"3.10\"")
    if torch == "stable" and torch_from is None:
        p.add("abi.torch_from", "stable needs the oldest torch series the build targets",
              'add torch_from: "2.10" (the package\'s TORCH_TARGET_VERSION)')
    elif torch != "stable" and torch_from is not None:
        p.add("abi.torch_from", f"only means something for torch: stable (this is {torch!r})",
              "remove it")
    elif torch_from is not None and torch_from not in table.torch:
        p.add("abi.torch_from", f"torch {torch_from!r} is not in the compatibility table",
              f"use one of {', '.join(table.torch)}")
    elif torch_from is not None:
        for t in targets:
            older = [s for s in t.torch if version_key(s) < version_key(torch_from)]
            if older and t.range is None:
                p.add(f"cuda.{t.cuda}.torch", f"lists torch {', '.join(older)}, older than "
                      f"abi.torch_from {torch_from}: a build for torch's stable ABI from "
                      f"{torch_from} calls shim functions older torch lacks",
                      f"drop {', '.join(older)} or lower abi.torch_from")
            elif older:
                p.add(f"cuda.{t.cuda}", f"its torch range {t.range} takes in torch "
                      f"{', '.join(older)}, older than abi.torch_from {torch_from}: a build for "
                      f"torch's stable ABI from {torch_from} calls shim functions older torch "
                      "lacks", f'start the range at {torch_from} (torch: {{from: "{torch_from}"'
                      ", ...}) or lower abi.torch_from")
    return Abi(python, python_from, torch, torch_from, m["reason"])


def _archs(p: Problems, raw: object, targets: tuple[CudaTarget, ...], table: Table
           ) -> dict[str, tuple[str, ...]] | None:
    if raw == "inherit" or raw is None:
        return None
    if isinstance(raw, str):
        p.add("archs", f"{raw!r} is neither 'inherit' nor a mapping",
              'write `archs: inherit` or `archs: {"*": ["80", "90"]}`')
        return None
    out: dict[str, tuple[str, ...]] = {}
    for key, value in raw.items():
        where = f"archs.{key}"
        if key != "*" and key not in {t.cuda for t in targets}:
            p.add(where, f"{key!r} is not one of this recipe's CUDA versions or \"*\"")
            continue
        archs = p.strings(value, where)
        if archs is not None:
            p.once(archs, where, "arch")
            out[key] = tuple(sorted(set(archs), key=arch_key))
    for t in targets:
        archs = out.get(t.cuda, out.get("*"))
        if archs is None:
            p.add("archs", f"no arch list for CUDA {t.cuda}",
                  f'add "{t.cuda}": [...] or a "*" entry')
            continue
        entry = table.cuda[t.cuda]
        for arch in entry.uncompilable(archs):
            src = t.cuda if t.cuda in out else "*"
            p.add(f"archs.{src}", f"sm_{arch} cannot be compiled by CUDA {t.cuda} "
                  f"(its nvcc knows {', '.join(entry.archs)})",
                  f'give CUDA {t.cuda} its own list: archs: {{"{t.cuda}": [...]}}')
    return out


def _build(p: Problems, raw: object) -> BuildSpec | None:
    m = p.entry(raw, "build", {"isolation": bool, "requires": list,
                               "job_memory_gib": (int, float), "job_memory_reason": str},
                {"nvcc_threads": int, "nvcc_threads_fixed": bool, "number": int, "number_reason": str,
                 "wheel_mib_per_arch": (int, float), "wheel_mib_reason": str})
    if m is None:
        return None
    deps = []
    p.once([d["requirement"] for d in m["requires"] if isinstance(d, dict)
            and isinstance(d.get("requirement"), str)], "build.requires", "requirement",
           key=_project)
    for i, dep in enumerate(m["requires"]):
        d = p.entry(dep, f"build.requires[{i}]", {"requirement": str, "reason": str})
        if d and _requirement(p, d["requirement"], f"build.requires[{i}]"):
            deps.append(BuildDep(d["requirement"], d["reason"]))
    memory = m["job_memory_gib"]
    if not math.isfinite(memory) or not 0 < memory <= MAX_JOB_MEMORY_GIB:
        p.add("build.job_memory_gib", f"{memory} is not a size of one compile job (a number of "
              f"GiB above 0, at most {MAX_JOB_MEMORY_GIB})",
              "write the measured peak of one nvcc job, e.g. 3.5")
    if not 1 <= m.get("nvcc_threads", 1) <= MAX_NVCC_THREADS:
        p.add("build.nvcc_threads", f"{m['nvcc_threads']} is not a thread count for nvcc's "
              f"--threads (1 to {MAX_NVCC_THREADS})", "one per arch of a compile at most, e.g. 4")
    if m.get("nvcc_threads_fixed") and "nvcc_threads" not in m:
        p.add("build.nvcc_threads_fixed", "says the package fixes nvcc's --threads, but "
              "build.nvcc_threads doesn't say to what", "add nvcc_threads: N (its --threads)")
    number = m.get("number", 0)  # a mistyped one is reported by p.mapping and read as 0
    if not 0 <= number <= MAX_BUILD_NUMBER:
        p.add("build.number", f"{number} is not a build number (a whole number, 0 to "
              f"{MAX_BUILD_NUMBER})",
              "start at 0 and raise it by one for each rebuild of the same version")
    elif number > 0 and "number_reason" not in m:
        p.add("build.number", "a rebuild needs its reason", "add number_reason: what the rebuild fixes")
    elif number == 0 and "number_reason" in m and ("number" in m or "number" not in raw):
        p.add("build.number_reason", "explains a rebuild, but build.number is 0",
              "remove it, or raise build.number")
    if "number_reason" in m:
        p.reason(m["number_reason"], "build.number_reason")
    size = m.get("wheel_mib_per_arch")
    if size is not None and (not math.isfinite(size) or not 0 < size <= MAX_WHEEL_MIB_PER_ARCH):
        p.add("build.wheel_mib_per_arch", f"{size} is not a wheel's size per arch (MiB above 0, "
              f"at most {MAX_WHEEL_MIB_PER_ARCH})", "write a built wheel's size over its archs")
    if (size is None) != ("wheel_mib_reason" not in m):
        p.add("build.wheel_mib_per_arch" if size is None else "build.wheel_mib_reason",
              "a wheel's size and its reason go together",
              "give both wheel_mib_per_arch and wheel_mib_reason (which wheel was measured)")
    elif size is not None:
        p.reason(m["wheel_mib_reason"], "build.wheel_mib_reason")
    return BuildSpec(m["isolation"], tuple(deps), float(m["job_memory_gib"]),
                     m["job_memory_reason"], m.get("nvcc_threads"),
                     m.get("nvcc_threads_fixed", False), max(number, 0), m.get("number_reason"),
                     float(size) if size is not None else None, m.get("wheel_mib_reason"))


def _requirement(p: Problems, text: str, where: str) -> bool:
    """A build requirement is a PEP 508 requirement on the registry, nothing else: no installer
    option (``--extra-index-url=...`` would be one to uv), no URL, not torch."""
    fix = ('a project name with an optional version, e.g. "ninja" or "setuptools>=70.1"; '
           "installer options are not requirements")
    if _CONTROL_RE.search(text):
        p.add(f"{where}.requirement", "contains a newline or another control character", fix)
        return False
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        first = str(exc).splitlines()[0] if str(exc) else "unreadable"
        p.add(f"{where}.requirement", f"{text!r} is not a PEP 508 requirement ({first})", fix)
        return False
    if req.url:
        p.add(f"{where}.requirement", f"{text!r} names a URL: build requirements come from the "
              "registry", "remove the URL and keep the name and version")
        return False
    if canonicalize_name(req.name) == "torch":
        p.add(where, "torch comes from the cell, not build.requires",
              "remove it: each cell installs its own torch")
        return False
    return True


def _project(requirement: str) -> str:
    """The normalized project a requirement names (its text when it is no requirement)."""
    try:
        return canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement:
        return requirement


def _patches(p: Problems, raw: object, folder: Path) -> tuple[Patch, ...]:
    if not isinstance(raw, list):
        p.add("patches", "must be a list of {file, reason, upstream}")
        return ()
    out = []
    for i, entry in enumerate(raw):
        where = f"patches[{i}]"
        m = p.entry(entry, where, {"file": str, "reason": str, "upstream": str},
                    {"torch_from": str, "torch_to": str})
        if m is None:
            continue
        p.reason(m["reason"], f"{where}.reason")
        if not _PATCH_RE.fullmatch(m["file"]):
            p.add(f"{where}.file", f"{m['file']!r} is not named NNNN-Subject.patch",
                  "use `git format-patch` names such as 0001-Read-arch-list-from-env.patch")
        path = folder / m["file"]
        if not path.is_file():
            p.add(f"{where}.file", f"{m['file']} is listed but patches/{m['file']} does not exist",
                  "add the file or remove the entry")
        out.append(Patch(m["file"], path, m["reason"], m["upstream"], m.get("torch_from"),
                         m.get("torch_to")))
    names = [x.file for x in out]
    if names != sorted(names):
        p.add("patches", "patches must be listed in the order of their numbers")
    p.once(names, "patches", "patch")
    if folder.is_dir():
        for extra in sorted(f.name for f in folder.iterdir() if f.name not in names):
            p.add("patches", f"patches/{extra} is in the folder but not listed",
                  "list it under patches: with a reason, or delete it")
    return tuple(out)


def load_recipe(folder: Path, table: Table | None = None) -> Recipe:
    """Load and validate ``<folder>/recipe.yaml`` against the table."""
    path = Path(folder) / RECIPE_FILE
    return parse_recipe(load_yaml(path, RecipeError), path, table or load_table())


def recipe_folders(root: Path = RECIPES_DIR) -> list[Path]:
    """Every recipe folder (a directory holding recipe.yaml), sorted by name. A recipe.yaml that
    is not a regular file (a link to a device, a FIFO) counts, so that loading it names it."""
    return sorted(d for d in root.iterdir()
                  if d.is_dir() and os.path.lexists(d / RECIPE_FILE))


def check_distinct(recipes: list[Recipe]) -> None:
    """RecipeError naming every two recipes that build the same PyPI project (``source.pypi``,
    normalized): their wheels would carry the same names, and one would stand in for the other."""
    first: dict[str, Recipe] = {}
    clashes = []
    for recipe in recipes:
        project = canonicalize_name(recipe.source.pypi)
        if project in first:
            clashes.append(f"  - {first[project].path} and {recipe.path} both build {project}")
        else:
            first.setdefault(project, recipe)
    if clashes:
        raise RecipeError("two recipes build the same PyPI project (source.pypi), so their "
                          "wheels would have the same names:\n" + "\n".join(clashes),
                          hint="keep one recipe per project: merge the folders or remove one")


def load_all(root: Path = RECIPES_DIR, table: Table | None = None) -> list[Recipe]:
    """Load every recipe under ``root``; the first invalid one raises RecipeError, and so do two
    recipes of one PyPI project (:func:`check_distinct`)."""
    table = table or load_table()
    recipes = [load_recipe(d, table) for d in recipe_folders(root)]
    check_distinct(recipes)
    return recipes
