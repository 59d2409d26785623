"""The CUDA toolkit from PyPI's nvidia packages: a pinned CUDA 13.0, assembled as a CUDA_HOME.

NVIDIA publishes the toolkit's parts as wheels (``nvidia-cuda-nvcc``, ``nvidia-cuda-runtime``,
``nvidia-cuda-cccl``, ...), each holding its files under ``nvidia/cu13/``. Extracted side by side
and flattened, they are a toolkit root that torch's extension builder takes for ``CUDA_HOME``:
``bin/nvcc`` with ``nvcc.profile``, ``ptxas``, ``fatbinary`` and ``nvlink``; ``nvvm/bin/cicc``;
``include/`` (``cuda_runtime.h``, ``crt/``, ``cccl/``); ``lib/``. Three things the wheels leave
out are added as NVIDIA's installers lay them out: ``lib64`` linking to ``lib`` (torch links
``-L$CUDA_HOME/lib64``), ``targets/x86_64-linux/{include,lib}`` (``nvcc.profile`` looks there),
and the unversioned library names the linker asks for (``libcudart.so -> libcudart.so.13``).
The local builder image's toolkit (``tools.devtools.standin_image``) can be this one.

The same toolkit for Linux aarch64 (:data:`PARTS_AARCH64`, the same versions' aarch64 wheels,
``targets/sbsa-linux`` as NVIDIA's ARM server installers name it) is assembled on any machine by
``ensure_toolkit(machine="aarch64")`` into ``cache_dir() / "cuda-13.0-aarch64"``: the local arm64
stand-in image carries it. Its nvcc can't run here except under emulation, so it is checked by
its ELF header instead of ``nvcc --version``.

:func:`ensure_toolkit` installs it once into ``cache_dir() / "cuda-13.0"``: the wheels are
downloaded by pip with their sha256 pinned (:data:`PARTS`, from ``recipes/cuda-toolkit/x86_64.txt``:
a requirements file in pip's hash-checking form, installed with ``--require-hashes``), assembled
in a scratch directory beside it and renamed into place, so an interrupted install is never taken
for a toolkit; a marker file lists the parts, so a toolkit of other pins is installed again. About 110 MB is
downloaded and 315 MB is written. ``CUWHEELS_CUDA_WHEELS`` names a folder that holds the pinned
wheels, for machines that can't reach PyPI.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from filelock import FileLock

from tools import RECIPES_DIR
from tools.core.errors import ToolchainError
from tools.core.paths import cache_dir

#: The CUDA version of the toolkit installed from PyPI: the CUDA of the registry's torch builds.
CUDA = "13.0"
#: Where each wheel keeps its files; what is flattened into the toolkit root.
WHEEL_ROOT = "nvidia/cu13/"
#: The machine the default pins are for (NVIDIA publishes other wheels, of other hashes, for
#: aarch64: :data:`PARTS_AARCH64`).
MACHINE = "x86_64"
#: The marker a complete toolkit holds: the parts it was assembled from.
MARKER = "cuwheels-toolkit.json"
#: The variable naming a folder of the pinned wheels (installs from it, without PyPI).
WHEELS_ENV = "CUWHEELS_CUDA_WHEELS"
#: nvcc.profile's target directory, as NVIDIA's installers make it.
TARGET_DIR = "targets/x86_64-linux"
#: ... per machine: NVIDIA's ARM server (SBSA) installers use ``sbsa-linux`` for aarch64.
TARGET_DIRS = {"x86_64": TARGET_DIR, "aarch64": "targets/sbsa-linux"}

Say = Callable[[str], None]


@dataclass(frozen=True)
class Part:
    """One wheel of the toolkit: its distribution, exact version and the sha256 of its
    manylinux x86_64 wheel on PyPI."""

    name: str
    version: str
    sha256: str
    holds: str

    @property
    def requirement(self) -> str:
        """The pinned requirement line pip's hash-checking mode takes."""
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


#: Where the pins live: a requirements file per machine, in pip's hash-checking form. Data, not
#: code, beside the project's other shared facts (recipes/: the table, the limits, the torch
#: shim's records): a pin is reviewed as the line pip reads, and bumped without editing Python.
PINS_DIR = RECIPES_DIR / "cuda-toolkit"
_PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[0-9][A-Za-z0-9.+!-]*)"
                  r" --hash=sha256:(?P<sha256>[0-9a-f]{64})")


