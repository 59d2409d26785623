"""Host backend: build a cell with this machine's toolchain, in a fresh venv per cell.

``build_host`` runs every step here: toolchain -> source -> python -> compile -> the finish
stage (``tools.finish.stage``) -> verify (import smoke test) -> publish. Wheels built here need this
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

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from tools.pipeline import ccache
from tools.pipeline import venvs as pyenv
from tools.pipeline.buildenv import available_memory_gib, build_env, size_for, usable_cores
from tools.pipeline.compilelog import failing_file
from tools.core.errors import CompileError, ToolchainError
from tools.finish.stage import finish_wheel, record_kernel_check
from tools.kernels.check import GpuFinder, find_gpu, raise_if_failed, run_check, summary
from tools.plan.matrix import Cell, torch_index
from tools.pipeline.report import Progress, Step, publish
from tools.plan.recipe import Recipe
from tools.pipeline.source import prepare_source
from tools.plan.table import Table
from tools.core.variant import cell_id, torch_series
from tools.finish.verify import smoke_test, smoke_test_existing, smoke_venv

#: The host backend's steps, as the progress lines and the report name them.
HOST_STEPS = ["toolchain", "source", "python", "compile", "repair", "inspect", "metadata",
              "verify", "kernels", "publish"]
#: The steps with ``--python``: the given interpreter is checked first, before anything else.
EXISTING_PYTHON_STEPS = ["python", *(s for s in HOST_STEPS if s != "python")]

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


_TORCH_QUERY = ("import json, os, torch; print(json.dumps({'v': torch.__version__, "
          "'cuda': torch.version.cuda, 'lib': os.path.join(os.path.dirname(torch.__file__), "
          "'lib'), 'abi': bool(torch._C._GLIBCXX_USE_CXX11_ABI)}))")


def _torch_info(python: Path | str, hint: str | None = None) -> dict:
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
    info = _torch_info(python)
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
    return inspect_torch(python, cell, table)


_VERSION_QUERY = "import sys; print('%d.%d' % sys.version_info[:2])"
#: Prints the installed version of each distribution named in argv (null when absent).
_DISTS_QUERY = ("import json, sys, importlib.metadata as m\n"
                "def v(n):\n"
                "    try:\n        return m.version(n)\n"
                "    except m.PackageNotFoundError:\n        return None\n"
                "print(json.dumps({n: v(n) for n in sys.argv[1:]}))")


def check_existing_python(python: Path, cell: Cell, recipe: Recipe, table: Table
                          ) -> BuildPython:
    """Check an existing interpreter (``--python``) for ``cell`` before anything compiles: it
    runs, it is the cell's Python version, its torch imports and is a CUDA build of the cell's
    CUDA major and torch series (and the table's C++ ABI), and the recipe's build requirements
    (and pip, which runs the build) are installed. Nothing is installed or downloaded: each
    failure is a ToolchainError naming what is wrong and how to fix it.
    """
    python = Path(python)
    flag = f"--python {python}"
    if not python.is_file() or not os.access(python, os.X_OK):
        raise ToolchainError(f"{flag}: no executable interpreter there",
                             hint="give the path of the environment's python, e.g. "
                                  "/path/to/venv/bin/python")
    proc = subprocess.run([str(python), "-c", _VERSION_QUERY], capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0:
        raise ToolchainError(f"{flag} does not run: {proc.stderr.strip()[-400:]}")
    version = proc.stdout.strip()
    if version != cell.python:
        same = cell_id(cell.package, version, cell.cuda,
                       None if cell.default_torch else cell.torch)
        raise ToolchainError(f"{flag} is Python {version}; cell {cell.id} is for Python "
                             f"{cell.python}",
                             hint=f"build the cell of that interpreter ({same}) or give a "
                                  f"Python {cell.python} interpreter")
    info = _torch_info(python, hint=f"install the cell's torch ({cell.torch_requirement}, "
                                    f"a CUDA {cell.cuda.split('.')[0]} build) into that "
                                    "environment")
    if not info["cuda"]:
        raise ToolchainError(f"{flag} has torch {info['v']}, a CPU build: CUDA extensions "
                             "need a CUDA build of torch",
                             hint=f"install a CUDA {cell.cuda.split('.')[0]} build of torch "
                                  f"{cell.torch} into that environment (e.g. from "
                                  "https://download.pytorch.org/whl/)")
    have, want = info["cuda"].split(".")[0], cell.cuda.split(".")[0]
    if have != want and not table.torch[cell.torch].nvcc_check_relaxed(cell.cuda):
        raise ToolchainError(f"{flag} has torch {info['v']}, built with CUDA {info['cuda']}; "
                             f"cell {cell.id} is for CUDA {cell.cuda}",
                             hint=f"build a cu{have}x cell with that environment, or give one "
                                  f"whose torch is a CUDA {want} build")
    series = torch_series(info["v"])
    if series != cell.torch:
        other = (cell_id(cell.package, cell.python, cell.cuda,
                         None if series == recipe.target(cell.cuda).torch[0] else series)
                 if series in recipe.target(cell.cuda).torch else None)
        raise ToolchainError(f"{flag} has torch {info['v']}; cell {cell.id} builds against "
                             f"torch {cell.torch} (its wheel is labelled and pinned for it)",
                             hint=f"build {other}, the cell of that torch" if other else
                                  f"the recipe builds no CUDA {cell.cuda} wheel for torch "
                                  f"{series}; give an environment with torch {cell.torch}")
    if info["abi"] != cell.cxx11_abi:
        raise ToolchainError(f"{flag} has torch {info['v']} with cxx11_abi={info['abi']}; "
                             f"the table says {cell.cxx11_abi} for torch {cell.torch}",
                             hint="use the official torch build of that series")
    if recipe.build.isolation:
        raise ToolchainError(f"{flag}: {recipe.package} builds with build isolation, which "
                             "installs its own build requirements, torch included",
                             hint="use the default venv backend for this recipe")
    missing = missing_requirements(python, ["pip", *(d.requirement
                                                     for d in recipe.build.requires)])
    if missing:
        quoted = " ".join(f"'{r}'" for r, _ in missing)
        named = ", ".join(r if v is None else f"{r} (has {v})" for r, v in missing)
        raise ToolchainError(f"{flag} lacks build requirements of {recipe.package}: "
                             f"{named} (nothing is installed into an existing environment)",
                             hint=f"{python} -m pip install {quoted} (offline: add "
                                  "--no-index --find-links DIR_WITH_WHEELS)")
    return BuildPython(python, info["v"], info["cuda"], Path(info["lib"]), info["abi"])


def missing_requirements(python: Path, requirements: list[str]
                         ) -> list[tuple[str, str | None]]:
    """Those of ``requirements`` (PEP 508 strings) that ``python``'s environment doesn't
    satisfy, each with the version installed (None: not installed)."""
    reqs = [Requirement(r) for r in requirements]
    proc = subprocess.run([str(python), "-c", _DISTS_QUERY, *(r.name for r in reqs)],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise ToolchainError(f"could not list the packages of {python}: "
                             f"{proc.stderr.strip()[-400:]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    missing = []
    for text, req in zip(requirements, reqs):
        version = found.get(req.name)
        try:
            ok = version is not None and req.specifier.contains(Version(version),
                                                                prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            missing.append((text, version))
    return missing


_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


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
    wheel_headers = sorted(str(d) for d in python.parent.parent.glob(
        "lib/python3*/site-packages/nvidia/*/include"))
    if wheel_headers:
        full_env["CPATH"] = os.pathsep.join(
            [*filter(None, [os.environ.get("CPATH")]), *wheel_headers])
    return full_env


def compile_wheel(python: Path, tree: Path, env: dict[str, str], out_dir: Path, log: Path,
                  *, isolation: bool, on_line: Callable[[str], None] | None = None,
                  timeout: float = 6 * 3600, offline: bool = False,
                  path_prefix: tuple[str, ...] = ()) -> Path:
    """Run the package's own build (``pip wheel``) and return the unrepaired wheel.

    Every line goes to ``log``; ninja's ``[N/M]`` progress lines go to ``on_line``. A failure
    raises CompileError naming the file that failed, the exit status (137: OOM-killed) and the
    log. ``path_prefix`` goes first on PATH (the compiler cache's ``c++``); an inherited
    PYTHONPATH is dropped, one in ``env`` is kept.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = pip_wheel_command(python, tree, out_dir, isolation=isolation, offline=offline)
    full_env = build_process_env(python, env, first_on_path=tuple(map(Path, path_prefix)))
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


def check_kernels(wheel: Path, manifest: dict, *, cell: Cell, recipe: Recipe, python: Path,
                  pythonpath: tuple[Path, ...], work: Path, gpu_finder: GpuFinder = find_gpu,
                  device: str = "cuda", detail: dict | None = None) -> tuple[Path, dict]:
    """Run the recipe's kernel check with ``python`` (where ``wheel`` is installed) and return
    the wheel to publish (``<work>/checked``, its manifest holding the check's summary) with
    that summary. A failing or broken check raises VerifyError naming op, dtype, shape, error
    and tolerance, and nothing is written; no GPU, or no check in the recipe, is recorded as
    not run. ``detail`` (the step's report entry) receives the summary either way.
    """
    if recipe.check is None:
        result = {"verdict": "not run: the recipe has no kernel check", "results": []}
    else:
        result = run_check(recipe.check.path, python, workdir=work / "kernelcheck",
                           device=device, pythonpath=pythonpath, gpu_finder=gpu_finder)
    kept = summary(result)
    if detail is not None:
        detail.update(kernel_check=kept)
    raise_if_failed(result, what=wheel.name)
    checked, _ = record_kernel_check(wheel, manifest, kept, cell=cell, recipe=recipe,
                                     out_dir=work / "checked")
    return checked, kept


def _report_cache(setup: ccache.CompilerCache, step: Step, progress: Progress) -> None:
    """Put the build's cache hits and misses in the report, also after a failed compile (an
    unreadable stats log is noted, never hides the compile's own error)."""
    try:
        stats = ccache.read_stats(setup)
    except ToolchainError as exc:
        step.detail["cache"]["stats_error"] = str(exc)
        return
    step.detail["cache"].update(hits=stats.hits, direct_hits=stats.direct_hits,
                                preprocessed_hits=stats.preprocessed_hits, misses=stats.misses,
                                counters=stats.counters)
    progress.say(f"compiler cache: {stats.summary}")


def build_host(cell: Cell, recipe: Recipe, table: Table, *, archs: tuple[str, ...],
               work: Path, out_dir: Path, progress: Progress, sdist: Path | None,
               sdist_dir: Path | None, wheelhouse: Path | None, offline: bool,
               torch_index_override: str | None, python: Path | None = None,
               gpu_finder: GpuFinder = find_gpu, cache: bool = True,
               needed: tuple[Path, ...] = ()) -> Path:
    """The host backend: every step on this machine; returns the published wheel.

    ``python``: build against that existing interpreter's torch and build requirements, as
    they are (checked first; no venv, nothing installed). ``gpu_finder`` says which GPU the
    kernel check may use (none: the check is recorded as not run). ``cache`` compiles through
    ccache (``tools.pipeline.ccache``); its hits and misses go in the compile step's report.
    ``needed``: the wheels of the cells this one needs (``tools.builder.needs``), installed beside it
    for the import and kernel checks.
    """
    def existing(step: Step) -> BuildPython:
        bp = check_existing_python(python, cell, recipe, table)
        step.detail.update(python=str(bp.python), existing=True, torch=bp.torch_version,
                           torch_cuda=bp.torch_cuda, cxx11_abi=bp.cxx11_abi)
        return bp

    if python is not None:
        bp = progress.run("python", existing)

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

    def fresh_python(step: Step) -> BuildPython:
        bp = prepare_python(cell, recipe, table, work, wheelhouse=wheelhouse, offline=offline,
                            index_url=torch_index_override, log=work / "python.log")
        step.detail.update(torch=bp.torch_version, torch_cuda=bp.torch_cuda,
                           cxx11_abi=bp.cxx11_abi)
        return bp

    if python is None:
        bp = progress.run("python", fresh_python)

    sizing = size_for(recipe, archs, cores=usable_cores(), available_gib=available_memory_gib())
    env = build_env(recipe, cell, sizing, archs=archs, cuda_home=nvcc.cuda_home)

    def compile_(step: Step) -> Path:
        progress.say(f"sizing: {sizing.note}")
        progress.say("environment: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
        step.detail.update(env=env, sizing=asdict(sizing), log=str(work / "compile.log"))
        setup = ccache.prepare(work, site=ccache.site_packages(bp.python),
                               cuda_home=nvcc.cuda_home) if cache else None
        if setup:
            progress.say(f"compiler cache: ccache {setup.version} in {setup.directory} "
                         "(--no-cache builds without it)")
            step.detail["cache"] = setup.describe()
        else:
            step.detail["cache"] = {"tool": None, "why": "--no-cache"}
        last = [0.0]

        def on_line(line: str) -> None:
            now = time.monotonic()
            if now - last[0] > 5:
                last[0] = now
                counter = line.split("]", 1)[0] + "]"
                source = re.search(r"\s-c\s+(?:-c\s+)*(\S+)", line)  # torch may pass -c twice
                progress.say(f"compiling {counter} "
                             f"{Path(source.group(1)).name if source else line[len(counter):80]}")
        try:
            return compile_wheel(bp.python, prepared.tree,
                                 {**env, **(setup.env if setup else ccache.disabled_env())},
                                 work / "dist", work / "compile.log",
                                 isolation=recipe.build.isolation, on_line=on_line,
                                 offline=offline, path_prefix=setup.path_prefix if setup else ())
        finally:
            if setup:
                _report_cache(setup, step, progress)

    raw = progress.run("compile", compile_)
    final, manifest = finish_wheel(
        raw, cell=cell, recipe=recipe, archs=archs, torch_lib=bp.torch_lib,
        torch_version=bp.torch_version, torch_cuda=bp.torch_cuda, work=work, progress=progress,
        plat="auto", backend="host", nvcc=nvcc.path,
        manifest_extra={"existing_python": True} if python is not None else None)

    def verify(step: Step) -> tuple[Path, tuple[Path, ...]]:
        """The import smoke test; returns the Python and path the kernel check runs with."""
        if python is not None:
            seconds, site = smoke_test_existing(final, python=bp.python,
                                                torch_series=cell.torch,
                                                imports=recipe.imports, workdir=work / "smoke",
                                                extra_wheels=needed)
            step.detail.update(smoke_test="passed", imports=list(recipe.imports),
                               seconds=seconds, python=str(bp.python))
            return bp.python, (site,)
        index = torch_index_override or torch_index(cell, table)
        seconds = smoke_test(final, python=cell.python, torch_requirement=cell.torch_requirement,
                             torch_version=cell.torch_version, imports=recipe.imports,
                             workdir=work / "smoke", extra_index_urls=(index,) if index else (),
                             find_links=(wheelhouse,) if wheelhouse else (), offline=offline,
                             extra_wheels=needed)
        step.detail.update(smoke_test="passed", imports=list(recipe.imports), seconds=seconds)
        return smoke_venv(work / "smoke") / "bin" / "python", ()

    check_python, check_path = progress.run("verify", verify)

    def kernels(step: Step) -> Path:
        checked, kept = check_kernels(final, manifest, cell=cell, recipe=recipe,
                                      python=check_python, pythonpath=check_path,
                                      work=work, gpu_finder=gpu_finder, detail=step.detail)
        progress.say(f"kernel check: {kept['verdict']}"
                     + (f" on {kept['gpu']}" if kept.get("gpu") else ""))
        return checked

    checked = progress.run("kernels", kernels)
    return progress.run("publish", lambda step: publish(checked, out_dir, step))
