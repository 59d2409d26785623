"""tools.pipeline.cudakit: the CUDA 13.0 toolkit from PyPI's nvidia packages.

Small wheels of the toolkit's shape (files under ``nvidia/cu13/``, an ``nvcc`` that answers
``--version``) go through the real steps: pip downloads them from a folder with their sha256
pinned, they are assembled and the marker is written. Hostile wheels and downloads are refused
by name. The real toolkit, installed once from PyPI into the cache, compiles and links a CUDA
program.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tools.core.digest import sha256_file
from tools.core.errors import ToolchainError
from tools.pipeline import cudakit
from tools.pipeline.cudakit import (MARKER, WHEELS_ENV, Part, assemble, check_machine, download,
                                    ensure_toolkit, is_complete, marker_text, toolkit_home)
from wheelfactory import make_wheel

#: An nvcc that only says which release it is, as the real one does.
FAKE_NVCC = b"#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n"


def toolkit_wheel(directory: Path, name: str, version: str, files: dict[str, bytes],
                  executable: tuple[str, ...] = ()) -> Path:
    """A real wheel of ``name`` holding ``files`` (paths inside the wheel); the members in
    ``executable`` carry mode 0744, as NVIDIA's wheels give their programs."""
    wheel = make_wheel(directory, name, version, tag="py3-none-any", extra_files=files)
    with zipfile.ZipFile(wheel) as zf:
        members = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(wheel, "w") as zf:
        for info, data in members:
            if info.filename in executable:
                info.external_attr = 0o100744 << 16
            zf.writestr(info, data)
    return wheel


def fake_parts(directory: Path) -> tuple[Part, ...]:
    """Three wheels of the toolkit's shape in ``directory``, and their pins."""
    wheels = [
        toolkit_wheel(directory, "nvidia-cuda-nvcc", "13.0.88",
                      {"nvidia/cu13/bin/nvcc": FAKE_NVCC,
                       "nvidia/cu13/bin/nvcc.profile": b"TOP = $(_HERE_)/..\n",
                       "nvidia/cu13/.metadata/provenance.txt": b"release scan\n"},
                      executable=("nvidia/cu13/bin/nvcc",)),
        toolkit_wheel(directory, "nvidia-cuda-runtime", "13.0.96",
                      {"nvidia/cu13/include/cuda_runtime.h": b"/* runtime */\n",
                       "nvidia/cu13/lib/libcudart.so.13": b"\x7fELF",
                       "nvidia/cu13/lib/libcudart_static.a": b"!<arch>\n"}),
        toolkit_wheel(directory, "nvidia-nvvm", "13.0.88",
                      {"nvidia/cu13/nvvm/bin/cicc": b"#!/bin/sh\n",
                       "nvidia/cu13/lib/libnvvm.so.4": b"\x7fELF"},
                      executable=("nvidia/cu13/nvvm/bin/cicc",)),
    ]
    names = ("nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-nvvm")
    return tuple(Part(name, wheel.name.split("-")[1], sha256_file(wheel), "test")
                 for name, wheel in zip(names, wheels))


@pytest.fixture
def fake_kit(tmp_path):
    """The environment of a machine whose cache is ``tmp_path/cache`` and whose
    ``$CUWHEELS_CUDA_WHEELS`` holds the fake wheels; and their pins."""
    wheels = tmp_path / "wheels"
    parts = fake_parts(wheels)
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), WHEELS_ENV: str(wheels)}
    return environ, parts


# --------------------------------------------------------------------------- assembling


