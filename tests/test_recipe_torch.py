"""tools.plan.recipes.torch: a recipe's torch series per CUDA version, as ranges that narrow the
table (or explicit lists), with exclusions; every bad range or exclusion named with the file,
the key, the rule and the fix.

The rules run on the tests' small table (tests/conftest.py, MINI_TABLE: torch 2.8 for CUDA 12.6
and 12.9, 2.9 and 2.10 for 12.6 and 13.0); one test runs ``python -m tools.recipe`` on a copy of
a repository recipe against the repository's table.
"""

from __future__ import annotations

import copy
import shutil

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from tools import RECIPES_DIR
from tools import recipe as recipe_command
from tools.core.errors import RecipeError
from tools.plan.recipes.model import load_recipe
from tools.plan.recipes.torch import Exclusion, TorchRange, parse_torch_targets
from tools.plan.schema import Problems

WHY = "what this line of the recipe is for"
#: A recipe's cuda: in the range form: 12.9 builds 2.8; 13.0 builds 2.10 (its default) and 2.9.
RANGES = {"12.9": {"torch_from": "2.8", "reason": WHY},
          "13.0": {"torch_from": "2.9", "reason": WHY}}


def targets(table, cuda, torch=None, exclude=None, python=">=3.9"):
    """``parse_torch_targets`` on raw blocks: (targets, the problems' first lines)."""
    p = Problems(table.path, RecipeError)
    found = parse_torch_targets(p, copy.deepcopy(cuda), torch, exclude, table,
                                SpecifierSet(python))
    return found, [item.split("\n")[0] for item in p.items]


def resolved(found) -> dict[str, tuple[str, ...]]:
    return {t.cuda: t.torch for t in found.cuda}


def test_a_range_builds_the_tables_series_in_it_newest_first(mini_table):
    found, problems = targets(mini_table, {"12.6": {"torch_from": "2.8", "reason": WHY},
                                           **RANGES})
    assert problems == []
    # 12.6 is published for all three series, 12.9 for 2.8 only, 13.0 for 2.9 and 2.10
    assert resolved(found) == {"12.6": ("2.10", "2.9", "2.8"), "12.9": ("2.8",),
                               "13.0": ("2.10", "2.9")}
    assert [t.range for t in found.cuda] == [TorchRange("2.8"), TorchRange("2.8"),
                                             TorchRange("2.9")]


def test_the_recipes_own_range_narrows_every_cuda_version(mini_table):
    cuda = {"12.6": {"torch_from": "2.8", "reason": WHY}, "13.0": {"torch_to": "2.9", "reason": WHY}}
    found, problems = targets(mini_table, cuda, torch={"from": "2.9", "reason": WHY})
    assert problems == []
    # 12.6's own bound (2.8) is below the recipe's: the recipe's wins; 13.0 takes the recipe's
    # lower bound and keeps its own upper one.
    assert resolved(found) == {"12.6": ("2.10", "2.9"), "13.0": ("2.9",)}
    assert found.range == TorchRange("2.9")


def test_exclusions_take_out_pairs_for_one_cuda_or_all(mini_table):
    cuda = {"12.6": {"torch_from": "2.8", "reason": WHY}, "13.0": {"torch_from": "2.9", "reason": WHY}}
    found, problems = targets(mini_table, cuda,
                              exclude=[{"torch": "2.9", "cuda": "12.6", "reason": WHY}])
    assert problems == []
    assert resolved(found) == {"12.6": ("2.10", "2.8"), "13.0": ("2.10", "2.9")}
    assert found.exclude == (Exclusion("2.9", "12.6", WHY),)
    found, problems = targets(mini_table, cuda, exclude=[{"torch": "2.10", "reason": WHY}])
    assert problems == []
    # without cuda: every CUDA version; the newest left is the default
    assert resolved(found) == {"12.6": ("2.9", "2.8"), "13.0": ("2.9",)}


