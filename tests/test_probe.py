"""tools.probe: the real thing on tinyext (its units compiled by real nvcc with the command lines
its own build writes), each bad input through the command line a person uses, and the parts
(measurement, ranking, selection, memory judgement) on their own.

The slow test at the end probes every recipe on every torch series it lists for the local
nvcc's CUDA version (one arch, sm_90): what the README's probe table reports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.fixtures.make_tinyext_sdist import make_sdist
from tests.test_build import BREAK_PATCH, _cell, _recipe, _write
from tools import ROOT
from tools.core.errors import CompileError, ProbeError
from tools.hostplat import windows
from tools.pipeline.build_toolchain import find_nvcc
from tools.plan.cells import plan
from tools.plan.job import Inputs, load_job
from tools.probing.probe_build import (TABLE_HEADER, ProbeReport, ProbeRequest, Unit, UnitResult,
                                      check_memory, first_error, include_weight, judge_memory,
                                      measure, probe_cell, rank_units, select_units)
from tools.plan.recipes.model import load_all, load_recipe
from tools.plan.table import load_table

CELL_SDIST = "tinyext-0.1.0.tar.gz"


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    return make_sdist(tmp_path_factory.mktemp("sdist"))


def _probe(recipes: Path, cell: str, work: Path, *extra: str, timeout=1800):
    return subprocess.run([sys.executable, "-m", "tools.probe", cell, "--recipes", str(recipes),
                           "--work", str(work), *extra], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


# ---- the real thing ------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.network
def test_probe_compiles_a_unit_with_the_builds_own_command(sdist, tmp_path):
    data = _recipe(sdist, patches=[])
    recipes = _write(tmp_path / "recipes", data, {})
    cell, work = _cell(data), tmp_path / "work"
    # The CUDA unit only: tinyext.cpp (torch's headers) takes a minute; select_units' default
    # (the heaviest CUDA and C++ units) is tested below on its own.
    report = probe_cell(load_job(cell, recipes), ProbeRequest(
        units=("add_one.cu",), inputs=Inputs(sdist=sdist), work_root=work))

    assert report.verdict == "passed"
    assert report.commands_recorded == 3          # tinyext.cpp, add_one.cu and scale.cu
    [unit] = report.units
    assert unit.unit == "csrc/add_one.cu" and unit.kind == "cuda" and unit.ok
    assert unit.seconds > 0 and 0 < unit.peak_process_gib <= unit.peak_tree_gib < 8
    probe_dir = work / cell / "probe"
    log = Path(unit.log).read_text()
    # the command line is the one torch's BuildExtension wrote: its nvcc, the recipe's arch
    assert find_nvcc().path.split("/")[-1] in log.splitlines()[0]
    assert "-gencode arch=compute_90,code=sm_90" in log
    objects = list((probe_dir / "src").rglob("add_one.o"))
    assert len(objects) == 1 and objects[0].stat().st_size > 0
    assert not list(probe_dir.rglob("*.whl"))     # no wheel, no link
    assert not list(probe_dir.rglob("tinyext_cuda*.so"))
    saved = json.loads((probe_dir / "probe.json").read_text())
    assert saved["verdict"] == "passed" and saved["units"][0]["unit"] == "csrc/add_one.cu"
    assert [s["name"] for s in saved["steps"]] == ["toolchain", "source", "python", "commands",
                                                   "compile"]
    assert report.supported_job_memory_gib >= unit.peak_tree_gib
    assert "covers" in report.memory_verdict      # 1.5 GiB covers a small kernel


@pytest.mark.cuda
@pytest.mark.network
def test_a_unit_that_does_not_compile_is_named_with_the_first_error(sdist, tmp_path):
    data = _recipe(sdist, patches=[{"file": "0001-Break-the-kernel.patch",
                                    "reason": "a compile error", "upstream": "not applicable"}])
    recipes = _write(tmp_path / "recipes", data, {"0001-Break-the-kernel.patch": BREAK_PATCH})
    work = tmp_path / "work"
    proc = _probe(recipes, _cell(data), work, "--sdist", str(sdist), "--units", "add_one.cu")
    assert proc.returncode == CompileError.exit_code, proc.stderr[-3000:]
    assert "csrc/add_one.cu failed" in proc.stderr
    assert "deliberately broken by the test recipe" in proc.stderr   # the #error line
    assert "FAILED csrc/add_one.cu" in proc.stdout
    saved = json.loads((work / _cell(data) / "probe" / "probe.json").read_text())
    assert saved["verdict"] == "failed" and saved["error"]["kind"] == "compile"


@pytest.mark.network
def test_a_build_that_writes_no_commands_is_a_named_error(tmp_path):
    """An sdist of the same name whose setup.py builds no extension: pip finishes without ever
    running ninja, so nothing says how it compiles."""
    tree = tmp_path / "plain" / "tinyext-0.1.0"
    (tree / "tinyext").mkdir(parents=True)
    (tree / "tinyext" / "__init__.py").write_text("")
    (tree / "setup.py").write_text("from setuptools import setup\n"
                                   "setup(name='tinyext', version='0.1.0', packages=['tinyext'])\n")
    (tree / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: tinyext\nVersion: 0.1.0\n")
    plain = tmp_path / CELL_SDIST
    with tarfile.open(plain, "w:gz") as tar:
        tar.add(tree, arcname=tree.name)
    data = _recipe(plain, patches=[])
    recipes = _write(tmp_path / "recipes", data, {})
    proc = _probe(recipes, _cell(data), tmp_path / "work", "--sdist", str(plain))
    assert proc.returncode == ProbeError.exit_code, proc.stderr[-3000:]
    assert "wrote no compile commands" in proc.stderr
    assert "finished without running ninja" in proc.stderr
    assert "capture.log" in proc.stderr and "fix:" in proc.stderr


def test_a_probe_needing_more_memory_than_available_is_refused_before_it_starts(
        sdist, tmp_path):
    data = _recipe(sdist, patches=[])
    data["build"]["job_memory_gib"] = 6.5
    recipes = _write(tmp_path / "recipes", data, {})
    work = tmp_path / "work"
    with pytest.raises(ProbeError) as err:
        probe_cell(load_job(_cell(data), recipes), ProbeRequest(
            inputs=Inputs(sdist=sdist), work_root=work, available_gib=4.0))
    message = str(err.value)
    assert "job_memory_gib: 6.5" in message and "4.0 GiB is available" in message
    assert "recipe.yaml" in message and "--archs 90" in message
    assert not work.exists()                      # nothing downloaded, nothing written


def test_an_unknown_unit_is_a_named_error(sdist, tmp_path):
    units = [Unit("csrc/add_one.cu", "cuda", "nvcc -c add_one.cu", tmp_path, tmp_path / "a.o")]
    with pytest.raises(ProbeError) as err:
        select_units(units, ("flash_fwd.cu",), count=1, tree=tmp_path, where="--units")
    assert "--units: 'flash_fwd.cu' matches no unit" in str(err.value)
    assert "csrc/add_one.cu" in str(err.value)    # the hint lists what there is


# ---- the parts -----------------------------------------------------------------------------


def test_measure_sums_the_process_tree_and_keeps_the_largest_process(tmp_path):
    """Two children holding ~150 MiB each at once: the tree's peak is about their sum, the
    largest single process about one of them."""
    hold = (f"{sys.executable} -c \"import time; b = b'x' * (150 << 20); time.sleep(1.5)\"")
    # Linux counts the spawning process's resident pages to the child's max RSS until it execs
    # (exec keeps the old memory's high-water mark): measured from a pytest-xdist worker grown
    # by other files, a 150 MiB process read 311 MiB. So the measure runs in a fresh interpreter,
    # small as the probe's own process is.
    script = ("import json, sys; from pathlib import Path; from tools.probing.probe_build import measure; "
              "print(json.dumps(measure(sys.argv[1], cwd=Path(sys.argv[2]), env={}, log=Path(sys.argv[2]) / 'm.log')))")
    out = subprocess.run([sys.executable, "-c", script, f"{hold} & {hold} & wait", str(tmp_path)], cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    status, seconds, tree, single = json.loads(out.stdout)
    assert status == 0 and seconds >= 1.5
    # one process: its 150 MiB and the interpreter's own pages (seen up to ~202 MiB on a loaded
    # machine), well under the two together
    assert 140 << 20 <= single <= 250 << 20
    assert tree >= 280 << 20


def test_measure_kills_a_unit_past_its_timeout(tmp_path):
    status, seconds, _, _ = measure("sleep 30", cwd=tmp_path, env={}, log=tmp_path / "m.log",
                                    timeout=0.5)
    assert status == -9 and seconds < 10


def test_measure_on_windows_runs_the_line_in_the_shell_and_measures_no_memory(tmp_path):
    """Windows' path (shell=True: cmd.exe there, /bin/sh here): the status and the seconds,
    the output in the log, both peaks 0."""
    status, seconds, tree, single = measure("echo compiled && exit 3", cwd=tmp_path,
                                            env=dict(os.environ), log=tmp_path / "m.log",
                                            host=windows)
    assert (status, tree, single) == (3, 0, 0) and seconds < 10
    assert (tmp_path / "m.log").read_text() == \
        f"$ cd {tmp_path} && echo compiled && exit 3\ncompiled\n"


def test_measure_on_windows_kills_the_tree_with_taskkill_past_the_timeout(tmp_path,
                                                                         monkeypatch):
    """Past its time the unit's process tree is killed with `taskkill /T /F /PID` (a stand-in
    here that records its arguments and kills the process), and the status is -9 as on POSIX."""
    fake = tmp_path / "bin" / "taskkill"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\nimport json, os, signal, sys\n"
                    f"open({str(tmp_path / 'taskkill.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
                    "os.kill(int(sys.argv[-1]), signal.SIGKILL)\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    status, seconds, _, _ = measure("sleep 30", cwd=tmp_path, env=dict(os.environ),
                                    log=tmp_path / "m.log", timeout=0.5, host=windows)
    assert status == -9 and seconds < 10
    args = json.loads((tmp_path / "taskkill.json").read_text())
    assert args[:4] == ["/T", "/F", "/PID", args[3]] and args[3].isdigit()


def test_a_terminated_probe_stops_its_compiler(tmp_path):
    """SIGTERM to the probe must not leave the unit's process group running (it is in its own
    session, so nothing else would stop it)."""
    marker = tmp_path / "alive"
    script = (f"import sys, time\nsys.argv = ['probe']\nfrom tools.probing import probe_build\n"
              f"import signal\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\n"
              f"probe_build.measure('sleep 60; touch {marker}', cwd={str(tmp_path)!r}, env={{}}, "
              f"log=__import__('pathlib').Path({str(tmp_path / 'm.log')!r}))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    # a loaded machine can take seconds to import the probe: wait for the unit, bounded
    sleepers: list[int] = []
    for _ in range(120):
        time.sleep(0.25)
        sleepers = _session_children(proc.pid)
        if sleepers or proc.poll() is not None:
            break
    assert sleepers, "the unit did not start within 30 s"
    proc.terminate()
    assert proc.wait(timeout=20) == 143
    time.sleep(0.5)
    assert not [p for p in sleepers if Path(f"/proc/{p}").exists()
                and b"sleep" in Path(f"/proc/{p}/cmdline").read_bytes()]


def _session_children(parent: int) -> list[int]:
    """Processes whose parent is a child of ``parent`` (the shell measure starts and its sleep)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rfind(")") + 2:].split()[1])
            if ppid == parent or (ppid and Path(f"/proc/{ppid}/stat").exists() and
                                  _parent_of(ppid) == parent):
                out.append(int(entry.name))
    return out


