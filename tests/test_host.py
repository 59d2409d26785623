"""Host backend pieces that need no compile: nvcc discovery and checks, torch source, logs."""

from __future__ import annotations

import pytest

from tools.errors import ToolchainError
from tools.host import Nvcc, check_nvcc, failing_file, find_nvcc, torch_index
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


def test_torch_index(cells, mini_table):
    # mini table: torch 2.10's PyPI build is CUDA 13.0; torch 2.8's is 12.9
    assert torch_index(cells["demo_ext-3.12-cu130"], mini_table) is None
    assert torch_index(cells["demo_ext-3.12-cu129"], mini_table) is None
    assert torch_index(cells["demo_ext-3.12-cu130-torch2.9"], mini_table) == \
        "https://download.pytorch.org/whl/cu130"


@pytest.mark.parametrize("log,expect", [
    # ninja's target plus gcc's first error (header missing)
    ("  FAILED: [code=1] /b/temp/csrc/ext.o\n  /t/include/x.h:7:10: fatal error: cuda_runtime.h: "
     "No such file or directory\n", "ext.o (first error: /t/include/x.h:7: cuda_runtime.h"),
    # nvcc's error format
    ('FAILED: /b/k.o\ncsrc/k.cu(12): error: identifier "foo" is undefined\n',
     'k.o (first error: csrc/k.cu:12: identifier "foo" is undefined)'),
    # no ninja (setuptools' serial build)
    ("csrc/a.cpp:3:1: error: expected ';'\n", "csrc/a.cpp:3: expected ';'"),
    ("nothing useful\n", None),
])
def test_failing_file(log, expect):
    got = failing_file(log)
    assert (got is None) if expect is None else got.startswith(expect) or expect in got
