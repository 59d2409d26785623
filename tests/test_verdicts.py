"""tools.upstream.verdicts: which cell of each recipe the refresh probes against what is new in
the table, and each recipe's verdict from probe reports written by the probe's own code
(tests/fixtures/probes/make_reports.py): compiles / fails at <unit>: <first error> / not probed
(why).

The tables are the tests' small table (tests/conftest.py: torch 2.8 to 2.10) and the same with a
new series 2.11 (CUDA 12.6 and 13.0, PyPI's 13.0) and a new CUDA variant (12.9) of 2.10.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

from conftest import MINI_TABLE
from tools.plan.recipes.model import load_recipe
from tools.plan.table import parse_table
from tools.upstream.verdicts import (ProbeTarget, added_pairs, judge, probe_arch, probe_matrix,
                                     probe_targets, read_reports, shorten, verdict_lines)

WHY = "what this line of the recipe is for"
_spec = importlib.util.spec_from_file_location(
    "make_reports", Path(__file__).parent / "fixtures" / "probes" / "make_reports.py")
make_reports = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_reports)


@pytest.fixture
def tables(tmp_path):
    """(old, new): the small table, and it with torch 2.11 and CUDA 12.9 for torch 2.10."""
    data = copy.deepcopy(MINI_TABLE)
    old = parse_table(copy.deepcopy(data), tmp_path / "old.yaml")
    data["torch"]["2.11"] = {"release": "2.11.0", "python": ["3.10", "3.11", "3.12"],
                             "cuda": ["12.6", "13.0"], "pypi_cuda": "13.0", "manylinux": "2_28",
                             "cxx11_abi": True, "source": "test"}
    data["torch"]["2.10"]["cuda"] = ["12.6", "12.9", "13.0"]
    return old, parse_table(data, tmp_path / "new.yaml")


@pytest.fixture
def recipes(tables, write_recipe, good_recipe):
    """demo_ext: open ranges for 12.6 (from 2.9), 12.9 and 13.0 (from 2.10); stopped: 13.0 to 2.10."""
    _, new = tables
    demo = copy.deepcopy(good_recipe)
    demo["cuda"] = {"12.6": {"torch_from": "2.9", "reason": WHY},
                    "12.9": {"torch_from": "2.8", "reason": WHY},
                    "13.0": {"torch_from": "2.10", "reason": WHY}}
    stopped = copy.deepcopy(good_recipe)
    stopped["package"] = "stopped"
    stopped["cuda"] = {"13.0": {"torch_from": "2.9", "torch_to": "2.10", "reason": WHY}}
    stopped["archs"] = {"*": ["80", "90"]}
    return [load_recipe(write_recipe(demo), new), load_recipe(write_recipe(stopped), new)]


def test_added_pairs_name_new_series_and_new_cuda_variants(tables):
    old, new = tables
    assert added_pairs(old, new) == [("2.10", "12.9"), ("2.11", None)]
    assert added_pairs(new, new) == []


def test_one_cell_per_recipe_and_new_series_of_its_pypi_cuda(tables, recipes):
    old, new = tables
    targets = probe_targets(added_pairs(old, new), new, recipes)
    by = {(t.package, t.series, t.cuda): t for t in targets}
    series = by[("demo_ext", "2.11", None)]
    # built for 12.6 and 13.0; the PyPI build's CUDA (13.0) is probed, with its lowest Python
    assert (series.cell, series.cell_cuda, series.builds) == ("demo_ext-3.10-cu130", "13.0",
                                                              ("12.6", "13.0"))
    assert series.archs == "90"
    # the new variant of 2.10: its one CUDA version, which the range from 2.8 includes
    variant = by[("demo_ext", "2.10", "12.9")]
    assert (variant.cell, variant.builds) == ("demo_ext-3.10-cu129", ("12.9",))
    # a range that stops at 2.10 is not probed, and says why
    assert by[("stopped", "2.11", None)].cell is None
    assert by[("stopped", "2.11", None)].why == ("it builds no CUDA 12.6 wheels; its CUDA 13.0 "
                                                 "range is torch 2.9 to 2.10")
    assert by[("stopped", "2.10", "12.9")].why == "it builds no CUDA 12.9 wheels"
    assert probe_matrix(targets) == {"include": [
        {"package": "demo_ext", "series": "2.10", "cell": "demo_ext-3.10-cu129", "archs": "90"},
        {"package": "demo_ext", "series": "2.11", "cell": "demo_ext-3.10-cu130", "archs": "90"}]}


def test_the_probe_arch_is_90a_then_90_then_the_newest():
    assert probe_arch(("80", "90a", "100a")) == "90a"
    assert probe_arch(("75", "80", "90", "100")) == "90"
    assert probe_arch(("75", "80")) == "80"


def target(cell="demo_ext-3.10-cu130") -> ProbeTarget:
    return ProbeTarget("demo_ext", "2.11", None, cell, "13.0", "90", ("12.6", "13.0"))


def test_a_passed_probe_compiles(tmp_path):
    make_reports.write_report(tmp_path / "probe-demo_ext", "demo_ext-3.10-cu130", "passed")
    v = judge(target(), read_reports(tmp_path))
    assert v.state == "compiles"
    assert v.text == ("compiles (demo_ext-3.10-cu130, sm_90: causal_conv1d_bwd.cu 916 s, "
                      "causal_conv1d.cpp 176 s)")


def test_a_failed_unit_is_named_with_its_first_error_paths_shortened(tmp_path):
    make_reports.write_report(tmp_path, "demo_ext-3.10-cu130", "failed")
    v = judge(target(), read_reports(tmp_path))
    assert (v.state, v.unit) == ("fails", "csrc/selective_scan/selective_scan.cpp")
    assert v.error == ("torch/include/ATen/ATen.h:5: #error C++20 or later compatible compiler "
                       "is required to use ATen.")
    assert v.text == (f"fails at `{v.unit}`: {v.error} (demo_ext-3.10-cu130, sm_90)")
    assert verdict_lines([v]) == [f"torch 2.11, demo_ext: {v.text}"]


def test_a_probe_that_stopped_before_compiling_is_not_a_failure(tmp_path):
    make_reports.write_report(tmp_path, "demo_ext-3.10-cu130", "stopped")
    v = judge(target(), read_reports(tmp_path))
    assert v.state == "not probed"
    assert v.text == ("not probed (the probe of demo_ext-3.10-cu130 stopped in its python step: "
                      "uv could not install torch==2.15.0 for demo_ext-3.10-cu130: no matching "
                      "distribution)")


def test_not_probed_says_why(tmp_path):
    no_cell = ProbeTarget("stopped", "2.11", None, why="its CUDA 13.0 range is torch 2.9 to 2.10")
    assert judge(no_cell, {}).text == "not probed (its CUDA 13.0 range is torch 2.9 to 2.10)"
    assert judge(target(), None).text == (
        "not probed yet (`python -m tools.probe demo_ext-3.10-cu130 --archs 90`; the refresh "
        "workflow's probe jobs run it)")
    assert judge(target(), {}).text == ("not probed (no probe report for demo_ext-3.10-cu130: "
                                        "its probe job did not finish; see the run's log)")
    broken = tmp_path / "demo_ext-3.10-cu130" / "probe" / "probe.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")
    v = judge(target(), read_reports(tmp_path))
    assert v.text.startswith(f"not probed (its report could not be read: {broken}: "
                             "JSONDecodeError")


def test_reports_are_found_in_any_layout(tmp_path):
    # download-artifact puts each artifact in a folder of its own name
    for cell in ("a-3.10-cu130", "b-3.10-cu130"):
        make_reports.write_report(tmp_path / f"probe-{cell}" / "x", cell, "passed")
    assert sorted(read_reports(tmp_path)) == ["a-3.10-cu130", "b-3.10-cu130"]
    assert read_reports(tmp_path / "missing") == {}


def test_shorten_keeps_the_tree_and_torch_relative_paths():
    assert shorten("/w/c/probe/src/pkg-1.0/csrc/a.cu:3: error:  x\n y") == "csrc/a.cu:3: error: x y"
    assert shorten("/v/lib/python3.11/site-packages/torch/include/c10/x.h:1: e") == \
        "torch/include/c10/x.h:1: e"


def test_the_fixture_reports_are_what_the_probe_reader_reads(tmp_path):
    """The reports carry every field of ProbeReport and the steps, as probe_cell writes them."""
    path = make_reports.write_report(tmp_path, "demo_ext-3.10-cu130", "failed")
    data = json.loads(path.read_text())
    assert [s["name"] for s in data["steps"]] == ["toolchain", "source", "python", "commands",
                                                 "compile"]
    assert data["steps"][-1]["status"] == "failed" and data["error"]["kind"] == "compile"
    assert data["verdict"] == "failed" and data["torch"] == "2.15.0+cu132"
