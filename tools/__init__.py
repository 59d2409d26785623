"""cuwheels: recipes, build pipeline and package index for CUDA PyTorch extension wheels.

One module per pipeline step; each has a thin ``main()`` run as ``python -m tools.<step>``.
"""

from __future__ import annotations

import os
from pathlib import Path


def find_root(start: Path | None = None) -> Path:
    """The repository the tools work on: the one holding ``recipes/table.yaml``.

    ``CUWHEELS_ROOT`` names it explicitly. Otherwise a source checkout of this package is its own
    repository (an editable install, or ``python -m tools.x`` run in the checkout), and an
    installed copy (``pip install .`` puts the package in site-packages, far from the recipes)
    works on the checkout it is run in: the working directory or the nearest parent holding the
    table. Where none holds it, the package's parent is returned and the first read of the table
    says the file is missing.
    """
    if env := os.environ.get("CUWHEELS_ROOT"):
        return Path(env).resolve()
    source = Path(__file__).resolve().parent.parent
    if (source / "recipes" / "table.yaml").is_file():
        return source
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "recipes" / "table.yaml").is_file():
            return candidate
    return source


#: The repository root (recipes/, pyproject.toml, index/ live directly under it).
ROOT = find_root()
RECIPES_DIR = ROOT / "recipes"
