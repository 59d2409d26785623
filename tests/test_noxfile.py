"""noxfile.py with nox as people install it: from its own environment, not the project's."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tools import ROOT
from tools.pipeline.venvs import uv_bin

pytestmark = pytest.mark.network  # uv fetches nox (and the noxfile's dependencies) from PyPI

NOX = "nox==2026.10.20"


def _checkout(dest):
    """The files a fresh clone has that listing sessions reads (no .venv, no install)."""
    dest.mkdir()
    for name in ("noxfile.py", "pyproject.toml", "Makefile"):
        shutil.copy2(ROOT / name, dest / name)
    for name in ("tools", "recipes"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_nox_from_its_own_environment_lists_every_cell(tmp_path):
    repo = _checkout(tmp_path / "clone")
    # `uv tool run` gives nox an environment of its own, as `pipx install nox` does: without
    # PyYAML or this project. The noxfile's script block makes nox re-run itself with them.
    proc = subprocess.run([uv_bin(), "tool", "run", "--from", NOX, "nox", "-l"], cwd=repo,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    listed = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith(("* ", "- "))}
    ids = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", "ids"], cwd=repo,
                         capture_output=True, text=True, check=True).stdout.split()
    assert ids, "the planner planned nothing"
    assert {f"build-{i}" for i in ids} <= listed
    assert {"tests", "recipes", "lint", "probe", "release"} <= listed
    assert (repo / ".nox" / "_nox_script_mode").is_dir()  # it did re-run itself
    assert not (repo / ".venv").exists()  # listing never creates the project's environment
    # A collapsed cell keeps its id as the session name, and answers to every torch it serves.
    assert "build-xformers-py3-cu130-torch2.10+" in listed
    tagged = subprocess.run([uv_bin(), "tool", "run", "--from", NOX, "nox", "-l", "-t", "torch2.12"], cwd=repo,
                            capture_output=True, text=True, timeout=300)
    assert tagged.returncode == 0, tagged.stderr
    assert "build-xformers-py3-cu130-torch2.10+" in tagged.stdout
