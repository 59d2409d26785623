"""What the compiler cache saves a second Python. Not a test: run it by hand and read the ratio.

    python -m benchmarks.bench_ccache [--package causal_conv1d] [--pythons 3.11,3.12] [--cuda 13.0]
                                      [--archs 90] [--workdir /tmp/bench-ccache] [--json out.json]

(from the repository root.) In one invocation it builds the same package, CUDA, torch and archs
for each Python in turn with the host backend (``python -m tools.build CELL --backend host``),
every build through the compiler cache (``tools.pipeline.ccache``), starting from an empty cache directory
of its own, so the first build is cold and each later one finds what the ones before it stored.
Each build is the whole pipeline (fresh venv, compile, repair, ABI and arch checks, import test);
the number compared is the compile step's wall time from each build report, beside the cache's
hits and misses for that build. ``--baseline`` also builds the last Python again with
``--no-cache``: the same compile without any cache, for comparison with the cold first build.

The target: the second Python's compile takes at most 15% of the first's. What cannot hit is the
binding unit (it includes ``Python.h``), the link and the build's fixed costs; the report prints
those lines too. ``MAX_JOBS``/``NVCC_THREADS`` are the pipeline's own sizing for this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tools import ROOT

TARGET = 0.15


def cell_id(package: str, python: str, cuda: str) -> str:
    """The cell id of the CUDA version's default torch (``tools.core.variant.cell_id``'s form)."""
    return f"{package}-{python}-cu{cuda.replace('.', '')}"


def build(cell: str, *, archs: str, work: Path, out: Path, cache_dir: Path, no_cache: bool,
          log: Path) -> dict[str, Any]:
    """One host build of ``cell``; returns its report with the wall time of the whole command."""
    argv = [sys.executable, "-m", "tools.build", cell, "--backend", "host", "--archs", archs,
            "--work", str(work), "--out", str(out)]
    if no_cache:
        argv.append("--no-cache")
    env = {**os.environ, "CUWHEELS_CCACHE_DIR": str(cache_dir)}
    start = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT,
                              timeout=3 * 3600)
    wall = time.monotonic() - start
    report_path = work / cell / "report.json"
    if not report_path.exists():
        raise SystemExit(f"{cell}: no report ({' '.join(argv)} exited {proc.returncode}); "
                         f"log: {log}")
    report = json.loads(report_path.read_text())
    if proc.returncode != 0 or report.get("verdict") != "passed":
        raise SystemExit(f"{cell}: the build failed (exit {proc.returncode}); log: {log}")
    report["wall"] = round(wall, 1)
    return report


def compile_row(label: str, report: dict[str, Any]) -> dict[str, Any]:
    """The numbers of one build: compile wall time, cache hits and misses, whole build."""
    step = next(s for s in report["steps"] if s["name"] == "compile")
    cache = step["detail"].get("cache", {})
    return {"build": label, "compile_s": step["seconds"], "hits": cache.get("hits"),
            "direct_hits": cache.get("direct_hits"),
            "preprocessed_hits": cache.get("preprocessed_hits"), "misses": cache.get("misses"),
            "build_s": report["seconds"], "wheel": Path(report["wheel"]).name,
            "max_jobs": step["detail"]["env"].get("MAX_JOBS")}


def ninja_times(work: Path, cell: str) -> list[tuple[str, float]]:
    """Each compiled unit's wall time from ninja's log in the cell's build tree."""
    rows = []
    for log in sorted((work / cell / "src").glob("*/build/temp.*/.ninja_log")):
        for line in log.read_text().splitlines()[1:]:
            parts = line.split("\t")
            if len(parts) >= 4:
                rows.append((Path(parts[3]).name, (int(parts[1]) - int(parts[0])) / 1000))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the builds and print the table and the ratio."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--package", default="causal_conv1d")
    ap.add_argument("--pythons", default="3.11,3.12", help="built in this order")
    ap.add_argument("--cuda", default="13.0")
    ap.add_argument("--archs", default="90")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench-ccache"))
    ap.add_argument("--baseline", action="store_true",
                    help="also build the last Python with --no-cache")
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args(argv)
    pythons = [p.strip() for p in args.pythons.split(",") if p.strip()]
    if len(pythons) < 2:
        ap.error("--pythons needs at least two versions")
    if args.workdir.exists():
        shutil.rmtree(args.workdir)
    args.workdir.mkdir(parents=True)
    cache_dir, out = args.workdir / "ccache", args.workdir / "wheelhouse"
    rows, units = [], {}
    plan = [(p, False) for p in pythons] + ([(pythons[-1], True)] if args.baseline else [])
    for i, (python, no_cache) in enumerate(plan):
        cell = cell_id(args.package, python, args.cuda)
        label = f"cp{python.replace('.', '')}" + (" --no-cache" if no_cache else "")
        work = args.workdir / f"work{i}"
        print(f"building {cell} ({label}) ...", file=sys.stderr, flush=True)
        report = build(cell, archs=args.archs, work=work, out=out / str(i), cache_dir=cache_dir,
                       no_cache=no_cache, log=args.workdir / f"build{i}.log")
        rows.append(compile_row(label, report))
        units[label] = ninja_times(work, cell)
    first, second = rows[0]["compile_s"], rows[1]["compile_s"]
    ratio = second / first
    result = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}",
        "package": args.package, "cuda": args.cuda, "archs": args.archs, "builds": rows,
        "units": units, "ratio": round(ratio, 3), "target": TARGET,
    }
    print(f"\n{args.package}, CUDA {args.cuda}, --archs {args.archs}, one cache, cold at start")
    print(f"{'build':<18} {'compile s':>9} {'hits':>5} {'misses':>6} {'build s':>8}  max_jobs")
    for r in rows:
        print(f"{r['build']:<18} {r['compile_s']:>9.1f} {r['hits']!s:>5} {r['misses']!s:>6} "
              f"{r['build_s']:>8.1f}  {r['max_jobs']}")
    for label, times in units.items():
        print(f"  {label}: " + ", ".join(f"{name} {sec:.1f}s" for name, sec in times))
    verdict = "meets" if ratio <= TARGET else "misses"
    print(f"\n{rows[1]['build']} compile / {rows[0]['build']} compile = {ratio:.1%} "
          f"({verdict} the {TARGET:.0%} target)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
