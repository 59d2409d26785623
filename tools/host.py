"""Host backend: build a cell with this machine's toolchain, in a fresh venv per cell.

``build_host`` runs every step here: toolchain -> source -> python -> compile -> the finish
stage (``tools.finish``) -> verify (import smoke test) -> publish. Wheels built here need this
host's glibc or newer (auditwheel tags them accordingly, e.g. manylinux_2_34 on Debian 12); the
container backend builds the broadly installable manylinux_2_28 wheels CI publishes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from . import pyenv
from .buildenv import available_memory_gib, build_env, size_for, usable_cores
from .compilelog import failing_file
from .errors import CompileError, ToolchainError
from .finish import finish_wheel
from .matrix import Cell, torch_index
from .progress import Progress, Step, publish
from .recipe import Recipe
from .source import prepare_source
from .table import Table
from .verify import smoke_test

#: The host backend's steps, as the progress lines and the report name them.
HOST_STEPS = ["toolchain", "source", "python", "compile", "repair", "inspect", "metadata",
              "verify", "publish"]

#: Where CUDA installers put the toolkit when CUDA_HOME is not set.
DEFAULT_CUDA_HOME = Path("/usr/local/cuda")


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


def find_nvcc(env: dict[str, str] | None = None) -> Nvcc:
    """nvcc from $CUDA_HOME/bin, else /usr/local/cuda, else PATH; ToolchainError if none.

    The toolkit root (CUDA_HOME for the build) is the directory whose ``include/`` holds
    ``cuda_runtime.h``: an ``nvcc`` on PATH may be a wrapper script outside the toolkit.
    """
    env = env if env is not None else dict(os.environ)
    candidates = []
    if env.get("CUDA_HOME"):
        candidates.append(Path(env["CUDA_HOME"]) / "bin" / "nvcc")
    candidates.append(DEFAULT_CUDA_HOME / "bin" / "nvcc")
    if found := shutil.which("nvcc", path=env.get("PATH")):
        candidates.append(Path(found))
    for nvcc in candidates:
        if not nvcc.is_file():
            continue
        proc = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True,
                              timeout=60)
        m = re.search(r"release (\d+\.\d+)", proc.stdout)
        if proc.returncode != 0 or not m:
            continue
        for root in (nvcc.parent.parent, nvcc.resolve().parent.parent, DEFAULT_CUDA_HOME):
            if (root / "include" / "cuda_runtime.h").is_file():
                return Nvcc(str(nvcc), m.group(1), str(root))
    raise ToolchainError("nvcc was not found with its toolkit (looked in $CUDA_HOME, "
                         "/usr/local/cuda, PATH; the toolkit must have include/cuda_runtime.h)",
                         hint="install the CUDA toolkit matching the cell's CUDA major version "
                              "and set CUDA_HOME, or use --backend container")


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


_PROBE = ("import json, os, torch; print(json.dumps({'v': torch.__version__, "
          "'cuda': torch.version.cuda, 'lib': os.path.join(os.path.dirname(torch.__file__), "
          "'lib'), 'abi': bool(torch._C._GLIBCXX_USE_CXX11_ABI)}))")


def probe_torch(python: Path | str, cell: Cell, table: Table) -> BuildPython:
    """The torch that ``python`` imports (version, CUDA, lib dir, ABI), checked against the
    cell: a CPU build, another CUDA major (unless the table relaxes it) or another C++ ABI than
    the table's is a ToolchainError."""
    proc = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise ToolchainError(f"torch does not import with {python}: {proc.stderr[-800:]}")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
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


def prepare_python(cell: Cell, recipe: Recipe, table: Table, workdir: Path, *,
                   wheelhouse: Path | None, offline: bool, index_url: str | None,
                   log: Path) -> BuildPython:
    """A fresh venv for the cell's Python with its torch and the recipe's build requirements."""
    python = pyenv.create_venv(workdir / "venv", cell.python, seed=True)
    extra = (index_url,) if index_url else ()
    if not index_url and (url := torch_index(cell, table)):
        extra = (url,)
    reqs = [cell.torch_requirement, *(d.requirement for d in recipe.build.requires)]
    pyenv.install(python, reqs, extra_index_urls=extra, offline=offline,
                  find_links=(wheelhouse,) if wheelhouse else (), log=log,
                  what=f"the build requirements of {cell.id}")
    return probe_torch(python, cell, table)


_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


def pip_wheel_command(python: Path, tree: Path, out_dir: Path, *, isolation: bool) -> list[str]:
    """The package's own build as the host backend runs it: ``pip wheel`` on the tree."""
    cmd = [str(python), "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--isolated",
           "-v", "-w", str(out_dir), str(tree)]
    if not isolation:
        cmd.insert(4, "--no-build-isolation")
    return cmd


def build_process_env(python: Path, env: dict[str, str], *,
                      first_on_path: tuple[Path, ...] = ()) -> dict[str, str]:
    """The environment of the package's build: ours plus the cell's variables, with the build
    venv's scripts (ninja) and the toolkit's bin on PATH; ``first_on_path`` goes before them."""
    path = [*map(str, first_on_path), str(python.parent)]
    if env.get("CUDA_HOME"):
        path.append(str(Path(env["CUDA_HOME"]) / "bin"))
    full_env = {**os.environ, **env,
                "PATH": os.pathsep.join([*path, os.environ.get("PATH", "")])}
    full_env.pop("PYTHONPATH", None)
    # torch's CUDA wheels bring the CUDA libraries' headers (site-packages/nvidia/cu13/include:
    # cusparse.h, cublas_v2.h, ...), which torch's ATen/cuda headers include; a toolkit made of
    # nvcc alone lacks them. CPATH is searched after every -I, so a full toolkit's copies win.
    wheel_headers = sorted(str(d) for d in python.parent.parent.glob(
        "lib/python3*/site-packages/nvidia/*/include"))
    if wheel_headers:
        full_env["CPATH"] = os.pathsep.join(
            [*filter(None, [os.environ.get("CPATH")]), *wheel_headers])
    return full_env


