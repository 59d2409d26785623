"""The doctor: why an installed wheel fails to import here, and what to do about it.

It reproduces the import in a subprocess (or takes the error text given), recognises the usual
failures (an undefined torch symbol, a missing compiled module, GLIBC/GLIBCXX versions, no kernel
image for the GPU, a missing CUDA library) and explains each with what the installed wheel was
built for (its build manifest, else its local label) and this machine's facts.
"""

from __future__ import annotations

import csv
import importlib.metadata as md
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from packaging.utils import canonicalize_name

from tools.core.manifest import MANIFEST_NAME, parse_manifest
from tools.core.symbols import demangle
from tools.core.variant import parse_label, torch_index_url
from .answer import Answer, abi_from_manifest, build_command, select
from .client import Index, IndexReadError
from .detect import Machine, series_or_none
from .gpu import arch_list, arch_problem, module_archs
from .localread import RECORD_LIMIT, dist_headers, dist_text, run_capped


@dataclass
class InstalledDist:
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


def find_installed(package: str) -> InstalledDist | None:
    """The installed distribution ``package`` (its manifest, compiled modules, top-level names)."""
    dist = None
    for name in (package, canonicalize_name(package), canonicalize_name(package).replace("-", "_")):
        try:
            dist = md.distribution(name)
            break
        except md.PackageNotFoundError:
            continue
    if dist is None:
        return None
    # Each file of its metadata read bounded (tools.selector.localread): a FIFO or a file of
    # gigabytes where one belongs is a file this doctor can't read, not a hang.
    headers, _ = dist_headers(dist)
    shown = headers.get("name") or package
    manifest = None
    text, _ = dist_text(dist, MANIFEST_NAME)
    try:
        manifest = parse_manifest(text, f"{shown}'s {MANIFEST_NAME}") if text else None
    except ValueError:
        manifest = None
    record, _ = dist_text(dist, "RECORD", RECORD_LIMIT)
    try:
        files = [row[0] for row in csv.reader((record or "").splitlines()) if row]
    except csv.Error:  # a NUL in it (Python < 3.11), a field over csv's limit
        files = []
    modules = sorted({n for n in (module_name(f) for f in files) if n})
    top = (dist_text(dist, "top_level.txt")[0] or "").split()
    if not top:
        top = sorted({f.split("/")[0] for f in files if f.endswith("/__init__.py") and f.count("/") == 1})
    return InstalledDist(shown, headers.get("version") or "(version unknown)", manifest, modules, top,
                     str(dist.locate_file("")))


_IMPORT = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"


def reproduce_import(inst: InstalledDist, m: Machine) -> str | None:
    """Import torch, the package and its compiled modules in a subprocess; the error text, or None."""
    names = (["torch"] if m.torch else []) + inst.top_level + inst.modules
    proc = run_capped([sys.executable, "-c", _IMPORT, *names], timeout=300)
    if proc is None:
        return f"the import could not be run ({sys.executable} could not be started)"
    if proc.problem:
        return f"the import was stopped: {proc.problem}"
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return "\n".join(lines[-20:])


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


def _built_for(inst: InstalledDist | None) -> tuple[str | None, str | None, bool | None]:
    """(torch series, CUDA, C++ ABI) an installed wheel was built for: manifest, else local label."""
    if inst is None:
        return None, None, None
    if inst.manifest and inst.manifest.get("torch"):
        abi = inst.manifest.get("cxx11_abi")
        return (series_or_none(str(inst.manifest["torch"])), str(inst.manifest.get("cuda") or "") or None,
                abi if isinstance(abi, bool) else None)
    v = parse_label(inst.version.partition("+")[2]) if "+" in inst.version else None
    return (v.torch, v.cuda, v.cxx11_abi) if v else (None, None, None)


def _install_fix(project: str, m: Machine, index: Index | None, answer: Answer | None) -> str:
    """The install command to offer: the fitting wheel, else why none fits, else how to find one."""
    if answer is not None and answer.fits:
        return f"{answer.pip}   (the wheel from {answer.index_path}/simple/)"
    if index is not None and answer is not None:
        helps = "; ".join(answer.advice)
        return (f"no wheel in the index fits this machine ({answer.reason})"
                + (f"; what would help: {helps}" if helps else "")
                + (f"; build one: {answer.build}" if answer.build else ""))
    return (f"python cuwheels-select.pyz {project}   prints the pip command for this machine, from the "
            "project's index (--index names another)")


def _build_fix(project: str, m: Machine, inst: InstalledDist | None, *, archs: list[str] | None = None) -> str:
    """How to build ``project`` here; the installed wheel's manifest says the recipe's ``abi``,
    which the cell id depends on."""
    return build_command(project, m, archs=archs, abi=abi_from_manifest(inst.manifest if inst else None))


