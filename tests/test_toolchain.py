"""The toolchain every build shares (``tools.pipeline.build_toolchain``): nvcc found with its toolkit
(this machine's, else the CUDA 13.0 toolkit from PyPI in the cache) and checked against a cell's
CUDA, and the environment of the package's own build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_cudakit import fake_parts
from tools.core.errors import ToolchainError
from tools.hostplat import linux, windows
from tools.pipeline import cudakit, build_toolchain
from tools.pipeline.cudakit import WHEELS_ENV, toolkit_home
from tools.pipeline.build_toolchain import (Nvcc, build_process_env, check_nvcc, find_nvcc,
                                      pip_wheel_command)
from tools.plan.cells import cells_for
from tools.plan.recipes.model import load_recipe


def test_find_nvcc_finds_the_toolkit_root():
    nvcc = find_nvcc()
    assert nvcc.version.count(".") == 1
    # the root holds the headers torch's extension builder needs
    assert (Path(nvcc.cuda_home) / "include" / "cuda_runtime.h").is_file()


def test_find_nvcc_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(build_toolchain, "DEFAULT_CUDA_HOME", tmp_path / "cuda")
    with pytest.raises(ToolchainError, match=rf"nvcc was not found with its toolkit \(looked in "
                                             rf"\$CUDA_HOME \({tmp_path}\), {tmp_path}/cuda, "
                                             r"PATH;") as info:
        find_nvcc({"CUDA_HOME": str(tmp_path), "PATH": str(tmp_path)}, pypi=False)
    assert "set CUDA_HOME" in info.value.hint


@pytest.fixture
def bare_machine(tmp_path, monkeypatch):
    """The environment of a machine with no CUDA toolkit (no CUDA_HOME, no /usr/local/cuda, no
    nvcc on PATH) whose cache is tmp_path/cache."""
    monkeypatch.setattr(build_toolchain, "DEFAULT_CUDA_HOME", tmp_path / "no-cuda")
    monkeypatch.setattr(build_toolchain, "_ANNOUNCED", set())
    monkeypatch.setattr(build_toolchain, "_UNAVAILABLE", {})
    (tmp_path / "bin").mkdir()
    return {"PATH": str(tmp_path / "bin"), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def test_with_no_toolkit_the_one_from_pypi_in_the_cache_is_used_and_said(bare_machine,
                                                                         tmp_path, capsys):
    """A cache holding the toolkit from PyPI (here one assembled from small wheels of its shape,
    marked as the real pins): the fallback takes it, and says so once."""
    wheels = tmp_path / "wheels"
    fake_parts(wheels)
    home = toolkit_home(bare_machine)
    cudakit.assemble(sorted(wheels.glob("*.whl")), home)
    (home / cudakit.MARKER).write_text(cudakit.marker_text())
    assert find_nvcc(bare_machine) == Nvcc(str(home / "bin" / "nvcc"), "13.0", str(home))
    err = capsys.readouterr().err
    assert err == (f"no CUDA toolkit found (looked in $CUDA_HOME (unset), {tmp_path}/no-cuda, "
                   f"PATH): using CUDA 13.0 from PyPI's nvidia packages at {home}\n")
    find_nvcc(bare_machine)
    assert capsys.readouterr().err == ""   # said once per process


def test_with_no_toolkit_and_no_way_to_get_one_both_are_said(bare_machine, tmp_path):
    environ = {**bare_machine, WHEELS_ENV: str(tmp_path / "bin")}   # a folder without wheels
    with pytest.raises(ToolchainError) as info:
        find_nvcc(environ)
    assert info.value.message.startswith("nvcc was not found with its toolkit (looked in "
                                         "$CUDA_HOME (unset)")
    assert "the CUDA 13.0 toolkit from PyPI's nvidia packages could not be installed: " \
           f"downloading the CUDA 13.0 toolkit's 10 wheels from the folder {tmp_path / 'bin'}" \
           in info.value.message
    assert info.value.hint.startswith("put the wheels of nvidia-cuda-nvcc==13.0.88")
    assert info.value.hint.endswith("or install the CUDA toolkit matching the cell's CUDA major "
                                    "version and set CUDA_HOME, or use --backend container")
    assert not toolkit_home(environ).exists()
    # tried once per process: the next step is told the same, without running pip again
    with pytest.raises(ToolchainError) as again:
        find_nvcc(environ)
    assert again.value is info.value


@pytest.mark.network
@pytest.mark.cuda
def test_with_no_toolkit_the_real_one_from_pypi_is_found(tmp_path, monkeypatch):
    """This machine's cache holds the real toolkit (installed the first time, from PyPI):
    what a build on a machine without CUDA compiles with."""
    monkeypatch.setattr(build_toolchain, "DEFAULT_CUDA_HOME", tmp_path / "no-cuda")
    environ = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "PATH")}
    nvcc = find_nvcc({**environ, "PATH": str(tmp_path)})
    assert (nvcc.version, nvcc.cuda_home) == ("13.0", str(toolkit_home()))
    assert (Path(nvcc.cuda_home) / "include" / "cuda_runtime.h").is_file()


def test_find_nvcc_takes_the_toolkit_root_not_a_wrapper_s_folder(tmp_path, monkeypatch):
    """An nvcc on PATH outside its toolkit (a wrapper script): the toolkit root is the folder
    whose include/ holds cuda_runtime.h, here the default one."""
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.9, V12.9.41'\n")
    wrapper.chmod(0o755)
    toolkit = tmp_path / "toolkit"
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "include" / "cuda_runtime.h").write_text("")
    monkeypatch.setattr(build_toolchain, "DEFAULT_CUDA_HOME", toolkit)
    assert find_nvcc({"PATH": str(wrapper.parent)}) == Nvcc(str(wrapper), "12.9", str(toolkit))


def test_find_nvcc_takes_nvcc_exe_on_windows(tmp_path, monkeypatch):
    """A Windows toolkit's compiler is bin/nvcc.exe (run here as the script it is)."""
    monkeypatch.setattr(build_toolchain, "DEFAULT_CUDA_HOME", tmp_path / "no-cuda")
    home = tmp_path / "CUDA" / "v13.0"
    (home / "include").mkdir(parents=True)
    (home / "include" / "cuda_runtime.h").write_text("")
    (home / "bin").mkdir()
    nvcc = home / "bin" / "nvcc.exe"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    environ = {"CUDA_HOME": str(home), "PATH": str(tmp_path / "empty")}
    assert find_nvcc(environ, pypi=False, host=windows) == Nvcc(str(nvcc), "13.0", str(home))
    with pytest.raises(ToolchainError, match="nvcc was not found"):
        find_nvcc(environ, pypi=False, host=linux)   # Linux's bin/nvcc is not there