def read_pins(path: Path) -> tuple[Part, ...]:
    """The parts a pins file names: one ``name==version --hash=sha256:HEX  # what it holds``
    per line (blank lines and ``#`` comments aside); ToolchainError naming the file and line
    for any other line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolchainError(f"{path}: the CUDA toolkit's pins can't be read ({exc})",
                             hint="restore it from the repository") from None
    parts = []
    for number, line in enumerate(text.splitlines(), 1):
        pin, _, holds = line.partition("#")
        if not pin.strip():
            continue
        found = _PIN.fullmatch(pin.strip())
        if found is None:
            raise ToolchainError(f"{path}, line {number}: {line.strip()!r} is not "
                                 "'name==version --hash=sha256:<64 hex digits>'",
                                 hint="each pin is one wheel, exact, with its sha256 (pip's "
                                      "--require-hashes form)")
        parts.append(Part(found["name"], found["version"], found["sha256"], holds.strip()))
    return tuple(parts)


#: The toolkit's wheels (recipes/cuda-toolkit/x86_64.txt).
PARTS = read_pins(PINS_DIR / f"{MACHINE}.txt")
#: The same parts' manylinux aarch64 wheels (recipes/cuda-toolkit/aarch64.txt).
PARTS_AARCH64 = read_pins(PINS_DIR / "aarch64.txt")
#: The pins per machine.
MACHINE_PARTS = {"x86_64": PARTS, "aarch64": PARTS_AARCH64}

_VERSIONED_LIB = re.compile(r"^(lib[^/]+\.so)\.\d+$")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def toolkit_home(environ: Mapping[str, str] | None = None, machine: str = MACHINE) -> Path:
    """Where the toolkit from PyPI lives: ``cache_dir() / "cuda-13.0"`` (another machine's:
    ``cuda-13.0-aarch64``)."""
    return cache_dir(environ) / (f"cuda-{CUDA}" + ("" if machine == MACHINE else f"-{machine}"))


def machine_parts(machine: str) -> tuple[Part, ...]:
    """The pinned parts for ``machine`` (``x86_64``, ``aarch64``); ToolchainError for another."""
    try:
        return MACHINE_PARTS[machine]
    except KeyError:
        raise ToolchainError(f"no CUDA {CUDA} toolkit pins for {machine} "
                             f"(recipes/cuda-toolkit/ has {', '.join(MACHINE_PARTS)})",
                             hint="install NVIDIA's CUDA toolkit for that machine") from None


def marker_text(parts: Iterable[Part] = PARTS) -> str:
    """The marker file's content: the parts (name, version, sha256), one JSON document."""
    return json.dumps({"cuda": CUDA, "parts": [[p.name, p.version, p.sha256] for p in parts]},
                      indent=1) + "\n"


def is_complete(home: Path, parts: Iterable[Part] = PARTS) -> bool:
    """Whether ``home`` is a toolkit assembled from ``parts``: its marker names exactly them
    and its nvcc is there."""
    try:
        recorded = (home / MARKER).read_text()
    except OSError:
        return False
    return recorded == marker_text(parts) and (home / "bin" / "nvcc").is_file()


def check_machine(machine: str | None = None, system: str | None = None) -> None:
    """ToolchainError unless this is a Linux machine the pins are for (x86_64, aarch64)."""
    machine = machine or platform.machine()
    system = system or sys.platform
    if machine not in MACHINE_PARTS or not system.startswith("linux"):
        raise ToolchainError(
            f"the CUDA {CUDA} toolkit from PyPI is pinned for Linux "
            f"{' and '.join(MACHINE_PARTS)} (recipes/cuda-toolkit/); this machine is "
            f"{system} {machine}",
            hint="install NVIDIA's CUDA toolkit for this machine and set CUDA_HOME to it")


def this_machine() -> str:
    """The machine whose pins a toolkit for this machine takes: ``platform.machine()`` where
    there are pins for it (an aarch64 Linux runner measuring its own kernels), else
    :data:`MACHINE` (:func:`check_machine` then refuses another)."""
    machine = platform.machine()
    return machine if machine in MACHINE_PARTS and sys.platform.startswith("linux") else MACHINE


