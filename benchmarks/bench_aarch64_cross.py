"""Cross-compiling an aarch64 torch CUDA extension on an x86_64 machine. Not a test: run it by hand
and read the times.

    python -m benchmarks.bench_aarch64_cross --root DIR [--cache DIR] [--torch 2.14.1]
        [--archs 90] [--repeat 1] [--no-import] [--no-native] [--json out.json]

(from the repository root, as root or with write access to ``--cache``.) It builds the tinyext
fixture's three units (``add_one.cu``, ``scale.cu``: kernels; ``tinyext.cpp``: the binding) for
Linux aarch64 with this machine's x86_64 nvcc and Debian's cross compiler, links them against
PyPI's aarch64 torch wheel, checks what came out, and imports it under qemu-user:

1. **tools**: nvcc (``$CUDA_HOME``, else ``/usr/local/cuda``), ``aarch64-linux-gnu-g++``
   (``apt-get install g++-aarch64-linux-gnu``), ``qemu-aarch64-static`` (``apt-get install
   qemu-user-static``), and ``--root``, an arm64 Debian root file system holding python3 and its
   headers, made once with (9 min here, most of it dpkg under qemu; needs binfmt_misc with
   qemu-aarch64 registered: apt-get install qemu-user-static binfmt-support, and in a container
   without it ``mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc && update-binfmts
   --enable qemu-aarch64``):

       debootstrap --arch arm64 --variant=minbase --include=python3,libpython3-dev \\
           bookworm /var/tmp/arm64-root http://deb.debian.org/debian

   Its Python (bookworm: 3.11) picks the torch wheel's ``cpXY`` tag.
2. **downloads** (``pip download`` with aarch64 platform tags, into ``--cache``): the torch wheel
   (only unpacked, never installed here), and the aarch64 CUDA pieces for nvcc's version:
   ``nvidia-cuda-runtime`` and ``nvidia-cuda-cccl`` (headers and ``libcudart.so``),
   ``nvidia-cuda-crt`` (``crt/`` headers) and ``nvidia-cuda-nvcc`` (``fatbinary_section.h``).
3. **a cross toolkit** in the cache: nvcc finds its target's headers and libraries in
   ``<its dir>/../targets/<--target-dir>``, so the tree holds a copy of nvcc and its profile,
   links to this toolkit's other tools, ``nvvm`` and ``targets/x86_64-linux``, and
   ``targets/sbsa-linux`` made from the aarch64 wheels. Nothing under the toolkit is changed.
4. **compile**: each unit timed (wall and CPU seconds), with torch's ``BuildExtension`` flags
   (``-std=c++20``, ``COMMON_NVCC_FLAGS``, ``-fPIC``) and the CFLAGS of a manylinux CPython.
   Kernel units: ``nvcc -ccbin aarch64-linux-gnu-g++ -target-dir sbsa-linux``; the binding:
   ``aarch64-linux-gnu-g++`` with the root's Python headers. Unless ``--no-native``, the same
   units are also compiled for x86_64 (this nvcc and g++, this Python's headers) in the same
   rounds, for the ratio. Then the link against the wheel's ``libtorch*``, ``libc10*`` and the
   wheel's ``libcudart``.
5. **checks**: every object and the ``.so`` are ``EM_AARCH64`` (``tools.core.binarch``, and
   ``readelf -h``), cuobjdump lists the requested SASS (the finish step's cuobjdump), the newest
   GLIBC symbol version the ``.so`` needs (a manylinux_2_28 wheel may need 2.28 at most).
6. **import** (unless ``--no-import``): torch and its dependencies unpacked into
   ``<cache>/site-cpXY`` by ``pip install --target`` with aarch64 tags (about 3 GB: cuDNN,
   cuBLAS, NCCL...), then the root's Python under ``qemu-aarch64-static -L ROOT`` imports torch
   and the extension, and calls ``add_one`` on a CPU tensor: the binding must refuse it with its
   own message. Timed. An aarch64 ``proc/cpuinfo`` is written into the root first (see
   ``fake_cpuinfo``: without it ``import torch`` dies of SIGSEGV under qemu).
7. **emulation factor**: ``sum(range(10**7))`` in the same Python version natively (Debian's
   ``/usr/bin/python3.X`` when there, else this one) and in the root's under qemu, best of 3.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path
from typing import Any

from tools import ROOT
from tools.devtools.emulated import CPUINFO
from tools.core.binarch import read_binary
from tools.finish import checks

SRC = ROOT / "tests" / "fixtures" / "tinyext" / "csrc"
KERNEL_UNITS = ("add_one.cu", "scale.cu")
BINDING_UNIT = "tinyext.cpp"
EXT_NAME = "tinyext_cuda"
CROSS_CXX = "aarch64-linux-gnu-g++"
QEMU = "qemu-aarch64-static"
TARGET_DIR = "sbsa-linux"
#: pip accepts only the platform tags it is given: every manylinux tag an aarch64 machine takes.
AARCH64_TAGS = ["manylinux2014_aarch64"] + [f"manylinux_2_{m}_aarch64" for m in range(17, 29)]
#: torch.utils.cpp_extension.COMMON_NVCC_FLAGS (torch 2.14).
COMMON_NVCC_FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                     "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                     "--expt-relaxed-constexpr"]
#: What setuptools passes to every C++ compile with a manylinux CPython (sysconfig CFLAGS).
PY_CFLAGS = ["-fno-strict-overflow", "-Wsign-compare", "-DNDEBUG", "-g", "-O3", "-Wall"]
DEFINES = ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-DTORCH_EXTENSION_NAME={EXT_NAME}",
           "-std=c++20"]
TORCH_LIBS = ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", "-lcudart", "-lc10_cuda",
              "-ltorch_cuda"]

DOWNLOAD_TIMEOUT = 1800
COMPILE_TIMEOUT = 900
IMPORT_TIMEOUT = 900


class Fail(SystemExit):
    """A stop with a paragraph saying what is missing and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(f"bench_aarch64_cross: {message}")


