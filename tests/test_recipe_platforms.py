"""A recipe's platforms: where it builds besides Linux x86_64, why, and the bad entries named."""

from __future__ import annotations

import pytest

from tests.test_table_platforms import with_platforms
from tools.core.errors import RecipeError
from tools.plan.cells import cells_for
from tools.plan.recipes.model import load_all, load_recipe
from tools.plan.table import parse_table


@pytest.fixture
def table(tmp_path):
    return parse_table(with_platforms(), tmp_path / "table.yaml")


def test_without_a_block_every_platform_with_a_torch_build_is_planned(write_recipe, good_recipe,
                                                                      table):
    recipe = load_recipe(write_recipe(good_recipe), table)
    cells = cells_for(recipe, table)
    by_platform = {p: [c.id for c in cells if c.platform == p] for p in table.platforms}
    # only 2.10 has aarch64 and Windows builds in this table: 13.0 there, and 12.6 on Windows
    # (which the recipe doesn't build)
    assert by_platform["linux_aarch64"] == [f"demo_ext-3.{m}-cu130-aarch64" for m in range(10, 15)]
    assert by_platform["win_amd64"] == [f"demo_ext-3.{m}-cu130-win" for m in range(10, 15)]
    arm = next(c for c in cells if c.platform == "linux_aarch64")
    assert (arm.image, arm.platform_tag, arm.default_torch) == \
        ("pytorch/manylinuxaarch64-builder:cuda13.0", "manylinux_2_28_aarch64", True)
    assert next(c for c in cells if c.platform == "win_amd64").image == ""


def test_exclude_and_archs_narrow_a_platform(write_recipe, good_recipe, table):
    good_recipe["platforms"] = {
        "win_amd64": {"exclude": True, "reason": "setup.py has no MSVC flags"},
        "linux_aarch64": {"archs": {"13.0": ["90", "110"]}, "reason": "Grace Hopper and Thor"}}
    recipe = load_recipe(write_recipe(good_recipe), table)
    assert not recipe.builds_on("win_amd64") and recipe.builds_on("linux_aarch64")
    cells = cells_for(recipe, table)
    assert {c.platform for c in cells} == {"linux_x86_64", "linux_aarch64"}
    assert {c.archs for c in cells if c.platform == "linux_aarch64"} == {("90", "110")}
    assert recipe.archs_for("13.0", table) == ("80", "90")  # x86_64 keeps the recipe's list


def test_archs_inherit_takes_the_platforms_default(write_recipe, good_recipe, table):
    good_recipe["archs"] = "inherit"
    recipe = load_recipe(write_recipe(good_recipe), table)
    assert recipe.archs_for("13.0", table, "linux_aarch64") == ("80", "90", "100", "110", "120")


@pytest.mark.parametrize("block,expect", [
    # a platform the table lacks
    ({"macosx_arm64": {"reason": "Apple silicon users ask"}},
     "platforms.macosx_arm64: the table has no platform 'macosx_arm64'"),
    # every line says why
    ({"win_amd64": {"exclude": True}}, "platforms.win_amd64.reason: required key is missing"),
    ({"win_amd64": {"exclude": True, "reason": "no"}}, "reason is too short"),
    # an arch the platform's nvcc for that CUDA can't compile
    ({"linux_aarch64": {"archs": {"13.0": ["90", "121"]}, "reason": "Grace Blackwell parts"}},
     "platforms.linux_aarch64.archs: sm_121 cannot be compiled by CUDA 13.0 on linux_aarch64"),
    # a CUDA version the recipe doesn't build
    ({"linux_aarch64": {"archs": {"12.6": ["90"]}, "reason": "an older toolkit there"}},
     "platforms.linux_aarch64.archs.12.6: '12.6' is not one of this recipe's CUDA versions"),
    # excluded and given archs at once
    ({"win_amd64": {"exclude": True, "archs": {"*": ["90"]}, "reason": "contradicts itself"}},
     "an excluded platform builds nothing"),
    # Linux x86_64 is never excluded here
    ({"linux_x86_64": {"exclude": True, "reason": "aarch64 only, say"}},
     "every recipe builds for linux_x86_64"),
    # a typo of a key
    ({"win_amd64": {"excluded": True, "reason": "setup.py is Linux only"}},
     "platforms.win_amd64.excluded: unknown key"),
])
def test_bad_platform_entries_are_named(write_recipe, good_recipe, table, block, expect):
    good_recipe["platforms"] = block
    folder = write_recipe(good_recipe)
    with pytest.raises(RecipeError) as err:
        load_recipe(folder, table)
    assert expect in str(err.value)
    assert str(folder / "recipe.yaml") in str(err.value)
    assert "fix:" in str(err.value) or "required key" in str(err.value) or "too short" in str(err.value)


def test_the_recipes_arch_list_checked_on_every_platform(write_recipe, good_recipe, table):
    # Not named under platforms: the recipe's own list is built on aarch64 and must compile there.
    table.platforms["linux_aarch64"].archs["13.0"] = ("80", "100")
    with pytest.raises(RecipeError) as err:
        load_recipe(write_recipe(good_recipe), table)
    assert "archs: sm_90 cannot be compiled by CUDA 13.0 on linux_aarch64" in str(err.value)


def test_every_repository_recipe_says_why_per_platform():
    for recipe in load_all():
        assert set(recipe.platforms or {}) == {"linux_aarch64", "win_amd64"}, recipe.package
        assert all(len(c.reason) > 30 for c in recipe.platforms.values()), recipe.package
    excluded = {r.package for r in load_all() if not r.builds_on("win_amd64")}
    assert excluded == {"causal_conv1d", "grouped_gemm", "mamba_ssm"}
