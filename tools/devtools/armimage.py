"""A local arm64 stand-in for PyTorch's aarch64 CUDA builder image, run here under emulation.

On an arm64 runner the container backend builds a ``linux_aarch64`` cell in
``pytorch/manylinuxaarch64-builder:cudaX.Y``, natively. On an x86_64 machine that can pull no
image, this builds an arm64 image of the same shape, and podman runs it through qemu-user
(``apt-get install qemu-user-static binfmt-support`` registers the handler the kernel uses for
every aarch64 binary in the container), so the same cibuildwheel run, finish step and import
test happen, only slower (compiles 11-16 times slower than natively: docs/design/build.md, "aarch64 on
an x86_64 machine"). It holds:

- Debian bookworm for arm64 (``debootstrap --arch arm64``; its second stage runs under qemu,
  about ten minutes here), the same packages as the x86_64 stand-in plus Debian's Python;
- that Python (bookworm's 3.11: no aarch64 CPython can be copied from this machine) as
  ``/opt/python/cp311-cp311``, a virtual environment laid out by hand (``pyvenv.cfg``, links to
  ``/usr/bin/python3.11``, pip unpacked from its pinned wheel), so nothing runs under emulation
  to make it; ``/opt/python/cp39-cp39``, which cibuildwheel runs its own helpers with, is another
  such environment of the same 3.11 (the label says so), and the finish step's Python is the
  3.11 one too (the ``tools-python`` label tells the backend);
- the CUDA toolkit for aarch64 assembled from PyPI's aarch64 nvidia wheels
  (``tools.pipeline.cudakit``, ``targets/sbsa-linux``) at ``/usr/local/cuda-X.Y``, with
  cuobjdump from its aarch64 wheel (:data:`CUOBJDUMP`).

Its glibc is 2.36, so its wheels repair to ``manylinux_2_3x_aarch64`` at best, never the real
image's ``manylinux_2_28_aarch64``; the labels say so, as the x86_64 stand-in's do.

Under qemu-user an aarch64 program reads the host's ``/proc/cpuinfo``, finds no ARM core and
``import torch`` dies of SIGSEGV in torch's cpuinfo library; the backend mounts an aarch64 one
over it when the image's machine (its ``machine`` label) isn't this one's
(``tools.devtools.emulated``).

``python -m tools.localimage --cuda 13.0 --arch arm64`` builds
``localhost/cuwheels-builder:cuda13.0-bookworm-arm64`` once; later runs reuse it.
"""

from __future__ import annotations

import io
import json
import platform
import subprocess
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path, PurePosixPath

from .emulated import MACHINE_LABEL, TOOLS_PYTHON_LABEL
from tools.backends.engine import image_labels
from tools.core.errors import ToolchainError
from tools.core.paths import cache_dir
from tools.devtools import standin_image
from tools.devtools.standin_image import (GLIBC, LABEL_PREFIX, SUITE, _dirs, _link,
                                       _skip_rootfs_member, _start_checked, check_engine,
                                       import_image,
                                       debootstrap, python_tag, rootfs_dir)
from tools.pipeline import cudakit

#: Debian's name for the architecture and the machine its binaries are for.
ARCH = "arm64"
MACHINE = "aarch64"
#: bookworm's Python: the image's only interpreter.
PYTHON = "3.11"
#: What the x86_64 stand-in has, and Debian's Python with its headers (the binding includes
#: Python.h) and ensurepip (the finish step makes its venv with ``-m venv``), with what
#: python3.11-venv depends on named too (debootstrap's minbase leaves it unconfigured otherwise).
PACKAGES = (*standin_image.PACKAGES, "python3.11", "libpython3.11-dev", "python3.11-venv",
            "python3-distutils")
POLICY = "manylinux_2_36_aarch64"
#: The pip put in the image's environments, pinned by hash (pure Python: no emulation to unpack).
PIP = ("pip", "25.0.1", "c46efd13b6aa8279f33f2864459c8ce587ea6a1a59ee20de055868d8f7688f7f")
#: cuobjdump for the image's toolkit (the finish step's SASS check): the real images' toolkits
#: carry one, PyPI's aarch64 nvcc wheel doesn't, and the finish step would pip-install the
#: project's pin, whose aarch64 build (13.5.37, tagged manylinux_2_17) needs GLIBC_2.38, above
#: bookworm's 2.36. 13.4.49's needs GLIBC_2.17 (its dynamic symbols, read with objdump -T).
CUOBJDUMP = ("nvidia-cuda-cuobjdump", "13.4.49",
             "8f6721a01310998ee08e25d2e78e4cebf9c69e83bafacd97570aba2295ed8943")
