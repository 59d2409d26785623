"""The finish step for Windows wheels: ``delvewheel repair`` with torch's DLLs excluded, and the
import check that stands in for the ABI check.

**Repair.** delvewheel is to Windows what auditwheel is to Linux: it copies the DLLs a ``.pyd``
needs into ``<package>.libs/`` (names mangled, so two wheels' copies can't clash) and patches the
package to add that directory to the DLL search path. A torch extension must not get copies of
torch's DLLs or of the CUDA libraries torch ships in ``torch/lib`` (a second ``c10.dll`` beside the
one torch loaded is a second runtime), so they are excluded (TORCH_DLL_EXCLUDES), as
tools.finish.auditwheel_repair excludes their ``.so`` twins. Python's own DLL and Windows' are never vendored
(delvewheel's own lists); the MSVC C++ runtime (``msvcp140*.dll``) is excluded too: torch's DLLs
import it, so it is loaded before any extension is.

**The import check** (``check_imports``). torch exports its C++ API from its DLLs under MSVC's
decorated names, and an extension imports them by those names; whether each one resolves could be
checked against torch's DLLs' export tables the way the Linux check reads ``.dynsym``, but only
with torch's Windows DLLs at hand, and none ran here. What is checked: every DLL each ``.pyd`` and
vendored DLL imports is vendored in the wheel, or torch's or the CUDA runtime's (from torch's
``torch/lib``), or Python's, or the MSVC runtime, or part of Windows. Anything else would fail to
load on a user's machine with "DLL load failed while importing".

No Windows build has run in this project: the tests use PE files made byte by byte
(tests/fixtures/binaries/make_binaries.py) and the real delvewheel, which runs on Linux.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tools.core.errors import RepairError, ToolchainError, VerifyError
from .peimports import read_imports

#: DLL names (fnmatch, case-insensitive as Windows is) that torch's ``torch/lib`` provides, or
#: that torch's DLLs load before any extension: never vendored, always allowed. torch's own
#: names were read from PyPI's torch 2.14.0 win_amd64 wheel (a CPU build: c10, torch, torch_cpu,
#: torch_python, torch_global_deps, shm, uv, libiomp5md, libiompstubs5md); the CUDA ones are
#: those of PyTorch's own CUDA index builds (c10_cuda, torch_cuda, caffe2_nvrtc and the CUDA
#: runtime libraries its nvidia components install, named <lib>64_<major>.dll), which are not on
#: PyPI: the patterns cover every CUDA major.
TORCH_DLL_EXCLUDES: tuple[str, ...] = (
    "c10.dll", "c10_cuda.dll",                 # torch's core library and its CUDA part
    "torch.dll", "torch_cpu.dll", "torch_cuda.dll", "torch_python.dll", "torch_global_deps.dll",
    "shm.dll", "uv.dll", "caffe2_nvrtc.dll",   # torch's helpers in torch/lib
    "libiomp5md.dll", "libiompstubs5md.dll",   # the OpenMP runtime torch ships
    "cudart64_*.dll",                          # CUDA runtime
    "cublas64_*.dll", "cublaslt64_*.dll",      # cuBLAS, cuBLASLt
    "cudnn*64_*.dll",                          # cuDNN and its sub-libraries
    "cufft64_*.dll", "cufftw64_*.dll",         # cuFFT
    "curand64_*.dll", "cusolver64_*.dll", "cusolvermg64_*.dll", "cusparse64_*.dll",
    "nvrtc64_*.dll", "nvrtc-builtins64_*.dll", "nvjitlink_*.dll",  # runtime compilation
    "cupti64_*.dll", "nvtoolsext64_*.dll",     # profiling, NVTX
    "nvcuda.dll",                              # the driver: comes with the machine
    "msvcp140*.dll",                           # MSVC C++ runtime: torch's DLLs load it first
)


@dataclass(frozen=True)
class WindowsRepair:
    """A repaired Windows wheel, its sizes and the command that ran."""

    wheel: Path
    size_before: int
    size_after: int
    command: list[str]


def delvewheel_command(wheel: Path, wheel_dir: Path, *, add_paths: tuple[Path, ...] = (),
                       extra_excludes: tuple[str, ...] = ()) -> list[str]:
    """The ``delvewheel repair`` command line. Its lists are ``os.pathsep``-separated (``;`` on
    Windows, ``:`` elsewhere), so one ``--exclude`` per name keeps the command the same on both."""
    command = [sys.executable, "-m", "delvewheel", "repair", "--wheel-dir", str(wheel_dir)]
    for name in (*TORCH_DLL_EXCLUDES, *extra_excludes):
        command += ["--exclude", name]
    for path in add_paths:
        command += ["--add-path", str(path)]
    command.append(str(wheel))
    return command


def repair_windows_wheel(wheel: Path, out_dir: Path, *, add_paths: tuple[Path, ...] = (),
                         extra_excludes: tuple[str, ...] = (), log: Path | None = None
                         ) -> WindowsRepair:
    """Run ``delvewheel repair`` on the Windows ``wheel``, writing the repaired wheel into
    ``out_dir``; ``add_paths``: directories to find the DLLs to vendor in (the CUDA toolkit's
    ``bin`` for a library torch doesn't ship). RepairError with delvewheel's words when it fails
    (a DLL it can't find: vendor it from ``add_paths`` or, if torch provides it, exclude it)."""
    wheel = Path(wheel).resolve()
    if not wheel.is_file():
        raise RepairError(f"no wheel at {wheel}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="repair-", dir=out_dir) as staging:
        command = delvewheel_command(wheel, Path(staging), add_paths=add_paths,
                                     extra_excludes=extra_excludes)
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=1800,
                                  env={**os.environ, "PYTHONUTF8": "1"})
        except FileNotFoundError:
            raise ToolchainError("python not found to run delvewheel") from None
        output = (proc.stdout + proc.stderr).strip()
        if log is not None:
            with Path(log).open("a") as fh:
                fh.write(f"$ {' '.join(command)}\n{output}\n")
        if proc.returncode != 0:
            tail = "\n".join(output.splitlines()[-10:])
            hint = ("make setup (delvewheel is a pinned dependency of the farm)"
                    if "No module named delvewheel" in output else
                    "a DLL the extension imports was not found: if torch or the driver provides "
                    "it, add it to the excludes (extra_excludes); otherwise pass the directory "
                    "holding it (add_paths)" if "Unable to find library" in output else
                    "see delvewheel's output above (and the log)")
            raise RepairError(f"delvewheel repair of {wheel.name} failed:\n{tail}", hint=hint)
        written = sorted(Path(staging).glob("*.whl"))
        if len(written) != 1:
            raise RepairError(f"delvewheel repair of {wheel.name} wrote {len(written)} wheels, "
                              "expected one")
        target = out_dir / written[0].name
        shutil.move(str(written[0]), target)
    return WindowsRepair(target, wheel.stat().st_size, target.stat().st_size, command)


def _delvewheel_lists():
    try:
        from delvewheel import _dll_list
    except ImportError:
        raise ToolchainError("delvewheel is not installed",
                             hint="make setup (delvewheel is a pinned dependency of the farm)") from None
    return _dll_list


#: Python's own DLLs: ``python3.dll`` (the limited API) and ``python3XY.dll``.
_PYTHON_DLL = re.compile(r"python3\d*t?\.dll")


def allowed_reason(dll: str) -> str | None:
    """Why a ``.pyd`` may import ``dll`` without vendoring it (``torch``, ``python``,
    ``windows``), or None. Windows' DLLs are delvewheel's list of those on every Windows 7 SP1
    (and later) amd64 machine, with the API sets (``api-ms-win-*``) and the MSVC runtime
    Python itself ships (``vcruntime140*.dll``)."""
    name = dll.lower()
    if any(fnmatch.fnmatch(name, pattern) for pattern in TORCH_DLL_EXCLUDES):
        return "torch"
    if _PYTHON_DLL.fullmatch(name):
        return "python"
    lists = _delvewheel_lists()
    system = lists.ignore_names[lists.MachineType.AMD64]
    if (name in system or name.startswith(("api-ms-win-", "ext-ms-win-"))
            or name in ("vcruntime140.dll", "vcruntime140_1.dll", "ucrtbase.dll")):
        return "windows"
    return None


@dataclass(frozen=True)
class ImportReport:
    """Per PE member of the wheel: each DLL it imports and why it may (``vendored``, ``torch``,
    ``python``, ``windows``)."""

    imports: dict[str, dict[str, str]]


def check_imports(wheel: Path) -> ImportReport:
    """Read the import table of every ``.pyd`` and ``.dll`` in the Windows ``wheel``; VerifyError
    naming the wheel, the member and each DLL it imports that is neither vendored in the wheel
    nor torch's, Python's or Windows' (allowed_reason). Also VerifyError for a wheel with no
    ``.pyd`` (the extension was not built)."""
    wheel = Path(wheel)
    report: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if n.lower().endswith((".pyd", ".dll"))]
        if not any(n.lower().endswith(".pyd") for n in members):
            raise VerifyError(f"{wheel.name} holds no .pyd extension module",
                              hint="the package's build skipped its CUDA extension: check the "
                                   "recipe's FORCE_BUILD/SKIP_CUDA_BUILD env and that nvcc was found")
        vendored = {n.rpartition("/")[2].lower() for n in members}
        for member in members:
            imports = read_imports(zf.read(member), f"{wheel.name}: {member}")
            reasons: dict[str, str] = {}
            for dll in imports.all_dlls():
                why = "vendored" if dll.lower() in vendored else allowed_reason(dll)
                if why is None:
                    problems.append(f"{member} imports {dll}, which is neither in the wheel nor "
                                    "torch's, Python's or Windows'")
                else:
                    reasons[dll] = why
            report[member] = reasons
    if problems:
        raise VerifyError(f"{wheel.name}: {len(problems)} DLL import(s) would fail to load "
                          "('DLL load failed while importing'):\n  " + "\n  ".join(problems[:10]),
                          hint="repair the wheel with delvewheel (tools.finish.winrepair) so it "
                               "vendors the DLL, or, if torch or the driver provides it, add it "
                               "to TORCH_DLL_EXCLUDES")
    return ImportReport(report)


#: What the manifest says in place of the ABI check for a Windows wheel.
WINDOWS_ABI_NOTE = ("not possible on Windows: torch exports its C++ API under MSVC-decorated "
                    "names from DLLs not at hand where the wheel is checked; checked instead: "
                    "every DLL each .pyd imports is vendored, torch's, Python's or Windows'")