def _parent_of(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat[stat.rfind(")") + 2:].split()[1])


@pytest.mark.parametrize("text, expected", [
    # nvcc's own format: file(line): error
    ("$ nvcc ...\ncsrc/a.cu(12): error: identifier \"x\" is undefined\n",
     'csrc/a.cu:12: identifier "x" is undefined'),
    # gcc's format, behind nvcc's host pass
    ("$ nvcc ...\n/t/torch/include/c10/x.h:40:3: error: 'auto' not allowed\n",
     "/t/torch/include/c10/x.h:40: 'auto' not allowed"),
    # no file:line, but nvcc says fatal
    ("$ nvcc ...\nnvcc fatal   : Unsupported gpu architecture 'compute_10'\n",
     "nvcc fatal   : Unsupported gpu architecture 'compute_10'"),
    # nothing to blame
    ("$ nvcc ...\nKilled\n", None),
])
def test_first_error(text, expected):
    assert first_error(text) == expected


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "pkg"
    (tree / "csrc" / "inc").mkdir(parents=True)
    (tree / "csrc" / "inc" / "big.h").write_text("// " + "x" * 5000 + "\n")
    (tree / "csrc" / "mid.h").write_text('#include "big.h"\n')   # found through -I csrc/inc
    (tree / "csrc" / "heavy.cu").write_text('#include "mid.h"\n#include <torch/extension.h>\n')
    (tree / "csrc" / "light.cu").write_text("// light\n")
    (tree / "csrc" / "host.cpp").write_text('#include "inc/big.h"\n' + "// " * 5000 + "\n")
    return tree


