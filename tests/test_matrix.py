"""The matrix planner: cells, ids, filters, changed-recipe selection, GitHub JSON.

The planner's logic runs on the tests' own table and recipes (``world``: demo_ext and flashy on
the mini table); one test checks that the repository's real recipes load and plan at all.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from tools import ROOT
from tools.core.errors import PlanError
from tools.core.variant import parse_cell_id
from tools.plan.cells import (
    cells_for,
    changed_only,
    changed_packages,
    find_cell,
    plan,
    require_known,
    select,
    torch_index,
)
from tools.plan.recipes.model import load_all, load_recipe
from tools.plan.runners import RUNNERS_PATH
from tools.plan.table import TABLE_PATH, load_table, version_key


@pytest.fixture
def demo_cells(write_recipe, good_recipe, mini_table):
    return cells_for(load_recipe(write_recipe(good_recipe), mini_table), mini_table)


def test_cells_and_ids(demo_cells):
    ids = [c.id for c in demo_cells]
    # CUDA 12.9: torch 2.8 (default) x 3.10-3.13; CUDA 13.0: 2.10 (default) and 2.9 x 3.10-3.14
    assert len(ids) == 4 + 5 + 5 == len(set(ids))
    assert "demo_ext-3.12-cu129" in ids
    assert "demo_ext-3.12-cu130" in ids            # default torch 2.10: the plain name
    assert "demo_ext-3.12-cu130-torch2.9" in ids   # the other torch: reachable by suffix
    cell = next(c for c in demo_cells if c.id == "demo_ext-3.12-cu130")
    assert (cell.torch, cell.torch_version, cell.label) == ("2.10", "2.10.0", "cu130.torch2.10")
    assert cell.image == "pytorch/manylinux2_28-builder:cuda13.0"
    assert cell.archs == ("80", "90")


def test_select_filters(demo_cells):
    assert {c.python for c in select(demo_cells, pythons=["3.14"])} == {"3.14"}
    assert {c.cuda for c in select(demo_cells, cudas=["129"])} == {"12.9"}
    assert len(select(demo_cells, cudas=["13.0"], torches=["2.9"])) == 5


def test_select_default_torch_only(demo_cells):
    defaults = select(demo_cells, default_torch_only=True)
    # CUDA 12.9's torch 2.8 (3.10-3.13) and CUDA 13.0's torch 2.10 (3.10-3.14); not 13.0's 2.9
    assert len(defaults) == 4 + 5 and {c.torch for c in defaults} == {"2.8", "2.10"}
    assert select(demo_cells, torches=["2.9"], default_torch_only=True) == []


def _abi(good_recipe, **abi):
    good_recipe["abi"] = {**abi, "reason": "what the package's setup.py compiles"}
    return good_recipe


def test_stable_none_collapses_to_one_cell_per_cuda(write_recipe, good_recipe, mini_table):
    recipe = load_recipe(write_recipe(_abi(good_recipe, python="none", torch="stable", torch_from="2.8")),
                         mini_table)
    cells = cells_for(recipe, mini_table)
    # 14 per-Python, per-torch cells (test_cells_and_ids) become one build per CUDA version.
    assert [c.id for c in cells] == ["demo_ext-py3-cu129-torch2.8+", "demo_ext-py3-cu130-torch2.8+"]
    cu130 = cells[1]
    # Built once, against the CUDA version's default torch, with the lowest Python it serves.
    assert (cu130.torch, cu130.torch_version, cu130.python, cu130.label) == ("2.10", "2.10.0", "3.10", "cu130.torch2.10")
    assert cu130.serves_torch == ("2.10", "2.9") and cu130.serves_python == ("3.10", "3.11", "3.12", "3.13", "3.14")
    assert cu130.torch_pin == "torch>=2.8,<3"     # the table knows no torch 3
    assert cells[0].serves_python == ("3.10", "3.11", "3.12", "3.13")  # torch 2.8, narrowed by python >=3.10
    # Every filter a per-Python cell answers to reaches the cell that serves it.
    assert select(cells, pythons=["3.14"], torches=["2.9"]) == [cu130]
    assert find_cell("demo_ext-py3-cu130-torch2.8+", cells) == cu130
    assert cu130.to_json()["torch_pin"] == "torch>=2.8,<3"


def test_abi3_and_exact_keep_one_cell_per_torch(write_recipe, good_recipe, mini_table):
    recipe = load_recipe(write_recipe(_abi(good_recipe, python="abi3", python_from="3.11", torch="exact")),
                         mini_table)
    cells = cells_for(recipe, mini_table)
    assert [c.id for c in cells] == ["demo_ext-abi3-cu129", "demo_ext-abi3-cu130", "demo_ext-abi3-cu130-torch2.9"]
    # The build interpreter is the limited API's floor; the pin stays on the one torch.
    assert {c.python for c in cells} == {"3.11"} and cells[2].torch_pin == "torch==2.9.*"
    assert cells[1].serves_python == ("3.11", "3.12", "3.13", "3.14") and cells[1].serves_torch == ("2.10",)


def test_cpython_and_stable_keep_one_cell_per_python(write_recipe, good_recipe, mini_table):
    recipe = load_recipe(write_recipe(_abi(good_recipe, python="cpython", torch="stable", torch_from="2.8")),
                         mini_table)
    ids = [c.id for c in cells_for(recipe, mini_table)]
    assert ids[:4] == [f"demo_ext-3.{m}-cu129-torch2.8+" for m in (10, 11, 12, 13)]
    assert len(ids) == 4 + 5 == len(set(ids))


def test_the_repositorys_plan_has_one_build_per_file_name():
    # The wheel's file name is set by package, version, label (CUDA + built-against torch), its
    # python tag and its platform tag: two cells sharing all five would publish two different
    # files of one name.
    cells = plan()
    names = [(c.package, c.version, c.label, c.python if c.python_abi == "cpython" else c.python_abi,
                  c.platform_tag) for c in cells]
    assert len(names) == len(set(names))
    xformers = [c.id for c in cells if c.package == "xformers"]
    # CUDA 12.6 where the table has PyTorch's cu126 build: Linux x86_64 and Windows
    assert xformers == [f"xformers-py3-cu{cu}-torch2.10+{part}" for part, cus in
                        (("", (126, 128, 130, 132)), ("-aarch64", (128, 130, 132)),
                         ("-win", (126, 128, 130, 132))) for cu in cus]


#: The Linux x86_64 cells as ``python -m tools.matrix --format json`` printed them before
#: platforms were a dimension (tests/fixtures/plan/make_x86_64_cells.py writes it again).
X86_64_CELLS = Path(__file__).parent / "fixtures" / "plan" / "x86_64_cells.jsonl"


def test_linux_x86_64_cells_and_ids_are_what_they_were():
    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", "json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    now = [c for c in json.loads(proc.stdout) if c["platform"] == "linux_x86_64"]
    assert {c["platform_tag"] for c in now} == {"manylinux_2_28_x86_64"}
    was = [json.loads(line) for line in X86_64_CELLS.read_text().splitlines()]
    # CUDA 12.6's cells (PyTorch's cu126 builds of 2.11 to 2.14) are new; no other cell changed
    assert {c["cuda"] for c in was} >= {"12.8", "13.0"} and "12.6" not in {c["cuda"] for c in was}
    # and so are the free-threaded cells (3.14t: causal_conv1d, the table's free_threaded rows)
    free = [c for c in now if c["python"].endswith("t")]
    assert {c["python"] for c in free} == {"3.14t"} and "xformers" not in {c["package"]
                                                                           for c in free}
    now = [c for c in now if not c["python"].endswith("t")]
    # and so are FlashAttention 3's (a git source): one stable-ABI, abi3 cell per CUDA version
    fa3 = [c["id"] for c in now if c["package"] == "flash_attn_3"]
    assert fa3 == ["flash_attn_3-abi3-cu128-torch2.9+", "flash_attn_3-abi3-cu130-torch2.9+",
                   "flash_attn_3-abi3-cu132-torch2.9+"]
    now = [c for c in now if c["package"] != "flash_attn_3"]
    new = [c for c in now if c["cuda"] == "12.6"]
    assert len(new) == 161 and {c["torch"] for c in new} == {"2.11", "2.12", "2.13", "2.14"}
    now = [c for c in now if c["cuda"] != "12.6"]
    assert [c["id"] for c in now] == [c["id"] for c in was]  # not one id changed
    # every field as it was; platforms only added two
    assert [{k: v for k, v in c.items() if k not in ("platform", "platform_tag")} for c in now] \
        == was


def test_the_repositorys_plan_per_platform():
    cells, table = plan(), load_table()
    ids = {c.id for c in cells}
    assert {"flash_attn-3.12-cu130-aarch64", "flash_attn-3.12-cu130-torch2.12-aarch64",
            "flash_attn-3.12-cu130-win", "flash_attn-3.12-cu128-torch2.9-aarch64"} <= ids
    # PyPI's aarch64 torch of 2.8 is CPU-only and the table knows no CUDA build of it there
    assert not any(c.platform == "linux_aarch64" and c.torch == "2.8" for c in cells)
    # mamba_ssm requires triton, which has no Windows wheel
    assert not any(c.package == "mamba_ssm" and c.platform == "win_amd64" for c in cells)
    for c in cells:
        assert parse_cell_id(c.id).platform == c.platform, c.id
        assert c.cuda in table.torch[c.torch].cuda_on(c.platform), c.id
        assert set(c.archs) <= set(table.compilable(c.cuda, c.platform)), c.id
        if c.platform == "linux_aarch64":
            assert c.image.startswith("pytorch/manylinuxaarch64-builder:cuda"), c.id
            assert c.platform_tag == "manylinux_2_28_aarch64"
        if c.platform == "win_amd64":
            assert (c.image, c.platform_tag) == ("", "win_amd64")
            assert torch_index(c, table) == f"https://download.pytorch.org/whl/cu{c.cuda.replace('.', '')}"
    arm = find_cell("flash_attn-3.12-cu130-aarch64", cells)
    assert torch_index(arm, table) is None  # PyPI's aarch64 torch 2.14 is the cu130 build
    # torch_sparse needs torch_scatter's cell of its own platform
    sparse = find_cell("torch_sparse-3.12-cu130-win", cells)
    assert sparse.needs == ("torch_scatter-3.12-cu130-win",)


@pytest.mark.parametrize("platform,count", [("linux_aarch64", 286), ("win_amd64", 312)])
def test_the_platform_filter(platform, count):
    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--platform", platform,
                           "--format", "ids"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    ids = proc.stdout.split()
    assert len(ids) == count and all(parse_cell_id(i).platform == platform for i in ids)


def test_an_unknown_platform_filter_is_refused():
    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--platform", "linux_mips",
                           "--format", "ids"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "unknown platform(s): linux_mips" in proc.stderr
    assert "linux_aarch64" in proc.stderr


def test_counts_before_and_after_for_every_recipe():
    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", "counts"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # columns after the abi: before, after, groups, shards, runner-hours, one job per cell; the
    # Linux x86_64 rows, then the other platforms', then one total per platform and the total
    # (the table ends at the first blank line: the free-threaded count follows)
    table = proc.stdout.split("\n\n")[0].splitlines()
    rows = {line.split()[0]: line.split()[-6:] for line in table[1:] if "linux_x86_64" in line}
    rows["total"] = table[-1].split()[-6:]
    assert rows["xformers"][:2] == ["50", "4"] and "none + stable>=2.10" in proc.stdout
    for package in ("causal_conv1d", "flash_attn", "mamba_ssm"):
        assert rows[package][0] == rows[package][1]  # per-Python, per-torch: nothing collapses
    assert int(rows["total"][1]) == len(plan())
    assert int(rows["flash_attn"][3]) > 0            # flash_attn doesn't fit one job: shards


def test_find_cell_names_near_misses(demo_cells):
    with pytest.raises(PlanError) as info:
        find_cell("demo_ext-3.12-cu118", demo_cells)
    assert "demo_ext-3.12-cu129" in str(info.value)


@pytest.mark.parametrize("paths,expect", [
    (["recipes/flash_attn/recipe.yaml"], {"flash_attn"}),                       # a recipe edit
    (["recipes/mamba_ssm/patches/0001-x.patch", "README.md"], {"mamba_ssm"}),  # a patch
    (["tools/builder/orchestrate.py", "README.md"], set()),                                   # no recipe
    (["recipes/table.yaml"], {"flash_attn", "mamba_ssm", "xformers"}),          # shared facts
    (["recipes/unknown_pkg/recipe.yaml"], set()),                               # deleted recipe
])
def test_changed_packages(paths, expect):
    assert changed_packages(paths, {"flash_attn", "mamba_ssm", "xformers"}) == expect


@pytest.mark.parametrize("packages,paths,expect", [
    (None, ["recipes/xformers/recipe.yaml", "recipes/flash_attn/patches/1.patch"],
     ["flash_attn", "xformers"]),                                       # sorted
    (["xformers", "mamba_ssm"], ["recipes/table.yaml"], ["mamba_ssm", "xformers"]),  # narrowed
    (["mamba_ssm"], ["recipes/xformers/recipe.yaml"], []),              # asked for, not changed
    ([], ["recipes/xformers/recipe.yaml"], ["xformers"]),               # no --package: all
    (None, ["README.md"], []),
])
def test_changed_only(packages, paths, expect):
    assert changed_only(packages, paths, {"flash_attn", "mamba_ssm", "xformers"}) == expect


def test_require_known(demo_cells):
    require_known(None, demo_cells)
    require_known(["demo_ext"], demo_cells)
    with pytest.raises(PlanError, match=r"unknown package\(s\): flash-attn, zzz") as info:
        require_known(["zzz", "demo_ext", "flash-attn"], demo_cells)
    assert info.value.hint == "known: demo_ext"


def test_cell_facts_from_the_table(demo_cells, mini_table):
    cells = {c.id: c for c in demo_cells}
    cell = cells["demo_ext-3.12-cu130-torch2.9"]
    assert cell.platform_tag == "manylinux_2_28_x86_64"    # the torch entry's manylinux
    assert cell.torch_requirement == "torch==2.9.1"
    # mini table: torch 2.10's PyPI build is CUDA 13.0; torch 2.8's is 12.9
    assert torch_index(cells["demo_ext-3.12-cu130"], mini_table) is None
    assert torch_index(cells["demo_ext-3.12-cu129"], mini_table) is None
    assert torch_index(cell, mini_table) == "https://download.pytorch.org/whl/cu130"


def test_platform_tag_follows_the_tables_manylinux(write_recipe, good_recipe, mini_table):
    torch = mini_table.torch["2.8"]
    table = replace(mini_table, torch={**mini_table.torch, "2.8": replace(torch, manylinux="2_34")})
    cells = cells_for(load_recipe(write_recipe(good_recipe), table), table)
    assert {c.platform_tag for c in cells if c.torch == "2.8"} == {"manylinux_2_34_x86_64"}


def test_the_repositorys_recipes_plan_cells_the_table_allows():
    table = load_table()
    cells = plan()
    assert cells
    for c in cells:
        t = table.torch[c.torch]
        assert c.python in (*t.python, *t.free_threaded) and c.cuda in t.cuda_on(c.platform), c.id
        assert set(c.archs) <= set(table.compilable(c.cuda, c.platform)), c.id


#: Each repository recipe's torch series per CUDA version as its recipe listed them before the
#: recipes narrowed the table with ranges (the default torch first).
#: CUDA 12.6: PyTorch's cu126 builds of 2.11 to 2.14 (its line for drivers older than 580).
_CU126 = {"12.6": ["2.14", "2.13", "2.12", "2.11"]}
EXPLICIT_LISTS = {
    **{package: {**_CU126, "12.8": ["2.10", "2.9", "2.8"],
                 "13.0": ["2.14", "2.13", "2.12", "2.11"], "13.2": ["2.15"]}
       for package in ("causal_conv1d", "grouped_gemm", "mmcv", "torch_cluster", "torch_scatter",
                       "torch_sparse")},
    "flash_attn": {**_CU126, "12.8": ["2.10", "2.9", "2.8"], "12.9": ["2.8"],
                   "13.0": ["2.14", "2.13", "2.12", "2.11"], "13.2": ["2.15"]},
    "mamba_ssm": {**_CU126, "12.8": ["2.10", "2.9"], "13.0": ["2.14", "2.13", "2.12", "2.11"],
                  "13.2": ["2.15"]},
    "xformers": {**_CU126, "12.8": ["2.10"], "13.0": ["2.14", "2.13", "2.12", "2.11"],
                 "13.2": ["2.15"]},
    # written with ranges (a git source, after the ranges came): its lists as they read
    "flash_attn_3": {"12.8": ["2.10", "2.9"], "13.0": ["2.14", "2.13", "2.12", "2.11"],
                     "13.2": ["2.15"]},
}


class _Dumper(yaml.SafeDumper):
    """Writes repeated values out again: the recipe loader refuses anchors and aliases."""

    def ignore_aliases(self, data):
        return True


def _table_until(series: str):
    """The repository's table without the torch series newer than ``series``: the table the
    explicit lists were written against, however many series it has gained since."""
    table = load_table()
    return replace(table, torch={s: t for s, t in table.torch.items()
                                 if version_key(s) <= version_key(series)})


def test_the_ranges_plan_what_the_explicit_lists_planned(tmp_path):
    """Every repository recipe, its ranges converted back to the lists it had, plans the same
    cells, field for field and in the same order, as the recipe with its ranges."""
    newest = max((s for lists in EXPLICIT_LISTS.values() for series in lists.values()
                  for s in series), key=version_key)
    table = _table_until(newest)
    recipes = load_all(table=table)
    assert sorted(r.package for r in recipes) == sorted(EXPLICIT_LISTS)
    for recipe in recipes:
        folder = tmp_path / recipe.package
        shutil.copytree(recipe.folder, folder)
        data = yaml.safe_load((folder / "recipe.yaml").read_text())
        data.pop("torch", None)
        data["cuda"] = {cuda: {"torch": series, "reason": data["cuda"][cuda]["reason"]}
                        for cuda, series in EXPLICIT_LISTS[recipe.package].items()}
        (folder / "recipe.yaml").write_text(yaml.dump(data, Dumper=_Dumper, sort_keys=False))
        listed = load_recipe(folder, table)
        assert all(t.range is None for t in listed.cuda)
        assert [c.to_json() for c in cells_for(recipe, table)] == \
            [c.to_json() for c in cells_for(listed, table)], recipe.package


def _with_series(table_text: str, series: str, cuda: list[str], pythons: list[str]) -> str:
    """The table's text with one more torch row (values of the newest row's kind)."""
    return table_text.rstrip("\n") + f"""

  "{series}":
    release: "{series}.0"
    python: {json.dumps(pythons)}
    cuda: {json.dumps(cuda)}
    pypi_cuda: "{cuda[-1]}"
    manylinux: "2_28"
    cxx11_abi: true
    source: "a row added by tests/test_matrix.py"
