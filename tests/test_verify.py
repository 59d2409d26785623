"""tools.verify: wheel tags, the ABI check, the arch check and the smoke test.

The unit tests compile tiny shared objects with gcc (an "extension" calling c10::/at:: functions
it doesn't define, and fake torch libraries that do or don't export them). The real tests build
the tinyext fixture once (tests/tinyext_support.py) and check it like the pipeline does.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tinyext_support import TORCH_VERSION, make_sdist, nvcc_path, shared_tinyext, torch_lib_dir
from tools.core.errors import VerifyError
from tools.hostplat import linux, windows
from tools.finish.auditwheel_repair import repair_wheel
from tools.verify import main
from tools.finish.checks import (
    AbiReport,
    ArchReport,
    abi_check,
    abi_report,
    check_archs,
    check_tags,
    cuda_archs,
    cuobjdump,
    demangle,
    exported_symbols,
    extension_modules,
    is_torch_symbol,
    smoke_argv,
    smoke_test,
    undefined_torch_symbols,
)

needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="needs nvcc")

#: An "extension": strong references into c10:: and at:: (a call, a constructor, a destructor,
#: typeinfo for a throw), one weak reference (may stay unresolved), one outside torch.
EXT_SOURCE = """
namespace c10 {
void foo();
struct Error { Error(); virtual ~Error(); };
__attribute__((weak)) void maybe();
}
namespace at { int bar(int); }
namespace other { void baz(); }
extern "C" int PyInit_ext(void) { return 0; }
int run(int x) {
  c10::foo();
  other::baz();
  if (c10::maybe) c10::maybe();
  if (x < 0) throw c10::Error();
  return at::bar(x);
}
"""
EXT_TORCH_SYMBOLS = {"_ZN3c103fooEv", "_ZN3c105ErrorC1Ev", "_ZN3c105ErrorD1Ev",
                     "_ZTIN3c105ErrorE", "_ZN2at3barEi"}

#: A fake libc10.so: defines everything the extension needs from c10.
LIBC10_SOURCE = """
namespace c10 {
void foo() {}
struct Error { Error(); virtual ~Error(); };
Error::Error() {}
Error::~Error() {}
}
"""
#: A fake libtorch_cpu.so; VISIBILITY decides whether at::bar is exported.
LIBTORCH_SOURCE = "namespace at { VISIBILITY int bar(int x) { return x; } }\n"

#: An extension needing twelve torch:: functions, for the "... and N more" cut-off.
MANY_SOURCE = ("namespace torch {" + "".join(f"void f{i}();" for i in range(12)) + "}\n"
               "void run() {" + "".join(f"torch::f{i}();" for i in range(12)) + "}\n")


def compile_so(out: Path, source: str, *flags: str) -> Path:
    """Compile C++ ``source`` into the shared object ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(".cpp")
    src.write_text(source)
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(out), str(src), *flags], check=True)
    return out


