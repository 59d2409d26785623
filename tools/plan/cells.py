"""The build matrix: recipes x table -> cells, one id per cell, one cell per distinct build.

A cell id is ``<package>-<python>-cu<cuda-nodot>`` for a CUDA version's default torch (the newest
series the recipe's range for it builds, or the first of a list: ``tools.plan.recipes.torch``) and
``<package>-<python>-cu<cuda-nodot>-torch<X.Y>`` for the others, each followed by the platform's
part (``-aarch64``, ``-win``) on a platform other than Linux x86_64. A recipe is planned on every
platform of the table (``tools.plan.table_platforms``) it doesn't exclude
(``tools.plan.recipes.platforms``), for its (CUDA, torch series) pairs that have a torch build
there; the newest series left for a CUDA version is its default torch on that platform. The same id names the nox session
(``build-<id>``), the CI job and the build report. A series added to the table is planned for
every recipe whose range includes it, and becomes the default torch of the CUDA versions it is
the newest series of.

A recipe's ``abi`` collapses cells: an ``abi3`` or ``none`` build serves several Pythons (python
part ``abi3``/``py3``), a ``stable`` build serves every torch series the recipe builds for its CUDA
version (torch part ``<torch_from>+``); see tools.core.variant.cell_id. A collapsed cell still builds
with one interpreter and one torch: the lowest Python it serves (the limited API's floor) and the
CUDA version's default torch series.

``python -m tools.matrix`` prints the planned cells (the formats are ``tools.plan.formats``),
filtered by package, Python, CUDA, torch, or by the recipes changed since a git ref.

A torch series whose row is a release candidate (the table's ``candidate:``) is never a CUDA
version's default torch, and never among the series a stable-ABI build serves: its cells are
planned apart, one build per Python (or per collapsed Python part) against the candidate, with
the torch part ``<series>rc`` in their ids (``tools.core.variant.candidate_torch_part``), the
candidate's label (``cu132.torch2.16rc.git0123abc``, which the final's wheel sorts after) and
the pre-release variant index as their only index (``Cell.index_paths``). When the row becomes
the release row, the same recipes plan the series' ordinary cells, which build into the normal
index.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import MISSING, asdict, dataclass, fields, replace
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from tools import RECIPES_DIR, ROOT
from tools.core.errors import PlanError
from .recipes.model import Recipe, load_all
from .table import TABLE_PATH, Table, load_table
from .table import version_key
from tools.core.variant import (DEFAULT_PLATFORM, PYTHON_PART, Variant, candidate_torch_part,
                                cell_id, cuda_nodot, format_label, stable_torch_part,
                                torch_index_url)
from .table_platforms import DEFAULT as DEFAULT_PLATFORM_ENTRY


@dataclass(frozen=True)
class Cell:
    """One wheel to build: a package version for one Python, CUDA and torch."""

    package: str
    version: str
    python: str
    cuda: str
    torch: str
    torch_version: str
    default_torch: bool
    cxx11_abi: bool
    manylinux: str
    image: str
    archs: tuple[str, ...]
    #: The recipe's ``abi``: ``cpython``/``abi3``/``none`` and ``exact``/``stable``.
    python_abi: str = "cpython"
    torch_abi: str = "exact"
    #: For a stable-ABI cell: the oldest torch series its build targets (the recipe's torch_from);
    #: empty otherwise (GitHub's matrix takes strings, booleans and lists only).
    torch_from: str = ""
    #: Torch series whose variant index lists the wheel (just ``torch`` for an exact build).
    serves_torch: tuple[str, ...] = ()
    #: Python versions the wheel installs on (just ``python`` for a per-Python build).
    serves_python: tuple[str, ...] = ()
    #: The first torch major the table knows nothing about (a stable wheel's pin stays below it).
    torch_next_major: int = 3
    #: Cells of the recipes this one ``depends`` on whose wheels it needs: the same CUDA
    #: version, each serving this cell's Pythons and torch series (see ``link_needs``).
    needs: tuple[str, ...] = ()
    #: Those recipes' distribution names, which the wheel requires (``Requires-Dist``).
    needs_dist: tuple[str, ...] = ()
    #: The commit of the torch release candidate the cell builds against (the table's
    #: ``candidate.git``); empty for a release.
    candidate: str = ""
    #: The wheel platform the cell builds for (``recipes/table.yaml``'s ``platforms:``).
    platform: str = DEFAULT_PLATFORM
    #: Its wheel platform tag (``manylinux_2_28_aarch64``, ``win_amd64``), from the table's
    #: pattern for the platform; empty: Linux x86_64's with the cell's ``manylinux``.
    platform_tag: str = ""

    def __post_init__(self) -> None:
        if not self.platform_tag and self.platform == DEFAULT_PLATFORM:
            object.__setattr__(self, "platform_tag",
                               DEFAULT_PLATFORM_ENTRY.wheel_tag(self.manylinux))

    @property
    def torch_part(self) -> str | None:
        """The torch part of the cell's id (tools.core.variant.cell_id): None for the CUDA
        version's default series, ``2.8``, ``2.10+`` (stable ABI) or ``2.16rc`` (a candidate)."""
        if self.candidate:
            return candidate_torch_part(self.torch)
        if self.torch_abi == "stable":
            return stable_torch_part(self.torch_from or self.torch)
        return None if self.default_torch else self.torch

    @property
    def id(self) -> str:
        """``flash_attn-3.12-cu129`` (default torch), ``flash_attn-3.12-cu129-torch2.8``, or
        for a collapsed cell ``xformers-py3-cu130-torch2.10+`` (see tools.core.variant.cell_id)."""
        python = PYTHON_PART.get(self.python_abi, self.python)
        return cell_id(self.package, python, self.cuda, self.torch_part, self.platform)

    @property
    def torch_pin(self) -> str:
        """The wheel's torch requirement: the series it was built for (``torch==2.8.*``), or for a
        stable-ABI build every series from ``torch_from`` below the next major the table doesn't
        know (``torch>=2.10,<3``)."""
        if self.torch_abi == "stable":
            return f"torch>={self.torch_from},<{self.torch_next_major}"
        return f"torch=={self.torch}.*"

    @property
    def torch_requirement(self) -> str:
        """The exact torch the cell builds against (``torch==2.8.0``)."""
        return f"torch=={self.torch_version}"

    @property
    def label(self) -> str:
        """The local version label of this cell's wheel (``cu129.torch2.8``)."""
        return format_label(self.cuda, self.torch, self.cxx11_abi, self.candidate)

    @property
    def index_paths(self) -> tuple[str, ...]:
        """The variant indexes the cell's wheel is listed in (``cu130/torch2.11`` ...); for a
        build against a release candidate only the pre-release one (``pre/cu132/torch2.16``)."""
        return Variant(self.cuda, self.torch, None, self.serves_torch,
                       prerelease=bool(self.candidate)).index_paths

    def to_json(self) -> dict:
        """A JSON-ready dict with the id first (the GitHub matrix uses it as job name)."""
        data = asdict(self)
        for key in ("archs", "serves_torch", "serves_python", "needs", "needs_dist"):
            data[key] = list(data[key])
        del data["torch_next_major"]  # said by torch_pin, as a string
        return {"id": self.id, **data, "label": self.label, "torch_pin": self.torch_pin}

    @classmethod
    def from_json(cls, data: dict, *, where: str = "a planned cell") -> Cell:
        """The cell a :meth:`to_json` dict describes (a cell handed on as a file: the container
        backend's ``cell.json``, a saved plan). ``where`` names the input in errors: PlanError
        for a field missing or unknown, or an id, label or torch pin other than the one its
        fields make (a file from another version of the planner)."""
        again = "plan it again with this checkout (python -m tools.matrix --format json)"
        if not isinstance(data, dict):
            raise PlanError(f"{where}: a cell is a JSON object, not {type(data).__name__}",
                            hint=again)
        own = {f.name: f for f in fields(cls) if f.name != "torch_next_major"}
        derived = ("id", "label", "torch_pin")
        missing = [n for n, f in own.items() if f.default is MISSING and n not in data]
        unknown = sorted(set(data) - set(own) - set(derived))
        if missing or unknown:
            said = ([f"missing {', '.join(missing)}"] if missing else []) + \
                   ([f"unknown {', '.join(unknown)}"] if unknown else [])
            raise PlanError(f"{where}: not a planned cell ({'; '.join(said)})", hint=again)
        values = {n: tuple(v) if isinstance(v, list) else v for n, v in data.items() if n in own}
        # to_json leaves torch_next_major to the pin, ``torch>=X,<N``; an exact build's pin
        # doesn't read it.
        pin = re.fullmatch(r"torch>=[\w.]+,<(\d+)", str(data.get("torch_pin", "")))
        if pin:
            values["torch_next_major"] = int(pin.group(1))
        cell = cls(**values)
        for name in derived:
            if name in data and data[name] != getattr(cell, name):
                raise PlanError(f"{where}: {name} is {data[name]!r}, but the cell's fields make "
                                f"{getattr(cell, name)!r}", hint=again)
        return cell


