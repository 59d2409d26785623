"""ABI kinds: check that a wheel's binaries depend on no more than its recipe's ``abi`` claims.

A recipe's ``abi`` (tools.recipe) decides how many builds serve the matrix; this module makes sure
the binaries live up to it, from their dynamic symbol tables alone (no GPU, no import):

- ``python: none`` -- no extension needs a ``Py*``/``_Py*`` symbol (the Python C API), so one
  build loads in every interpreter.
- ``python: abi3`` -- abi3audit (PyPI; it reads the wheel offline) finds no symbol outside the
  limited API of the wheel's ``cpXY-abi3`` tag.
- ``torch: stable`` -- the only torch symbols an extension needs are torch's stable C shim
  (``aoti_torch_*``, ``torch_*``), and every one is exported by **each** torch series the wheel
  is listed for, and by ``torch_from``. Those exports come from small committed lists,
  ``recipes/torch-shim/torch-<series>.json``, one per torch release, each naming the wheel it was
  read from (its sha256 and URL): a check needs no torch installed. ``python -m tools.abicheck
  extract URL`` makes a list from a registry wheel with HTTP range requests on the zip members
  that hold the shim (``torch/lib/libtorch_cpu.so``, ``libtorch_cuda.so``, ``libtorch.so``),
  not the whole wheel.

``python -m tools.abicheck check WHEEL`` lists a wheel's shim symbols and the torch series (of the
committed lists) it loads with.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools import RECIPES_DIR
from tools.core.errors import VerifyError
from tools.core.rangeread import RangeReader, RangeUnsupported
from tools.plan.table import version_key
from .checks import demangle, dynamic_symbols, extension_modules, is_shim_symbol, is_torch_symbol

#: Where the committed shim lists live, one JSON file per torch series.
SHIM_DIR = RECIPES_DIR / "torch-shim"
SHIM_SCHEMA = 1
#: Prefixes of the Python C API's symbols (``PyLong_FromLong``, ``_Py_Dealloc``...).
PYTHON_PREFIXES = ("Py", "_Py")
#: The libraries of a torch wheel that define its shim; the others export none of it (measured
#: on torch 2.13.0: libtorch_python's one ``torch_c_dynamo_eval_frame_init`` is no shim function).
SHIM_LIBRARIES = ("libtorch_cpu.so", "libtorch_cuda.so", "libtorch.so")
#: How many names an error message lists before "... and N more".
_SHOWN = 12
#: Bytes fetched per HTTP range request: zipfile reads in small pieces.
_RANGE_BLOCK = 16 << 20


def is_python_symbol(name: str) -> bool:
    """True for a symbol of the Python C API.

    >>> is_python_symbol("PyLong_FromLong"), is_python_symbol("_Py_Dealloc"), is_python_symbol("memcpy")
    (True, True, False)
    """
    return name.startswith(PYTHON_PREFIXES)


@dataclass(frozen=True)
class ShimList:
    """The shim symbols one torch release exports, per library, and where they were read."""

    torch: str
    source: dict[str, Any]
    libraries: dict[str, tuple[str, ...]]

    @property
    def series(self) -> str:
        """``"2.13.0"`` -> ``"2.13"``."""
        return ".".join(self.torch.split(".")[:2])

    @property
    def symbols(self) -> frozenset[str]:
        """Every shim symbol the release exports."""
        return frozenset(name for names in self.libraries.values() for name in names)

    def to_json(self) -> dict[str, Any]:
        """The committed file's content."""
        return {"schema": SHIM_SCHEMA, "torch": self.torch, "source": self.source,
                "libraries": {lib: list(names) for lib, names in sorted(self.libraries.items())}}


def shim_path(series: str, root: Path = SHIM_DIR) -> Path:
    """The committed list of torch ``series`` (``2.13``)."""
    return Path(root) / f"torch-{series}.json"


def _extract_hint(series: str) -> str:
    return (f"extract it once: python -m tools.abicheck extract <URL of a torch {series} x86_64 "
            f"wheel on the registry> --sha256 <its sha256> (writes {shim_path(series).name} "
            "under recipes/torch-shim/), then commit it")