@pytest.fixture(scope="module")
def sos(tmp_path_factory):
    """The compiled objects: an extension, a good and a bad fake torch/lib, a 12-symbol module."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    root = tmp_path_factory.mktemp("sos")
    for name, visibility in (("good", "__attribute__((visibility(\"default\")))"),
                             ("bad", "__attribute__((visibility(\"hidden\")))")):
        compile_so(root / name / "lib" / "libc10.so", LIBC10_SOURCE)
        compile_so(root / name / "lib" / "libtorch_cpu.so",
                   LIBTORCH_SOURCE.replace("VISIBILITY", visibility))
    return {"ext": compile_so(root / "ext" / "ext.so", EXT_SOURCE),
            "many": compile_so(root / "ext" / "many.so", MANY_SOURCE),
            "good": root / "good" / "lib", "bad": root / "bad" / "lib"}


# ---- check_tags -------------------------------------------------------------------------------

@pytest.mark.parametrize("name, platforms", [
    # a repaired wheel: one manylinux tag
    ("flash_attn-2.8.3-cp312-cp312-manylinux_2_28_x86_64.whl", ("manylinux_2_28_x86_64",)),
    # straight out of setup.py, before repair
    ("tinyext-0.1.0-cp311-cp311-linux_x86_64.whl", ("linux_x86_64",)),
    # compressed tag set from auditwheel: both platforms, sorted
    ("x-1.0-cp311-cp311-manylinux_2_5_x86_64.manylinux1_x86_64.whl",
     ("manylinux1_x86_64", "manylinux_2_5_x86_64")),
    # aarch64 is Linux too
    ("x-1.0-cp311-abi3-manylinux_2_28_aarch64.whl", ("manylinux_2_28_aarch64",)),
    # Windows amd64: the one Windows platform torch ships CUDA for
    ("x-1.0-cp312-cp312-win_amd64.whl", ("win_amd64",)),
])
def test_check_tags_accepts_the_platforms_built(name, platforms):
    assert check_tags(Path(name)) == platforms


@pytest.mark.parametrize("name, platform, fits", [
    ("x-1.0-cp312-cp312-manylinux_2_28_aarch64.whl", "linux_aarch64", True),
    ("x-1.0-cp312-cp312-linux_aarch64.whl", "linux_aarch64", True),            # before repair
    ("x-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", "linux_x86_64", True),
    ("x-1.0-cp312-cp312-win_amd64.whl", "win_amd64", True),
    ("x-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", "linux_aarch64", False),   # built on the wrong machine
    ("x-1.0-cp312-cp312-manylinux_2_28_aarch64.whl", "win_amd64", False),
    ("x-1.0-cp312-cp312-win_amd64.whl", "linux_x86_64", False),
])
def test_check_tags_against_the_cells_platform(name, platform, fits):
    if fits:
        check_tags(Path(name), platform=platform)
    else:
        with pytest.raises(VerifyError, match=f"but its cell builds for {platform}"):
            check_tags(Path(name), platform=platform)


@pytest.mark.parametrize("name, message", [
    # the classic silent failure: the CUDA extension was skipped
    ("flash_attn-2.8.3-py3-none-any.whl", "py3-none-any ships no kernels"),
    # built on the wrong OS
    ("x-1.0-cp311-cp311-macosx_14_0_arm64.whl", "platform tag(s) macosx_14_0_arm64, of no platform"),
    # Windows on ARM: torch has no CUDA build for it
    ("x-1.0-cp311-cp311-win_arm64.whl", "platform tag(s) win_arm64, of no platform"),
    # not a wheel name at all
    ("x-1.0.tar.gz", "'x-1.0.tar.gz' is not a wheel file name"),
])
def test_check_tags_rejects(name, message):
    with pytest.raises(VerifyError) as info:
        check_tags(Path(name))
    assert message in str(info.value)


def test_check_tags_pure_wheel_hint():
    with pytest.raises(VerifyError) as info:
        check_tags(Path("x-1.0-py3-none-any.whl"))
    assert "FORCE_BUILD/SKIP_CUDA_BUILD" in info.value.hint
    assert "nvcc was found" in info.value.hint


# ---- symbols ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, expected", [
    ("_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb", True),  # c10:: function
    ("_ZNK2at10TensorBase14const_data_ptrEv", True),        # const member of at::
    ("_ZN5torch8autograd12VariableInfoC1Ev", True),         # torch:: constructor
    ("_ZN6caffe28TypeMeta21_typeMetaDataInstanceIfEEPKNS_6detail11TypeMetaDataEv", True),
    ("_ZTIN3c105ErrorE", True),                             # typeinfo of c10::Error
    ("_ZTVN3c1010TensorImplE", True),                       # vtable of c10::TensorImpl
    ("_ZN3c10lsERSoRKNS_6DeviceE", True),                   # c10::operator<<
    ("_ZThn8_N3c1011StorageImplD1Ev", True),                # non-virtual thunk
    ("_ZNSt6vectorIiSaIiEED1Ev", False),                    # std::
    ("_Z7add_oneRKN2at6TensorE", False),                    # global function taking at::Tensor
    ("_ZN8pybind116detail11type_casterIN2at6TensorEvE4loadENS_6handleEb", False),  # pybind11::
    ("_ZN4c10x3fooEv", False),                              # namespace c10x, not c10
    ("PyInit_tinyext_cuda", False),
])
def test_is_torch_symbol(name, expected):
    assert is_torch_symbol(name) is expected


def test_undefined_torch_symbols_are_strong_torch_references(sos):
    # not other::baz (outside torch), not the weak c10::maybe (may stay unresolved)
    assert undefined_torch_symbols(sos["ext"]) == EXT_TORCH_SYMBOLS


def test_exported_symbols_respect_visibility(sos):
    good, bad = exported_symbols(sos["good"]), exported_symbols(sos["bad"])
    assert EXT_TORCH_SYMBOLS <= good
    assert "_ZN2at3barEi" not in bad             # defined, but hidden
    assert "_ZN3c103fooEv" in bad


def test_exported_symbols_without_torch_libraries(tmp_path):
    with pytest.raises(VerifyError, match="no torch libraries"):
        exported_symbols(tmp_path)


def test_demangle():
    assert demangle(["_ZN2at3barEi", "not_mangled"]) == ["at::bar(int)", "not_mangled"]


# ---- abi_check --------------------------------------------------------------------------------

def test_abi_check_passes_against_matching_torch(sos):
    assert abi_check([sos["ext"]], sos["good"], torch_version="2.13.0") == AbiReport(5, {})


def test_abi_check_names_the_missing_symbols(sos):
    with pytest.raises(VerifyError) as info:
        abi_check([sos["ext"]], sos["bad"], torch_version="2.13.0")
    text = str(info.value)
    assert "1 of 5 torch symbols" in text
    assert "built against a different torch than 2.13.0" in text
    assert "ext.so: at::bar(int)" in text
    assert "torch==2.13.*" in info.value.hint


def test_abi_report_does_not_raise(sos):
    report = abi_report([sos["ext"], sos["many"]], sos["bad"])
    assert report.checked == 5 + 12
    assert report.unresolved["ext.so"] == ["at::bar(int)"]
    assert len(report.unresolved["many.so"]) == 12


def test_abi_check_lists_at_most_ten(sos):
    with pytest.raises(VerifyError) as info:
        abi_check([sos["many"]], sos["good"], torch_version="2.9.1")
    text = str(info.value)
    assert text.count("many.so: torch::f") == 10
    assert "... and 2 more" in text


def test_abi_check_without_modules(sos):
    with pytest.raises(VerifyError, match="no extension modules"):
        abi_check([], sos["good"], torch_version="2.13.0")


# ---- extension_modules ------------------------------------------------------------------------

def test_extension_modules_skips_grafted_and_non_elf(tmp_path, sos):
    root = tmp_path / "unpacked"
    for rel in ("pkg/_C.cpython-311-x86_64-linux-gnu.so",  # a module in a package
                "top_cuda.abi3.so",                         # a top-level module
                "pkg.libs/libgrafted-1a2b3c4d.so"):         # auditwheel's graft: not ours
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(sos["ext"], root / rel)
    (root / "pkg" / "notes.so").write_text("not ELF")     # a data file with an unlucky name
    assert extension_modules(root) == [root / "pkg" / "_C.cpython-311-x86_64-linux-gnu.so",
                                       root / "top_cuda.abi3.so"]


# ---- archs ------------------------------------------------------------------------------------

def test_cuobjdump_is_found():
    assert Path(cuobjdump()).name == "cuobjdump"


def test_cuobjdump_exe_is_found_in_the_windows_wheels_layout(tmp_path, monkeypatch):
    """nvidia-cuda-cuobjdump's win_amd64 wheel holds nvidia/cu13/bin/cuobjdump.exe."""
    exe = tmp_path / "nvidia" / "cu13" / "bin" / "cuobjdump.exe"
    exe.parent.mkdir(parents=True)
    exe.write_text("")
    exe.chmod(0o755)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cuobjdump(host=windows) == str(exe)
    assert Path(cuobjdump(host=linux)).name == "cuobjdump"


