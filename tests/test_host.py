"""Host backend pieces that need no compile: the checks of an existing interpreter
(``--python``) against real environments (a CUDA torch, a CPU torch, one without a build
requirement), whose errors name the planned cell that would fit, the kernels step on a real
tinyext wheel, and the variables the compile of a Windows and a Linux cell gets. (nvcc discovery
and checks: tests/test_toolchain.py.)"""

from __future__ import annotations

import io
import re
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tinyext_support import TORCH_VERSION, cuda_torch_venv, shared_tinyext
from tools.pipeline import compile as compile_step, prelude, venvs as pyenv
from tools.core.errors import CompileError, ToolchainError, VerifyError
from tools.backends import host
from tools.backends.base import BuildOptions
from tools.backends.host import (Installed, check_existing_python, check_kernels,
                                 missing_requirements)
from tools.core.manifest import read_manifest
from tools.finish.checks import smoke_test_existing
from tools.finish.wheelmeta import set_version_and_pin
from tools.hostplat.windows import MSVC_CXX20
from tools.pipeline.report import Progress
from tools.pipeline.build_toolchain import BuildPython, Nvcc
from tools.plan.cells import cells_for
from tools.plan.job import BuildJob
from tools.plan.recipes.model import Recipe, load_recipe
from tools.plan.table import load_table


# ---- --python: an existing interpreter, checked before anything compiles ----------------------

def _cpu_torch_links() -> tuple[tuple[Path, ...], tuple[str, ...]]:
    """Where a CPU build of torch 2.13.0 for Python 3.11 comes from on this machine: a local
    wheel directory holding one (the development machines have /opt/wheels), else PyTorch's
    CPU index."""
    local = Path("/opt/wheels")
    if list(local.glob("torch-2.13.0+cpu-cp311-*.whl")):
        return (local,), ()
    return (), ("https://download.pytorch.org/whl/cpu",)


@pytest.fixture(scope="module")
def envs(tmp_path_factory):
    """Real environments: CUDA 13.0 torch with tinyext's build requirements; the same torch
    without ninja; a CPU build of torch."""
    root = tmp_path_factory.mktemp("envs")
    cuda = cuda_torch_venv(root / "cuda")
    bare = pyenv.create_venv(root / "no-ninja", "3.11", seed=True)
    pyenv.install(bare, [f"torch=={TORCH_VERSION}", "setuptools", "wheel"],
                  log=root / "no-ninja.log")
    cpu = pyenv.create_venv(root / "cpu", "3.11", seed=True)
    links, indexes = _cpu_torch_links()
    pyenv.install(cpu, [f"torch=={TORCH_VERSION}+cpu"], find_links=links,
                  extra_index_urls=indexes, log=root / "cpu.log")
    return {"cuda": cuda, "no-ninja": bare, "cpu": cpu}


