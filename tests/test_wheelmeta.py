"""Version and metadata step: the rewritten wheel is one pip and uv accept as is."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest
from packaging.version import Version

from tests.wheelfactory import make_wheel
from tools.core.manifest import read_manifest
from tools.pipeline.venvs import uv_bin
from tools.core.variant import format_label, parse_label
from tools.finish.wheelmeta import read_metadata, set_version_and_pin


@pytest.fixture
def rewritten(tmp_path):
    raw = make_wheel(tmp_path / "raw", "demo-ext", "1.0.0",
                     requires_dist=["torch>=2.0", "einops; python_version >= '3.9'"],
                     tag="py3-none-any")
    return set_version_and_pin(raw, tmp_path / "out", label="cu130.torch2.13",
                               torch_pin="torch==2.13.*", manifest={"cell": "demo_ext-3.11-cu130",
                                                                    "cuda": "13.0",
                                                                    "torch": "2.13.0"},
                               epoch=1577750400)


def test_version_pin_and_manifest_are_inside(rewritten):
    assert rewritten.name == "demo_ext-1.0.0+cu130.torch2.13-py3-none-any.whl"
    meta = read_metadata(rewritten)
    assert "Version: 1.0.0+cu130.torch2.13" in meta
    assert "Requires-Dist: torch==2.13.*" in meta and "torch>=2.0" not in meta
    assert "Requires-Dist: einops; python_version >= \"3.9\"" in meta or "einops" in meta
    with zipfile.ZipFile(rewritten) as zf:
        assert read_manifest(zf)["cell"] == "demo_ext-3.11-cu130"
        names = zf.namelist()
        assert names[-1] == "demo_ext-1.0.0+cu130.torch2.13.dist-info/RECORD"
        record = zf.read(names[-1]).decode()
    for name in names[:-1]:
        assert f"{name},sha256=" in record


def test_reproducible(tmp_path, rewritten):
    raw = make_wheel(tmp_path / "raw2", "demo-ext", "1.0.0",
                     requires_dist=["torch>=2.0", "einops; python_version >= '3.9'"],
                     tag="py3-none-any")
    again = set_version_and_pin(raw, tmp_path / "out2", label="cu130.torch2.13",
                                torch_pin="torch==2.13.*",
                                manifest={"cell": "demo_ext-3.11-cu130", "cuda": "13.0",
                                          "torch": "2.13.0"}, epoch=1577750400)
    assert again.read_bytes() == rewritten.read_bytes()


def test_pip_and_uv_accept_it(tmp_path, rewritten):
    """pip rejects a renamed wheel ('inconsistent version'); this one installs."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--isolated", "install",
                          "--no-deps", "--no-index", str(rewritten)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr
    show = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--isolated", "show",
                           "demo-ext"], capture_output=True, text=True, timeout=60)
    assert "Version: 1.0.0+cu130.torch2.13" in show.stdout
    uvenv = tmp_path / "uvenv"
    subprocess.run([uv_bin(), "venv", "-q", "--python", sys.executable, str(uvenv)], check=True,
                   timeout=120)
    uv = subprocess.run([uv_bin(), "pip", "install", "--python", str(uvenv / "bin" / "python"),
                         "--no-deps", "--offline", str(rewritten)], capture_output=True,
                        text=True, timeout=300)
    assert uv.returncode == 0, uv.stderr


def test_a_package_local_label_is_replaced(tmp_path):
    raw = make_wheel(tmp_path, "flash-attn", "2.8.3", local="cu12torch2.8cxx11abiTRUE")
    out = set_version_and_pin(raw, tmp_path / "o", label="cu128.torch2.8", torch_pin=None,
                              manifest=None, epoch=1577750400)
    assert "+cu128.torch2.8-" in out.name and "cu12torch" not in out.name
    assert json.dumps(read_metadata(out)).count("2.8.3+cu128.torch2.8") == 1


@pytest.mark.parametrize("older,newer", [
    # the reason our torch minor is its own numeric segment
    (("13.0", "2.9"), ("13.0", "2.10")),
    (("12.8", "2.8"), ("12.8", "2.9")),
])
def test_labels_sort_numerically(older, newer):
    a = Version(f"1.0+{format_label(*older)}")
    b = Version(f"1.0+{format_label(*newer)}")
    assert a < b
    assert parse_label(format_label(*newer)).torch == newer[1]


def test_a_build_number_becomes_the_build_tag(tmp_path):
    raw = make_wheel(tmp_path, "demo-ext", "1.0.0", tag="py3-none-any", build_tag="7")  # the package's own
    out = set_version_and_pin(raw, tmp_path / "o", label="cu130.torch2.13", torch_pin=None, manifest=None,
                              epoch=1577750400, build_number=2)
    assert out.name == "demo_ext-1.0.0+cu130.torch2.13-2-py3-none-any.whl"
    with zipfile.ZipFile(out) as zf:
        wheel = zf.read("demo_ext-1.0.0+cu130.torch2.13.dist-info/WHEEL").decode()
    assert wheel.count("Build:") == 1 and wheel.endswith("Build: 2\n")
    assert "Tag: py3-none-any" in wheel
    # Build number 0: no build tag of ours (the package's own stays).
    kept = set_version_and_pin(raw, tmp_path / "k", label="cu130.torch2.13", torch_pin=None, manifest=None,
                               epoch=1577750400)
    assert kept.name == "demo_ext-1.0.0+cu130.torch2.13-7-py3-none-any.whl"