def cells_for(recipe: Recipe, table: Table) -> list[Cell]:
    """Every cell of one recipe, ordered by platform (the table's order, Linux x86_64 first),
    then CUDA, then torch (default first), then Python: one per distinct build (a recipe's
    ``abi`` decides which builds are the same, see the module docstring)."""
    return [c for c in _candidates(recipe, table) if not table.image_lacks(c.image, c.python)]


def left_out(recipe: Recipe, table: Table) -> list[tuple[str, str]]:
    """(cell id, why) of each cell the recipe and the table would plan but its builder image
    can't build: the image has no such Python (``tools.plan.table_images``)."""
    return [(c.id, why) for c in _candidates(recipe, table)
            if (why := table.image_lacks(c.image, c.python))]


def _candidates(recipe: Recipe, table: Table) -> list[Cell]:
    return [c for platform in table.platforms if recipe.builds_on(platform)
            for c in _platform_cells(recipe, table, platform)]


def _platform_cells(recipe: Recipe, table: Table, platform: str) -> list[Cell]:
    """The cells of one recipe on one platform: its (CUDA, torch series) pairs that the table
    has a torch build of there; the newest series left for a CUDA version is its default torch
    on that platform."""
    abi = recipe.abi
    next_major = max(version_key(series)[0] for series in table.torch) + 1
    out = []
    for target in recipe.cuda:
        on_platform = tuple(s for s in target.torch
                            if target.cuda in table.torch[s].cuda_on(platform))
        if not on_platform:
            continue
        tag = table.platforms[platform].wheel_tag
        released = tuple(s for s in on_platform if table.torch[s].candidate is None)
        # A stable-ABI build is made once per CUDA version, against its default torch series;
        # a release candidate is built on its own (see the module docstring).
        groups = [released] if abi.torch == "stable" and released else \
            [(s,) for s in released]
        groups += [(s,) for s in on_platform if s not in released]
        for i, served in enumerate(groups):
            series = served[0]
            t = table.torch[series]
            if abi.python == "cpython":
                # free-threaded Pythons (3.14t) are their own interpreter ABI: a cell each
                builds = [(py, (py,)) for py in (*recipe.pythons_for(series, table),
                                                 *recipe.free_threaded_for(series, table,
                                                                           platform))]
            else:
                pythons = tuple(recipe.served_pythons(served, table))
                # The build interpreter: the lowest the build's torch has (for abi3, the limited
                # API's floor or above), so that the wheel's python tag is the lowest it serves.
                usable = [py for py in recipe.pythons_for(series, table) if py in pythons]
                builds = [(usable[0], pythons)] if usable else []
            for py, pythons in builds:
                out.append(Cell(recipe.package, recipe.source.version, py, target.cuda, series,
                                t.release, i == 0 and t.candidate is None, t.cxx11_abi,
                                t.manylinux, table.image(target.cuda, platform),
                                recipe.archs_for(target.cuda, table, platform),
                                abi.python, abi.torch, abi.torch_from or "", tuple(served),
                                pythons, next_major,
                                candidate=t.candidate.git if t.candidate else "",
                                platform=platform, platform_tag=tag(t.manylinux)))
    return out


