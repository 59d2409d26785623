"""The project installed the ordinary way (not editable): ``pip install .`` gives the selector and
nothing of the build farm; with the ``farm`` extra the tools work on a checkout's recipes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from index_support import build
from wheelfactory import make_wheel

from tools import ROOT, find_root
from tools.pipeline.venvs import uv_bin
from tools.sitegen.server import make_server

pytestmark = pytest.mark.network  # the pinned dependencies come from PyPI (pip's and uv's caches)

#: Modules of the build farm's tools (the ``farm`` extra), which ``pip install .`` must not bring.
FARM_MODULES = ("cibuildwheel", "auditwheel", "nox", "uv", "yaml", "jinja2")


def test_find_root_prefers_the_environment_then_the_source_tree(tmp_path, monkeypatch):
    monkeypatch.setenv("CUWHEELS_ROOT", str(tmp_path))
    assert find_root() == tmp_path.resolve()
    monkeypatch.delenv("CUWHEELS_ROOT")
    assert find_root(tmp_path) == ROOT  # this checkout holds the package and the table


def _isolated_env() -> dict[str, str]:
    """This environment without what would put a checkout's ``tools`` on the import path, so that
    an installed command can only use what the install put in site-packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CUWHEELS_ROOT")}


def _source_copy(work: Path) -> Path:
    """What an install builds from: pyproject.toml and the package, copied, because setuptools
    writes build/ and *.egg-info into the tree it builds."""
    source = work / "source"
    source.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", source / "pyproject.toml")
    shutil.copytree(ROOT / "tools", source / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    return source


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A venv with the project and its farm installed from a wheel-like copy: site-packages, no .pth link."""
    work = tmp_path_factory.mktemp("install")
    source = _source_copy(work)
    venv = work / "venv"
    subprocess.run([uv_bin(), "venv", "--quiet", "--python", sys.executable, str(venv)],
                   check=True, timeout=120)
    subprocess.run([uv_bin(), "pip", "install", "--quiet", "--python", str(venv / "bin/python"),
                    "--no-config", f"cuwheels-tools[farm] @ {source.as_uri()}"], check=True, timeout=600)
    return venv / "bin" / "python"


def test_installed_tools_read_the_checkout_they_run_in(installed, tmp_path):
    # A checkout without tools/: the package can only come from site-packages.
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copytree(ROOT / "recipes", checkout / "recipes")
    where = subprocess.run([str(installed), "-c", "import tools; print(tools.__file__, tools.ROOT)"],
                           cwd=checkout / "recipes", env=_isolated_env(), capture_output=True, text=True,
                           check=True)
    module_file, root = where.stdout.split()
    assert "site-packages" in module_file
    assert root == str(checkout)  # found from a subdirectory, by walking up

    ids = subprocess.run([str(installed), "-m", "tools.matrix", "--format", "ids"], cwd=checkout,
                         env=_isolated_env(), capture_output=True, text=True, timeout=60)
    assert ids.returncode == 0, ids.stderr
    expected = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", "ids"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout
    assert ids.stdout == expected
    recipes = subprocess.run([str(installed), "-m", "tools.recipe"], cwd=checkout,
                             env=_isolated_env(), capture_output=True, text=True, timeout=60)
    assert recipes.returncode == 0, recipes.stderr


def test_installed_index_finds_its_templates(installed, tmp_path):
    # The page templates are package data, read next to the installed module; the C++ ABI of
    # each torch series comes from the checkout's table.
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    site = tmp_path / "site"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    proc = subprocess.run([str(installed), "-m", "tools.index", "--wheels", str(wheels),
                           "--site", str(site), "--base-url", "http://127.0.0.1/files",
                           "--ledger", str(tmp_path / "ledger.json"), "--init-ledger"],
                          cwd=tmp_path, env=_isolated_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "<html" in (site / "index.html").read_text().lower()
    assert (site / "simple" / "index.html").is_file()


@pytest.fixture(scope="module")
def selector_only(tmp_path_factory):
    """A bare venv (``python -m venv``) after a plain ``pip install <copy of the repository>``,
    and the environment its commands run with: nothing of this checkout on the import path."""
    work = tmp_path_factory.mktemp("selector")
    source = _source_copy(work)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = _isolated_env()
    # pip's own cache: after the first run, the only download (packaging) is a cache hit.
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(source)],
                   check=True, timeout=600, cwd=work, env=env)
    return venv / "bin", env


def test_pip_install_brings_the_selector_and_nothing_of_the_farm(selector_only):
    bin_dir, env = selector_only
    listed = subprocess.run([str(bin_dir / "python"), "-m", "pip", "list", "--format", "json"],
                            capture_output=True, text=True, check=True, env=env, timeout=120)
    # The selector's one dependency and nothing else (pip, and setuptools where venv still adds it).
    names = {d["name"].lower() for d in json.loads(listed.stdout)} - {"pip", "setuptools"}
    assert names == {"cuwheels-tools", "packaging"}
    importable = subprocess.run(
        [str(bin_dir / "python"), "-c", "import importlib.util, sys; "
         "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))", *FARM_MODULES],
        capture_output=True, text=True, check=True, env=env, timeout=60)
    assert importable.stdout.split() == []


def test_installed_selector_answers_from_a_served_index(selector_only, tmp_path):
    bin_dir, env = selector_only
    select = str(bin_dir / "cuwheels-select")
    helped = subprocess.run([select, "--help"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert helped.returncode == 0, helped.stderr
    assert "usage: cuwheels-select" in helped.stdout
    detected = subprocess.run([select, "--detect", "--json"], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)
    assert detected.returncode == 0, detected.stderr
    assert json.loads(detected.stdout)["python"].startswith(f"{sys.version_info[0]}.{sys.version_info[1]}.")

    found = {"demo_ext_cuda.cpython-311-x86_64-linux-gnu.so": {"sass": ["90"], "ptx": []}}
    wheel = make_wheel(tmp_path / "wheels", "demo-ext", "1.2.0", local="cu128.torch2.8",
                       tag="cp311-cp311-manylinux_2_28_x86_64",
                       manifest={"cuda": "12.8", "torch": "2.8.0", "cxx11_abi": True,
                                 "archs": {"requested": ["90"], "found": found}})
    assert not build(tmp_path, base_url="/files").rejected
    server = make_server(tmp_path / "site", tmp_path / "wheels")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        # Every fact given, so that the answer is the same on any machine.
        answer = subprocess.run(
            [select, "demo-ext", "--index", server.url + "/", "--json", "--python-version", "3.11",
             "--machine", "x86_64", "--glibc", "2.36", "--torch-version", "2.8.0+cu128", "--cxx11-abi", "1",
             "--cuda-driver", "570.86.10", "--sm", "90"],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert answer.returncode == 0, answer.stdout + answer.stderr
    doc = json.loads(answer.stdout)
    assert doc["fits"] is True and doc["filename"] == wheel.name
    assert doc["pip"] == (f'pip install "demo-ext==1.2.0+cu128.torch2.8" --extra-index-url '
                          f"{server.url}/cu128/torch2.8/simple/")
