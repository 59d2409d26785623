"""The build matrix: recipes x table -> cells, one id per cell.

A cell id is ``<package>-<python>-cu<cuda-nodot>`` for a CUDA version's default torch (the first
the recipe lists) and ``<package>-<python>-cu<cuda-nodot>-torch<X.Y>`` for the others. The same id
names the nox session (``build-<id>``), the CI job and the build report.

``python -m tools.matrix`` prints the planned cells as JSON (``--format github`` gives a GitHub
Actions ``matrix`` object), filtered by package, Python, CUDA, torch, or by the recipes changed
since a git ref.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from . import RECIPES_DIR, ROOT
from .errors import PlanError, cli
from .recipe import Recipe, load_all
from .table import TABLE_PATH, Table, load_table
from .variant import cell_id, cuda_nodot, format_label, torch_index_url

#: The one machine architecture every cell targets (torch's CUDA wheels are x86_64).
ARCH = "x86_64"


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

    @property
    def id(self) -> str:
        """``flash_attn-3.12-cu129`` (default torch) or ``flash_attn-3.12-cu129-torch2.8``."""
        return cell_id(self.package, self.python, self.cuda,
                       None if self.default_torch else self.torch)

    @property
    def platform_tag(self) -> str:
        """The wheel platform this cell targets: the table's manylinux baseline of its torch
        (``manylinux_2_28_x86_64``), what the container backend repairs to."""
        return f"manylinux_{self.manylinux}_{ARCH}"

    @property
    def torch_requirement(self) -> str:
        """The exact torch the cell builds against (``torch==2.8.0``)."""
        return f"torch=={self.torch_version}"

    @property
    def label(self) -> str:
        """The local version label of this cell's wheel (``cu129.torch2.8``)."""
        return format_label(self.cuda, self.torch, self.cxx11_abi)

    def to_json(self) -> dict:
        """A JSON-ready dict with the id first (the GitHub matrix uses it as job name)."""
        data = asdict(self)
        data["archs"] = list(self.archs)
        return {"id": self.id, **data, "label": self.label}


def cells_for(recipe: Recipe, table: Table) -> list[Cell]:
    """Every cell of one recipe, ordered by CUDA, then torch (default first), then Python."""
    out = []
    for target in recipe.cuda:
        cuda = table.cuda[target.cuda]
        for i, series in enumerate(target.torch):
            t = table.torch[series]
            for py in recipe.pythons_for(series, table):
                out.append(Cell(recipe.package, recipe.source.version, py, target.cuda, series,
                                t.release, i == 0, t.cxx11_abi, t.manylinux, cuda.image,
                                recipe.archs_for(target.cuda, table)))
    return out


def torch_index(cell: Cell, table: Table) -> str | None:
    """Where the cell's torch comes from: None for PyPI (whose torch is built with the table's
    ``pypi_cuda``), else PyTorch's own index for the cell's CUDA version."""
    if table.torch[cell.torch].pypi_cuda == cell.cuda:
        return None
    return torch_index_url(cell.cuda)


def plan(recipes: list[Recipe] | None = None, table: Table | None = None) -> list[Cell]:
    """All cells of all recipes (by default, every recipe under recipes/)."""
    table = table or load_table()
    recipes = load_all(table=table) if recipes is None else recipes
    return [c for r in recipes for c in cells_for(r, table)]


def select(cells: list[Cell], *, packages=None, pythons=None, cudas=None, torches=None,
           ids=None) -> list[Cell]:
    """Cells matching every given filter (a filter left as None matches everything)."""
    def keep(c: Cell) -> bool:
        return ((not packages or c.package in packages)
                and (not pythons or c.python in pythons)
                and (not cudas or c.cuda in cudas or cuda_nodot(c.cuda) in cudas)
                and (not torches or c.torch in torches)
                and (not ids or c.id in ids))
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


def load_cell(cell_id: str, recipes_root: Path = RECIPES_DIR, table_path: Path = TABLE_PATH
              ) -> tuple[Cell, Recipe, Table]:
    """The cell with this id, its recipe and the table, loaded from ``recipes_root`` and
    ``table_path``: PlanError (near misses named) when no recipe plans that cell."""
    table = load_table(table_path)
    recipes = load_all(recipes_root, table)
    cell = find_cell(cell_id, plan(recipes, table))
    return cell, next(r for r in recipes if r.package == cell.package), table


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


def _csv(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


@cli
def main(argv: list[str] | None = None) -> int:
    """Print the planned cells as JSON."""
    ap = argparse.ArgumentParser(prog="python -m tools.matrix", description=__doc__.split("\n")[0])
    ap.add_argument("--package", help="comma-separated packages")
    ap.add_argument("--python", help="comma-separated Python versions (3.12)")
    ap.add_argument("--cuda", help="comma-separated CUDA versions (12.9 or 129)")
    ap.add_argument("--torch", help="comma-separated torch series (2.8)")
    ap.add_argument("--default-torch-only", action="store_true",
                    help="only each CUDA version's default torch")
    changed = ap.add_mutually_exclusive_group()
    changed.add_argument("--changed-since", metavar="REF",
                         help="only recipes changed since the merge base with REF")
    changed.add_argument("--changed-files", metavar="FILE",
                         help="only recipes touched by the paths listed in FILE (- for stdin)")
    ap.add_argument("--cap", type=int, default=0,
                    help="at most this many cells (0: no cap); says so on stderr when capped")
    ap.add_argument("--format", choices=["json", "github", "ids"], default="json")
    ap.add_argument("--recipes", type=Path, default=RECIPES_DIR,
                    help="recipes directory (its parent is the git repository --changed-since "
                         "reads)")
    ap.add_argument("--table", type=Path, default=TABLE_PATH, help="compatibility table")
    args = ap.parse_args(argv)

    table = load_table(args.table)
    cells = plan(load_all(args.recipes, table), table)
    packages = _csv(args.package)
    if args.changed_since or args.changed_files:
        if args.changed_since:
            paths = git_changed_files(args.changed_since, args.recipes.resolve().parent)
        elif args.changed_files == "-":
            paths = sys.stdin.read().splitlines()
        else:
            paths = Path(args.changed_files).read_text().splitlines()
        touched = changed_packages(paths, {c.package for c in cells})
        packages = sorted(touched & set(packages)) if packages else sorted(touched)
        print(f"changed recipes: {', '.join(packages) or 'none'}", file=sys.stderr)
        if not packages:
            cells = []
    if packages is not None and packages:
        unknown = set(packages) - {c.package for c in cells}
        if unknown:
            raise PlanError(f"unknown package(s): {', '.join(sorted(unknown))}",
                            hint=f"known: {', '.join(sorted({c.package for c in cells}))}")
    selected = select(cells, packages=packages, pythons=_csv(args.python),
                      cudas=_csv(args.cuda), torches=_csv(args.torch))
    if args.default_torch_only:
        selected = [c for c in selected if c.default_torch]
    if args.cap and len(selected) > args.cap:
        print(f"capped: {len(selected)} cells planned, building the first {args.cap}; "
              "run the rest with a manual dispatch or narrower filters", file=sys.stderr)
        selected = selected[:args.cap]
    if args.format == "ids":
        print("\n".join(c.id for c in selected))
    elif args.format == "github":
        print(json.dumps({"include": [c.to_json() for c in selected]}, separators=(",", ":")))
    else:
        print(json.dumps([c.to_json() for c in selected], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
