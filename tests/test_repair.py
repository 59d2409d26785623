"""tools.repair: the real ``auditwheel repair`` on small gcc-built wheels, and on tinyext.

The small wheels hold one shared object that links to a fake ``libc10.so`` (as a torch extension
does): auditwheel can't find it, so only the excludes make the repair work, and nothing may be
grafted.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import os
import sys
import platform
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tinyext_support import nvcc_path, shared_tinyext
from tools.core.errors import RepairError
from tests.fixtures.binaries.make_binaries import cross_compiled_so
from tools.finish.auditwheel_repair import TORCH_EXCLUDES, auditwheel_command, repair_wheel, this_machine
from tools.repair import main
from tools.finish.checks import cuda_archs, extension_modules

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

#: A module calling into the library it links to (or the linker drops the dependency).
MODULE_C = "void dep(void);\nint g(int x) { dep(); return x + 1; }\n"
#: The same plus dlopen, versioned GLIBC_2.34 since glibc 2.34 merged libdl into libc.
NEEDS_GLIBC_2_34 = MODULE_C + "#include <dlfcn.h>\nvoid *f(void) { return dlopen(\"x\", 0); }\n"


def _glibc() -> tuple[int, int] | None:
    name, version = platform.libc_ver()
    if name != "glibc" or not version:
        return None
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def compile_so(out: Path, source: str, *flags: str) -> Path:
    """Compile C ``source`` into the shared object ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *flags], check=True)
    return out


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, files: dict[str, bytes], *, tag: str = "cp311-cp311-linux_x86_64",
               name: str = "demo", version: str = "1.0") -> Path:
    """A minimal valid wheel (WHEEL, METADATA, RECORD) holding ``files``."""
    dist_info = f"{name}-{version}.dist-info"
    members = dict(files)
    members[f"{dist_info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\n"
                                        f"Version: {version}\nRequires-Dist: torch\n").encode()
    members[f"{dist_info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: tests\n"
                                     f"Root-Is-Purelib: {'true' if 'none-any' in tag else 'false'}"
                                     f"\nTag: {tag}\n").encode()
    record = "".join(f"{arc},{_record_hash(data)},{len(data)}\n" for arc, data in members.items())
    members[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data in members.items():
            zf.writestr(arc, data)
    return path


@pytest.fixture
def torch_like_wheel(tmp_path):
    """A wheel whose module needs ``libc10.so`` (a fake one, not on the library path)."""
    def make(source: str = MODULE_C) -> Path:
        lib = compile_so(tmp_path / "torchlib" / "libc10.so", "void dep(void) {}\n")
        module = compile_so(tmp_path / "build" / "_C.so", source,
                            f"-L{lib.parent}", "-lc10")
        return make_wheel(tmp_path / "dist", {"demo/__init__.py": b"",
                                              "demo/_C.cpython-311-x86_64-linux-gnu.so":
                                                  module.read_bytes()})
    return make


# ---- TORCH_EXCLUDES ---------------------------------------------------------------------------

@pytest.mark.parametrize("soname, excluded", [
    ("libtorch_cuda.so", True),          # torch
    ("libtorch_python.so", True),
    ("libc10.so", True),
    ("libc10_cuda.so", True),
    ("libcudart.so.13", True),           # CUDA runtime from torch's nvidia-* wheels
    ("libcudart.so.12", True),
    ("libcuda.so.1", True),              # the driver
    ("libnvrtc.so.13", True),
    ("libnvrtc-builtins.so.13.0", True),
    ("libcublasLt.so.13", True),
    ("libcudnn_graph.so.9", True),
    ("libnccl.so.2", True),
    ("libcusparseLt.so.0", True),
    ("libnvJitLink.so.13", True),
    ("libnvToolsExt.so.1", True),
    ("libshm.so", True),
    ("libgomp.so.1", True),              # torch bundles its own OpenMP runtime
    ("libstdc++.so.6", False),           # in the manylinux policy: neither grafted nor excluded
    ("libz.so.1", False),                # a real dependency: auditwheel must graft it
    ("libcuda_helper.so", False),        # "libcuda.so*" must not swallow other names
])
def test_torch_excludes(soname, excluded):
    assert any(fnmatch.fnmatch(soname, p) for p in TORCH_EXCLUDES) is excluded


# ---- repair_wheel on small wheels -------------------------------------------------------------

def test_auto_takes_the_most_compatible_policy(tmp_path, torch_like_wheel):
    wheel = torch_like_wheel()
    log = tmp_path / "repair.log"
    result = repair_wheel(wheel, tmp_path / "out", log=log)
    # only libc symbols from before glibc 2.5: the oldest policy there is, with its alias
    assert result.platform_tags == ("manylinux1_x86_64", "manylinux_2_5_x86_64")
    assert result.wheel == tmp_path / "out" / \
        "demo-1.0-cp311-cp311-manylinux1_x86_64.manylinux_2_5_x86_64.whl"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [result.wheel.name]
    with zipfile.ZipFile(result.wheel) as zf:
        assert not [n for n in zf.namelist() if ".libs/" in n]     # libc10 was not grafted
    assert result.size_before == wheel.stat().st_size and result.size_after > 0
    assert ["--plat", "auto"] == result.command[4:6] and "--strip" in result.command
    assert "Excluding libc10.so" in log.read_text()


def test_explicit_plat_is_the_only_tag(tmp_path, torch_like_wheel):
    result = repair_wheel(torch_like_wheel(), tmp_path / "out", plat="manylinux_2_28_x86_64")
    assert result.platform_tags == ("manylinux_2_28_x86_64",)
    assert "--only-plat" in result.command


@pytest.mark.skipif((_glibc() or (0, 0)) < (2, 34), reason="needs a glibc >= 2.34 host")
def test_too_recent_symbols(tmp_path, torch_like_wheel):
    wheel = torch_like_wheel(NEEDS_GLIBC_2_34)
    assert repair_wheel(wheel, tmp_path / "auto").platform_tags == ("manylinux_2_34_x86_64",)
    with pytest.raises(RepairError) as info:
        repair_wheel(wheel, tmp_path / "out", plat="manylinux_2_28_x86_64")
    assert "too-recent versioned symbols" in str(info.value)
    assert "manylinux_2_28 container" in info.value.hint
    assert "plat='auto'" in info.value.hint


def test_unknown_library_needs_an_exclude(tmp_path):
    lib = compile_so(tmp_path / "vendor" / "libfoo.so", "void dep(void) {}\n")
    module = compile_so(tmp_path / "build" / "_C.so", MODULE_C, f"-L{lib.parent}", "-lfoo")
    wheel = make_wheel(tmp_path / "dist", {"demo/_C.cpython-311-x86_64-linux-gnu.so":
                                           module.read_bytes()})
    with pytest.raises(RepairError) as info:
        repair_wheel(wheel, tmp_path / "out")
    assert 'required library "libfoo.so" could not be located' in str(info.value)
    assert "extra_excludes" in info.value.hint
    result = repair_wheel(wheel, tmp_path / "out", extra_excludes=("libfoo.so",))
    assert "--exclude" in result.command and "libfoo.so" in result.command


def test_pure_wheel_is_refused(tmp_path):
    wheel = make_wheel(tmp_path / "dist", {"demo/__init__.py": b""}, tag="py3-none-any")
    with pytest.raises(RepairError) as info:
        repair_wheel(wheel, tmp_path / "out")
    assert "does not look like a platform wheel" in str(info.value)
    assert "skipped the CUDA extension" in info.value.hint


def test_unknown_policy(tmp_path, torch_like_wheel):
    with pytest.raises(RepairError) as info:
        repair_wheel(torch_like_wheel(), tmp_path / "out", plat="manylinux_9_99_x86_64")
    assert "invalid choice" in str(info.value)
    assert "manylinux_2_28_x86_64" in info.value.hint


# ---- other architectures ----------------------------------------------------------------------

@pytest.mark.parametrize("plat", ["manylinux_2_28_aarch64", "manylinux_2_28_x86_64", "auto"])
def test_the_command_names_the_policy_and_the_same_excludes_for_every_architecture(tmp_path, plat):
    command = auditwheel_command(tmp_path / "w.whl", tmp_path / "out", plat=plat)
    assert command[command.index("--plat") + 1] == plat
    assert ("--only-plat" in command) is (plat != "auto")
    excludes = [command[i + 1] for i, word in enumerate(command) if word == "--exclude"]
    assert excludes == list(TORCH_EXCLUDES)


def test_a_wheel_of_another_architecture_is_refused_before_auditwheel_runs(tmp_path):
    other = "aarch64" if this_machine() != "aarch64" else "x86_64"
    wheel = make_wheel(tmp_path / "dist", {"demo/_C.so": b""}, tag=f"cp311-cp311-linux_{other}")
    with pytest.raises(RepairError, match=f"is a {other} wheel and this machine is {this_machine()}: "
                                          "auditwheel repairs wheels of the machine it runs on") as info:
        repair_wheel(wheel, tmp_path / "out", plat=f"manylinux_2_28_{other}")
    assert f"finish a {other} cell on a {other} machine" in info.value.hint
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


#: auditwheel as an aarch64 machine runs it: its --plat choices come from platform.machine();
#: everything else (the ELF reading, the excludes, the policy) comes from the wheel. Only the
#: test uses this, to run the real repair of a real aarch64 object on any machine.
_AUDITWHEEL_AS_AARCH64 = ("import platform, sys; platform.machine = lambda: 'aarch64'; "
                          "from auditwheel.main import main; sys.argv[0] = 'auditwheel'; "
                          "sys.exit(main())")


def test_auditwheel_repairs_a_real_aarch64_extension_with_torch_excluded(tmp_path):
    """A cross-compiled aarch64 module linking a (fake, aarch64) libc10.so: with the excludes,
    auditwheel grafts nothing and tags it manylinux_2_28_aarch64, as in the aarch64 image."""
    lib = cross_compiled_so(tmp_path / "torchlib" / "libc10.so", "void dep(void) {}\n")
    if lib is None:
        pytest.skip("aarch64-linux-gnu-gcc is not installed (apt-get install gcc-aarch64-linux-gnu)")
    src = tmp_path / "m.c"
    src.write_text(MODULE_C)
    module = tmp_path / "m.so"
    subprocess.run(["aarch64-linux-gnu-gcc", "-shared", "-fPIC", "-o", str(module), str(src),
                    f"-L{lib.parent}", "-lc10"], check=True, timeout=120)
    wheel = make_wheel(tmp_path / "dist", {"demo/_C.cpython-311-aarch64-linux-gnu.so": module.read_bytes()},
                       tag="cp311-cp311-linux_aarch64")
    # --strip would run this machine's strip on an aarch64 object: the aarch64 image's does it.
    command = auditwheel_command(wheel, tmp_path / "out", plat="manylinux_2_28_aarch64", strip=False)
    assert command[1:3] == ["-m", "auditwheel"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-c", _AUDITWHEEL_AS_AARCH64, *command[3:]],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "Excluding libc10.so" in proc.stderr
    (out,) = (tmp_path / "out").iterdir()
    assert out.name == "demo-1.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    with zipfile.ZipFile(out) as zf:
        assert not [n for n in zf.namelist() if ".libs/" in n]   # libc10 was not grafted


def test_missing_wheel(tmp_path):
    with pytest.raises(RepairError, match="no wheel at"):
        repair_wheel(tmp_path / "nope-1.0-cp311-cp311-linux_x86_64.whl", tmp_path / "out")


def test_main(tmp_path, torch_like_wheel, capsys):
    assert main([str(torch_like_wheel()), "--out-dir", str(tmp_path / "out"),
                 "--plat", "manylinux_2_28_x86_64"]) == 0
    assert "demo-1.0-cp311-cp311-manylinux_2_28_x86_64.whl (manylinux_2_28_x86_64; " \
        in capsys.readouterr().out


def test_main_failure_exit_code(tmp_path, capsys):
    wheel = make_wheel(tmp_path / "dist", {"demo/__init__.py": b""}, tag="py3-none-any")
    assert main([str(wheel), "--out-dir", str(tmp_path / "out")]) == RepairError.exit_code
    assert "repair error: auditwheel repair of demo-1.0-py3-none-any.whl" in capsys.readouterr().err


# ---- the real thing: tinyext --------------------------------------------------------------------

@pytest.fixture(scope="module")
def tinyext_wheel(tmp_path_factory):
    """The shared tinyext build's wheel (linux_x86_64, straight from setup.py)."""
    if nvcc_path() is None:
        pytest.skip("needs nvcc")
    return shared_tinyext(tmp_path_factory).wheel


@pytest.mark.cuda
@pytest.mark.network
def test_repair_tinyext(tinyext_wheel, tmp_path):
    result = repair_wheel(tinyext_wheel, tmp_path / "out")
    if _glibc() == (2, 36):
        # what a host build on Debian 12 reaches
        assert result.platform_tags == ("manylinux_2_34_x86_64",)
    assert result.platform_tags[0].startswith("manylinux_")
    with zipfile.ZipFile(result.wheel) as zf:
        names = zf.namelist()
        zf.extractall(tmp_path / "unpacked")
    grafted = [n for n in names if ".libs/" in n]
    assert grafted == [], f"torch/CUDA libraries were grafted: {grafted}"
    assert result.size_after < result.size_before      # --strip dropped the debug info
    # ...but not the device code
    (module,) = extension_modules(tmp_path / "unpacked")
    assert cuda_archs(module).sass == ("90",)


@pytest.mark.cuda
@pytest.mark.network
@pytest.mark.skipif((_glibc() or (0, 0)) <= (2, 28), reason="a manylinux_2_28 host can do it")
def test_repair_tinyext_to_manylinux_2_28_needs_the_container(tinyext_wheel, tmp_path):
    with pytest.raises(RepairError) as info:
        repair_wheel(tinyext_wheel, tmp_path / "out", plat="manylinux_2_28_x86_64")
    assert "too-recent versioned symbols" in str(info.value)
    assert "manylinux_2_28 container" in info.value.hint
