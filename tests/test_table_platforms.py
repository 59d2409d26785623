"""The table's wheel platforms: the repository's facts, and every bad entry named."""

from __future__ import annotations

import copy
import json

import pytest

from tests.conftest import MINI_TABLE
from tools.core.errors import TableError
from tools.core.platforms import PLATFORMS
from tools.plan.table import TABLE_SCHEMA_FILE, load_table, parse_table, version_key

ARM = {"tag": "manylinux_{manylinux}_aarch64", "build": "container",
       "images": {"13.0": "pytorch/manylinuxaarch64-builder:cuda13.0"},
       "default_archs": {"13.0": ["80", "90", "100", "110", "120"]}, "source": "test"}
WIN = {"tag": "win_amd64", "build": "native", "toolchain": "Visual Studio 2022 and CUDA",
       "source": "test"}


def with_platforms() -> dict:
    """The small table with the three platforms and 2.10 built on aarch64 and Windows."""
    data = copy.deepcopy(MINI_TABLE)
    data["platforms"] = {"linux_x86_64": {"tag": "manylinux_{manylinux}_x86_64",
                                          "build": "container", "source": "test"},
                         "linux_aarch64": copy.deepcopy(ARM), "win_amd64": copy.deepcopy(WIN)}
    data["torch"]["2.10"]["platforms"] = {
        "linux_aarch64": {"pypi_cuda": "13.0", "cuda": ["13.0"], "source": "test"},
        "win_amd64": {"pypi_cuda": None, "cuda": ["12.6", "13.0"], "source": "test"}}
    return data


def test_the_repository_table_has_three_platforms_with_sources():
    table = load_table()
    assert list(table.platforms) == ["linux_x86_64", "linux_aarch64", "win_amd64"]
    for platform in table.platforms.values():
        assert len(platform.source) > 10, platform.name
    for entry in (e for t in table.torch.values() for e in t.platforms.values()):
        assert len(entry.source) > 10, entry


def test_each_table_platform_is_one_of_the_platforms_identities(tmp_path):
    """The table says how a platform's wheels are tagged and built; which platform it is (OS,
    arch) is tools.core.platforms', the one Platform type."""
    table = parse_table(with_platforms(), tmp_path / "table.yaml")
    assert {name: (p.identity.os, p.identity.arch) for name, p in table.platforms.items()} == {
        "linux_x86_64": ("linux", "x86_64"), "linux_aarch64": ("linux", "aarch64"),
        "win_amd64": ("windows", "amd64")}
    assert all(p.identity is PLATFORMS[p.name] for p in load_table().platforms.values())


def test_the_repository_table_facts_read_from_pypi():
    table = load_table()
    # PyPI's aarch64 wheels are CUDA builds from 2.11 on, CPU-only before
    assert table.torch["2.10"].pypi_cuda_on("linux_aarch64") is None
    assert [table.torch[s].pypi_cuda_on("linux_aarch64") for s in ("2.11", "2.14", "2.15")] == \
        ["13.0", "13.0", "13.2"]
    # PyPI's Windows wheels are CPU-only for every series (torch/version.py: +cpu)
    assert all(t.pypi_cuda_on("win_amd64") is None for t in table.torch.values())
    # Linux x86_64 is the row itself
    assert table.torch["2.12"].cuda_on("linux_x86_64") == table.torch["2.12"].cuda
    assert table.image("13.0", "linux_aarch64") == "pytorch/manylinuxaarch64-builder:cuda13.0"
    assert table.image("13.0", "win_amd64") == ""  # native: no image
    # torch adds sm_110 on aarch64 for CUDA 13.0 (pytorch's aarch64 build script)
    assert "110" in table.default_archs("13.0", "linux_aarch64")
    assert "110" not in table.default_archs("13.0")
    assert table.platforms["linux_aarch64"].wheel_tag("2_28") == "manylinux_2_28_aarch64"
    assert table.platforms["win_amd64"].wheel_tag("2_28") == "win_amd64"
    # ordered numerically all the same
    assert list(table.torch) == sorted(table.torch, key=version_key)


def test_a_table_without_platforms_is_linux_x86_64_only(tmp_path):
    table = parse_table(copy.deepcopy(MINI_TABLE), tmp_path / "table.yaml")
    assert list(table.platforms) == ["linux_x86_64"]
    assert table.torch["2.10"].cuda_on("linux_aarch64") == ()
    assert table.platforms["linux_x86_64"].wheel_tag("2_28") == "manylinux_2_28_x86_64"