def test_a_series_without_a_python_the_recipe_allows_is_left_out(mini_table):
    # torch 2.9 and 2.10 start at Python 3.10; 2.8 has 3.9
    found, problems = targets(mini_table, {"12.6": {"torch_from": "2.8", "reason": WHY}},
                              python="<3.10")
    assert problems == [] and resolved(found) == {"12.6": ("2.8",)}


def test_a_list_is_kept_as_written_beside_a_range(mini_table):
    found, problems = targets(mini_table, {"12.6": {"torch": ["2.8", "2.10"], "reason": WHY},
                                           "13.0": {"torch_from": "2.9", "reason": WHY}})
    assert problems == []
    assert resolved(found) == {"12.6": ("2.8", "2.10"), "13.0": ("2.10", "2.9")}
    assert found.cuda[0].range is None


def test_why_a_pair_is_not_built(write_recipe, good_recipe, mini_table):
    good_recipe["cuda"] = {"12.6": {"torch": ["2.8"], "reason": WHY},
                           "13.0": {"torch_from": "2.9", "torch_to": "2.9", "reason": WHY}}
    good_recipe["archs"] = {"*": ["80", "90"]}
    r = load_recipe(write_recipe(good_recipe), mini_table)
    assert r.why_not("2.9", "13.0", mini_table) is None
    assert r.why_not("2.10", "13.0", mini_table) == "its CUDA 13.0 range is torch 2.9 only"
    assert r.why_not("2.9", "12.6", mini_table) == "for CUDA 12.6 it lists torch 2.8"
    assert r.why_not("2.8", "12.9", mini_table) == "it builds no CUDA 12.9 wheels"
    good_recipe["cuda"]["13.0"] = {"torch_from": "2.9", "reason": WHY}
    good_recipe["exclude"] = [{"torch": "2.10", "cuda": "13.0", "reason": "fails to compile: C++20"}]
    r = load_recipe(write_recipe(good_recipe), mini_table)
    assert r.target("13.0").torch == ("2.9",)
    assert r.why_not("2.10", "13.0", mini_table) == "excluded for CUDA 13.0: fails to compile: C++20"


_CUDA = object()  # the case replaces the whole cuda: block

