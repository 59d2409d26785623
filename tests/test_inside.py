"""The commands run inside the builder image (``tools.backends.inside``, ``python -m
tools.incontainer``): the planned cell read from the staged ``cell.json``, the nvcc check and the
torch nvcc-check relaxation, run from a staged copy of the tools outside the repository (as in
the container)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.backends import containerized
from tools.backends import inside as incontainer
from tools.core.errors import PlanError, ToolchainError
from tools.plan.cells import find_cell
from tools.plan.job import BuildJob, Inputs


def _fake_nvcc(root: Path, release: str) -> Path:
    """A stand-in toolkit answering as CUDA ``release``: nvcc and the header that makes a
    directory a toolkit root (whatever this machine has at /usr/local/cuda, or hasn't)."""
    bin_dir = root / "cuda" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    nvcc = bin_dir / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    nvcc.chmod(0o755)
    (root / "cuda" / "include").mkdir(exist_ok=True)
    (root / "cuda" / "include" / "cuda_runtime.h").write_text("/* stand-in */\n")
    return root / "cuda"


@pytest.mark.parametrize("release,rc,says", [
    ("12.9", 0, "nvcc 12.9 at"),                          # the image matches the cell
    ("12.8", 0, "same major, so torch accepts it"),       # a minor difference: noted
    ("13.0", ToolchainError.exit_code, "refuses a different major"),  # wrong image: refused
])
def test_staged_tools_check_the_images_nvcc(world, tmp_path, release, rc, says):
    """What before-all runs in the container, run from the staged copy outside the repo."""
    table, recipes, cells = world()
    cell = find_cell("demo_ext-3.12-cu129", cells)
    recipe = next(r for r in recipes if r.package == "demo_ext")
    staged = containerized.assemble(BuildJob(cell, recipe, table), tmp_path / "work" / cell.id,
                                 Inputs(sdist=tmp_path / "sdists" / "demo_ext-1.0.0.tar.gz"))
    env = {**os.environ, "PYTHONPATH": str(staged.project / "cuwheels"),
           "CUDA_HOME": str(_fake_nvcc(tmp_path, release))}
    where = subprocess.run([sys.executable, "-c", "import tools; print(tools.__file__)"],
                           env=env, cwd=tmp_path, capture_output=True, text=True)
    assert where.stdout.strip() == str(staged.project / "cuwheels" / "tools" / "__init__.py")
    proc = subprocess.run([sys.executable, "-m", "tools.incontainer", "toolchain", "--cell-file",
                           str(staged.project / "cuwheels" / "cell.json")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == rc, proc.stderr
    assert says in proc.stdout + proc.stderr
    if rc == 0:   # the cell it names is the staged one
        assert f" for {cell.id}" in proc.stdout


def test_a_dependent_is_read_from_its_cell_file_without_the_recipes_it_depends_on(
        staged_dependent, tmp_path):
    """The staged copy holds the dependent's recipe alone: planning it there would fail (its
    dependency is no recipe there); the staged cell, with what it needs, is read instead."""
    planned, cell, staged = staged_dependent
    tools = staged.project / "cuwheels"
    read = incontainer.read_cell(tools / "cell.json")
    assert read == cell and read.needs_dist == ("demo-ext",)
    recipe, staged_table = incontainer.staged_recipe(read, tools / "recipes",
                                                     tools / "recipes" / "table.yaml")
    assert recipe.package == "dep_ext" and staged_table.cuda.keys() == planned.table.cuda.keys()
    env = {**os.environ, "PYTHONPATH": str(tools), "CUDA_HOME": str(_fake_nvcc(tmp_path, "13.0"))}
    proc = subprocess.run([sys.executable, "-m", "tools.incontainer", "toolchain", "--cell-file",
                           str(tools / "cell.json")], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"nvcc 13.0 at {tmp_path}/cuda/bin/nvcc for {cell.id}"


@pytest.mark.parametrize("text, says", [
    (None, "no planned cell there"),
    ("{not json", "not JSON"),
    ("[]", "a cell is a JSON object, not list"),
    ('{"package": "demo_ext"}', "not a planned cell (missing version, python"),
])
def test_a_missing_or_broken_cell_file_is_named(tmp_path, text, says):
    path = tmp_path / "cell.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(PlanError) as info:
        incontainer.read_cell(path)
    assert str(info.value).startswith(f"{path}: ") and says in str(info.value)
    assert info.value.hint


def test_a_cell_file_whose_id_its_fields_do_not_make_is_refused(world, tmp_path):
    _, _, cells = world()
    data = find_cell("demo_ext-3.12-cu129", cells).to_json()
    data["python"] = "3.11"           # edited by hand: the id still says 3.12
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError, match="id is 'demo_ext-3.12-cu129', but the cell's fields "
                                        "make 'demo_ext-3.11-cu129'"):
        incontainer.read_cell(path)


# --- CUDA newer than the torch build's: relaxed only where the table says so ---------------------
CHECK_213 = """\
        if cuda_ver.major != torch_cuda_version.major:
            raise RuntimeError(CUDA_MISMATCH_MESSAGE, cuda_str_version, torch.version.cuda)
        logger.warning(CUDA_MISMATCH_WARN, cuda_str_version, torch.version.cuda)
"""
CHECK_OLD = """\
        if cuda_ver.major != torch_cuda_version.major:
            raise RuntimeError(CUDA_MISMATCH_MESSAGE.format(cuda_str_version, torch.version.cuda))
        warnings.warn(CUDA_MISMATCH_WARN.format(cuda_str_version, torch.version.cuda))
"""


@pytest.mark.parametrize("source", [CHECK_213, CHECK_OLD])   # torch 2.13's form; torch 2.0-2.8's
def test_relax_turns_the_major_check_into_the_minor_warning(source):
    relaxed = incontainer.relax_nvcc_check(source)
    assert "        if False:  # if cuda_ver.major" in relaxed
    assert incontainer.relax_nvcc_check(relaxed) == relaxed               # idempotent
    compile(relaxed.replace("        ", "", 1).replace("\n        ", "\n"), "x", "exec")


def test_relax_refuses_a_torch_without_the_check():
    with pytest.raises(ToolchainError, match="0 copies of the nvcc check"):
        incontainer.relax_nvcc_check("def _check_cuda_version():\n    pass\n")


def test_relax_patches_the_torch_a_python_imports(tmp_path, monkeypatch):
    torch = tmp_path / "site" / "torch"
    (torch / "utils").mkdir(parents=True)
    (torch / "__init__.py").write_text("")
    (torch / "utils" / "cpp_extension.py").write_text("def check():\n" + CHECK_213)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    changed = incontainer.relax_installed(sys.executable)
    assert changed == torch / "utils" / "cpp_extension.py"
    assert "if False:" in changed.read_text()


def test_ccache_setup_points_the_build_python_at_the_fixed_torch(tmp_path, monkeypatch):
    """What before-build runs with the cache mounted, on a real (empty) venv: a .pth file in its
    site-packages makes the torch in the fixed directory importable from there, and ``c++``
    is a link to ccache in the bin directory PATH starts with."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")],
                   check=True, timeout=120)
    python = tmp_path / "venv" / "bin" / "python"
    torch_dir = tmp_path / "cuwheels-torch"
    (torch_dir / "torch").mkdir(parents=True)
    (torch_dir / "torch" / "__init__.py").write_text("")
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CCACHE_STATSLOG", str(tmp_path / "work" / "ccache-stats.log"))
    cache = incontainer.ccache_setup(str(python), torch_dir=torch_dir, work=tmp_path / "work")
    where = subprocess.run([str(python), "-c", "import torch; print(torch.__file__)"],
                           capture_output=True, text=True, timeout=120)
    assert where.stdout.strip() == str(torch_dir / "torch" / "__init__.py"), where.stderr
    link = tmp_path / "work" / "ccache-bin" / "c++"
    assert link.is_symlink() and os.readlink(link) == cache.ccache
    assert cache.directory == tmp_path / "cache" and cache.directory.is_dir()
    # nothing compiled through it yet: all zero
    assert incontainer.ccache.read_stats(cache).hits == 0
    # what `ccache stats` hands back to the host after the compile: the result file's figures
    line, result = incontainer.ccache_result()
    assert line.startswith("compiler cache: ")
    assert (result.ccache.hits, result.ccache.misses) == (0, 0)
    assert result.ccache.tool == f"ccache {cache.version}"
    assert result.ccache.dir == str(tmp_path / "cache") and result.shard is None


def test_ccache_setup_refuses_an_empty_torch_directory(tmp_path):
    with pytest.raises(ToolchainError, match="no torch in .*fixed torch directory is empty"):
        incontainer.ccache_setup(sys.executable, torch_dir=tmp_path, work=tmp_path / "w")