def _units(tree: Path) -> list[Unit]:
    cmd = "nvcc -I{0}/csrc/inc -I/usr/local/cuda/include -c {0}/csrc/{1} -o {1}.o"
    return [Unit(f"csrc/{name}", kind, cmd.format(tree, name), tree / "build",
                 tree / "build" / f"{name}.o")
            for name, kind in (("light.cu", "cuda"), ("host.cpp", "c++"), ("heavy.cu", "cuda"))]


def test_include_weight_follows_the_trees_headers_only(tmp_path):
    tree = _tree(tmp_path)
    heavy = _units(tree)[2]
    expected = sum((tree / p).stat().st_size for p in ("csrc/heavy.cu", "csrc/mid.h",
                                                       "csrc/inc/big.h"))
    assert include_weight(heavy, tree) == expected   # torch's header is not in the tree


def test_rank_puts_cuda_first_then_the_heaviest(tmp_path):
    tree = _tree(tmp_path)
    ranked = rank_units(_units(tree), tree)
    # host.cpp outweighs both, but a CUDA unit runs cicc and ptxas: CUDA first
    assert [u.name for u in ranked] == ["csrc/heavy.cu", "csrc/light.cu", "csrc/host.cpp"]


def test_select_by_name_tail_or_count(tmp_path):
    tree = _tree(tmp_path)
    units = _units(tree)
    chosen, how = select_units(units, ("light.cu", "csrc/host.cpp"), count=1, tree=tree,
                               where="--units")
    assert [u.name for u in chosen] == ["csrc/light.cu", "csrc/host.cpp"] and "--units" in how
    chosen, how = select_units(units, (), count=1, tree=tree, where="--units")
    assert [u.name for u in chosen] == ["csrc/heavy.cu", "csrc/host.cpp"] and "2 of 3" in how
    chosen, _ = select_units(units, (), count=2, tree=tree, where="--units")
    assert [u.name for u in chosen] == ["csrc/heavy.cu", "csrc/light.cu", "csrc/host.cpp"]
    chosen, _ = select_units(units[1:2], (), count=1, tree=tree, where="--units")
    assert [u.name for u in chosen] == ["csrc/host.cpp"]          # no CUDA unit at all


