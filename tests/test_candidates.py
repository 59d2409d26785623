"""tools.upstream.candidates: release candidates read from PyTorch's test index's page (the plain
builds to read, the CUDA variants), which series gets a candidate row, and the row's values.
The whole --rc refresh, its promotion and its refusals run in tests/test_refresh.py against a
registry on 127.0.0.1."""

from __future__ import annotations

import copy

from conftest import MINI_TABLE
from tools.plan.table import parse_table
from tools.upstream.candidates import (candidate_files, candidate_index, newest_candidates,
                                       row_values, table_where)
from tools.upstream.registry import Registry, TorchFacts

BASE = "https://download.pytorch.org/whl/test/torch/"
PAGE = """
<a href="/whl/test/torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl#sha256=1">x</a>
<a href="/whl/test/torch-2.11.0-cp313-cp313t-manylinux_2_28_x86_64.whl#sha256=2">x</a>
<a href="/whl/test/torch-2.11.0-cp312-cp312-manylinux_2_28_aarch64.whl#sha256=3">x</a>
<a href="/whl/test/cu126/torch-2.11.0%2Bcu126-cp312-cp312-manylinux_2_28_x86_64.whl#sha256=4">x</a>
<a href="/whl/test/cu130/torch-2.11.0%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl#sha256=5">x</a>
<a href="/whl/test/cpu/torch-2.11.0%2Bcpu-cp312-cp312-manylinux_2_28_x86_64.whl#sha256=6">x</a>
<a href="/whl/test/cu128/torch-2.10.1%2Bcu128-cp312-cp312-manylinux_2_28_x86_64.whl">x</a>
"""


def test_the_page_gives_the_plain_builds_to_read_and_the_cuda_variants():
    files = candidate_files(PAGE, BASE)
    assert sorted(files) == ["2.10.1", "2.11.0"]
    assert files["2.11.0"]["cuda"] == ["12.6", "13.0"]  # +cpu is no CUDA variant
    assert [f["filename"] for f in files["2.11.0"]["plain"]] == [
        "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.11.0-cp313-cp313t-manylinux_2_28_x86_64.whl"]  # x86_64 only
    first = files["2.11.0"]["plain"][0]
    assert first["url"] == ("https://download.pytorch.org/whl/test/"
                            "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert first["size"] is None  # asked of the server when read
    assert files["2.10.1"] == {"plain": [], "cuda": ["12.8"]}


def test_only_a_series_newer_than_every_release_row_without_a_final_gets_a_candidate(tmp_path):
    table = parse_table(copy.deepcopy(MINI_TABLE), tmp_path / "table.yaml")  # 2.8 to 2.10
    files = candidate_files(PAGE, BASE)
    # 2.10.1 is a patch release's candidate of a series the table has: never a row
    assert newest_candidates(files, table, {"2.10": "2.10.0"}) == {"2.11": "2.11.0"}
    # once PyPI has 2.11's final, the refresh's ordinary rows take it
    assert newest_candidates(files, table, {"2.11": "2.11.0"}) == {}


def test_the_rows_values():
    assert candidate_index(Registry()) == "https://download.pytorch.org/whl/test/"
    facts = TorchFacts("2.11", "2.11.0", pypi_cuda="13.0", variants=["12.6", "13.0", "13.4"])

    class Table:  # the two CUDA entries the test needs
        cuda = {"12.6": None, "13.0": None}
    assert row_values(facts, Table) == (["12.6", "13.0"], ["13.4"])
    assert table_where("recipes/table.yaml", "2.11") == 'recipes/table.yaml: torch."2.11"'
