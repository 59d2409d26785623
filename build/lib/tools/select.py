#!/usr/bin/env python3
"""Which wheel fits this machine: pick the variant index to install from, or explain an import error.

    python select.py flash-attn --index https://example.org/cuwheels/          what to install, and how
    python select.py flash-attn --version 2.8.3 --index SITE --json            the same, for scripts
    python select.py flash-attn --index SITE --torch-version 2.8.0+cu128 --sm 90   for another machine
    python select.py --doctor flash-attn [--error TEXT | --error-file FILE]     why an import fails
    python select.py --detect                                                   what was detected

In this repository it is ``python -m tools.select``. It is one file that uses only the standard
library (Python >= 3.8), so a user can download it alone and run it in the environment that has the
problem: it never imports packaging, yaml or torch (torch only as a last resort, in a subprocess).

Detected, each with an override to answer for another machine: the Python version and wheel tag,
OS, CPU arch and glibc (``--python-version``, ``--machine``, ``--glibc``); the installed torch, its
CUDA version and C++ ABI, read from ``torch/version.py``, the dist metadata and ``libc10.so``
without importing torch (``--torch-version 2.8.0+cu128``, ``--torch-cuda``, ``--cxx11-abi``); the
NVIDIA driver and the GPUs' compute capabilities from ``nvidia-smi``, else ``libcuda.so.1``
(``--cuda-driver 580.65.06`` or ``--cuda-driver 13.0``, ``--sm 90`` or ``--sm 8.0,12.0``).

The index is a cuwheels site (``--index``: its URL, or a local site directory). A variant index
``cu<cuda>/torch<X.Y>/simple/`` holds only wheels built for one CUDA + torch pair; the selector
reads the PEP 691 JSON of the one matching the installed torch (``index.json``, as static hosts
serve it; content negotiation and PEP 503 HTML as fallbacks), checks each wheel against the
machine (Python tag, Requires-Python, platform and glibc from the manylinux tag, driver vs CUDA,
C++ ABI, yanked, GPU arch) and prints the pip command and the uv configuration. GPU archs are not
in the index pages: they come from a per-file ``_cuwheels`` key when the index provides one, else
from the build manifest (``cuwheels.json``) inside the wheel, read with HTTP range requests (a few
kilobytes, never the whole wheel unless it is small); if neither works the arch check is reported
as not done.

Exit status: 0 a wheel fits (doctor: no problem found); 1 none fits (doctor: a problem was found
and explained); 2 bad arguments; 3 the index could not be read.
"""

from __future__ import annotations

import os
import sys

# Run as ``python select.py``, this file's directory is sys.path[0], where it would shadow the
# standard library's ``select`` module that subprocess imports. Drop it before importing anything.
if __name__ == "__main__" and sys.path and os.path.basename(__file__) == "select.py":
    if os.path.abspath(sys.path[0] or os.curdir) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]

import argparse  # noqa: E402 - see above
import ast  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sysconfig  # noqa: E402
import urllib.error  # noqa: E402
import urllib.parse  # noqa: E402
import urllib.request  # noqa: E402
import zipfile  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from html.parser import HTMLParser  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

#: Oldest NVIDIA driver that runs code built with each CUDA major (CUDA minor version
#: compatibility covers every minor of a major). A copy of ``min_driver`` in recipes/table.yaml
#: (one value per CUDA major there): this file can't read the table because it must run alone;
#: tests/test_select.py fails when the two disagree.
MIN_DRIVER = {"11": "450.80.02", "12": "525.60.13", "13": "580"}

#: Where the official torch builds for a CUDA version are (``cu128`` appended).
TORCH_INDEX = "https://download.pytorch.org/whl/"

#: Wheels up to this size are read whole when the server ignores HTTP range requests.
PEEK_FULL_LIMIT = 16 << 20
#: At most this many wheels' manifests are read for one answer (each costs a few requests).
PEEK_MAX = 3

EXIT_FITS, EXIT_NO_FIT, EXIT_INDEX = 0, 1, 3  # and 2 for bad arguments, from argparse


# --------------------------------------------------------------------------- versions (PEP 440)

_VERSION = re.compile(
    r"v?(?:(?P<epoch>\d+)!)?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre_l>alpha|beta|preview|pre|rc|a|b|c)[-_.]?(?P<pre_n>\d+)?)?"
    r"(?:-(?P<post_n1>\d+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>\d+)?)?"
    r"(?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>\d+)?)?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?",
    re.I,
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}


def version_key(text: str) -> tuple:
    """A sort key that orders versions as PEP 440 does (``2.10`` after ``2.9``, locals last).

    Raises ValueError for text that is not a version.
    """
    m = _VERSION.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not a PEP 440 version: {text!r}")
    release = [int(p) for p in m.group("release").split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    post = m.group("post_n1")
    if post is None and m.group("post_l"):
        post = m.group("post_n2") or "0"
    if m.group("pre_l"):
        pre = (_PRE_RANK[m.group("pre_l").lower()], int(m.group("pre_n") or 0))
    elif m.group("dev_l") and post is None:
        pre = (-1, 0)  # 1.0.dev1 sorts before 1.0a1
    else:
        pre = (3, 0)
    dev = int(m.group("dev_n") or 0) if m.group("dev_l") else float("inf")
    local = m.group("local")
    local_key: tuple = (0,)
    if local:
        # Numeric segments compare as numbers and above strings (PEP 440).
        local_key = (1,) + tuple(
            (1, int(s), "") if s.isdigit() else (0, 0, s.lower()) for s in re.split(r"[-_.]", local)
        )
    return (int(m.group("epoch") or 0), tuple(release), pre, -1 if post is None else int(post), dev, local_key)


def public_version(text: str) -> str:
    """``2.8.3+cu128.torch2.8`` -> ``2.8.3``."""
    return text.split("+", 1)[0]


def same_public(a: str, b: str) -> bool:
    """Whether two versions are equal ignoring the local label (``2.8.3`` == ``2.8.3.0+cu128``)."""
    try:
        return version_key(public_version(a))[:5] == version_key(public_version(b))[:5]
    except ValueError:
        return public_version(a) == public_version(b)


def is_prerelease(text: str) -> bool:
    """True for a/b/rc and dev releases."""
    m = _VERSION.fullmatch(text.strip())
    return bool(m and (m.group("pre_l") or m.group("dev_l")))


def release_tuple(text: str) -> tuple[int, ...]:
    """The leading numeric release of ``text``: ``"3.11.7"`` -> ``(3, 11, 7)``; ``"2.36"`` -> ``(2, 36)``."""
    m = re.match(r"\d+(?:\.\d+)*", text.strip())
    if not m:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(p) for p in m.group().split("."))


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)), b + (0,) * (n - len(b))


_CLAUSE = re.compile(r"(~=|===|==|!=|<=|>=|<|>)\s*(\S+)")


def python_allowed(spec: str, python: tuple[int, ...]) -> bool | None:
    """Whether a Requires-Python specifier allows ``python`` (``(3, 11, 7)``); None if unreadable.

    Enough of PEP 440 for Python versions: release numbers, ``.*`` wildcards and ``~=``.
    """
    for clause in spec.split(","):
        clause = clause.strip()
        if not clause:
            continue
        m = _CLAUSE.fullmatch(clause)
        if not m:
            return None
        op, text = m.groups()
        if op == "===":
            ok = ".".join(map(str, python)) == text
        elif text.endswith(".*"):
            try:
                prefix = release_tuple(text[:-2])
            except ValueError:
                return None
            head = (python + (0,) * len(prefix))[: len(prefix)]
            if op not in ("==", "!="):
                return None
            ok = (head == prefix) == (op == "==")
        else:
            try:
                want = release_tuple(text)
            except ValueError:
                return None
            have, want_p = _padded(python, want)
            if op == "~=":
                if len(want) < 2:
                    return None
                ok = have >= want_p and python[: len(want) - 1] == want[:-1]
            else:
                ok = {
                    "==": have == want_p, "!=": have != want_p, "<=": have <= want_p,
                    ">=": have >= want_p, "<": have < want_p, ">": have > want_p,
                }[op]
        if not ok:
            return False
    return True


def normalize_name(name: str) -> str:
    """PEP 503 project name: ``Flash_Attn`` -> ``flash-attn``."""
    return re.sub(r"[-_.]+", "-", name).lower()


# --------------------------------------------------------------------------- wheel names and labels


@dataclass(frozen=True)
class WheelName:
    """The parts of a wheel filename."""

    name: str
    version: str
    build: str | None
    python: str
    abi: str
    platform: str


def parse_wheel_filename(filename: str) -> WheelName | None:
    """``flash_attn-2.8.3+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl`` -> its parts."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    if len(parts) == 5:
        return WheelName(parts[0], parts[1], None, *parts[2:])
    if len(parts) == 6:
        return WheelName(*parts)
    return None


@dataclass(frozen=True)
class Variant:
    """The CUDA + torch a wheel was built for: ``cuda`` is ``"12.8"``, or ``"12"`` for any 12.x."""

    cuda: str
    torch: str
    cxx11_abi: bool | None = None

    @property
    def index_path(self) -> str:
        """The variant index's directory under the site root: ``cu128/torch2.8``."""
        return f"cu{self.cuda.replace('.', '')}/torch{self.torch}"


# A copy of tools/variant.py's label grammar (ours, Dao-AILab's, dotted, PyG's); tests compare them.
_OURS = re.compile(r"cu(?P<cu>\d{2,3})\.torch(?P<tmaj>\d+)\.(?P<tmin>\d+)(?:\.cxx11abi(?P<abi>[01]))?")
_DAO = re.compile(r"cu(?P<cu>\d{2,3})torch(?P<tmaj>\d+)\.(?P<tmin>\d+)(?:cxx11abi(?P<abi>true|false))?", re.I)
_DOTTED = re.compile(r"cu\.(?P<cmaj>\d+)\.(?P<cmin>\d+)\.torch\.(?P<tmaj>\d+)\.(?P<tmin>\d+)")
_PYG = re.compile(r"pt(?P<tmaj>\d)(?P<tmin>\d+)cu(?P<cu>\d{2,3})")


def cuda_from_nodot(digits: str) -> str:
    """``"129"`` -> ``"12.9"``, ``"12"`` -> ``"12"`` (major only)."""
    if len(digits) <= 2:
        return str(int(digits))
    return f"{int(digits[:-1])}.{digits[-1]}"