@pytest.fixture
def cells(write_recipe, good_recipe, mini_table):
    return {c.id: c for c in cells_for(load_recipe(write_recipe(good_recipe), mini_table),
                                       mini_table)}


def test_check_nvcc(cells):
    cu130 = cells["demo_ext-3.12-cu130"]
    assert check_nvcc(Nvcc("/x/nvcc", "13.0", "/x"), cu130) is None
    assert "same major" in check_nvcc(Nvcc("/x/nvcc", "13.2", "/x"), cu130)
    with pytest.raises(ToolchainError, match="needs CUDA 12.9, but nvcc at /x/nvcc is CUDA 13.0"):
        check_nvcc(Nvcc("/x/nvcc", "13.0", "/x"), cells["demo_ext-3.12-cu129"])


def test_pip_wheel_command_without_isolation_and_offline(tmp_path):
    python, tree, out = tmp_path / "python", tmp_path / "tree", tmp_path / "dist"
    assert pip_wheel_command(python, tree, out, isolation=True) == [
        str(python), "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--isolated", "-v",
        "-w", str(out), str(tree)]
    both = pip_wheel_command(python, tree, out, isolation=False, offline=True)
    assert both[4:6] == ["--no-index", "--no-build-isolation"]


def test_build_env_adds_the_torch_wheels_cuda_headers_after_every_include(tmp_path, monkeypatch):
    """A toolkit of nvcc alone lacks cusparse.h, which torch's ATen/cuda headers include; the
    torch wheel's nvidia packages carry it. CPATH comes after every -I, so a full toolkit wins."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    headers = venv / "lib" / "python3.11" / "site-packages" / "nvidia" / "cu13" / "include"
    headers.mkdir(parents=True)
    monkeypatch.setenv("CPATH", "/opt/mine/include")
    env = build_process_env(venv / "bin" / "python", {"CUDA_HOME": "/usr/local/cuda"})
    assert env["CPATH"].split(":") == ["/opt/mine/include", str(headers)]
    assert env["PATH"].split(":")[:2] == [str(venv / "bin"), "/usr/local/cuda/bin"]
    monkeypatch.delenv("CPATH")
    bare = tmp_path / "bare" / "bin"
    bare.mkdir(parents=True)
    assert "CPATH" not in build_process_env(bare / "python", {})


# ---- python -m tools.toolchain: what .ci/run runs before the tests -----------------------------

def test_the_command_prints_the_toolkit_root_and_each_python(capsys):
    from tools.toolchain import main
    here = "%d.%d" % sys.version_info[:2]
    assert main(["cuda-home"]) == 0
    root = Path(capsys.readouterr().out.strip())
    assert (root / "bin" / "nvcc").is_file() and (root / "include" / "cuda_runtime.h").is_file()
    assert main(["python", here, here]) == 0
    first, second = capsys.readouterr().out.split()
    assert first == second and subprocess.run(
        [first, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True,
        text=True).stdout.strip() == here


def test_the_command_says_where_it_looked_for_a_missing_python(capsys):
    from tools.toolchain import main
    assert main(["python", "3.2", "--no-install"]) == ToolchainError.exit_code
    err = capsys.readouterr().err
    assert err.startswith("toolchain error: Python 3.2 is not installed on this machine; "
                          "looked in:\n  - PATH: ")
    assert "  - uv python install 3.2: not tried (" in err


def test_a_cached_build_reaches_the_wheels_cuda_headers_through_its_fixed_torch_path(tmp_path):
    """With the compiler cache, the build's PYTHONPATH is the fixed torch path (a link to the
    venv's site-packages): CPATH names the headers through it, so a unit's line markers don't
    name lib/python3.X and read the same for every Python."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "nvidia" / "cu13" / "include").mkdir(parents=True)
    root = tmp_path / "work" / "torch-root"
    root.parent.mkdir()
    root.symlink_to(site, target_is_directory=True)
    env = build_process_env(venv / "bin" / "python", {"PYTHONPATH": str(root)})
    assert env["CPATH"].split(":")[-1] == str(root / "nvidia" / "cu13" / "include")
    # a PYTHONPATH that is not this venv's site-packages leaves the real path
    other = build_process_env(venv / "bin" / "python", {"PYTHONPATH": str(tmp_path)})
    assert other["CPATH"].split(":")[-1] == str(site / "nvidia" / "cu13" / "include")
