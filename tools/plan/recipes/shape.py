"""A recipe's shape: ``recipe.schema.json`` beside this module, the JSON Schema (draft 2020-12)
every ``recipes/<package>/recipe.yaml`` names in its first line for editors
(``# yaml-language-server: $schema=...``) and that loading a recipe checks it against.

The schema holds the shape (keys, types, patterns, enums, ranges, list items), each property's
meaning (``description``) and its fix (``x-fix``); the rules across fields and files (an arch
the table's nvcc compiles, a torch series the table has, a patch file that exists) are the
code's, in ``model``, ``torch``, ``platforms``, ``env`` and ``blocks``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..jsonshape import check_shape
from ..schema import Problems

#: The one recipe schema: shipped inside the tools (the container stages them), published at
#: this path for editors.
RECIPE_SCHEMA_FILE = Path(__file__).with_name("recipe.schema.json")


def check_recipe_shape(p: Problems, data: Any) -> None:
    """Check a whole recipe's shape; every error into ``p``, every refused value into
    ``p.refused``."""
    check_shape(p, data, RECIPE_SCHEMA_FILE)


def check_block_shape(p: Problems, raw: Any, key: str) -> None:
    """Check one top-level block (``check``, ``cuda``, ``env``...) of a recipe, unless the whole
    recipe was checked already: a block parser called on its own is held to the same schema."""
    check_shape(p, raw, RECIPE_SCHEMA_FILE, key)