def parse_label(label: str) -> Variant | None:
    """The Variant a local version label names (``cu128.torch2.8``, ``cu12torch2.8cxx11abiTRUE``...)."""
    text = label.strip()
    m = _OURS.fullmatch(text)
    if m:
        abi = None if m.group("abi") is None else m.group("abi") == "1"
        return Variant(cuda_from_nodot(m.group("cu")), f"{int(m.group('tmaj'))}.{int(m.group('tmin'))}", abi)
    m = _DAO.fullmatch(text)
    if m:
        abi = None if m.group("abi") is None else m.group("abi").lower() == "true"
        return Variant(cuda_from_nodot(m.group("cu")), f"{int(m.group('tmaj'))}.{int(m.group('tmin'))}", abi)
    m = _DOTTED.fullmatch(text)
    if m:
        return Variant(f"{int(m.group('cmaj'))}.{int(m.group('cmin'))}",
                       f"{int(m.group('tmaj'))}.{int(m.group('tmin'))}")
    m = _PYG.fullmatch(text)
    if m:
        return Variant(cuda_from_nodot(m.group("cu")), f"{int(m.group('tmaj'))}.{int(m.group('tmin'))}")
    return None


def torch_series(version: str) -> str | None:
    """``"2.13.0+cu130"`` -> ``"2.13"`` (None for text that isn't a torch version)."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def torch_build_from_version(version: str) -> tuple[str | None, str | None]:
    """What a torch version's local label says: ``("cuda", "12.8")``, ``("cpu", None)``,
    ``("rocm", "6.3")``, or ``(None, None)`` when it has no label (PyPI's builds)."""
    local = version.partition("+")[2].lower()
    m = re.fullmatch(r"cu(\d{2,3})", local)
    if m:
        return "cuda", cuda_from_nodot(m.group(1))
    if local == "cpu" or local.startswith("cpu."):
        return "cpu", None
    m = re.fullmatch(r"rocm(\d+(?:\.\d+)*)", local)
    if m:
        return "rocm", m.group(1)
    return None, None


# --------------------------------------------------------------------------- GPU architectures


def parse_sm(text: str) -> tuple[int, int] | None:
    """A compute capability: ``"8.0"``, ``"80"``, ``"sm_80"``, ``"120"`` -> ``(8, 0)``/``(12, 0)``."""
    t = text.strip().lower()
    for prefix in ("sm_", "sm", "compute_"):
        if t.startswith(prefix):
            t = t[len(prefix):]
            break
    m = re.fullmatch(r"(\d+)\.(\d+)", t)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.fullmatch(r"(\d+)(\d)[af]?", t)
    if m:
        return int(m.group(1)), int(m.group(2))
    return None


def _arch(text: str) -> tuple[int, int, str] | None:
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)(\d)([af]?)", str(text).strip().lower())
    return (int(m.group(1)), int(m.group(2)), m.group(3)) if m else None


def sass_runs(arch: str, cc: tuple[int, int]) -> bool:
    """Whether SASS for ``arch`` (``"80"``, ``"90a"``, ``"100f"``) runs on a GPU of capability ``cc``.

    SASS runs on the same major with an equal or higher minor (sm_80 code on an sm_86 GPU), never
    across majors; ``a`` (arch-specific) code only on exactly that capability.
    """
    a = _arch(arch)
    if a is None:
        return False
    major, minor, suffix = a
    if major != cc[0]:
        return False
    return minor == cc[1] if suffix == "a" else minor <= cc[1]


def ptx_runs(arch: str, cc: tuple[int, int]) -> bool:
    """Whether PTX for ``arch`` can be JIT-compiled for capability ``cc`` (any equal or newer GPU,
    same major for ``f`` family code, exactly that GPU for ``a`` code)."""
    a = _arch(arch)
    if a is None:
        return False
    major, minor, suffix = a
    if suffix == "a":
        return (major, minor) == cc
    if suffix == "f":
        return major == cc[0] and minor <= cc[1]
    return (major, minor) <= cc


def _module_archs(found: dict[str, Any]) -> dict[str, tuple[list[str], list[str]]]:
    """``{module: (sass, ptx)}`` from a manifest's ``archs.found`` (modules without device code dropped)."""
    out = {}
    for module, report in (found or {}).items():
        if not isinstance(report, dict):
            continue
        sass = [str(a) for a in report.get("sass") or []]
        ptx = [str(a) for a in report.get("ptx") or []]
        if sass or ptx:
            out[module] = (sass, ptx)
    return out


def arch_problem(found: dict[str, Any], gpus: list[Gpu]) -> str | None:
    """Why the modules of a wheel (manifest ``archs.found``) can't run on ``gpus``, or None."""
    modules = _module_archs(found)
    if not modules:
        return None
    bad = []
    for gpu in gpus:
        for module, (sass, ptx) in sorted(modules.items()):
            if any(sass_runs(a, gpu.cc) for a in sass) or any(ptx_runs(a, gpu.cc) for a in ptx):
                continue
            bad.append(
                f"{module} has no kernels for sm_{gpu.sm} ({gpu.name or 'your GPU'}): "
                f"SASS for {_arch_list(sass)}, PTX for {_arch_list(ptx)}"
            )
    return "; ".join(bad) or None


def _arch_list(archs: list[str]) -> str:
    return ", ".join(f"sm_{a}" for a in archs) if archs else "none"


# --------------------------------------------------------------------------- the machine


@dataclass(frozen=True)
class Gpu:
    """One GPU: its compute capability and name."""

    cc: tuple[int, int]
    name: str = ""

    @property
    def sm(self) -> str:
        """``(9, 0)`` -> ``"90"``."""
        return f"{self.cc[0]}{self.cc[1]}"


@dataclass
class Machine:
    """The facts a wheel is checked against; ``sources`` says where each came from and
    ``unknown`` why a fact is missing."""

    python: tuple[int, ...]
    implementation: str = "cp"
    free_threaded: bool = False
    os: str = "linux"
    arch: str = "x86_64"
    libc: str | None = "glibc"
    glibc: tuple[int, int] | None = None
    torch: str | None = None
    torch_build: str | None = None  # "cuda", "cpu", "rocm" or None (unknown)
    torch_cuda: str | None = None
    cxx11_abi: bool | None = None
    driver: str | None = None
    driver_cuda: str | None = None
    gpus: list[Gpu] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)

    @property
    def python_tag(self) -> str:
        """``cp311`` (``cp313t`` for a free-threaded build)."""
        tag = f"{self.implementation}{self.python[0]}{self.python[1]}"
        return tag + ("t" if self.free_threaded else "")

    def to_json(self) -> dict[str, Any]:
        """The facts as a JSON-ready dict."""
        return {
            "python": ".".join(map(str, self.python)),
            "python_tag": self.python_tag,
            "os": self.os,
            "arch": self.arch,
            "libc": self.libc,
            "glibc": ".".join(map(str, self.glibc)) if self.glibc else None,
            "torch": None if self.torch is None else {
                "version": self.torch, "build": self.torch_build, "cuda": self.torch_cuda,
                "cxx11_abi": self.cxx11_abi,
            },
            "driver": {"version": self.driver, "cuda": self.driver_cuda},
            "gpus": [{"sm": g.sm, "name": g.name} for g in self.gpus],
            "sources": dict(self.sources),
            "undetected": dict(self.unknown),
        }


def _run(cmd: list[str], timeout: float = 20) -> subprocess.CompletedProcess | None:
    """Run a probe; None when it can't be started or hangs (a probe never raises)."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _which(program: str) -> str | None:
    return shutil.which(program)


def _libc_version() -> tuple[str | None, str | None]:
    """``("glibc", "2.36")``, ``("musl", None)`` or ``(None, None)``."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        text = ""
    m = re.fullmatch(r"glibc (\d+\.\d+)\S*", text.strip())
    if m:
        return "glibc", m.group(1)
    lib, ver = platform.libc_ver()
    if lib == "glibc" and ver:
        return "glibc", ver
    if sys.platform.startswith("linux") and any(Path("/lib").glob("ld-musl-*")):
        return "musl", None
    return None, None


def detect_python(machine: Machine) -> None:
    """The running interpreter's version, implementation and free-threading."""
    machine.python = tuple(sys.version_info[:3])
    name = sys.implementation.name
    machine.implementation = {"cpython": "cp", "pypy": "pp"}.get(name, name)
    machine.free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    machine.sources["python"] = sys.executable


def detect_platform(machine: Machine) -> None:
    """OS, CPU arch and C library."""
    machine.os = "linux" if sys.platform.startswith("linux") else sys.platform
    plat = sysconfig.get_platform()  # linux-x86_64: the interpreter's arch (i686 on a 64-bit kernel)
    machine.arch = plat.split("-", 1)[1] if machine.os == "linux" and "-" in plat else platform.machine()
    lib, ver = _libc_version()
    machine.libc = lib
    if ver:
        machine.glibc = release_tuple(ver)[:2]  # type: ignore[assignment]
        machine.sources["glibc"] = "os.confstr(CS_GNU_LIBC_VERSION)"
    elif machine.os == "linux":
        machine.unknown["glibc"] = "no glibc found (musl or another C library)" if lib else "glibc version unreadable"


def _torch_distribution() -> Any | None:
    """The installed torch distribution, found without importing torch."""
    import importlib.metadata as md

    try:
        return md.distribution("torch")
    except md.PackageNotFoundError:
        return None


def _literal_assignments(source: str) -> dict[str, Any]:
    """Module-level ``name = <literal>`` (and annotated) assignments of a Python file."""
    out: dict[str, Any] = {}
    for node in ast.parse(source).body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    out[target.id] = ast.literal_eval(value)
                except ValueError:
                    pass
    return out


def _cxx11_abi_from_libc10(lib: Path) -> bool | None:
    """torch's C++ ABI from ``libc10.so``: it exports many functions taking std::string, which the
    C++11 ABI mangles with ``St7__cxx11``; a build with the old ABI has none."""
    try:
        data = lib.read_bytes()
    except OSError:
        return None
    if b"St7__cxx11" in data:
        return True
    return False if len(data) > 100_000 else None


_TORCH_PROBE = r"""
import json, torch
out = {"version": torch.__version__, "cuda": torch.version.cuda,
       "hip": getattr(torch.version, "hip", None),
       "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI), "gpus": []}
try:
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            out["gpus"].append([list(torch.cuda.get_device_capability(i)), torch.cuda.get_device_name(i)])
except Exception:
    pass
print(json.dumps(out))
"""


def _json_probe(code: str, timeout: float) -> dict[str, Any] | None:
    """Run ``code`` in a subprocess and parse the JSON it prints last; None on any failure (what
    it probes, a broken torch or a driver in a bad state, can't take this process down)."""
    proc = _run([sys.executable, "-c", code], timeout=timeout)
    if proc is None or proc.returncode != 0:
        return None
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def _import_torch_probe() -> dict[str, Any] | None:
    """Ask torch itself, in a subprocess (slow: seconds)."""
    return _json_probe(_TORCH_PROBE, 180)


