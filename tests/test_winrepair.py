"""tools.finish.winrepair: the real delvewheel on Windows wheels made byte by byte (no Windows
build runs here), and the import check that stands in for the ABI check on Windows."""

from __future__ import annotations

import zipfile

import pytest
from wheelfactory import make_wheel

from tests.fixtures.binaries.make_binaries import AMD64, elf_header, pe_dll
from tools.core.errors import RepairError, VerifyError
from tools.finish.peimports import read_imports
from tools.finish.winrepair import (TORCH_DLL_EXCLUDES, allowed_reason, check_imports,
                                    delvewheel_command, repair_windows_wheel)

TAG = "cp312-cp312-win_amd64"
PYD = "demo/_C.cp312-win_amd64.pyd"
#: What a torch extension built with MSVC imports besides its own helper library.
TORCH_EXTENSION = {"torch_cpu.dll": ["?x@@YAXXZ"], "c10.dll": ["?y@@YAXXZ"],
                   "c10_cuda.dll": ["?z@@YAXXZ"], "torch_cuda.dll": ["?w@@YAXXZ"],
                   "torch_python.dll": ["?v@@YAXXZ"], "cudart64_12.dll": ["cudaMalloc"],
                   "python312.dll": ["PyModule_Create2"], "KERNEL32.dll": ["GetLastError"],
                   "MSVCP140.dll": ["?a@@YAXXZ"], "VCRUNTIME140.dll": ["memcpy"],
                   "api-ms-win-crt-runtime-l1-1-0.dll": ["_initterm"]}

REASONS = [
    ("c10.dll", "torch"), ("TORCH_CUDA.DLL", "torch"),        # Windows names are case-insensitive
    ("cudart64_12.dll", "torch"), ("cudart64_13.dll", "torch"), ("cublasLt64_13.dll", "torch"),
    ("cudnn_graph64_9.dll", "torch"), ("nvrtc64_130_0.dll", "torch"),
    ("msvcp140.dll", "torch"),                                # torch's DLLs load it first
    ("python312.dll", "python"), ("python3.dll", "python"), ("python313t.dll", "python"),
    ("KERNEL32.dll", "windows"), ("api-ms-win-crt-heap-l1-1-0.dll", "windows"),
    ("VCRUNTIME140_1.dll", "windows"), ("ws2_32.dll", "windows"),
    ("helper.dll", None), ("libgomp-1.dll", None),            # must be vendored
]


@pytest.mark.parametrize("dll, reason", REASONS, ids=[d for d, _ in REASONS])
def test_allowed_reason(dll, reason):
    assert allowed_reason(dll) == reason


def test_the_command_excludes_torchs_dlls_one_by_one(tmp_path):
    command = delvewheel_command(tmp_path / "w.whl", tmp_path / "out", add_paths=(tmp_path,))
    excludes = [command[i + 1] for i, word in enumerate(command) if word == "--exclude"]
    assert excludes == list(TORCH_DLL_EXCLUDES)
    assert {"c10.dll", "torch_cpu.dll", "torch_cuda.dll", "torch_python.dll", "c10_cuda.dll"} <= set(excludes)
    assert command[command.index("--add-path") + 1] == str(tmp_path)


def _helper(tmp_path):
    folder = tmp_path / "dlls"
    folder.mkdir()
    (folder / "helper.dll").write_bytes(pe_dll(AMD64, {"KERNEL32.dll": ["GetLastError"]},
                                               exports=["help"], name="helper.dll"))
    return folder


def test_delvewheel_vendors_a_helper_and_leaves_torch_out(tmp_path):
    pyd = pe_dll(AMD64, {**TORCH_EXTENSION, "helper.dll": ["help"]})
    wheel = make_wheel(tmp_path / "in", "demo", "1.0", tag=TAG,
                       extra_files={"demo/__init__.py": b"", PYD: pyd})
    result = repair_windows_wheel(wheel, tmp_path / "out", add_paths=(_helper(tmp_path),),
                                  log=tmp_path / "log")
    with zipfile.ZipFile(result.wheel) as zf:
        names = zf.namelist()
        vendored = [n for n in names if n.startswith("demo.libs/") and n.endswith(".dll")]
        assert len(vendored) == 1 and vendored[0].startswith("demo.libs/helper-")
        assert not [n for n in names if "torch" in n or "c10" in n or "cudart" in n]
        imported = read_imports(zf.read(PYD)).dlls
    assert vendored[0].rpartition("/")[2] in imported         # the .pyd now loads the mangled copy
    report = check_imports(result.wheel)
    assert report.imports[PYD]["c10.dll"] == "torch"
    assert report.imports[PYD][vendored[0].rpartition("/")[2]] == "vendored"


def test_delvewheel_names_a_dll_it_cant_find(tmp_path):
    wheel = make_wheel(tmp_path / "in", "demo", "1.0", tag=TAG,
                       extra_files={"demo/__init__.py": b"", PYD: pe_dll(AMD64, {"nowhere.dll": ["f"]})})
    with pytest.raises(RepairError, match="delvewheel repair of .* failed") as info:
        repair_windows_wheel(wheel, tmp_path / "out")
    assert "nowhere.dll" in str(info.value)
    assert "add it to the excludes" in info.value.hint


REFUSED = [
    # (members, what the message must say)
    ({PYD: pe_dll(AMD64, {**TORCH_EXTENSION, "helper.dll": ["help"]})},
     r"demo/_C\.cp312-win_amd64\.pyd imports helper\.dll, which is neither in the wheel nor torch's"),
    ({"demo/__init__.py": b""}, r"holds no \.pyd extension module"),
    ({PYD: elf_header(62)}, r"is not a PE file this check can read: no MZ header"),
]


@pytest.mark.parametrize("members, message", REFUSED, ids=[m[:40] for _, m in REFUSED])
def test_the_import_check_refuses_by_name(tmp_path, members, message):
    wheel = make_wheel(tmp_path, "demo", "1.0", tag=TAG, extra_files=members)
    with pytest.raises(VerifyError, match=message):
        check_imports(wheel)


def test_a_wheel_importing_only_what_is_allowed(tmp_path):
    wheel = make_wheel(tmp_path, "demo", "1.0", tag=TAG, extra_files={PYD: pe_dll(AMD64, TORCH_EXTENSION)})
    reasons = check_imports(wheel).imports[PYD]
    assert set(reasons) == set(TORCH_EXTENSION)