def test_assemble_flattens_the_wheels_and_adds_the_installers_links(tmp_path):
    parts_dir = tmp_path / "wheels"
    fake_parts(parts_dir)
    kit = assemble(sorted(parts_dir.glob("*.whl")), tmp_path / "kit")
    assert os.access(kit / "bin" / "nvcc", os.X_OK) and os.access(kit / "nvvm/bin/cicc", os.X_OK)
    assert not os.access(kit / "bin" / "nvcc.profile", os.X_OK)
    assert (kit / "include" / "cuda_runtime.h").read_bytes() == b"/* runtime */\n"
    # what NVIDIA's installers lay out and the wheels leave out
    assert os.readlink(kit / "lib64") == "lib"
    assert os.readlink(kit / "targets/x86_64-linux/include") == "../../include"
    assert (kit / "targets/x86_64-linux/lib/libcudart.so.13").is_file()
    assert os.readlink(kit / "lib" / "libcudart.so") == "libcudart.so.13"
    assert os.readlink(kit / "lib" / "libnvvm.so") == "libnvvm.so.4"
    assert not (kit / "lib" / "libcudart_static.so").exists()
    # NVIDIA's release-scan files stay out; each wheel's metadata is kept, as pip keeps it
    assert not (kit / ".metadata").exists()
    assert (kit / "dist-info/nvidia_cuda_nvcc-13.0.88.dist-info/METADATA").is_file()
    assert subprocess.run([kit / "bin" / "nvcc", "--version"], capture_output=True,
                          text=True).stdout.startswith("Cuda compilation tools, release 13.0")


@pytest.mark.parametrize("member,message", [
    # a path that climbs out of the toolkit
    ("nvidia/cu13/../../../evil.sh", "member 'nvidia/cu13/../../../evil.sh' would be written "
                                     "outside the toolkit"),
    ("/etc/cron.d/evil", "member '/etc/cron.d/evil' would be written outside the toolkit"),
    # another CUDA major's layout: nothing of it is a CUDA 13 toolkit
    ("nvidia/cu12/bin/nvcc", "holds no file under nvidia/cu13/: it is not a CUDA 13 toolkit "
                             "wheel"),
    # a wheel that is not NVIDIA's at all
    ("requests/__init__.py", "holds no file under nvidia/cu13/"),
])
def test_assemble_refuses_a_wheel_that_is_not_a_toolkit_part(tmp_path, member, message):
    wheel = toolkit_wheel(tmp_path, "nvidia-cuda-nvcc", "13.0.88", {member: b"x"})
    with pytest.raises(ToolchainError, match="nvidia_cuda_nvcc-13.0.88-py3-none-any.whl") as info:
        assemble([wheel], tmp_path / "kit")
    assert message in info.value.message
    assert not (tmp_path / "evil.sh").exists() and not Path("/etc/cron.d/evil").exists()


# --------------------------------------------------------------------------- downloading


def test_download_checks_each_wheel_against_its_pin(tmp_path):
    wheels = tmp_path / "wheels"
    parts = fake_parts(wheels)
    got = download(tmp_path / "dl", parts=parts, wheels=wheels)
    assert [w.name.split("-")[0] for w in got] == ["nvidia_cuda_nvcc", "nvidia_cuda_runtime",
                                                   "nvidia_nvvm"]


@pytest.mark.parametrize("case", ["hash differs", "wheel missing", "folder empty"])
def test_download_refuses_what_the_pins_do_not_name(tmp_path, case):
    """pip's hash-checking mode, really run: a wheel of the pinned name and version but other
    bytes, or none at all, stops the install before anything is assembled."""
    wheels = tmp_path / "wheels"
    parts = list(fake_parts(wheels))
    if case == "hash differs":
        parts[0] = Part(parts[0].name, parts[0].version, "0" * 64, "test")
        said, hint = "expected sha256 " + "0" * 64, f"remove it from {wheels} and retry"
    elif case == "wheel missing":
        next(wheels.glob("nvidia_nvvm-*.whl")).unlink()
        said, hint = "nvidia-nvvm==13.0.88", f"nvidia-nvvm==13.0.88 in {wheels}"
    else:
        shutil.rmtree(wheels)
        wheels.mkdir()
        said, hint = "nvidia-cuda-nvcc==13.0.88", f"nvidia-cuda-nvcc==13.0.88, "
    with pytest.raises(ToolchainError, match=rf"from the folder {wheels} \(\$CUWHEELS_CUDA_"
                                             r"WHEELS\) failed") as info:
        download(tmp_path / "dl", parts=parts, wheels=wheels)
    assert said in info.value.message.lower() and hint in info.value.hint


