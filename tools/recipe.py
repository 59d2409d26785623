"""``python -m tools.recipe``: recipes: ``recipes/<package>/recipe.yaml`` plus ``patches/``, loaded strictly.

The command only: it loads each recipe with ``tools.plan.recipes.model`` against the table, prints one
line per valid recipe and every problem of the invalid ones, and exits non-zero when any is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.core.errors import RecipeError, cli
from tools.plan.groups import stale_spans
from tools.plan.recipes.model import check_distinct, load_recipe, recipe_folders
from tools.plan.table import load_table


@cli
def main(argv: list[str] | None = None) -> int:
    """``python -m tools.recipe [FOLDER...]``: validate recipes, report every problem."""
    ap = argparse.ArgumentParser(prog="python -m tools.recipe", description="Validate the recipes (all, or the folders named) "
                                 "and report every problem.")
    ap.add_argument("folders", nargs="*", type=Path, help="recipe folders (default: all)")
    args = ap.parse_args(argv)
    table = load_table()
    folders = args.folders or recipe_folders()
    failed = 0
    loaded = []
    for folder in folders:
        try:
            r = load_recipe(folder, table)
        except RecipeError as exc:
            failed += 1
            print(exc, file=sys.stderr)
            continue
        loaded.append(r)
        print(f"ok  {r.package} {r.source.version}: CUDA {', '.join(t.cuda for t in r.cuda)}")
        for span in stale_spans(r):
            # not an error: the plan gives each of those series its own kernels meanwhile
            print(f"    note: units.yaml kernels.{span.cuda} was measured with another sdist or "
                  f"other patches, so torch {', '.join(span.torch)} compile their kernels "
                  f"apart until it is measured again: python -m tools.probe <a cell of CUDA "
                  f"{span.cuda}> --across-torch --write")
    clash = False
    try:
        check_distinct(loaded)
    except RecipeError as exc:
        clash = True
        print(exc, file=sys.stderr)
    if failed:
        print(f"{failed} of {len(folders)} recipe(s) invalid", file=sys.stderr)
    return RecipeError.exit_code if failed or clash else 0


if __name__ == "__main__":
    sys.exit(main())
