"""``python -m tools.recipe``: recipes: ``recipes/<package>/recipe.yaml`` plus ``patches/``, loaded strictly.

The command only: it loads each recipe with ``tools.plan.recipes.model`` against the table, prints one
line per valid recipe and every problem of the invalid ones, and exits non-zero when any is.
``python -m tools.recipe new <pypi-name>`` writes a new recipe's template instead
(``tools.upstream.newrecipe``), and ``python -m tools.recipe archive PACKAGE --out DIR`` packs a
git source's archive from its commit and prints the tar's sha256 (``tools.pipeline.gitsource``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools import RECIPES_DIR
from tools.core.errors import RecipeError, cli
from tools.plan.groups import stale_spans
from tools.plan.recipes.model import check_distinct, load_recipe, recipe_folders
from tools.plan.recipes.todo import todo_marks
from tools.plan.table import load_table
from tools.pipeline.gitsource import pack, tar_sha256
from tools.upstream.newrecipe import TemplateRelease, lookup, write_template
from tools.upstream.registry import PYPI_JSON, Registry


def new(argv: list[str]) -> int:
    """``python -m tools.recipe new <pypi-name>``: write a new recipe's template, to finish by hand."""
    ap = argparse.ArgumentParser(prog="python -m tools.recipe new",
                                 description="Write a new recipe's template from the registry, "
                                             "to finish by hand.")
    ap.add_argument("pypi", help="the project's name on PyPI, e.g. causal-conv1d")
    ap.add_argument("--version", help="the release to build: skips asking the registry (the "
                                      "sdist's url and sha256 are then left as TODO)")
    ap.add_argument("--recipes", type=Path, default=RECIPES_DIR,
                    help="the recipes folder the template's folder goes into (default: recipes/)")
    ap.add_argument("--registry", default=PYPI_JSON,
                    help="the registry's JSON API (default: %(default)s)")
    args = ap.parse_args(argv)
    release = (TemplateRelease(args.pypi, args.version) if args.version
               else lookup(args.pypi, Registry(pypi=args.registry)))
    path = write_template(args.recipes, release, load_table())
    import yaml  # read back what was written: the markers left are the contributor's list
    left = todo_marks(yaml.safe_load(path.read_text(encoding="utf-8")))
    print(f"wrote {path} ({release.pypi} {release.version}); {len(left)} TODO to replace:")
    for where, text in left:
        print(f"  - {where}: {text}")
    print(f"then: python -m tools.recipe {path.parent}   (refuses the recipe while a TODO is left)")
    return 0


def archive(argv: list[str]) -> int:
    """``python -m tools.recipe archive PACKAGE --out DIR``: pack a git source's archive."""
    ap = argparse.ArgumentParser(prog="python -m tools.recipe archive",
                                 description="Pack a git-source recipe's archive from its commit "
                                             "(what the source step builds from) and print the "
                                             "tar's sha256, the recipe's source.sha256. Where "
                                             "the repository can't be reached, point git at a "
                                             "copy: git config url.<copy>.insteadOf <repository>.")
    ap.add_argument("package", help="the recipe folder's name, e.g. flash_attn_3")
    ap.add_argument("--out", type=Path, required=True,
                    help="the folder the archive goes into (for --sdist-dir on a machine "
                         "without the network)")
    ap.add_argument("--recipes", type=Path, default=RECIPES_DIR, help="the recipes folder")
    args = ap.parse_args(argv)
    recipe = load_recipe(args.recipes / args.package, load_table())
    if recipe.source.git is None:
        raise RecipeError(f"{recipe.path}: source is the registry's sdist ({recipe.source.url})",
                          hint="archive packs git sources only; download a registry sdist")
    path = pack(recipe, args.out)
    digest = tar_sha256(path)
    same = "the recipe's" if digest == recipe.source.sha256 else \
        f"NOT the recipe's {recipe.source.sha256}"
    print(f"{path}: tar sha256 {digest} ({same}), packed from {recipe.source.url}")
    return 0 if digest == recipe.source.sha256 else 1


@cli
def main(argv: list[str] | None = None) -> int:
    """``python -m tools.recipe [FOLDER...]``: validate recipes, report every problem
    (``python -m tools.recipe new <pypi-name>``: write a new recipe's template)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["new"]:
        return new(argv[1:])
    if argv[:1] == ["archive"]:
        return archive(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m tools.recipe",
                                 description="Validate the recipes (all, or the folders named) and "
                                             "report every problem; `new PYPI-NAME` writes a new "
                                             "recipe's template.")
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
