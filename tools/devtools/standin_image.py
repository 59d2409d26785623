"""A local stand-in for PyTorch's CUDA builder image, for machines that can pull no image.

The container backend runs cibuildwheel in ``pytorch/manylinux2_28-builder:cudaX.Y``. Where no
registry is reachable (an air-gapped runner, a sandbox) this builds an image of the same shape
from Debian's packages and this machine's own Pythons and CUDA toolkit:

- Debian bookworm, ``debootstrap --variant=minbase``, with a C++ toolchain and what cibuildwheel,
  pip and auditwheel need inside (:data:`PACKAGES`);
- each Python copied at its own prefix (pyenv-style builds find libpython through an RPATH to
  that prefix) with only its stdlib, pip and setuptools, and linked as ``/opt/python/cpXY-cpXY``;
  cp39 always, because cibuildwheel probes the container with ``/opt/python/cp39-cp39``;
- the CUDA toolkit copied to ``/usr/local/cuda-X.Y`` with ``/usr/local/cuda`` linking to it,
  and ``/usr/local/cuda/bin`` on PATH, as in the real image.

It is not the real image: its glibc is 2.36, so its wheels repair to ``manylinux_2_34``-era
policies at best, never ``manylinux_2_28``. The image's labels say so (:func:`labels`), for the
backend to read with ``podman image inspect``.

``python -m tools.localimage --cuda 13.0`` builds ``localhost/cuwheels-builder:cuda13.0-bookworm``
once; later runs reuse it (``--rebuild`` forces a new one). The debootstrap tree is cached under
``~/.cache/cuwheels/rootfs/``, so a rebuild from the same packages takes seconds, not a minute.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tools.backends.engine import image_labels
from tools.core.errors import ToolchainError
from tools.core.paths import cache_dir
from tools.core.variant import opt_python_dir, split_python
from tools.plan.table import python_key
from tools.backends.machine import runtime_conf
from .rlimit_runtime import check_starts

SUITE = "bookworm"
GLIBC = "2.36"
#: The policy every wheel built here satisfies; auditwheel picks a lower one when the symbols
#: allow (manylinux_2_34 is the usual floor with glibc 2.34+'s merged libpthread).
POLICY = "manylinux_2_36_x86_64"
DEFAULT_PYTHONS = ("3.10", "3.11", "3.12", "3.13")
#: cibuildwheel runs its own helpers with this interpreter inside the container.
HELPER_PYTHON = "3.9"
LABEL_PREFIX = "org.cuwheels.builder"
#: Debian packages beyond minbase: the compiler and build tools the recipes use, what the copied
#: Pythons' extension modules link against (ssl, ctypes, sqlite3, bz2, lzma, readline, curses,
#: dbm, uuid, nis), and CA certificates for pip.
PACKAGES = ("g++", "make", "git", "patch", "ca-certificates", "patchelf", "unzip", "xz-utils",
            "file", "libssl3", "libffi8", "libsqlite3-0", "libbz2-1.0", "liblzma5", "zlib1g",
            "libncursesw6", "libreadline8", "libgdbm6", "libnsl2", "libtirpc3", "libexpat1",
            "libuuid1", "libcrypt1")
#: What a Python keeps of its site-packages: what ``ensurepip`` and the real image install.
#: The machine's other packages (and any ``.pth`` start-up hooks) stay out of the image.
SITE_KEEP = re.compile(r"^(pip|setuptools|pkg_resources|_distutils_hack|wheel)"
                       r"([-_.].*\.dist-info)?$|^distutils-precedence\.pth$|^README\.txt$")
SHARED_PREFIXES = ("/", "/usr", "/usr/local")
_SITE_PACKAGES = re.compile(r"lib/python3\.\d+t?/site-packages/([^/]+)")

Runner = Callable[..., subprocess.CompletedProcess]


def _run(argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run(list(argv), check=False, **kwargs)


def image_name(cuda: str, suite: str = SUITE) -> str:
    """The default name, saying what the image holds:
    ``localhost/cuwheels-builder:cuda13.0-bookworm``."""
    return f"localhost/cuwheels-builder:cuda{cuda}-{suite}"


def python_tag(version: str) -> str:
    """``3.12`` -> ``cp312-cp312``, the image's ``/opt/python`` entry (``3.14t``, a
    free-threaded build: ``cp314-cp314t``, as in manylinux)."""
    return opt_python_dir(version)


@dataclass(frozen=True)
class LocalPython:
    """A Python of this machine: its ``X.Y`` version and the prefix it is installed at."""

    version: str
    prefix: Path


def find_local_python(version: str, run: Runner = _run) -> LocalPython:
    """The install prefix of ``python<version>`` on PATH (or pyenv's), or ToolchainError."""
    base, free = split_python(version)
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted(str(p) for p in pyenv_root.glob(
        f"versions/{base}.*{'t' if free else ''}/bin/python{version}"))
    for exe in filter(None, candidates):
        # the version, and the build asked for: free-threaded for 3.14t, else not
        proc = run([exe, "-I", "-c", "import sys, sysconfig; print(sys.version_info[:2] == "
                    f"({base.replace('.', ', ')}) and bool(sysconfig.get_config_var("
                    f"'Py_GIL_DISABLED')) is {free}, sys.base_prefix)"])
        same, _, prefix = proc.stdout.strip().partition(" ")
        # A distribution's Python lives in /usr among everything else: only a self-contained
        # prefix (pyenv, python-build-standalone, a source build) can be copied whole.
        if proc.returncode == 0 and same == "True" and prefix not in SHARED_PREFIXES:
            return LocalPython(version, Path(prefix))
    raise ToolchainError(
        f"Python {version} is not installed on this machine; the local image copies this "
        f"machine's Pythons installed in a prefix of their own (--python, and "
        f"{HELPER_PYTHON} for cibuildwheel's probe)",
        hint=f"install it in its own prefix (`pyenv install {version}`), or leave {version} "
             "out of --python")


def find_cuda(cuda: str, run: Runner = _run,
              environ: dict[str, str] | None = None) -> Path:
    """The toolkit directory of this machine's CUDA ``cuda`` (X.Y), resolved through links.

    ``CUDA_HOME`` names it, else ``/usr/local/cuda``. Its ``bin/nvcc`` must report release X.Y.
    """
    environ = os.environ if environ is None else environ
    home = Path(environ.get("CUDA_HOME") or "/usr/local/cuda").resolve()
    nvcc = home / "bin" / "nvcc"
    if not nvcc.is_file():
        raise ToolchainError(f"no CUDA toolkit at {home} (no bin/nvcc): the local image copies "
                             "this machine's toolkit",
                             hint="install the CUDA toolkit or set CUDA_HOME to it")
    proc = run([str(nvcc), "--version"])
    found = re.search(r"release (\d+\.\d+)", proc.stdout or "")
    have = found.group(1) if found else "unknown"
    if have != cuda:
        raise ToolchainError(
            f"--cuda {cuda} asks for CUDA {cuda}, but the toolkit at {home} is CUDA {have}: "
            "the local image can only hold the toolkit this machine has",
            hint=f"pass --cuda {have}, or point CUDA_HOME at a CUDA {cuda} toolkit")
    return home


def check_engine(engine: str) -> str:
    """The engine's path; ToolchainError if it is not installed or does not answer."""
    path = shutil.which(engine)
    if path is None:
        raise ToolchainError(f"container engine `{engine}` is not installed",
                             hint="install podman (`apt-get install -y podman runc`) or pass "
                                  "--engine with one that is installed")
    proc = _run([engine, "info"], timeout=120)
    if proc.returncode != 0:
        raise ToolchainError(f"`{engine} info` failed: {(proc.stderr or '').strip()}",
                             hint=f"start {engine} (for docker: its daemon) and retry")
    return path


def labels(cuda: str, pythons: Iterable[str], suite: str = SUITE) -> dict[str, str]:
    """What the image is, as labels the backend reads with ``<engine> image inspect``."""
    return {
        f"{LABEL_PREFIX}.stand-in": "true",
        f"{LABEL_PREFIX}.stands-in-for": f"pytorch/manylinux2_28-builder:cuda{cuda}",
        f"{LABEL_PREFIX}.base": f"debian-{suite}",
        f"{LABEL_PREFIX}.glibc": GLIBC,
        f"{LABEL_PREFIX}.manylinux": POLICY,
        f"{LABEL_PREFIX}.cuda": cuda,
        f"{LABEL_PREFIX}.pythons": ",".join(python_tag(v) for v in pythons),
        "org.opencontainers.image.description":
            f"cuwheels local builder (Debian {suite}, glibc {GLIBC}, CUDA {cuda}); wheels repair "
            f"to {POLICY} or lower as their symbols allow, never manylinux_2_28",
    }


#: The image's environment (as the real image's): PATH with CUDA first, a UTF-8 locale.
ENV_CHANGES = ("ENV PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
               ":/sbin:/bin", "ENV CUDA_HOME=/usr/local/cuda", "ENV LANG=C.UTF-8",
               "CMD /bin/bash")


def image_changes(cuda: str, pythons: Iterable[str]) -> list[str]:
    """``podman import --change`` instructions: labels, then :data:`ENV_CHANGES`."""
    changes = [f"LABEL {key}={json.dumps(value)}" for key, value in labels(cuda, pythons).items()]
    return changes + list(ENV_CHANGES)


def rootfs_dir(packages: Sequence[str] = PACKAGES, suite: str = SUITE,
               cache: Path | None = None, arch: str | None = None) -> Path:
    """Where the debootstrap tree of ``suite`` with ``packages`` is cached (keyed by both; a
    foreign ``arch``, Debian's name such as ``arm64``, by that too)."""
    key = hashlib.sha256(" ".join([suite, *sorted(packages)]).encode()).hexdigest()[:12]
    return (cache or cache_dir()) / "rootfs" / f"{suite}-minbase-{key}{'-' + arch if arch else ''}"


def debian_mirror(sources: Iterable[Path] = (Path("/etc/apt/sources.list"),
                                             *sorted(Path("/etc/apt/sources.list.d").glob("*")))
                  ) -> str:
    """The Debian mirror this machine's apt uses (one-line or deb822 sources), else Debian's CDN."""
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for url in re.findall(r"(?:^deb\s+(?:\[[^\]]*\]\s+)?|^URIs:\s*)(\S+)", text, re.M):
            if url.rstrip("/").endswith("/debian"):
                return url
    return "http://deb.debian.org/debian"


def debootstrap(dest: Path, *, packages: Sequence[str] = PACKAGES, suite: str = SUITE,
                mirror: str | None = None, run: Runner = _run, arch: str | None = None) -> Path:
    """Create (or reuse) the minbase tree at ``dest``. A tree is complete only once its marker
    file exists, so an interrupted run is redone, not reused. ``arch``: another architecture's
    tree (Debian's name, ``arm64``), whose second stage runs under qemu-user here."""
    marker = dest.with_name(dest.name + ".complete")
    if marker.is_file() and dest.is_dir():
        return dest
    if shutil.which("debootstrap") is None:
        raise ToolchainError("debootstrap is not installed: the local image starts from a "
                             "Debian tree it makes",
                             hint="apt-get install -y debootstrap (or run scripts/ci_podman.sh)")
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    mirror = mirror or debian_mirror()
    argv = ["debootstrap", *([f"--arch={arch}"] if arch else []), "--variant=minbase",
            f"--include={','.join(packages)}", suite, str(dest), mirror]
    print(f"debootstrap {suite}{' ' + arch if arch else ''} from {mirror} into {dest} "
          f"({'about ten minutes under emulation' if arch else 'about a minute'})", flush=True)
    proc = run(argv)
    if proc.returncode != 0:
        log = dest / "debootstrap" / "debootstrap.log"
        raise ToolchainError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): "
                             f"{(proc.stderr or proc.stdout or '').strip()[-800:]}",
                             hint=f"see {log}; check the mirror is reachable or pass --mirror")
    marker.write_text(" ".join(argv) + "\n")
    return dest


