"""tools.sitegen.placement: which files each variant index lists (labels, manifests, C++ ABI, cu12 wheels)."""

from __future__ import annotations


import pytest
from packaging.tags import Tag
from wheelfactory import make_wheel
from index_support import (
    ANY, build, listed, load_entry, page, project_json,
)

from tools.core.variant import Variant
from tools.plan.table import load_table
from tools.sitegen import placement


@pytest.mark.parametrize(
    "local, manifest, index",
    [
        ("cu130.torch2.13", None, "cu130/torch2.13"),  # our label
        ("cu128torch2.8", None, "cu128/torch2.8"),  # no separator
        ("cu.12.8.torch.2.10", None, "cu128/torch2.10"),  # dotted
        ("pt28cu126", None, "cu126/torch2.8"),  # PyG
        ("cu12torch2.8cxx11abiTRUE", None, "cu12/torch2.8"),  # Dao-AILab: any CUDA 12.x
        (None, {"cuda": "12.9", "torch": "2.8.0"}, "cu129/torch2.8"),  # manifest only
        ("cu129.torch2.8", {"cuda": "12.9", "torch": "2.8.0", "cxx11_abi": True}, "cu129/torch2.8"),
    ],
)
def test_variant_comes_from_manifest_or_label(tmp_path, local, manifest, index):
    fn = make_wheel(tmp_path / "wheels", "ext", "1.0", local=local, manifest=manifest).name
    report = build(tmp_path)
    assert report.variant_indexes == (index,)
    assert listed(tmp_path / "site", index + "/", "ext") == [fn]
    assert listed(tmp_path / "site", "", "ext") == [fn]


@pytest.mark.parametrize("local", [None, "cpu", "post1"])
def test_wheels_without_cuda_identity_are_only_in_the_combined_index(tmp_path, local):
    make_wheel(tmp_path / "wheels", "pure", "1.0", local=local, tag=ANY)
    report = build(tmp_path)
    assert report.variant_indexes == ()
    assert len(listed(tmp_path / "site", "", "pure")) == 1


def test_manifest_wins_over_an_unparsable_label(tmp_path):
    make_wheel(tmp_path / "wheels", "ext", "1.0", local="build7", manifest={"cuda": "13.0", "torch": "2.13.0"})
    assert build(tmp_path).variant_indexes == ("cu130/torch2.13",)


def test_each_torch_gets_its_own_index(tmp_path):
    w = tmp_path / "wheels"
    for label in ("cu128.torch2.8", "cu128.torch2.9", "cu128.torch2.10"):
        make_wheel(w, "ext", "1.0", local=label)
    report = build(tmp_path)
    # Numeric order: torch2.10 after torch2.9.
    assert report.variant_indexes == ("cu128/torch2.8", "cu128/torch2.9", "cu128/torch2.10")
    for label in ("2.8", "2.9", "2.10"):
        assert listed(tmp_path / "site", f"cu128/torch{label}/", "ext") == [
            f"ext-1.0+cu128.torch{label}-cp311-cp311-manylinux_2_28_x86_64.whl"
        ]


def test_any_cuda12_wheels_join_the_exact_12x_indexes_of_their_torch(tmp_path):
    w = tmp_path / "wheels"
    dao = make_wheel(w, "flash-attn", "2.8.3", local="cu12torch2.8cxx11abiTRUE").name
    dao312 = make_wheel(w, "flash-attn", "2.8.3", local="cu12torch2.8cxx11abiTRUE", tag="cp312-cp312-linux_x86_64").name
    ours = make_wheel(w, "flash-attn", "2.8.3", local="cu128.torch2.8").name  # exact build, cp311 only
    other = make_wheel(w, "causal-conv1d", "1.6", local="cu126.torch2.8").name  # makes cu126/torch2.8 exist
    make_wheel(w, "flash-attn", "2.8.3", local="cu130.torch2.8")  # CUDA 13: not a 12.x index
    report = build(tmp_path)
    site = tmp_path / "site"
    assert report.variant_indexes == ("cu12/torch2.8", "cu126/torch2.8", "cu128/torch2.8", "cu130/torch2.8")
    assert listed(site, "cu12/torch2.8/", "flash-attn") == [dao, dao312]
    assert listed(site, "cu126/torch2.8/", "flash-attn") == [dao, dao312]
    assert listed(site, "cu126/torch2.8/", "causal-conv1d") == [other]
    # cu128 has an exact cp311 build: that one wins; cp312 only exists as the generic wheel.
    assert sorted(listed(site, "cu128/torch2.8/", "flash-attn")) == sorted([ours, dao312])
    assert dao not in listed(site, "cu130/torch2.8/", "flash-attn")
    assert not (site / "cu129").exists()  # no index is invented for a CUDA nothing was built for