def uncollapsed_count(recipe: Recipe, table: Table, platform: str = DEFAULT_PLATFORM) -> int:
    """How many cells the recipe would plan on ``platform`` with one build per Python and per
    torch series (its ``abi`` ignored): what ``--format counts`` compares the collapsed plan
    with."""
    if not recipe.builds_on(platform):
        return 0
    return sum(len(recipe.pythons_for(series, table))
               + len(recipe.free_threaded_for(series, table, platform)) for target in recipe.cuda
               for series in target.torch if target.cuda in table.torch[series].cuda_on(platform))


def counts(recipes: list[Recipe], table: Table) -> list[dict]:
    """Per recipe and platform it has cells on: its ABI kinds, the cells one build per Python
    and torch would need (before) and the distinct builds planned (after)."""
    rows = []
    for platform in table.platforms:
        for r in recipes:
            after = len(_platform_cells(r, table, platform)) if r.builds_on(platform) else 0
            if not after:
                continue
            kind = r.abi.python + (f">={r.abi.python_from}" if r.abi.python_from else "")
            kind += " + " + r.abi.torch + (f">={r.abi.torch_from}" if r.abi.torch_from else "")
            rows.append({"package": r.package, "platform": platform, "abi": kind,
                         "before": uncollapsed_count(r, table, platform), "after": after})
    return rows


