"""Every command the docs' Install page shows runs here, as a user would type it, against an
index served on 127.0.0.1: pip, uv (in a venv and in a project), poetry, pdm and the selector.

The page's command blocks are generated from the project's address (``tools/core/site.py``);
the test runs each block's text with that address replaced by the local server's, and fails
when the page shows a block no test here runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from index_support import build
from wheelfactory import make_wheel

from tools import ROOT
from tools.core import site
from tools.devtools import docpages
from tools.pipeline.venvs import uv_bin
from tools.sitegen.server import make_server

pytestmark = pytest.mark.network  # PyPI: pip's default index, and poetry and pdm themselves

INSTALL = ROOT / "docs" / "install" / "index.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
#: The package managers the page shows, at the versions checked here (run by uv, not installed).
POETRY = ["--from", "poetry==2.5.1", "poetry"]
# pdm 2.29.4 pulls hishel 2.0, which breaks it; 1.4.0 is the version it works with.
PDM = ["--from", "pdm==2.29.4", "--with", "hishel==1.4.0", "pdm"]
VERSION = "2.8.3.post2+cu130.torch2.14"


def blocks(page: Path) -> list[tuple[str, str]]:
    """The fenced blocks of a page that hold commands or configuration: (language, text)."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(page.read_text())
            if m.group(1) in ("bash", "sh", "toml")]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """flash-attn's wheel for CUDA 13.0 and torch 2.14 in an index on 127.0.0.1: (url, root)."""
    root = tmp_path_factory.mktemp("docsindex")
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}-cp{sys.version_info[0]}{sys.version_info[1]}-manylinux_2_28_x86_64"
    make_wheel(root / "wheels", "flash-attn", "2.8.3.post2", local="cu130.torch2.14", tag=tag)
    # the other machine the page answers for: Linux aarch64, Python 3.12
    make_wheel(root / "wheels", "flash-attn", "2.8.3.post2", local="cu130.torch2.14",
               tag="cp312-cp312-manylinux_2_28_aarch64")
    build(root, base_url="/files")
    server = make_server(root / "site", root / "wheels")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.url + "/", root
    finally:
        server.shutdown()
        server.server_close()


def local(text: str, url: str) -> str:
    """A block's text pointing at the local index instead of the project's."""
    assert site.INDEX_URL in text, "the block doesn't use the project's address"
    return text.replace(site.INDEX_URL, url)


def run_block(text: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{text}\n{proc.stdout}\n{proc.stderr}"
    return proc


def user_env(tmp_path: Path, *, venv: Path | None = None) -> dict[str, str]:
    """A user's shell: the venv (if any) activated, uv on PATH, shims for poetry and pdm."""
    shims = tmp_path / "shims"
    shims.mkdir(exist_ok=True)
    for name, argv in (("poetry", POETRY), ("pdm", PDM)):
        shim = shims / name
        shim.write_text(f'#!/bin/sh\nexec {uv_bin()} tool run {" ".join(argv)} "$@"\n')
        shim.chmod(0o755)
    path = [str(shims), str(Path(uv_bin()).parent), os.environ.get("PATH", "")]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}
    env.pop("VIRTUAL_ENV", None)
    if venv:
        path.insert(0, str(venv / "bin"))
        env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = os.pathsep.join(path)
    return env


def fresh_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    return venv


def installed(venv: Path) -> str:
    return subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import importlib.metadata as m; print(m.version('flash-attn'))"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def test_every_block_of_the_install_page_is_one_this_file_runs():
    shown = {text.strip() for _, text in blocks(INSTALL)}
    ran = {body(name) for name in RUN} | {SELECTOR_OTHER_MACHINE}
    assert shown == ran, f"blocks no test runs: {shown - ran}; runs of blocks gone: {ran - shown}"


def body(name: str) -> str:
    """The text inside the fence of a generated block."""
    return docpages.GENERATORS[name]().split("\n", 1)[1].rsplit("\n```", 1)[0].strip()


def test_pip(served, tmp_path):
    url, _ = served
    venv = fresh_venv(tmp_path)
    run_block(local(body("install-pip"), url), tmp_path, user_env(tmp_path, venv=venv))
    assert installed(venv) == VERSION


def test_uv_in_a_venv(served, tmp_path):
    url, _ = served
    venv = fresh_venv(tmp_path)
    run_block(local(body("install-uv"), url), tmp_path, user_env(tmp_path, venv=venv))
    assert installed(venv) == VERSION


