"""tools.devtools.armimage: the arm64 stand-in's names, labels, emulation check and file system
(built for real, and a container run from it, in tests/test_container_build.py's slow test)."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from tools.backends.containerized import image_for
from tools.devtools.emulated import MACHINE_LABEL, TOOLS_PYTHON_LABEL
from tools.core.errors import ToolchainError
from tools.devtools import armimage, standin_image
from tools.devtools.armimage import (PYTHON, TOOLS_PYTHON, VENVS, add_venv, build_image,
                                     check_emulation, image_name, labels, write_image_tar)
from tools.localimage import main


def test_the_name_and_labels_say_arm64():
    assert image_name("13.0") == "localhost/cuwheels-builder:cuda13.0-bookworm-arm64"
    found = labels("13.0")
    assert found[MACHINE_LABEL] == "aarch64"
    assert found[TOOLS_PYTHON_LABEL] == TOOLS_PYTHON == "/opt/python/cp311-cp311/bin/python"
    assert found["org.cuwheels.builder.stands-in-for"] == \
        "pytorch/manylinuxaarch64-builder:cuda13.0"
    assert found["org.cuwheels.builder.manylinux"] == "manylinux_2_36_aarch64"
    assert found["org.cuwheels.builder.pythons"] == "cp311-cp311,cp39-cp39"
    assert found["org.cuwheels.builder.cuobjdump"] == armimage.CUOBJDUMP[1] == "13.4.49"
    assert "cp39-cp39 is Python 3.11 too" in found["org.opencontainers.image.description"]


def test_the_rootfs_of_arm64_is_cached_apart(tmp_path):
    arm = standin_image.rootfs_dir(armimage.PACKAGES, cache=tmp_path, arch="arm64")
    assert arm.name.endswith("-arm64")
    assert arm != standin_image.rootfs_dir(armimage.PACKAGES, cache=tmp_path)
    # the x86_64 stand-in's tree keeps its name (no rebuild of an existing cache)
    assert not standin_image.rootfs_dir(cache=tmp_path).name.endswith("-amd64")


def test_debootstrap_is_told_the_architecture(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(standin_image.shutil, "which", lambda name: "/usr/sbin/debootstrap")

    def run(argv, **kwargs):
        seen.append(argv)
        import subprocess
        return subprocess.CompletedProcess(argv, 0, "", "")

    standin_image.debootstrap(tmp_path / "root", packages=("g++",), mirror="http://m/debian",
                           run=run, arch="arm64")
    assert seen[0][:3] == ["debootstrap", "--arch=arm64", "--variant=minbase"]
    assert (tmp_path / "root.complete").is_file()


@pytest.mark.parametrize("content,word", [(None, "missing"), ("disabled\ninterpreter x\n",
                                                                 "disabled")])
def test_no_qemu_handler_is_named_with_the_fix(tmp_path, content, word):
    if content is not None:
        (tmp_path / "qemu-aarch64").write_text(content)
    with pytest.raises(ToolchainError, match=f"can't run aarch64 binaries: .*qemu-aarch64 is "
                                             f"{word}") as info:
        check_emulation(tmp_path, machine="x86_64")
    assert "qemu-user-static binfmt-support" in info.value.hint


def test_an_enabled_handler_or_an_arm64_machine_passes(tmp_path):
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/x\n")
    check_emulation(tmp_path, machine="x86_64")
    check_emulation(tmp_path / "nowhere", machine="aarch64")


def test_another_cuda_than_the_pins_is_refused_first():
    with pytest.raises(ToolchainError, match="pinned for CUDA 13.0") as info:
        build_image("12.8", engine="no-such-engine")
    assert info.value.hint == "pass --cuda 13.0"


def fake_pip(directory: Path) -> Path:
    wheel = directory / "pip-25.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pip/__init__.py", "__version__ = '25.0.1'\n")
        zf.writestr("pip/_internal/cli/main.py", "def main():\n    return 0\n")
        zf.writestr("pip-25.0.1.dist-info/METADATA", "Name: pip\nVersion: 25.0.1\n")
    return wheel


def test_the_image_file_system(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "usr" / "bin").mkdir(parents=True)
    (rootfs / "usr" / "bin" / f"python{PYTHON}").write_bytes(b"\x7fELF")
    (rootfs / "opt").mkdir()
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_bytes(b"\x7fELF")
    cuobjdump = tmp_path / "nvidia_cuda_cuobjdump-13.4.49-py3-none-manylinux_2_17_aarch64.whl"
    with zipfile.ZipFile(cuobjdump, "w") as zf:
        zf.writestr("nvidia/cu13/bin/cuobjdump", b"\x7fELF cuobjdump")
    out = io.BytesIO()
    write_image_tar(out, rootfs, cuda, "13.0", fake_pip(tmp_path), cuobjdump)
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        members = {m.name: m for m in tar.getmembers()}
        cfg = tar.extractfile(members["./opt/python/cp311-cp311/pyvenv.cfg"]).read().decode()
        pip = tar.extractfile(members["./opt/python/cp39-cp39/bin/pip"]).read().decode()
    assert "home = /usr/bin" in cfg and "include-system-site-packages = false" in cfg
    for tag in VENVS:
        link = members[f"./opt/python/{tag}/bin/python"]
        assert link.issym() and link.linkname == f"/usr/bin/python{PYTHON}"
        assert f"./opt/python/{tag}/lib/python{PYTHON}/site-packages/pip/_internal/cli/main.py" \
            in members
    assert pip.startswith("#!/opt/python/cp39-cp39/bin/python\n")
    assert members["./opt/python/cp39-cp39/bin/pip"].mode == 0o755
    assert "./usr/local/cuda-13.0/bin/nvcc" in members
    # the toolkit's cuobjdump, from its wheel (the finish step's SASS check finds it on PATH)
    assert members["./usr/local/cuda-13.0/bin/cuobjdump"].mode == 0o755
    assert members["./usr/local/cuda"].linkname == "/usr/local/cuda-13.0"
    names = [m for m in members]
    assert len(names) == len(set(names))     # the engine refuses a layer naming a path twice


def test_each_environment_is_laid_out_once(tmp_path):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        add_venv(tar, "cp311-cp311", fake_pip(tmp_path))
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        names = tar.getnames()
    assert len(names) == len(set(names))
    assert "./opt/python/cp311-cp311/lib64" in names


def test_the_backend_reads_the_finish_python_from_the_label():
    from tools.plan.cells import Cell  # noqa: F401  (the cell type the backend takes)

    class FakeCell:
        platform_tag = "manylinux_2_28_aarch64"

    chosen = image_for(FakeCell(), "localhost/x", labels("13.0"))
    assert chosen.tools_python == TOOLS_PYTHON and chosen.plat == "auto"
    assert "aarch64 binaries run here under qemu-user" in chosen.note or \
        "aarch64" not in chosen.note   # on an arm64 machine the image runs natively
    plain = image_for(FakeCell(), "pytorch/manylinuxaarch64-builder:cuda13.0", {})
    assert plain.tools_python == "/opt/python/cp312-cp312/bin/python"
    assert plain.plat == "manylinux_2_28_aarch64"


def test_the_command_line_takes_arm64(monkeypatch):
    called = {}
    monkeypatch.setattr(armimage, "build_image",
                        lambda cuda, **kw: called.update(cuda=cuda, **kw) or "name")
    assert main(["--cuda", "13.0", "--arch", "arm64", "--no-start-check"]) == 0
    assert called["cuda"] == "13.0" and called["check_start"] is False