def torch_index(cell: Cell, table: Table) -> str | None:
    """Where the cell's torch comes from: None for PyPI (whose torch is built with the table's
    ``pypi_cuda``), else PyTorch's own index for the cell's CUDA version; for a release
    candidate, the candidate index's folder of that CUDA version (it is on no other)."""
    entry = table.torch[cell.torch]
    if entry.candidate is not None:
        return entry.candidate.torch_index(cell.cuda)
    if entry.pypi_cuda_on(cell.platform) == cell.cuda:
        return None
    return torch_index_url(cell.cuda)


def plan(recipes: list[Recipe] | None = None, table: Table | None = None) -> list[Cell]:
    """All cells of all recipes (by default, every recipe under recipes/), each with the cells
    it needs (``link_needs``)."""
    table = table or load_table()
    recipes = load_all(table=table) if recipes is None else recipes
    return link_needs([c for r in recipes for c in cells_for(r, table)], recipes)


def _dependency_cycle(recipes: list[Recipe]) -> list[str] | None:
    """A cycle of ``depends`` among ``recipes`` (its packages, the first repeated at the end),
    or None."""
    graph = {r.package: [d.package for d in r.depends] for r in recipes}
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as exc:
        return list(exc.args[1])
    return None


def link_needs(cells: list[Cell], recipes: list[Recipe]) -> list[Cell]:
    """``cells`` with ``needs``/``needs_dist`` filled from their recipes' ``depends``: for each
    dependency, its cell of the same CUDA version whose build serves every Python and torch
    series this cell serves. PlanError (naming the recipe file, the entry and the fix) for a
    dependency that is no recipe, one with no such cell, or a cycle."""
    by_package = {r.package: r for r in recipes}
    cycle = _dependency_cycle(recipes)
    if cycle:
        first = by_package[cycle[0]]
        raise PlanError(f"{first.path}: depends: the recipes depend on each other in a cycle "
                        f"({' -> '.join(cycle)}), so none of them could be built first",
                        hint="remove one of those depends entries")
    out = []
    for cell in cells:
        recipe = by_package[cell.package]
        ids, dists = [], []
        for i, dep in enumerate(recipe.depends):
            where = f"{recipe.path}: depends[{i}].package"
            other = by_package.get(dep.package)
            if other is None:
                raise PlanError(f"{where}: there is no recipe {dep.package!r} "
                                f"(recipes/{dep.package}/recipe.yaml)",
                                hint="add that recipe in the same change, or correct the name")
            pythons = set(cell.serves_python or (cell.python,))
            torches = set(cell.serves_torch or (cell.torch,))
            match = [d for d in cells if d.package == dep.package and d.cuda == cell.cuda
                     and d.platform == cell.platform
                     and torches <= set(d.serves_torch or (d.torch,))
                     and pythons <= set(d.serves_python or (d.python,))]
            if not match:
                raise PlanError(
                    f"{where}: {dep.package} has no build serving {cell.id} (CUDA {cell.cuda}, "
                    f"torch {', '.join(sorted(torches))}, Python {', '.join(sorted(pythons))}, "
                    f"{cell.platform}),"
                    f" whose wheel needs {dep.package}'s",
                    hint=f"add that CUDA version, torch series and Python to {other.path}, or "
                         f"narrow {recipe.path}'s to what {dep.package} builds")
            ids.append(match[0].id)
            dists.append(other.source.pypi)
        out.append(replace(cell, needs=tuple(ids), needs_dist=tuple(dists)) if ids else cell)
    return out


def select(cells: list[Cell], *, packages=None, pythons=None, cudas=None, torches=None,
           ids=None, default_torch_only: bool = False, platforms=None) -> list[Cell]:
    """Cells matching every given filter (a filter left as None matches everything);
    ``default_torch_only`` keeps only the cells of each CUDA version's default torch."""
    # A collapsed cell matches every Python and torch series its one build serves.
    def keep(c: Cell) -> bool:
        return ((not packages or c.package in packages)
                and (not pythons or bool(set(c.serves_python or (c.python,)) & set(pythons)))
                and (not cudas or c.cuda in cudas or cuda_nodot(c.cuda) in cudas)
                and (not torches or bool(set(c.serves_torch or (c.torch,)) & set(torches)))
                and (not ids or c.id in ids)
                and (not platforms or c.platform in platforms)
                and (not default_torch_only or c.default_torch))
    return [c for c in cells if keep(c)]


