"""The toolchain every build shares (``tools.pipeline.toolchain``): nvcc found with its toolkit
and checked against a cell's CUDA, and the environment of the package's own build."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.core.errors import ToolchainError
from tools.pipeline import toolchain
from tools.pipeline.toolchain import (Nvcc, build_process_env, check_nvcc, find_nvcc,
                                      pip_wheel_command)
from tools.plan.matrix import cells_for
from tools.plan.recipe import load_recipe


def test_find_nvcc_finds_the_toolkit_root():
    nvcc = find_nvcc()
    assert nvcc.version.count(".") == 1
    # the root holds the headers torch's extension builder needs
    assert (Path(nvcc.cuda_home) / "include" / "cuda_runtime.h").is_file()


def test_find_nvcc_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(toolchain, "DEFAULT_CUDA_HOME", tmp_path / "cuda")
    with pytest.raises(ToolchainError, match="nvcc was not found"):
        find_nvcc({"CUDA_HOME": str(tmp_path), "PATH": str(tmp_path)})


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
    monkeypatch.setattr(toolchain, "DEFAULT_CUDA_HOME", toolkit)
    assert find_nvcc({"PATH": str(wrapper.parent)}) == Nvcc(str(wrapper), "12.9", str(toolkit))


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
