"""The toolchain a build runs with: nvcc (this machine's, else the CUDA 13.0 toolkit from PyPI's
nvidia packages, ``tools.pipeline.cudakit``), the torch a Python imports, and the package's own
build command with its environment.

The host backend, the commands run inside the builder image (``tools.backends.inside``) and the
probe build (``tools.probing``) all compile with these, so that a check or a command line is
written once: the nvcc check inside the image is the host's, the probe reads the command lines of
the very ``pip wheel`` the host backend runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.core.errors import ToolchainError
from tools.hostplat import HostOS, current
from tools.plan.cells import Cell
from tools.plan.table import Table
from . import cudakit

#: Where CUDA installers put the toolkit when CUDA_HOME is not set.
DEFAULT_CUDA_HOME = Path("/usr/local/cuda")
#: The toolkits from PyPI this process has said it uses (said once, not at every step).
_ANNOUNCED: set[Path] = set()
#: Why the toolkit from PyPI could not be had, per cache: tried once per process (an offline
#: machine must not wait on pip's retries at every step, nor the test suite at every module).
_UNAVAILABLE: dict[Path, ToolchainError] = {}


@dataclass(frozen=True)
class Nvcc:
    """The CUDA compiler found on this machine."""

    path: str
    version: str
    cuda_home: str


@dataclass(frozen=True)
class BuildPython:
    """A cell's build venv, with the torch it holds."""

    python: Path
    torch_version: str
    torch_cuda: str
    torch_lib: Path
    cxx11_abi: bool


def _nvcc_with_toolkit(nvcc: Path) -> Nvcc | None:
    """``nvcc`` with its version and toolkit root, or None when it doesn't run or no root
    holds ``include/cuda_runtime.h``."""
    if not nvcc.is_file() or (release := cudakit.nvcc_release(nvcc)) is None:
        return None
    for root in (nvcc.parent.parent, nvcc.resolve().parent.parent, DEFAULT_CUDA_HOME):
        if (root / "include" / "cuda_runtime.h").is_file():
            return Nvcc(str(nvcc), release, str(root))
    return None


def find_nvcc(env: dict[str, str] | None = None, *, pypi: bool = True,
              host: HostOS = current()) -> Nvcc:
    """nvcc from $CUDA_HOME/bin, else /usr/local/cuda, else PATH; else (``pypi``) the CUDA 13.0
    toolkit from PyPI's nvidia packages in the cache, installed the first time, saying so
    (``tools.pipeline.cudakit``); ToolchainError if none. ``host`` (default: this machine's) names
    the toolkit's compiler (``bin/nvcc.exe`` on Windows).

    The toolkit root (CUDA_HOME for the build) is the directory whose ``include/`` holds
    ``cuda_runtime.h``: an ``nvcc`` on PATH may be a wrapper script outside the toolkit.
    """
    env = env if env is not None else dict(os.environ)
    nvcc_name = host.exe_name("nvcc")
    candidates = []
    if env.get("CUDA_HOME"):
        candidates.append(Path(env["CUDA_HOME"]) / "bin" / nvcc_name)
    candidates.append(DEFAULT_CUDA_HOME / "bin" / nvcc_name)
    if found := shutil.which("nvcc", path=env.get("PATH")):
        candidates.append(Path(found))
    for nvcc in candidates:
        if found := _nvcc_with_toolkit(nvcc):
            return found
    looked = (f"looked in $CUDA_HOME ({env.get('CUDA_HOME') or 'unset'}), {DEFAULT_CUDA_HOME}, "
              "PATH; the toolkit must have include/cuda_runtime.h")
    hint = ("install the CUDA toolkit matching the cell's CUDA major version and set CUDA_HOME, "
            "or use --backend container")
    if not pypi:
        raise ToolchainError(f"nvcc was not found with its toolkit ({looked})", hint=hint)
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        print(line, file=sys.stderr, flush=True)

    if (failed := _UNAVAILABLE.get(cudakit.toolkit_home(env))) is not None:
        raise failed
    try:
        home = cudakit.ensure_toolkit(env, reason="no CUDA toolkit found", say=say)
    except ToolchainError as exc:
        failed = ToolchainError(f"nvcc was not found with its toolkit ({looked}), and the CUDA "
                                f"{cudakit.CUDA} toolkit from PyPI's nvidia packages could not "
                                f"be installed: {exc.message}", hint=f"{exc.hint}; or {hint}")
        _UNAVAILABLE[cudakit.toolkit_home(env)] = failed
        raise failed from None
    # the toolkit from PyPI is Linux's (cudakit.check_machine refuses another machine)
    if (found := _nvcc_with_toolkit(home / "bin" / "nvcc")) is None:
        raise ToolchainError(f"the CUDA {cudakit.CUDA} toolkit from PyPI in {home} has no "
                             "working nvcc", hint=f"delete {home} to install it again")
    if home not in _ANNOUNCED and not said:   # an install has said it all
        print(f"no CUDA toolkit found ({looked.split(';')[0]}): using CUDA {found.version} "
              f"from PyPI's nvidia packages at {home}", file=sys.stderr, flush=True)
    _ANNOUNCED.add(home)
    return found


