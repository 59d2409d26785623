"""One plan that travels: the cells a command planned, handed down instead of planned again.

A command plans once (:meth:`Planned.make`: the table, every recipe, their cells) or takes the
cells a caller planned already (:meth:`Planned.read`: ``python -m tools.matrix --format json``'s
output, which the nox build sessions hand on), and passes the plan down: the orchestrator takes
the cell and its recipe from it, and the cells it needs (``Cell.needs``) from the same plan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tools import RECIPES_DIR
from tools.core.errors import PlanError
from tools.plan.cells import Cell, find_cell, plan
from tools.plan.job import BuildJob
from tools.plan.recipes.model import Recipe, load_all, load_recipe
from tools.plan.table import TABLE_PATH, Table, load_table


@dataclass
class Planned:
    """The table, the planned cells, and the recipes they come from (each read once, when
    first asked for). ``source`` names where the cells came from, for errors."""

    table: Table
    cells: tuple[Cell, ...]
    recipes_root: Path
    source: str
    recipes: dict[str, Recipe] = field(default_factory=dict)

    @classmethod
    def make(cls, recipes_root: Path = RECIPES_DIR, table_path: Path = TABLE_PATH) -> Planned:
        """Plan every recipe under ``recipes_root`` against the table at ``table_path``."""
        table = load_table(table_path)
        recipes = load_all(recipes_root, table)
        return cls(table, tuple(plan(recipes, table)), recipes_root, str(recipes_root),
                   {r.package: r for r in recipes})

    @classmethod
    def read(cls, path: Path, recipes_root: Path = RECIPES_DIR,
             table_path: Path = TABLE_PATH) -> Planned:
        """The cells planned already, as ``python -m tools.matrix --format json`` writes them
        to ``path``; their recipes are read from ``recipes_root`` when asked for. PlanError
        naming the file when it is not such a list."""
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise PlanError(f"{path}: no plan there",
                            hint=f"write one: python -m tools.matrix --format json > {path}"
                            ) from None
        except json.JSONDecodeError as exc:
            raise PlanError(f"{path}: not JSON ({exc})",
                            hint=f"write it again: python -m tools.matrix --format json > "
                                 f"{path}") from None
        if not isinstance(data, list):
            raise PlanError(f"{path}: a plan is a JSON list of cells, not "
                            f"{type(data).__name__}",
                            hint="python -m tools.matrix --format json writes one (not "
                                 "--format github)")
        cells = tuple(Cell.from_json(item, where=f"{path}: cell {i}")
                      for i, item in enumerate(data))
        return cls(load_table(table_path), cells, recipes_root, str(path))

    def cell(self, cell_id: str) -> Cell:
        """The planned cell with this id; PlanError naming the near misses."""
        return find_cell(cell_id, list(self.cells))

    def recipe(self, cell: Cell) -> Recipe:
        """The recipe ``cell`` was planned from; PlanError when the recipe now says another
        version than the plan (a plan older than the recipe)."""
        if cell.package not in self.recipes:
            self.recipes[cell.package] = load_recipe(self.recipes_root / cell.package,
                                                     self.table)
        recipe = self.recipes[cell.package]
        if recipe.source.version != cell.version:
            raise PlanError(f"{self.source}: cell {cell.id} is {cell.package} {cell.version}, "
                            f"but {recipe.path} now says {recipe.source.version}",
                            hint="plan again from the recipes as they are "
                                 "(python -m tools.matrix --format json)")
        return recipe

    def job(self, cell: Cell) -> BuildJob:
        """``cell`` with its recipe (:meth:`recipe`) and this plan's table."""
        return BuildJob(cell, self.recipe(cell), self.table)

    def needed(self, cell: Cell) -> list[Cell]:
        """The cells ``cell`` needs (``Cell.needs``), in order, from this plan."""
        return [self.cell(cell_id) for cell_id in cell.needs]
