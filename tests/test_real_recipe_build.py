"""Slow: a real recipe built for real (``make test-slow``; about 7 minutes of compile here).

``nox -s build-causal_conv1d-3.11-cu130 -- --backend host --archs 90`` from the registry's sdist,
then the wheel is installed with pip into a fresh venv next to the cell's torch and its compiled
module imported.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tools import ROOT
from tools.pipeline import venvs as pyenv
from tools.core.manifest import read_manifest
from tools.plan.cells import find_cell

CELL = "causal_conv1d-3.11-cu130"


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.cuda
def test_causal_conv1d_host_build(tmp_path):
    cell = find_cell(CELL)
    out = tmp_path / "wheelhouse"
    nox = Path(sys.executable).parent / "nox"
    proc = subprocess.run([str(nox), "-s", f"build-{CELL}", "--", "--backend", "host",
                           "--archs", "90", "--wheels", str(out)], cwd=ROOT, timeout=3 * 3600,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-5000:]
    (wheel,) = out.glob("*.whl")
    assert f"+{cell.label}-cp311-cp311-manylinux_" in wheel.name
    with zipfile.ZipFile(wheel) as zf:
        manifest = read_manifest(zf)
        meta = next(zf.read(n) for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    assert f"Requires-Dist: torch=={cell.torch}.*".encode() in meta
    assert manifest["archs"]["requested"] == ["90"] and manifest["archs_override"] is True
    assert all(v["sass"] == ["90"] for v in manifest["archs"]["found"].values())

    _install_and_import(wheel, "3.11", cell.torch_version, tmp_path)


CONTAINER_CELL = "causal_conv1d-3.12-cu130"


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.cuda
def test_causal_conv1d_container_build(tmp_path):
    """The path CI publishes from: cibuildwheel in a container (here the local stand-in image),
    the finish step and the import test inside it, then pip-installed here and imported."""
    from tools.devtools import standin_image
    from tools.backends.engine import readiness

    cell = find_cell(CONTAINER_CELL)
    image = standin_image.image_name(cell.cuda)
    ready = readiness("podman", image)
    if not ready.ok or not ready.local:
        pytest.skip(f"no container can be started from {image}: {ready.why}")
    out = tmp_path / "wheelhouse"
    nox = Path(sys.executable).parent / "nox"
    proc = subprocess.run([str(nox), "-s", f"build-{CONTAINER_CELL}", "--", "--backend",
                           "container", "--engine", "podman", "--image", image, "--archs", "90",
                           "--wheels", str(out)], cwd=ROOT, timeout=3 * 3600, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-5000:]
    (wheel,) = out.glob("*.whl")
    assert f"+{cell.label}-cp312-cp312-manylinux_2_" in wheel.name
    with zipfile.ZipFile(wheel) as zf:
        manifest = read_manifest(zf)
    assert manifest["backend"] == "container" and manifest["image"] == image
    assert all(v["sass"] == ["90"] for v in manifest["archs"]["found"].values())

    _install_and_import(wheel, "3.12", cell.torch_version, tmp_path)


def _install_and_import(wheel: Path, python: str, torch_version: str, tmp_path: Path) -> None:
    """What a user does with the wheel: pip-install it beside its torch into a fresh venv of
    ``python``, then import the extension and its package from an empty directory."""
    venv = pyenv.create_venv(tmp_path / "venv", python, seed=True)
    pip = subprocess.run([str(venv), "-m", "pip", "--isolated", "install",
                          f"torch=={torch_version}", str(wheel)],
                         capture_output=True, text=True, timeout=1800)
    assert pip.returncode == 0, pip.stderr[-3000:]
    imp = subprocess.run([str(venv), "-c", "import torch, causal_conv1d_cuda, causal_conv1d"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert imp.returncode == 0, imp.stderr
