"""``make demo``: from a fresh clone to "pip installed a wheel we built, from an index we emitted".

Builds a real recipe on the host backend for this machine (default: causal_conv1d for this
Python and the local nvcc's CUDA version, one arch), runs every verification step, emits the
index with ``make index``, serves it on 127.0.0.1, installs the wheel from it into a fresh venv
with pip, imports it, prints where everything is and how to point pip and uv at it, and stops the
server. On a machine with no CUDA toolkit, the pinned CUDA 13.0 from PyPI's nvidia packages is
installed into the cache first, saying so (``tools.pipeline.cudakit``).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tools import ROOT
from tools.pipeline import venvs as pyenv
from tools.builder.orchestrate import BuildRequest, build_cell
from tools.builder.planned import Planned
from tools.core.errors import CuwheelsError, PlanError, ToolchainError
from tools.pipeline.build_toolchain import find_nvcc
from tools.plan.cells import Cell
from tools.sitegen.server import make_server
from tools.core.variant import Variant, uv_index_name
from tools.finish.checks import smoke_argv

DEMO_DIR = ROOT / "demo"
#: What the demo builds unless told otherwise: a small recipe, one arch (minutes, not an hour).
DEFAULT_PACKAGE = "causal_conv1d"
DEFAULT_ARCHS = "90"


def pick_cell(planned: Planned, package: str, python: str, cuda: str) -> Cell:
    """The cell of ``package`` for this Python and CUDA whose torch the registry serves built
    for exactly that CUDA (so nothing but the registry is needed)."""
    table = planned.table
    cells = [c for c in planned.cells
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


@dataclass(frozen=True)
class DemoResult:
    """What one demo run made: the cell, its wheel, the index and the venv that installed it."""

    cell: Cell
    wheel: Path
    wheels: Path
    site: Path
    venv: Path
    #: The variant index (``http://127.0.0.1:PORT/cuXYZ/torchX.Y/simple/``) pip installed from.
    variant: str
    seconds: int


def run_demo(*, package: str = DEFAULT_PACKAGE, python: str | None = None,
             cuda: str | None = None, archs: str = DEFAULT_ARCHS, out_dir: Path = DEMO_DIR,
             port: int = 0) -> DemoResult:
    """Run the demo (see the module docstring), each step announced on stdout: ``python``
    defaults to this interpreter's version and ``cuda`` to the local nvcc's. A failure says on
    stderr which step it stopped in, then raises."""
    python = python or "%d.%d" % sys.version_info[:2]
    start = time.monotonic()
    total = 5
    wheels, site, ledger = out_dir / "wheelhouse", out_dir / "site", out_dir / "ledger.json"
    current = "choosing the cell"
    try:
        _step(1, total, "choosing what to build", start)
        # With no toolkit here, this installs CUDA 13.0 from PyPI's nvidia packages (once) and
        # says so: the demo needs nothing but Python and gcc.
        nvcc = find_nvcc()
        print(f"nvcc: CUDA {nvcc.version} at {nvcc.path} (CUDA_HOME {nvcc.cuda_home})")
        cuda = cuda or nvcc.version
        planned = Planned.make()  # the one plan of this command, passed down
        cell = pick_cell(planned, package, python, cuda)
        print(f"cell {cell.id}: {cell.package} {cell.version}, Python {cell.python}, CUDA "
              f"{cell.cuda}, torch {cell.torch_version}, archs {archs}")

        current = "building (host backend: source, compile, repair, verify)"
        _step(2, total, current, start)
        wheel = build_cell(cell, planned, BuildRequest(backend="host", archs=archs,
                                                       out_dir=wheels, stream=sys.stdout)).wheel

        current = "emitting the index (make index)"
        _step(3, total, current, start)
        server = make_server(_ensure(site), wheels, port=port, quiet=True)
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
            venv_python = pyenv.create_venv(out_dir / "venv", cell.python, seed=True)
            # --isolated: a machine-wide pip config (find-links with a CPU torch, as on our
            # development machines) must not pick the torch; users without one need no flag.
            pip = [str(venv_python), "-m", "pip", "--isolated", "install", "--progress-bar",
                   "off", f"{cell.package.replace('_', '-')}=={cell.version}",
                   cell.torch_requirement, "--extra-index-url", variant]
            if _run(pip).returncode != 0:
                raise CuwheelsError("pip could not install the wheel from the local index")
            current = "importing the wheel"
            _step(5, total, current, start)
            proc = _run(smoke_argv(str(venv_python), cell.torch_version,
                                   planned.recipe(cell).imports),
                        cwd=str(out_dir))
            if proc.returncode != 0:
                raise CuwheelsError("the installed wheel does not import (see above)")
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)
    except CuwheelsError as exc:
        print(f"\ndemo failed while {current}:\n{exc}", file=sys.stderr)
        if isinstance(exc, ToolchainError):
            print("See docs/install/troubleshooting.md.", file=sys.stderr)
        raise
    return DemoResult(cell, wheel, wheels, site, out_dir / "venv", variant,
                      int(time.monotonic() - start))


def summary(result: DemoResult) -> str:
    """Where everything is, and how to serve the index again and point pip and uv at it."""
    cell, s, site = result.cell, result.seconds, result.site
    name = cell.package.replace("_", "-")
    local = f"http://127.0.0.1:8765/cu{cell.cuda.replace('.', '')}/torch{cell.torch}/simple/"
    index_name = uv_index_name(Variant(cell.cuda, cell.torch).index_path)
    return f"""
done in {s // 60}m{s % 60:02d}s: pip installed {result.wheel.name} from the index this demo emitted.

  wheel         {result.wheel}
  build report  {ROOT / 'build-cells' / cell.id / 'report.json'}
  index (site)  {site}   (variant index: {site / result.variant.split('/', 3)[3]})
  venv          {result.venv}

The server is stopped. To serve the same index again:
  make serve INDEX_DIR={site} WHEELS_DIR={result.wheels} PORT=8765
then point pip or uv at it:
  pip install {name} --extra-index-url {local}
  # pyproject.toml, for uv:
  [[tool.uv.index]]
  name = "{index_name}"
  url = "{local}"
  explicit = true
  [tool.uv.sources]
  {name} = {{ index = "{index_name}" }}"""


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