#: The environments at /opt/python: the cell's Python and cibuildwheel's helper, both 3.11.
VENVS = (python_tag(PYTHON), python_tag(standin_image.HELPER_PYTHON))
TOOLS_PYTHON = f"/opt/python/{python_tag(PYTHON)}/bin/python"
CUOBJDUMP_LABEL = f"{LABEL_PREFIX}.cuobjdump"
BINFMT = Path("/proc/sys/fs/binfmt_misc")

def image_name(cuda: str, suite: str = SUITE) -> str:
    """``localhost/cuwheels-builder:cuda13.0-bookworm-arm64``."""
    return f"{standin_image.image_name(cuda, suite)}-{ARCH}"


def check_emulation(binfmt: Path = BINFMT, machine: str | None = None) -> None:
    """ToolchainError unless this machine runs aarch64 binaries: natively, or through a
    registered and enabled ``qemu-aarch64`` binfmt handler."""
    if (machine or platform.machine()) == MACHINE:
        return
    entry = binfmt / "qemu-aarch64"
    try:
        enabled = entry.read_text().splitlines()[0].strip() == "enabled"
    except (OSError, IndexError):
        enabled = False
    if not enabled:
        raise ToolchainError(
            f"this {machine or platform.machine()} machine can't run aarch64 binaries: "
            f"{entry} is {'disabled' if entry.exists() else 'missing'} (no qemu-user handler)",
            hint="apt-get install -y qemu-user-static binfmt-support (in a container without "
                 "it: mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc && "
                 "update-binfmts --enable qemu-aarch64)")


def labels(cuda: str, suite: str = SUITE) -> dict[str, str]:
    """What the image is, as labels the backend reads with ``<engine> image inspect``."""
    return {
        f"{LABEL_PREFIX}.stand-in": "true",
        f"{LABEL_PREFIX}.stands-in-for": f"pytorch/manylinuxaarch64-builder:cuda{cuda}",
        f"{LABEL_PREFIX}.base": f"debian-{suite}-{ARCH}",
        f"{LABEL_PREFIX}.glibc": GLIBC,
        f"{LABEL_PREFIX}.manylinux": POLICY,
        f"{LABEL_PREFIX}.cuda": cuda,
        f"{LABEL_PREFIX}.pythons": ",".join(VENVS),
        MACHINE_LABEL: MACHINE,
        TOOLS_PYTHON_LABEL: TOOLS_PYTHON,
        CUOBJDUMP_LABEL: CUOBJDUMP[1],
        "org.opencontainers.image.description":
            f"cuwheels local aarch64 builder (Debian {suite} arm64, glibc {GLIBC}, CUDA {cuda} "
            f"from PyPI's aarch64 wheels, Python {PYTHON}; {python_tag(standin_image.HELPER_PYTHON)} "
            f"is Python {PYTHON} too, for cibuildwheel's helpers); wheels repair to {POLICY} or "
            "lower, never manylinux_2_28",
    }


def pip_wheel(cache: Path | None = None, pin: tuple[str, str, str] = PIP,
              platform_tag: str | None = None) -> Path:
    """A pinned wheel (default: pip's), downloaded once into the cache (hash-checked by pip);
    ``platform_tag``: another machine's wheel (``manylinux_2_17_aarch64``)."""
    name, version, sha = pin
    dest = (cache or cache_dir()) / "wheels"
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    found = sorted(dest.glob(pattern))
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as req:
        req.write(f"{name}=={version} --hash=sha256:{sha}\n")
        req.flush()
        proc = subprocess.run(["python3", "-m", "pip", "download", "--isolated", "--no-deps",
                               "--only-binary", ":all:", "--require-hashes", "-r", req.name,
                               *(["--platform", platform_tag] if platform_tag else []),
                               "-d", str(dest)], capture_output=True, text=True, timeout=600)
    found = sorted(dest.glob(pattern))
    if proc.returncode != 0 or not found:
        raise ToolchainError(f"downloading {name}=={version} for the arm64 image failed: "
                             f"{(proc.stderr or proc.stdout).strip()[-600:]}",
                             hint="let pip reach PyPI")
    return found[0]


def _file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    tar.addfile(info)


