"""``python -m tools.shard``: a compile group's kernel shards and its unit list.

``python -m tools.shard run GROUP --shard K/N [--archs 90]`` compiles shard K of N of the group
into ``<cache>/<group>-shard<K>`` (``tools.sharding.shard_build``); ``python -m tools.shard units CELL
[--write]`` reads the cell's build's translation units and prints (or writes) the recipe's
``units.yaml`` (``tools.sharding.unitlist``). The command line only.
"""

import argparse
import signal
import sys
from dataclasses import asdict
from pathlib import Path

from tools import RECIPES_DIR, ROOT
from tools.builder.orchestrate import resolve_archs
from tools.builder.planned import Planned
from tools.core.cliopts import option
from tools.core.errors import cli
from tools.plan.groups import UNITS_FILE, find_group
from tools.plan.job import Inputs
from tools.plan.table import TABLE_PATH
from tools.sharding import local_release, shard_build, unitlist

DEFAULT_WORK = ROOT / "build-cells"
DEFAULT_CACHE = ROOT / "build-cells" / "shard-caches"


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--sdist", type=Path, help="use this sdist file instead of downloading")
    ap.add_argument("--sdist-dir", type=Path, help="take the sdist from this directory")
    ap.add_argument("--wheelhouse", type=Path, help="wheels (torch, build deps) to install from")
    ap.add_argument("--offline", action="store_true", help="install only from --wheelhouse")
    ap.add_argument("--torch-index", help="index URL for the cell's torch build")
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK, help="work directories")
    ap.add_argument("--recipes", type=Path, default=RECIPES_DIR, help="recipes directory")
    ap.add_argument("--table", type=Path, default=TABLE_PATH, help="compatibility table")


def _backend(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--backend", choices=["host", "container"], default="host",
                    help="host: this machine's toolchain; container: the cell's image, as CI "
                         "(the shards' and the cells' command lines must be the same)")
    ap.add_argument("--engine", choices=["docker", "podman"], help="container engine")
    ap.add_argument("--image", help="container backend: this image instead of the table's")


def _shard_arg(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N (e.g. 2/3)") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"{text!r}: K must be from 1 to N")
    return k, n


@cli
def main(argv: list[str] | None = None) -> int:
    """Run a shard, or read a recipe's units (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m tools.shard", description="A compile group's kernel shards: run one, run a "
                                 "group's release here, or list a cell's units.")
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="compile one kernel shard of a compile group")
    run.add_argument("group", help="group id, e.g. flash_attn-cu130 (a cell id without its "
                                   "Python part)")
    run.add_argument("--shard", type=_shard_arg, required=True, metavar="K/N",
                     help="which shard: K of N, e.g. 2/3")
    run.add_argument("--archs", help="override the arch list for a local build: 90 or 80,90")
    run.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                     help="where shard caches go (default %(default)s)")
    _backend(run)
    _common(run)
    rel = sub.add_parser("release", help="run a group's shards, then its cells, here")
    rel.add_argument("group", help="group id, e.g. flash_attn-cu130")
    rel.add_argument("--shards", type=int, required=True, metavar="N",
                     help="how many shards (CI takes the number from the plan)")
    rel.add_argument("--python", help="only these Pythons' cells, comma-separated")
    rel.add_argument("--archs", help="override the arch list for a local build: 90 or 80,90")
    rel.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                     help="where shard caches go (default %(default)s)")
    option(rel, "--wheels", "--out", type=Path, default=ROOT / "wheelhouse", metavar="DIR",
           help="where the cells' wheels go (default %(default)s)")
    _backend(rel)
    _common(rel)
    units = sub.add_parser("units", help=f"read a cell's build's units ({UNITS_FILE})")
    units.add_argument("cell", help="a cell id of the recipe")
    units.add_argument("--write", action="store_true",
                       help=f"write recipes/<package>/{UNITS_FILE} instead of printing it")
    _common(units)
    args = ap.parse_args(argv)
    if args.offline and not args.wheelhouse:
        ap.error("--offline needs --wheelhouse")
    # A terminated shard unwinds (and so stops the compilers it started).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    planned = Planned.make(args.recipes, args.table)
    inputs = Inputs(sdist=args.sdist, sdist_dir=args.sdist_dir, wheelhouse=args.wheelhouse,
                    offline=args.offline, torch_index=args.torch_index)
    common = asdict(inputs)
    if args.command == "units":
        cell = planned.cell(args.cell)
        recipe = planned.recipe(cell)
        found, torch = unitlist.read_build_units(planned.job(cell), args.work / cell.id / "units",
                                                 inputs)
        text = unitlist.render_units(cell, recipe, found, torch)
        if args.write:
            (recipe.folder / UNITS_FILE).write_text(text)
            print(recipe.folder / UNITS_FILE)
        else:
            print(text, end="")
        return 0
    group = find_group(args.group, list(planned.cells), list(planned.recipes.values()))
    if args.command == "release":
        pythons = set(args.python.split(",")) if args.python else None
        cells = [c for c in group.cells if pythons is None or planned.cell(c).python in pythons]
        passed = [f"--{k.replace('_', '-')}={v}" for k, v in common.items()
                  if v not in (None, False) and k != "offline"]
        passed += ["--offline"] if args.offline else []
        passed += [f"--recipes={args.recipes}", f"--table={args.table}"]
        passed += [f"--{k}={v}" for k, v in (("engine", args.engine), ("image", args.image)) if v]
        jobs = local_release.release_jobs(group, args.shards, cells, common=passed, cache=args.cache,
                                    work=args.work, out=args.wheels, archs=args.archs,
                                    backend=args.backend)
        results = local_release.run_release(jobs, args.work / "release-logs" / group.id)
        for r in results:
            print(f"{r.kind:5}  {r.id:40}  {'ok' if r.status == 0 else f'exit {r.status}':8}  "
                  f"{r.seconds / 60:6.1f} min")
        return 0 if all(r.status == 0 for r in results if r.kind == "cell") else 8
    cell = planned.cell(group.cells[0])
    archs = resolve_archs(cell, args.archs, planned.table)
    k, n = args.shard
    target = shard_build.ShardTarget(group, k, n, planned.job(cell), archs)
    if args.backend == "container":
        record = shard_build.run_container_shard(
            target, work_root=args.work, cache_root=args.cache, engine=args.engine,
            image=args.image, inputs=inputs)
        print(args.cache / record.shard)
        return 0
    report = shard_build.run_shard(target, work_root=args.work, cache_root=args.cache,
                                   inputs=inputs)
    print(args.cache / report.shard)
    return 0


if __name__ == "__main__":
    sys.exit(main())