def test_cuda_archs_without_device_code(sos):
    assert cuda_archs(sos["ext"]) == ArchReport((), ())


@pytest.mark.cuda
@needs_nvcc
def test_cuda_archs_reads_sass_and_ptx(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* x) { x[threadIdx.x] += 1.f; }\n"
                   "void launch(float* x) { k<<<1, 1>>>(x); }\n")
    out = tmp_path / "k.so"
    subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-o", str(out), str(src),
                    "-gencode", "arch=compute_90a,code=sm_90a",
                    "-gencode", "arch=compute_80,code=sm_80",
                    "-gencode", "arch=compute_90,code=compute_90"], check=True)
    # numeric order (80 before 90a), duplicates folded, PTX listed apart from SASS
    assert cuda_archs(out) == ArchReport(("80", "90a"), ("90",))


SASS_90 = ArchReport(("90",), ())
SASS_80_90 = ArchReport(("80", "90"), ())
PTX_ONLY = ArchReport((), ("90",))
HOST_ONLY = ArchReport((), ())


@pytest.mark.parametrize("found, requested, message", [
    # everything asked for is there
    ({"a.so": SASS_80_90}, ("80", "90"), None),
    # extra archs are fine
    ({"a.so": SASS_80_90}, ("90",), None),
    # a host-only helper module is not asked for device code
    ({"a.so": SASS_90, "helper.so": HOST_ONLY}, ("90",), None),
    # one arch missing: named, with the user-visible consequence
    ({"a.so": SASS_90}, ("80", "90"), "a.so: no sm_80 (has 90)"),
    # every module with device code must have it, not just one
    ({"a.so": SASS_80_90, "b.so": SASS_90}, ("80",), "b.so: no sm_80 (has 90)"),
    # PTX is not SASS
    ({"a.so": PTX_ONLY}, ("90",), "a.so: no sm_90 (has no SASS)"),
    # arch-specific targets are distinct archs
    ({"a.so": SASS_90}, ("90a",), "a.so: no sm_90a"),
    # no device code anywhere: the build compiled no kernels
    ({"a.so": HOST_ONLY}, ("90",), "no module has GPU code"),
    ({}, ("90",), "no module has GPU code"),
])
def test_check_archs(found, requested, message):
    if message is None:
        check_archs(found, requested)
        return
    with pytest.raises(VerifyError) as info:
        check_archs(found, requested)
    assert message in str(info.value)


