"""Checks a built wheel must pass before it is published.

Each check answers a question a user would otherwise answer with a crash:

- ``check_tags``: is it a platform wheel at all, and of the cell's platform (Linux x86_64 or
  aarch64, Windows amd64)? (``py3-none-any`` means the CUDA extension was silently skipped.)
- ``abi_check``: does every ``c10::``/``at::``/``torch::`` symbol, and every C symbol of torch's
  stable shim (``aoti_torch_*``, ``torch_*``), that the extensions need exist in the torch they
  will run with? (Otherwise: ``ImportError: undefined symbol`` at import.) This runs without a
  GPU, on the dynamic symbol tables alone. What a recipe's ``abi`` claims beyond that (one build
  for many Pythons or torch series) is checked by tools.abicheck.
- ``cuda_archs`` / ``check_archs``: is there SASS for every GPU architecture we promise?
  (Otherwise: ``no kernel image is available for execution on the device``.)
- ``smoke_test``: does it install next to the right torch in a fresh venv and import?
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from tools.pipeline import venvs as pyenv
from tools.core.binarch import expected_for
from tools.core.errors import ToolchainError, VerifyError
from tools.hostplat import HostOS, current
from tools.core.symbols import demangle_all
from tools.plan.table import arch_key
from tools.core.variant import torch_series

#: Mangled-name prefixes of torch's namespaces: c10::, at::, torch::, caffe2:: (TypeMeta lives
#: there), optionally behind typeinfo/vtable/VTT/typeinfo-name (_ZTI/_ZTV/_ZTT/_ZTS) or a thunk,
#: and the const/volatile/ref qualifiers a member function's nested name may carry.
_TORCH_SYMBOL = re.compile(
    r"_Z(?:T[IVTS]|T[hv](?:n?\d+_)+)?N[rVKRO]*(?:3c10|2at|5torch|6caffe2)")

#: Prefixes of the C names of torch's stable shim: ``aoti_torch_*`` (torch/csrc/inductor/aoti_torch/
#: c/shim.h; the CUDA ones live in libtorch_cuda) and ``torch_*`` (torch/csrc/stable/c/shim.h).
SHIM_PREFIXES = ("aoti_torch_", "torch_")

#: The libraries whose exports an extension's torch symbols must resolve against.
TORCH_LIBRARY_GLOBS = ("libtorch*.so*", "libc10*.so*", "libcaffe2*.so*", "libshm*.so*")

_SHN_UNDEF = 0
_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE = 1, 2, 10
_STV_DEFAULT, _STV_PROTECTED = 0, 3
#: The Windows platforms this pipeline builds for (torch's CUDA wheels for Windows are amd64 only).
WINDOWS_PLATFORMS = ("win_amd64",)
#: How many unresolved names an error message lists before "... and N more".
_SHOWN = 10


def check_tags(wheel: Path, *, platform: str | None = None) -> tuple[str, ...]:
    """The platform tags of ``wheel`` (from its file name); VerifyError unless they are tags of a
    platform this pipeline builds (Linux, Windows amd64) and, given the cell's ``platform``
    (``linux_x86_64``, ``linux_aarch64``, ``win_amd64``), tags of that one.

    >>> check_tags(Path("x-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"))
    ('manylinux_2_28_x86_64',)
    """
    try:
        _, _, _, tags = parse_wheel_filename(Path(wheel).name)
    except InvalidWheelFilename as exc:
        raise VerifyError(f"{Path(wheel).name!r} is not a wheel file name: {exc}") from None
    platforms = tuple(sorted({tag.platform for tag in tags}))
    if platforms == ("any",):
        raise VerifyError(
            f"{Path(wheel).name} is a pure-Python wheel: py3-none-any ships no kernels: the "
            "build skipped the CUDA extension",
            hint="check FORCE_BUILD/SKIP_CUDA_BUILD env and that nvcc was found")
    wrong = [p for p in platforms
             if not p.startswith(("linux_", "manylinux", "musllinux_")) and p not in WINDOWS_PLATFORMS]
    if wrong:
        raise VerifyError(
            f"{Path(wheel).name} has platform tag(s) {', '.join(wrong)}, of no platform this "
            "pipeline builds: CUDA torch extension wheels from it are Linux (x86_64, aarch64) "
            f"or Windows ({', '.join(WINDOWS_PLATFORMS)})",
            hint="build on Linux (the host backend or a manylinux container) or a Windows runner")
    if platform is not None:
        other = [p for p in platforms if expected_for(p) != expected_for(platform)]
        if other:
            raise VerifyError(
                f"{Path(wheel).name} is tagged {', '.join(other)}, but its cell builds for "
                f"{platform}: a wheel is published only for the platform it was planned for",
                hint="build the cell on its own platform's runner or image (the build ran "
                     "somewhere else)")
    return platforms


def _is_elf(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(4) == b"\x7fELF"


def extension_modules(root: Path) -> list[Path]:
    """The compiled ``*.so`` modules in the unpacked wheel at ``root``, sorted.

    Every ELF file named ``*.so`` counts (a torch op library loaded with
    ``torch.ops.load_library`` has no ``PyInit_`` but needs the same checks), except libraries
    auditwheel grafted into ``<package>.libs/``: those are not ours to check.
    """
    found = []
    for path in Path(root).rglob("*.so"):
        rel = path.relative_to(root)
        if any(part.endswith(".libs") for part in rel.parts[:-1]):
            continue
        if path.is_file() and not path.is_symlink() and _is_elf(path):
            found.append(path)
    return sorted(found)


@functools.lru_cache(maxsize=64)
def _dynamic_symbols(path: str, size: int, mtime_ns: int) -> tuple[frozenset[str], frozenset[str]]:
    """(defined and exported, undefined and strong) dynamic symbol names of one ELF file.

    pyelftools finds the sections; the symbol records are unpacked in bulk, because its
    per-symbol objects take seconds for libtorch's ~100k symbols. ``size``/``mtime_ns`` only key
    the cache.
    """
    try:
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            dynsym = elf.get_section_by_name(".dynsym")
            if dynsym is None:
                return frozenset(), frozenset()
            strtab = elf.get_section(dynsym["sh_link"]).data()
            records = dynsym.data()
            order = "<" if elf.little_endian else ">"
            if elf.elfclass == 64:
                fmt, fields = f"{order}IBBHQQ", (0, 1, 2, 3)
            else:
                fmt, fields = f"{order}IIIBBH", (0, 3, 4, 5)
    except (ELFError, OSError) as exc:
        raise VerifyError(f"{path} is not a readable ELF file: {exc}") from None
    defined, undefined = set(), set()
    i_name, i_info, i_other, i_shndx = fields
    whole = len(records) - len(records) % struct.calcsize(fmt)
    for record in struct.iter_unpack(fmt, records[:whole]):
        name_off = record[i_name]
        if not name_off:
            continue
        name = strtab[name_off:strtab.index(b"\0", name_off)].decode("utf-8", "replace")
        bind, visibility = record[i_info] >> 4, record[i_other] & 3
        if record[i_shndx] == _SHN_UNDEF:
            # A weak undefined symbol may stay unresolved: the loader doesn't fail on it.
            if bind != _STB_WEAK:
                undefined.add(name)
        elif (bind in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE)
              and visibility in (_STV_DEFAULT, _STV_PROTECTED)):
            defined.add(name)
    return frozenset(defined), frozenset(undefined)


def _symbols(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    stat = path.stat()
    return _dynamic_symbols(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


def dynamic_symbols(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(exported, strong undefined) dynamic symbol names of the ELF file ``path`` (cached)."""
    return _symbols(Path(path))