@pytest.fixture
def real_recipe(tmp_path):
    """A tinyext-like recipe against the real table: torch 2.13 for CUDA 12.6 and 13.0."""
    def make(check: str | None = None, **changes) -> Recipe:
        data = {
            "schema": 1, "package": "tinyext", "summary": "Test fixture: a tiny extension",
            "source": {"pypi": "tinyext", "version": "0.1.0", "sdist": "tinyext-0.1.0.tar.gz",
                       "sha256": "a" * 64,
                       "url": "https://files.example.invalid/tinyext-0.1.0.tar.gz"},
            "imports": ["tinyext_cuda", "tinyext"], "python": ">=3.10",
            "cuda": {"12.6": {"torch": ["2.13"], "reason": "another CUDA major than torch's"},
                     "13.0": {"torch": ["2.14", "2.13"], "reason": "the registry's builds"}},
            "archs": {"*": ["90"]},
            "arch_env": {"name": "TINYEXT_CUDA_ARCHS", "style": "plain",
                         "reason": "setup.py turns it into -gencode flags"},
            "env": {},
            "build": {"isolation": False, "job_memory_gib": 1.5,
                      "job_memory_reason": "measured: about 1.2 GiB per job",
                      "requires": [{"requirement": "ninja", "reason": "parallel compiles"},
                                   {"requirement": "setuptools", "reason": "build backend"}]},
        }
        data.update(changes)
        folder = tmp_path / "recipes" / "tinyext"
        folder.mkdir(parents=True, exist_ok=True)
        if check is not None:
            (folder / "check.py").write_text(check)
            data["check"] = {"file": "check.py", "reason": "the kernel check under test"}
        (folder / "recipe.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        return load_recipe(folder, load_table())
    return make


def _cell(recipe: Recipe, cell_id: str):
    return next(c for c in cells_for(recipe, load_table()) if c.id == cell_id)


def _plan(recipe: Recipe) -> tuple:
    """The plan of the one recipe: the cells an interpreter's errors may name."""
    return tuple(cells_for(recipe, load_table()))


@pytest.mark.network
def test_existing_python_that_fits(envs, real_recipe):
    recipe = real_recipe()
    bp = check_existing_python(envs["cuda"], _cell(recipe, "tinyext-3.11-cu130-torch2.13"),
                               recipe, load_table(), cells=_plan(recipe))
    assert bp.python == envs["cuda"] and bp.torch_version.startswith("2.13.0")
    assert bp.torch_cuda.startswith("13.") and (bp.torch_lib / "libc10.so").is_file()


@pytest.mark.network
@pytest.mark.parametrize("env, cell, changes, message, fix", [
    # the Python version comes first: an interpreter for another cell
    ("cuda", "tinyext-3.12-cu130-torch2.13", {}, "is Python 3.11; cell "
     "tinyext-3.12-cu130-torch2.13 is for Python 3.12", "tinyext-3.11-cu130-torch2.13"),
    ("cpu", "tinyext-3.11-cu130-torch2.13", {}, "has torch 2.13.0+cpu, a CPU build",
     "install a CUDA 13 build of torch 2.13"),
    ("cuda", "tinyext-3.11-cu126", {}, "built with CUDA 13.0; cell tinyext-3.11-cu126 is for "
     "CUDA 12.6", "build a cu13x cell"),
    # torch 2.13 where the cell builds for 2.14: the label and pin would lie
    ("cuda", "tinyext-3.11-cu130", {}, "cell tinyext-3.11-cu130 builds against torch 2.14",
     "build tinyext-3.11-cu130-torch2.13"),
    ("no-ninja", "tinyext-3.11-cu130-torch2.13", {}, "lacks build requirements of tinyext: "
     "ninja (nothing is installed", "-m pip install 'ninja'"),
    ("cuda", "tinyext-3.11-cu130-torch2.13",
     {"build": {"isolation": False, "job_memory_gib": 1.5, "job_memory_reason": "measured peak",
                "requires": [{"requirement": "setuptools>=999", "reason": "a future one"}]}},
     "lacks build requirements of tinyext: setuptools>=999 (has ", "'setuptools>=999'"),
    ("cuda", "tinyext-3.11-cu130-torch2.13",
     {"build": {"isolation": True, "job_memory_gib": 1.5, "job_memory_reason": "measured peak",
                "requires": []}},
     "builds with build isolation", "default venv backend"),
])
def test_existing_python_is_refused_with_a_named_reason(envs, real_recipe, env, cell, changes,
                                                        message, fix):
    recipe = real_recipe(**changes)
    with pytest.raises(ToolchainError) as info:
        check_existing_python(envs[env], _cell(recipe, cell), recipe, load_table(),
                              cells=_plan(recipe))
    assert f"--interpreter {envs[env]}" in info.value.message
    assert message in info.value.message
    assert fix in (info.value.hint or "")


def test_an_interpreter_of_another_python_names_its_planned_cell(real_recipe):
    """The interpreter running these tests is refused for a cell of another Python; the fix
    names the cell of the same plan that fits it, and none without a plan."""
    recipe = real_recipe()
    cells, here = _plan(recipe), "%d.%d" % sys.version_info[:2]
    fits = next(c for c in cells if c.python == here and c.id.endswith("-cu130-torch2.13"))
    other = next(c for c in cells if c.python != here and c.id.endswith("-cu130-torch2.13"))
    with pytest.raises(ToolchainError) as info:
        check_existing_python(Path(sys.executable), other, recipe, load_table(), cells=cells)
    assert f"is Python {here}; cell {other.id} is for Python {other.python}" in str(info.value)
    assert info.value.hint == (f"build the cell of that interpreter ({fits.id}) or give a "
                               f"Python {other.python} interpreter")
    with pytest.raises(ToolchainError) as info:
        check_existing_python(Path(sys.executable), other, recipe, load_table())
    assert info.value.hint == f"give a Python {other.python} interpreter"


def test_existing_python_that_is_not_there(tmp_path, real_recipe):
    recipe = real_recipe()
    with pytest.raises(ToolchainError, match="no executable interpreter there"):
        check_existing_python(tmp_path / "bin" / "python",
                              _cell(recipe, "tinyext-3.11-cu130-torch2.13"), recipe,
                              load_table())


@pytest.mark.network
def test_missing_requirements_reads_versions_in_that_environment(envs):
    assert missing_requirements(envs["cuda"], ["ninja", "setuptools>=1", "pip"]) == []
    (ninja, none), (wheel, version) = missing_requirements(envs["no-ninja"],
                                                           ["ninja", "wheel<0.1"])
    assert (ninja, none) == ("ninja", None)
    assert wheel == "wheel<0.1" and version and not version.startswith("0.0")


# ---- the kernels step, on a real tinyext wheel, with checks that run on CPU tensors ----------

KERNELCHECKS = Path(__file__).resolve().parent / "fixtures" / "kernelchecks"
#: A check calling the real extension on a CPU tensor, which its C++ code refuses.
CALLS_TINYEXT_ON_CPU = """OPS = ("add_one",)

def run(check):
    import tinyext
    x = check.torch.ones(4, device=check.device)
    check.compare("add_one", tinyext.add_one(x), x + 1, atol=0.0)
"""


@pytest.fixture(scope="module")
def finished_tinyext(tmp_path_factory):
    """The shared tinyext build labelled with a manifest, and unpacked for its build venv."""
    build = shared_tinyext(tmp_path_factory)
    root = tmp_path_factory.mktemp("finished")
    table = load_table()
    recipe = load_recipe(_write_plain_recipe(root), table)
    cell = _cell(recipe, "tinyext-3.11-cu130")
    final = set_version_and_pin(build.wheel, root / "final", label=cell.label,
                                torch_pin=cell.torch_pin, manifest={"cell": cell.id}, epoch=0)
    _, site = smoke_test_existing(final, python=build.python, torch_series="2.13",
                                  imports=("tinyext_cuda", "tinyext"), workdir=root / "smoke")
    return build.python, final, site


def _write_plain_recipe(root: Path) -> Path:
    folder = root / "recipes" / "tinyext"
    folder.mkdir(parents=True)
    (folder / "recipe.yaml").write_text(yaml.safe_dump({
        "schema": 1, "package": "tinyext", "summary": "Test fixture: a tiny extension",
        "source": {"pypi": "tinyext", "version": "0.1.0", "sdist": "tinyext-0.1.0.tar.gz",
                   "sha256": "a" * 64,
                   "url": "https://files.example.invalid/tinyext-0.1.0.tar.gz"},
        "imports": ["tinyext_cuda", "tinyext"], "python": ">=3.10",
        "cuda": {"13.0": {"torch": ["2.13"], "reason": "the registry's build"}},
        "archs": {"*": ["90"]},
        "arch_env": {"name": "TINYEXT_CUDA_ARCHS", "style": "plain",
                     "reason": "setup.py turns it into -gencode flags"},
        "env": {}, "build": {"isolation": False, "job_memory_gib": 1.5, "requires": [],
                             "job_memory_reason": "measured: about 1.2 GiB per job"}}))
    return folder


@pytest.mark.cuda
@pytest.mark.network
def test_a_passing_check_is_recorded_in_the_manifest_and_nothing_else_changes(
        finished_tinyext, real_recipe, tmp_path):
    python, final, site = finished_tinyext
    recipe = real_recipe(check=(KERNELCHECKS / "passing.py").read_text(),
                         cuda={"13.0": {"torch": ["2.13"], "reason": "the registry's build"}})
    cell = _cell(recipe, "tinyext-3.11-cu130")
    detail: dict = {}
    checked, kept = check_kernels(final, {"cell": cell.id}, cell=cell, recipe=recipe,
                                  installed=Installed(python, (site,)), work=tmp_path,
                                  device="cpu", detail=detail)
    assert kept["verdict"] == "passed" and kept["device"] == "cpu" and kept["compared"] == 5
    assert detail["kernel_check"] == kept
    assert checked.name == final.name and checked.parent == tmp_path / "checked"
    with zipfile.ZipFile(final) as before, zipfile.ZipFile(checked) as after:
        assert read_manifest(after) == {"cell": cell.id, "kernel_check": kept}
        changed = {i.filename for i in after.infolist()
                   if before.read(i.filename) != after.read(i.filename)}
        assert {n.rsplit("/", 1)[1] for n in changed} == {"cuwheels.json", "RECORD"}


@pytest.mark.cuda
@pytest.mark.network
@pytest.mark.parametrize("check, message", [
    ((KERNELCHECKS / "failing.py").read_text(),
     "blocked_matmul (last block dropped) float32 shape [64, 32]: abs_error"),
    (CALLS_TINYEXT_ON_CPU, "tinyext.add_one: expected a CUDA tensor"),
], ids=["beyond tolerance", "refused by the extension"])
def test_a_failing_or_broken_check_writes_no_wheel(finished_tinyext, real_recipe, tmp_path,
                                                   check, message):
    python, final, site = finished_tinyext
    recipe = real_recipe(check=check,
                         cuda={"13.0": {"torch": ["2.13"], "reason": "the registry's build"}})
    cell = _cell(recipe, "tinyext-3.11-cu130")
    detail: dict = {}
    with pytest.raises(VerifyError, match=re.escape(message)):
        check_kernels(final, {"cell": cell.id}, cell=cell, recipe=recipe,
                      installed=Installed(python, (site,)), work=tmp_path, device="cpu",
                      detail=detail)
    assert detail["kernel_check"]["verdict"] in ("failed", "error")
    assert not (tmp_path / "checked").exists()


# ---- the compile's variables: build_env's, for a Windows cell as for a Linux one -------------

#: Variables that would point MSVC's build at a Linux toolchain or give cl.exe GCC's flags.
LINUX_ONLY = ("CC", "CXX", "CUDAHOSTCXX", "CFLAGS", "LDFLAGS")


def _compile_env(monkeypatch, tmp_path, recipe: Recipe, cell) -> dict[str, str]:
    """The variables HostBackend hands the package's build for ``cell``, every step before the
    compile stood in for (nothing is installed or compiled)."""
    seen: dict[str, str] = {}

    def compile_wheel(build, env, log, **kwargs):
        seen.update(env)
        raise CompileError("stopped before compiling")

    class Prepared:
        tree, sdist, sha256, patches = tmp_path / "tree", tmp_path / "x.tar.gz", "a" * 64, ()

    # The prelude (toolchain, source, Python) stands in: this test is about the compile step.
    monkeypatch.setattr(prelude, "find_nvcc", lambda: Nvcc("nvcc", cell.cuda, "/cuda"))
    monkeypatch.setattr(prelude, "prepare_source", lambda *a, **k: Prepared())
    monkeypatch.setattr(prelude, "prepare_python", lambda *a, **k: BuildPython(
        tmp_path / "python", f"{cell.torch}.0", cell.cuda, tmp_path / "lib", cell.cxx11_abi))
    monkeypatch.setattr(compile_step, "available_memory_gib", lambda: 24.0)
    monkeypatch.setattr(compile_step, "usable_cores", lambda: 2)
    monkeypatch.setattr(compile_step, "compile_wheel", compile_wheel)
    options = BuildOptions(archs=cell.archs, out_dir=tmp_path / "out", work_root=tmp_path,
                           why="--backend host", cache=False)
    with pytest.raises(CompileError, match="stopped before compiling"):
        host.HostBackend().build(BuildJob(cell, recipe, load_table()), options=options,
                                 progress=Progress(cell.id, host.HOST_STEPS, stream=io.StringIO()))
    return seen


def test_the_compile_of_a_windows_cell_gets_the_msvc_variables(monkeypatch, tmp_path,
                                                                real_recipe):
    recipe = real_recipe()
    cells = {c.id: c for c in cells_for(recipe, load_table())}
    win = _compile_env(monkeypatch, tmp_path, recipe, cells["tinyext-3.11-cu130-win"])
    assert win["DISTUTILS_USE_SDK"] == "1" and win["CXXFLAGS"] == MSVC_CXX20
    assert win["TINYEXT_CUDA_ARCHS"] and win["CUDA_HOME"] == "/cuda"
    assert not set(LINUX_ONLY) & set(win)
    linux = _compile_env(monkeypatch, tmp_path, recipe, cells["tinyext-3.11-cu130"])
    assert not {"DISTUTILS_USE_SDK", "CXXFLAGS", *LINUX_ONLY} & set(linux)
    assert set(win) - {"DISTUTILS_USE_SDK", "CXXFLAGS"} == set(linux)