@pytest.mark.parametrize(
    "local, index",
    [
        ("cu12torch2.8cxx11abiTRUE", "cu12/torch2.8"),  # torch >= 2.7: C++11 ABI
        ("cu12torch2.8cxx11abiFALSE", None),
        ("cu12torch2.6cxx11abiFALSE", "cu12/torch2.6"),  # torch 2.6 on PyPI: pre-C++11 ABI
        ("cu12torch2.6cxx11abiTRUE", None),
        ("cu124.torch2.6.cxx11abi0", "cu124/torch2.6"),
        ("cu126.torch2.6", "cu126/torch2.6"),  # no ABI stated: trusted
    ],
)
def test_cxx11_abi_must_match_the_official_torch(tmp_path, local, index):
    fn = make_wheel(tmp_path / "wheels", "ext", "1.0", local=local).name
    report = build(tmp_path)
    assert report.variant_indexes == ((index,) if index else ())
    assert listed(tmp_path / "site", "", "ext") == [fn]


def test_official_abi_rule_agrees_with_the_global_table():
    table = load_table()
    for series, torch in table.torch.items():
        assert placement.official_cxx11_abi(table, series) == torch.cxx11_abi, series


def test_official_abi_table():
    table = load_table()
    assert placement.official_cxx11_abi(table, "2.7") and placement.official_cxx11_abi(table, "2.13")
    assert placement.official_cxx11_abi(table, "2.6") is False  # the PyPI build of 2.6: pre-C++11 ABI
    assert placement.official_cxx11_abi(table, "2.5") is None  # a series the table doesn't have


def test_place_variants_is_pure():
    e = load_entry("ext-1.0+cu128.torch2.8-py3-none-any.whl", Variant("12.8", "2.8"))
    assert placement.place_variants([e], table=load_table()) == {Variant("12.8", "2.8"): [e]}


def test_the_abi_rule_reads_the_table_it_is_given(mini_table):
    """A series the run's table lacks has no official ABI there: a wheel stating one stays out."""
    e = load_entry("ext-1.0+cu12torch2.6cxx11abiFALSE-py3-none-any.whl", Variant("12", "2.6", False))
    assert placement.place_variants([e], table=load_table()) == {Variant("12", "2.6"): [e]}
    assert "2.6" not in mini_table.torch and placement.place_variants([e], table=mini_table) == {}


def test_wheel_tags_are_packagings():
    assert placement.wheel_tags("ext-1.0+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl") == {
        Tag("cp311", "cp311", "manylinux_2_28_x86_64")}
    # a compressed tag set is expanded, and a build tag is not part of the tags
    assert placement.wheel_tags("ext-1.0-2-py2.py3-none-any.whl") == {
        Tag("py2", "none", "any"), Tag("py3", "none", "any")}


#: A stable-ABI build's manifest (finish writes ``abi`` from tools.finish.abi.check_claims).
STABLE_MANIFEST = {"cuda": "13.0", "torch": "2.14.1", "cxx11_abi": True,
                   "abi": {"python": "none", "torch": "stable", "torch_from": "2.10",
                           "serves": ["2.14", "2.13", "2.12", "2.11"]}}
STABLE_TAG = "py39-none-manylinux_2_28_x86_64"


def test_a_stable_abi_build_is_listed_in_every_torch_series_it_serves(tmp_path):
    w = tmp_path / "wheels"
    fn = make_wheel(w, "xformers", "0.0.35", local="cu130.torch2.14", manifest=STABLE_MANIFEST, tag=STABLE_TAG,
                    requires_dist=["torch>=2.10,<3"]).name
    exact = make_wheel(w, "ext", "1.0", local="cu130.torch2.13").name
    report = build(tmp_path)
    site = tmp_path / "site"
    # One file, four variant indexes; the exact build stays in its own.
    assert report.variant_indexes == ("cu130/torch2.11", "cu130/torch2.12", "cu130/torch2.13", "cu130/torch2.14")
    for series in ("2.11", "2.12", "2.13", "2.14"):
        assert listed(site, f"cu130/torch{series}/", "xformers") == [fn]
    assert listed(site, "cu130/torch2.13/", "ext") == [exact] and listed(site, "cu130/torch2.12/", "ext") == []
    # The ledger keeps which series it serves; the JSON tells the selector; the label says 2.14.
    ledger = (tmp_path / "ledger.json").read_text()
    assert '"serves": ["2.14", "2.13", "2.12", "2.11"], "torch": "2.14"' in ledger
    data = project_json(site, "cu130/torch2.11/simple/xformers/index.json")
    assert data["files"][0]["_cuwheels"]["serves"] == ["2.14", "2.13", "2.12", "2.11"]
    assert data["files"][0]["_cuwheels"]["torch"] == "2.14"
    # The front page's coverage agrees: the one build, for Python 3.9 and newer, in each column.
    html = page(site, "index.html")
    row = html[html.index("<tr><td>0.0.35</td>"):].split("</tr>", 1)[0]
    assert row.count('<span class="py yes">3.9+</span>') == 4