def download(dest: Path, *, parts: Iterable[Part] = PARTS, wheels: Path | None = None,
             python: str = sys.executable, machine: str | None = None) -> list[Path]:
    """Download ``parts`` with pip into ``dest``, each checked against its sha256 (from PyPI,
    or only from the folder ``wheels`` when given); ``machine``: another machine's wheels
    (pip told that machine's manylinux tags); returns the wheels. ToolchainError, quoting
    pip, when one can't be had or its hash differs."""
    parts = list(parts)
    dest.mkdir(parents=True, exist_ok=True)
    requirements = dest / "requirements.txt"
    requirements.write_text("".join(p.requirement + "\n" for p in parts))
    # --isolated: pip's configuration (an index, find-links, a constraints file) must not pick
    # these files; the pinned hashes decide.
    cmd = [python, "-m", "pip", "download", "--isolated", "--no-deps", "--no-cache-dir",
           "--only-binary", ":all:", "--require-hashes", "--progress-bar", "off",
           "-r", str(requirements), "-d", str(dest)]
    if wheels is not None:
        cmd += ["--no-index", "--find-links", str(wheels)]
    if machine is not None and machine != MACHINE:
        # pip takes only this machine's tags unless told others; the parts are manylinux2014
        # (cupti: manylinux_2_25) wheels.
        cmd += [arg for glibc in ("2_17", "2_25", "2_28")
                for arg in ("--platform", f"manylinux_{glibc}_{machine}")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    got = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or len(got) != len(parts):
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-12:])
        where = f"the folder {wheels} (${WHEELS_ENV})" if wheels else "PyPI"
        if "DO NOT MATCH THE HASHES" in proc.stderr:
            hint = ("a wheel's bytes differ from its pinned sha256 (a tampered or cut-short "
                    "file): remove it" + (f" from {wheels}" if wheels else "") + " and retry; "
                    "pins change only with recipes/cuda-toolkit/")
        elif wheels:
            hint = (f"put the wheels of {', '.join(p.name + '==' + p.version for p in parts)} "
                    f"in {wheels}")
        else:
            hint = ("let pip reach PyPI (a proxy: HTTPS_PROXY and pip's --cert), set "
                    f"{WHEELS_ENV} to a folder holding the pinned wheels, or install the CUDA "
                    "toolkit and set CUDA_HOME")
        raise ToolchainError(
            f"downloading the CUDA {CUDA} toolkit's {len(parts)} wheels from {where} failed "
            f"(`{' '.join(cmd)}`):\n{tail}", hint=hint)
    return got


def _member_path(wheel: Path, name: str) -> PurePosixPath | None:
    """Where a wheel member goes in the toolkit root (None: not part of the toolkit);
    ToolchainError for a name that would leave it."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise ToolchainError(f"{wheel.name}: member {name!r} would be written outside the "
                             "toolkit", hint="the wheel is not NVIDIA's: delete it and retry")
    if name.startswith(WHEEL_ROOT) and not name.endswith("/"):
        rel = PurePosixPath(name[len(WHEEL_ROOT):])
        # NVIDIA's release-scan files, not part of the toolkit
        return None if rel.parts[0] == ".metadata" else rel
    return None


def assemble(wheels: Iterable[Path], dest: Path, target_dir: str = TARGET_DIR) -> Path:
    """Extract each wheel's ``nvidia/cu13/`` into ``dest`` (its ``.dist-info`` into
    ``dest/dist-info``) and add the links NVIDIA's installers make (module docstring);
    returns ``dest``. ToolchainError naming the wheel when one holds no toolkit files."""
    dest.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        taken = 0
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                rel = _member_path(wheel, info.filename)
                top = info.filename.split("/", 1)[0]
                if rel is None and top.endswith(".dist-info") and not info.is_dir():
                    rel = PurePosixPath("dist-info", info.filename)
                if rel is None:
                    continue
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
                # as pip installs wheels: any execute bit makes the file executable by all
                target.chmod(0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
                taken += not top.endswith(".dist-info")
        if not taken:
            raise ToolchainError(f"{wheel.name} holds no file under {WHEEL_ROOT}: it is not a "
                                 f"CUDA {CUDA.split('.')[0]} toolkit wheel",
                                 hint="check the pins in recipes/cuda-toolkit/x86_64.txt")
    _link(dest / "lib64", "lib")
    for sub in ("include", "lib"):
        (dest / target_dir).mkdir(parents=True, exist_ok=True)
        _link(dest / target_dir / sub, f"../../{sub}")
    for lib in sorted((dest / "lib").glob("lib*.so.*")):
        if found := _VERSIONED_LIB.match(lib.name):
            _link(lib.parent / found.group(1), lib.name)
    return dest


def _link(path: Path, target: str) -> None:
    if not path.exists() and not path.is_symlink():
        path.symlink_to(target)


def nvcc_release(nvcc: Path) -> str | None:
    """The ``X.Y`` release ``nvcc --version`` reports, or None when it doesn't run."""
    try:
        proc = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True,
                              timeout=60)
    except OSError:
        return None
    found = re.search(r"release (\d+\.\d+)", proc.stdout)
    return found.group(1) if proc.returncode == 0 and found else None


