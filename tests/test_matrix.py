"""The matrix planner: cells, ids, filters, changed-recipe selection, GitHub JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools import ROOT
from tools.errors import PlanError
from tools.matrix import cells_for, changed_packages, find_cell, plan, select
from tools.recipe import load_recipe
from tools.table import load_table


@pytest.fixture
def demo_cells(write_recipe, good_recipe, mini_table):
    return cells_for(load_recipe(write_recipe(good_recipe), mini_table), mini_table)


def test_cells_and_ids(demo_cells):
    ids = [c.id for c in demo_cells]
    # CUDA 12.9: torch 2.8 (default) x 3.10-3.13; CUDA 13.0: 2.10 (default) and 2.9 x 3.10-3.14
    assert len(ids) == 4 + 5 + 5 == len(set(ids))
    assert "demo_ext-3.12-cu129" in ids
    assert "demo_ext-3.12-cu130" in ids            # default torch 2.10: the plain name
    assert "demo_ext-3.12-cu130-torch2.9" in ids   # the other torch: reachable by suffix
    cell = next(c for c in demo_cells if c.id == "demo_ext-3.12-cu130")
    assert (cell.torch, cell.torch_version, cell.label) == ("2.10", "2.10.0", "cu130.torch2.10")
    assert cell.image == "pytorch/manylinux2_28-builder:cuda13.0"
    assert cell.archs == ("80", "90")


def test_select_filters(demo_cells):
    assert {c.python for c in select(demo_cells, pythons=["3.14"])} == {"3.14"}
    assert {c.cuda for c in select(demo_cells, cudas=["129"])} == {"12.9"}
    assert len(select(demo_cells, cudas=["13.0"], torches=["2.9"])) == 5


def test_find_cell_names_near_misses(demo_cells):
    with pytest.raises(PlanError) as info:
        find_cell("demo_ext-3.12-cu118", demo_cells)
    assert "demo_ext-3.12-cu129" in str(info.value)


@pytest.mark.parametrize("paths,expect", [
    (["recipes/flash_attn/recipe.yaml"], {"flash_attn"}),                       # a recipe edit
    (["recipes/mamba_ssm/patches/0001-x.patch", "README.md"], {"mamba_ssm"}),  # a patch
    (["tools/build.py", "README.md"], set()),                                   # no recipe
    (["recipes/table.yaml"], {"flash_attn", "mamba_ssm", "xformers"}),          # shared facts
    (["recipes/unknown_pkg/recipe.yaml"], set()),                               # deleted recipe
])
def test_changed_packages(paths, expect):
    assert changed_packages(paths, {"flash_attn", "mamba_ssm", "xformers"}) == expect


def test_every_planned_cell_is_allowed_by_the_table():
    table = load_table()
    cells = plan()
    assert cells
    for c in cells:
        t = table.torch[c.torch]
        assert c.python in t.python and c.cuda in t.cuda, c.id
        assert set(c.archs) <= set(table.cuda[c.cuda].archs), c.id
    assert any(c.id == "flash_attn-3.12-cu129" for c in cells)
    assert any(c.id == "causal_conv1d-3.11-cu130" for c in cells)


def _run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "tools.matrix", *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_github_matrix_from_a_fake_diff():
    proc = _run("--format", "github", "--changed-files", "-",
                stdin="recipes/causal_conv1d/recipe.yaml\ntools/index.py\n")
    assert proc.returncode == 0, proc.stderr
    matrix = json.loads(proc.stdout)
    assert set(matrix) == {"include"} and matrix["include"]
    assert {row["package"] for row in matrix["include"]} == {"causal_conv1d"}
    for row in matrix["include"]:
        assert row["id"].startswith("causal_conv1d-")
        assert all(isinstance(v, (str, bool, list)) for v in row.values())


def test_cap_says_so():
    proc = _run("--format", "ids", "--package", "flash_attn", "--cap", "2")
    assert proc.returncode == 0
    assert len(proc.stdout.split()) == 2 and "capped:" in proc.stderr


def test_changed_since_a_git_ref(tmp_path):
    """A real git history: a commit touching one recipe yields only that recipe's cells."""
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(repo)], check=True,
                   timeout=120)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "pr"], check=True)
    recipe = repo / "recipes" / "xformers" / "recipe.yaml"
    recipe.write_text(recipe.read_text() + "\n# touched\n")
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qam", "touch"], check=True)
    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--changed-since", "HEAD~1",
                           "--format", "ids"], cwd=repo, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo)})
    assert proc.returncode == 0, proc.stderr
    ids = proc.stdout.split()
    assert ids and all(i.startswith("xformers-") for i in ids)


def test_unknown_package_is_refused():
    proc = _run("--package", "flash-attn")
    assert proc.returncode == PlanError.exit_code and "known:" in proc.stderr