def _project(tmp_path: Path, extra: str, dependencies: str = '"flash-attn"') -> Path:
    project = tmp_path / "project"
    project.mkdir()
    v = f"{sys.version_info[0]}.{sys.version_info[1]}"
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "demo"\nversion = "0.1"\nrequires-python = "=={v}.*"\n'
        f"dependencies = [{dependencies}]\n\n{extra}\n")
    return project


def test_uv_in_a_project(served, tmp_path):
    url, _ = served
    project = _project(tmp_path, local(body("install-uv-project"), url))
    env = user_env(tmp_path)
    run_block(f"uv sync --python {sys.executable}", project, env)
    assert installed(project / ".venv") == VERSION
    assert url + "cu130/torch2.14/simple" in (project / "uv.lock").read_text()


def test_poetry(served, tmp_path):
    url, _ = served
    project = tmp_path / "project"
    project.mkdir()
    env = {**user_env(tmp_path), "POETRY_VIRTUALENVS_IN_PROJECT": "true",
           "POETRY_CACHE_DIR": str(tmp_path / "poetry-cache")}
    v = f"{sys.version_info[0]}.{sys.version_info[1]}"
    run_block(f'poetry init -n --name demo --python "~{v}" && poetry env use {sys.executable}',
              project, env)
    run_block(local(body("install-poetry"), url), project, env)
    assert installed(project / ".venv") == VERSION


def test_pdm(served, tmp_path):
    url, _ = served
    project = _project(tmp_path, local(body("install-pdm"), url), dependencies="")
    env = {**user_env(tmp_path), "PDM_CACHE_DIR": str(tmp_path / "pdm-cache"),
           "PDM_IGNORE_SAVED_PYTHON": "1"}
    run_block(f"pdm use -f {sys.executable} && pdm add flash-attn", project, env)
    assert installed(project / ".venv") == VERSION
    # pdm locks the version without its local label: the variant index is what pins the build.
    assert "flash-attn" in (project / "pdm.lock").read_text()


def _selector(text: str, served, tmp_path: Path) -> subprocess.CompletedProcess:
    """A selector block run in a fresh venv (no torch: this machine's answer is what would help)
    against the local index: downloaded from it, and pointed at it by ``CUWHEELS_INDEX``, the
    variable that replaces the project's index where a block gives no ``--index``."""
    url, _ = served
    venv = fresh_venv(tmp_path)
    env = {**user_env(tmp_path, venv=venv), "CUWHEELS_INDEX": url}
    if "curl" not in text:  # the download is another block's: fetch it as that one does
        run_block(local(body("install-selector"), url).splitlines()[0], tmp_path, env)
    proc = subprocess.run(["bash", "-uo", "pipefail", "-c", text.replace(site.INDEX_URL, url)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    # 0: a wheel fits; 1: none does, and the answer says why and what would help.
    assert proc.returncode in (0, 1), proc.stderr
    return proc


def test_the_selector(served, tmp_path):
    proc = _selector(body("install-selector"), served, tmp_path)
    # no torch in this venv: the answer names the torch the index has flash-attn wheels for
    assert "cu130/torch2.14" in proc.stdout, proc.stdout
    assert (tmp_path / "cuwheels-select.pyz").is_file()


def test_the_selector_for_another_machine(served, tmp_path):
    proc = _selector(SELECTOR_OTHER_MACHINE, served, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the commands the page shows the shape of, for this index
    assert 'pip download "flash-attn==2.8.3.post2+cu130.torch2.14" --no-deps --only-binary :all:' in proc.stdout
    assert "--platform manylinux_2_28_aarch64 --python-version 3.12" in proc.stdout
    assert 'uv pip install "flash-attn==2.8.3.post2+cu130.torch2.14" --no-deps --python-platform aarch64-manylinux_2_28' in proc.stdout


#: What each generated block of the page is run by.
RUN = {"install-pip": test_pip, "install-uv": test_uv_in_a_venv,
       "install-uv-project": test_uv_in_a_project, "install-poetry": test_poetry,
       "install-pdm": test_pdm, "install-selector": test_the_selector}
#: The one block of the page that is written there, not generated (it names no address).
SELECTOR_OTHER_MACHINE = ("python cuwheels-select.pyz flash-attn --platform linux_aarch64 \\\n"
                          "    --python-version 3.12 --torch-version 2.14.1+cu130 --sm 90")