def test_check_archs_says_what_users_would_see():
    with pytest.raises(VerifyError) as info:
        check_archs({"a.so": SASS_90}, ("80", "90", "120"))
    assert "sm_80, sm_120 GPU would get 'no kernel image is available" in str(info.value)


# ---- main -------------------------------------------------------------------------------------

@pytest.fixture
def ext_wheel(tmp_path, sos):
    """A (not installable) wheel holding the compiled "extension"."""
    path = tmp_path / "demo-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(sos["ext"], "demo/_C.cpython-311-x86_64-linux-gnu.so")
    return path


def test_main_passes(ext_wheel, sos, capsys):
    assert main([str(ext_wheel), "--torch-lib", str(sos["good"]), "--torch-version", "2.13.0"]) == 0
    out = capsys.readouterr().out
    assert "manylinux_2_28_x86_64; 5 torch symbols resolve in torch 2.13.0" in out
    assert "_C.cpython-311-x86_64-linux-gnu.so: sass -; ptx -" in out


@pytest.mark.parametrize("lib, archs, message", [
    # the ABI check fails first
    ("bad", [], "at::bar(int)"),
    # the arch check: a host-only module has no kernels
    ("good", ["90"], "no module has GPU code"),
])
def test_main_fails_with_verify_exit_code(ext_wheel, sos, capsys, lib, archs, message):
    argv = [str(ext_wheel), "--torch-lib", str(sos[lib]), "--torch-version", "2.13.0"]
    assert main(argv + (["--archs", *archs] if archs else [])) == VerifyError.exit_code
    assert message in capsys.readouterr().err


# ---- the tinyext fixture's sdist ----------------------------------------------------------------

def test_tinyext_sdist_is_reproducible(tmp_path):
    first, second = make_sdist(tmp_path / "a"), make_sdist(tmp_path / "b")
    assert first.name == "tinyext-0.1.0.tar.gz"
    assert hashlib.sha256(first.read_bytes()).digest() == \
        hashlib.sha256(second.read_bytes()).digest()
    with tarfile.open(first) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert {m.mtime for m in members} == {1577836800} and {m.uid for m in members} == {0}
    assert "tinyext-0.1.0/PKG-INFO" in names and "tinyext-0.1.0/setup.py" in names
    assert "tinyext-0.1.0/csrc/add_one.cu" in names
    assert all(n.startswith("tinyext-0.1.0/") for n in names)


# ---- the real thing: tinyext built against torch 2.13.0 (CUDA 13.0) ---------------------------