def add_venv(tar: tarfile.TarFile, tag: str, pip: Path) -> None:
    """``/opt/python/<tag>``: a virtual environment of ``/usr/bin/python3.11`` as ``python -m
    venv`` lays one out, with pip unpacked from its wheel and its ``pip`` scripts."""
    root = f"./opt/python/{tag}"
    site = f"{root}/lib/python{PYTHON}/site-packages"
    for d in (root, f"{root}/bin", f"{root}/include", f"{root}/lib", f"{root}/lib/python{PYTHON}",
              site):
        _dir(tar, d)
    _file(tar, f"{root}/pyvenv.cfg",
          f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {PYTHON}\n"
          f"executable = /usr/bin/python{PYTHON}\n".encode())
    _link(tar, f"{root}/lib64", "lib")
    for exe in ("python", "python3", f"python{PYTHON}"):
        _link(tar, f"{root}/bin/{exe}", f"/usr/bin/python{PYTHON}")
    script = (f"#!/opt/python/{tag}/bin/python\nimport sys\nfrom pip._internal.cli.main "
              "import main\nif __name__ == '__main__':\n    sys.exit(main())\n").encode()
    for exe in ("pip", "pip3", f"pip{PYTHON}"):
        _file(tar, f"{root}/bin/{exe}", script, 0o755)
    with zipfile.ZipFile(pip) as zf:
        dirs: set[str] = set()
        for info in zf.infolist():
            if info.is_dir():
                continue
            parts = PurePosixPath(info.filename).parts
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    _dir(tar, f"{site}/{d}")
            _file(tar, f"{site}/{info.filename}", zf.read(info))


def write_image_tar(out, rootfs: Path, cuda_home: Path, cuda: str, pip: Path,
                    cuobjdump: Path | None = None) -> None:
    """Stream the image's file system as a tar to ``out``: the arm64 rootfs, the environments
    at ``/opt/python`` and the aarch64 toolkit at ``/usr/local/cuda-X.Y`` (with the
    ``cuobjdump`` of that wheel in its ``bin``)."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        tar.add(rootfs, arcname=".", filter=_skip_rootfs_member)
        added: set[PurePosixPath] = set()
        _dirs(tar, PurePosixPath("/opt/python/x"), rootfs, added)
        for tag in VENVS:
            add_venv(tar, tag, pip)
        tar.add(cuda_home, arcname=f"./usr/local/cuda-{cuda}")
        if cuobjdump is not None:
            with zipfile.ZipFile(cuobjdump) as zf:
                _file(tar, f"./usr/local/cuda-{cuda}/bin/cuobjdump",
                      zf.read("nvidia/cu13/bin/cuobjdump"), 0o755)
        _link(tar, "./usr/local/cuda", f"/usr/local/cuda-{cuda}")


def build_image(cuda: str, *, name: str | None = None, engine: str = "podman",
                rebuild: bool = False, mirror: str | None = None, cache: Path | None = None,
                check_start: bool = True) -> str:
    """Build (or reuse) the arm64 stand-in image and return its name; prints what it did.
    CUDA must be the toolkit version the pins are for (``tools.pipeline.cudakit.CUDA``)."""
    started = time.monotonic()
    name = name or image_name(cuda)
    if cuda != cudakit.CUDA:
        raise ToolchainError(f"--cuda {cuda}: the arm64 image's toolkit comes from PyPI's "
                             f"aarch64 wheels, pinned for CUDA {cudakit.CUDA}",
                             hint=f"pass --cuda {cudakit.CUDA}")
    check_engine(engine)
    check_emulation()
    found = None if rebuild else image_labels(engine, name)
    if found is not None:
        if (found.get(f"{LABEL_PREFIX}.cuda") == cuda and found.get(MACHINE_LABEL) == MACHINE
                and found.get(CUOBJDUMP_LABEL) == CUOBJDUMP[1]):
            print(f"reusing {name} (--rebuild to build it again)")
            return _start_checked(engine, name, check_start)
        print(f"{name} exists but is not this version's aarch64 CUDA {cuda} stand-in (its "
              "labels: CUDA, machine, cuobjdump): rebuilding")
    cuda_home = cudakit.ensure_toolkit(machine=MACHINE, reason="the arm64 image's toolkit",
                                       say=print)
    pip = pip_wheel(cache)
    cuobjdump = pip_wheel(cache, CUOBJDUMP, f"manylinux_2_17_{MACHINE}")
    rootfs = debootstrap(rootfs_dir(PACKAGES, cache=cache, arch=ARCH), packages=PACKAGES,
                         mirror=mirror, arch=ARCH)
    changes = [f"LABEL {key}={json.dumps(value)}" for key, value in labels(cuda).items()]
    changes += standin_image.ENV_CHANGES
    argv = [engine, "import", "--arch", ARCH, *(arg for c in changes for arg in ("--change", c)),
            "-", name]
    import_image(engine, argv, name, lambda out: write_image_tar(
        out, rootfs, cuda_home, cuda, pip, cuobjdump))
    print(f"built {name} in {time.monotonic() - started:.0f} s: Debian {SUITE} arm64 (glibc "
          f"{GLIBC}), Python {PYTHON} as {', '.join(VENVS)}, CUDA {cuda} for aarch64 from "
          f"{cuda_home}; wheels repair to {POLICY} or lower, not manylinux_2_28")
    return _start_checked(engine, name, check_start)