def detect_torch(machine: Machine, *, allow_import: bool = True) -> None:
    """The installed torch: version, CUDA or CPU build, C++ ABI (reading files, importing only if needed)."""
    dist = _torch_distribution()
    if dist is None:
        machine.unknown["torch"] = f"torch is not installed for {sys.executable}"
        return
    machine.torch = dist.version
    machine.sources["torch"] = "torch dist metadata"
    version_py = Path(str(dist.locate_file("torch/version.py")))
    build, cuda = torch_build_from_version(dist.version)
    facts: dict[str, Any] = {}
    try:
        facts = _literal_assignments(version_py.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        pass
    if facts:
        machine.sources["torch_cuda"] = str(version_py)
        if facts.get("cuda"):
            build, cuda = "cuda", str(facts["cuda"])
        elif facts.get("hip"):
            build, cuda = "rocm", None
        elif "cuda" in facts:
            build, cuda = "cpu", None
    abi = _cxx11_abi_from_libc10(Path(str(dist.locate_file("torch/lib/libc10.so"))))
    if abi is not None:
        machine.sources["cxx11_abi"] = "symbols of torch/lib/libc10.so"
    if (build is None or abi is None) and allow_import:
        probe = _import_torch_probe()
        if probe:
            machine.sources["torch_cuda"] = machine.sources["cxx11_abi"] = "import torch (subprocess)"
            if probe.get("cuda"):
                build, cuda = "cuda", str(probe["cuda"])
            elif probe.get("hip"):
                build, cuda = "rocm", None
            else:
                build, cuda = "cpu", None
            abi = probe.get("cxx11_abi")
            if not machine.gpus and probe.get("gpus"):
                machine.gpus = [Gpu(tuple(cc), name) for cc, name in probe["gpus"]]  # type: ignore[arg-type]
                machine.sources["gpus"] = "torch.cuda"
    machine.torch_build, machine.torch_cuda, machine.cxx11_abi = build, cuda, abi
    if build is None:
        machine.unknown["torch_cuda"] = f"couldn't tell whether torch {dist.version} is a CUDA build"
    if abi is None:
        machine.unknown["cxx11_abi"] = "couldn't read torch's C++ ABI"


_LIBCUDA_PROBE = r"""
import ctypes, json
lib = ctypes.CDLL("libcuda.so.1")
out = {"driver_cuda": None, "gpus": []}
v = ctypes.c_int()
if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
    out["driver_cuda"] = v.value
if lib.cuInit(0) == 0:
    n = ctypes.c_int()
    lib.cuDeviceGetCount(ctypes.byref(n))
    for i in range(n.value):
        dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGet(ctypes.byref(dev), i)
        lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # COMPUTE_CAPABILITY_MAJOR
        lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)  # COMPUTE_CAPABILITY_MINOR
        lib.cuDeviceGetName(name, 256, dev)
        out["gpus"].append([[major.value, minor.value], name.value.decode(errors="replace")])
print(json.dumps(out))
"""


def _libcuda_probe() -> dict[str, Any] | None:
    """The driver's CUDA version and the GPUs, from ``libcuda.so.1`` in a subprocess."""
    return _json_probe(_LIBCUDA_PROBE, 30)


def parse_nvidia_smi(text: str) -> tuple[str | None, list[Gpu]]:
    """``nvidia-smi --query-gpu=compute_cap,driver_version,name --format=csv,noheader`` output ->
    (driver version, GPUs)."""
    driver, gpus = None, []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) < 2:
            continue
        cc = parse_sm(parts[0])
        if cc is None or not re.fullmatch(r"\d+(?:\.\d+)+", parts[1]):
            continue
        driver = driver or parts[1]
        gpus.append(Gpu(cc, parts[2] if len(parts) > 2 else ""))
    return driver, gpus


def _proc_driver_version() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def detect_nvidia(machine: Machine) -> None:
    """The NVIDIA driver (version and the CUDA version it supports) and the GPUs' capabilities."""
    smi = _which("nvidia-smi")
    if smi:
        proc = _run([smi, "--query-gpu=compute_cap,driver_version,name", "--format=csv,noheader"])
        if proc is not None and proc.returncode == 0:
            driver, gpus = parse_nvidia_smi(proc.stdout)
            if driver:
                machine.driver = driver
                machine.sources["driver"] = "nvidia-smi"
            if gpus:
                machine.gpus = gpus
                machine.sources["gpus"] = "nvidia-smi"
    probe = _libcuda_probe()
    if probe:
        if probe.get("driver_cuda"):
            v = int(probe["driver_cuda"])
            machine.driver_cuda = f"{v // 1000}.{v % 1000 // 10}"
            machine.sources["driver_cuda"] = "libcuda.so.1 cuDriverGetVersion"
        if not machine.gpus and probe.get("gpus"):
            machine.gpus = [Gpu(tuple(cc), name) for cc, name in probe["gpus"]]  # type: ignore[arg-type]
            machine.sources["gpus"] = "libcuda.so.1"
    if machine.driver is None:
        machine.driver = _proc_driver_version()
        if machine.driver:
            machine.sources["driver"] = "/proc/driver/nvidia/version"
    why = "no nvidia-smi on PATH" if not smi else "nvidia-smi failed"
    if not probe:
        why += ", libcuda.so.1 can't be loaded"
    if machine.driver is None and machine.driver_cuda is None:
        machine.unknown["driver"] = f"no NVIDIA driver found ({why})"
    if not machine.gpus:
        machine.unknown["gpus"] = f"no NVIDIA GPU found ({why})"


def _parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "new", "cxx11"):
        return True
    if t in ("0", "false", "no", "old"):
        return False
    raise argparse.ArgumentTypeError(f"expected 1/0 or true/false, got {text!r}")


def detect_machine(overrides: dict[str, Any] | None = None, *, allow_import: bool = True) -> Machine:
    """Everything the selector checks, detected here unless ``overrides`` gives it.

    Override keys (all strings, as typed on the command line): ``python_version`` (``3.12``),
    ``machine`` (``aarch64``), ``glibc`` (``2.28``), ``torch_version`` (``2.8.0+cu128``),
    ``torch_cuda`` (``12.8`` or ``none``), ``cxx11_abi`` (``1``/``0``), ``cuda_driver``
    (``580.65.06`` or ``13.0``), ``sm`` (``90``, ``8.0,12.0`` or ``none``). Never raises for a missing
    tool or library: what it can't find is in ``Machine.unknown``.
    """
    o = {k: v for k, v in (overrides or {}).items() if v is not None}
    m = Machine(python=tuple(sys.version_info[:3]))
    detect_python(m)
    if "python_version" in o:
        text = o["python_version"]
        m.free_threaded = text.endswith("t")
        m.python = release_tuple(text.rstrip("t"))
        m.sources["python"] = "--python-version"
    detect_platform(m)
    if "machine" in o:
        m.arch = o["machine"]
        m.sources["arch"] = "--machine"
    if "glibc" in o:
        m.libc, m.glibc = "glibc", release_tuple(o["glibc"])[:2]  # type: ignore[assignment]
        m.sources["glibc"] = "--glibc"
        m.unknown.pop("glibc", None)

    if "torch_version" in o:
        m.torch = o["torch_version"]
        m.torch_build, m.torch_cuda = torch_build_from_version(m.torch)
        m.sources["torch"] = "--torch-version"
    else:
        detect_torch(m, allow_import=allow_import and not ("torch_cuda" in o and "cxx11_abi" in o))
    if "torch_cuda" in o:
        value = o["torch_cuda"].strip().lower()
        if value in ("none", "cpu", ""):
            m.torch_build, m.torch_cuda = "cpu", None
        else:
            m.torch_build, m.torch_cuda = "cuda", value
        m.sources["torch_cuda"] = "--torch-cuda"
        m.unknown.pop("torch_cuda", None)
    if "cxx11_abi" in o:
        m.cxx11_abi = o["cxx11_abi"] if isinstance(o["cxx11_abi"], bool) else _parse_bool(o["cxx11_abi"])
        m.sources["cxx11_abi"] = "--cxx11-abi"
        m.unknown.pop("cxx11_abi", None)
    if m.torch is not None and m.torch_build is None and "torch_cuda" not in m.unknown:
        m.unknown["torch_cuda"] = f"torch {m.torch} doesn't say its CUDA version: pass --torch-cuda"
    if m.torch is not None and m.cxx11_abi is None and "cxx11_abi" not in m.unknown:
        m.unknown["cxx11_abi"] = "not given (--cxx11-abi)"

    if not {"cuda_driver", "sm"} <= o.keys():
        detect_nvidia(m)
    if "cuda_driver" in o:
        value = o["cuda_driver"]
        if release_tuple(value)[0] >= 100:  # a driver version such as 580.65.06, not a CUDA version
            m.driver, m.driver_cuda = value, None
        else:
            m.driver, m.driver_cuda = None, value
        m.sources["driver"] = "--cuda-driver"
        m.unknown.pop("driver", None)
    if "sm" in o:
        value = o["sm"].strip().lower()
        gpus = []
        if value not in ("none", ""):
            for item in value.split(","):
                cc = parse_sm(item)
                if cc is None:
                    raise argparse.ArgumentTypeError(f"--sm {item!r} is not a compute capability like 90 or 8.6")
                gpus.append(Gpu(cc))
        m.gpus = gpus
        m.sources["gpus"] = "--sm"
        m.unknown.pop("gpus", None)
        if not gpus:
            m.unknown["gpus"] = "--sm none"
    return m


# --------------------------------------------------------------------------- reading the index


class IndexReadError(Exception):
    """The index can't be read (network, HTTP status, bad JSON)."""


@dataclass
class IndexFile:
    """One file as a simple-API page lists it."""

    filename: str
    url: str
    requires_python: str | None = None
    yanked: Any = False
    size: int | None = None
    extra: dict[str, Any] | None = None  # the index's private ``_cuwheels`` data, if any