# --------------------------------------------------------------------------- installing once


def test_ensure_installs_once_and_says_so(fake_kit):
    environ, parts = fake_kit
    said: list[str] = []
    home = ensure_toolkit(environ, reason="no CUDA toolkit found", say=said.append, parts=parts)
    assert home == toolkit_home(environ) == Path(environ["XDG_CACHE_HOME"]) / "cuwheels" / \
        "cuda-13.0"
    assert said[0].startswith(f"no CUDA toolkit found: installing CUDA 13.0 from the wheels in "
                              f"{environ[WHEELS_ENV]} into {home}")
    assert said[1].startswith(f"installed CUDA 13.0 in {home} in ")
    assert json.loads((home / MARKER).read_text())["parts"][0] == [parts[0].name, "13.0.88",
                                                                  parts[0].sha256]
    # no scratch left beside it
    assert sorted(p.name for p in home.parent.iterdir()) == ["cuda-13.0", "cuda-13.0.lock"]
    # once: a second call neither downloads (the wheels are gone) nor says anything
    shutil.rmtree(environ[WHEELS_ENV])
    said.clear()
    assert ensure_toolkit(environ, say=said.append, parts=parts) == home and said == []


def test_a_second_install_waits_for_the_first_ones_lock(fake_kit):
    """The install lock is filelock's (fcntl is POSIX-only): while another holder has it, an
    install waits, then finds the toolkit complete or installs it."""
    import threading

    from filelock import FileLock

    environ, parts = fake_kit
    home = toolkit_home(environ)
    home.parent.mkdir(parents=True)
    said: list[str] = []
    with FileLock(home.parent / "cuda-13.0.lock"):
        waiting = threading.Thread(target=ensure_toolkit, args=(environ,),
                                   kwargs={"say": said.append, "parts": parts})
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive() and said == [] and not home.exists()
    waiting.join(120)
    assert not waiting.is_alive() and is_complete(home, parts)


def test_an_interrupted_install_is_not_taken_for_a_toolkit(fake_kit):
    """A toolkit without its marker (the process was killed, or someone copied half of one)
    is installed again, over what was there."""
    environ, parts = fake_kit
    home = toolkit_home(environ)
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").write_text("half")
    assert not is_complete(home, parts)
    ensure_toolkit(environ, say=lambda _: None, parts=parts)
    assert is_complete(home, parts) and (home / "bin" / "nvcc").read_bytes() == FAKE_NVCC


def test_a_toolkit_of_other_pins_is_installed_again(fake_kit):
    environ, parts = fake_kit
    home = ensure_toolkit(environ, say=lambda _: None, parts=parts)
    older = (Part(parts[0].name, "13.0.48", "1" * 64, "an older pin"), *parts[1:])
    (home / MARKER).write_text(marker_text(older))
    assert not is_complete(home, parts)
    said: list[str] = []
    ensure_toolkit(environ, say=said.append, parts=parts)
    assert is_complete(home, parts) and "installing CUDA 13.0" in said[0]


def test_a_failed_install_leaves_nothing_half_done(fake_kit):
    environ, parts = fake_kit
    broken = (Part(parts[0].name, parts[0].version, "f" * 64, "a wrong pin"), *parts[1:])
    with pytest.raises(ToolchainError, match="(?i)do not match the hashes") as info:
        ensure_toolkit(environ, say=lambda _: None, parts=broken)
    assert "differ from its pinned sha256" in info.value.hint
    cache = toolkit_home(environ).parent
    assert sorted(p.name for p in cache.iterdir()) == ["cuda-13.0.lock"]


def test_an_nvcc_that_does_not_answer_is_refused(tmp_path):
    wheels = tmp_path / "wheels"
    parts = list(fake_parts(wheels))
    bad = toolkit_wheel(tmp_path / "other", "nvidia-cuda-nvcc", "13.0.88",
                        {"nvidia/cu13/bin/nvcc": b"#!/bin/sh\necho 'release 12.9'\n"},
                        executable=("nvidia/cu13/bin/nvcc",))
    next(wheels.glob("nvidia_cuda_nvcc-*.whl")).unlink()
    shutil.copy(bad, wheels)
    parts[0] = Part(parts[0].name, parts[0].version, sha256_file(bad), "test")
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), WHEELS_ENV: str(wheels)}
    with pytest.raises(ToolchainError, match=r"has no working CUDA 13.0 nvcc \(bin/nvcc "
                                             r"--version: release 12.9\)"):
        ensure_toolkit(environ, say=lambda _: None, parts=tuple(parts))
    assert not toolkit_home(environ).exists()


