"""tools.finish.steps on a real build: the recipe's ``abi`` claim is checked inside the inspect step,
never trusted, and a true claim reaches the manifest and the torch pin.

The wheel is the shared tinyext build (tests/tinyext_support.py; built once per test process and
shared with test_verify and test_repair): a pybind11 module on torch's C++ API, i.e. one build per
Python and per torch series (``cpython`` + ``exact``).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from tinyext_support import TORCH_VERSION, nvcc_path, shared_tinyext

from tools.core.errors import VerifyError
from tools.finish.raw import FinishSettings, RawWheel
from tools.finish.sbom import check_wheel_sbom
from tools.finish.steps import FINISH_STEPS, finish_wheel
from tools.core.manifest import read_manifest
from tools.plan.cells import Cell
from tools.pipeline.report import Progress

pytestmark = [pytest.mark.cuda, pytest.mark.network]

#: tinyext's cell as the planner would make it for torch 2.13 + CUDA 13.0 (the shared build).
CELL = Cell("tinyext", "0.1.0", "3.11", "13.0", "2.13", TORCH_VERSION, True, True, "2_28",
            "pytorch/manylinux2_28-builder:cuda13.0", ("90",), serves_torch=("2.13",), serves_python=("3.11",))
#: What finish reads of a recipe.
RECIPE = SimpleNamespace(source=SimpleNamespace(sdist="tinyext-0.1.0.tar.gz", sha256="0" * 64,
                                                url="https://files.example.invalid/tinyext-0.1.0.tar.gz"),
                         patches=(), build=SimpleNamespace(number=0, isolation=False, requires=()))


@pytest.fixture(scope="module")
def tinyext(tmp_path_factory):
    if nvcc_path() is None:
        pytest.skip("needs nvcc")
    return shared_tinyext(tmp_path_factory)


def _finish(build, cell, work):
    progress = Progress(cell.id, FINISH_STEPS, io.StringIO())
    raw = RawWheel(build.wheel, cell, RECIPE, ("90",), build.torch_lib, TORCH_VERSION, "13.0",
                   backend="host", nvcc=nvcc_path())
    final, manifest = finish_wheel(raw, work, progress, FinishSettings(recipe_revision="test"))
    return final, manifest, progress


def test_a_true_claim_reaches_the_manifest_and_the_pin(tinyext, tmp_path):
    final, manifest, _ = _finish(tinyext, CELL, tmp_path)
    assert manifest["abi"] == {"python": "cpython", "torch": "exact"}
    with zipfile.ZipFile(final) as zf:
        assert read_manifest(zf)["abi"] == manifest["abi"]
        metadata = zf.read("tinyext-0.1.0+cu130.torch2.13.dist-info/METADATA").decode()
    assert "Requires-Dist: torch==2.13.*" in metadata


def test_the_real_wheel_carries_a_valid_sbom_naming_its_compilers(tinyext, tmp_path):
    """The Linux path's SBOM (tests/test_sbom.py has the rest): in RECORD, valid CycloneDX 1.6,
    naming this machine's nvcc and gcc as the manifest records them, auditwheel and setuptools."""
    final, manifest, _ = _finish(tinyext, CELL, tmp_path)
    member = "tinyext-0.1.0+cu130.torch2.13.dist-info/sboms/cuwheels.cdx.json"
    assert check_wheel_sbom(final) == manifest["checks"]["sbom"]
    assert manifest["checks"]["sbom"]["path"] == member
    with zipfile.ZipFile(final) as zf:
        doc = json.loads(zf.read(member))
        assert member in zf.read("tinyext-0.1.0+cu130.torch2.13.dist-info/RECORD").decode()
    parts = {c["bom-ref"]: c for c in doc["components"]}
    for name in ("nvcc", "gcc"):
        assert parts[f"compiler:{name}"]["description"] == manifest["compiler"][name]
        assert parts[f"compiler:{name}"]["version"]
    tools = {t["name"]: t.get("version") for t in doc["metadata"]["tools"]["components"]}
    assert tools["auditwheel"] and tools["setuptools"]


def test_the_finished_tinyext_wheel_is_taken_by_users_tools(tinyext, tmp_path):
    """The real wheel: RECORD lists files only, installer validates every one, and `auditwheel
    show` runs (exit 0) and agrees with the tag the repair chose."""
    final, _, progress = _finish(tinyext, CELL, tmp_path)
    metadata = next(s for s in progress.steps if s.name == "metadata").detail
    with zipfile.ZipFile(final) as zf:
        record = zf.read("tinyext-0.1.0+cu130.torch2.13.dist-info/RECORD").decode().splitlines()
        assert not [n for n in zf.namelist() if n.endswith("/")]
    assert not [row for row in record if row.split(",")[0].endswith("/")]
    assert metadata["record_files_validated"] == len(record)
    platform_tag = final.name.rsplit("-", 1)[1].removesuffix(".whl")
    assert metadata["auditwheel_show"] == platform_tag  # e.g. manylinux_2_34_x86_64 on this host


def test_the_tinyext_build_carries_the_fixture_license_through_finish(tinyext, tmp_path):
    """setuptools picks the fixture's LICENSE up by its default license-files patterns; the
    finish step finds it named (License-File) and recorded, and keeps it in the final wheel."""
    final, manifest, progress = _finish(tinyext, CELL, tmp_path)
    assert manifest["checks"]["licenses"] == "passed: 1 license file(s): licenses/LICENSE"
    dist = "tinyext-0.1.0+cu130.torch2.13.dist-info"
    assert next(s for s in progress.steps if s.name == "metadata").detail["licenses"] == [
        f"{dist}/licenses/LICENSE"]
    with zipfile.ZipFile(final) as zf:
        assert zf.read(f"{dist}/licenses/LICENSE").startswith(b"MIT License")
        assert "License-File: LICENSE" in zf.read(f"{dist}/METADATA").decode()
    proc = subprocess.run([str(Path(sys.executable).with_name("auditwheel")), "show", str(final)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("claim, says", [
    # pybind11 needs the Python C API: one build can't serve every Python.
    ({"python_abi": "none"}, "abi.python: none (one build for every Python), but"),
    # at::/c10:: symbols change between torch series: one build can't serve several.
    ({"torch_abi": "stable", "torch_from": "2.13"}, "abi.torch: stable (one build for torch 2.13 and newer), but"),
])
def test_a_false_claim_stops_the_inspect_step(tinyext, tmp_path, claim, says):
    with pytest.raises(VerifyError) as exc:
        _finish(tinyext, replace(CELL, **claim), tmp_path)
    assert says in exc.value.message
    assert not list(tmp_path.glob("final/*.whl"))  # no wheel with a false claim was written
