"""Do two torch series compile a kernel unit to the same object? Compile it in both and compare.

    python -m benchmarks.same_objects WORK_A WORK_B --units NAME[,NAME...] [--arch 90]
        [--control] [--keep DIR] [--json out.json]

(from the repository root.) ``WORK_A`` and ``WORK_B`` are two cells' work directories written
by ``python -m tools.probe CELL --across-torch`` (``<work>/<cell>/kernels``): each holds the
patched source, the venv with that cell's torch and the package's compile commands as its
ninja file lists them. For each unit (a file name or a path in the source tree) the unit's own
command line is run in each, with ``-c`` as the build has it, and the two objects compared.
``--arch 90`` keeps only that arch's ``-gencode`` in both command lines (the same edit to
both; a unit of four archs takes four times as long).

Both compiles run from one path, a link re-pointed from one work directory to the other, so
that the paths the compiler writes into an object (``__FILE__`` in an error message, the
include paths) are the same string, as the compiler cache's ``base_dir`` makes them in a real
build. What differs between any two nvcc runs, even of one input in one place, are the names
nvcc makes up per compile: its temporary file's (``tmpxft_<process id>_...``), which the host
compiler records as the source file name, and the ids of the unit's internal-linkage symbols
(``_INTERNAL_<hash>``, ``_GLOBAL__N__<hash>``, ``..._cu_<hash>_<number>``), derived from the
compile's path and process. The comparison reports the raw bytes, then the bytes with those
names masked; ``--control`` compiles the unit in ``WORK_A`` a second time, to show the same
names differing between two compiles of one input. (In a real build the compiler cache hands
the second cell the first one's object whole.) ``--keep DIR`` keeps the objects
(``0-<unit>.o`` from WORK_A, ``1-`` from WORK_B, ``2-`` the control).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.probing.compdb import read_units

#: The names nvcc makes up per compile: its temporary file's (with its process id), and the ids
#: it gives a unit's internal-linkage symbols (a hash of the compile's path and process).
_PER_COMPILE = (re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}"),
                re.compile(rb"(?<=_INTERNAL_)[0-9a-f]{8}"),
                re.compile(rb"(?<=GLOBAL__N__)[0-9a-f]{8}"),
                re.compile(rb"(?<=_cu_)[0-9a-f]{8}_[0-9]+"))


def masked(data: bytes) -> bytes:
    """``data`` with nvcc's per-compile names replaced by ``#``."""
    for pattern in _PER_COMPILE:
        data = pattern.sub(b"#", data)
    return data


def find_tree(work: Path) -> Path:
    """The extracted source tree under ``work/src`` (one directory)."""
    trees = [p for p in (work / "src").iterdir() if p.is_dir()]
    if len(trees) != 1:
        raise SystemExit(f"{work}/src: expected one source tree, found {len(trees)}")
    return trees[0]


def only_arch(argv: list[str], arch: str | None) -> list[str]:
    """``argv`` with every ``-gencode X`` pair but ``arch``'s dropped (``arch`` None: as is)."""
    if arch is None:
        return argv
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "-gencode" and i + 1 < len(argv):
            if argv[i + 1] == f"arch=compute_{arch},code=sm_{arch}":
                out += argv[i:i + 2]
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def compile_in(work: Path, unit_name: str, link: Path, out: Path, arch: str | None = None
               ) -> float:
    """Compile one unit of ``work`` through ``link`` (pointed at ``work``) into ``out``;
    the seconds it took."""
    tree = find_tree(work)
    units = [u for u in read_units(work / "commands", tree)
             if u.name == unit_name or Path(u.name).name == unit_name]
    if len(units) != 1:
        raise SystemExit(f"{work}: no single unit named {unit_name}")
    unit = units[0]
    if link.is_symlink():
        link.unlink()
    link.symlink_to(work.resolve())
    command = unit.command.replace(str(work.resolve()), str(link)).replace(str(work), str(link))
    directory = Path(str(unit.directory).replace(str(work.resolve()), str(link)))
    obj = Path(str(unit.output).replace(str(work.resolve()), str(link)))
    obj.parent.mkdir(parents=True, exist_ok=True)
    venv_bin = link / "venv" / "bin"
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    start = time.monotonic()
    proc = subprocess.run(only_arch(shlex.split(command), arch), cwd=directory, env=env, capture_output=True,
                          text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{unit.name} failed in {work}:\n{proc.stderr[-2000:]}")
    out.write_bytes(obj.read_bytes())
    return seconds


def differing(a: bytes, b: bytes) -> set[int]:
    """The offsets where two objects differ (every offset past the shorter one's end too)."""
    out = {i for i, (x, y) in enumerate(zip(a, b)) if x != y}
    return out | set(range(min(len(a), len(b)), max(len(a), len(b))))


def compare(a: bytes, b: bytes, control: bytes | None = None) -> dict:
    """Raw and masked comparison of two objects, and of ``a`` with ``control`` (``a``'s unit
    compiled again in ``a``'s place) when given."""
    row = {"size": [len(a), len(b)], "identical": a == b, "bytes_differing": len(differing(a, b)),
           "identical_with_nvcc_names_masked": masked(a) == masked(b)}
    if control is not None:
        row.update(control_identical=a == control,
                   control_bytes_differing=len(differing(a, control)),
                   control_identical_with_nvcc_names_masked=masked(a) == masked(control))
    return row


def main(argv: list[str] | None = None) -> int:
    """Compile the units in both work directories and print the comparison."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.same_objects",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("work_a", type=Path)
    ap.add_argument("work_b", type=Path)
    ap.add_argument("--units", required=True, help="comma-separated unit names")
    ap.add_argument("--arch", help="keep only this arch's -gencode, e.g. 90")
    ap.add_argument("--control", action="store_true",
                    help="compile each unit in WORK_A a second time, and say whether WORK_B's "
                         "object differs from WORK_A's only where that rerun's does")
    ap.add_argument("--keep", type=Path, help="keep the objects in this directory")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="same-objects-") as tmp:
        link = Path(tmp) / "cell"
        for name in [u.strip() for u in args.units.split(",") if u.strip()]:
            objs, secs = [], []
            works = (args.work_a, args.work_b) + ((args.work_a,) if args.control else ())
            for i, work in enumerate(works):
                out = (args.keep or Path(tmp)) / f"{i}-{Path(name).name}.o"
                out.parent.mkdir(parents=True, exist_ok=True)
                secs.append(round(compile_in(work, name, link, out, args.arch), 1))
                objs.append(out.read_bytes())
            row = {"unit": name, "seconds": secs, **compare(*objs)}
            results.append(row)
            print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["identical_with_nvcc_names_masked"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
