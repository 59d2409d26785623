"""tools.localimage: inputs, the image's file system and labels, and a real container from it."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tools.devtools import standin_image
from tools.core.errors import ToolchainError
from tools.pipeline.build_toolchain import find_nvcc
from tools.devtools.standin_image import (
    LocalPython,
    build_image,
    debian_mirror,
    debootstrap,
    find_cuda,
    find_local_python,
    holds,
    image_changes,
    image_name,
    labels,
    rootfs_dir,
    write_image_tar,
)
from tools.backends.truststore import trust_store
from tools.localimage import main, parse_pythons


def completed(code: int = 0, out: str = "", err: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess([], code, out, err)


def test_names_say_what_the_image_holds():
    assert image_name("13.0") == "localhost/cuwheels-builder:cuda13.0-bookworm"
    assert standin_image.python_tag("3.9") == "cp39-cp39"
    assert standin_image.python_tag("3.13") == "cp313-cp313"


def test_labels_describe_a_stand_in():
    found = labels("13.0", ["3.9", "3.12"])
    prefix = standin_image.LABEL_PREFIX
    assert found[f"{prefix}.stand-in"] == "true"
    assert found[f"{prefix}.stands-in-for"] == "pytorch/manylinux2_28-builder:cuda13.0"
    assert found[f"{prefix}.glibc"] == "2.36"
    assert found[f"{prefix}.manylinux"] == "manylinux_2_36_x86_64"
    assert found[f"{prefix}.pythons"] == "cp39-cp39,cp312-cp312"
    changes = image_changes("13.0", ["3.12"])
    assert f'LABEL {prefix}.cuda="13.0"' in changes
    assert any(c.startswith("ENV PATH=/usr/local/cuda/bin:") for c in changes)


def test_holds_checks_cuda_and_every_python():
    found = labels("13.0", ["3.9", "3.10", "3.12"])
    assert holds(found, "13.0", ["3.9", "3.12"])
    assert not holds(found, "13.0", ["3.13"])
    assert not holds(found, "12.8", ["3.12"])
    assert not holds({}, "13.0", [])


def test_rootfs_cache_is_keyed_by_packages(tmp_path):
    one = rootfs_dir(("g++", "make"), cache=tmp_path)
    assert one == rootfs_dir(("make", "g++"), cache=tmp_path)
    assert one != rootfs_dir(("g++", "make", "git"), cache=tmp_path)
    assert one.parent == tmp_path / "rootfs" and one.name.startswith("bookworm-minbase-")


def test_debian_mirror_from_one_line_and_deb822_sources(tmp_path):
    one_line = tmp_path / "sources.list"
    one_line.write_text("# comment\ndeb [arch=amd64] http://mirror.example/debian bookworm main\n")
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: https://deb.example.org/debian/\nSuites: bookworm\n")
    other = tmp_path / "google.list"
    other.write_text("deb https://packages.cloud.google.com/apt cloud-sdk main\n")
    assert debian_mirror([other, one_line]) == "http://mirror.example/debian"
    assert debian_mirror([tmp_path / "absent", deb822]) == "https://deb.example.org/debian/"
    assert debian_mirror([other]) == "http://deb.debian.org/debian"


def test_debootstrap_reuses_a_complete_tree(tmp_path):
    dest = tmp_path / "rootfs"
    dest.mkdir()
    dest.with_name("rootfs.complete").write_text("done\n")
    assert debootstrap(dest, run=lambda argv: pytest.fail(f"ran {argv}")) == dest


def test_debootstrap_missing_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match="debootstrap is not installed") as err:
        debootstrap(tmp_path / "rootfs", run=lambda argv: pytest.fail("ran"))
    assert "apt-get install -y debootstrap" in str(err.value)


def test_debootstrap_failure_leaves_no_marker(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "debootstrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    dest = tmp_path / "cache" / "rootfs"
    seen = []

    def run(argv):
        seen.append(argv)
        return completed(1, err="E: Failed getting release file")

    with pytest.raises(ToolchainError, match="Failed getting release file") as err:
        debootstrap(dest, mirror="http://mirror.example/debian", run=run)
    assert "--mirror" in str(err.value)
    assert seen[0][:2] == ["debootstrap", "--variant=minbase"]
    assert seen[0][-3:] == ["bookworm", str(dest), "http://mirror.example/debian"]
    assert not dest.with_name("rootfs.complete").exists()


def _fake_nvcc(root: Path, release: str) -> Path:
    nvcc = root / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    nvcc.chmod(0o755)
    return root


def test_find_cuda_checks_the_release(tmp_path):
    home = _fake_nvcc(tmp_path / "cuda-12.8", "12.8")
    assert find_cuda("12.8", environ={"CUDA_HOME": str(home)}) == home
    with pytest.raises(ToolchainError, match=r"--cuda 13.0 asks for CUDA 13.0, but the toolkit "
                                             r"at .* is CUDA 12.8") as err:
        find_cuda("13.0", environ={"CUDA_HOME": str(home)})
    assert "pass --cuda 12.8" in str(err.value)
    with pytest.raises(ToolchainError, match="no CUDA toolkit"):
        find_cuda("13.0", environ={"CUDA_HOME": str(tmp_path / "none")})


def test_find_local_python_missing_version(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    with pytest.raises(ToolchainError, match=r"Python 3\.99 is not installed") as err:
        find_local_python("3.99")
    assert "pyenv install 3.99" in str(err.value)


def test_find_local_python_refuses_a_shared_prefix(tmp_path, monkeypatch):
    """A distribution's /usr Python can't be copied whole; it is not taken."""
    fake = tmp_path / "python3.12"
    fake.write_text("#!/bin/sh\necho True /usr\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    with pytest.raises(ToolchainError, match="prefix of their own"):
        find_local_python("3.12")


def test_missing_engine_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match="`podman` is not installed") as err:
        build_image("13.0", engine="podman", check_start=False)
    assert "apt-get install -y podman runc" in str(err.value)


def test_command_line_errors(capsys):
    assert main(["--cuda", "13"]) == ToolchainError.exit_code
    assert "--cuda: `13` is not a CUDA version" in capsys.readouterr().err
    assert parse_pythons("3.10, 3.12") == ["3.10", "3.12"]
    with pytest.raises(ToolchainError, match="`3.x` is not a Python version"):
        parse_pythons("3.12,3.x")


def test_image_tar_layout(tmp_path):
    """The stream holds the rootfs, each Python at its prefix with only pip/setuptools kept,
    /opt/python links, and the toolkit at /usr/local/cuda-X.Y with /usr/local/cuda linked."""
    rootfs = tmp_path / "rootfs"
    for d in ("usr/local", "usr/bin", "var/cache/apt/archives", "root", "dev"):
        (rootfs / d).mkdir(parents=True)
    (rootfs / "usr/bin/g++").write_text("compiler")
    (rootfs / "var/cache/apt/archives/gcc_12.deb").write_text("package")
    prefix = tmp_path / "pyenv/versions/3.12.1"
    site = prefix / "lib/python3.12/site-packages"
    for d in ("pip", "pip-24.2.dist-info", "numpy", "setuptools"):
        (site / d).mkdir(parents=True)
        (site / d / "__init__.py").write_text("")
    (site / "hook.pth").write_text("import os")
    (prefix / "lib/python3.12/os.py").write_text("# stdlib")
    (prefix / "bin").mkdir()
    (prefix / "bin/python3.12").write_text("interpreter")
    (prefix / "bin/python").symlink_to("python3.12")
    cuda = _fake_nvcc(tmp_path / "cuda-13.0", "13.0")

    buf = io.BytesIO()
    prefix313 = tmp_path / "pyenv/versions/3.13.0"
    (prefix313 / "bin").mkdir(parents=True)
    (prefix313 / "bin/python3.13").write_text("interpreter")
    write_image_tar(buf, rootfs, [LocalPython("3.12", prefix), LocalPython("3.13", prefix313)],
                    cuda, "13.0")
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        names = [m.name.removeprefix("./").rstrip("/") for m in tar.getmembers()]
        members = {m.name.removeprefix("./").rstrip("/"): m for m in tar.getmembers()}
    # podman refuses a layer naming a path twice ("duplicates of file paths not supported").
    assert len(names) == len(set(names))
    assert members["opt/python/cp313-cp313"].linkname == str(prefix313)
    p = str(prefix).lstrip("/")
    assert "usr/bin/g++" in members
    assert "var/cache/apt/archives/gcc_12.deb" not in members
    assert f"{p}/lib/python3.12/os.py" in members
    assert f"{p}/bin/python" in members and members[f"{p}/bin/python"].issym()
    kept = {n.split("site-packages/")[1].split("/")[0] for n in members if "site-packages/" in n}
    assert kept == {"pip", "pip-24.2.dist-info", "setuptools"}
    link = members["opt/python/cp312-cp312"]
    assert link.issym() and link.linkname == str(prefix)
    assert members["usr/local/cuda"].issym()
    assert members["usr/local/cuda"].linkname == "/usr/local/cuda-13.0"
    assert "usr/local/cuda-13.0/bin/nvcc" in members
    # Parents of the prefix that the rootfs lacks get directory entries of their own.
    assert members[str(prefix.parent).lstrip("/")].isdir()


# --- a real container from the real image ------------------------------------------------------

def _local_cuda() -> str | None:
    """The CUDA version of the toolkit this machine builds with: /usr/local/cuda, or the one
    from PyPI's nvidia packages where there is none (tools.pipeline.build_toolchain.find_nvcc)."""
    try:
        return find_nvcc().version
    except ToolchainError:
        return None