@pytest.fixture(scope="module")
def tinyext(tmp_path_factory):
    """The shared tinyext build, repaired and unpacked: (build, repaired wheel, module path)."""
    if nvcc_path() is None:
        pytest.skip("needs nvcc")
    build = shared_tinyext(tmp_path_factory)
    work = tmp_path_factory.mktemp("tinyext-verify")
    repaired = repair_wheel(build.wheel, work / "wheelhouse").wheel
    with zipfile.ZipFile(repaired) as zf:
        zf.extractall(work / "unpacked")
    modules = extension_modules(work / "unpacked")
    assert [m.name for m in modules] == ["tinyext_cuda.cpython-311-x86_64-linux-gnu.so"]
    return build, repaired, modules[0]


@pytest.mark.cuda
@pytest.mark.network
def test_tinyext_tags(tinyext):
    _, repaired, _ = tinyext
    assert check_tags(repaired)[0].startswith("manylinux_")


@pytest.mark.cuda
@pytest.mark.network
def test_tinyext_archs(tinyext):
    _, _, module = tinyext
    report = cuda_archs(module)
    assert report == ArchReport(("90",), ())   # exactly TINYEXT_CUDA_ARCHS, no torch defaults
    check_archs({module.name: report}, ("90",))
    with pytest.raises(VerifyError) as info:
        check_archs({module.name: report}, ("80", "90"))
    assert f"{module.name}: no sm_80 (has 90)" in str(info.value)


@pytest.mark.cuda
@pytest.mark.network
def test_tinyext_abi_matches_its_torch(tinyext):
    build, _, module = tinyext
    report = abi_check([module], build.torch_lib, torch_version=TORCH_VERSION)
    assert report.checked > 20 and report.unresolved == {}


@pytest.mark.cuda
@pytest.mark.network
def test_tinyext_abi_fails_against_torch_2_9_1(tinyext):
    # the "undefined symbol" users report when a wheel meets an older torch.
    _, _, module = tinyext
    with pytest.raises(VerifyError) as info:
        abi_check([module], torch_lib_dir("2.9.1"), torch_version="2.9.1")
    text = str(info.value)
    assert "built against a different torch than 2.9.1" in text
    assert "c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, " \
           "unsigned int, bool)" in text
    assert "torch==2.9.*" in info.value.hint


@pytest.mark.cuda
@pytest.mark.network
def test_tinyext_smoke_test(tinyext, tmp_path):
    _, repaired, _ = tinyext
    seconds = smoke_test(repaired, python="3.11", torch_requirement=f"torch=={TORCH_VERSION}",
                         imports=("tinyext_cuda", "tinyext"), workdir=tmp_path,
                         torch_version=TORCH_VERSION)
    assert seconds > 0
    log = (tmp_path / "smoke-import.log").read_text()
    assert "torch 2.13.0+cu130 cuda 13.0" in log and "imported tinyext from " in log


@pytest.mark.cuda
@pytest.mark.network
def test_smoke_test_names_the_failing_import(tinyext, tmp_path):
    _, repaired, _ = tinyext
    with pytest.raises(VerifyError) as info:
        smoke_test(repaired, python="3.11", torch_requirement=f"torch=={TORCH_VERSION}",
                   imports=("tinyext", "tinyext_missing"), workdir=tmp_path)
    text = str(info.value)
    assert "importing tinyext_missing failed" in text
    assert "No module named 'tinyext_missing'" in text


def _fake_torch(site: Path, version: str) -> None:
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(
        f"__version__ = {version!r}\nclass version:\n    cuda = '13.0'\n")
    (site / "fine_ext.py").write_text("")


@pytest.mark.parametrize("torch_version,imports,rc,says", [
    ("2.9.1", ["fine_ext"], 0, "imported fine_ext from "),
    ("", ["fine_ext"], 0, "torch 2.9.1+cu130 cuda 13.0"),          # empty: any torch
    ("2.8.0", ["fine_ext"], 1, "AssertionError"),                  # another torch installed
    ("2.9.1", ["fine_ext", "missing_ext"], 1, "No module named 'missing_ext'"),
])
def test_smoke_script(tmp_path, torch_version, imports, rc, says):
    """The one smoke script (host verify step, container test command, demo), on a stand-in
    torch: it checks the torch release and imports each module in order."""
    _fake_torch(tmp_path / "site", "2.9.1+cu130")
    argv = smoke_argv(sys.executable, torch_version, imports)
    assert "'" not in argv[2] and "{" not in argv[2]     # shell- and format-safe
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(tmp_path / "site")})
    assert proc.returncode == rc and says in proc.stdout + proc.stderr