class _Links(HTMLParser):
    """PEP 503 anchors: href, data-requires-python, data-yanked and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = {"attrs": dict(attrs), "text": ""}

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.links.append(self._open)
            self._open = None


_JSON_V1 = "application/vnd.pypi.simple.v1+json"


class Index:
    """A cuwheels site: a URL (``http(s)://``, ``file://``) or a local directory (INDEX_DIR)."""

    def __init__(self, location: str, *, site_url: str | None = None, timeout: float = 30):
        self.timeout = timeout
        loc = location.strip()
        if loc.startswith("file://"):
            loc = urllib.request.url2pathname(urllib.parse.urlsplit(loc).path)
        self.local: Path | None = None
        if re.match(r"https?://", loc):
            self.root = _site_root(loc)
        else:
            path = Path(loc).expanduser().resolve()
            if not path.is_dir():
                raise IndexReadError(f"--index {location}: no such directory, and not an http(s) URL")
            self.local = Path(_site_root(path.as_posix() + "/"))
            self.root = self.local.as_uri() + "/"
        #: The URL printed in commands (a local site is usually published elsewhere).
        self.public_root = _site_root(site_url) if site_url else self.root
        self._cache: dict[str, list[IndexFile] | None] = {}

    def index_url(self, prefix: str) -> str:
        """The simple-index URL to give pip for ``prefix`` (``""`` or ``cu128/torch2.8/``)."""
        return f"{self.public_root}{prefix}simple/"

    def files(self, prefix: str, project: str) -> list[IndexFile] | None:
        """The files of ``project`` in the simple index under ``prefix``; None when it has none."""
        key = f"{prefix}simple/{project}/"
        if key not in self._cache:
            self._cache[key] = self._read_project(key)
        return self._cache[key]

    def projects(self) -> list[str] | None:
        """Every project in the combined index (None when the root page can't be read)."""
        body, _ = self._get_page("simple/")
        if body is None:
            return None
        if isinstance(body, dict):
            return [normalize_name(p["name"]) for p in body.get("projects", []) if isinstance(p, dict)]
        return [normalize_name(link["text"].strip()) for link in body]

    def _read_project(self, rel: str) -> list[IndexFile] | None:
        body, base = self._get_page(rel)
        if body is None:
            return None
        files = []
        if isinstance(body, dict):
            for f in body.get("files", []):
                if not isinstance(f, dict) or "filename" not in f or "url" not in f:
                    continue
                extra = f.get("_cuwheels")
                files.append(IndexFile(
                    filename=f["filename"], url=urllib.parse.urljoin(base, f["url"]),
                    requires_python=f.get("requires-python"), yanked=f.get("yanked", False),
                    size=f.get("size"), extra=extra if isinstance(extra, dict) else None,
                ))
        else:
            for link in body:
                attrs = link["attrs"]
                href = attrs.get("href") or ""
                yanked = attrs.get("data-yanked")
                files.append(IndexFile(
                    filename=link["text"].strip(),
                    url=urllib.parse.urljoin(base, href.split("#", 1)[0]),
                    requires_python=attrs.get("data-requires-python"),
                    yanked=False if yanked is None else (yanked or True),
                ))
        return files or None

    def _get_page(self, rel: str) -> tuple[Any, str]:
        """(parsed JSON dict or list of HTML links, base URL) of a page; (None, "") if missing."""
        if self.local is not None:
            directory = self.local / rel
            for name in ("index.json", "index.html"):
                path = directory / name
                if path.is_file():
                    text = path.read_text(encoding="utf-8")
                    return self._parse(text, name.endswith(".json"), path.as_uri()), path.as_uri()
            return None, ""
        url = self.root + rel
        # Static hosts can't negotiate: the JSON twin is index.json; a negotiating server (PyPI,
        # tools.serve) answers the directory URL itself, with JSON when asked for it.
        for target, accept in ((url + "index.json", "application/json, " + _JSON_V1),
                               (url, f"{_JSON_V1}, text/html;q=0.1")):
            status, ctype, body = self._http(target, accept)
            if status == 200:
                is_json = "json" in ctype or body.lstrip()[:1] == b"{"
                try:
                    return self._parse(body.decode("utf-8"), is_json, target), target
                except (ValueError, UnicodeDecodeError):
                    continue
        return None, ""

    @staticmethod
    def _parse(text: str, is_json: bool, where: str) -> Any:
        if is_json:
            try:
                doc = json.loads(text)
            except ValueError as exc:
                raise IndexReadError(f"{where} is not valid JSON: {exc}") from None
            if not isinstance(doc, dict):
                raise IndexReadError(f"{where} is not a simple-API JSON page")
            return doc
        parser = _Links()
        parser.feed(text)
        return parser.links

    def _http(self, url: str, accept: str) -> tuple[int, str, bytes]:
        req = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "cuwheels-select/1"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, resp.headers.get("Content-Type", ""), resp.read()
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 406, 410):
                return exc.code, "", b""
            raise IndexReadError(f"{url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise IndexReadError(f"can't read {url}: {reason}") from None


def _site_root(location: str) -> str:
    """The site root of an index URL or path: strips ``simple/...`` and ``cuXYZ/torchX.Y/``."""
    text = re.sub(r"index\.(html|json)$", "", location.strip())
    if not text.endswith("/"):
        text += "/"
    text = re.sub(r"simple/(?:[^/]+/)?$", "", text)
    text = re.sub(r"cu\d+/torch\d+\.\d+/$", "", text)
    return text


# --------------------------------------------------------------------------- reading a wheel's manifest


class _NoRanges(Exception):
    """The server answered a range request with the whole file."""


class RangeFile(io.RawIOBase):
    """A seekable, read-only view of a remote file that fetches only the byte ranges read, in
    64 KiB blocks: zipfile then reads a wheel's central directory and one member, not the wheel."""

    BLOCK = 1 << 16

    def __init__(self, url: str, size: int, *, timeout: float = 30):
        super().__init__()
        self.url, self.size, self.timeout = url, size, timeout
        self.pos = 0
        self.requests = 0
        self.fetched = 0
        self._blocks: dict[int, bytes] = {}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        end = min(self.size, self.pos + len(buffer))
        if end <= self.pos:
            return 0
        first, last = self.pos // self.BLOCK, (end - 1) // self.BLOCK
        missing = [i for i in range(first, last + 1) if i not in self._blocks]
        if missing:
            self._fetch(missing[0] * self.BLOCK, min(self.size, (missing[-1] + 1) * self.BLOCK))
        data = b"".join(self._blocks[i] for i in range(first, last + 1))
        chunk = data[self.pos - first * self.BLOCK: end - first * self.BLOCK]
        buffer[: len(chunk)] = chunk
        self.pos += len(chunk)
        return len(chunk)

    def prefetch_tail(self) -> None:
        """Fetch the last block (the end of central directory record, and usually the directory)."""
        lo = max(0, self.size - self.BLOCK) // self.BLOCK * self.BLOCK
        self._fetch(lo, self.size)

    def _fetch(self, lo: int, hi: int) -> None:
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={lo}-{hi - 1}",
                                                        "User-Agent": "cuwheels-select/1"})
        self.requests += 1
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            if resp.status == 206:
                data = resp.read(hi - lo + 1)
                start = lo
            elif self.size <= PEEK_FULL_LIMIT:
                data, start = resp.read(self.size + 1), 0
            else:
                raise _NoRanges()
        self.fetched += len(data)
        for i in range(start // self.BLOCK, (start + len(data) + self.BLOCK - 1) // self.BLOCK):
            self._blocks[i] = data[i * self.BLOCK - start: (i + 1) * self.BLOCK - start]


def _manifest_from_zip(fileobj: Any) -> dict[str, Any] | None:
    with zipfile.ZipFile(fileobj) as zf:
        for name in zf.namelist():
            parts = name.split("/")
            if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "cuwheels.json":
                return json.loads(zf.read(name))
    return None


def read_wheel_manifest(url: str, size: int | None, *, timeout: float = 30) -> tuple[dict[str, Any] | None, str]:
    """(manifest or None, what happened) for the wheel at ``url``, reading as little as possible."""
    try:
        if url.startswith("file://"):
            with open(urllib.request.url2pathname(urllib.parse.urlsplit(url).path), "rb") as f:
                manifest = _manifest_from_zip(f)
            return manifest, "read from the local wheel"
        if size is None:
            head = urllib.request.Request(url, method="HEAD", headers={"User-Agent": "cuwheels-select/1"})
            with urllib.request.urlopen(head, timeout=timeout) as resp:
                size = int(resp.headers.get("Content-Length") or 0)
        if not size:
            return None, "the wheel's size is unknown"
        reader = RangeFile(url, size, timeout=timeout)
        # The tail holds the zip's directory; fetched here, a network error stays a network error
        # (inside zipfile every OSError becomes "File is not a zip file").
        reader.prefetch_tail()
        manifest = _manifest_from_zip(reader)
        return manifest, f"read {reader.fetched} of {size} bytes in {reader.requests} request(s)"
    except _NoRanges:
        return None, f"the server ignores HTTP range requests and the wheel is {size >> 20} MiB"
    except (OSError, urllib.error.URLError, zipfile.BadZipFile, ValueError, KeyError) as exc:
        return None, f"couldn't read the wheel: {exc}"


# --------------------------------------------------------------------------- checking wheels

_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def python_fits(wheel: WheelName, m: Machine) -> bool:
    """Whether the wheel's python/abi tags fit the interpreter (cpXY, abi3, pyX, none)."""
    major, minor = m.python[0], m.python[1]
    exact = f"{m.implementation}{major}{minor}"
    for py in wheel.python.split("."):
        for abi in wheel.abi.split("."):
            if py == exact and abi in (m.python_tag, "none"):
                return True
            if abi == "abi3" and py.startswith("cp") and m.implementation == "cp" and not m.free_threaded:
                tag = re.fullmatch(r"cp(\d)(\d+)", py)
                if tag and int(tag.group(1)) == major and int(tag.group(2)) <= minor:
                    return True
            if abi == "none" and py in (f"py{major}", f"py{major}{minor}"):
                return True
    return False


def platform_problem(wheel: WheelName, m: Machine) -> tuple[tuple[str, str] | None, str | None]:
    """((kind, problem) or None, note) for the wheel's platform tag on this OS, CPU arch and glibc;
    kind is ``glibc`` when only the glibc version stands in the way, else ``platform``."""
    problems = []
    for plat in wheel.platform.split("."):
        if plat == "any":
            return None, None
        mm = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", plat)
        legacy = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", plat)
        linux = re.fullmatch(r"linux_(\w+)", plat)
        if mm or legacy:
            need = (int(mm.group(1)), int(mm.group(2))) if mm else _LEGACY_MANYLINUX[legacy.group(1)]
            arch = mm.group(3) if mm else legacy.group(2)
            if m.os != "linux":
                problems.append(("platform", f"it is built for Linux ({plat}), this machine runs {m.os}"))
            elif arch != m.arch:
                problems.append(("platform", f"it is built for {arch} ({plat}), this machine is {m.arch}"))
            elif m.glibc is None and m.libc not in ("glibc", None):
                problems.append(("platform", f"it needs glibc ({plat}), this machine's C library is {m.libc}"))
            elif m.glibc is None:
                return None, f"couldn't check glibc: the wheel needs glibc >= {need[0]}.{need[1]} ({plat})"
            elif m.glibc < need:
                problems.append(("glibc", f"it needs glibc >= {need[0]}.{need[1]} ({plat}), this machine "
                                          f"has glibc {m.glibc[0]}.{m.glibc[1]}"))
            else:
                return None, None
        elif linux and m.os == "linux" and linux.group(1) == m.arch:
            return None, f"{plat} promises no glibc baseline: it may need this machine's glibc or newer"
        else:
            problems.append(("platform", f"it is built for {plat}, this machine is {m.os} {m.arch}"))
    # A glibc problem is the one to report when another tag of the same wheel is merely foreign.
    problems.sort(key=lambda p: p[0] != "glibc")
    return (problems[0] if problems else ("platform", f"unknown platform tag {wheel.platform}")), None


def driver_problem(cuda: str, m: Machine) -> tuple[str | None, str | None]:
    """(problem, note): is the NVIDIA driver new enough for code built with CUDA ``cuda``?"""
    major = cuda.split(".")[0]
    need = MIN_DRIVER.get(major)
    if m.driver:
        if need and release_tuple(m.driver) < release_tuple(need):
            return (f"it is built with CUDA {cuda}, which needs NVIDIA driver >= {need}; this "
                    f"machine's driver is {m.driver}"), None
        return None, None
    if m.driver_cuda:
        if int(m.driver_cuda.split(".")[0]) < int(major):
            extra = f" (driver >= {need})" if need else ""
            return (f"it is built with CUDA {cuda}; this machine's driver supports CUDA up to "
                    f"{m.driver_cuda}: update the driver{extra}"), None
        return None, None
    return None, "couldn't check the NVIDIA driver (none detected here)"


@dataclass
class Candidate:
    """One wheel of a variant index, with what it was built for and why it doesn't fit."""

    file: IndexFile
    wheel: WheelName
    variant: Variant | None
    index_path: str
    problems: list[tuple[str, str]] = field(default_factory=list)  # (kind, message)
    notes: list[str] = field(default_factory=list)

    @property
    def version(self) -> str:
        """The full version, local label included."""
        return self.wheel.version


def file_variant(f: IndexFile, wheel: WheelName) -> Variant | None:
    """What a file was built for: the index's own data when it gives it, else the local label."""
    extra = f.extra or {}
    if extra.get("cuda") and extra.get("torch"):
        abi = extra.get("cxx11_abi")
        return Variant(str(extra["cuda"]), torch_series(str(extra["torch"])) or str(extra["torch"]),
                       abi if isinstance(abi, bool) else None)
    label = wheel.version.partition("+")[2]
    return parse_label(label) if label else None


def check(c: Candidate, m: Machine) -> None:
    """Fill ``c.problems`` and ``c.notes`` for everything but the GPU arch (that may need a download)."""
    if c.file.yanked:
        reason = c.file.yanked if isinstance(c.file.yanked, str) else "no reason given"
        c.problems.append(("yanked", f"it is yanked ({reason})"))
    if not python_fits(c.wheel, m):
        c.problems.append(("python", f"it is for {c.wheel.python}-{c.wheel.abi}, this is Python "
                                     f"{m.python[0]}.{m.python[1]} ({m.python_tag})"))
    if c.file.requires_python:
        ok = python_allowed(c.file.requires_python, tuple(m.python))
        if ok is False:
            c.problems.append(("requires-python", f"it requires Python {c.file.requires_python}, this is "
                                                  f"{'.'.join(map(str, m.python))}"))
    plat, note = platform_problem(c.wheel, m)
    if plat:
        c.problems.append(plat)
    if note:
        c.notes.append(note)
    if c.variant is not None:
        problem, note = driver_problem(c.variant.cuda, m)
        if problem:
            c.problems.append(("driver", problem))
        if note:
            c.notes.append(note)
        if c.variant.cxx11_abi is not None and m.cxx11_abi is not None and c.variant.cxx11_abi != m.cxx11_abi:
            c.problems.append(("abi", (
                f"it is built with the {'new (C++11)' if c.variant.cxx11_abi else 'old (pre-C++11)'} C++ ABI, "
                f"this torch uses the {'new' if m.cxx11_abi else 'old'} one: importing it would fail with an "
                "undefined symbol")))


def check_arch(c: Candidate, m: Machine, *, peek: bool, budget: list[int], timeout: float) -> None:
    """Add an ``arch`` problem (or a note saying why it wasn't checked) to ``c``."""
    if not m.gpus:
        c.notes.append("couldn't check the GPU arch: no GPU detected (pass --sm to check one)")
        return
    archs = (c.file.extra or {}).get("archs")
    source = "the index"
    if archs is None:
        if not peek:
            c.notes.append("didn't check the GPU arch (--no-peek)")
            return
        if budget[0] <= 0:
            c.notes.append("couldn't check the GPU arch: read enough wheels for one answer")
            return
        budget[0] -= 1
        manifest, how = read_wheel_manifest(c.file.url, c.file.size, timeout=timeout)
        if manifest is None:
            c.notes.append(f"couldn't check the GPU arch: no build manifest ({how})")
            return
        archs = manifest.get("archs")
        source = f"the wheel's cuwheels.json ({how})"
    found = archs.get("found", archs) if isinstance(archs, dict) else None
    if not isinstance(found, dict) or not _module_archs(found):
        c.notes.append("couldn't check the GPU arch: the build manifest lists no GPU code")
        return
    problem = arch_problem(found, m.gpus)
    if problem:
        c.problems.append(("arch", problem))
    else:
        sms = ", ".join(f"sm_{g.sm}" for g in m.gpus)
        c.notes.append(f"GPU arch checked against {source}: kernels for {sms}")


# --------------------------------------------------------------------------- answers


@dataclass
class Answer:
    """What to install (``fits``), or why nothing fits and what would."""

    package: str
    fits: bool
    machine: Machine
    version: str | None = None
    filename: str | None = None
    index_path: str | None = None
    index_url: str | None = None
    pip: str | None = None
    uv: dict[str, str] | None = None
    reason: str | None = None
    reasons: list[str] = field(default_factory=list)
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    build: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The answer as printed by ``--json``."""
        doc: dict[str, Any] = {"package": self.package, "fits": self.fits}
        if self.fits:
            doc.update(version=self.version, filename=self.filename, index=self.index_path,
                       index_url=self.index_url, pip=self.pip, uv=self.uv)
        else:
            doc.update(reason=self.reason, reasons=self.reasons, alternatives=self.alternatives)
        doc.update(build=self.build, notes=self.notes, machine=self.machine.to_json())
        return doc


def install_commands(project: str, version: str, index_url: str, index_path: str) -> tuple[str, dict[str, str]]:
    """The pip command and the uv command + pyproject configuration for one wheel.

    ``--extra-index-url``, not ``--index-url``: the variant index holds only the extensions, and
    their dependencies (torch, einops...) must still come from the default index. pip merges all
    indexes and takes the best candidate, so the requirement pins the full version *with* its
    local label: PyPI can't host local versions, so only our index can satisfy it, and a newer
    release or an sdist of the same name elsewhere can never be picked (or built for an hour).
    uv's default strategy takes a package from the first index that has it, and it tries
    ``--extra-index-url`` before the default index: the same command means the same there. A uv
    project gets an ``explicit`` index, consulted only for the package its source names.
    """
    requirement = f"{project}=={version}"
    quoted = f'"{requirement}"'  # a project name and a version: nothing in it the shell expands
    pip = f"pip install {quoted} --extra-index-url {index_url}"
    name = "cuwheels-" + index_path.replace("/", "-")
    pyproject = (
        f"# in [project] dependencies: \"{requirement}\"\n"
        "[[tool.uv.index]]\n"
        f"name = \"{name}\"\n"
        f"url = \"{index_url}\"\n"
        "explicit = true\n\n"
        "[tool.uv.sources]\n"
        f"{project} = {{ index = \"{name}\" }}\n"
    )
    uv = {
        "command": f"uv pip install {quoted} --extra-index-url {index_url}",
        "requirement": requirement,
        "index_name": name,
        "pyproject": pyproject,
    }
    return pip, uv


def build_command(project: str, m: Machine, *, archs: list[str] | None = None) -> str:
    """How to build the package for this machine from a clone of the cuwheels repository."""
    pkg = re.sub(r"[-.]+", "_", project)
    py = f"{m.python[0]}.{m.python[1]}"
    extra = f" --archs {','.join(archs)}" if archs else ""
    series = torch_series(m.torch) if m.torch else None
    if m.torch_build == "cuda" and m.torch_cuda and series:
        cu = m.torch_cuda.replace(".", "")
        return (f"nox -s build-{pkg}-{py}-cu{cu}-torch{series} -- --backend host{extra}  (in a clone of "
                f"the cuwheels repository; the session is build-{pkg}-{py}-cu{cu} when torch {series} is "
                f"the recipe's first torch for CUDA {m.torch_cuda}: `nox -l -t {pkg}` lists them)")
    return (f"nox -s build-{pkg}-{py}-cu<CUDA> -- --backend host{extra}  (in a clone of the cuwheels "
            f"repository; `nox -l -t {pkg}` lists the sessions)")


def _tag_rank(w: WheelName) -> int:
    # Prefer the most specific wheel: cpXY-cpXY over abi3 over pure py3.
    return 2 if w.abi.startswith("cp") else 1 if w.abi == "abi3" else 0


def _pick_order(cands: list[Candidate], pinned: bool) -> list[Candidate]:
    def key(c: Candidate) -> tuple:
        try:
            vk = version_key(c.version)
        except ValueError:
            vk = ()
        final = pinned or not is_prerelease(c.version)
        return (final, vk, _tag_rank(c.wheel), _build_rank(c.wheel))
    return sorted(cands, key=key, reverse=True)


def _build_rank(w: WheelName) -> tuple[int, str]:
    # The wheel spec's build tag (a recipe's build number): a rebuild wins, as in pip and uv.
    m = re.match(r"(\d+)(.*)", w.build or "")
    return (int(m.group(1)), m.group(2)) if m else (-1, "")


def _python_summary(cands: list[Candidate]) -> str:
    tags = sorted({f"{c.wheel.python}-{c.wheel.abi}" for c in cands})
    return ", ".join(tags)


def _variants_in(files: list[IndexFile]) -> dict[str, dict[str, Any]]:
    """``{index path: {variant, versions, pythons, files}}`` of the files that state a variant."""
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        w = parse_wheel_filename(f.filename)
        if w is None:
            continue
        v = file_variant(f, w)
        if v is None:
            continue
        entry = out.setdefault(v.index_path, {"variant": v, "versions": set(), "files": []})
        entry["versions"].add(public_version(w.version))
        entry["files"].append((f, w))
    return out


def _sorted_versions(versions: Any) -> list[str]:
    def key(v: str) -> tuple:
        try:
            return (1, version_key(v))
        except ValueError:
            return (0, ())
    return sorted(versions, key=key, reverse=True)


def alternatives(index: Index, project: str, combined: list[IndexFile], m: Machine, *,
                 version: str | None, exclude: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Other variant indexes with wheels of ``project`` (of ``version`` if given), nearest first.

    ``fits_otherwise`` says whether one of its wheels fits this machine apart from the torch it
    needs (Python, platform, glibc, driver).
    """
    out = []
    series = torch_series(m.torch) if m.torch else None
    for path, entry in _variants_in(combined).items():
        if path in exclude:
            continue
        v: Variant = entry["variant"]
        files = [(f, w) for f, w in entry["files"] if version is None or same_public(w.version, version)]
        if not files:
            continue
        fits = False
        for f, w in files:
            c = Candidate(f, w, v, path)
            check(c, m)
            if not [k for k, _ in c.problems if k not in ("abi",)]:
                fits = True
                break
        item: dict[str, Any] = {
            "index": path, "index_url": index.index_url(path + "/"), "cuda": v.cuda, "torch": v.torch,
            "versions": _sorted_versions({public_version(w.version) for _, w in files}),
            "pythons": sorted({f"{w.python}-{w.abi}" for _, w in files}),
            "fits_otherwise": fits,
        }
        if "." in v.cuda:
            cu = v.cuda.replace(".", "")
            item["torch_install"] = f'pip install "torch=={v.torch}.*" --index-url {TORCH_INDEX}cu{cu}'
        out.append(item)

    def key(item: dict[str, Any]) -> tuple:
        same_major = m.torch_cuda is not None and item["cuda"].split(".")[0] == m.torch_cuda.split(".")[0]
        distance = 99
        if series:
            a, b = release_tuple(item["torch"]), release_tuple(series)
            distance = abs((a[0] - b[0]) * 100 + a[1] - b[1])
        return (not item["fits_otherwise"], not same_major, distance, [-x for x in release_tuple(item["cuda"])])
    return sorted(out, key=key)


def select(index: Index, package: str, m: Machine, *, version: str | None = None, peek: bool = True,
           timeout: float = 30) -> Answer:
    """The wheel of ``package`` (``version`` if given) that fits machine ``m``, or why none does."""
    project = normalize_name(package)
    ans = Answer(package=project, fits=False, machine=m)
    ans.build = build_command(project, m)
    combined = index.files("", project) or []
    if not combined:
        ans.reason = f"{project} is not in the index at {index.root}"
        known = index.projects() or []
        squashed = project.replace("-", "")
        close = [p for p in known if squashed in p.replace("-", "") or p.replace("-", "") in squashed]
        ans.alternatives = [{"project": p} for p in (close or known)[:10]]
        return ans
    if version is not None and not any(
        (w := parse_wheel_filename(f.filename)) and same_public(w.version, version) for f in combined
    ):
        ans.reason = f"the index has no {project} {version}"
        have = {public_version(w.version) for f in combined if (w := parse_wheel_filename(f.filename))}
        ans.reasons = [f"versions in the index: {', '.join(_sorted_versions(have))}"]
        ans.alternatives = alternatives(index, project, combined, m, version=None)
        return ans

    what = f"{project}{' ' + version if version else ''}"
    if m.torch is None:
        ans.reason = f"torch is not installed here, and {what} must match the torch it runs with"
        ans.reasons = ["install torch first (or pass --torch-version, e.g. 2.8.0+cu128), then run this again"]
        ans.alternatives = alternatives(index, project, combined, m, version=version)
        return ans
    if m.torch_build in ("cpu", "rocm"):
        ans.reason = (f"torch {m.torch} is a {'CPU-only' if m.torch_build == 'cpu' else 'ROCm'} build; "
                      f"{project}'s wheels are CUDA extensions for a CUDA build of torch")
        ans.alternatives = alternatives(index, project, combined, m, version=version)
        return ans
    series = torch_series(m.torch)
    if m.torch_build is None or not m.torch_cuda or series is None:
        ans.reason = f"couldn't tell which CUDA torch {m.torch} is built with: pass --torch-cuda (e.g. 12.8)"
        ans.alternatives = alternatives(index, project, combined, m, version=version)
        return ans

    if driver_problem(m.torch_cuda, m)[0]:
        need = MIN_DRIVER.get(m.torch_cuda.split(".")[0], "a newer one")
        ans.notes.append(f"this machine's NVIDIA driver is too old for torch {m.torch} itself "
                         f"(CUDA {m.torch_cuda} needs driver >= {need})")
    cuda = ".".join(m.torch_cuda.split(".")[:2])  # index paths name major.minor ("12.4", never "12.4.1")
    exact = Variant(cuda, series).index_path
    paths = (exact, Variant(cuda.split(".")[0], series).index_path)
    budget = [PEEK_MAX]
    seen: list[Candidate] = []
    for path in paths:
        files = index.files(path + "/", project) or []
        cands = []
        for f in files:
            w = parse_wheel_filename(f.filename)
            if w is None or (version is not None and not same_public(w.version, version)):
                continue
            c = Candidate(f, w, file_variant(f, w), path)
            check(c, m)
            cands.append(c)
        seen += cands
        for c in _pick_order([c for c in cands if not c.problems], pinned=version is not None):
            check_arch(c, m, peek=peek, budget=budget, timeout=timeout)
            if c.problems:
                continue
            ans.fits = True
            ans.version, ans.filename, ans.index_path = c.version, c.file.filename, path
            ans.index_url = index.index_url(path + "/")
            ans.pip, ans.uv = install_commands(project, c.version, ans.index_url, path)
            ans.notes = list(dict.fromkeys(ans.notes + c.notes))
            newest = _sorted_versions({public_version(w.version) for f in combined
                                       if (w := parse_wheel_filename(f.filename))})
            if version is None and newest and not same_public(newest[0], c.version) and not is_prerelease(newest[0]):
                ans.notes.append(f"{project} {newest[0]} exists in the index, but not for torch {series} + "
                                 f"CUDA {m.torch_cuda}")
            ans.build = None
            return ans

    tv = f"torch {series} + CUDA {m.torch_cuda}"
    ans.alternatives = alternatives(index, project, combined, m, version=version, exclude=paths)
    if not seen:
        ans.reason = f"no {what} wheel for {tv} (the variant index {exact}/simple/ has none)"
        if ans.alternatives:
            ans.reasons = ["wheels exist for: " + "; ".join(
                f"torch {a['torch']} + CUDA {a['cuda']} ({a['index']})" for a in ans.alternatives[:6])]
        return ans
    ans.reasons = _summarize(seen, m)
    ans.reason = f"no {what} wheel for {tv} fits this machine; {ans.reasons[0]}"
    arch_failures = [c for c in seen if any(k == "arch" for k, _ in c.problems)]
    if arch_failures and m.gpus:
        ans.build = build_command(project, m, archs=sorted({g.sm for g in m.gpus}, key=int))
    ans.notes = list(dict.fromkeys(ans.notes + [n for c in seen for n in c.notes]))
    # Other versions in the same index that fit (when a version was asked for).
    if version is not None:
        others = select(index, project, m, version=None, peek=peek, timeout=timeout)
        if others.fits:
            ans.alternatives.insert(0, {"index": others.index_path, "index_url": others.index_url,
                                        "versions": [public_version(others.version or "")], "pip": others.pip,
                                        "fits_otherwise": True})
    return ans


def _summarize(cands: list[Candidate], m: Machine) -> list[str]:
    """Why nothing fits, nearest first: the newest version's wheels, those for this Python first;
    when none is for this Python, one line naming the Python tags there are."""
    newest = _pick_order(cands, pinned=True)[0].version
    group = [c for c in cands if same_public(c.version, newest)]
    # Wheels for another OS/CPU or another Python are the farthest from fitting: reported last.
    distance = {"platform": 2, "python": 1}
    group.sort(key=lambda c: (max((distance.get(k, 0) for k, _ in c.problems), default=0), len(c.problems)))
    reasons: list[str] = []
    no_python = all(any(k == "python" for k, _ in c.problems) for c in group)
    if no_python:
        reasons.append(f"{public_version(newest)} is built for {_python_summary(group)} only, this is "
                       f"Python {m.python[0]}.{m.python[1]} ({m.python_tag})")
    for c in group:
        for kind, message in c.problems:
            if kind == "python" and no_python:
                continue
            text = f"{c.file.filename} {message[3:]}" if message.startswith("it ") else f"{c.file.filename}: {message}"
            if text not in reasons:
                reasons.append(text)
    return reasons


# --------------------------------------------------------------------------- doctor


@dataclass
class Installed:
    """An installed distribution, as the doctor sees it."""

    name: str
    version: str
    manifest: dict[str, Any] | None
    modules: list[str]          # compiled extension modules (import names)
    top_level: list[str]
    location: str


def module_name(path: str) -> str | None:
    """``flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so`` -> ``flash_attn_2_cuda``;
    ``pkg/_C.abi3.so`` -> ``pkg._C``; a vendored ``pkg.libs/libfoo.so`` -> None."""
    parts = path.replace("\\", "/").split("/")
    if not parts[-1].endswith((".so", ".pyd")) or any(p.endswith(".libs") for p in parts[:-1]):
        return None
    if parts[-1].startswith("lib") and ".cpython-" not in parts[-1] and ".abi3." not in parts[-1]:
        return None
    stem = parts[-1].split(".", 1)[0]
    return ".".join(parts[:-1] + [stem])


def find_installed(package: str) -> Installed | None:
    """The installed distribution ``package`` (its manifest, compiled modules, top-level names)."""
    import importlib.metadata as md

    dist = None
    for name in (package, normalize_name(package), normalize_name(package).replace("-", "_")):
        try:
            dist = md.distribution(name)
            break
        except md.PackageNotFoundError:
            continue
    if dist is None:
        return None
    manifest = None
    try:
        text = dist.read_text("cuwheels.json")
        manifest = json.loads(text) if text else None
    except (ValueError, OSError):
        manifest = None
    files = [str(f) for f in (dist.files or [])]
    modules = sorted({n for n in (module_name(f) for f in files) if n})
    top = (dist.read_text("top_level.txt") or "").split()
    if not top:
        top = sorted({f.split("/")[0] for f in files if f.endswith("/__init__.py") and f.count("/") == 1})
    return Installed(dist.metadata["Name"] or package, dist.version, manifest, modules, top,
                     str(dist.locate_file("")))


_IMPORT = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"


def reproduce_import(inst: Installed, m: Machine) -> str | None:
    """Import torch, the package and its compiled modules in a subprocess; the error text, or None."""
    names = (["torch"] if m.torch else []) + inst.top_level + inst.modules
    proc = _run([sys.executable, "-c", _IMPORT, *names], timeout=300)
    if proc is None:
        return "the import timed out after 300 s"
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return "\n".join(lines[-20:])


def demangle(symbol: str) -> str:
    """A C++ symbol in readable form: c++filt when installed, else the qualified name alone."""
    cxxfilt = _which("c++filt")
    if cxxfilt:
        proc = _run([cxxfilt, symbol], timeout=10)
        if proc is not None and proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.strip()
    return _qualified_name(symbol) or symbol


def _qualified_name(symbol: str) -> str | None:
    """``_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib`` ->
    ``c10::cuda::c10_cuda_check_implementation(...)`` (names only; enough to see whose symbol it is)."""
    if not symbol.startswith("_Z"):
        return None
    s, i = symbol[2:], 0
    nested = s.startswith("N")
    if nested:
        i = 1
        while i < len(s) and s[i] in "KVr":
            i += 1
    parts = []
    if s.startswith("St", i):
        parts.append("std")
        i += 2
    while i < len(s) and s[i].isdigit():
        j = i
        while j < len(s) and s[j].isdigit():
            j += 1
        n = int(s[i:j])
        parts.append(s[j:j + n])
        i = j + n
        if not nested:
            break
    return "::".join(parts) + "(...)" if parts else None


@dataclass
class Diagnosis:
    """An explained error: its class, what it means here, and what to do."""

    kind: str
    summary: str
    details: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    error: str | None = None

    def to_json(self, m: Machine) -> dict[str, Any]:
        """The diagnosis as printed by ``--doctor --json``."""
        return {"kind": self.kind, "summary": self.summary, "details": self.details, "fixes": self.fixes,
                "error": self.error, "machine": m.to_json()}


def _built_for(inst: Installed | None) -> tuple[str | None, str | None, bool | None]:
    """(torch series, CUDA, C++ ABI) an installed wheel was built for: manifest, else local label."""
    if inst is None:
        return None, None, None
    if inst.manifest and inst.manifest.get("torch"):
        abi = inst.manifest.get("cxx11_abi")
        return (torch_series(str(inst.manifest["torch"])), str(inst.manifest.get("cuda") or "") or None,
                abi if isinstance(abi, bool) else None)
    v = parse_label(inst.version.partition("+")[2]) if "+" in inst.version else None
    return (v.torch, v.cuda, v.cxx11_abi) if v else (None, None, None)


def _install_fix(project: str, m: Machine, index: Index | None, answer: Answer | None) -> str:
    if answer is not None and answer.fits:
        return f"{answer.pip}   (the wheel from {answer.index_path}/simple/)"
    if index is not None and answer is not None:
        return f"no wheel in the index fits this machine ({answer.reason}); build one: {answer.build}"
    return f"python select.py {project} --index <the cuwheels site URL>   prints the pip command for this machine"


def diagnose(error: str, package: str, m: Machine, inst: Installed | None, *,
             index: Index | None = None, answer: Answer | None = None) -> Diagnosis:
    """Explain an import/runtime error of ``package`` on machine ``m`` (installed as ``inst``)."""
    project = normalize_name(package)
    have = f"{inst.name} {inst.version}" if inst else project
    fix_install = _install_fix(project, m, index, answer)
    series = torch_series(m.torch) if m.torch else None

    match = re.search(r"undefined symbol:\s*(\S+)", error)
    if match:
        symbol = match.group(1)
        readable = demangle(symbol)
        module = re.search(r"([^/\s:]+\.so)\S*:\s*undefined symbol", error)
        where = f" (in {module.group(1)})" if module else ""
        built, built_cuda, built_abi = _built_for(inst)
        torch_symbol = re.search(r"\b(c10|at|torch|caffe2)::", readable) is not None
        d = Diagnosis("undefined-symbol", "", [f"missing symbol: {readable}{where}", f"mangled: {symbol}"],
                      error=error)
        if not torch_symbol:
            d.summary = (f"{have} needs a symbol that isn't torch's ({readable}): a library it links to is "
                         "missing or a different version, or the build is broken")
            d.fixes = [f"reinstall a binary wheel built for this torch: {fix_install}"]
        elif built and series and built != series:
            d.summary = (f"{have} was built for torch {built}, this environment has torch {m.torch}: "
                         f"torch {series} doesn't export {readable.split('(')[0]}")
            cu = ""
            if built_cuda and "." in built_cuda:
                cu = f" --index-url {TORCH_INDEX}cu{built_cuda.replace('.', '')}"
            d.fixes = [f'install the torch it was built for: pip install "torch=={built}.*"{cu}',
                       f"or install the wheel built for torch {series} (the torch{series} variant index): "
                       f"{fix_install}"]
        elif built_abi is not None and m.cxx11_abi is not None and built_abi != m.cxx11_abi:
            d.summary = (f"{have} is built with the {'C++11' if built_abi else 'pre-C++11'} ABI, this torch "
                         f"uses the {'C++11' if m.cxx11_abi else 'pre-C++11'} one (std::string differs)")
            d.fixes = [f"install the wheel for this torch's ABI: {fix_install}"]
        elif "__cxx11" in readable and m.cxx11_abi is False:
            d.summary = (f"{have} is built with the C++11 ABI (the symbol mentions std::__cxx11), this torch "
                         "uses the pre-C++11 ABI")
            d.fixes = [f"install the wheel for this torch's ABI: {fix_install}"]
        elif built_cuda and m.torch_cuda and built_cuda.split(".")[0] != m.torch_cuda.split(".")[0]:
            d.summary = f"{have} is built for CUDA {built_cuda}, this torch is built with CUDA {m.torch_cuda}"
            d.fixes = [f"install the wheel for this torch's CUDA: {fix_install}"]
        elif built is None:
            d.summary = (f"{have} needs a torch symbol ({readable.split('(')[0]}) this torch "
                         f"({m.torch or 'not found'}) doesn't export; its build manifest is missing, so which "
                         "torch it was built for is unknown: most likely another torch version")
            d.fixes = [f"install the wheel built for this torch: {fix_install}"]
        else:
            d.summary = (f"{have} was built for torch {built} and this is torch {m.torch}, yet "
                         f"{readable.split('(')[0]} is missing: a torch patch release or a custom torch "
                         "build that changed this symbol")
            d.fixes = [f"reinstall torch {built}.* from the official index, or build {project} against "
                       f"this torch: {build_command(project, m)}"]
        return d

    match = re.search(r"No module named '([\w.]+)'", error)
    if match:
        missing = match.group(1)
        if missing.split(".")[0] == "torch":
            return Diagnosis("torch-missing", f"torch is not installed for {sys.executable}",
                             fixes=["install torch first (the version the wheel was built for), then the wheel"],
                             error=error)
        compiled = inst is not None and missing in inst.modules
        looks_compiled = compiled or re.search(r"(_cuda|_C|_ext|_kernels?)$", missing) is not None
        if looks_compiled or (inst is not None and not inst.modules):
            details = []
            if inst is not None:
                details.append(f"installed at {inst.location}; compiled modules installed: "
                               f"{', '.join(inst.modules) or 'none'}")
            return Diagnosis(
                "missing-extension",
                f"{have} is installed without its compiled CUDA extension {missing}: a source-only or "
                "CPU-only install (built from the sdist with the CUDA build skipped, e.g. no nvcc/CUDA_HOME "
                "at install time)", details,
                fixes=[f"pip uninstall -y {project}", f"then install the binary wheel: {fix_install}"],
                error=error)
        return Diagnosis("missing-module", f"{missing} is not installed (a dependency of {project}?)",
                         fixes=[f"pip install {missing.split('.')[0]}"], error=error)

    match = re.search(r"GLIBC_(\d+\.\d+)['’]? not found(?: \(required by ([^)]+)\))?", error)
    if match:
        need = match.group(1)
        by = f" (required by {match.group(2)})" if match.group(2) else ""
        found = ".".join(map(str, m.glibc)) if m.glibc else "unknown"
        return Diagnosis(
            "glibc", f"the module needs glibc {need}{by}, this machine has glibc {found}",
            fixes=[f"install a wheel tagged manylinux_2_X with X <= {m.glibc[1] if m.glibc else '?'}: {fix_install}",
                   f"or build it on this machine (a host build links against this glibc): {build_command(project, m)}",
                   f"or use an OS/container image with glibc >= {need}"],
            error=error)

    match = re.search(r"GLIBCXX_(\d+\.\d+\.\d+)['’]? not found(?: \(required by ([^)]+)\))?", error)
    if match:
        return Diagnosis(
            "glibcxx",
            f"the libstdc++ loaded in this process is older than the one the module needs (GLIBCXX_{match.group(1)}); "
            "common in conda environments, whose libstdc++ shadows the system one",
            fixes=["conda install -c conda-forge libstdcxx-ng  (a newer libstdc++ in the environment)",
                   "or load the system one first: LD_PRELOAD=$(g++ -print-file-name=libstdc++.so.6) python ..."],
            error=error)

    if re.search(r"no kernel image is available for execution on the device|invalid device function", error):
        return _diagnose_arch(project, have, m, inst, error, fix_install)

    match = re.search(r"(lib[\w.+-]+?\.so(?:\.\d+)*): cannot open shared object file", error)
    if match:
        lib = match.group(1)
        cuda_lib = re.fullmatch(r"lib(cudart|cublas\w*|cusparse|cufft|curand|cusolver|nvrtc\w*)\.so\.(\d+)", lib)
        if lib.startswith(("libc10_cuda", "libtorch_cuda")) or (cuda_lib and m.torch_build == "cpu"):
            summary = f"{have} needs a CUDA build of torch ({lib} is missing); torch {m.torch or ''} is CPU-only"
            fixes = ["install a CUDA build of torch, then the matching wheel: " + fix_install]
        elif cuda_lib:
            summary = (f"{have} needs {lib} (CUDA {cuda_lib.group(2)}); torch here is built with CUDA "
                       f"{m.torch_cuda or 'unknown'}")
            fixes = [f"install the wheel for this torch's CUDA: {fix_install}"]
        else:
            summary = f"{have} needs {lib}, which isn't installed or isn't on the library path"
            fixes = [f"install the package that provides {lib}, or import torch first"]
        return Diagnosis("missing-library", summary, fixes=fixes, error=error)

    return Diagnosis("unknown", "not one of the errors this doctor knows (undefined symbol, missing "
                     "compiled module, GLIBC/GLIBCXX version, no kernel image, missing CUDA library)",
                     error=error, fixes=[f"check that the wheel matches this machine: {fix_install}"])


def _diagnose_arch(project: str, have: str, m: Machine, inst: Installed | None, error: str | None,
                   fix_install: str) -> Diagnosis:
    found = ((inst.manifest or {}).get("archs") or {}).get("found") if inst else None
    gpus = ", ".join(f"sm_{g.sm}" + (f" ({g.name})" if g.name else "") for g in m.gpus) or "unknown (pass --sm)"
    details = []
    if found:
        for module, (sass, ptx) in sorted(_module_archs(found).items()):
            details.append(f"{module}: SASS for {_arch_list(sass)}; PTX for {_arch_list(ptx)}")
    elif inst is None:
        details.append(f"{project} is not installed for {sys.executable}: its archs can't be read here")
    else:
        details.append("the installed wheel has no build manifest: list its archs with "
                       "`cuobjdump --list-elf <module>.so`")
    problem = arch_problem(found, m.gpus) if found and m.gpus else None
    if problem:
        summary = f"{have} has no kernels for this GPU (GPU {gpus}): {problem}"
    elif not (found and m.gpus):
        summary = (f"a CUDA kernel has no code for this GPU (GPU {gpus}); which archs {have} carries is "
                   "unknown, it is the likely culprit")
    else:
        summary = (f"{have} has kernels for GPU {gpus}: the failing kernel is in another library "
                   "(torch itself, or another extension)")
    archs = sorted({g.sm for g in m.gpus}, key=int)
    return Diagnosis("no-kernel-image", summary, details, error=error, fixes=[
        f"install a wheel built for your GPU: {fix_install}",
        f"or build for it: {build_command(project, m, archs=archs or ['<sm>'])}"])


def doctor(package: str, m: Machine, *, error: str | None = None, index: Index | None = None,
           peek: bool = True, timeout: float = 30) -> Diagnosis:
    """Explain ``error`` (or the error importing ``package`` here) with this machine's facts."""
    inst = find_installed(package)
    answer = None
    if index is not None:
        try:
            answer = select(index, package, m, peek=peek, timeout=timeout)
        except IndexReadError:
            answer = None
    if error is None:
        if inst is None:
            fix = _install_fix(normalize_name(package), m, index, answer)
            return Diagnosis("not-installed", f"{package} is not installed for {sys.executable}", fixes=[fix])
        error = reproduce_import(inst, m)
        if error is None:
            found = ((inst.manifest or {}).get("archs") or {}).get("found")
            if found and m.gpus and arch_problem(found, m.gpus):
                return _diagnose_arch(normalize_name(package), f"{inst.name} {inst.version}", m, inst, None,
                                      _install_fix(normalize_name(package), m, index, answer))
            built, _, _ = _built_for(inst)
            series = torch_series(m.torch) if m.torch else None
            details = []
            if built and series and built != series:
                details.append(f"built for torch {built}, this is torch {m.torch}: it imports, but may fail later")
            return Diagnosis("ok", f"{inst.name} {inst.version} imports fine here "
                             f"({', '.join(inst.top_level + inst.modules)})", details)
    return diagnose(error, package, m, inst, index=index, answer=answer)


# --------------------------------------------------------------------------- output


def format_machine(m: Machine) -> str:
    """The detected facts, one per line, with what couldn't be detected."""
    lines = [f"  python   {'.'.join(map(str, m.python))} ({m.python_tag}), {m.os} {m.arch}"
             + (f", glibc {m.glibc[0]}.{m.glibc[1]}" if m.glibc else "")]
    if m.torch:
        build = {"cuda": f"CUDA {m.torch_cuda}", "cpu": "CPU-only", "rocm": "ROCm"}.get(m.torch_build or "",
                                                                                        "build unknown")
        abi = {True: ", C++11 ABI", False: ", pre-C++11 ABI"}.get(m.cxx11_abi, "")  # type: ignore[arg-type]
        lines.append(f"  torch    {m.torch} ({build}{abi})")
    if m.driver or m.driver_cuda:
        parts = [p for p in (m.driver, f"CUDA {m.driver_cuda}" if m.driver_cuda else None) if p]
        lines.append(f"  driver   {', '.join(parts)}")
    if m.gpus:
        lines.append("  GPUs     " + ", ".join(f"sm_{g.sm}" + (f" ({g.name})" if g.name else "") for g in m.gpus))
    for key, why in m.unknown.items():
        lines.append(f"  ?        {key}: {why}")
    return "\n".join(lines)


def format_answer(a: Answer) -> str:
    """The human-readable answer."""
    out = ["This machine:", format_machine(a.machine), ""]
    if a.fits:
        out += [f"{a.package} {a.version} fits: {a.filename}",
                f"  variant index: {a.index_url}", "",
                "pip:", f"  {a.pip}", "",
                "uv (pip interface):", f"  {a.uv['command'] if a.uv else ''}", "",
                "uv project (pyproject.toml):"]
        out += [f"  {line}" if line else "" for line in (a.uv or {}).get("pyproject", "").splitlines()]
    else:
        out.append(f"No wheel fits: {a.reason}")
        out += [f"  - {r}" for r in a.reasons if r not in (a.reason or "")]
        if a.alternatives:
            out += ["", "Alternatives:"]
            for alt in a.alternatives[:8]:
                if "project" in alt:
                    out.append(f"  - project {alt['project']}")
                elif "pip" in alt:
                    out.append(f"  - {a.package} {alt['versions'][0]} fits from {alt['index']}: {alt['pip']}")
                else:
                    fit = "" if alt["fits_otherwise"] else " (not for this machine's Python/platform/driver)"
                    line = (f"  - torch {alt['torch']} + CUDA {alt['cuda']}: {alt['index_url']} "
                            f"({', '.join(alt['versions'][:4])}; {', '.join(alt['pythons'])}){fit}")
                    out.append(line)
                    if alt.get("torch_install") and alt["fits_otherwise"]:
                        out.append(f"      with torch from: {alt['torch_install']}")
    if a.build:
        out += ["", "Build from source:", f"  {a.build}"]
    if a.notes:
        out += ["", "Notes:"] + [f"  - {n}" for n in a.notes]
    return "\n".join(out)


def format_diagnosis(d: Diagnosis, m: Machine) -> str:
    """The human-readable diagnosis."""
    out = ["This machine:", format_machine(m), ""]
    if d.error:
        out += ["Error:"] + [f"  {line}" for line in d.error.strip().splitlines()[-3:]] + [""]
    out.append(f"Diagnosis ({d.kind}): {d.summary}")
    out += [f"  {line}" for line in d.details]
    if d.fixes:
        out += ["", "Fix:"] + [f"  - {f}" for f in d.fixes]
    return "\n".join(out)


# --------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(
        prog="python -m tools.select" if __name__ != "__main__" else None,
        description="Which cuwheels wheel fits this machine, with the pip and uv commands; or why an "
                    "installed one fails to import (--doctor).",
    )
    p.add_argument("package", nargs="?", help="project name, e.g. flash-attn")
    p.add_argument("--version", help="a version of the package (default: the newest that fits)")
    p.add_argument("--index", help="the cuwheels site: its URL or a local site directory")
    p.add_argument("--site-url", help="public URL of a local --index, used in the printed commands")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--doctor", action="store_true", help="explain an import error of PACKAGE")
    err = p.add_mutually_exclusive_group()
    err.add_argument("--error", help="the error text to explain (default: try the import here)")
    err.add_argument("--error-file", type=Path, help="a file holding the error text (a log, a traceback)")
    p.add_argument("--detect", action="store_true", help="print the detected facts and exit")
    p.add_argument("--no-peek", action="store_true", help="never read a wheel's manifest for the GPU arch check")
    p.add_argument("--timeout", type=float, default=30, help="seconds per network request (default 30)")
    o = p.add_argument_group("facts of another machine (each replaces what is detected here)")
    o.add_argument("--python-version", help="3.12 (3.13t for free-threaded)")
    o.add_argument("--machine", help="CPU arch as in wheel tags: x86_64, aarch64")
    o.add_argument("--glibc", help="glibc version, e.g. 2.28")
    o.add_argument("--torch-version", help="torch version with its label, e.g. 2.8.0+cu128 or 2.9.1+cpu")
    o.add_argument("--torch-cuda", help="CUDA version torch is built with (12.8; none for CPU)")
    o.add_argument("--cxx11-abi", help="torch's C++ ABI: 1 (C++11, torch >= 2.7) or 0")
    o.add_argument("--cuda-driver", help="NVIDIA driver version (580.65.06) or the CUDA version it supports (13.0)")
    o.add_argument("--sm", help="GPU compute capabilities: 90, 8.6, 80,120 or none")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.detect and not args.package:
        parser.error("PACKAGE is required (or --detect)")
    if not args.detect and not args.doctor and not args.index:
        parser.error("--index is required: the URL (or local directory) of the cuwheels site")
    overrides = {k: getattr(args, k) for k in ("python_version", "machine", "glibc", "torch_version",
                                                "torch_cuda", "cxx11_abi", "cuda_driver", "sm")}
    try:
        machine = detect_machine(overrides)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        parser.error(str(exc))
    if args.detect:
        print(json.dumps(machine.to_json(), indent=2) if args.json else "This machine:\n" + format_machine(machine))
        return EXIT_FITS
    try:
        index = Index(args.index, site_url=args.site_url, timeout=args.timeout) if args.index else None
        if args.doctor:
            error = args.error
            if args.error_file is not None:
                error = args.error_file.read_text(encoding="utf-8", errors="replace")
            d = doctor(args.package, machine, error=error, index=index, peek=not args.no_peek, timeout=args.timeout)
            print(json.dumps(d.to_json(machine), indent=2) if args.json else format_diagnosis(d, machine))
            return EXIT_FITS if d.kind == "ok" else EXIT_NO_FIT
        answer = select(index, args.package, machine, version=args.version, peek=not args.no_peek,
                        timeout=args.timeout)
    except IndexReadError as exc:
        print(f"index error: {exc}", file=sys.stderr)
        return EXIT_INDEX
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INDEX
    print(json.dumps(answer.to_json(), indent=2) if args.json else format_answer(answer))
    return EXIT_FITS if answer.fits else EXIT_NO_FIT


if __name__ == "__main__":
    sys.exit(main())
