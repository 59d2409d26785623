"""The tools installed the ordinary way (not editable) work on a checkout's recipes."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tools import ROOT, find_root
from tools.pipeline.venvs import uv_bin

pytestmark = pytest.mark.network  # the pinned dependencies come from PyPI (uv's cache)


def test_find_root_prefers_the_environment_then_the_source_tree(tmp_path, monkeypatch):
    monkeypatch.setenv("CUWHEELS_ROOT", str(tmp_path))
    assert find_root() == tmp_path.resolve()
    monkeypatch.delenv("CUWHEELS_ROOT")
    assert find_root(tmp_path) == ROOT  # this checkout holds the package and the table


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A venv with the project installed from a wheel-like copy: site-packages, no .pth link."""
    work = tmp_path_factory.mktemp("install")
    # Built from a copy: setuptools writes build/ and *.egg-info into the tree it builds.
    source = work / "source"
    source.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", source / "pyproject.toml")
    shutil.copytree(ROOT / "tools", source / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    venv = work / "venv"
    subprocess.run([uv_bin(), "venv", "--quiet", "--python", sys.executable, str(venv)],
                   check=True, timeout=120)
    subprocess.run([uv_bin(), "pip", "install", "--quiet", "--python", str(venv / "bin/python"),
                    "--no-config", str(source)], check=True, timeout=600)
    return venv / "bin" / "python"


def test_installed_tools_read_the_checkout_they_run_in(installed, tmp_path):
    # A checkout without tools/: the package can only come from site-packages.
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copytree(ROOT / "recipes", checkout / "recipes")
    where = subprocess.run([str(installed), "-c", "import tools; print(tools.__file__, tools.ROOT)"],
                           cwd=checkout / "recipes", capture_output=True, text=True, check=True)
    module_file, root = where.stdout.split()
    assert "site-packages" in module_file
    assert root == str(checkout)  # found from a subdirectory, by walking up

    ids = subprocess.run([str(installed), "-m", "tools.matrix", "--format", "ids"], cwd=checkout,
                         capture_output=True, text=True, timeout=60)
    assert ids.returncode == 0, ids.stderr
    expected = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", "ids"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout
    assert ids.stdout == expected
    recipes = subprocess.run([str(installed), "-m", "tools.recipe"], cwd=checkout,
                             capture_output=True, text=True, timeout=60)
    assert recipes.returncode == 0, recipes.stderr


def test_installed_index_finds_its_templates(installed, tmp_path):
    # The page templates are package data, read next to the installed module; the C++ ABI of
    # each torch series comes from the checkout's table.
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    site = tmp_path / "site"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    proc = subprocess.run([str(installed), "-m", "tools.index", "--wheels-dir", str(wheels),
                           "--output-dir", str(site), "--base-url", "http://127.0.0.1/files",
                           "--ledger", str(tmp_path / "ledger.json"), "--init-ledger"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "<html" in (site / "index.html").read_text().lower()
    assert (site / "simple" / "index.html").is_file()
