"""The pin rule (tools.sitegen.pins): which later files of a published version installers would
take instead of a published one, by packaging.tags' ranking, and which only grow the release."""

from __future__ import annotations

import pytest
from packaging.tags import Tag

from tools.sitegen.pins import machines, takeovers, with_build_number

V = "demo-2.0+cu128.torch2.8"

# (published tags, later tags, refused): each decided by the machines that install both.
CASES = [
    ("cp311-cp311-manylinux_2_28_x86_64", "cp311-cp311-manylinux_2_34_x86_64", True),  # glibc 2.34 ranks it first
    ("py3-none-any", "py311-none-any", True),  # Python 3.11 ranks py311 above py3
    ("py3-none-any", "py2.py3-none-any", True),  # py3 in both: a tie, either may be taken
    ("cp311-cp311-manylinux_2_28_x86_64", "cp311-cp311-manylinux_2_17_x86_64.manylinux_2_28_x86_64", True),
    ("cp311-abi3-manylinux_2_28_x86_64", "cp311-cp311-manylinux_2_28_x86_64", True),  # cp311 above abi3
    ("cp311-abi3-manylinux_2_28_x86_64", "cp312-cp312-manylinux_2_28_x86_64", True),  # 3.12 installs abi3 too
    ("py3-none-any", "cp312-cp312-manylinux_2_28_x86_64", True),  # a platform wheel above any
    ("cp311-cp311-macosx_11_0_arm64", "cp311-cp311-macosx_14_0_arm64", True),
    ("cp311-cp311-linux_x86_64", "cp311-cp311-manylinux_2_28_x86_64", True),
    ("cp311-cp311-manylinux_2_28_x86_64", "cp312-cp312-manylinux_2_28_x86_64", False),  # another Python
    ("cp311-cp311-manylinux_2_28_x86_64", "cp311-cp311-manylinux_2_28_aarch64", False),  # another arch
    ("cp311-cp311-manylinux_2_28_x86_64", "cp311-cp311-manylinux_2_17_x86_64", False),  # only older glibc
    ("cp39-abi3-manylinux_2_28_x86_64", "cp313-cp313t-manylinux_2_28_x86_64", False),  # abi3 is not free-threaded
    ("cp311-cp311-win_amd64", "cp311-cp311-manylinux_2_28_x86_64", False),
    ("cp311-cp311-macosx_11_0_arm64", "cp311-cp311-macosx_10_9_x86_64", False),
    ("cp311-cp311-manylinux_2_28_x86_64", "cp311-cp311-musllinux_1_2_x86_64", False),
]


@pytest.mark.parametrize(("published", "later", "refused"), CASES, ids=[f"{p}<-{n}" for p, n, _ in CASES])
def test_a_later_file_is_refused_exactly_where_some_machine_would_take_it(published, later, refused):
    new = f"{V}-{later}.whl"
    reasons = takeovers([new], {f"{V}-{published}.whl": None}, {})
    assert (new in reasons) is refused, reasons
    if refused:
        assert f"instead of {V}-{published}.whl" in reasons[new]
        assert "rule: a new file of a published version must never be chosen over a published one" in reasons[new]
        assert f"e.g. {V}-1-{later}.whl" in reasons[new]


def test_a_higher_build_tag_is_a_rebuild_and_an_equal_or_lower_one_is_not():
    published = {f"{V}-2-cp311-cp311-manylinux_2_28_x86_64.whl": None}
    assert takeovers([f"{V}-3-cp311-cp311-manylinux_2_34_x86_64.whl"], published, {}) == {}
    for build in ("1", "2"):
        new = f"{V}-{build}-cp311-cp311-manylinux_2_34_x86_64.whl"
        assert f"e.g. {V}-3-cp311-cp311-manylinux_2_34_x86_64.whl" in takeovers([new], published, {})[new]


def test_a_removed_file_still_holds_its_pin_and_other_versions_or_projects_do_not():
    old = f"{V}-cp311-cp311-manylinux_2_28_x86_64.whl"
    new = f"{V}-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert "removed since" in takeovers([new], {}, {old: None})[new]
    other_version = "demo-2.1+cu128.torch2.8-cp311-cp311-manylinux_2_34_x86_64.whl"
    other_project = "other-2.0+cu128.torch2.8-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert takeovers([other_version, other_project], {old: None}, {}) == {}


def test_the_machines_rank_as_packaging_does():
    tags = {Tag("cp311", "cp311", "manylinux_2_28_x86_64"), Tag("py3", "none", "any")}
    found = {m.name: m.order for m in machines(tags)}
    order = found["CPython 3.11 on manylinux_2_28_x86_64"]
    assert order.index(Tag("cp311", "cp311", "manylinux_2_28_x86_64")) < order.index(Tag("py3", "none", "any"))
    assert Tag("cp311", "cp311", "manylinux2014_x86_64") in order  # the legacy alias of 2.17
    assert "CPython 3.13 free-threaded on manylinux_2_28_x86_64" in found


def test_with_build_number_replaces_or_adds_the_build_tag():
    assert with_build_number(f"{V}-py3-none-any.whl", 1) == f"{V}-1-py3-none-any.whl"
    assert with_build_number(f"{V}-4-py3-none-any.whl", 5) == f"{V}-5-py3-none-any.whl"
