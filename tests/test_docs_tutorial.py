"""Every command the contributor tutorial (docs/contributing/index.md) shows runs here, in the
order it shows them, in a copy of this checkout as a contributor's clone would hold it.

The fast part (the default suite) starts the recipe from the registry, sees the template
refused, puts the tutorial's finished files in (the editing a contributor does), checks them,
lists the cells, regenerates the docs and prices the pull request. The slow part (``make
test-slow``) probes, builds one cell, indexes and serves it, installs it with uv and runs its
kernel check on CPU: half an hour on two cores.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tools import ROOT
from tools.core.exitcodes import RECIPE
from tools.pipeline.venvs import uv_bin

PAGE = ROOT / "docs" / "contributing" / "index.md"
EXAMPLE = ROOT / "docs" / "contributing" / "example" / "torch_spline_conv"
FENCE = re.compile(r"^```bash\n(.*?)^```$", re.S | re.M)
#: What a clone holds besides the tracked files that the commands need: the project's .venv
#: (made by `make setup`), linked. Build outputs of this checkout are left out.
SKIP = {".git", ".venv", "build", "build-cells", "site", "wheelhouse", ".nox", "__pycache__",
        ".pytest_cache", "site-ledger.json"}


def page_blocks() -> list[str]:
    return [m.group(1).strip() for m in FENCE.finditer(PAGE.read_text())]


def block(start: str) -> str:
    """The page's bash block whose first line starts with ``start``."""
    found = [b for b in page_blocks() if b.startswith(start)]
    assert len(found) == 1, f"the tutorial has {len(found)} blocks starting {start!r}"
    return found[0]


FAST = (".venv/bin/python -m tools.recipe new", "make recipes", "make docs",
        ".venv/bin/python -m tools.matrix --package torch-spline-conv --cap 8")
SLOW = ("export CUDA_HOME=", ".venv/bin/python -m tools.shard units", "make index",
        ".venv/bin/python -m tools.kernelcheck")


def test_every_command_block_of_the_tutorial_is_run_here():
    assert sorted(page_blocks()) == sorted(block(s) for s in FAST + SLOW)


def make_clone(tmp_path: Path) -> Path:
    """This checkout's files, as a clone has them, with the project's environment linked."""
    root = tmp_path / "cuwheels"
    shutil.copytree(ROOT, root, symlinks=True, ignore=lambda d, names: [n for n in names if n in SKIP])
    (root / ".venv").symlink_to(ROOT / ".venv", target_is_directory=True)
    # The linked environment is this checkout's, set up already: older than its stamp, the
    # clone's pyproject.toml doesn't make `make` set it up again.
    os.utime(root / "pyproject.toml", (0, 0))
    return root


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    return make_clone(tmp_path)


def sh(text: str, cwd: Path, *, ok: bool = True, timeout: float = 900, env: dict | None = None):
    env = {**os.environ, **(env or {})}
    proc = subprocess.run(["bash", "-eo", "pipefail", "-c", text], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)
    if ok:
        assert proc.returncode == 0, f"{text}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def start_recipe(clone: Path) -> None:
    """Step 2, then the editing of step 3: the template refused, then the finished files."""
    new, check = block(".venv/bin/python -m tools.recipe new").splitlines()
    sh(new, clone)
    template = (clone / "recipes" / "torch_spline_conv" / "recipe.yaml").read_text()
    assert "torch-spline-conv" in template and "TODO" in template
    refused = sh(check, clone, ok=False)
    assert refused.returncode == RECIPE and "TODO" in refused.stdout + refused.stderr
    shutil.rmtree(clone / "recipes" / "torch_spline_conv")
    shutil.copytree(EXAMPLE, clone / "recipes" / "torch_spline_conv")


@pytest.mark.network
def test_the_tutorial_from_the_registry_to_the_pull_request(clone):
    start_recipe(clone)
    out = sh(block("make recipes"), clone).stdout
    assert "ok  torch_spline_conv 1.2.2" in out
    assert "torch_spline_conv-3.12-cu130\n" in out  # the cell the tutorial builds
    sh(block("make docs"), clone, timeout=600)
    assert "torch-spline-conv" in (clone / "docs" / "packages.md").read_text()
    assert (clone / "build" / "docs" / "packages" / "index.html").is_file()
    priced = sh(block(".venv/bin/python -m tools.matrix --package torch-spline-conv --cap 8"), clone)
    assert "| 1 | 8 |" in priced.stdout and "longest job" in priced.stdout


@pytest.mark.slow
@pytest.mark.timeout(7200)  # compiles for half an hour or more on two cores
def test_the_tutorials_build_and_install(clone, tmp_path):
    start_recipe(clone)
    # The tutorial's `uv venv -p 3.12` finds Python 3.12 on PATH: put the one this machine has
    # first (found, or installed, by tools.toolchain), ahead of a shim that may not run it.
    py312 = sh(".venv/bin/python -m tools.toolchain python 3.12", clone).stdout.strip().splitlines()[-1]
    env = {"PATH": os.pathsep.join([str(Path(py312).parent), str(Path(uv_bin()).parent),
                                    os.environ["PATH"]])}
    probe = sh(block("export CUDA_HOME="), clone, timeout=3600, env=env).stdout
    assert "job_memory_gib supported" in probe
    sh(block(".venv/bin/python -m tools.shard units"), clone, timeout=5400, env=env)
    assert list((clone / "wheelhouse").glob("torch_spline_conv-1.2.2+cu130.torch2.14-cp312-*.whl"))
    index, serve, install, imports = block("make index").splitlines()
    sh(index, clone)
    server = subprocess.Popen(["bash", "-c", serve], cwd=clone, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):  # bounded: the server answers within seconds
            if sh("curl -fsS http://127.0.0.1:8765/ >/dev/null", clone, ok=False).returncode == 0:
                break
            time.sleep(0.3)
        shutil.rmtree("/tmp/try", ignore_errors=True)
        sh(install, clone, timeout=900, env=env)
        assert sh(imports, clone).stdout.split() == ["1.2.2", "13000"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    checked = sh(block(".venv/bin/python -m tools.kernelcheck"), clone, timeout=900)
    assert "passed" in checked.stdout + checked.stderr
