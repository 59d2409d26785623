"""Recipes: ``recipes/<package>/recipe.yaml`` plus ``patches/``, loaded strictly.

A recipe is plain data that narrows the global table: which CUDA versions, which torch series for
each (a range of the table's series, ``tools.plan.recipes.torch``), which Python versions and which
GPU architectures one package is built for, and how (its sdist, its own build environment
variables, its patches). Its shape (keys, types, patterns, ranges) is the JSON Schema
``recipe.schema.json`` (``tools.plan.recipes.shape``); the rules across its fields and against
the table and the folder are here and in the package's other modules. Every rule broken is
reported with the file, the key, the rule and the fix; ``python -m tools.recipe`` checks every
recipe and exits non-zero when any is wrong.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from tools import RECIPES_DIR
from tools.core.errors import RecipeError
from .blocks import (Dependency, KernelCheck, ProbeSpec, parse_depends,
                            parse_kernel_check, parse_probe)
from .env import ArchEnv, EnvVar, parse_arch_env, parse_env
from .freethreaded import PLATFORM as FREE_THREADED_PLATFORM, FreeThreaded, parse_free_threaded
from .platforms import PlatformChoice, archs_on, parse_platforms
from .torch import (CudaTarget, Exclusion, TorchRange, check_patch_scopes,
                           parse_torch_targets, why_not)
from .shape import check_recipe_shape
from .source import CONTROL_RE, Source, parse_source
from ..schema import Problems, load_yaml
from .todo import check_todos
from ..table import Table, arch_key, load_table, version_key
from tools.core.variant import DEFAULT_PLATFORM

RECIPE_FILE = "recipe.yaml"

# The shape's limits (the ABI kinds, the most GiB of a compile job, nvcc's threads, the build
# number, a wheel's MiB per arch, the names of files, projects and modules) are the schema's.


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
    """What the built binary depends on, which decides how many builds serve the matrix:
    ``python`` is ``cpython`` (one build per interpreter, ``cp312-cp312``), ``abi3`` (CPython's
    limited API from ``python_from`` on, ``cp310-abi3``) or ``none`` (no Python C API at all: a
    torch op library loaded by ``torch.ops.load_library``, ``py3-none``); ``torch`` is ``exact``
    (torch's C++ API, one build per torch series) or ``stable`` (only torch's stable C shim,
    ``TORCH_TARGET_VERSION``: one build per CUDA version serving every series from
    ``torch_from`` on).

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
    #: The free-threaded CPythons the recipe is built for (``tools.plan.recipes.freethreaded``).
    free_threaded: FreeThreaded | None = None

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

    def free_threaded_for(self, torch: str, table: Table, platform: str = DEFAULT_PLATFORM
                          ) -> list[str]:
        """Free-threaded CPythons (``3.14t``) built against torch series ``torch`` on
        ``platform``: the recipe's, where the table's row has them, on Linux x86_64 only."""
        if self.free_threaded is None or platform != FREE_THREADED_PLATFORM:
            return []
        return [py for py in table.torch[torch].free_threaded if py in self.free_threaded.pythons]

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
    # A template's placeholders first, alone: the schema would only repeat them as bad values.
    if check_todos(p, data):
        p.raise_if_any()
    check_recipe_shape(p, data)
    if not isinstance(data, dict):
        p.raise_if_any()
    # the values the schema took; each block's parser reads its raw block and skips what the
    # schema refused (Problems.shaped), so nothing is reported twice
    top = p.shaped(data, "") or {}

    package = top.get("package", "")
    if package and package != path.parent.name:
        p.add("package", f"{package!r} differs from the folder name {path.parent.name!r}",
              "the package key and the recipe folder must have the same name")

    source = parse_source(p, data.get("source"))
    imports = tuple(top["imports"]) if "imports" in top else None
    p.once(imports, "imports", "module")

    spec = SpecifierSet()
    if "python" in top:
        try:
            spec = SpecifierSet(top["python"])
        except InvalidSpecifier:
            p.add("python", f"{top['python']!r} is not a PEP 440 specifier", 'write e.g. ">=3.9"')

    torch = parse_torch_targets(p, data.get("cuda"), data.get("torch"), data.get("exclude"),
                                table, spec)
    targets = torch.cuda
    archs = _archs(p, data.get("archs"), targets, table)
    arch_env = parse_arch_env(p, data.get("arch_env"))
    env = parse_env(p, data.get("env") or {}, arch_env)
    build = _build(p, data.get("build"))
    patches = _patches(p, data.get("patches") or [], path.parent / "patches")
    check_patch_scopes(p, patches, torch, table, spec)
    abi = _abi(p, data["abi"], targets, table) if "abi" in top else Abi()
    check = parse_kernel_check(p, data.get("check"), path.parent)
    probe = parse_probe(p, data.get("probe"))
    depends = parse_depends(p, data.get("depends") or [], package)
    platforms = parse_platforms(p, data.get("platforms"), tuple(t.cuda for t in targets), archs,
                                table)
    free_threaded = parse_free_threaded(p, data.get("free_threaded"), spec, abi.python)

    p.raise_if_any()
    return Recipe(package, top["summary"], path, source, imports, spec, targets, archs, arch_env,
                  env, build, patches, abi, check, probe, depends, torch.range, torch.exclude,
                  platforms, free_threaded)