def compile_wheel(python: Path, tree: Path, env: dict[str, str], out_dir: Path, log: Path,
                  *, isolation: bool, on_line: Callable[[str], None] | None = None,
                  timeout: float = 6 * 3600) -> Path:
    """Run the package's own build (``pip wheel``) and return the unrepaired wheel.

    Every line goes to ``log``; ninja's ``[N/M]`` progress lines go to ``on_line``. A failure
    raises CompileError naming the file that failed, the exit status (137: OOM-killed) and the
    log.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = pip_wheel_command(python, tree, out_dir, isolation=isolation)
    full_env = build_process_env(python, env)
    start = time.monotonic()
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        proc = subprocess.Popen(cmd, cwd=tree, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            if on_line and _PROGRESS.match(line.strip()):
                on_line(line.strip())
            if time.monotonic() - start > timeout:
                proc.kill()
                break
        code = proc.wait()
    if code != 0:
        text = log.read_text(errors="replace")
        culprit = failing_file(text)
        if code in (-9, 137) or "Killed" in text[-5000:]:
            raise CompileError(
                f"the compile was killed (exit {code}), most likely out of memory; log: {log}",
                hint="lower MAX_JOBS (raise build.job_memory_gib in the recipe), or build on a "
                     "machine with more memory")
        where = f" while compiling {culprit}" if culprit else ""
        raise CompileError(f"the package's build failed (exit {code}){where}; full log: {log}",
                           hint="read the first error in the log; a patch in the recipe may be "
                                "needed for this CUDA/torch version")
    wheels = sorted(out_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise CompileError(f"the build made {len(wheels)} wheels in {out_dir}, expected one")
    return wheels[0]


def build_host(cell: Cell, recipe: Recipe, table: Table, *, archs: tuple[str, ...],
               work: Path, out_dir: Path, progress: Progress, sdist: Path | None,
               sdist_dir: Path | None, wheelhouse: Path | None, offline: bool,
               torch_index_override: str | None) -> Path:
    """The host backend: every step on this machine; returns the published wheel."""
    def toolchain(step: Step) -> Nvcc:
        nvcc = find_nvcc()
        if warning := check_nvcc(nvcc, cell):
            progress.say(f"note: {warning}")
        step.detail.update(nvcc=nvcc.path, nvcc_version=nvcc.version, cuda_home=nvcc.cuda_home)
        return nvcc

    nvcc = progress.run("toolchain", toolchain)

    def source(step: Step):
        prepared = prepare_source(recipe, work, sdist=sdist, sdist_dir=sdist_dir)
        step.detail.update(sdist=prepared.sdist.name, sha256=prepared.sha256,
                           patches=list(prepared.patches))
        return prepared

    prepared = progress.run("source", source)

    def python(step: Step) -> BuildPython:
        bp = prepare_python(cell, recipe, table, work, wheelhouse=wheelhouse, offline=offline,
                            index_url=torch_index_override, log=work / "python.log")
        step.detail.update(torch=bp.torch_version, torch_cuda=bp.torch_cuda,
                           cxx11_abi=bp.cxx11_abi)
        return bp

    bp = progress.run("python", python)

    sizing = size_for(recipe, archs, cores=usable_cores(), available_gib=available_memory_gib())
    env = build_env(recipe, cell, sizing, archs=archs, cuda_home=nvcc.cuda_home)

    def compile_(step: Step) -> Path:
        progress.say(f"sizing: {sizing.note}")
        progress.say("environment: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
        step.detail.update(env=env, sizing=asdict(sizing), log=str(work / "compile.log"))
        last = [0.0]

        def on_line(line: str) -> None:
            now = time.monotonic()
            if now - last[0] > 5:
                last[0] = now
                counter = line.split("]", 1)[0] + "]"
                source = re.search(r"\s-c\s+(\S+)", line)
                progress.say(f"compiling {counter} "
                             f"{Path(source.group(1)).name if source else line[len(counter):80]}")
        return compile_wheel(bp.python, prepared.tree, env, work / "dist", work / "compile.log",
                             isolation=recipe.build.isolation, on_line=on_line)

    raw = progress.run("compile", compile_)
    final, _ = finish_wheel(raw, cell=cell, recipe=recipe, archs=archs, torch_lib=bp.torch_lib,
                            torch_version=bp.torch_version, torch_cuda=bp.torch_cuda, work=work,
                            progress=progress, plat="auto", backend="host", nvcc=nvcc.path)

    def verify(step: Step) -> None:
        index = torch_index_override or torch_index(cell, table)
        seconds = smoke_test(final, python=cell.python, torch_requirement=cell.torch_requirement,
                             torch_version=cell.torch_version, imports=recipe.imports,
                             workdir=work / "smoke", extra_index_urls=(index,) if index else (),
                             find_links=(wheelhouse,) if wheelhouse else (), offline=offline)
        step.detail.update(smoke_test="passed", imports=list(recipe.imports), seconds=seconds)

    progress.run("verify", verify)
    return progress.run("publish", lambda step: publish(final, out_dir, step))
