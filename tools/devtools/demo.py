"""``make demo``: from a fresh clone to "pip installed a wheel we built, from an index we emitted".

Builds a real recipe on the host backend for this machine (default: causal_conv1d for this
Python and the local nvcc's CUDA version, one arch), runs every verification step, emits the
index with ``make index``, serves it on 127.0.0.1, installs the wheel from it into a fresh venv
with pip, imports it, prints where everything is and how to point pip and uv at it, and stops the
server.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

from tools import ROOT
from tools.pipeline import venvs as pyenv
from tools.builder.orchestrate import build_cell
from tools.builder.planned import Planned
from tools.core.errors import CuwheelsError, PlanError, ToolchainError, cli
from tools.backends.host import find_nvcc
from tools.plan.matrix import Cell, load_cell, plan
from tools.sitegen.serve import make_server
from tools.plan.table import load_table
from tools.core.variant import Variant, uv_index_name
from tools.finish.verify import smoke_argv

DEMO_DIR = ROOT / "demo"


def pick_cell(package: str, python: str, cuda: str) -> Cell:
    """The cell of ``package`` for this Python and CUDA whose torch the registry serves built
    for exactly that CUDA (so nothing but the registry is needed)."""
    table = load_table()
    cells = [c for c in plan(table=table)
             if c.package == package and c.python == python and c.cuda == cuda]
    if not cells:
        raise PlanError(f"{package} has no cell for Python {python} and CUDA {cuda}",
                        hint="pass --python/--cuda for a cell the recipe builds "
                             "(python -m tools.matrix --package " + package + " --format ids)")
    served = [c for c in cells if table.torch[c.torch].pypi_cuda == c.cuda]
    return (served or cells)[0]


def _step(n: int, total: int, text: str, start: float) -> None:
    s = int(time.monotonic() - start)
    print(f"\n==> [{n}/{total}] {text}   ({s // 60}m{s % 60:02d}s so far)", flush=True)


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, **kwargs)


@cli
def main(argv: list[str] | None = None) -> int:
    """Run the demo (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m tools.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--package", default="causal_conv1d")
    ap.add_argument("--python", default="%d.%d" % sys.version_info[:2],
                    help="Python version to build for (default: this one)")
    ap.add_argument("--cuda", help="CUDA version (default: the local nvcc's)")
    ap.add_argument("--archs", default="90",
                    help="arch list to compile (default 90: one arch keeps it to minutes)")
    ap.add_argument("--dir", type=Path, default=DEMO_DIR, help="where the demo writes")
    ap.add_argument("--port", type=int, default=0, help="port for the local index (0: any)")
    args = ap.parse_args(argv)

    start = time.monotonic()
    total = 5
    wheels, site, ledger = args.dir / "wheelhouse", args.dir / "site", args.dir / "ledger.json"
    current = "choosing the cell"
    try:
        _step(1, total, "choosing what to build", start)
        cuda = args.cuda or find_nvcc().version
        cell = pick_cell(args.package, args.python, cuda)
        print(f"cell {cell.id}: {cell.package} {cell.version}, Python {cell.python}, CUDA "
              f"{cell.cuda}, torch {cell.torch_version}, archs {args.archs}")

        current = "building (host backend: source, compile, repair, verify)"
        _step(2, total, current, start)
        planned = Planned.make()
        wheel = build_cell(planned.cell(cell.id), planned, backend="host", archs=args.archs,
                           out_dir=wheels, stream=sys.stdout).wheel

        current = "emitting the index (make index)"
        _step(3, total, current, start)
        server = make_server(_ensure(site), wheels, port=args.port, quiet=True)
        base = server.url
        proc = _run(["make", "-s", "-C", str(ROOT), "index",
                     f"WHEELS_DIR={wheels}", f"INDEX_DIR={site}", f"BASE_URL={base}/files",
                     f"LEDGER={ledger}", "INDEX_FLAGS=--init-ledger"])
        if proc.returncode != 0:
            server.server_close()
            raise CuwheelsError("make index failed (see above)")

        current = "serving the index and installing the wheel with pip into a fresh venv"
        _step(4, total, current, start)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        variant = f"{base}/cu{cell.cuda.replace('.', '')}/torch{cell.torch}/simple/"
        try:
            python = pyenv.create_venv(args.dir / "venv", cell.python, seed=True)
            # --isolated: a machine-wide pip config (find-links with a CPU torch, as on our
            # development machines) must not pick the torch; users without one need no flag.
            pip = [str(python), "-m", "pip", "--isolated", "install", "--progress-bar", "off",
                   f"{cell.package.replace('_', '-')}=={cell.version}",
                   cell.torch_requirement, "--extra-index-url", variant]
            if _run(pip).returncode != 0:
                raise CuwheelsError("pip could not install the wheel from the local index")
            current = "importing the wheel"
            _step(5, total, current, start)
            _, recipe, _ = load_cell(cell.id)
            proc = _run(smoke_argv(str(python), cell.torch_version, recipe.imports),
                        cwd=str(args.dir))
            if proc.returncode != 0:
                raise CuwheelsError("the installed wheel does not import (see above)")
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)
    except CuwheelsError as exc:
        print(f"\ndemo failed while {current}:\n{exc}", file=sys.stderr)
        if isinstance(exc, ToolchainError):
            print("See README.md, 'Troubleshooting'.", file=sys.stderr)
        raise
    s = int(time.monotonic() - start)
    name = cell.package.replace("_", "-")
    print(f"""
done in {s // 60}m{s % 60:02d}s: pip installed {wheel.name} from the index this demo emitted.

  wheel         {wheel}
  build report  {ROOT / 'build-cells' / cell.id / 'report.json'}
  index (site)  {site}   (variant index: {site / variant.split('/', 3)[3]})
  venv          {args.dir / 'venv'}

The server is stopped. To serve the same index again:
  make serve INDEX_DIR={site} WHEELS_DIR={wheels} PORT=8765
then point pip or uv at it:
  pip install {name} --extra-index-url http://127.0.0.1:8765/cu{cell.cuda.replace('.', '')}/torch{cell.torch}/simple/
  # pyproject.toml, for uv:
  [[tool.uv.index]]
  name = "{uv_index_name(Variant(cell.cuda, cell.torch).index_path)}"
  url = "http://127.0.0.1:8765/cu{cell.cuda.replace('.', '')}/torch{cell.torch}/simple/"
  explicit = true
  [tool.uv.sources]
  {name} = {{ index = "{uv_index_name(Variant(cell.cuda, cell.torch).index_path)}" }}""")
    return 0


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":
    sys.exit(main())