def _abi(p: Problems, raw: object, targets: tuple[CudaTarget, ...], table: Table) -> Abi:
    m = p.shaped(raw, "abi")
    if m is None:
        return Abi()
    p.reason(m["reason"], "abi.reason")
    python, torch = m["python"], m["torch"]
    # given at all (``raw``) or given well (``m``): a refused value was named by the schema
    python_from, torch_from = m.get("python_from"), m.get("torch_from")
    if python == "abi3" and "python_from" not in raw:
        p.add("abi.python_from", "abi3 needs the oldest Python whose limited API the build targets",
              'add python_from: "3.10" (the X.Y of its cpXY-abi3 wheel tag)')
    elif python != "abi3" and "python_from" in raw:
        p.add("abi.python_from", f"only means something for python: abi3 (this is {python!r})",
              "remove it")
    if torch == "stable" and "torch_from" not in raw:
        p.add("abi.torch_from", "stable needs the oldest torch series the build targets",
              'add torch_from: "2.10" (the package\'s TORCH_TARGET_VERSION)')
    elif torch != "stable" and "torch_from" in raw:
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
    """``archs``: None for ``inherit`` (or a value the schema refused); each list's CUDA
    version one of the recipe's, each arch one its nvcc compiles."""
    if not isinstance(raw, dict) or not p.usable("archs"):
        return None
    out: dict[str, tuple[str, ...]] = {}
    for key, value in raw.items():
        where = f"archs.{key}"
        if key != "*" and key not in {t.cuda for t in targets}:
            p.add(where, f"{key!r} is not one of this recipe's CUDA versions or \"*\"")
            continue
        if p.usable(where):
            p.once(value, where, "arch")
            out[key] = tuple(sorted(set(value), key=arch_key))
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
    """``build``: its requirements PEP 508 ones, each once; what goes together given together
    (the sizes' ranges and the types are the schema's)."""
    m = p.shaped(raw, "build")
    if m is None:
        return None
    deps = []
    p.once([d["requirement"] for d in m["requires"] if isinstance(d, dict)
            and isinstance(d.get("requirement"), str)], "build.requires", "requirement",
           key=_project)
    for i, dep in enumerate(m["requires"]):
        d = p.shaped(dep, f"build.requires[{i}]")
        if d and _requirement(p, d["requirement"], f"build.requires[{i}]"):
            deps.append(BuildDep(d["requirement"], d["reason"]))
    if m.get("nvcc_threads_fixed") and "nvcc_threads" not in raw:
        p.add("build.nvcc_threads_fixed", "says the package fixes nvcc's --threads, but "
              "build.nvcc_threads doesn't say to what", "add nvcc_threads: N (its --threads)")
    number = m.get("number", 0)  # one the schema refused is named there and read as 0
    if number > 0 and "number_reason" not in m:
        p.add("build.number", "a rebuild needs its reason", "add number_reason: what the rebuild fixes")
    elif number == 0 and "number_reason" in m and ("number" in m or "number" not in raw):
        p.add("build.number_reason", "explains a rebuild, but build.number is 0",
              "remove it, or raise build.number")
    if "number_reason" in m:
        p.reason(m["number_reason"], "build.number_reason")
    size = m.get("wheel_mib_per_arch")
    if ("wheel_mib_per_arch" in raw) != ("wheel_mib_reason" in raw):
        p.add("build.wheel_mib_per_arch" if "wheel_mib_per_arch" not in raw
              else "build.wheel_mib_reason",
              "a wheel's size and its reason go together",
              "give both wheel_mib_per_arch and wheel_mib_reason (which wheel was measured)")
    elif size is not None and "wheel_mib_reason" in m:
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
    if CONTROL_RE.search(text):
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
    """``patches``: each listed file in ``folder``, each file there listed, in order, once."""
    if not isinstance(raw, list) or not p.usable("patches"):
        return ()
    out = []
    for i, entry in enumerate(raw):
        where = f"patches[{i}]"
        m = p.shaped(entry, where)
        if m is None:
            continue
        p.reason(m["reason"], f"{where}.reason")
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