def run(argv: list[str], *, timeout: int, what: str, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` under ``nice``, its output captured; a failure or a time-out stops with both."""
    try:
        proc = subprocess.run(["nice", "-n", "19", *argv], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise Fail(f"{what}: no answer within {timeout} s: {' '.join(argv)}") from None
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip()[-3000:]
        raise Fail(f"{what} exited {proc.returncode}: {' '.join(argv)}\n{tail}")
    return proc


def timed(argv: list[str], *, what: str, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system of the command and its children): on a
    machine shared with other builds the wall time follows their load, the CPU time much less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    run(argv, timeout=COMPILE_TIMEOUT, what=what, env=env)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


# ---- 1. tools ---------------------------------------------------------------------------------

def find_nvcc() -> tuple[Path, str]:
    """The toolkit's nvcc (not a wrapper script) and its full version (``13.0.88``)."""
    home = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")
    nvcc = home / "bin" / "nvcc"
    if not nvcc.is_file() or not (home / "bin" / "nvcc.profile").is_file():
        raise Fail(f"no nvcc with its nvcc.profile in {home}/bin: set CUDA_HOME to the toolkit "
                   "(the directory holding bin/nvcc and targets/x86_64-linux)")
    out = run([str(nvcc), "--version"], timeout=60, what="nvcc --version").stdout
    match = re.search(r"V(\d+\.\d+\.\d+)", out)
    if not match:
        raise Fail(f"can't read nvcc's version from: {out.strip()}")
    return nvcc, match.group(1)


def require_tools(root: Path | None, want_import: bool) -> None:
    if shutil.which(CROSS_CXX) is None:
        raise Fail(f"no {CROSS_CXX} on PATH: apt-get install -y g++-aarch64-linux-gnu "
                   "(Debian/Ubuntu), then run this again")
    if root is None:
        raise Fail("--root is required: an arm64 root file system with python3 and its headers "
                   "(see this module's docstring for the debootstrap command)")
    if want_import and shutil.which(QEMU) is None:
        raise Fail(f"no {QEMU} on PATH: apt-get install -y qemu-user-static (or run with "
                   "--no-import to compile and check without running anything)")


def root_python(root: Path) -> tuple[str, Path, Path]:
    """The root's Python version (``3.11``), its interpreter, and its ``usr/include``: Debian's
    ``pyconfig.h`` includes ``<aarch64-linux-gnu/python3.X/pyconfig.h>`` from there."""
    found = sorted(root.glob("usr/include/python3.*/Python.h"))
    if not found:
        raise Fail(f"{root}: no usr/include/python3.*/Python.h: install libpython3-dev in the "
                   "root (debootstrap --include=python3,libpython3-dev ...)")
    include = found[-1].parent
    version = include.name.removeprefix("python")
    interpreter = root / "usr" / "bin" / f"python{version}"
    if not interpreter.exists():
        raise Fail(f"{root}: headers of Python {version} but no usr/bin/python{version}")
    return version, interpreter, root / "usr" / "include"


# ---- 2. downloads -----------------------------------------------------------------------------

def pip_download(requirement: str, dest: Path, python: str) -> Path:
    """One aarch64 wheel (no dependencies) into ``dest``; returns its path."""
    dest.mkdir(parents=True, exist_ok=True)
    name = re.split(r"[=<>~!]", requirement)[0].replace("-", "_").lower()
    platform_args = [a for tag in AARCH64_TAGS for a in ("--platform", tag)]
    run([sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--only-binary",
         ":all:", *platform_args, "--python-version", python, "--implementation", "cp", "-d",
         str(dest), requirement], timeout=DOWNLOAD_TIMEOUT, what=f"pip download {requirement}")
    pin = requirement.split("==")[1] if "==" in requirement else ""
    wheels = sorted(p for p in dest.glob("*.whl")
                    if p.name.lower().startswith(name + "-") and "aarch64" in p.name
                    and p.name.split("-")[1].startswith(pin.rstrip("*")))
    if not wheels:
        raise Fail(f"pip download {requirement} left no aarch64 wheel in {dest}")
    return wheels[-1]


def unpack(wheel: Path, dest: Path, prefixes: tuple[str, ...]) -> None:
    """The members of ``wheel`` under ``prefixes`` into ``dest`` (once; a marker says done)."""
    marker = dest / f".unpacked-{wheel.name}"
    if marker.exists():
        return
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.filename.startswith(prefixes) and not info.is_dir():
                zf.extract(info, dest)
    marker.touch()


# ---- 3. the cross toolkit ---------------------------------------------------------------------

def cross_toolkit(nvcc: Path, cuda: Path, cache: Path) -> Path:
    """``<cache>/cuda-cross``: nvcc with ``targets/sbsa-linux`` from the aarch64 wheels."""
    home = nvcc.parent.parent
    tree = cache / "cuda-cross"
    if tree.exists():
        shutil.rmtree(tree)
    (tree / "bin").mkdir(parents=True)
    # nvcc.profile: TOP = $(_HERE_)/.., _HERE_ being the directory of the nvcc binary itself
    # (a link resolves to the original), so nvcc is copied and the rest linked.
    shutil.copy2(nvcc, tree / "bin" / "nvcc")
    shutil.copy2(home / "bin" / "nvcc.profile", tree / "bin" / "nvcc.profile")
    for entry in (home / "bin").iterdir():
        if entry.name not in ("nvcc", "nvcc.profile"):
            (tree / "bin" / entry.name).symlink_to(entry.resolve())
    (tree / "nvvm").symlink_to((home / "nvvm").resolve())
    (tree / "targets").mkdir()
    (tree / "targets" / "x86_64-linux").symlink_to((home / "targets" / "x86_64-linux").resolve())
    target = tree / "targets" / TARGET_DIR
    target.mkdir()
    (target / "include").symlink_to(cuda / "nvidia" / "cu13" / "include")
    (target / "lib").mkdir()
    for lib in (cuda / "nvidia" / "cu13" / "lib").iterdir():
        (target / "lib" / lib.name).symlink_to(lib)
    sonames = sorted((target / "lib").glob("libcudart.so.*"))
    if not sonames:
        raise Fail(f"no libcudart.so.N in {cuda}/nvidia/cu13/lib (the nvidia-cuda-runtime wheel)")
    (target / "lib" / "libcudart.so").symlink_to(sonames[0].name)
    return tree


# ---- 5. checks --------------------------------------------------------------------------------

def machine_of(path: Path) -> str:
    with path.open("rb") as fh:
        binary = read_binary(fh.read(4096))
    if binary is None:
        raise Fail(f"{path}: neither ELF nor PE")
    return binary.describe()


def readelf_machine(path: Path) -> str:
    out = run(["readelf", "-h", str(path)], timeout=60, what="readelf -h").stdout
    match = re.search(r"Machine:\s*(.+)", out)
    return match.group(1).strip() if match else "?"


def glibc_needs(path: Path, limit: tuple[int, int] = (2, 28)) -> tuple[str, list[str]]:
    """The newest GLIBC symbol version ``path`` needs, and its symbols newer than ``limit``
    (manylinux_2_28's glibc)."""
    out = run(["readelf", "--dyn-syms", "-W", str(path)], timeout=60, what="readelf").stdout
    found = re.findall(r"UND\s+([^@\s]+)@GLIBC_(\d+)\.(\d+)", out)
    versions = [(int(a), int(b)) for _, a, b in found]
    newer = sorted({f"{name}@GLIBC_{a}.{b}" for name, a, b in found if (int(a), int(b)) > limit})
    newest = ".".join(map(str, max(versions))) if versions else "none"
    return newest, newer


def find_cuobjdump() -> str | None:
    """The finish step's cuobjdump (``nvidia-cuda-cuobjdump``, which `make setup` installs)."""
    try:
        return checks.cuobjdump()
    except checks.VerifyError:
        return None


# ---- the measurement --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, help="an arm64 root file system with python3 and headers")
    ap.add_argument("--cache", type=Path, default=Path("/var/tmp/cuwheels-aarch64-cross"))
    ap.add_argument("--torch", default="2.14.1")
    ap.add_argument("--archs", default="90", help="one or more archs: 90 or 80;90")
    ap.add_argument("--repeat", type=int, default=1, help="compile rounds; each unit's best")
    ap.add_argument("--no-import", action="store_true", help="skip the import under qemu")
    ap.add_argument("--no-native", action="store_true", help="skip the x86_64 compiles")
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args(argv)

    want_import = not args.no_import
    require_tools(args.root, want_import)
    root = args.root.resolve()
    nvcc, nvcc_version = find_nvcc()
    major_minor = ".".join(nvcc_version.split(".")[:2])
    if not nvcc_version.startswith("13."):
        raise Fail(f"nvcc {nvcc_version}: this benchmark knows CUDA 13's wheels (nvidia/cu13/...); "
                   "CUDA 12's lay their files out per package (nvidia/cuda_runtime/...)")
    pyver, interpreter, usr_include = root_python(root)
    cp = "cp" + pyver.replace(".", "")
    cache = args.cache.resolve()
    wheels = cache / "wheels"
    # Only the Python headers, not the root's whole usr/include: the cross compiler keeps its own
    # glibc and libstdc++ headers.
    py_headers = cache / f"python{pyver}-headers"
    if py_headers.exists():
        shutil.rmtree(py_headers)
    for sub in (f"python{pyver}", f"aarch64-linux-gnu/python{pyver}"):
        if not (usr_include / sub).is_dir():
            raise Fail(f"{root}: no usr/include/{sub}: install libpython3-dev in the root")
        shutil.copytree(usr_include / sub, py_headers / sub)
    print(f"nvcc {nvcc_version} ({nvcc}); {CROSS_CXX}; root {root}: Python {pyver}")

    t0 = time.monotonic()
    torch_whl = pip_download(f"torch=={args.torch}", wheels, pyver)
    cuda_wheels = [pip_download(req, wheels, pyver) for req in (
        f"nvidia-cuda-runtime=={major_minor}.*", f"nvidia-cuda-cccl=={major_minor}.*",
        f"nvidia-cuda-crt=={nvcc_version}", f"nvidia-cuda-nvcc=={nvcc_version}")]
    torch_dir = cache / f"torch-{args.torch}-{cp}"
    unpack(torch_whl, torch_dir, ("torch/include/", "torch/lib/"))
    cuda_dir = cache / f"cuda-{nvcc_version}-aarch64"
    for wheel in cuda_wheels:
        # nvidia-cuda-nvcc: only its header; its binaries are aarch64 and of no use here.
        unpack(wheel, cuda_dir, ("nvidia/cu13/include/", "nvidia/cu13/lib/"))
    print(f"downloads and unpacking: {time.monotonic() - t0:.1f} s ({torch_whl.name})")
    tree = cross_toolkit(nvcc, cuda_dir, cache)

    archs = [a for a in re.split(r"[;,\s]+", args.archs) if a]
    gencode = [f for a in archs for f in ("-gencode", f"arch=compute_{a},code=sm_{a}")]
    torch_inc = [f"-I{torch_dir}/torch/include", f"-I{torch_dir}/torch/include/torch/csrc/api/include"]
    out = cache / "build"
    if out.exists():
        shutil.rmtree(out)
    (out / "aarch64").mkdir(parents=True)
    (out / "x86_64").mkdir()

    def nvcc_argv(cross: bool, unit: str, obj: Path) -> list[str]:
        head = ([str(tree / "bin" / "nvcc"), "-ccbin", CROSS_CXX, "-target-dir", TARGET_DIR]
                if cross else [str(nvcc)])
        return [*head, *torch_inc, "-c", str(SRC / unit), "-o", str(obj), *COMMON_NVCC_FLAGS,
                "--compiler-options", "-fPIC", "-O2", *gencode, *DEFINES]

    def cxx_argv(cross: bool, obj: Path) -> list[str]:
        if cross:
            cxx, py_inc = CROSS_CXX, [f"-I{py_headers}/python{pyver}", f"-I{py_headers}"]
            cuda_inc = [f"-I{tree}/targets/{TARGET_DIR}/include"]
        else:
            cxx, py_inc = "g++", [f"-I{sysconfig.get_paths()['include']}"]
            cuda_inc = [f"-I{nvcc.parent.parent}/targets/x86_64-linux/include"]
        return [cxx, *PY_CFLAGS, "-fPIC", *torch_inc, *cuda_inc, *py_inc, "-c",
                str(SRC / BINDING_UNIT), "-o", str(obj), "-O2", *DEFINES]

    units = [*KERNEL_UNITS, BINDING_UNIT]
    targets = ["aarch64"] + ([] if args.no_native else ["x86_64"])
    times: dict[str, dict[str, list[float]]] = {t: {u: [] for u in units} for t in targets}
    cpu_times: dict[str, dict[str, list[float]]] = {t: {u: [] for u in units} for t in targets}
    for round_no in range(1, max(1, args.repeat) + 1):
        for unit in units:
            for target in targets:
                cross = target == "aarch64"
                obj = out / target / (unit.rsplit(".", 1)[0] + ".o")
                argv = (nvcc_argv(cross, unit, obj) if unit.endswith(".cu")
                        else cxx_argv(cross, obj))
                wall, cpu = timed(argv, what=f"{target} compile of {unit}")
                times[target][unit].append(wall)
                cpu_times[target][unit].append(cpu)
                print(f"  round {round_no}: {unit} for {target}: {wall:.1f} s wall, {cpu:.1f} s "
                      "CPU", flush=True)
    so = out / "aarch64" / f"{EXT_NAME}.cpython-{cp[2:]}-aarch64-linux-gnu.so"
    objs = [str(out / "aarch64" / (u.rsplit(".", 1)[0] + ".o")) for u in units]
    link_s, _ = timed([CROSS_CXX, "-shared", *objs, f"-L{torch_dir}/torch/lib",
                    f"-L{tree}/targets/{TARGET_DIR}/lib", *TORCH_LIBS, "-o", str(so)],
                   what="aarch64 link")

    result: dict[str, Any] = {"nvcc": nvcc_version, "torch": args.torch, "python": pyver,
                              "archs": archs, "compile_s": {}, "compile_cpu_s": {},
                              "link_s": round(link_s, 2)}
    for label, table, key in (("wall", times, "compile_s"), ("CPU", cpu_times, "compile_cpu_s")):
        print(f"\ncompile, {label} seconds (best of {max(1, args.repeat)}; nice 19)")
        print(f"  {'unit':<14}" + "".join(f"{t:>10}" for t in targets)
              + ("   aarch64/x86_64" if len(targets) == 2 else ""))
        for unit in units:
            best = {t: min(table[t][unit]) for t in targets}
            result[key][unit] = {t: [round(x, 2) for x in table[t][unit]] for t in targets}
            line = f"  {unit:<14}" + "".join(f"{best[t]:>10.2f}" for t in targets)
            if len(targets) == 2:
                line += f"   {best['aarch64'] / best['x86_64']:.2f}"
            print(line)
    print(f"  link (aarch64): {link_s:.2f} s")

    print("\nchecks")
    checks: dict[str, str] = {}
    for path in [*map(Path, objs), so]:
        header = machine_of(path)
        checks[path.name] = f"{header}; readelf: {readelf_machine(path)}"
        if "aarch64" not in header:
            raise Fail(f"{path} is {header}, not aarch64")
        print(f"  {path.name}: {checks[path.name]}")
    cuobjdump = find_cuobjdump()
    if cuobjdump:
        listed = run([cuobjdump, "--list-elf", str(so)], timeout=120, what="cuobjdump").stdout
        sass = sorted(set(re.findall(r"sm_\d+[af]?", listed)))
        checks["sass"] = ", ".join(sass)
        print(f"  SASS in the .so (cuobjdump): {checks['sass']}")
        missing = [a for a in archs if f"sm_{a}" not in sass]
        if missing:
            raise Fail(f"the .so lacks SASS for {missing}")
    else:
        checks["sass"] = "not checked: no cuobjdump"
        print("  SASS: not checked (no cuobjdump: pip install nvidia-cuda-cuobjdump)")
    newest, newer = glibc_needs(so)
    checks["newest_glibc"] = newest
    checks["glibc_above_2_28"] = ", ".join(newer) or "none"
    print(f"  newest GLIBC symbol version the .so needs: {newest}"
          + (f" (above manylinux_2_28's 2.28: {checks['glibc_above_2_28']})" if newer else ""))
    result["checks"] = checks

    if want_import:
        result.update(import_check(root, interpreter, cache, so, args.torch, pyver))
        result.update(emulation_factor(root, interpreter))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def qemu_argv(root: Path, interpreter: Path) -> list[str]:
    # -L: the loader and every absolute path are looked up in the root first.
    return [QEMU, "-L", str(root), str(interpreter)]


def fake_cpuinfo(root: Path) -> None:
    """qemu-user (Debian 12's 7.2) shows an aarch64 program the host's x86 /proc/cpuinfo; torch's
    cpuinfo library finds no ARM core in it and dereferences NULL while ``import torch`` loads
    ``torch._C`` (SIGSEGV, after xbyak_aarch64's "Can't open MIDR_EL1 sysfs entry"). With ``-L``,
    qemu opens ``<root>/proc/cpuinfo`` first when that exists, so an aarch64 one is put there."""
    proc = root / "proc"
    if os.path.ismount(proc):
        raise Fail(f"{proc} is a mounted proc file system: unmount it (umount {proc}); the "
                   "import under qemu needs a plain file at proc/cpuinfo in the root")
    cpuinfo = proc / "cpuinfo"
    if not cpuinfo.is_file():
        proc.mkdir(exist_ok=True)
        cpuinfo.write_text(CPUINFO)


def import_check(root: Path, interpreter: Path, cache: Path, so: Path, torch: str,
                 pyver: str) -> dict[str, Any]:
    fake_cpuinfo(root)
    site = cache / f"site-cp{pyver.replace('.', '')}"
    marker = site / f".torch-{torch}"
    if not marker.exists():
        t0 = time.monotonic()
        platform_args = [a for tag in AARCH64_TAGS for a in ("--platform", tag)]
        run([sys.executable, "-m", "pip", "install", "--isolated", "--no-compile", "--target",
             str(site), *platform_args, "--python-version", pyver, "--implementation", "cp",
             "--only-binary", ":all:", "--find-links", str(cache / "wheels"), f"torch=={torch}"],
            timeout=DOWNLOAD_TIMEOUT, what="pip install --target (aarch64 torch and its deps)")
        marker.touch()
        print(f"\ntorch {torch} and its dependencies unpacked for aarch64 in "
              f"{time.monotonic() - t0:.0f} s")
    code = ("import time; t=time.monotonic(); import torch; t1=time.monotonic(); "
            f"import {EXT_NAME}; t2=time.monotonic()\n"
            f"try:\n    {EXT_NAME}.add_one(torch.zeros(3))\n"
            "except RuntimeError as e:\n    msg=str(e).splitlines()[0]\n"
            "else:\n    raise SystemExit('add_one accepted a CPU tensor')\n"
            "import platform; print(platform.machine(), torch.__version__, "
            "torch.cuda.is_available(), round(t1-t, 1), round(t2-t1, 2), msg, sep='|')")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{site}:{so.parent}", "HOME": "/tmp"}
    start = time.monotonic()
    proc = run([*qemu_argv(root, interpreter), "-W", "ignore", "-c", code], timeout=IMPORT_TIMEOUT,
               what="the import under qemu", env=env)
    wall = time.monotonic() - start
    machine, version, cuda, torch_s, ext_s, msg = proc.stdout.strip().splitlines()[-1].split("|")
    print(f"\nimport under qemu ({wall:.1f} s in all): platform.machine() {machine}, torch "
          f"{version}, cuda available {cuda}; import torch {torch_s} s, import {EXT_NAME} "
          f"{ext_s} s; add_one(CPU tensor) refused: {msg}")
    return {"import": {"wall_s": round(wall, 1), "machine": machine, "torch": version,
                       "import_torch_s": float(torch_s), "import_ext_s": float(ext_s),
                       "refusal": msg}}


def emulation_factor(root: Path, interpreter: Path) -> dict[str, Any]:
    code = "sum(range(10**7))"

    def best(argv: list[str]) -> float:
        runs = []
        for _ in range(3):
            start = time.monotonic()
            run([*argv, "-c", code], timeout=600, what=f"python -c {code!r}")
            runs.append(time.monotonic() - start)
        return min(runs)

    # The same Python on both sides where this machine has it (Debian's), else this one.
    version = interpreter.name
    native_python = shutil.which(version, path="/usr/bin:/bin") or sys.executable
    native = best([native_python])
    emulated = best(qemu_argv(root, interpreter))
    print(f"\npython -c {code!r} (best of 3): native {native:.2f} s ({native_python}), aarch64 "
          f"under qemu {emulated:.2f} s: x{emulated / native:.1f}")
    return {"emulation": {"native_s": round(native, 2), "qemu_s": round(emulated, 2),
                          "factor": round(emulated / native, 1)}}


if __name__ == "__main__":
    sys.exit(main())
