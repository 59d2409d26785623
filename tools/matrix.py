"""``python -m tools.matrix``: the build matrix: recipes x table -> cells, one id per cell, one cell per distinct build.

The command only: it parses the filters, plans (``tools.plan.cells``), prints a format of
``tools.plan.formats`` and says on stderr which recipes changed and when the list was capped.
The staged formats plan groups and shards for ``--runners`` and ``--kernel-store``."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from tools import RECIPES_DIR, ROOT
from tools.core.errors import PlanError, cli
from tools.plan.formats import FORMATS, STAGED, render
from tools.plan.cells import (Cell, changed_only, git_changed_files, plan, require_known,
                              require_known_values, select)
from tools.plan.recipes.model import load_all
from tools.plan.limits import LIMITS_PATH
from tools.plan.runners import load_runners
from tools.plan.stored import stored_keys
from tools.plan.table import TABLE_PATH, Table, load_table

#: The formats that schedule the backlog (``tools.releasing.schedule``).
SCHEDULE_FORMATS = ("schedule", "schedule-md")


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.matrix``."""
    ap = argparse.ArgumentParser(prog="python -m tools.matrix",
                                 description="Plan the build matrix: recipes x table -> cells, "
                                             "printed in the format asked for.")
    ap.add_argument("--package", help="comma-separated packages")
    ap.add_argument("--python", help="comma-separated Python versions (3.12)")
    ap.add_argument("--cuda", help="comma-separated CUDA versions (12.9 or 129)")
    ap.add_argument("--torch", help="comma-separated torch series (2.8)")
    ap.add_argument("--platform", help="comma-separated wheel platforms (linux_aarch64, win_amd64; "
                                       "recipes/table.yaml platforms:)")
    ap.add_argument("--default-torch-only", action="store_true",
                    help="only each CUDA version's default torch")
    changed = ap.add_mutually_exclusive_group()
    changed.add_argument("--changed-since", metavar="REF",
                         help="only recipes changed since the merge base with REF")
    changed.add_argument("--changed-files", metavar="FILE",
                         help="only recipes touched by the paths listed in FILE (- for stdin)")
    ap.add_argument("--cap", type=int, default=0,
                    help="at most this many cells (0: no cap); says so on stderr when capped")
    ap.add_argument("--format", choices=FORMATS + SCHEDULE_FORMATS, default="json",
                    help="schedule: the runs that drain the backlog (the selected cells without "
                         "a published wheel), as JSON, each within every limit of --limits; "
                         "schedule-md: the same for people; "
                         "github: every stage's matrices (shards, cells1, cells2); groups: the "
                         "compile group ids; counts: per recipe, cells before and after "
                         "collapsing by ABI kind, groups, shards and estimated runner-hours "
                         "(counts-md: the same as a Markdown table)")
    ap.add_argument("--runners", type=Path, metavar="FILE",
                    help="the runners the release is planned for (default: runners.yaml in "
                         "--recipes; in CI the repository variable CUWHEELS_RUNNERS)")
    ap.add_argument("--recipes", type=Path, default=RECIPES_DIR,
                    help="recipes directory (its parent is the git repository --changed-since "
                         "reads)")
    ap.add_argument("--table", type=Path, default=TABLE_PATH, help="compatibility table")
    ap.add_argument("--limits", type=Path, metavar="FILE", default=LIMITS_PATH,
                    help="schedule formats: GitHub's limits and the drain policy (default: "
                         "recipes/limits.yaml; in CI the repository variable CUWHEELS_LIMITS)")
    ap.add_argument("--ledger", type=Path, metavar="FILE", default=ROOT / "index" / "ledger.json",
                    help="schedule formats: what is published (default: the committed "
                         "index/ledger.json; in CI the live site's)")
    ap.add_argument("--attempts", type=Path, metavar="FILE",
                    help="schedule formats: the failed tries per cell (the live site's "
                         "attempts.json; default: none)")
    ap.add_argument("--kernel-store", type=Path, metavar="FILE", help="the kernel store's "
                    "listing (tools.release kernels list): a group it covers gets no shards")
    return ap


def _csv(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def _platforms(text: str | None, table: Table) -> list[str] | None:
    """The --platform filter, each one checked against the table's platforms."""
    names = _csv(text)
    unknown = sorted(set(names or ()) - set(table.platforms))
    if unknown:
        raise PlanError(f"unknown platform(s): {', '.join(unknown)}",
                        hint=f"known: {', '.join(table.platforms)} (recipes/table.yaml platforms:)")
    return names


def _changed_paths(args: argparse.Namespace) -> list[str]:
    """The changed repository paths --changed-since or --changed-files names."""
    if args.changed_since:
        return git_changed_files(args.changed_since, args.recipes.resolve().parent)
    if args.changed_files == "-":
        return sys.stdin.read().splitlines()
    return Path(args.changed_files).read_text().splitlines()


def _cap(cells: list[Cell], cap: int) -> list[Cell]:
    """The first ``cap`` cells (all of them for 0), saying on stderr when some were left out."""
    if not cap or len(cells) <= cap:
        return cells
    print(f"capped: {len(cells)} cells planned, building the first {cap}; "
          "run the rest with a manual dispatch or narrower filters", file=sys.stderr)
    return cells[:cap]


@cli
def main(argv: list[str] | None = None) -> int:
    """Print the planned cells, filtered, in the chosen format."""
    args = parser().parse_args(argv)
    table = load_table(args.table)
    recipes = load_all(args.recipes, table)
    cells = plan(recipes, table)
    # Packages as people spell them (flash-attn, Flash_Attn) name the recipe folder (flash_attn).
    packages = [re.sub(r"[-_.]+", "_", p).lower() for p in _csv(args.package) or ()] or None
    if args.changed_since or args.changed_files:
        packages = changed_only(packages, _changed_paths(args), {c.package for c in cells})
        print(f"changed recipes: {', '.join(packages) or 'none'}", file=sys.stderr)
        cells = cells if packages else []
    require_known(packages, cells)
    require_known_values(cells, pythons=_csv(args.python), cudas=_csv(args.cuda),
                         torches=_csv(args.torch))
    selected = select(cells, packages=packages, pythons=_csv(args.python), cudas=_csv(args.cuda),
                      torches=_csv(args.torch), default_torch_only=args.default_torch_only,
                      platforms=_platforms(args.platform, table))
    if args.format in SCHEDULE_FORMATS:
        # Here, not at the top: the schedule reads the ledger (tools.sitegen, Jinja2), and the
        # noxfile lists sessions through this command in nox's env (PyYAML, jsonschema, packaging)
        from tools.releasing.schedule import as_markdown
        from tools.releasing.steps import Sources, schedule_of
        found = schedule_of(Sources(args.recipes, args.table, args.runners, args.limits),
                            _cap(selected, args.cap), cells, recipes, table,
                            ledger=args.ledger, attempts=args.attempts,
                            kernel_store=args.kernel_store)
        print(as_markdown(found) if args.format == "schedule-md"
              else json.dumps(found.to_json(), indent=1))
        return 0
    runners = load_runners(args.runners or args.recipes / "runners.yaml",
                           {r.package for r in recipes}) if args.format in STAGED else None
    print(render(args.format, _cap(selected, args.cap), recipes, table, runners,
                 stored_keys(args.kernel_store)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