def is_torch_symbol(name: str) -> bool:
    """True for a mangled name in torch's namespaces (c10::, at::, torch::, caffe2::).

    >>> is_torch_symbol("_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb")
    True
    >>> is_torch_symbol("_ZNSt6vectorIiSaIiEED1Ev")
    False
    """
    return _TORCH_SYMBOL.match(name) is not None


def is_shim_symbol(name: str) -> bool:
    """True for a C name of torch's stable shim (an unmangled ``aoti_torch_*`` or ``torch_*``).

    >>> is_shim_symbol("aoti_torch_get_sizes"), is_shim_symbol("torch_library_impl")
    (True, True)
    >>> is_shim_symbol("_ZN3c1019UndefinedTensorImpl10_singletonE")
    False
    """
    return not name.startswith("_Z") and name.startswith(SHIM_PREFIXES)


def undefined_torch_symbols(so: Path) -> set[str]:
    """The torch symbols ``so`` needs from other libraries (strong, undefined): mangled names in
    torch's namespaces and the C names of its stable shim."""
    return {name for name in _symbols(Path(so))[1] if is_torch_symbol(name) or is_shim_symbol(name)}


def torch_libraries(lib_dir: Path) -> list[Path]:
    """torch's own shared libraries in ``lib_dir`` (a ``site-packages/torch/lib``)."""
    found = {p for pattern in TORCH_LIBRARY_GLOBS for p in Path(lib_dir).glob(pattern)
             if p.is_file() and _is_elf(p)}
    return sorted(found)