def _keep_python_member(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Drop a Python prefix's site-packages entries other than pip/setuptools (see SITE_KEEP)."""
    found = _SITE_PACKAGES.search(info.name)
    if found and not SITE_KEEP.match(found.group(1)):
        return None
    return info


def _skip_rootfs_member(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Leave out what the engine provides or the image doesn't need: device nodes and apt's
    downloaded packages."""
    if info.isdev() or re.match(r"^\./var/cache/apt/archives/.*\.deb$", info.name):
        return None
    return info


def _link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    info.mode = 0o777
    tar.addfile(info)


def _dirs(tar: tarfile.TarFile, path: PurePosixPath, rootfs: Path, added: set) -> None:
    """Directory entries (root-owned, 0755) for the parents of ``path`` that neither the rootfs
    nor an earlier call gave: the engine refuses a layer naming one path twice."""
    for parent in reversed(path.parents[:-1]):
        if parent in added or (rootfs / str(parent).lstrip("/")).is_dir():
            continue
        added.add(parent)
        info = tarfile.TarInfo("." + str(parent))
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        tar.addfile(info)


def write_image_tar(out, rootfs: Path, pythons: Sequence[LocalPython], cuda_home: Path,
                    cuda: str) -> None:
    """Stream the image's file system as a tar to ``out``: the rootfs, each Python at its own
    prefix linked from ``/opt/python``, and the toolkit at ``/usr/local/cuda-X.Y``."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        tar.add(rootfs, arcname=".", filter=_skip_rootfs_member)
        added: set[PurePosixPath] = set()
        for py in pythons:
            prefix = PurePosixPath(py.prefix)
            _dirs(tar, prefix, rootfs, added)
            tar.add(py.prefix, arcname="." + str(prefix), filter=_keep_python_member)
            if not (py.prefix / "bin" / "python").exists():
                # manylinux's layout has bin/python; a source build installs python3.X(t) only
                _link(tar, f".{prefix}/bin/python", f"python{py.version}")
        _dirs(tar, PurePosixPath("/opt/python/x"), rootfs, added)
        for py in pythons:
            _link(tar, f"./opt/python/{python_tag(py.version)}", str(py.prefix))
        tar.add(cuda_home, arcname=f"./usr/local/cuda-{cuda}")
        _link(tar, "./usr/local/cuda", f"/usr/local/cuda-{cuda}")


def holds(found: dict[str, str], cuda: str, pythons: Iterable[str]) -> bool:
    """Whether an image with labels ``found`` has CUDA ``cuda`` and every Python asked for."""
    have = set(found.get(f"{LABEL_PREFIX}.pythons", "").split(","))
    return found.get(f"{LABEL_PREFIX}.cuda") == cuda and \
        {python_tag(v) for v in pythons} <= have


def import_image(engine: str, argv: Sequence[str], name: str, write: Callable) -> None:
    """Run ``<engine> import ... - name`` (``argv``), streaming the image's tar to it with
    ``write(stdin)``; ToolchainError quoting the engine when the import fails."""
    # stderr goes to a file, not a pipe: a pipe nobody reads while the tar streams could fill
    # and stall the engine.
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=err)
        try:
            write(proc.stdin)
        except BrokenPipeError:
            pass   # the engine stopped reading; its own error is reported below
        finally:
            proc.stdin.close()
        code = proc.wait()
        err.seek(0)
        said = err.read().decode(errors="replace").strip()
    if code != 0:
        raise ToolchainError(f"`{engine} import ... {name}` failed (exit {code}): {said}",
                             hint=f"check `{engine} info` and the free space of its storage")


def build_image(cuda: str, pythons: Sequence[str] = DEFAULT_PYTHONS, *, name: str | None = None,
                engine: str = "podman", rebuild: bool = False, mirror: str | None = None,
                cache: Path | None = None, check_start: bool = True) -> str:
    """Build (or reuse) the local builder image and return its name; prints what it did.

    Every input is checked before anything slow runs; ``check_start`` then starts a container from
    the image (through the rlimit wrapper where the engine needs it) and fails if none starts.
    """
    started = time.monotonic()
    name = name or image_name(cuda)
    wanted = sorted({HELPER_PYTHON, *pythons}, key=python_key)
    check_engine(engine)
    found = None if rebuild else image_labels(engine, name)
    if found is not None:
        if holds(found, cuda, wanted):
            print(f"reusing {name} (--rebuild to build it again)")
            return _start_checked(engine, name, check_start)
        print(f"{name} exists but lacks CUDA {cuda} or one of {', '.join(wanted)}: rebuilding")
    local = [find_local_python(v) for v in wanted]
    cuda_home = find_cuda(cuda)
    rootfs = debootstrap(rootfs_dir(cache=cache), mirror=mirror)
    argv = [engine, "import", *(arg for c in image_changes(cuda, wanted)
                                 for arg in ("--change", c)), "-", name]
    import_image(engine, argv, name,
                 lambda out: write_image_tar(out, rootfs, local, cuda_home, cuda))
    took = time.monotonic() - started
    print(f"built {name} in {took:.0f} s: Debian {SUITE} (glibc {GLIBC}), "
          f"{', '.join(python_tag(p.version) + ' from ' + str(p.prefix) for p in local)}, "
          f"CUDA {cuda} from {cuda_home}; wheels repair to {POLICY} or lower, not "
          "manylinux_2_28")
    return _start_checked(engine, name, check_start)


def _start_checked(engine: str, name: str, check_start: bool) -> str:
    if not check_start:
        return name
    result = check_starts(engine, name)
    if not result.ok:
        raise ToolchainError(f"{engine} cannot start a container from {name}: {result.why}",
                             hint="see `podman info`; where root may not set rlimits, "
                                  "install runc so the wrapper can run it")
    print(result.why)
    if result.wrapper is not None:
        # cibuildwheel runs `podman create/start/exec` itself, so a global --runtime can't
        # reach it; containers.conf can.
        conf = runtime_conf(result.wrapper)
        print(f"engine arguments: {' '.join(result.runtime_args)}; for tools that run {engine} "
              f"themselves (cibuildwheel): export CONTAINERS_CONF={conf}")
    return name
