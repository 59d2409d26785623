"""The contributor tutorial's example recipe (docs/contributing/example/torch_spline_conv) works.

The tutorial walks a new contributor through adding torch-spline-conv 1.2.2, a real PyG package
that is not one of recipes/. Its folder stays an example, outside recipes/, so these tests do
what the tutorial tells the contributor to do: copy it beside the real recipes, validate it,
list its cells, apply its patch to the real sdist, and (slow) probe its tutorial cell.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import ROOT
from tools.core.variant import DEFAULT_PLATFORM
from tools.kernels.check import declared_ops
from tools.pipeline.build_toolchain import find_nvcc
from tools.pipeline.source import prepare_source
from tools.plan.cells import plan, select
from tools.plan.recipes.model import load_all, load_recipe
from tools.plan.table import load_table

EXAMPLE = ROOT / "docs" / "contributing" / "example" / "torch_spline_conv"
#: The cell the tutorial builds: CUDA 13.0 (the toolkit the project provisions), Python 3.12,
#: the CUDA version's default torch (2.14, so no -torch part), Linux x86_64.
TUTORIAL_CELL = "torch_spline_conv-3.12-cu130"


@pytest.fixture
def recipes(tmp_path: Path) -> Path:
    """A copy of recipes/ with the example folder added, as the contributor's checkout holds it."""
    root = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", root)
    assert not (root / "torch_spline_conv").exists(), "the example must not be a real recipe"
    shutil.copytree(EXAMPLE, root / "torch_spline_conv")
    return root


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_the_validator_accepts_the_example_beside_every_recipe(recipes):
    """``python -m tools.recipe`` over every folder of the copy: the example is valid and builds
    no PyPI project another recipe builds."""
    folders = sorted(str(d) for d in recipes.iterdir() if (d / "recipe.yaml").is_file())
    done = _run("tools.recipe", *folders)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok  torch_spline_conv 1.2.2: CUDA 12.8, 13.0, 13.2" in done.stdout.splitlines()
    assert len([line for line in done.stdout.splitlines() if line.startswith("ok  ")]) == \
        len(folders)


def test_the_validator_names_a_broken_example(recipes):
    """The tutorial's first mistake, a check.py declared but missing, is named with its fix."""
    (recipes / "torch_spline_conv" / "check.py").unlink()
    done = _run("tools.recipe", str(recipes / "torch_spline_conv"))
    assert done.returncode != 0
    assert "check.file: check.py is declared but does not exist beside recipe.yaml" in done.stderr
    assert "fix: add the file or remove the check entry" in done.stderr


def test_the_matrix_lists_the_tutorials_cells(recipes):
    """``python -m tools.matrix --recipes DIR --package torch-spline-conv --cuda 13.0 --format
    ids``: the tutorial's cell, every Python of torch 2.11 to 2.14 (the CUDA 13.0 range), 2.14
    the default (no -torch part), and the same ids the plan gives in-process."""
    done = _run("tools.matrix", "--recipes", str(recipes), "--package", "torch-spline-conv",
                "--cuda", "13.0", "--format", "ids")
    assert done.returncode == 0, done.stderr
    ids = done.stdout.split()
    assert TUTORIAL_CELL in ids
    assert all(i.startswith("torch_spline_conv-") and "-cu130" in i for i in ids)
    table = load_table()
    series = [s for s in ("2.11", "2.12", "2.13") if "13.0" in table.torch[s].cuda]
    for s in series:
        assert f"torch_spline_conv-3.12-cu130-torch{s}" in ids
    assert not [i for i in ids if "-torch2.14" in i or "-torch2.10" in i or "-torch2.15" in i]
    want = select(plan(load_all(recipes, table), table), packages=["torch_spline_conv"],
                  cudas=["13.0"])
    assert sorted(ids) == sorted(c.id for c in want)
    # every Python the table gives torch 2.14 has a default-torch Linux x86_64 cell
    linux_default = {c.id for c in want if c.default_torch and c.platform == DEFAULT_PLATFORM}
    assert {c.torch for c in want if c.default_torch} == {"2.14"}
    assert linux_default == {f"torch_spline_conv-{py}-cu130" for py in table.torch["2.14"].python}


def test_the_examples_kernel_check_compiles_and_uses_every_op_it_declares():
    """The check the tutorial writes is held to the rule every recipe's check is held to
    (tests/test_kernelcheck.py): it compiles, declares its ops, and names each again."""
    path = EXAMPLE / "check.py"
    source = path.read_text()
    compile(source, str(path), "exec")
    ops = declared_ops(path)
    assert "spline_conv" in ops
    for op in ops:
        assert source.count(f'"{op}"') >= 2, f"{op} is declared but never used"


@pytest.mark.network
def test_the_patch_applies_to_the_real_sdist(recipes, tmp_path):
    """The source step downloads the registry's sdist, checks its sha256 and applies patch
    0001: setup.py then builds with ninja. The sdist ships its LICENSE (MIT), which the wheel
    must carry."""
    recipe = load_recipe(recipes / "torch_spline_conv")
    prepared = prepare_source(recipe, tmp_path / "work")
    assert prepared.patches == ("0001-Build-with-ninja.patch",)
    setup_py = (prepared.tree / "setup.py").read_text()
    assert "BuildExtension.with_options(no_python_abi_suffix=True)" in setup_py
    assert "use_ninja=False" not in setup_py
    license_text = (prepared.tree / "LICENSE").read_text()
    assert license_text.startswith("Copyright (c) 2020 Matthias Fey")
    assert "Permission is hereby granted, free of charge" in license_text  # the MIT licence


def _local_cell() -> str | None:
    """The tutorial's cell for the local nvcc's CUDA version (Python 3.12, default torch, Linux
    x86_64), or None where there is no nvcc or the example builds nothing for its CUDA."""
    try:
        cuda = find_nvcc().version
    except Exception:
        return None
    table = load_table()
    recipe = load_recipe(EXAMPLE, table)
    cells = select(plan([recipe], table), cudas=[cuda], pythons=["3.12"],
                   platforms=[DEFAULT_PLATFORM], default_torch_only=True)
    return cells[0].id if cells else None


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.network
@pytest.mark.timeout(2 * 3600)
def test_the_tutorials_probe(recipes, tmp_path):
    """``python -m tools.probe CELL --archs 90 --recipes DIR``: the heaviest CUDA and C++ units
    compile with the build's own command lines, and the recipe's job_memory_gib covers them."""
    cell = _local_cell()
    if cell is None:
        pytest.skip("no nvcc, or one of a CUDA version the example recipe doesn't build")
    work = tmp_path / "work"
    done = _run("tools.probe", cell, "--archs", "90", "--recipes", str(recipes), "--work",
                str(work), timeout=2 * 3600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads((work / cell / "probe" / "probe.json").read_text())
    assert report["verdict"] == "passed", report
    assert [u["unit"] for u in report["units"]] == ["csrc/cuda/weighting_cuda.cu",
                                                   "csrc/cpu/weighting_cpu.cpp"]
    assert all(u["ok"] for u in report["units"])
    assert report["supported_job_memory_gib"] <= report["recipe_job_memory_gib"], \
        report["memory_verdict"]