def exported_symbols(lib_dir: Path) -> set[str]:
    """Every dynamic symbol defined and exported by torch's libraries in ``lib_dir``."""
    libraries = torch_libraries(lib_dir)
    if not libraries:
        raise VerifyError(f"no torch libraries (libtorch*.so, libc10*.so) in {lib_dir}",
                          hint="pass the torch/lib directory of an installed torch")
    exported: set[str] = set()
    for lib in libraries:
        exported |= _symbols(lib)[0]
    return exported


def demangle(names: list[str]) -> list[str]:
    """C++ names for mangled ``names`` (same order), via c++filt; unchanged without it."""
    return demangle_all(names)


@dataclass(frozen=True)
class AbiReport:
    """Result of an ABI check.

    ``checked`` counts the torch symbols looked up, summed over modules; ``unresolved`` maps a
    module's file name to the demangled names torch doesn't export (modules with none are absent).
    """

    checked: int
    unresolved: dict[str, list[str]]


def abi_report(modules: list[Path], torch_lib_dir: Path) -> AbiReport:
    """Look up every undefined torch symbol of ``modules`` in ``torch_lib_dir``; never raises
    for unresolved symbols (``abi_check`` does)."""
    exported = exported_symbols(torch_lib_dir)
    checked, unresolved = 0, {}
    for module in modules:
        needed = undefined_torch_symbols(module)
        checked += len(needed)
        missing = sorted(needed - exported)
        if missing:
            unresolved[Path(module).name] = sorted(demangle(missing))
    return AbiReport(checked, unresolved)


def abi_check(modules: list[Path], torch_lib_dir: Path, *, torch_version: str) -> AbiReport:
    """Check that torch ``torch_version`` (its libraries in ``torch_lib_dir``) exports every
    torch symbol ``modules`` use; VerifyError naming the missing ones otherwise."""
    if not modules:
        raise VerifyError("no extension modules to check",
                          hint="the wheel has no compiled *.so: check the build log")
    report = abi_report(modules, torch_lib_dir)
    if report.unresolved:
        total = sum(len(names) for names in report.unresolved.values())
        lines = [f"  {module}: {name}" for module, names in sorted(report.unresolved.items())
                 for name in names]
        more = f"\n  ... and {len(lines) - _SHOWN} more" if len(lines) > _SHOWN else ""
        series = _series(torch_version)
        raise VerifyError(
            f"{total} of {report.checked} torch symbols the extension needs are not exported "
            f"by torch {torch_version} ({torch_lib_dir}): it was built against a different "
            f"torch than {torch_version}; importing it would fail with 'undefined symbol':\n"
            + "\n".join(lines[:_SHOWN]) + more,
            hint=f"build it against torch {torch_version} (the cell's torch; the build "
                 f"environment had another); users: pair a wheel built for torch {series} "
                 f"with torch=={series}.*")
    return report


def _series(version: str) -> str:
    try:
        return torch_series(version)
    except ValueError:
        return version


@dataclass(frozen=True)
class ArchReport:
    """GPU code in one module: SASS (``sm_XX`` cubins) and PTX, as arch strings ("90", "100a")."""

    sass: tuple[str, ...]
    ptx: tuple[str, ...]

    @property
    def has_device_code(self) -> bool:
        """True when the module carries any SASS or PTX."""
        return bool(self.sass or self.ptx)


def cuobjdump(*, host: HostOS = current()) -> str:
    """The cuobjdump binary: from the ``nvidia-cuda-cuobjdump`` package
    (``nvidia/cu13/bin/cuobjdump``, ``cuobjdump.exe`` in its Windows wheel), else PATH's."""
    spec = importlib.util.find_spec("nvidia")
    name = host.exe_name("cuobjdump")
    for base in (spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(base).glob(f"*/bin/{name}")):
            if os.access(candidate, os.X_OK):
                return str(candidate)
    found = shutil.which("cuobjdump")
    if found:
        return found
    raise VerifyError("cuobjdump is not installed (the CUDA toolkit here doesn't ship it)",
                      hint="pip install nvidia-cuda-cuobjdump (`make setup` does)")


_CUOBJDUMP_ENTRY = re.compile(r"\.sm_(\d+[a-z]?)\.(?:cubin|ptx)\s*$")


