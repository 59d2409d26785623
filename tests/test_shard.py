"""Kernel shards end to end: tinyext's compile group, two shards, two Python cells reading them.

tinyext has two CUDA units (``add_one.cu``, ``scale.cu``) and one C++ binding unit
(``tinyext.cpp``, which includes ``Python.h``). ``python -m tools.shard units`` reads them from
the real build; ``python -m tools.shard release tinyext-cu130 --shards 2`` compiles each kernel
unit in its own shard process into its own cache, then builds the 3.11 and 3.12 cells with the
host backend reading both caches read-only: each kernel unit must be a shard hit in both cells,
and only the binding unit compiles there. The bad inputs (a unit list that no longer matches
the build, a cache of another group, a partial shard) are checked too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.make_tinyext_sdist import make_sdist
from tests.test_build import PATCH, _recipe, _write
from tinyext_support import SECOND_PYTHON
from tools import RECIPES_DIR, ROOT
from tools.core.variant import group_id
from tools.pipeline import shardcache
from tools.pipeline.buildreport import read_report
from tools.pipeline.shardcache import ShardResult
from tools.plan.cells import plan
from tools.plan.groups import UnitCost, UnitList, split
from tools.plan.recipes.model import load_all
from tools.plan.table import load_table
from tools.sharding import local_release

GROUP = "tinyext-cu130"
KERNELS = ["csrc/add_one.cu", "csrc/scale.cu"]


def _run(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.shard", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A recipes folder with tinyext, its sdist, and the unit list read from its real build."""
    root = tmp_path_factory.mktemp("shards")
    sdist = make_sdist(root / "sdist")
    data = _recipe(sdist)
    recipes = _write(root / "recipes", data, {"0001-Mark-patched.patch": PATCH})
    cuda = next(iter(data["cuda"])).replace(".", "")
    proc = _run("units", f"tinyext-3.11-cu{cuda}", "--write", "--recipes", str(recipes),
                "--sdist", str(sdist), "--work", str(root / "work"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, recipes, sdist, cuda


@pytest.mark.cuda
@pytest.mark.network
def test_the_unit_list_is_read_from_the_build(world):
    _root, recipes, _sdist, _cuda = world
    units = yaml.safe_load((recipes / "tinyext" / "units.yaml").read_text())
    assert units["units"] == {"c++": ["csrc/tinyext.cpp"], "cuda": KERNELS}
    assert units["version"] == "0.1.0" and units["schema"] == 1
    assert "stated rule" in units["cost"]["cuda"]["reason"]


@pytest.mark.cuda
@pytest.mark.network
def test_two_shards_feed_two_python_cells(world, tmp_path, monkeypatch):
    root, recipes, sdist, cuda = world
    if cuda != "130":
        pytest.skip(f"the group id below is for CUDA 13.0; this nvcc is CUDA {cuda}")
    # The cells' own cache starts empty, so a kernel unit can only come from a shard.
    monkeypatch.setenv("CUWHEELS_CCACHE_DIR", str(tmp_path / "local-ccache"))
    cache, work, out = tmp_path / "shards", tmp_path / "work", tmp_path / "out"
    proc = _run("release", GROUP, "--shards", "2", "--python", f"3.11,{SECOND_PYTHON}",
                "--recipes", str(recipes), "--sdist", str(sdist), "--cache", str(cache),
                "--work", str(work), "--wheels", str(out), timeout=3600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]

    records = [shardcache.read_record(cache / f"{GROUP}-shard{k}") for k in (1, 2)]
    assert [r.units for r in records] == [[KERNELS[0]], [KERNELS[1]]]
    assert all(r.complete and r.verdict == "passed" for r in records)
    assert all(set(r.seconds) == set(r.units) for r in records)
    assert len({r.key for r in records}) == 1
    # each shard's build report carries its record, read back through the report's type
    for k, record in enumerate(records, 1):
        report = read_report(work / f"{GROUP}-shard{k}" / "report.json")
        assert report.shard == record and report.verdict == "passed"

    # The first cell reads each kernel unit from its shard's cache; ccache copies what it reads
    # into the local cache the cells share here, so the second cell finds them there (in CI each
    # cell job starts with an empty local cache and reads the shards, as the first does here).
    for python, kernel_hit in (("3.11", "shard hit"), (SECOND_PYTHON, "hit")):
        cell = f"tinyext-{python}-cu{cuda}"
        report = json.loads((work / cell / "report.json").read_text())
        assert report["verdict"] == "passed"
        compile_ = next(s for s in report["steps"] if s["name"] == "compile")["detail"]
        assert compile_["shards"]["read"] == [str(cache / f"{GROUP}-shard{k}") for k in (1, 2)]
        per_unit = compile_["cache"]["per_unit"]
        # every kernel unit from a shard; the binding unit (Python.h) compiled in the cell
        assert per_unit["units"] == {KERNELS[0]: kernel_hit, KERNELS[1]: kernel_hit,
                                     "csrc/tinyext.cpp": "miss"}
        assert per_unit["misses"] == [{"unit": "csrc/tinyext.cpp", "result": "miss",
                                       "why": "no shard compiles it (the binding or another "
                                              "C++ unit)"}]
    wheels = sorted(p.name for p in out.glob("*.whl"))
    assert len(wheels) == 2 and all("cu130" in w for w in wheels)
    assert "shard" in proc.stdout and "cell" in proc.stdout   # the summary lists every job


@pytest.mark.cuda
@pytest.mark.network
def test_a_shard_refuses_a_unit_list_the_build_no_longer_has(world, tmp_path):
    root, recipes, sdist, _cuda = world
    stale = tmp_path / "recipes"
    subprocess.run(["cp", "-r", str(recipes), str(stale)], check=True)
    path = stale / "tinyext" / "units.yaml"
    data = yaml.safe_load(path.read_text())
    data["units"]["cuda"] = ["csrc/add_one.cu", "csrc/old_kernel.cu"]
    path.write_text(yaml.safe_dump(data))
    proc = _run("run", GROUP, "--shard", "1/2", "--recipes", str(stale), "--sdist", str(sdist),
                "--cache", str(tmp_path / "c"), "--work", str(tmp_path / "w"))
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert str(path) in proc.stderr
    assert "in the build, not in the list: csrc/scale.cu" in proc.stderr
    assert "in the list, not in the build: csrc/old_kernel.cu" in proc.stderr
    assert "python -m tools.shard units" in proc.stderr
    assert not (tmp_path / "c" / f"{GROUP}-shard1" / "shard.json").exists()


def test_the_group_id_is_the_cell_id_without_its_python():
    assert group_id("tinyext", "13.0") == GROUP
    # Spelled from the cell's parts, it reads as its id less the Python part, on every cell of
    # the repository's plan (every torch part and platform part there is).
    table = load_table()
    for cell in plan(load_all(RECIPES_DIR, table), table):
        package, _python, rest = cell.id.split("-", 2)
        assert group_id(cell.package, cell.cuda, cell.torch_part, cell.platform) == \
            f"{package}-{rest}", cell.id


def test_split_balances_by_seconds_and_is_reproducible():
    units = [("a", 10), ("b", 300), ("c", 100), ("d", 100), ("e", 90)]
    assert split(units, 2) == [("b",), ("a", "c", "d", "e")]
    assert split(units, 3) == [("b",), ("c", "e"), ("a", "d")]   # 300 | 190 | 110
    assert split(units, 9) == [("b",), ("c",), ("d",), ("e",), ("a",)]   # never an empty shard


def _cache(tmp_path: Path, name: str, **record) -> Path:
    path = tmp_path / name
    path.mkdir()
    shardcache.write_record(path, ShardResult(**{
        "group": GROUP, "key": "k1", "shard": name, "index": 1, "count": 2, "units": [],
        "archs": ["90"], "complete": True, "env": {"NVCC_THREADS": "2"}, **record}))
    return path


def test_a_shard_record_reads_back_as_written_and_a_wrong_one_is_not_read(tmp_path):
    path = _cache(tmp_path, f"{GROUP}-shard1", units=[KERNELS[0]], seconds={KERNELS[0]: 2.5},
                  error="stopped")
    record = shardcache.read_record(path)
    assert record.units == [KERNELS[0]] and record.seconds == {KERNELS[0]: 2.5}
    assert record.error == "stopped"
    assert json.loads((path / "shard.json").read_text())["error"] == "stopped"
    with pytest.raises(ValueError, match=r"x\.json: a shard record lacks count, index"):
        ShardResult.from_json({"shard": "s", "group": "g", "key": "k", "units": [], "archs": []},
                              where="x.json")
    with pytest.raises(ValueError, match=r"x\.json: a shard record's units must be list"):
        ShardResult.from_json({**record.to_json(), "units": "a.cu"}, where="x.json")
    (path / "shard.json").write_text('{"group": "g"}')
    assert shardcache.read_record(path) is None


def test_a_cache_of_another_group_or_key_is_not_read_and_said(tmp_path):
    mine = _cache(tmp_path, f"{GROUP}-shard1", units=[KERNELS[0]])
    other_key = _cache(tmp_path, f"{GROUP}-shard2", key="k2", units=[KERNELS[1]])
    empty = tmp_path / f"{GROUP}-shard3"
    empty.mkdir()
    assert shardcache.candidates(tmp_path, GROUP) == [mine, other_key, empty]
    use = shardcache.choose([mine, other_key, empty], group=GROUP, key="k1")
    assert use.used == [mine] and use.env == {"NVCC_THREADS": "2"}
    assert [r["cache"] for r in use.refused] == [str(other_key), str(empty)]
    assert "with key 'k2', not 'tinyext-cu130' with key 'k1'" in use.refused[0]["why"]
    assert use.refused[1]["why"] == "no readable shard.json"


def test_a_partial_shard_means_its_units_compile_in_the_cell_with_the_reason(tmp_path):
    done = _cache(tmp_path, f"{GROUP}-shard1", units=[KERNELS[0]])
    partial = _cache(tmp_path, f"{GROUP}-shard2", units=[KERNELS[1]], complete=False)
    use = shardcache.choose([done, partial], group=GROUP, key="k1")
    logged = {f"../../{KERNELS[0]}": "shard hit", f"../../{KERNELS[1]}": "miss",
              "../../csrc/tinyext.cpp": "miss"}
    result = shardcache.sort_results(logged, use, tuple(KERNELS))
    assert result["shard_hits"] == 1 and result["hits"] == 1
    assert result["misses"] == [
        {"unit": KERNELS[1], "result": "miss",
         "why": f"{GROUP}-shard2 did not finish (a partial cache)"},
        {"unit": "csrc/tinyext.cpp", "result": "miss",
         "why": "no shard compiles it (the binding or another C++ unit)"}]


def test_a_unit_whose_text_differs_from_the_shards_compiles_in_the_cell_and_is_named(tmp_path):
    """A group shared by torch series: a cell whose unit preprocesses otherwise (a header of
    its torch, a patch for its series only) misses the complete shard's entry; the unit is
    compiled in the cell, never read from another text, and the report says why."""
    done = _cache(tmp_path, f"{GROUP}-shard1", units=list(KERNELS))
    use = shardcache.choose([done], group=GROUP, key="k1")
    logged = {f"../../{KERNELS[0]}": "shard hit", f"../../{KERNELS[1]}": "miss"}
    miss, = shardcache.sort_results(logged, use, tuple(KERNELS))["misses"]
    assert miss["unit"] == KERNELS[1] and miss["result"] == "miss"
    assert miss["why"].startswith(f"{GROUP}-shard1 lists it but its cache had no entry")
    assert "its preprocessed text or its command line differs from the shard's" in miss["why"]


def test_the_release_runs_shards_then_cells_and_goes_on_after_a_failure(tmp_path):
    from tools.plan.groups import Group
    group = Group(GROUP, "k1", "tinyext", ("tinyext-3.11-cu130", "tinyext-3.12-cu130"))
    jobs = local_release.release_jobs(group, 2, group.cells, common=["--sdist=x"], cache=tmp_path / "c",
                                work=tmp_path / "w", out=tmp_path / "o", archs="90")
    assert [(j, k) for j, k, _ in jobs] == [(f"{GROUP}-shard1", "shard"),
                                            (f"{GROUP}-shard2", "shard"),
                                            ("tinyext-3.11-cu130", "cell"),
                                            ("tinyext-3.12-cu130", "cell")]
    assert jobs[1][2][2:7] == ["tools.shard", "run", GROUP, "--shard", "2/2"]
    assert "--shard-caches" in jobs[2][2] and "--sdist=x" in jobs[3][2]
    ran = []

    def runner(argv, log):
        ran.append(argv)
        return 8 if "2/2" in argv else 0     # the second shard fails

    results = local_release.run_release(jobs, tmp_path / "logs", runner=runner, say=lambda _: None)
    assert len(ran) == 4 and [r.status for r in results] == [0, 8, 0, 0]


def test_a_unit_list_estimates_measured_units_by_their_measurement(tmp_path):
    units = UnitList(tmp_path / "units.yaml", "1", {"cuda": ("a.cu", "b.cu")},
                     {"cuda": UnitCost(120, "stated rule")}, {"b.cu": 200.0})
    assert units.seconds("a.cu") == 120 and units.seconds("b.cu") == 200
    assert units.sharded() == ("a.cu", "b.cu")
