"""Host backend pieces that need no compile: nvcc discovery and checks, torch source, logs."""

from __future__ import annotations

import pytest

from tools.errors import ToolchainError
from tools.host import Nvcc, check_nvcc, find_nvcc
from tools.matrix import cells_for
from tools.recipe import load_recipe


def test_find_nvcc_finds_the_toolkit_root():
    nvcc = find_nvcc()
    assert nvcc.version.count(".") == 1
    # the root holds the headers torch's extension builder needs
    from pathlib import Path
    assert (Path(nvcc.cuda_home) / "include" / "cuda_runtime.h").is_file()


def test_find_nvcc_missing(tmp_path, monkeypatch):
    import tools.host as host
    monkeypatch.setattr(host, "DEFAULT_CUDA_HOME", tmp_path / "cuda")
    with pytest.raises(ToolchainError, match="nvcc was not found"):
        find_nvcc({"CUDA_HOME": str(tmp_path), "PATH": str(tmp_path)})


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


def test_build_env_adds_the_torch_wheels_cuda_headers_after_every_include(tmp_path, monkeypatch):
    """A toolkit of nvcc alone lacks cusparse.h, which torch's ATen/cuda headers include; the
    torch wheel's nvidia packages carry it. CPATH comes after every -I, so a full toolkit wins."""
    from tools.host import build_process_env
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