def _check_assembled(home: Path, machine: str = MACHINE) -> None:
    if machine != MACHINE:
        # Another machine's nvcc doesn't run here: its ELF header says what it is for.
        from tools.core.binarch import read_binary
        nvcc = home / "bin" / "nvcc"
        found = read_binary(nvcc.read_bytes()[:64]) if nvcc.is_file() else None
        if found is None or found.arch != machine:
            raise ToolchainError(f"the toolkit assembled in {home} has no {machine} nvcc "
                                 f"(bin/nvcc: {found.describe() if found else 'missing'})",
                                 hint="check the pins in recipes/cuda-toolkit/aarch64.txt")
        release = CUDA
    else:
        release = nvcc_release(home / "bin" / "nvcc")
    if release != CUDA:
        raise ToolchainError(f"the toolkit assembled in {home} has no working CUDA {CUDA} nvcc "
                             f"(bin/nvcc --version: release {release})",
                             hint="check the pins in recipes/cuda-toolkit/x86_64.txt")
    if not (home / "include" / "cuda_runtime.h").is_file():
        raise ToolchainError(f"the toolkit assembled in {home} lacks include/cuda_runtime.h",
                             hint="check the pins in recipes/cuda-toolkit/x86_64.txt")


def ensure_toolkit(environ: Mapping[str, str] | None = None, *, reason: str = "",
                   say: Say = _stderr, parts: tuple[Part, ...] | None = None,
                   machine: str | None = None) -> Path:
    """The toolkit root (for ``CUDA_HOME``), installed from PyPI the first time; later calls
    return it at once. ``reason`` starts the line said when it is installed (why it is needed).
    ``machine``: another machine's toolkit (``aarch64``), assembled here for an image of that
    machine, never run here; default: this machine's (:func:`this_machine`), which must be a
    Linux machine the pins are for.

    One install at a time: a second process waits on the lock, then finds it complete.
    """
    environ = os.environ if environ is None else environ
    native = this_machine()
    foreign = machine is not None and machine != native
    machine = machine or native
    parts = parts if parts is not None else machine_parts(machine)
    home = toolkit_home(environ, machine)
    if is_complete(home, parts):
        return home
    if not foreign:
        check_machine()
    home.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(home.parent / f"{home.name}.lock"):
        if is_complete(home, parts):
            return home
        wheels = environ.get(WHEELS_ENV)
        source = f"the wheels in {wheels}" if wheels else "PyPI"
        say(f"{reason + ': ' if reason else ''}installing CUDA {CUDA}"
            f"{' for ' + machine if foreign else ''} from {source} into "
            f"{home} (about 110 MB download, 315 MB on disk; once)")
        started = time.monotonic()
        scratch = Path(tempfile.mkdtemp(prefix=f"{home.name}.partial-", dir=home.parent))
        try:
            found = download(scratch / "wheels", parts=parts,
                             wheels=Path(wheels) if wheels else None, machine=machine)
            kit = assemble(found, scratch / "toolkit", TARGET_DIRS[machine])
            _check_assembled(kit, machine)
            (kit / MARKER).write_text(marker_text(parts))
            # what was there is an incomplete or differently pinned toolkit
            if home.is_symlink() or home.is_file():
                home.unlink()
            elif home.exists():
                shutil.rmtree(home)
            kit.rename(home)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        say(f"installed CUDA {CUDA} in {home} in {time.monotonic() - started:.0f} s "
            f"(nvcc: {home / 'bin' / 'nvcc'})")
    return home