# (id, changes to the recipe {key: value}, substrings the message must hold)
BAD = [
    # ---- a range that includes no series the table knows
    ("from-newer-than-the-table", {"cuda/13.0/torch_from": "2.11"},
     ["cuda.13.0.torch_from: torch '2.11' is not in the compatibility table; the table's newest "
      "is 2.10, so a range from it includes no series the table knows",
      "fix: use one of 2.8, 2.9, 2.10, or add the series to the table first"]),
    ("range-with-no-series-of-its-cuda", {"cuda/12.9/torch_from": "2.9"},
     ["cuda.12.9: the torch range 2.9 and newer includes no series the table publishes for CUDA "
      "12.9 (the table publishes CUDA 12.9 for torch 2.8)",
      "fix: widen the range to one of those series, or drop CUDA 12.9"]),
    ("recipe-range-newer-than-the-table", {"torch": {"from": "2.11", "reason": WHY}},
     ["torch.from: torch '2.11' is not in the compatibility table; the table's newest is 2.10"]),
    ("cuda-range-ends-before-the-recipes", {"torch": {"from": "2.9", "reason": WHY},
                                            "cuda/12.9/torch_to": "2.8"},
     ["cuda.12.9: its range ends at 2.8, before 2.9 where the recipe's torch range starts",
      "fix: widen torch_to, or narrow torch: from"]),
    # "2.1" for "2.10" would otherwise take in every series
    ("bound-typo", {"cuda/13.0/torch_to": "2.1"},
     ["cuda.13.0.torch_to: torch '2.1' is not in the compatibility table"]),
    ("bound-a-release-not-a-series", {"cuda/13.0/torch_from": "2.9.1"},
     ["cuda.13.0.torch_from: torch '2.9.1' is not in the compatibility table (a series is "
      "major.minor, quoted)"]),
    ("no-python-of-the-range", {"python": "<3.10"},
     ["cuda.13.0: no Python version of torch 2.9, 2.10 (the range 2.9 and newer for CUDA 13.0) "
      "satisfies python '<3.10'", "fix: widen python:"]),
    ("every-series-excluded", {"exclude": [{"torch": "2.8", "cuda": "12.9", "reason": WHY}]},
     ["cuda.12.9: exclude takes out every series of its range 2.8 and newer for CUDA 12.9 (2.8)",
      "fix: drop CUDA 12.9 instead, or remove an exclusion"]),
    # ---- torch_to before torch_from
    ("to-before-from", {"cuda/13.0/torch_from": "2.10", "cuda/13.0/torch_to": "2.9"},
     ["cuda.13.0.torch_to: 2.9 is before torch_from 2.10, so the range is empty",
      "fix: swap them"]),
    ("recipe-to-before-from", {"torch": {"from": "2.10", "to": "2.9", "reason": WHY}},
     ["torch.to: 2.9 is before torch.from 2.10, so the range is empty", "fix: swap them"]),
    # ---- exclusions that name something unknown or outside the range
    ("exclude-unknown-series", {"exclude": [{"torch": "2.11", "cuda": "13.0", "reason": WHY}]},
     ["exclude[0].torch: torch '2.11' is not in the compatibility table\n",
      "fix: exclude one of 2.8, 2.9, 2.10: a series the table lacks is never built"]),
    ("exclude-unknown-cuda", {"exclude": [{"torch": "2.9", "cuda": "12.5", "reason": WHY}]},
     ["exclude[0].cuda: CUDA '12.5' is not in the compatibility table",
      "fix: use one of the recipe's CUDA versions"]),
    ("exclude-cuda-the-recipe-lacks", {"exclude": [{"torch": "2.9", "cuda": "12.6", "reason": WHY}]},
     ["exclude[0].cuda: CUDA 12.6 is not one of this recipe's CUDA versions (12.9, 13.0)"]),
    ("exclude-outside-the-range", {"exclude": [{"torch": "2.8", "cuda": "13.0", "reason": WHY}]},
     ["exclude[0].torch: torch 2.8 is outside the recipe's torch range (CUDA 13.0: 2.9 and newer)",
      "fix: remove the entry: the range already leaves the series out"]),
    ("exclude-outside-every-range", {"cuda/12.9/torch_to": "2.8", "cuda/13.0/torch_from": "2.10",
                                     "exclude": [{"torch": "2.9", "reason": WHY}]},
     ["exclude[0].torch: torch 2.9 is outside the recipe's torch ranges (CUDA 12.9: 2.8 only; "
      "CUDA 13.0: 2.10 and newer)"]),
    ("exclude-a-pair-the-table-lacks", {"exclude": [{"torch": "2.9", "cuda": "12.9", "reason": WHY}]},
     ["exclude[0]: torch 2.9 is not published for CUDA 12.9 (the table has it for 12.6, 13.0), "
      "so no cell would build it"]),
    ("exclude-twice", {"exclude": [{"torch": "2.9", "reason": WHY},
                                   {"torch": "2.9", "cuda": "13.0", "reason": WHY}]},
     ["exclude[1]: torch 2.9 is already excluded by exclude[0]"]),
    ("exclude-for-one-cuda-then-all", {"exclude": [{"torch": "2.9", "cuda": "13.0", "reason": WHY},
                                                   {"torch": "2.9", "reason": WHY}]},
     ["exclude[1]: torch 2.9 is already excluded by exclude[0]"]),
    ("exclude-from-a-list", {"cuda/13.0": {"torch": ["2.10", "2.9"], "reason": WHY},
                             "exclude": [{"torch": "2.9", "cuda": "13.0", "reason": WHY}]},
     ["exclude[0]: cuda.13.0 lists its torch series, so there is no range to exclude from",
      "fix: drop 2.9 from cuda.13.0.torch instead"]),
    ("exclude-without-reason", {"exclude": [{"torch": "2.9", "cuda": "13.0"}]},
     ["exclude[0].reason: required key is missing"]),
    ("exclude-short-reason", {"exclude": [{"torch": "2.9", "cuda": "13.0", "reason": "no"}]},
     ["exclude[0].reason: reason is too short"]),
    ("exclude-not-a-list", {"exclude": {"torch": "2.9", "reason": WHY}},
     ["exclude: must be a list, got a mapping"]),
    ("exclude-unknown-key", {"exclude": [{"torch": "2.9", "series": "2.9", "reason": WHY}]},
     ["exclude[0].series: unknown key", "fix: remove it or use one of: cuda, reason, torch"]),
    # ---- the shape of ranges
    ("bound-a-number", {"cuda/13.0/torch_from": 2.9},
     ["1 problem:", "cuda.13.0.torch_from: must be a string, got a number (2.9)",
      "quote version numbers"]),
    ("range-without-its-oldest-series", {"cuda/13.0": {"torch_to": "2.10", "reason": WHY}},
     ["cuda.13.0: a range needs its oldest torch series",
      'fix: add torch_from: "<series>" here, or torch: {from: "<series>", reason: ...}']),
    ("list-and-range", {"cuda/13.0/torch": ["2.10"]},
     ["cuda.13.0: gives both a list (torch) and a range (torch_from/torch_to)"]),
    ("list-outside-the-recipes-range", {"torch": {"from": "2.9", "reason": WHY},
                                        "cuda/12.9": {"torch": ["2.8"], "reason": WHY}},
     ["cuda.12.9.torch: torch 2.8 is outside the recipe's torch range (2.9 and newer)"]),
    ("stable-abi-newer-than-the-range", {"abi": {"python": "none", "torch": "stable",
                                                 "torch_from": "2.10", "reason": WHY}},
     ["cuda.13.0: its torch range 2.9 and newer takes in torch 2.9, older than abi.torch_from 2.10",
      'fix: start the range at 2.10 (torch: {from: "2.10", ...}) or lower abi.torch_from']),
    ("recipe-range-not-a-mapping", {"torch": "2.9"},
     ["torch: must be a mapping, got a string ('2.9')"]),
    ("recipe-range-without-reason", {"torch": {"from": "2.9"}},
     ["torch.reason: required key is missing"]),
    # ---- a range that excludes a series the recipe's patches are written for
    ("patch-for-an-excluded-series", {"patches/0/torch_from": "2.9",
                                      "exclude": [{"torch": "2.9", "cuda": "13.0",
                                                   "reason": "fails to compile: C++20"}]},
     ["patches[0].torch_from: 0001-Read-arch-list.patch is written for torch 2.9, but the recipe "
      "builds no cell of torch 2.9 (excluded for CUDA 13.0: fails to compile: C++20)",
      "fix: widen the range or remove the exclusion so that 2.9 is built, or, if the patch is "
      "for other series now, set torch_from to one the recipe builds (2.8, 2.10)"]),
    ("patch-for-a-series-before-the-range", {"patches/0/torch_from": "2.9",
                                             "cuda/13.0/torch_from": "2.10"},
     ["patches[0].torch_from: 0001-Read-arch-list.patch is written for torch 2.9, but the recipe "
      "builds no cell of torch 2.9 (its CUDA 13.0 range is torch 2.10 and newer)"]),
    ("patch-to-a-series-after-the-range", {"patches/0/torch_from": "2.9",
                                           "patches/0/torch_to": "2.10",
                                           "cuda/13.0/torch_to": "2.9"},
     ["patches[0].torch_to: 0001-Read-arch-list.patch is written for torch 2.10, but the recipe "
      "builds no cell of torch 2.10 (its CUDA 13.0 range is torch 2.9 only)"]),
    ("patch-for-a-series-of-other-cuda", {"patches/0/torch_from": "2.8",
                                          "cuda": {"13.0": {"torch_from": "2.9", "reason": WHY}}},
     ["patches[0].torch_from: 0001-Read-arch-list.patch is written for torch 2.8, but the recipe "
      "builds no cell of torch 2.8 (the table publishes it for CUDA 12.6, 12.9, none of which "
      "the recipe builds)"]),
    ("patch-for-an-unknown-series", {"patches/0/torch_from": "2.11"},
     ["patches[0].torch_from: torch '2.11' is not in the compatibility table; the table's newest "
      "is 2.10"]),
    ("patch-to-before-from", {"patches/0/torch_from": "2.10", "patches/0/torch_to": "2.9"},
     ["patches[0].torch_to: 2.9 is before torch_from 2.10", "fix: swap them"]),
    # the CUDA ranges that lean on a broken recipe range aren't reported a second time
    ("recipe-range-broken-under-a-cuda-range", {"torch": {"from": "2.11", "reason": WHY},
                                                "cuda/13.0": {"torch_to": "2.10", "reason": WHY}},
     ["1 problem:", "torch.from: torch '2.11' is not in the compatibility table"]),
]