"""


def test_a_new_series_in_the_table_is_planned_with_no_recipe_edit(tmp_path):
    """A torch row added to a copy of recipes/table.yaml: every recipe whose range includes it
    plans its cells (the command, on the repository's recipes as they are), with the CUDA
    versions the row lists and the recipe's range allows, and it becomes their default torch."""
    table = load_table()
    newest = max(table.torch, key=version_key)
    major, minor = version_key(newest)
    series = f"{major}.{minor + 1}"
    pythons = list(table.torch[newest].python)
    # every CUDA version the recipes build, so that only their ranges decide
    cudas = sorted({t.cuda for r in load_all(table=table) for t in r.cuda}, key=version_key)
    copy_path = tmp_path / "table.yaml"
    copy_path.write_text(_with_series(TABLE_PATH.read_text(), series, cudas, pythons))
    grown = load_table(copy_path)
    recipes = load_all(table=grown)
    before = {c.id: c.to_json() for c in plan(load_all(table=table), table)}
    after = plan(recipes, grown)

    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--table", str(copy_path),
                           "--torch", series, "--format", "ids"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    new_ids = proc.stdout.split()
    assert new_ids == [c.id for c in after if series in (c.serves_torch or (c.torch,))]
    for recipe in recipes:
        wanted = {t.cuda for t in recipe.cuda if t.range and t.range.includes(series)}
        cells = [c for c in after if c.package == recipe.package and c.torch == series]
        assert wanted, recipe.package  # every repository recipe has an open range
        assert {c.cuda for c in cells} == wanted, recipe.package
        assert all(c.default_torch for c in cells)
        if recipe.abi.python == "cpython":
            assert sorted(c.python for c in cells) == recipe.pythons_for(series, grown)
    # Cells of the CUDA versions whose range doesn't reach the new series are the same cells.
    untouched = {c.id: c.to_json() for c in after
                 if not any(c.cuda == t.cuda and t.range and t.range.includes(series)
                            for r in recipes if r.package == c.package for t in r.cuda)}
    assert untouched and all(before[i] == cell for i, cell in untouched.items())
    # The newest series before is no longer the default torch of the CUDA versions it shares.
    shared = [c for c in after if c.torch == newest and c.torch_abi == "exact"
              and any(d.torch == series and d.cuda == c.cuda and d.package == c.package
                      and d.platform == c.platform for d in after)]
    assert shared and all(c.id.endswith(f"-torch{newest}") for c in shared)

    # A row whose CUDA versions no range includes is planned for no recipe.
    closed = [c for c in cudas if not any(t.cuda == c and t.range and t.range.last is None
                                          for r in recipes for t in r.cuda)]
    other_path = tmp_path / "other-table.yaml"  # load_table caches by path
    other_path.write_text(_with_series(TABLE_PATH.read_text(), series, closed, pythons))
    grown = load_table(other_path)
    assert closed and not [c for c in plan(load_all(table=grown), grown) if c.torch == series]


#: A release candidate's row, as ``python -m tools.refresh --rc`` writes one.
CANDIDATE = '    candidate: {git: "0123abcdef0123abcdef0123abcdef0123abcdef", index: "https://download.pytorch.org/whl/test/"}\n'


def test_release_candidate_rows_plan_cells_into_the_pre_release_index_only(tmp_path):
    """A candidate row (torch 2.16 for CUDA 13.2) on a copy of recipes/table.yaml, with the
    repository's recipes: its cells are apart (``-torch2.16rc``), labelled so the final sorts
    after them, built with torch from the candidate index, and listed only in the pre-release
    index; every other cell is the plan without the row, unchanged (the default torch and the
    stable-ABI builds included). Without ``candidate:`` (the final is out) the same row plans
    the series' ordinary cells into the normal index."""
    table = load_table()
    text = _with_series(TABLE_PATH.read_text(), "2.16", ["13.2"], list(table.torch["2.15"].python))
    rc_path, final_path = tmp_path / "rc.yaml", tmp_path / "final.yaml"
    rc_path.write_text(text.replace('    source: "a row added', CANDIDATE + '    source: "a row added'))
    final_path.write_text(text)
    rc_table, final_table = load_table(rc_path), load_table(final_path)
    assert rc_table.torch["2.16"].candidate.git.startswith("0123abc")
    before = {c.id: c.to_json() for c in plan(load_all(table=table), table)}
    cells = plan(load_all(table=rc_table), rc_table)
    rc = [c for c in cells if c.candidate]
    assert rc and {c.torch for c in rc} == {"2.16"} and {c.cuda for c in rc} == {"13.2"}
    for c in rc:
        assert c.id.endswith("-cu132-torch2.16rc") and not c.default_torch
        assert c.label == "cu132.torch2.16rc.git0123abc"
        assert c.index_paths == ("pre/cu132/torch2.16",)  # the pre-release index, nothing else
        assert c.serves_torch == ("2.16",)
        assert torch_index(c, rc_table) == "https://download.pytorch.org/whl/test/cu132"
        assert Version(f"1.0+{c.label}") < Version(f"1.0+{c.label.split('rc.')[0]}")
    assert {c.package for c in rc} == {r.package for r in load_all(table=table)}  # open ranges
    # Nothing else changes: no other cell is in a pre-release index, and every one is as before.
    others = {c.id: c.to_json() for c in cells if not c.candidate}
    assert others == before
    assert not any(p.startswith("pre/") for c in cells if not c.candidate for p in c.index_paths)
    xformers = [c.id for c in rc if c.package == "xformers"]
    assert xformers == ["xformers-py3-cu132-torch2.16rc"]  # its stable build of 2.15 unchanged

    # Promoted: the final's cells, into the normal index, 2.16 the default torch of CUDA 13.2.
    final = [c for c in plan(load_all(table=final_table), final_table) if c.torch == "2.16"]
    assert final and not any(c.candidate for c in final)
    assert all("cu132/torch2.16" in c.index_paths for c in final)
    assert not any(p.startswith("pre/") for c in final for p in c.index_paths)
    assert {c.id for c in final if c.package == "causal_conv1d"} == {
        f"causal_conv1d-{py}-cu132" for py in table.torch["2.15"].python}

def _run(tmp_path, *args, stdin=None, cwd=ROOT):
    """``python -m tools.matrix`` on the test world's recipes and table (and, for the formats
    of the release's stages, the repository's runner file: GitHub's standard runner)."""
    runners = ["--runners", str(RUNNERS_PATH)] if "--runners" not in args else []
    return subprocess.run([sys.executable, "-m", "tools.matrix", *args, "--recipes",
                           str(tmp_path / "recipes"), "--table", str(tmp_path / "table.yaml"),
                           *runners], cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=60)


def test_github_matrix_from_a_fake_diff(world, tmp_path):
    world()
    proc = _run(tmp_path, "--format", "github", "--changed-files", "-",
                stdin="recipes/flashy/recipe.yaml\ntools/index.py\n")
    assert proc.returncode == 0, proc.stderr
    matrices = json.loads(proc.stdout)
    assert list(matrices)[:3] == ["shards", "cells1", "cells2"]
    # every platform's matrices, empty here: the test world's table has no other platform
    assert list(matrices)[3:] == [f"{m}_{part}" for part in ("aarch64", "win")
                                  for m in ("shards", "cells1", "cells2")]
    assert matrices["shards"] == {"include": []} == matrices["cells2"]  # flashy: no unit list
    matrix = matrices["cells1"]
    # flashy: CUDA 12.6 x torch 2.8 (3.10-3.13) and 2.9 (3.10-3.14), in a cell job a group
    assert sum(len(row["cells"]) for row in matrix["include"]) == 4 + 5
    # jobs as many as the budget needs (the stated rule's 2603 s per arch a cell), fewer
    # than the cells, each of one group
    assert len(matrix["include"]) < 4 + 5
    assert {row["package"] for row in matrix["include"]} == {"flashy"}
    for row in matrix["include"]:
        assert row["id"].startswith(row["group"] + "-job")
        assert row["runner"] == "ubuntu-24.04" and row["shards"] == []
        # what GitHub's matrix takes
        assert all(isinstance(v, (str, bool, list, int, float)) for v in row.values())


def test_the_cap_plans_the_shards_of_the_capped_cells_only(world, tmp_path):
    world()
    units = {"schema": 1, "version": "2.0.0",
             "cost": {"cuda": {"seconds": 3000, "reason": "stated rule for the tests"}},
             "units": {"cuda": [f"csrc/k{i}.cu" for i in range(12)]}}
    (tmp_path / "recipes" / "flashy" / "units.yaml").write_text(json.dumps(units))
    full = json.loads(_run(tmp_path, "--format", "github", "--package", "flashy").stdout)
    proc = _run(tmp_path, "--format", "github", "--package", "flashy", "--cap", "2")
    assert proc.returncode == 0, proc.stderr
    capped = json.loads(proc.stdout)
    assert [c["id"] for c in capped["cells1"]["include"]] == \
        [c["id"] for c in full["cells1"]["include"]][:2]
    # both capped cells are of the first group: only its shards run
    assert {s["group"] for s in capped["shards"]["include"]} == {"flashy-cu126"}
    assert capped["shards"]["include"] == [s for s in full["shards"]["include"]
                                           if s["group"] == "flashy-cu126"]
    assert "capped: 9 cells planned, building the first 2" in proc.stderr


def test_the_stages_formats_need_a_runner_file(world, tmp_path):
    world()
    proc = _run(tmp_path, "--format", "groups", "--runners", str(tmp_path / "none.yaml"))
    assert proc.returncode == PlanError.exit_code
    assert f"{tmp_path / 'none.yaml'}: cannot be read" in proc.stderr
    # by default, the one beside the recipes
    (tmp_path / "recipes" / "runners.yaml").write_text(RUNNERS_PATH.read_text())
    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", "groups",
                           "--recipes", str(tmp_path / "recipes"),
                           "--table", str(tmp_path / "table.yaml")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "flashy-cu126" in proc.stdout.split()


def test_a_table_change_plans_every_recipe(world, tmp_path):
    world()
    proc = _run(tmp_path, "--format", "ids", "--changed-files", "-", stdin="recipes/table.yaml\n")
    assert proc.returncode == 0, proc.stderr
    assert {i.split("-")[0] for i in proc.stdout.split()} == {"demo_ext", "flashy"}
    assert "changed recipes: demo_ext, flashy" in proc.stderr


def test_cap_says_so(world, tmp_path):
    world()
    proc = _run(tmp_path, "--format", "ids", "--package", "demo_ext", "--cap", "2")
    assert proc.returncode == 0
    assert proc.stdout.split() == ["demo_ext-3.10-cu129", "demo_ext-3.11-cu129"]
    assert "capped: 14 cells planned, building the first 2" in proc.stderr


def test_one_cell_by_its_coordinates(world, tmp_path):
    """What scripts/build_local.sh asks: one package, Python, CUDA and torch (or the default)."""
    world()
    default = _run(tmp_path, "--format", "ids", "--package", "demo_ext", "--python", "3.12",
                   "--cuda", "130", "--default-torch-only")
    other = _run(tmp_path, "--format", "ids", "--package", "demo_ext", "--python", "3.12",
                 "--cuda", "13.0", "--torch", "2.9")
    assert default.stdout.split() == ["demo_ext-3.12-cu130"]
    assert other.stdout.split() == ["demo_ext-3.12-cu130-torch2.9"]


def test_changed_since_a_git_ref(world, tmp_path):
    """A real git history: a commit touching one recipe yields only that recipe's cells."""
    world()

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t",
                        *args], check=True, capture_output=True, timeout=60)
    git("init", "-q", "-b", "main")
    git("add", "recipes", "table.yaml")
    git("commit", "-qm", "recipes")
    recipe = tmp_path / "recipes" / "flashy" / "recipe.yaml"
    recipe.write_text(recipe.read_text() + "\n# touched\n")
    git("commit", "-qam", "touch")
    proc = _run(tmp_path, "--changed-since", "HEAD~1", "--format", "ids")
    assert proc.returncode == 0, proc.stderr
    ids = proc.stdout.split()
    assert ids and all(i.startswith("flashy-") for i in ids)