def load_shim(series: str, root: Path = SHIM_DIR) -> ShimList:
    """The committed shim list of torch ``series``; VerifyError (how to make it) when missing."""
    path = shim_path(series, root)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise VerifyError(f"no list of torch {series}'s stable shim exports ({path})",
                          hint=_extract_hint(series)) from None
    except (OSError, ValueError) as exc:
        raise VerifyError(f"{path}: unreadable: {exc}", hint=_extract_hint(series)) from None
    ok = (isinstance(data, dict) and data.get("schema") == SHIM_SCHEMA
          and isinstance(data.get("torch"), str) and isinstance(data.get("source"), dict)
          and isinstance(data.get("libraries"), dict)
          and all(isinstance(v, list) and all(isinstance(n, str) for n in v)
                  for v in data["libraries"].values()))
    if not ok:
        raise VerifyError(f"{path}: not a schema-{SHIM_SCHEMA} shim list "
                          "({schema, torch, source, libraries: {lib: [names]}})",
                          hint=_extract_hint(series))
    shim = ShimList(data["torch"], data["source"],
                    {lib: tuple(names) for lib, names in data["libraries"].items()})
    if shim.series != series:
        raise VerifyError(f"{path} holds torch {shim.torch}, not a {series} release",
                          hint=_extract_hint(series))
    return shim


def known_series(root: Path = SHIM_DIR) -> list[str]:
    """The torch series with a committed shim list, oldest first."""
    found = [p.name[len("torch-"):-len(".json")] for p in Path(root).glob("torch-*.json")]
    return sorted(found, key=version_key)


# -- Reading a torch wheel's shim exports ---------------------------------------------------------

def _exports(path: Path) -> list[str]:
    return sorted(name for name in dynamic_symbols(path)[0] if is_shim_symbol(name))


def shim_from_lib_dir(lib_dir: Path) -> dict[str, tuple[str, ...]]:
    """The shim symbols each of SHIM_LIBRARIES in ``lib_dir`` (a ``torch/lib``) exports."""
    out = {}
    for name in SHIM_LIBRARIES:
        path = Path(lib_dir) / name
        if path.is_file():
            out[name] = tuple(_exports(path))
    if not out:
        raise VerifyError(f"none of {', '.join(SHIM_LIBRARIES)} in {lib_dir}",
                          hint="pass the torch/lib directory of a torch wheel")
    return out


def extract_shim(wheel: str, *, sha256: str | None = None, workdir: Path | None = None) -> ShimList:
    """Read the shim exports of a torch wheel: a local path (its sha256 is computed) or an
    https URL (read with range requests; ``sha256`` is the registry's digest, recorded)."""
    remote = wheel.startswith(("https://", "http://"))
    name = wheel.rsplit("/", 1)[-1].split("#", 1)[0]
    reader = None
    try:
        if remote:
            reader = RangeReader(wheel, block=_RANGE_BLOCK, timeout=120)
            fh: Any = io.BufferedReader(reader, buffer_size=1 << 20)
        else:
            fh = open(wheel, "rb")  # noqa: SIM115 (closed below)
            digest = hashlib.sha256()
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
            if sha256 and digest.hexdigest() != sha256:
                raise VerifyError(f"{wheel}: sha256 {digest.hexdigest()} is not the expected {sha256}")
            sha256 = digest.hexdigest()
            fh.seek(0)
        with tempfile.TemporaryDirectory(dir=workdir, prefix="shim-") as tmp, fh, zipfile.ZipFile(fh) as zf:
            libraries, read, version = _read_shim_members(zf, name, Path(tmp))
    except RangeUnsupported as exc:
        raise VerifyError(exc.message, hint="download the wheel once and pass its path instead") from None
    how = ("HTTP range requests of the zip members " if remote else "the zip members ") + ", ".join(read)
    if reader is not None:
        how += f" ({reader.fetched} of the wheel's {reader.size} bytes)"
    source = {"wheel": name, "sha256": sha256, "read": how}
    if remote:
        source["url"] = wheel
        source["sha256_from"] = "the registry's file listing (the wheel was not downloaded whole)"
    return ShimList(version.split("+")[0], source, libraries)