def test_platforms_parse(tmp_path):
    table = parse_table(with_platforms(), tmp_path / "table.yaml")
    assert table.torch["2.10"].cuda_on("win_amd64") == ("12.6", "13.0")
    assert table.torch["2.9"].cuda_on("win_amd64") == ()  # no entry: no build known there
    assert table.torch_for_cuda("13.0", "linux_aarch64") == ["2.10"]


@pytest.mark.parametrize("mutate,expect", [
    # a platform the ids have no part for
    (lambda t: t["platforms"].__setitem__("linux_riscv64", copy.deepcopy(ARM)),
     "platforms.linux_riscv64: is not a platform the cell ids have a part for"),
    # a build kind nobody runs
    (lambda t: t["platforms"]["linux_aarch64"].__setitem__("build", "qemu"),
     "platforms.linux_aarch64.build: 'qemu' is not one of container, native"),
    # a container platform without images
    (lambda t: t["platforms"]["linux_aarch64"].pop("images"),
     "platforms.linux_aarch64.images: a container platform needs a builder image"),
    # a native platform that says nothing of its toolchain
    (lambda t: t["platforms"]["win_amd64"].pop("toolchain"),
     "platforms.win_amd64.toolchain: a native platform must say what its runner needs"),
    # a tag with a space
    (lambda t: t["platforms"]["win_amd64"].__setitem__("tag", "win amd64"),
     "'win amd64' is not a wheel platform tag"),
    # a default arch the platform's nvcc can't compile
    (lambda t: t["platforms"]["linux_aarch64"]["default_archs"]["13.0"].append("70"),
     "sm_70 is not in what CUDA 13.0 compiles on linux_aarch64"),
    # a series built on a platform the table lacks
    (lambda t: t["torch"]["2.10"]["platforms"].__setitem__(
        "macosx_arm64", {"pypi_cuda": None, "cuda": [], "source": "test"}),
     "torch.2.10.platforms.macosx_arm64: is not a platform of the table"),
    # a CUDA build on aarch64 with no image to build in
    (lambda t: t["torch"]["2.10"]["platforms"]["linux_aarch64"]["cuda"].append("12.6"),
     "CUDA 12.6 has no builder image for linux_aarch64"),
    # PyPI's CUDA not among the builds
    (lambda t: t["torch"]["2.10"]["platforms"]["win_amd64"].__setitem__("pypi_cuda", "12.9"),
     "torch.2.10.platforms.win_amd64.pypi_cuda: CUDA 12.9 is not in this entry's cuda list"),
    # Linux x86_64's facts belong in the row
    (lambda t: t["torch"]["2.10"]["platforms"].__setitem__(
        "linux_x86_64", {"pypi_cuda": "13.0", "cuda": ["13.0"], "source": "test"}),
     "linux_x86_64 is the row itself"),
    # every value cites where it was read
    (lambda t: t["torch"]["2.10"]["platforms"]["win_amd64"].pop("source"),
     "torch.2.10.platforms.win_amd64.source: required key is missing"),
    # an unquoted null spelled as a number
    (lambda t: t["torch"]["2.10"]["platforms"]["win_amd64"].__setitem__("pypi_cuda", 13.0),
     "pypi_cuda: must be a string or null"),
])
def test_bad_platforms_are_named(tmp_path, mutate, expect):
    data = with_platforms()
    mutate(data)
    with pytest.raises(TableError) as err:
        parse_table(data, tmp_path / "table.yaml")
    assert expect in str(err.value)
    assert str(tmp_path / "table.yaml") in str(err.value)


@pytest.mark.parametrize("key,value", [("tag", "win amd64"), ("build", "qemu")])
def test_a_platforms_shape_rule_is_the_schema_files(tmp_path, key, value):
    """The tag's characters and the two ways of building are table.schema.json's, in its words."""
    rules = json.loads(TABLE_SCHEMA_FILE.read_text())["$defs"]["platform"]["properties"][key]
    data = with_platforms()
    data["platforms"]["win_amd64"][key] = value
    with pytest.raises(TableError) as err:
        parse_table(data, tmp_path / "table.yaml")
    assert (f"platforms.win_amd64.{key}: {rules['x-rule'].format(value=repr(value))}\n"
            f"    fix: {rules['x-fix']}") in str(err.value)
