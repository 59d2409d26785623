"""tools.upstream.cudadrop: a recipe's CUDA entry whose series the table stops publishing for
that CUDA version is dropped with what hangs on it, in the recipe's own layout."""

from __future__ import annotations

import yaml

from tests.test_table_platforms import with_platforms
from tools.plan.recipes.model import load_recipe, parse_recipe
from tools.plan.table import parse_table
from tools.upstream.cudadrop import drop_unpublished_cuda
from tools.upstream.yamltext import dump, yaml_rt


def _tables(tmp_path, drop: dict[str, str]):
    old = parse_table(with_platforms(), tmp_path / "table.yaml")
    data = with_platforms()
    for series, cuda in drop.items():
        data["torch"][series]["cuda"].remove(cuda)
    return old, parse_table(data, tmp_path / "table.yaml")


def test_the_entry_and_what_hangs_on_it_go(write_recipe, good_recipe, tmp_path):
    # demo_ext builds CUDA 12.9 for torch 2.8 only; the table stops publishing 2.8's 12.9 build
    good_recipe["cuda"] = {
        "12.9": {"torch_from": "2.8", "torch_to": "2.8", "reason": "the CUDA 12 build users ask for"},
        "13.0": {"torch_from": "2.9", "reason": "matches torch's default CUDA 13"}}
    good_recipe["exclude"] = [{"torch": "2.9", "cuda": "13.0", "reason": "a test exclusion"}]
    good_recipe["platforms"] = {"linux_aarch64": {"archs": {"12.9": ["90"]},
                                                  "reason": "a test platform entry"}}
    old, new = _tables(tmp_path, {"2.8": "12.9"})
    folder = write_recipe(good_recipe)
    recipe = load_recipe(folder, old)
    doc = yaml_rt().load((folder / "recipe.yaml").read_text())
    changes = drop_unpublished_cuda(doc, recipe, old, new)
    assert changes == ["demo_ext: CUDA 12.9 dropped: the table no longer publishes a CUDA 12.9 "
                       "build of any series its range (2.8 only) includes (it did of 2.8)"]
    data = yaml.safe_load(dump(doc))
    assert list(data["cuda"]) == ["13.0"] and list(data["archs"]) == ["*"]
    assert data["platforms"]["linux_aarch64"]["archs"] == {}
    assert data["exclude"] == [{"torch": "2.9", "cuda": "13.0", "reason": "a test exclusion"}]
    # and the new table loads it
    assert [t.cuda for t in parse_recipe(data, folder / "recipe.yaml", new).cuda] == ["13.0"]


def test_a_range_with_a_series_left_keeps_its_entry(write_recipe, good_recipe, tmp_path):
    old, new = _tables(tmp_path, {"2.10": "13.0"})      # 2.9 still publishes 13.0
    folder = write_recipe(good_recipe)
    doc = yaml_rt().load((folder / "recipe.yaml").read_text())
    assert drop_unpublished_cuda(doc, load_recipe(folder, old), old, new) == []


def test_a_recipe_that_would_lose_every_cuda_version_is_left_for_a_person(write_recipe,
                                                                          good_recipe, tmp_path):
    old, new = _tables(tmp_path, {"2.8": "12.9", "2.9": "13.0", "2.10": "13.0"})
    folder = write_recipe(good_recipe)
    text = (folder / "recipe.yaml").read_text()
    doc = yaml_rt().load(text)
    assert drop_unpublished_cuda(doc, load_recipe(folder, old), old, new) == []
    assert yaml.safe_load(dump(doc)) == yaml.safe_load(text)