def _apply(data: dict, changes: dict) -> None:
    data["cuda"] = copy.deepcopy(RANGES)
    data["archs"] = {"*": ["80", "90"]}
    for path, value in changes.items():
        *parents, last = path.split("/")
        node = data
        for key in parents:
            node = node[int(key) if key.isdigit() else key]
        node[last] = value


@pytest.mark.parametrize("case_id,changes,expect", BAD, ids=[b[0] for b in BAD])
def test_bad_ranges_and_exclusions_are_named(case_id, changes, expect, write_recipe, good_recipe,
                                             mini_table):
    _apply(good_recipe, changes)
    folder = write_recipe(good_recipe)
    with pytest.raises(RecipeError) as info:
        load_recipe(folder, mini_table)
    message = str(info.value)
    assert message.startswith(f"{folder / 'recipe.yaml'}: ")  # the file is named
    for part in expect:
        assert part in message, f"{part!r} not in:\n{message}"


def test_the_range_form_of_the_bad_cases_loads_without_them(write_recipe, good_recipe, mini_table):
    """The base every BAD case changes is itself a valid recipe."""
    _apply(good_recipe, {})
    r = load_recipe(write_recipe(good_recipe), mini_table)
    assert {t.cuda: t.torch for t in r.cuda} == {"12.9": ("2.8",), "13.0": ("2.10", "2.9")}