@pytest.fixture(scope="module")
def local_image():
    """The default local image for this machine's CUDA, built once and then cached (minutes
    the first time); skipped, with the reason, where the machine lacks what it needs."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (scripts/ci_podman.sh installs it)")
    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed (scripts/ci_podman.sh installs it)")
    cuda = _local_cuda()
    if cuda is None:
        pytest.skip("no CUDA toolkit at /usr/local/cuda")
    try:
        for version in {standin_image.HELPER_PYTHON, *standin_image.DEFAULT_PYTHONS}:
            find_local_python(version)
    except ToolchainError as exc:
        pytest.skip(str(exc))
    name = build_image(cuda, check_start=False)
    probe = standin_image.check_starts("podman", name)
    assert probe.ok, probe.why
    return name, cuda, probe.runtime_args


def _in_container(image, *command, args=()):
    name, _, runtime_args = image
    return subprocess.run(["podman", *runtime_args, "run", "--rm", *args, name, *command],
                          capture_output=True, text=True, timeout=600)


def test_real_container_runs_python_and_nvcc(local_image):
    proc = _in_container(local_image, "/opt/python/cp312-cp312/bin/python", "-c",
                         "import ssl, sys; print(sys.version)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("3.12.")
    proc = _in_container(local_image, "/usr/local/cuda/bin/nvcc", "--version")
    assert proc.returncode == 0, proc.stderr
    assert f"release {local_image[1]}" in proc.stdout
    # cibuildwheel's probe interpreter, and the pip it checks for on PATH.
    proc = _in_container(local_image, "sh", "-c", "/opt/python/cp39-cp39/bin/python -V && "
                         "PATH=/opt/python/cp313-cp313/bin:$PATH which pip")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["Python", proc.stdout.split()[1],
                                   "/opt/python/cp313-cp313/bin/pip"]


def test_real_image_is_labelled(local_image):
    name, cuda, _ = local_image
    found = standin_image.image_labels("podman", name)
    assert found[f"{standin_image.LABEL_PREFIX}.cuda"] == cuda
    assert found[f"{standin_image.LABEL_PREFIX}.manylinux"] == standin_image.POLICY
    platform = subprocess.run(["podman", "image", "inspect", "--format",
                               "{{.Os}}/{{.Architecture}}", name],
                              capture_output=True, text=True).stdout.strip()
    # cibuildwheel pulls (and here fails) unless the local image is already the right platform.
    assert platform == "linux/amd64"


def test_real_container_compiles_cuda(local_image, tmp_path):
    (tmp_path / "k.cu").write_text("__global__ void k(float *x) { x[threadIdx.x] *= 2; }\n")
    proc = _in_container(local_image, "/usr/local/cuda/bin/nvcc", "-arch=sm_90", "-c",
                         "/src/k.cu", "-o", "/src/k.o", args=("--volume", f"{tmp_path}:/src"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "k.o").stat().st_size > 0


@pytest.mark.network
def test_real_container_pip_trusts_this_machines_cas(local_image, tmp_path):
    """pip inside reaches the registry with this machine's CA bundles mounted and named (what
    a TLS-intercepting proxy needs); the mounts and variables must not get in its way."""
    store = trust_store()
    env_args = [arg for name in store.variables for arg in ("--env", name)]
    proc = _in_container(local_image, "/opt/python/cp312-cp312/bin/python", "-m", "pip",
                         "download", "--no-deps", "--quiet", "-d", "/out", "six",
                         args=(*store.create_args, *env_args, "--volume", f"{tmp_path}:/out"))
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in tmp_path.glob("six-*.whl")]


def test_a_free_threaded_python_is_its_own_entry(tmp_path, monkeypatch):
    """``--python 3.14t``: manylinux's folder (cp314-cp314t), found as ``python3.14t`` and only
    when the interpreter answers that it is that build (the question asks for the GIL-less
    build: a real free-threaded Python answers True, a normal one False)."""
    assert parse_pythons("3.12,3.14t") == ["3.12", "3.14t"]
    assert standin_image.python_tag("3.14t") == "cp314-cp314t"
    fake = tmp_path / "python3.14t"
    fake.write_text(f"#!/bin/sh\necho True {tmp_path / 'ft'}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    assert find_local_python("3.14t").prefix == tmp_path / "ft"
    # the question itself, asked of this (normal) interpreter for 3.Xt: not that build
    here = "%d.%d" % sys.version_info[:2]
    (tmp_path / f"python{here}t").symlink_to(sys.executable)
    with pytest.raises(ToolchainError, match=rf"Python {here}t is not installed"):
        find_local_python(f"{here}t")