def test_check_memory_counts_threads_in_flight(write_recipe, good_recipe, mini_table):
    good_recipe["build"].update(job_memory_gib=6.0, nvcc_threads=4, nvcc_threads_fixed=True)
    recipe = load_recipe(write_recipe(good_recipe), mini_table)
    check_memory(recipe, ("90",), 7.0)            # one arch: one thread in flight, 6 GiB
    with pytest.raises(ProbeError, match="about 12.0 GiB"):
        check_memory(recipe, ("80", "90"), 7.0)   # two archs, --threads 4: two in flight


def test_judge_memory(write_recipe, good_recipe, mini_table):
    recipe = load_recipe(write_recipe(good_recipe), mini_table)   # job_memory_gib 2.0
    def report(peak: float) -> ProbeReport:
        r = ProbeReport("c", ["90"], 1, 2.0)
        r.units = [UnitResult("a.cu", "cuda", True, 1.0, peak, peak, 0, "log"),
                   UnitResult("b.cu", "cuda", False, 1.0, 9.9, 9.9, 1, "log", "error")]
        judge_memory(r, recipe)
        return r
    ok = report(1.2)                              # failed units don't count
    assert ok.supported_job_memory_gib == 1.5 and "covers" in ok.memory_verdict
    low = report(3.1)
    assert low.supported_job_memory_gib == 3.5 and "raise it to 3.5" in low.memory_verdict


# ---- the README's table from probe.json files ------------------------------------------------


def _saved_probe(work: Path, cell: str, torch: str, sdist: str, units: list[UnitResult],
                 recipe_gib: float) -> None:
    report = ProbeReport(cell, ["90"], 1, recipe_gib, units=units, commands_recorded=4,
                         per_thread_gib=max(u.peak_tree_gib for u in units), verdict="passed"
                         if all(u.ok for u in units) else "failed")
    data = {"torch": torch, **asdict(report),
            "steps": [{"name": "source", "detail": {"sdist": sdist}}]}
    path = work / cell / "probe" / "probe.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))


