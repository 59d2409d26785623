"""tools.finish.steps for the platforms other than Linux x86_64, without a compiler: a Windows
wheel made byte by byte goes through the whole finish step (delvewheel, the binary and import
checks, the manifest saying which checks ran), and a mislabelled wheel stops at the binary check.

cuobjdump (the arch check) reads a Windows ``.pyd`` only on Windows: here it is replaced by the
answer a build for sm_90 would give. No Windows build ran.
"""

from __future__ import annotations

import io
import zipfile
from types import SimpleNamespace

import pytest
from wheelfactory import make_wheel

from tests.fixtures.binaries.make_binaries import AMD64, EM_X86_64, elf_header, pe_dll
from tools.core.errors import VerifyError
from tools.core.manifest import read_manifest
from tools.finish import raw as raw_module, steps
from tools.finish.checks import ArchReport
from tools.finish.winrepair import WINDOWS_ABI_NOTE
from tools.pipeline.report import Progress
from tools.plan.cells import Cell

CELL = Cell("demo", "1.0", "3.12", "13.0", "2.13", "2.13.0+cu130", True, True, "2_28",
            "unused", ("90",), serves_torch=("2.13",), serves_python=("3.12",))
RECIPE = SimpleNamespace(source=SimpleNamespace(sdist="demo-1.0.tar.gz", sha256="0" * 64,
                                                url="https://files.example.invalid/demo-1.0.tar.gz"),
                         patches=(), build=SimpleNamespace(number=0, isolation=False, requires=()))
PYD = "demo/_C.cp312-win_amd64.pyd"
#: The package's license, where setuptools before PEP 639 put it (tools.finish.licenses).
LICENSE = {"demo-1.0.dist-info/LICENSE": b"MIT License\n"}
IMPORTS = {"torch_cpu.dll": ["?x@@YAXXZ"], "c10_cuda.dll": ["?y@@YAXXZ"], "cudart64_13.dll": ["cudaMalloc"],
           "python312.dll": ["PyModule_Create2"], "KERNEL32.dll": ["GetLastError"]}


@pytest.fixture
def sm90(monkeypatch):
    monkeypatch.setattr(steps, "cuda_archs", lambda module: ArchReport(("90",), ()))


def _finish(raw, work, wheel_platform):
    progress = Progress(CELL.id, steps.FINISH_STEPS, io.StringIO())
    built = raw_module.RawWheel(raw, CELL, RECIPE, ("90",), work, "2.13.0+cu130", "13.0",
                           backend="host", nvcc=None)
    return steps.finish_wheel(built, work, progress, raw_module.FinishSettings(
        recipe_revision="test", wheel_platform=wheel_platform))


def test_a_windows_wheel_is_finished_and_its_manifest_says_what_ran(tmp_path, sm90):
    raw = make_wheel(tmp_path / "raw", "demo", "1.0", tag="cp312-cp312-win_amd64",
                     requires_dist=["torch"],
                     extra_files={"demo/__init__.py": b"", PYD: pe_dll(AMD64, IMPORTS), **LICENSE})
    final, manifest = _finish(raw, tmp_path / "work", "win_amd64")
    assert final.name == "demo-1.0+cu130.torch2.13-cp312-cp312-win_amd64.whl"
    assert manifest["platform"] == "win_amd64"
    assert manifest["checks"]["abi_check"] == WINDOWS_ABI_NOTE
    assert manifest["checks"]["abi_check"].startswith("not possible on Windows: ")
    assert manifest["checks"]["dll_imports"].startswith("passed: ")
    assert manifest["checks"]["repair"].startswith("delvewheel")
    assert manifest["checks"]["binaries"] == "passed: 1 compiled file(s), each for win_amd64"
    with zipfile.ZipFile(final) as zf:
        assert read_manifest(zf)["checks"] == manifest["checks"]
        assert not [n for n in zf.namelist() if n.lower().endswith(".dll")]  # torch's stay out


def test_a_mislabelled_windows_wheel_stops_at_the_binary_check(tmp_path, sm90):
    raw = make_wheel(tmp_path / "raw", "demo", "1.0", tag="cp312-cp312-win_amd64",
                     extra_files={"demo/__init__.py": b"", PYD: pe_dll(AMD64, IMPORTS),
                                  "demo/_D.pyd": elf_header(EM_X86_64), **LICENSE})
    with pytest.raises(VerifyError, match=r"demo/_D\.pyd is an ELF binary for x86_64"):
        _finish(raw, tmp_path / "work", "win_amd64")
    assert not list((tmp_path / "work").glob("final/*.whl"))


def test_a_wheel_of_another_platform_than_its_cell_is_refused(tmp_path, sm90):
    raw = make_wheel(tmp_path / "raw", "demo", "1.0", tag="cp312-cp312-win_amd64",
                     extra_files={"demo/__init__.py": b"", PYD: pe_dll(AMD64, IMPORTS), **LICENSE})
    with pytest.raises(VerifyError, match="but its cell builds for linux_aarch64"):
        _finish(raw, tmp_path / "work", "linux_aarch64")
