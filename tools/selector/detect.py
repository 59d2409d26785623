"""The machine a wheel must fit: Python, OS, CPU arch, glibc, torch, NVIDIA driver and GPUs.

Each fact is detected here unless an override gives it (to answer for another machine), and
detection never raises for a missing tool or library: what it can't find is in
``Machine.unknown``, with why. torch is read from its files (``torch/version.py``, the dist
metadata, ``libc10.so``) and imported only as a last resort, in a subprocess; the driver and
GPUs come from ``nvidia-smi``, else ``libcuda.so.1`` (in a subprocess too).
"""

from __future__ import annotations

import ast
import json
import os
import platform
import re
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from tools.core.platforms import PLATFORMS, normalize_os, platform_name, tag_arch
from tools.core.variant import cuda_from_nodot, torch_series
from .gpu import DetectedGpu, parse_sm
from .localread import (LIBRARY_LIMIT, PROC_LIMIT, VERSION_PY_LIMIT, Output, contains, dist_version, read_text,
                        run_capped)

#: Seconds nvidia-smi may take (it answers in well under one on a healthy machine).
SMI_TIMEOUT = 20


def release(text: str) -> tuple[int, ...]:
    """The release numbers of a version: ``"3.11.7"`` -> ``(3, 11, 7)``, ``"580.65.06"`` -> ``(580, 65, 6)``.

    Raises ValueError (packaging's InvalidVersion) for text that is not a version.
    """
    return Version(text.strip()).release


def series_or_none(version: str | None) -> str | None:
    """torch's ``major.minor`` series of ``version``, or None when there is no readable version."""
    if not version:
        return None
    try:
        return torch_series(version)
    except ValueError:
        return None


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
    gpus: list[DetectedGpu] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)
    #: The answer is for a machine of another platform than the one it runs on (``--platform``,
    #: ``--machine``): its commands then name that platform (pip ``--platform``, uv
    #: ``--python-platform``).
    foreign: bool = False

    @property
    def platform(self) -> str | None:
        """``linux_x86_64``, ``linux_aarch64``, ``win_amd64`` (tools.core.platforms), or None
        for a machine the project builds no wheels for."""
        return platform_name(self.os, self.arch)

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
            "platform": self.platform,
            "foreign": self.foreign,
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


def run_quietly(cmd: list[str], timeout: float = 20) -> Output | None:
    """Run a probe, its output capped (tools.selector.localread.run_capped); None when it can't
    be started, hangs or prints without end (a probe never raises)."""
    out = run_capped(cmd, timeout=timeout)
    return None if out is None or out.problem else out


def _which(program: str) -> str | None:
    """Where ``program`` is on PATH (one seam for tests to replace)."""
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
    """OS (``linux``, ``windows``, else ``sys.platform``), CPU arch as wheel tags spell it on that
    OS (``x86_64``, ``aarch64``; ``amd64`` on Windows) and C library."""
    machine.os = normalize_os(sys.platform)
    # linux-x86_64, win-amd64: the interpreter's arch (i686 on a 64-bit kernel, win32 for a
    # 32-bit Python on 64-bit Windows), which is what its wheels must be built for.
    plat = sysconfig.get_platform()
    if machine.os in ("linux", "windows") and "-" in plat:
        machine.arch = tag_arch(machine.os, plat.split("-", 1)[1])
    elif machine.os == "windows":
        machine.arch = "x86"
    else:
        machine.arch = platform.machine()
    if machine.os != "linux":
        machine.libc = None
        return
    lib, ver = _libc_version()
    machine.libc = lib
    if ver:
        machine.glibc = release(ver)[:2]  # type: ignore[assignment]
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


def _cxx11_abi_from_libc10(lib: Path) -> tuple[bool | None, str]:
    """(torch's C++ ABI, why unknown) from ``libc10.so``: it exports many functions taking
    std::string, which the C++11 ABI mangles with ``St7__cxx11``; a build with the old ABI has
    none. Scanned a chunk at a time, regular files only, at most LIBRARY_LIMIT bytes."""
    found, scanned, why = contains(lib, b"St7__cxx11", LIBRARY_LIMIT)
    if found:
        return True, ""
    if found is None:
        return None, why
    return (False, "") if scanned > 100_000 else (None, f"{lib} is too small to be torch's libc10")