def diagnose(error: str, package: str, m: Machine, inst: InstalledDist | None, *,
             index: Index | None = None, answer: Answer | None = None) -> Diagnosis:
    """Explain an import/runtime error of ``package`` on machine ``m`` (installed as ``inst``)."""
    project = canonicalize_name(package)
    have = f"{inst.name} {inst.version}" if inst else project
    fix_install = _install_fix(project, m, index, answer)
    series = series_or_none(m.torch)

    match = re.search(r"undefined symbol:\s*(\S+)", error)
    if match:
        symbol = match.group(1)
        readable = demangle(symbol)
        module = re.search(r"([^/\s:]+\.so)\S*:\s*undefined symbol", error)
        where = f" (in {module.group(1)})" if module else ""
        built, built_cuda, built_abi = _built_for(inst)
        # C functions of torch's stable shim (tools.finish.checks.SHIM_PREFIXES) are torch's too.
        shim_symbol = symbol.startswith(("aoti_torch_", "torch_"))
        torch_symbol = shim_symbol or re.search(r"\b(c10|at|torch|caffe2)::", readable) is not None
        d = Diagnosis("undefined-symbol", "", [f"missing symbol: {readable}{where}", f"mangled: {symbol}"],
                      error=error)
        abi = (inst.manifest or {}).get("abi") if inst else None
        serves = abi.get("serves") if isinstance(abi, dict) and abi.get("torch") == "stable" else None
        if serves and isinstance(serves, list):
            d.summary = (f"{have} is built on torch's stable ABI for torch {', '.join(map(str, serves))}; this "
                         f"environment has torch {m.torch}, which doesn't export {readable.split('(')[0]}")
            d.fixes = [f"install a torch it serves (e.g. pip install \"torch=={serves[0]}.*\"), or the wheel for "
                       f"this torch: {fix_install}"]
        elif not torch_symbol:
            d.summary = (f"{have} needs a symbol that isn't torch's ({readable}): a library it links to is "
                         "missing or a different version, or the build is broken")
            d.fixes = [f"reinstall a binary wheel built for this torch: {fix_install}"]
        elif built and series and built != series:
            d.summary = (f"{have} was built for torch {built}, this environment has torch {m.torch}: "
                         f"torch {series} doesn't export {readable.split('(')[0]}")
            cu = ""
            if built_cuda and "." in built_cuda:
                cu = f" --index-url {torch_index_url(built_cuda)}"
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
                       f"this torch: {_build_fix(project, m, inst)}"]
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
                   "or build it on this machine (a host build links against this glibc): "
                   + _build_fix(project, m, inst),
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


def _diagnose_arch(project: str, have: str, m: Machine, inst: InstalledDist | None, error: str | None,
                   fix_install: str) -> Diagnosis:
    """A "no kernel image" error (or a manifest that misses this GPU) explained with the archs inside."""
    found = ((inst.manifest or {}).get("archs") or {}).get("found") if inst else None
    gpus = ", ".join(f"sm_{g.sm}" + (f" ({g.name})" if g.name else "") for g in m.gpus) or "unknown (pass --sm)"
    details = []
    if found:
        for module, (sass, ptx) in sorted(module_archs(found).items()):
            details.append(f"{module}: SASS for {arch_list(sass)}; PTX for {arch_list(ptx)}")
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
        f"or build for it: {_build_fix(project, m, inst, archs=archs or ['<sm>'])}"])


def doctor(package: str, m: Machine, *, error: str | None = None, index: Index | None = None,
           peek: bool = True) -> Diagnosis:
    """Explain ``error`` (or the error importing ``package`` here) with this machine's facts."""
    inst = find_installed(package)
    answer = None
    if index is not None:
        try:
            answer = select(index, package, m, peek=peek)
        except IndexReadError:
            answer = None
    if error is None:
        if inst is None:
            fix = _install_fix(canonicalize_name(package), m, index, answer)
            return Diagnosis("not-installed", f"{package} is not installed for {sys.executable}", fixes=[fix])
        error = reproduce_import(inst, m)
        if error is None:
            found = ((inst.manifest or {}).get("archs") or {}).get("found")
            if found and m.gpus and arch_problem(found, m.gpus):
                return _diagnose_arch(canonicalize_name(package), f"{inst.name} {inst.version}", m, inst, None,
                                      _install_fix(canonicalize_name(package), m, index, answer))
            built, _, _ = _built_for(inst)
            series = series_or_none(m.torch)
            details = []
            if built and series and built != series:
                details.append(f"built for torch {built}, this is torch {m.torch}: it imports, but may fail later")
            return Diagnosis("ok", f"{inst.name} {inst.version} imports fine here "
                             f"({', '.join(inst.top_level + inst.modules)})", details)
    return diagnose(error, package, m, inst, index=index, answer=answer)