def check_nvcc(nvcc: Nvcc, cell: Cell) -> str | None:
    """Refuse an nvcc whose major differs from the cell's CUDA (torch refuses it too); return a
    warning when only the minor differs."""
    have, want = nvcc.version.split("."), cell.cuda.split(".")
    if have[0] != want[0]:
        raise ToolchainError(
            f"cell {cell.id} needs CUDA {cell.cuda}, but nvcc at {nvcc.path} is CUDA "
            f"{nvcc.version}: torch's extension builder refuses a different major version",
            hint=f"install CUDA {want[0]}.x and point CUDA_HOME at it, pick a cu{have[0]}x cell, "
                 "or use --backend container")
    if have != want:
        return (f"nvcc is CUDA {nvcc.version}, the cell is CUDA {cell.cuda}: same major, so "
                "torch accepts it; the manifest records the real compiler")
    return None


_TORCH_QUERY = ("import json, os, torch; print(json.dumps({'v': torch.__version__, "
          "'cuda': torch.version.cuda, 'lib': os.path.join(os.path.dirname(torch.__file__), "
          "'lib'), 'abi': bool(torch._C._GLIBCXX_USE_CXX11_ABI)}))")


def torch_info(python: Path | str, hint: str | None = None) -> dict:
    """What ``python``'s torch says of itself: ``v`` (version), ``cuda`` (None for a CPU
    build), ``lib`` (its lib directory) and ``abi`` (the C++11 ABI); ToolchainError, with
    ``hint``, when torch does not import."""
    proc = subprocess.run([str(python), "-c", _TORCH_QUERY], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise ToolchainError(f"torch does not import with {python}: {proc.stderr[-800:]}",
                             hint=hint)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def inspect_torch(python: Path | str, cell: Cell, table: Table) -> BuildPython:
    """The torch that ``python`` imports (version, CUDA, lib dir, ABI), checked against the
    cell: a CPU build, another CUDA major (unless the table relaxes it) or another C++ ABI than
    the table's is a ToolchainError."""
    info = torch_info(python)
    if not info["cuda"]:
        raise ToolchainError(
            f"the torch installed for {cell.id} ({info['v']}) is a CPU build",
            hint="a machine-wide pip find-links or index may be serving a CPU torch; pass "
                 "--torch-index with the CUDA index or a --wheelhouse holding the CUDA build")
    relaxed = table.torch[cell.torch].nvcc_check_relaxed(cell.cuda)
    if info["cuda"].split(".")[0] != cell.cuda.split(".")[0] and not relaxed:
        raise ToolchainError(f"torch {info['v']} is built with CUDA {info['cuda']}, the cell "
                             f"needs CUDA {cell.cuda}",
                             hint="pass --torch-index for the cell's CUDA version")
    if info["abi"] != cell.cxx11_abi:
        raise ToolchainError(f"torch {info['v']} uses cxx11_abi={info['abi']}, the table says "
                             f"{cell.cxx11_abi} for torch {cell.torch}",
                             hint="fix recipes/table.yaml or the torch source")
    return BuildPython(Path(python), info["v"], info["cuda"], Path(info["lib"]), info["abi"])


def pip_wheel_command(python: Path, tree: Path, out_dir: Path, *, isolation: bool,
                      offline: bool = False) -> list[str]:
    """The package's own build as the host backend runs it: ``pip wheel`` on the tree
    (``--no-index`` offline: ``--isolated`` makes pip ignore PIP_NO_INDEX)."""
    cmd = [str(python), "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--isolated",
           "-v", "-w", str(out_dir), str(tree)]
    if not isolation:
        cmd.insert(4, "--no-build-isolation")
    if offline:
        cmd.insert(4, "--no-index")
    return cmd


def build_process_env(python: Path, env: dict[str, str], *,
                      first_on_path: tuple[Path, ...] = ()) -> dict[str, str]:
    """The environment of the package's build: ours plus the cell's variables, with the build
    venv's scripts (ninja) and the toolkit's bin on PATH; ``first_on_path`` goes before them."""
    path = [*map(str, first_on_path), str(python.parent)]
    if env.get("CUDA_HOME"):
        path.append(str(Path(env["CUDA_HOME"]) / "bin"))
    # The caller's PYTHONPATH must not reach the build; the cell's own (the compiler cache's
    # fixed torch path) must.
    inherited = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    full_env = {**inherited, **env,
                "PATH": os.pathsep.join([*path, os.environ.get("PATH", "")])}
    # torch's CUDA wheels bring the CUDA libraries' headers (site-packages/nvidia/cu13/include:
    # cusparse.h, cublas_v2.h, ...), which torch's ATen/cuda headers include; a toolkit made of
    # nvcc alone lacks them. CPATH is searched after every -I, so a full toolkit's copies win.
    # A cached build reaches site-packages through the compiler cache's fixed torch path (the
    # cell's PYTHONPATH, tools.pipeline.ccache): the headers are spelled through it too, or the
    # line markers of a unit that includes them (any unit of torch's whole C++ API) name
    # lib/python3.X and differ for every Python, and no other Python's build hits it.
    alias = Path(env["PYTHONPATH"]) if env.get("PYTHONPATH") else None
    wheel_headers = [
        str(alias / d.relative_to(d.parents[2]))
        if alias is not None and alias.resolve() == d.parents[2].resolve() else str(d)
        for d in sorted(python.parent.parent.glob("lib/python3*/site-packages/nvidia/*/include"))]
    if wheel_headers:
        full_env["CPATH"] = os.pathsep.join(
            [*filter(None, [os.environ.get("CPATH")]), *wheel_headers])
    return full_env