class _Dumper(yaml.SafeDumper):
    """Writes repeated values out again: the recipe loader refuses anchors and aliases."""

    def ignore_aliases(self, data):
        return True


def test_the_command_exits_3_naming_the_file_the_key_and_the_fix(tmp_path, capsys):
    """``python -m tools.recipe`` on a repository recipe given a range past the table's newest
    series and an exclusion of a series before its range, against the repository's table."""
    real = load_recipe(RECIPES_DIR / "causal_conv1d")
    first, last = real.cuda[0], real.cuda[-1]
    folder = tmp_path / "causal_conv1d"
    shutil.copytree(real.folder, folder)
    data = yaml.safe_load((folder / "recipe.yaml").read_text())
    data["cuda"][last.cuda]["torch_from"] = "9.0"
    data["exclude"] = [{"torch": "2.6", "cuda": first.cuda, "reason": "a series the range leaves out"}]
    (folder / "recipe.yaml").write_text(yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=4096))
    assert recipe_command.main([str(folder)]) == RecipeError.exit_code
    err = capsys.readouterr().err
    assert f"{folder / 'recipe.yaml'}: 2 problems" in err
    assert f"cuda.{last.cuda}.torch_from: torch '9.0' is not in the compatibility table" in err
    assert (f"exclude[0].torch: torch 2.6 is outside the recipe's torch range (CUDA {first.cuda}: "
            f"{first.range})") in err
    assert err.count("fix: ") == 2 and "Traceback" not in err