def _unit(name: str, kind: str, seconds: float, peak: float, ok: bool = True) -> UnitResult:
    return UnitResult(name, kind, ok, seconds, peak, peak, 0 if ok else 1, "x.log",
                      None if ok else "error: boom")


def test_summary_prints_the_readme_table_from_saved_probes(tmp_path):
    work = tmp_path / "work"
    cu = _unit("csrc/selective_scan_bwd.cu", "cuda", 109.4, 1.0)
    cpp = _unit("csrc/selective_scan.cpp", "c++", 39.0, 1.53)
    _saved_probe(work, "mamba_ssm-3.11-cu130-torch2.13", "2.13.0+cu130",
                 "mamba_ssm-2.3.2.post1.tar.gz", [cu, cpp], 1.0)
    _saved_probe(work, "mamba_ssm-3.11-cu130", "2.14.1+cu130",
                 "mamba_ssm-2.3.2.post1.tar.gz", [cu, cpp], 1.0)
    # a recipe no longer in the tree keeps the figure recorded when it was probed
    _saved_probe(work, "gone_pkg-3.11-cu130", "2.14.1+cu130", "gone_pkg-0.1.tar.gz",
                 [_unit("src/k.cu", "cuda", 12, 2.25, ok=False)], 3.0)

    proc = subprocess.run([sys.executable, "-m", "tools.probe", "--summary", str(work)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)

    assert proc.returncode == 0, proc.stderr
    now = load_recipe(ROOT / "recipes" / "mamba_ssm").build.job_memory_gib
    assert proc.stdout.splitlines() == [
        *TABLE_HEADER.splitlines(),
        "| gone_pkg 0.1 | 2.14.1 | failed: `k.cu` | 12 (`k.cu`) | 2.25 | 2.25 / 3 |",
        "| mamba_ssm 2.3.2.post1 | 2.14.1 | passed | 109 + 39 (`selective_scan_bwd.cu`, "
        f"`selective_scan.cpp`) | 1.00 / 1.53 | 1.53 / {now:g} |",
        "| mamba_ssm 2.3.2.post1 | 2.13.0 | passed | 109 + 39 (`selective_scan_bwd.cu`, "
        f"`selective_scan.cpp`) | 1.00 / 1.53 | 1.53 / {now:g} |",
    ]


def test_summary_of_a_directory_without_probes_is_a_named_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tools.probe", "--summary", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == ProbeError.exit_code
    assert f"{tmp_path}: no <cell>/probe/probe.json below it" in proc.stderr
    assert "--work directory" in proc.stderr
    bare = subprocess.run([sys.executable, "-m", "tools.probe"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert bare.returncode == 2 and "name a cell to probe (or --summary WORK, or --due)" in bare.stderr


# ---- every recipe (slow) -------------------------------------------------------------------


def _recipe_cells() -> list[tuple[str, str]]:
    """(cell, arch) for every recipe and torch series the recipes list for the local nvcc's CUDA
    version: Python 3.11 for a recipe built per Python, the one cell of a recipe that builds once
    for every Python (xformers: no Python C API, torch's stable ABI, one build against the newest
    torch). The arch is Hopper, as the recipe names it (xformers builds its sm_90 kernels only
    for 90a)."""
    try:
        cuda = find_nvcc().version
    except Exception:
        return []
    table = load_table()
    # A git source's repository is no registry, which is all the tests reach: its probe runs by
    # hand (docs/measurements.md, FlashAttention 3), its packing in tests/test_gitsource.py.
    git = {r.package for r in load_all(table=table) if r.source.git is not None}
    cells = [c for c in plan(table=table)
             if c.cuda == cuda and (c.python == "3.11" or c.python_abi != "cpython")
             and c.package not in git]
    return [(c.id, "90a" if "90a" in c.archs else "90") for c in cells]


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.network
@pytest.mark.timeout(4 * 3600)
@pytest.mark.parametrize("cell, arch", _recipe_cells())
def test_every_recipe_probes(cell, arch, tmp_path):
    report = probe_cell(load_job(cell), ProbeRequest(archs=arch, work_root=tmp_path))
    assert report.verdict == "passed", report
    assert all(u.ok for u in report.units) and report.units
    assert report.recipe_job_memory_gib >= report.per_thread_gib, report.memory_verdict
