"""Do two torch series compile a kernel unit to the same object? Compile it in both and compare.

    python -m benchmarks.same_objects WORK_A WORK_B --units NAME[,NAME...] [--arch 90]
        [--json out.json]

(from the repository root.) ``WORK_A`` and ``WORK_B`` are two cells' work directories written
by ``python -m tools.probe CELL --across-torch`` (``<work>/<cell>/kernels``): each holds the
patched source, the venv with that cell's torch and the package's compile commands as its
ninja file lists them. For each unit (a file name or a path in the source tree) the unit's own
command line is run in each, with ``-c`` as the build has it, and the two objects compared.

Both compiles run from one path, a link re-pointed from one work directory to the other, so
that the paths the compiler writes into an object (``__FILE__`` in an error message, the
include paths) are the same string, as the compiler cache's ``base_dir`` makes them in a real
build. What still differs between any two nvcc runs, even of one input, is the name of nvcc's
temporary file (``tmpxft_<8 hex digits of its process id>_...cudafe1.cpp``), which the host
compiler records as the object's source file name: the comparison reports the raw bytes and
then the bytes with that one name masked.
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

_TMPXFT = re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}")


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


def compare(a: bytes, b: bytes) -> dict:
    """Raw and masked comparison of two objects."""
    raw = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    masked_a, masked_b = _TMPXFT.sub(b"tmpxft_X", a), _TMPXFT.sub(b"tmpxft_X", b)
    return {"size": [len(a), len(b)], "identical": a == b, "bytes_differing": len(raw) +
            abs(len(a) - len(b)), "identical_with_tmpxft_masked": masked_a == masked_b}


def main(argv: list[str] | None = None) -> int:
    """Compile the units in both work directories and print the comparison."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.same_objects",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("work_a", type=Path)
    ap.add_argument("work_b", type=Path)
    ap.add_argument("--units", required=True, help="comma-separated unit names")
    ap.add_argument("--arch", help="keep only this arch's -gencode, e.g. 90")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="same-objects-") as tmp:
        link = Path(tmp) / "cell"
        for name in [u.strip() for u in args.units.split(",") if u.strip()]:
            objs, secs = [], []
            for i, work in enumerate((args.work_a, args.work_b)):
                out = Path(tmp) / f"{i}-{Path(name).name}.o"
                secs.append(round(compile_in(work, name, link, out, args.arch), 1))
                objs.append(out.read_bytes())
            row = {"unit": name, "seconds": secs, **compare(*objs)}
            results.append(row)
            print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["identical_with_tmpxft_masked"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