_TORCH_QUERY = r"""
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


def _json_query(code: str, timeout: float) -> dict[str, Any] | None:
    """Run ``code`` in a subprocess and parse the JSON it prints last; None on any failure (what
    it probes, a broken torch or a driver in a bad state, can't take this process down)."""
    proc = run_quietly([sys.executable, "-c", code], timeout=timeout)
    if proc is None or proc.returncode != 0:
        return None
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def _import_torch_query() -> dict[str, Any] | None:
    """Ask torch itself, in a subprocess (slow: seconds)."""
    return _json_query(_TORCH_QUERY, 180)


def detect_torch(machine: Machine, *, allow_import: bool = True) -> None:
    """The installed torch: version, CUDA or CPU build, C++ ABI (reading files, importing only if needed)."""
    dist = _torch_distribution()
    if dist is None:
        machine.unknown["torch"] = f"torch is not installed for {sys.executable}"
        return
    version, why = dist_version(dist)
    if version is None:
        machine.unknown["torch"] = f"torch's dist metadata can't be read: {why}"
        return
    machine.torch = version
    machine.sources["torch"] = "torch dist metadata"
    version_py = Path(str(dist.locate_file("torch/version.py")))
    build, cuda = torch_build_from_version(version)
    facts: dict[str, Any] = {}
    source, why = read_text(version_py, VERSION_PY_LIMIT)
    if source is None and version_py.exists():
        machine.unknown["torch_version_py"] = why
    try:
        facts = _literal_assignments(source or "")
    except (SyntaxError, ValueError, RecursionError):
        pass
    if facts:
        machine.sources["torch_cuda"] = str(version_py)
        if facts.get("cuda"):
            build, cuda = "cuda", str(facts["cuda"])
        elif facts.get("hip"):
            build, cuda = "rocm", None
        elif "cuda" in facts:
            build, cuda = "cpu", None
    # libstdc++'s dual ABI is Linux's: a Windows torch (MSVC) has none to match.
    has_abi = machine.os == "linux"
    abi = None
    if has_abi:
        libc10 = Path(str(dist.locate_file("torch/lib/libc10.so")))
        abi, why = _cxx11_abi_from_libc10(libc10)
        if why and libc10.exists():
            machine.unknown["libc10"] = why
    if abi is not None:
        machine.sources["cxx11_abi"] = "symbols of torch/lib/libc10.so"
    if (build is None or (has_abi and abi is None)) and allow_import:
        probe = _import_torch_query()
        if probe:
            machine.sources["torch_cuda"] = machine.sources["cxx11_abi"] = "import torch (subprocess)"
            if probe.get("cuda"):
                build, cuda = "cuda", str(probe["cuda"])
            elif probe.get("hip"):
                build, cuda = "rocm", None
            else:
                build, cuda = "cpu", None
            abi = probe.get("cxx11_abi") if has_abi else None
            if not machine.gpus and probe.get("gpus"):
                machine.gpus = [DetectedGpu(tuple(cc), name) for cc, name in probe["gpus"]]  # type: ignore[arg-type]
                machine.sources["gpus"] = "torch.cuda"
    machine.torch_build, machine.torch_cuda, machine.cxx11_abi = build, cuda, abi
    if build is None:
        machine.unknown["torch_cuda"] = f"couldn't tell whether torch {version} is a CUDA build"
    if abi is None and has_abi:
        machine.unknown["cxx11_abi"] = "couldn't read torch's C++ ABI"


_LIBCUDA_QUERY = r"""
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


def _libcuda_query() -> dict[str, Any] | None:
    """The driver's CUDA version and the GPUs, from ``libcuda.so.1`` in a subprocess."""
    return _json_query(_LIBCUDA_QUERY, 30)


def parse_nvidia_smi(text: str) -> tuple[str | None, list[DetectedGpu]]:
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
        gpus.append(DetectedGpu(cc, parts[2] if len(parts) > 2 else ""))
    return driver, gpus


def _proc_driver_version() -> str | None:
    text, _ = read_text(Path("/proc/driver/nvidia/version"), PROC_LIMIT)
    if text is None:
        return None
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def detect_nvidia(machine: Machine) -> None:
    """The NVIDIA driver (version and the CUDA version it supports) and the GPUs' capabilities."""
    smi = _which("nvidia-smi")
    smi_problem = ""
    if smi:
        proc = run_capped([smi, "--query-gpu=compute_cap,driver_version,name", "--format=csv,noheader"],
                          timeout=SMI_TIMEOUT)
        smi_problem = proc.problem if proc is not None else ""
        if proc is not None and proc.returncode == 0:
            driver, gpus = parse_nvidia_smi(proc.stdout)
            if driver:
                machine.driver = driver
                machine.sources["driver"] = "nvidia-smi"
            if gpus:
                machine.gpus = gpus
                machine.sources["gpus"] = "nvidia-smi"
    probe = _libcuda_query()
    if probe:
        if probe.get("driver_cuda"):
            v = int(probe["driver_cuda"])
            machine.driver_cuda = f"{v // 1000}.{v % 1000 // 10}"
            machine.sources["driver_cuda"] = "libcuda.so.1 cuDriverGetVersion"
        if not machine.gpus and probe.get("gpus"):
            machine.gpus = [DetectedGpu(tuple(cc), name) for cc, name in probe["gpus"]]  # type: ignore[arg-type]
            machine.sources["gpus"] = "libcuda.so.1"
    if machine.driver is None:
        machine.driver = _proc_driver_version()
        if machine.driver:
            machine.sources["driver"] = "/proc/driver/nvidia/version"
    why = "no nvidia-smi on PATH" if not smi else smi_problem or "nvidia-smi failed"
    if not probe:
        why += ", libcuda.so.1 can't be loaded"
    if machine.driver is None and machine.driver_cuda is None:
        machine.unknown["driver"] = f"no NVIDIA driver found ({why})"
    if not machine.gpus:
        machine.unknown["gpus"] = f"no NVIDIA GPU found ({why})"


def parse_bool(text: str) -> bool:
    """``1``/``true``/``yes``/``new`` -> True, ``0``/``false``/``no``/``old`` -> False; else ValueError."""
    t = text.strip().lower()
    if t in ("1", "true", "yes", "new", "cxx11"):
        return True
    if t in ("0", "false", "no", "old"):
        return False
    raise ValueError(f"expected 1/0 or true/false, got {text!r}")


def detect_machine(overrides: dict[str, Any] | None = None, *, allow_import: bool = True) -> Machine:
    """Everything the selector checks, detected here unless ``overrides`` gives it.

    Override keys (all strings, as typed on the command line): ``python_version`` (``3.12``),
    ``platform`` (``linux_aarch64``, ``linux_x86_64``, ``win_amd64``: OS and CPU arch; a Linux
    one of another arch or OS than here leaves glibc to ``glibc``), ``machine`` (``aarch64``), ``glibc`` (``2.28``), ``torch_version`` (``2.8.0+cu128``),
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
        m.python = release(text.rstrip("t"))
        m.sources["python"] = "--python-version"
    detect_platform(m)
    here = m.platform, m.os
    if "platform" in o:
        target = PLATFORMS.get(o["platform"])
        if target is None:
            raise ValueError(f"--platform {o['platform']!r} is not one of {', '.join(PLATFORMS)}")
        m.os, m.arch = target.os, target.arch
        m.sources["platform"] = "--platform"
    if "machine" in o:
        m.arch = tag_arch(m.os, o["machine"])
        m.sources["arch"] = "--machine"
    m.foreign = m.platform != here[0]
    if m.os != "linux":
        m.libc, m.glibc = None, None
        m.unknown.pop("glibc", None)
    elif (m.foreign or here[1] != "linux") and "glibc" not in o:
        # This machine's glibc says nothing of another's.
        m.libc, m.glibc = "glibc", None
        m.sources.pop("glibc", None)
        m.unknown["glibc"] = "another machine's (--platform): pass --glibc to check it"
    if "glibc" in o:
        m.libc, m.glibc = "glibc", release(o["glibc"])[:2]  # type: ignore[assignment]
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
        m.cxx11_abi = o["cxx11_abi"] if isinstance(o["cxx11_abi"], bool) else parse_bool(o["cxx11_abi"])
        m.sources["cxx11_abi"] = "--cxx11-abi"
        m.unknown.pop("cxx11_abi", None)
    if m.torch is not None and m.torch_build is None and "torch_cuda" not in m.unknown:
        m.unknown["torch_cuda"] = f"torch {m.torch} doesn't say its CUDA version: pass --torch-cuda"
    if m.os != "linux":
        m.cxx11_abi = None  # libstdc++'s dual ABI: none on Windows
        m.unknown.pop("cxx11_abi", None)
    elif m.torch is not None and m.cxx11_abi is None and "cxx11_abi" not in m.unknown:
        m.unknown["cxx11_abi"] = "not given (--cxx11-abi)"

    if not {"cuda_driver", "sm"} <= o.keys():
        detect_nvidia(m)
    if "cuda_driver" in o:
        value = o["cuda_driver"]
        if release(value)[0] >= 100:  # a driver version such as 580.65.06, not a CUDA version
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
                    raise ValueError(f"--sm {item!r} is not a compute capability like 90 or 8.6")
                gpus.append(DetectedGpu(cc))
        m.gpus = gpus
        m.sources["gpus"] = "--sm"
        m.unknown.pop("gpus", None)
        if not gpus:
            m.unknown["gpus"] = "--sm none"
    return m
