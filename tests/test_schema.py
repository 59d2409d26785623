"""tools.plan.schema: the strict YAML reader every table and recipe problem goes through."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.core.errors import RecipeError, TableError
from tools.plan.schema import Problems, load_yaml

PATH = Path("recipes/demo/recipe.yaml")


def problems() -> Problems:
    return Problems(PATH, RecipeError)


@pytest.mark.parametrize("text,expect", [
    ("a: 1\nb: [x, y]\n", {"a": 1, "b": ["x", "y"]}),
    ("cuda: \"12.10\"\n", {"cuda": "12.10"}),
    ("", None),
])
def test_load_yaml_reads_a_file(tmp_path, text, expect):
    path = tmp_path / "data.yaml"
    path.write_text(text)
    assert load_yaml(path, RecipeError) == expect


@pytest.mark.parametrize("text,error,message", [
    ("a: [1, 2\n", RecipeError, r"data.yaml \(line 2, column 1\): not valid YAML"),
    ("a: b: c\n", TableError, r"data.yaml \(line 1, column 5\): not valid YAML: mapping values"),
])
def test_load_yaml_names_the_file_and_the_place(tmp_path, text, error, message):
    path = tmp_path / "data.yaml"
    path.write_text(text)
    with pytest.raises(error, match=message) as info:
        load_yaml(path, error)
    assert "must be quoted" in info.value.hint


def test_load_yaml_names_a_missing_file(tmp_path):
    with pytest.raises(TableError, match=r"missing.yaml: cannot be read: No such file"):
        load_yaml(tmp_path / "missing.yaml", TableError)


@pytest.mark.parametrize("value,where,expect_out,expect_items", [
    # the right shape: nothing reported
    ({"a": "x", "b": 2}, "source", {"a": "x", "b": 2}, []),
    # an optional key may be left out; an unknown one is named with the allowed keys
    ({"a": "x", "zz": 1}, "source", {"a": "x"},
     ["source.zz: unknown key\n    fix: remove it or use one of: a, b, c"]),
    # a missing required key says what to add; a wrong type drops the value
    ({"b": "2"}, "", {},
     ["a: required key is missing\n    fix: add `a:` (a string)",
      "b: must be an integer, got a string ('2')"]),
    # a number where a string belongs: quote it (YAML reads 12.8 as a float)
    ({"a": 12.8}, "cuda", {},
     ['cuda.a: must be a string, got a number (12.8)\n'
      '    fix: quote version numbers ("12.8") so YAML keeps them as strings']),
    # not a mapping at all
    (["a"], "", None, ["(top level): must be a mapping, got a list (['a'])"]),
    (None, "build", None, ["build: must be a mapping, got nothing (null)"]),
])
def test_mapping(value, where, expect_out, expect_items):
    p = problems()
    assert p.mapping(value, where, {"a": str}, {"b": int, "c": (str, list)}) == expect_out
    assert p.items == expect_items


@pytest.mark.parametrize("value,kind,ok", [
    (True, int, False),             # a bool is not an integer...
    (True, float, False),
    (True, bool, True),             # ...but it is true or false
    (3, (int, float), True),
    (2.5, float, True),
    ("x", (str, list), True),
    ({}, list, False),
])
def test_typed(value, kind, ok):
    p = problems()
    assert p.typed(value, "k", kind) is ok
    assert (p.items == []) is ok


@pytest.mark.parametrize("value,nonempty,expect,items", [
    (["a", "b"], True, ("a", "b"), []),
    ([], True, None, ["units: must not be empty"]),
    ([], False, (), []),
    (["a", 3], True, None, ["units[1]: must be a string, got an integer (3)\n"
                            '    fix: quote version numbers ("12.8") so YAML keeps them as strings']),
    ("a", True, None, ["units: must be a list, got a string ('a')"]),
])
def test_strings(value, nonempty, expect, items):
    p = problems()
    assert p.strings(value, "units", nonempty=nonempty) == expect
    assert p.items == items


@pytest.mark.parametrize("reason,reported", [
    ("why", True),
    ("  short ", True),
    ("the arch list is hard-coded upstream", False),
    (None, False),                  # a missing reason is the mapping's to report
])
def test_a_reason_must_say_something(reason, reported):
    p = problems()
    p.reason(reason, "env.X.reason")
    assert bool(p.items) is reported


def test_every_problem_in_one_error():
    p = problems()
    p.raise_if_any()                # nothing collected: nothing raised
    p.add("cuda.12.8.torch", "torch 2.99 is not in the table", "add it to recipes/table.yaml")
    with pytest.raises(RecipeError) as one:
        p.raise_if_any()
    assert str(one.value) == (f"{PATH}: 1 problem:\n  - cuda.12.8.torch: torch 2.99 is not in "
                              "the table\n    fix: add it to recipes/table.yaml")
    p.add("", "the file is empty")
    with pytest.raises(RecipeError, match=r"recipe.yaml: 2 problems:\n") as two:
        p.raise_if_any()
    assert str(two.value).endswith("\n  - the file is empty")