def _read_shim_members(zf: zipfile.ZipFile, name: str, tmp: Path
                       ) -> tuple[dict[str, tuple[str, ...]], list[str], str]:
    """(shim exports per library, the members read, torch's version) of the open torch wheel
    ``name``; each library is unpacked into ``tmp`` for its symbol table, then removed."""
    names = zf.namelist()
    meta = next((n for n in names if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
    if not meta or not meta.startswith("torch-"):
        raise VerifyError(f"{name} is not a torch wheel (no torch-*.dist-info/METADATA)")
    version = next(line.split(":", 1)[1].strip() for line in zf.read(meta).decode().splitlines()
                   if line.startswith("Version:"))
    libraries, read = {}, []
    for lib in SHIM_LIBRARIES:
        member = f"torch/lib/{lib}"
        if member not in names:
            continue
        target = tmp / lib
        with zf.open(member) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        libraries[lib] = tuple(_exports(target))
        read.append(member)
        target.unlink()
    if not libraries:
        raise VerifyError(f"{name} holds none of {', '.join(SHIM_LIBRARIES)} under torch/lib/")
    return libraries, read, version


def write_shim(shim: ShimList, root: Path = SHIM_DIR) -> Path:
    """Write ``shim`` as the committed list of its series; returns the path."""
    path = shim_path(shim.series, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(shim.to_json(), indent=1) + "\n")
    return path


# -- The checks -----------------------------------------------------------------------------------

@dataclass
class ModuleSymbols:
    """What one extension module needs from others: shim, torch C++ and Python C API names."""

    shim: tuple[str, ...]
    torch_cxx: tuple[str, ...]
    python: tuple[str, ...]


def module_symbols(module: Path) -> ModuleSymbols:
    """Classify the strong undefined symbols of ``module``."""
    undefined = dynamic_symbols(module)[1]
    return ModuleSymbols(tuple(sorted(n for n in undefined if is_shim_symbol(n))),
                         tuple(sorted(n for n in undefined if is_torch_symbol(n))),
                         tuple(sorted(n for n in undefined if is_python_symbol(n))))


def _listing(items: list[tuple[str, str]]) -> str:
    lines = [f"  {module}: {name}" for module, name in items]
    more = f"\n  ... and {len(lines) - _SHOWN} more" if len(lines) > _SHOWN else ""
    return "\n".join(lines[:_SHOWN]) + more


def check_python_none(modules: list[Path]) -> None:
    """VerifyError naming every Python C API symbol an extension needs (a ``python: none`` claim)."""
    found = [(Path(m).name, n) for m in modules for n in module_symbols(m).python]
    if found:
        raise VerifyError(
            f"the recipe says abi.python: none (one build for every Python), but {len(found)} "
            "Python C API symbol(s) are needed: the build would load only in interpreters "
            "exporting them:\n" + _listing(found),
            hint="the extension uses the Python C API (pybind11, Python.h): set abi.python to "
                 "cpython (one build per Python) or abi3 if it keeps to the limited API")


def check_abi3(wheel: Path) -> dict[str, Any]:
    """Run abi3audit on ``wheel`` (offline: it reads the local file); its per-extension results.

    VerifyError when an extension is not abi3, or needs a newer limited API than the wheel's tag.
    """
    proc = subprocess.run([sys.executable, "-m", "abi3audit", "--report", "--strict", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    try:
        report = json.loads(proc.stdout)
        results = next(iter(report["specs"].values()))["wheel"]
    except (ValueError, KeyError, StopIteration, TypeError):
        raise VerifyError(f"abi3audit could not check {Path(wheel).name}: "
                          f"{(proc.stderr or proc.stdout).strip()[-800:]}",
                          hint="is abi3audit installed (make setup) and is the wheel tagged abi3?") from None
    bad = []
    for item in results:
        r = item["result"]
        if not r.get("is_abi3") or not r.get("is_abi3_baseline_compatible") or r.get("non_abi3_symbols"):
            names = ", ".join(r.get("non_abi3_symbols") or []) or "-"
            bad.append(f"  {item['name']}: abi3 {r.get('is_abi3')}, baseline {r.get('baseline')}, "
                       f"needs {r.get('computed')}; non-abi3 symbols: {names}")
    if bad or proc.returncode != 0:
        raise VerifyError(f"abi3audit: {Path(wheel).name} does not keep to the limited API its "
                          "tag promises:\n" + ("\n".join(bad) or proc.stderr.strip()[-800:]),
                          hint="raise abi.python_from to the version abi3audit computes, or build "
                               "per Python (abi.python: cpython)")
    return {item["name"]: item["result"] for item in results}


@dataclass
class StableReport:
    """A stable-ABI check: each module's shim symbols, and per torch series what it lacks."""

    series: tuple[str, ...]
    shim: dict[str, tuple[str, ...]]
    missing: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    not_shim: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def loads_with(self) -> tuple[str, ...]:
        """The series every module's shim symbols resolve in."""
        return tuple(s for s in self.series if not self.missing.get(s))

    def to_json(self) -> dict[str, Any]:
        """For the manifest and the build report."""
        return {"series_checked": list(self.series), "loads_with": list(self.loads_with),
                "shim_symbols": sum(len(v) for v in self.shim.values()),
                "missing": {s: {m: list(n) for m, n in mods.items()}
                            for s, mods in self.missing.items() if mods}}


def stable_report(modules: list[Path], series: list[str] | tuple[str, ...], *,
                  root: Path = SHIM_DIR) -> StableReport:
    """Look up every shim symbol of ``modules`` in the committed list of each of ``series``;
    torch C++ symbols (not allowed in a stable-ABI build) are collected too. Never raises for
    what is missing (``check_stable`` does)."""
    ordered = tuple(sorted(set(series), key=version_key))
    syms = {Path(m).name: module_symbols(m) for m in modules}
    report = StableReport(ordered, {m: s.shim for m, s in syms.items()})
    report.not_shim = {m: s.torch_cxx for m, s in syms.items() if s.torch_cxx}
    for s in ordered:
        exported = load_shim(s, root).symbols
        report.missing[s] = {m: tuple(n for n in names if n not in exported)
                             for m, names in report.shim.items()
                             if any(n not in exported for n in names)}
    return report


def check_stable(modules: list[Path], *, torch_from: str, serves: tuple[str, ...] | list[str],
                 root: Path = SHIM_DIR) -> StableReport:
    """Check a ``torch: stable`` claim: only shim symbols, each exported by torch ``torch_from``
    and by every series in ``serves``; VerifyError naming the symbols and series otherwise."""
    if not modules:
        raise VerifyError("no extension modules to check",
                          hint="the wheel has no compiled *.so: check the build log")
    report = stable_report(modules, [torch_from, *serves], root=root)
    if report.not_shim:
        items = [(m, n) for m, names in sorted(report.not_shim.items())
                 for n in demangle(list(names))]
        raise VerifyError(
            f"the recipe says abi.torch: stable (one build for torch {torch_from} and newer), but "
            f"{len(items)} torch C++ symbol(s) are needed, which change between torch series:\n"
            + _listing(items),
            hint="build with TORCH_TARGET_VERSION and only torch/csrc/stable headers (the "
                 "package's setup.py), or set abi.torch: exact (one build per torch series)")
    failed = {s: mods for s, mods in report.missing.items() if mods}
    if failed:
        lines = []
        for s, mods in failed.items():
            names = sorted({n for ns in mods.values() for n in ns})
            lines.append(f"  torch {s} lacks {len(names)}: " + ", ".join(names[:_SHOWN])
                         + (f" ... and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""))
        oldest = next(iter(failed))
        raise VerifyError(
            f"the stable-ABI build needs shim functions that torch {', '.join(failed)} "
            f"do{'es' if len(failed) == 1 else ''} not export: it would fail to load there with "
            "'undefined symbol', though its pin and its variant indexes promise "
            f"torch {torch_from} and newer:\n" + "\n".join(lines),
            hint=f"build with TORCH_TARGET_VERSION set to torch {oldest} (the package's own "
                 f"setting), or raise abi.torch_from and drop the older series from the recipe")
    return report


def check_claims(wheel: Path, modules: list[Path], *, python_abi: str, torch_abi: str,
                 torch_from: str = "", serves: tuple[str, ...] = (),
                 root: Path = SHIM_DIR) -> dict[str, Any]:
    """Every check the recipe's ``abi`` calls for; what was checked, for the manifest."""
    out: dict[str, Any] = {"python": python_abi, "torch": torch_abi}
    if python_abi == "none":
        check_python_none(modules)
        out["python_symbols"] = 0
    elif python_abi == "abi3":
        out["abi3audit"] = {name: {k: r.get(k) for k in ("baseline", "computed")}
                            for name, r in check_abi3(wheel).items()}
    if torch_abi == "stable":
        out["torch_from"] = torch_from
        out["serves"] = list(serves)
        out.update(check_stable(modules, torch_from=torch_from, serves=serves, root=root).to_json())
    return out


# -- A wheel's report ------------------------------------------------------------------------------

@dataclass
class WheelShimReport:
    """What ``python -m tools.abicheck check`` reports of a wheel: the stable-ABI lookup of its
    modules in each series' list, and the Python C API symbols each module needs."""

    stable: StableReport
    python: dict[str, tuple[str, ...]]


def check_wheel_shims(wheel: Path, series: list[str] | tuple[str, ...] | None = None, *,
                root: Path = SHIM_DIR) -> WheelShimReport:
    """Look up the shim symbols of every extension module in ``wheel`` in the committed list of
    each of ``series`` (default: every committed list); VerifyError when it holds no module."""
    series = list(series) if series else known_series(root)
    with tempfile.TemporaryDirectory(prefix="abicheck-") as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp)
        modules = extension_modules(Path(tmp))
        if not modules:
            raise VerifyError(f"{Path(wheel).name} holds no compiled extension module")
        report = stable_report(modules, series, root=root)
        pythons = {m.name: module_symbols(m).python for m in modules}
    return WheelShimReport(report, pythons)