@pytest.mark.parametrize("machine,system", [("ppc64le", "linux"), ("x86_64", "darwin"),
                                            ("AMD64", "win32"), ("aarch64", "darwin")])
def test_the_pins_are_for_linux_x86_64_and_aarch64_only(machine, system):
    with pytest.raises(ToolchainError, match=f"this machine is {system} {machine}") as info:
        check_machine(machine, system)
    assert "set CUDA_HOME" in info.value.hint
    check_machine("x86_64", "linux")
    check_machine("aarch64", "linux")     # an arm64 runner installs its own machine's pins


def test_this_machines_toolkit_takes_its_own_pins(monkeypatch):
    from tools.pipeline import cudakit
    monkeypatch.setattr(cudakit.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(cudakit.sys, "platform", "linux")
    assert cudakit.this_machine() == "aarch64"
    monkeypatch.setattr(cudakit.platform, "machine", lambda: "riscv64")
    assert cudakit.this_machine() == cudakit.MACHINE     # check_machine then refuses it


def test_the_pins_name_each_part_once_with_a_sha256():
    names = [p.name for p in cudakit.PARTS]
    assert len(set(names)) == len(names) and "nvidia-cuda-nvcc" in names
    assert all(len(p.sha256) == 64 and int(p.sha256, 16) >= 0 for p in cudakit.PARTS)
    assert all(p.version.startswith("13.0.") for p in cudakit.PARTS)


# --------------------------------------------------------------------------- the real toolkit


@pytest.mark.network
@pytest.mark.cuda
def test_the_toolkit_from_pypi_compiles_and_links_a_cuda_program(tmp_path):
    """The pinned wheels from PyPI, installed once into this machine's cache (``.ci/run`` does
    it first; seconds once there): nvcc compiles device code for sm_90 and links against the
    toolkit's shared libcudart."""
    home = ensure_toolkit()
    assert is_complete(home)
    source = tmp_path / "k.cu"
    source.write_text("#include <cuda_runtime.h>\n__global__ void k(float *x) { x[0] = 1; }\n"
                      "int main() { int v = 0; cudaRuntimeGetVersion(&v); return v == 13000 "
                      "? 0 : 1; }\n")
    # --cudart shared: linked through nvcc.profile's targets/x86_64-linux/lib and the
    # unversioned libcudart.so, the two links the wheels leave out
    proc = subprocess.run([home / "bin" / "nvcc", "-arch=sm_90", "--cudart", "shared", "-o",
                           tmp_path / "k", source], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    # the runtime needs no GPU to say its own version
    run = subprocess.run([tmp_path / "k"], env={"LD_LIBRARY_PATH": str(home / "lib64")},
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


# --------------------------------------------------------------------------- another machine's


def elf_header(e_machine: int) -> bytes:
    """The first 64 bytes of a 64-bit little-endian ELF executable for ``e_machine``."""
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    head[16:18] = (2).to_bytes(2, "little")            # ET_EXEC
    head[18:20] = e_machine.to_bytes(2, "little")      # 183: EM_AARCH64, 62: EM_X86_64
    return bytes(head)


def test_the_aarch64_pins_are_the_same_parts_of_other_files():
    x86, arm = cudakit.PARTS, cudakit.PARTS_AARCH64
    assert [(p.name, p.version) for p in arm] == [(p.name, p.version) for p in x86]
    assert all(len(p.sha256) == 64 for p in arm)
    assert not {p.sha256 for p in arm} & {p.sha256 for p in x86}
    assert cudakit.machine_parts("aarch64") is arm and cudakit.machine_parts("x86_64") is x86
    with pytest.raises(ToolchainError, match="no CUDA 13.0 toolkit pins for ppc64le"):
        cudakit.machine_parts("ppc64le")


def test_another_machines_toolkit_has_its_own_home_and_target_dir(tmp_path):
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    assert toolkit_home(environ).name == "cuda-13.0"
    assert toolkit_home(environ, "aarch64").name == "cuda-13.0-aarch64"
    assert cudakit.TARGET_DIRS["aarch64"] == "targets/sbsa-linux"


def test_download_of_another_machines_wheels_tells_pip_its_tags(tmp_path, monkeypatch):
    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "no such wheel")

    monkeypatch.setattr(cudakit.subprocess, "run", fake_run)
    with pytest.raises(ToolchainError):
        download(tmp_path, parts=cudakit.PARTS_AARCH64[:1], machine="aarch64")
    with pytest.raises(ToolchainError):
        download(tmp_path, parts=cudakit.PARTS[:1])
    arm, native = seen
    assert "--platform" in arm and "manylinux_2_17_aarch64" in arm
    assert "manylinux_2_25_aarch64" in arm          # cupti's aarch64 wheel
    assert "--platform" not in native


def aarch64_parts(directory: Path, e_machine: int = 183) -> tuple[Part, ...]:
    """The fake parts, their nvcc an ELF header for ``e_machine`` (it can't run here)."""
    wheels = [
        toolkit_wheel(directory, "nvidia-cuda-nvcc", "13.0.88",
                      {"nvidia/cu13/bin/nvcc": elf_header(e_machine)},
                      executable=("nvidia/cu13/bin/nvcc",)),
        toolkit_wheel(directory, "nvidia-cuda-runtime", "13.0.96",
                      {"nvidia/cu13/include/cuda_runtime.h": b"/* runtime */\n",
                       "nvidia/cu13/lib/libcudart.so.13": elf_header(e_machine)}),
    ]
    return tuple(Part(w.name.split("-")[0].replace("_", "-"), w.name.split("-")[1],
                      sha256_file(w), "test") for w in wheels)


def test_an_aarch64_toolkit_is_assembled_here_and_checked_by_its_elf_header(tmp_path):
    wheels = tmp_path / "wheels"
    parts = aarch64_parts(wheels)
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), WHEELS_ENV: str(wheels)}
    said = []
    home = ensure_toolkit(environ, say=said.append, parts=parts, machine="aarch64")
    assert home == toolkit_home(environ, "aarch64")
    assert (home / "targets" / "sbsa-linux" / "include").resolve() == (home / "include").resolve()
    assert not (home / "targets" / "x86_64-linux").exists()
    assert "installing CUDA 13.0 for aarch64" in said[0]
    assert is_complete(home, parts)
    assert not toolkit_home(environ).exists()         # this machine's toolkit is another


def test_an_aarch64_toolkit_holding_an_x86_64_nvcc_is_refused(tmp_path):
    wheels = tmp_path / "wheels"
    parts = aarch64_parts(wheels, e_machine=62)
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), WHEELS_ENV: str(wheels)}
    with pytest.raises(ToolchainError, match=r"has no aarch64 nvcc \(bin/nvcc: an ELF binary "
                                             r"for x86_64"):
        ensure_toolkit(environ, say=lambda _: None, parts=parts, machine="aarch64")
    assert not toolkit_home(environ, "aarch64").exists()


def test_the_pins_file_is_read_as_pip_reads_it_and_a_stray_line_is_named(tmp_path):
    pins = tmp_path / "pins.txt"
    pins.write_text(f"# a comment\n\nnvidia-nvtx==13.0.85 --hash=sha256:{'a' * 64}  # include/nvtx3/\n")
    assert cudakit.read_pins(pins) == (Part("nvidia-nvtx", "13.0.85", "a" * 64, "include/nvtx3/"),)
    pins.write_text("nvidia-nvtx>=13.0\n")
    with pytest.raises(ToolchainError, match=r"pins.txt, line 1: 'nvidia-nvtx>=13.0' is not"):
        cudakit.read_pins(pins)
