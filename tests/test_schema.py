"""tools.plan.schema: the strict YAML reader every table and recipe problem goes through."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tools.core.errors import RecipeError, TableError
from tools.plan.schema import (MAX_PROBLEM_CHARS, MAX_YAML_BYTES, Problems, load_yaml,
                               read_text)

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


# ---- what plain data may not hold -----------------------------------------------------------

@pytest.mark.parametrize("text,message", [
    # a second sha256 would silently win
    ("source:\n  sha256: aaa\n  sha256: bbb\n",
     "(line 3, column 3): not valid YAML: the key 'sha256' is given twice (first on line 2)"),
    ("{a: 1, a: 1}\n", "the key 'a' is given twice"),
    ("a: &x [1]\nb: *x\n", "(line 1, column 4): not valid YAML: an anchor (&x) is not allowed"),
    ("b: *x\n", "an alias (*x) is not allowed"),
    ("a:\n  <<: {b: 1}\n", "a merge key (<<) is not allowed"),
    ("a: " + "[" * 33 + "]" * 33 + "\n", "nested more than 32 levels deep"),
    ("a: " + "[" * 100_000 + "\n", "nested more than 32 levels deep"),
    ("a: !!python/name:os.system\n", "could not determine a constructor"),
    ("a: " + "9" * 5000 + "\n", "Exceeds the limit (4300 digits)"),
    ("a: b\x00\n", "unacceptable character #x0000"),
])
def test_the_loader_refuses_what_plain_data_never_needs(tmp_path, text, message):
    path = tmp_path / "data.yaml"
    path.write_text(text)
    with pytest.raises(RecipeError) as info:
        load_yaml(path, RecipeError)
    assert message in str(info.value) and str(path) in str(info.value)


def test_an_alias_bomb_fails_at_its_first_anchor_fast(tmp_path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\nreason: *a9\n")
    started = time.monotonic()
    with pytest.raises(RecipeError, match=r"an anchor \(&a0\) is not allowed"):
        load_yaml(path, RecipeError)
    assert time.monotonic() - started < 1


def test_keys_that_only_look_alike_are_two_keys(tmp_path):
    path = tmp_path / "data.yaml"
    path.write_text('"12.8": a\n12.8: b\n"1": c\n1: d\n')
    assert load_yaml(path, TableError) == {"12.8": "a", 12.8: "b", "1": "c", 1: "d"}


@pytest.mark.parametrize("make,message", [
    (lambda p: p.symlink_to("/dev/zero"), "is not a regular file but a device, FIFO or socket"),
    (lambda p: os.mkfifo(p), "is not a regular file but a device, FIFO or socket"),
    (lambda p: p.mkdir(), "is not a regular file but a folder"),
    (lambda p: p.write_bytes(b"a: " + b"x" * MAX_YAML_BYTES), f"larger than {MAX_YAML_BYTES} bytes"),
    (lambda p: p.write_bytes(b"a: caf\xe9\n"), r"not UTF-8 text (byte 6: b'\xe9')"),
])
def test_only_a_small_utf8_regular_file_is_read(tmp_path, make, message):
    path = tmp_path / "recipe.yaml"
    make(path)
    started = time.monotonic()
    with pytest.raises(RecipeError) as info:
        read_text(path, RecipeError)
    assert message in str(info.value) and str(path) in str(info.value)
    assert time.monotonic() - started < 1  # a FIFO is never waited on


def test_entry_is_none_unless_every_required_key_is_there_typed():
    p = problems()
    # a wrongly typed required key beside an optional one: the length alone looks complete
    assert p.entry({"a": 3, "b": 1}, "build", {"a": str}, {"b": int}) is None
    assert p.items == ["build.a: must be a string, got an integer (3)\n"
                       '    fix: quote version numbers ("12.8") so YAML keeps them as strings']
    assert problems().entry({"a": "x"}, "build", {"a": str}, {"b": int}) == {"a": "x"}


def test_a_huge_value_makes_a_short_message():
    p = problems()
    huge = ["x" * 1_000_000] * 1000
    started = time.monotonic()
    p.typed(huge, "reason", str)
    p.add("reason", "x" * 1_000_000)
    assert time.monotonic() - started < 0.5
    assert p.items[0].startswith("reason: must be a string, got a list (['xxxxx")
    assert len(p.items[0]) < 100
    cut = len("reason: ") + 1_000_000 - MAX_PROBLEM_CHARS
    assert p.items[1].endswith(f"... ({cut} more characters)")
    assert len(p.items[1]) < MAX_PROBLEM_CHARS + 40


def test_once_names_each_repeated_item_with_the_rule_and_the_fix():
    p = problems()
    assert p.once(("80", "90"), "archs.*", "arch")
    assert not p.once(("80", "90", "80", "80", "Ninja", "ninja"), "archs.*", "arch",
                      key=str.lower)
    assert p.items == [
        "archs.*: lists the arch '80' more than once (rule: each arch once; a repeat is a "
        "mistake)\n    fix: remove the repeated arch '80'",
        "archs.*: lists the arch 'ninja' more than once (rule: each arch once; a repeat is a "
        "mistake)\n    fix: remove the repeated arch 'ninja'"]