def test_unknown_package_is_refused(world, tmp_path):
    world()
    proc = _run(tmp_path, "--package", "flash-attn")
    assert proc.returncode == PlanError.exit_code
    assert "known: demo_ext, flashy" in proc.stderr


@pytest.mark.parametrize("flag, value, what, known", [
    ("--cuda", "12.7", "CUDA version(s): 12.7", "12.9, 13.0"),
    ("--cuda", "127", "CUDA version(s): 127", "12.9, 13.0"),
    ("--python", "3.99", "Python version(s): 3.99", "3.10, 3.11, 3.12"),
    ("--torch", "2.99", "torch series: 2.99", "2.8, 2.9"),
])
def test_a_filter_value_no_cell_has_is_refused(world, tmp_path, flag, value, what, known):
    # `--cuda 12.7` used to print nothing and exit 0: a typo read as a wish for no cells.
    world()
    proc = _run(tmp_path, "--format", "ids", flag, value)
    assert proc.returncode == PlanError.exit_code, proc.stdout
    assert f"unknown {what}: no cell of the plan has it" in proc.stderr
    assert known in proc.stderr and proc.stdout == ""


def test_a_known_value_no_cell_of_the_package_has_is_an_empty_answer(world, tmp_path):
    # Known to the plan, just not planned for this package: an empty list, not an error.
    world()
    proc = _run(tmp_path, "--format", "ids", "--package", "demo_ext", "--python", "3.10",
                "--torch", "2.9", "--cuda", "12.9", "--default-torch-only")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [], "torch 2.9 is not CUDA 12.9's default series in the world"


def test_packages_as_people_spell_them(world, tmp_path):
    world()
    plain = _run(tmp_path, "--format", "ids", "--package", "demo_ext")
    spelled = _run(tmp_path, "--format", "ids", "--package", "Demo-Ext")
    assert plain.returncode == spelled.returncode == 0, spelled.stderr
    assert spelled.stdout == plain.stdout and plain.stdout
