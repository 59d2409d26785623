"""tools.finish.licenses: a wheel without its upstream license files is refused by the finish
step, with the wheel, the rule and the fix named, and nothing written.

The wheels are made byte by byte (tests/wheelfactory.py) in the layouts build backends write:
setuptools >= 77 (core metadata 2.4, ``.dist-info/licenses/``), older setuptools (``License-File``
headers, files at the top of ``.dist-info``), and builds that name nothing. The whole finish step
runs on a Windows wheel (no compiler needed, as in tests/test_finish_platforms.py); the tinyext
build through it is tests/test_finish.py.
"""

from __future__ import annotations

import io
import zipfile

import pytest
from wheelfactory import make_wheel

from tests.fixtures.binaries.make_binaries import AMD64, pe_dll
from tools.core.errors import VerifyError
from tools.core.manifest import read_manifest
from tools.finish import raw as raw_module, steps
from tools.finish.checks import ArchReport
from tools.finish.licenses import FIX, check_licenses, licenses_summary
from tools.pipeline.report import Progress

from test_finish_platforms import CELL, IMPORTS, PYD, RECIPE

DIST = "demo-1.0.dist-info"
MIT = b"MIT License\n\nCopyright (c) the demo authors\n"


def _metadata(version: str, *license_files: str) -> bytes:
    lines = [f"Metadata-Version: {version}", "Name: demo", "Version: 1.0",
             *(f"License-File: {f}" for f in license_files)]
    return ("\n".join(lines) + "\n\nThe description, which mentions License-File: NOPE.\n").encode()


def _wheel(tmp_path, files, **kwargs):
    return make_wheel(tmp_path, "demo", "1.0", tag="cp312-cp312-win_amd64",
                      extra_files={"demo/__init__.py": b"", **files}, **kwargs)


def test_pep639_license_files_are_found_under_licenses(tmp_path):
    wheel = _wheel(tmp_path, {f"{DIST}/METADATA": _metadata("2.4", "LICENSE", "third_party/NOTICE"),
                              f"{DIST}/licenses/LICENSE": MIT,
                              f"{DIST}/licenses/third_party/NOTICE": b"cutlass: BSD-3-Clause\n"})
    found = check_licenses(wheel)
    assert found == (f"{DIST}/licenses/LICENSE", f"{DIST}/licenses/third_party/NOTICE")
    assert licenses_summary(found) == ("passed: 2 license file(s): licenses/LICENSE, "
                                       "licenses/third_party/NOTICE")


@pytest.mark.parametrize("member", [f"{DIST}/LICENSE", f"{DIST}/LICENSE.txt",
                                    f"{DIST}/licenses/LICENSE"])
def test_older_setuptools_layouts_with_a_license_file_header_pass(tmp_path, member):
    wheel = _wheel(tmp_path, {f"{DIST}/METADATA": _metadata("2.1", member.rsplit("/", 1)[1]),
                              member: MIT})
    assert check_licenses(wheel) == (member,)


@pytest.mark.parametrize("member", [f"{DIST}/LICENSE", f"{DIST}/COPYING.md",
                                    f"{DIST}/licenses/NOTICE", f"{DIST}/Licence"])
def test_older_metadata_without_headers_passes_on_a_license_named_file(tmp_path, member):
    assert check_licenses(_wheel(tmp_path, {member: MIT})) == (member,)


def test_a_wheel_without_any_license_is_refused_naming_wheel_rule_and_fix(tmp_path):
    wheel = _wheel(tmp_path, {"demo/LICENSE": MIT})  # in the package, not the .dist-info
    with pytest.raises(VerifyError) as caught:
        check_licenses(wheel)
    said = str(caught.value)
    assert said.startswith("demo-1.0-cp312-cp312-win_amd64.whl carries no upstream license: ")
    assert f"{DIST} holds no LICENSE*, COPYING* or NOTICE* file" in said
    assert "rule: every wheel ships its package's license files" in said
    assert caught.value.hint == FIX and "license-files" in FIX and "patch" in FIX


def test_metadata_2_4_without_a_license_file_header_is_refused(tmp_path):
    wheel = _wheel(tmp_path, {f"{DIST}/METADATA": _metadata("2.4"),
                              f"{DIST}/licenses/LICENSE": MIT})
    with pytest.raises(VerifyError, match=r"Metadata-Version 2\.4\) has no License-File header"):
        check_licenses(wheel)


def test_a_named_license_file_missing_from_the_wheel_is_refused(tmp_path):
    # Under 2.4 the file must be under licenses/: the top of .dist-info is the old place.
    wheel = _wheel(tmp_path, {f"{DIST}/METADATA": _metadata("2.4", "LICENSE"),
                              f"{DIST}/LICENSE": MIT})
    with pytest.raises(VerifyError, match=rf"names License-File 'LICENSE' but the wheel has no "
                                          rf"{DIST}/licenses/LICENSE \("):
        check_licenses(wheel)


def test_a_license_file_left_out_of_record_is_refused(tmp_path):
    wheel = _wheel(tmp_path, {f"{DIST}/METADATA": _metadata("2.4", "LICENSE")})
    # A build that wrote the file after RECORD: the zip has it, RECORD does not.
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr(f"{DIST}/licenses/LICENSE", MIT)
    with pytest.raises(VerifyError, match=rf"{DIST}/licenses/LICENSE is in the wheel but not in "
                                          "its RECORD"):
        check_licenses(wheel)


def _finish(raw, work):
    progress = Progress(CELL.id, steps.FINISH_STEPS, io.StringIO())
    built = raw_module.RawWheel(raw, CELL, RECIPE, ("90",), work, "2.13.0+cu130", "13.0",
                                backend="host", nvcc=None)
    return steps.finish_wheel(built, work, progress, raw_module.FinishSettings(
        recipe_revision="test", wheel_platform="win_amd64")), progress


@pytest.fixture
def sm90(monkeypatch):
    monkeypatch.setattr(steps, "cuda_archs", lambda module: ArchReport(("90",), ()))


def test_the_finish_step_refuses_an_unlicensed_wheel_before_writing_anything(tmp_path, sm90):
    raw = _wheel(tmp_path / "raw", {PYD: pe_dll(AMD64, IMPORTS)})
    work = tmp_path / "work"
    with pytest.raises(VerifyError, match="demo-1.0-cp312-cp312-win_amd64.whl carries no "
                                          "upstream license"):
        _finish(raw, work)
    # Not repaired, not finished: nothing of it exists for a later step to publish.
    assert not work.exists() or not [p for p in work.rglob("*.whl")]


def test_the_finished_wheel_keeps_its_license_and_the_manifest_says_so(tmp_path, sm90):
    raw = _wheel(tmp_path / "raw", {PYD: pe_dll(AMD64, IMPORTS),
                                    f"{DIST}/METADATA": _metadata("2.4", "LICENSE"),
                                    f"{DIST}/licenses/LICENSE": MIT})
    (final, manifest), progress = _finish(raw, tmp_path / "work")
    assert manifest["checks"]["licenses"] == "passed: 1 license file(s): licenses/LICENSE"
    new_dist = "demo-1.0+cu130.torch2.13.dist-info"
    metadata_step = next(s for s in progress.steps if s.name == "metadata")
    assert metadata_step.detail["licenses"] == [f"{new_dist}/licenses/LICENSE"]
    with zipfile.ZipFile(final) as zf:
        assert zf.read(f"{new_dist}/licenses/LICENSE") == MIT
        assert read_manifest(zf)["checks"]["licenses"] == manifest["checks"]["licenses"]