def _cuobjdump_list(module: Path, what: str) -> list[str]:
    proc = subprocess.run([cuobjdump(), f"--list-{what}", str(module)], capture_output=True,
                          text=True, timeout=300)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        # Both are answers, not failures: no fatbin at all, or a fatbin without PTX.
        if "does not contain device code" in output or "No PTX file found" in output:
            return []
        raise VerifyError(f"cuobjdump --list-{what} {module} failed: {output.strip()}")
    archs = []
    for line in proc.stdout.splitlines():
        if m := _CUOBJDUMP_ENTRY.search(line):
            archs.append(m.group(1))
    return archs


def cuda_archs(module: Path) -> ArchReport:
    """The SASS and PTX archs embedded in ``module`` (empty for a module without device code)."""
    sass = tuple(sorted(set(_cuobjdump_list(module, "elf")), key=arch_key))
    ptx = tuple(sorted(set(_cuobjdump_list(module, "ptx")), key=arch_key))
    return ArchReport(sass, ptx)


def check_archs(found: dict[str, ArchReport], requested: tuple[str, ...]) -> None:
    """VerifyError unless every module with device code has SASS for every ``requested`` arch.

    PTX doesn't count: a GPU whose arch has no SASS JIT-compiles PTX at first use (minutes for
    big kernels) or, for arch-specific targets like ``90a``, can't run it at all.
    """
    with_code = {name: report for name, report in found.items() if report.has_device_code}
    if not with_code:
        raise VerifyError(
            f"no module has GPU code ({', '.join(sorted(found)) or 'no modules'}): the build "
            "compiled no CUDA kernels",
            hint="check that the arch list reached nvcc (the recipe's arch env var) and that "
                 "the build didn't fall back to a CPU-only extension")
    missing = [(name, arch) for name, report in sorted(with_code.items())
               for arch in requested if arch not in report.sass]
    if missing:
        lines = [f"  {name}: no sm_{arch} (has {', '.join(with_code[name].sass) or 'no SASS'})"
                 for name, arch in missing]
        archs = ", ".join(f"sm_{a}" for a in sorted({a for _, a in missing}, key=arch_key))
        raise VerifyError(
            "requested GPU archs missing from the built modules:\n" + "\n".join(lines)
            + f"\n  users with a {archs} GPU would get 'no kernel image is available for "
              "execution on the device'",
            hint="check that the recipe's arch env var reaches the build and that the package "
                 "honours it (a hard-coded arch list needs a patch)")


#: The import smoke test, in one line without single quotes or braces: it runs as an argv
#: entry, and shell-quoted inside cibuildwheel's test command (which formats braces). argv: the
#: torch release the cell needs (a torch other than that, e.g. one pip swapped in for the wheel's
#: pin, fails the assert; empty: any), then the modules to import, in order.
_SMOKE_SCRIPT = (
    "import importlib, sys, torch; "
    "print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, flush=True); "
    "assert torch.__version__.startswith(sys.argv[1]), (torch.__version__, sys.argv[1]); "
    "[print(\"imported\", m, \"from\", importlib.import_module(m).__file__, flush=True) "
    "for m in sys.argv[2:]]")


def smoke_argv(python: str, torch_version: str, imports: tuple[str, ...] | list[str]
               ) -> list[str]:
    """The import smoke test as a command for ``python``: import torch (checking it is
    ``torch_version``), then each of ``imports``, printing where each came from. The host's
    verify step, the container's test command and the demo all run this one script."""
    return [python, "-c", _SMOKE_SCRIPT, torch_version, *imports]


def smoke_test(wheel: Path, *, python: str, torch_requirement: str, imports: tuple[str, ...],
               workdir: Path, torch_version: str = "",
               sources: pyenv.PackageSources = pyenv.PackageSources(),
               extra_wheels: tuple[Path, ...] = ()) -> float:
    """Install ``wheel`` with ``torch_requirement`` (from ``sources``; and ``extra_wheels``: the
    wheels of the cells it needs) into a fresh Python ``python`` venv under ``workdir``, import
    torch (``torch_version``, when given) then each of ``imports``; return the step's wall
    seconds.

    Both are installed in one resolution, so a wheel pinning another torch fails here instead
    of silently swapping torch. The imports run from an empty directory, so a source tree
    can't shadow the installed package.
    """
    start = time.monotonic()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    venv_python = pyenv.create_venv(smoke_venv(workdir), python)
    log = workdir / "smoke-install.log"
    try:
        pyenv.install(venv_python, [torch_requirement, str(Path(wheel).resolve()),
                                    *(str(Path(w).resolve()) for w in extra_wheels)],
                      index_url=sources.index_url,
                      extra_index_urls=tuple(sources.extra_index_urls),
                      find_links=tuple(Path(p) for p in sources.find_links),
                      offline=sources.offline, log=log,
                      what=f"{Path(wheel).name} with {torch_requirement}")
    except ToolchainError as exc:
        if "No solution found" not in exc.message:
            raise  # the network or the wheelhouse, not the wheel
        raise VerifyError(
            f"{Path(wheel).name} can't be installed with {torch_requirement}: {exc.message}",
            hint="the wheel's Requires-Dist conflicts with the cell's torch: check the pin "
                 "the pipeline wrote into its metadata") from None
    _smoke_import(str(venv_python), torch_version, imports, workdir, torch_requirement)
    return time.monotonic() - start