def test_a_stable_abi_build_with_a_bad_serves_list_is_refused(tmp_path):
    bad = {**STABLE_MANIFEST, "abi": {**STABLE_MANIFEST["abi"], "serves": "2.11"}}
    make_wheel(tmp_path / "wheels", "xformers", "0.0.35", local="cu130.torch2.14", manifest=bad, tag=STABLE_TAG)
    report = build(tmp_path)
    assert [r.reason for r in report.rejected] and "abi.serves must be a non-empty list" in report.rejected[0].reason


def test_a_release_candidates_build_is_in_the_pre_release_index_only(tmp_path):
    """Our label of a build against torch 2.15's release candidate (the table has 2.15): the
    wheel is listed in pre/cu132/torch2.15 and nowhere else, not even the combined simple/;
    the final's build of the same version sits in cu132/torch2.15, and sorts after it."""
    w = tmp_path / "wheels"
    rc = make_wheel(w, "ext", "1.0", local="cu132.torch2.15rc.git0123abc").name
    final = make_wheel(w, "ext", "1.0", local="cu132.torch2.15").name
    report = build(tmp_path)
    assert report.variant_indexes == ("cu132/torch2.15", "pre/cu132/torch2.15")
    assert listed(tmp_path / "site", "pre/cu132/torch2.15/", "ext") == [rc]
    assert listed(tmp_path / "site", "cu132/torch2.15/", "ext") == [final]
    assert listed(tmp_path / "site", "", "ext") == [final]
    assert b"CUDA 13.2 \xc2\xb7 torch 2.15 (release candidate)" in \
        (tmp_path / "site" / "index.html").read_bytes()
    assert placement.is_candidate_build("1.0+cu132.torch2.15rc.git0123abc")
    assert not placement.is_candidate_build("1.0+cu132.torch2.15")
    assert not placement.is_candidate_build("1.0rc1+cu132.torch2.15")  # the package's own rc


#: One version's wheel for each platform the project builds for (tools.core.platforms).
PLATFORM_TAGS = ("cp312-cp312-manylinux_2_28_x86_64", "cp312-cp312-manylinux_2_28_aarch64",
                 "cp312-cp312-win_amd64")


def test_each_platforms_wheel_of_a_version_is_in_the_same_variant_index(tmp_path):
    """The x86_64, aarch64 and Windows wheels of one version sit side by side in their (CUDA,
    torch) index and in simple/; an installer tells them apart by their platform tags."""
    w = tmp_path / "wheels"
    names = sorted(make_wheel(w, "flash-attn", "2.8.3", local="cu130.torch2.14", tag=t).name
                   for t in PLATFORM_TAGS)
    report = build(tmp_path)
    assert report.variant_indexes == ("cu130/torch2.14",) and not report.rejected
    assert sorted(listed(tmp_path / "site", "cu130/torch2.14/", "flash-attn")) == names
    assert sorted(listed(tmp_path / "site", "", "flash-attn")) == names
    # The ledger holds three files of one version: identities differ by their tags.
    assert all(n in (tmp_path / "ledger.json").read_text() for n in names)


@pytest.mark.parametrize("tags, index", [
    ("cp312-cp312-win_amd64", "cu12/torch2.8"),                 # MSVC: no libstdc++ ABI to mismatch
    ("cp312-cp312-manylinux_2_28_aarch64", None),              # Linux: the rule holds
    ("cp312-cp312-manylinux_2_28_x86_64", None),
])
def test_the_cxx11_abi_rule_is_linuxs(tmp_path, tags, index):
    """Dao-AILab's labels state a C++ ABI on Windows wheels too (``cxx11abiFALSE`` for torch 2.8,
    whose Linux wheels use the new one): a Windows wheel is placed whatever its label says."""
    make_wheel(tmp_path / "wheels", "ext", "1.0", local="cu12torch2.8cxx11abiFALSE", tag=tags)
    assert build(tmp_path).variant_indexes == ((index,) if index else ())


def test_a_generic_cuda12_wheel_yields_only_to_an_exact_build_of_its_own_platform(tmp_path):
    """An exact cu128 x86_64 build keeps the generic x86_64 wheel out of cu128/torch2.8, not
    the generic aarch64 one, which is the only aarch64 wheel there."""
    w = tmp_path / "wheels"
    exact = make_wheel(w, "ext", "1.0", local="cu128.torch2.8", tag=PLATFORM_TAGS[0]).name
    make_wheel(w, "ext", "1.0", local="cu12torch2.8cxx11abiTRUE", tag=PLATFORM_TAGS[0])
    generic_arm = make_wheel(w, "ext", "1.0", local="cu12torch2.8cxx11abiTRUE", tag=PLATFORM_TAGS[1]).name
    build(tmp_path)
    assert sorted(listed(tmp_path / "site", "cu128/torch2.8/", "ext")) == sorted([exact, generic_arm])