def find_cell(cell_id: str, cells: list[Cell] | None = None) -> Cell:
    """The cell with this id, or a PlanError listing the near misses."""
    cells = plan() if cells is None else cells
    for c in cells:
        if c.id == cell_id:
            return c
    package = cell_id.split("-", 1)[0]
    near = [c.id for c in cells if c.package == package][:12]
    hint = f"cells of {package}: {', '.join(near)}" if near else \
        f"known packages: {', '.join(sorted({c.package for c in cells}))}"
    raise PlanError(f"no cell {cell_id!r} in the plan", hint=hint)


def changed_packages(paths: list[str], known: set[str]) -> set[str]:
    """Packages whose recipe a list of changed repository paths touches.

    A change to the shared table touches every recipe.
    """
    rel_table = TABLE_PATH.relative_to(ROOT).as_posix()
    rel_recipes = RECIPES_DIR.relative_to(ROOT).as_posix()
    out: set[str] = set()
    for path in paths:
        path = path.strip()
        if path == rel_table:
            return set(known)
        parts = path.split("/")
        if len(parts) >= 3 and parts[0] == rel_recipes and parts[1] in known:
            out.add(parts[1])
    return out


def git_changed_files(ref: str, repo: Path = ROOT) -> list[str]:
    """Files changed between the merge base of ``ref`` and HEAD, plus uncommitted changes."""
    def git(*args: str) -> list[str]:
        proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
        if proc.returncode != 0:
            raise PlanError(f"git {' '.join(args)} failed: {proc.stderr.strip()}",
                            hint=f"is {ref!r} a ref this clone has? (fetch it first)")
        return [line for line in proc.stdout.splitlines() if line]
    return git("diff", "--name-only", f"{ref}...HEAD") + git("diff", "--name-only", "HEAD")


def changed_only(packages: list[str] | None, paths: list[str], known: set[str]) -> list[str]:
    """The packages to plan when only changed recipes count: those whose recipe ``paths``
    touch (``changed_packages``), narrowed to ``packages`` when any are given; sorted."""
    touched = changed_packages(paths, known)
    return sorted(touched & set(packages)) if packages else sorted(touched)


def require_known_values(cells: list[Cell], *, pythons: list[str] | None = None,
                         cudas: list[str] | None = None, torches: list[str] | None = None) -> None:
    """PlanError naming each filter value no cell of the plan has (``--cuda 12.7``), with the
    values it has: a filter that matches nothing anywhere is a typo, not a wish for no cells.
    A CUDA version may be written without its dot (``129``), as :func:`select` takes it."""
    nodot = {cuda_nodot(c.cuda): c.cuda for c in cells}
    checks = (
        ("Python version(s)", {p for c in cells for p in (c.serves_python or (c.python,))},
         pythons or ()),
        ("CUDA version(s)", {c.cuda for c in cells}, [nodot.get(v, v) for v in cudas or ()]),
        ("torch series", {t for c in cells for t in (c.serves_torch or (c.torch,))},
         torches or ()),
    )
    for (what, have, wanted), given in zip(checks, (pythons, cudas, torches)):
        unknown = sorted({g for g, w in zip(given or (), wanted) if w not in have})
        if unknown:
            raise PlanError(f"unknown {what}: {', '.join(unknown)}: no cell of the plan has it",
                            hint=f"the plan has: {', '.join(sorted(have, key=_order))}")


def _order(text: str) -> tuple:
    """Sort key of a version that may not be one (``3.12`` before ``3.13t``)."""
    return tuple((0, int(x), "") if x.isdigit() else (1, 0, x) for x in text.split("."))


def require_known(packages: list[str] | None, cells: list[Cell]) -> None:
    """PlanError naming each of ``packages`` that no cell belongs to, with the known ones."""
    known = {c.package for c in cells}
    unknown = set(packages or ()) - known
    if unknown:
        raise PlanError(f"unknown package(s): {', '.join(sorted(unknown))}",
                        hint=f"known: {', '.join(sorted(known))}")