def smoke_venv(workdir: Path) -> Path:
    """The smoke test's venv under ``workdir`` (the kernel check runs in it afterwards)."""
    return Path(workdir) / "smoke-venv"


def smoke_test_existing(wheel: Path, *, python: Path, torch_series: str,
                        imports: tuple[str, ...], workdir: Path,
                        extra_wheels: tuple[Path, ...] = ()) -> tuple[float, Path]:
    """The smoke test for a build against an existing interpreter (``--interpreter``): the wheel
    (and ``extra_wheels``, those of the cells it needs) is
    installed, without dependencies and offline, into ``<workdir>/site``, which goes first on
    ``python``'s path; then torch (``torch_series``.x, that environment's own) and each of
    ``imports`` are imported. Nothing is installed into the environment itself. Returns the
    wall seconds and the directory holding the installed wheel.
    """
    start = time.monotonic()
    workdir = Path(workdir)
    site = workdir / "site"
    if site.exists():
        shutil.rmtree(site)
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [pyenv.uv_bin(), "pip", "install", "--quiet", "--offline", "--no-index", "--no-deps",
           "--python", str(python), "--target", str(site), str(Path(wheel).resolve()),
           *(str(Path(w).resolve()) for w in extra_wheels)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
    (workdir / "smoke-install.log").write_text(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0:
        raise VerifyError(f"{Path(wheel).name} could not be unpacked for {python}: "
                          f"{proc.stderr.strip()[-800:]}",
                          hint="the wheel's tags must fit that interpreter")
    _smoke_import(str(python), f"{torch_series}.", imports, workdir, f"torch {torch_series}.x",
                  pythonpath=(site,))
    return time.monotonic() - start, site


def _smoke_import(python: str, torch_version: str, imports: tuple[str, ...], workdir: Path,
                  torch_requirement: str, *, pythonpath: tuple[Path, ...] = ()) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    with tempfile.TemporaryDirectory(prefix="smoke-cwd-", dir=workdir) as empty:
        proc = subprocess.run(smoke_argv(python, torch_version, imports),
                              capture_output=True, text=True, cwd=empty, env=env, timeout=600)
    (workdir / "smoke-import.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        done = [line.split()[1] for line in proc.stdout.splitlines()
                if line.startswith("imported ")]
        failed = "torch"
        if "AssertionError" in proc.stderr:
            failed = f"torch {torch_version} (another torch is installed)"
        elif any(line.startswith("torch ") for line in proc.stdout.splitlines()):
            failed = next((name for name in imports if name not in done), "?")
        hint = ("an 'undefined symbol' means the wheel was built against another torch: run "
                "the ABI check" if "undefined symbol" in proc.stderr else
                "check the recipe's imports and that the wheel ships those modules")
        where = f"with {python} and" if pythonpath else "in a fresh venv with"
        raise VerifyError(f"smoke test: importing {failed} failed {where} "
                          f"{torch_requirement}:\n{tail}", hint=hint)


@dataclass(frozen=True)
class StaticReport:
    """The static checks of one wheel: its platform tags, its ABI check against one torch and
    the GPU code of each extension module (by file name)."""

    platforms: tuple[str, ...]
    abi: AbiReport
    archs: dict[str, ArchReport]


def check_wheel(wheel: Path, *, torch_lib: Path, torch_version: str,
                archs: tuple[str, ...] = ()) -> StaticReport:
    """The static checks (tags, ABI, archs) on one wheel; VerifyError for the first that fails.

    ``archs``, when given, must each have SASS in every module with GPU code. The smoke test
    needs the build's cell and is not among them.
    """
    platforms = check_tags(wheel)
    with tempfile.TemporaryDirectory(prefix="verify-") as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp)
        modules = extension_modules(Path(tmp))
        report = abi_check(modules, torch_lib, torch_version=torch_version)
        found = {module.name: cuda_archs(module) for module in modules}
    if archs:
        check_archs(found, tuple(archs))
    return StaticReport(platforms, report, found)
