"""What travels together through a build: the job, and where its inputs come from.

A cell never builds alone: its recipe says how, the table says with what (toolkit, torch,
images), and the three went hand in hand through every step's signature. :class:`BuildJob` is
that triple, made once where a command finds the cell. :class:`Inputs` is where a build's
source and wheels come from (an sdist or a folder of them, a wheelhouse, offline or not, the
index torch comes from); the host build, the probe, the shard and the unit list read the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tools import RECIPES_DIR
from .cells import Cell, find_cell, plan
from .recipes.model import Recipe, load_all
from .table import TABLE_PATH, Table, load_table


@dataclass(frozen=True)
class BuildJob:
    """One planned cell with the recipe it comes from and the table it was planned against."""

    cell: Cell
    recipe: Recipe
    table: Table

    @property
    def id(self) -> str:
        """The cell's id: the one name of this build everywhere (sessions, reports, wheels)."""
        return self.cell.id


@dataclass(frozen=True)
class Inputs:
    """Where a build's source and wheels come from."""

    #: The package's sdist, instead of downloading it from the registry.
    sdist: Path | None = None
    #: A folder of sdists (``<name>-<version>.tar.gz``), for a build whose cells need others.
    sdist_dir: Path | None = None
    #: A folder of wheels to install from first (torch, the build requirements).
    wheelhouse: Path | None = None
    #: Never reach a registry: everything comes from the sdist(s) and the wheelhouse.
    offline: bool = False
    #: The index the cell's torch comes from (default: the table's for its CUDA).
    torch_index: str | None = None
    #: A CUDA toolkit root to use instead of this machine's (the probe's stand-in for another
    #: CUDA version, ``tools.probing.toolkitstandin``: measuring only, never a build).
    toolkit: Path | None = None


def load_job(cell_id: str, recipes_root: Path = RECIPES_DIR, table_path: Path = TABLE_PATH
             ) -> BuildJob:
    """The job of the cell with this id, its recipe and the table loaded from ``recipes_root``
    and ``table_path``: PlanError (near misses named) when no recipe plans that cell."""
    table = load_table(table_path)
    recipes = load_all(recipes_root, table)
    cell = find_cell(cell_id, plan(recipes, table))
    return BuildJob(cell, next(r for r in recipes if r.package == cell.package), table)
