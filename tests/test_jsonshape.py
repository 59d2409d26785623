"""tools.plan.jsonshape: a JSON Schema's errors as Problems that name the file, the key path, the
rule and the fix; what the schema refused is left out of what the code reads next."""

from __future__ import annotations

import json

import pytest

from tools.core.errors import RecipeError
from tools.plan.jsonshape import check_shape, load_schema, subschema
from tools.plan.schema import Problems

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object", "additionalProperties": False, "required": ["name", "size", "items"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]+$", "description": "the thing's name",
                 "x-rule": "{value} is not lowercase letters", "x-fix": "write it in lowercase"},
        "size": {"type": ["integer", "number"], "exclusiveMinimum": 0, "maximum": 8,
                 "description": "how big, above 0",
                 "x-rule": "{value} is not a size (above 0, at most {maximum})",
                 "x-fix": "measure it again"},
        "count": {"type": "integer", "description": "how many"},
        "kind": {"type": "string", "enum": ["a", "b"], "description": "which kind"},
        "items": {"type": "array", "minItems": 1, "description": "the names",
                  "items": {"type": "string", "description": "one name"}},
        "entries": {"type": "array", "description": "the entries",
                    "items": {"$ref": "#/$defs/entry"}},
        "vars": {"type": "object", "description": "variables",
                 "propertyNames": {"pattern": "^[A-Z]+$", "x-rule": "{value} is not UPPER_CASE",
                                   "x-fix": "rename it"},
                 "additionalProperties": {"$ref": "#/$defs/entry"}},
    },
    "$defs": {"entry": {"type": "object", "additionalProperties": False, "required": ["why"],
                        "description": "an entry",
                        "properties": {"why": {"type": "string", "description": "why"},
                                       "note": {"type": "string", "description": "a note"}}}},
}
GOOD = {"name": "box", "size": 2.5, "items": ["a"]}


@pytest.fixture
def schema_file(tmp_path):
    path = tmp_path / "thing.schema.json"
    path.write_text(json.dumps(SCHEMA))
    return path


def check(schema_file, data, key=""):
    p = Problems(schema_file.parent / "thing.yaml", RecipeError)
    check_shape(p, data, schema_file, key)
    return p


def lines(p):
    return [item.split("\n")[0] for item in p.items]


def test_a_good_document_has_no_problems(schema_file):
    p = check(schema_file, GOOD)
    assert p.items == [] and p.refused == set()
    assert p.shaped(GOOD, "") == GOOD


@pytest.mark.parametrize("change,line,fix", [
    # an unknown key: the allowed ones listed
    ({"colour": "red"}, "colour: unknown key",
     "fix: remove it or use one of: count, entries, items, kind, name, size, vars"),
    # a wrong type; a number where a string belongs is a version YAML read as a number
    ({"count": "3"}, "count: must be an integer, got a string ('3')", "fix: write how many"),
    ({"name": 12.8}, "name: must be a string, got a number (12.8)", "fix: quote version numbers"),
    # a pattern, with the schema's own rule and fix
    ({"name": "Box"}, "name: 'Box' is not lowercase letters", "fix: write it in lowercase"),
    # a range: the rule names the schema's bound
    ({"size": 9}, "size: 9 is not a size (above 0, at most 8)", "fix: measure it again"),
    ({"kind": "c"}, "kind: 'c' is not one of a, b", "fix: use one of a, b"),
    ({"items": []}, "items: must not be empty", "fix: write the names"),
    ({"items": ["a", None]}, "items[1]: must be a string, got nothing (null)", "fix: write one name"),
    # a key's own rule (propertyNames) is named at the key
    ({"vars": {"lower": {"why": "it is"}}}, "vars.lower: 'lower' is not UPPER_CASE",
     "fix: rename it"),
])
def test_each_error_names_the_file_the_key_path_the_rule_and_the_fix(schema_file, change, line,
                                                                     fix):
    p = check(schema_file, {**GOOD, **change})
    with pytest.raises(RecipeError) as info:
        p.raise_if_any()
    message = str(info.value)
    assert message.startswith(f"{schema_file.parent / 'thing.yaml'}: 1 problem:")
    assert f"  - {line}\n    {fix}" in message


def test_a_missing_required_key_is_named_with_its_type(schema_file):
    p = check(schema_file, {"name": "box"})
    assert p.items == ["size: required key is missing\n    fix: add `size:` (an integer or a number)",
                       "items: required key is missing\n    fix: add `items:` (a list)"]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_the_infinities_break_a_bound_once(schema_file, value):
    p = check(schema_file, {**GOOD, "size": value})
    assert lines(p) == [f"size: {value} is not a size (above 0, at most 8)"]


def test_a_float_is_no_integer(schema_file):
    """JSON Schema takes 2.0 as an integer; a build number written 2.0 is a mistake."""
    assert lines(check(schema_file, {**GOOD, "count": 2.0})) == \
        ["count: must be an integer, got a number (2.0)"]
    assert lines(check(schema_file, {**GOOD, "count": True})) == \
        ["count: must be an integer, got true or false (True)"]


def test_the_top_level_of_the_wrong_type(schema_file):
    assert lines(check(schema_file, ["box"])) == ["(top level): must be a mapping, got a list (['box'])"]


def test_a_refused_value_is_left_out_and_a_required_one_refuses_its_mapping(schema_file):
    data = {**GOOD, "count": "x", "entries": [{"why": 1}, {"why": "kept", "note": 2}],
            "vars": {"A": {"note": "no why"}, "B": {"why": "kept"}}}
    p = check(schema_file, data)
    # an optional key refused: the mapping is read without it
    assert p.shaped(data, "") == {k: v for k, v in data.items() if k != "count"}
    # a required key refused (or missing): its mapping is refused; a list of mappings keeps
    # its other items, and drops only the refused key of one
    assert not p.usable("entries[0]") and p.usable("entries")
    assert p.shaped(data["entries"][1], "entries[1]") == {"why": "kept"}
    assert p.shaped(data["vars"]["A"], "vars.A") is None and p.usable("vars.B")


def test_an_item_of_a_list_of_plain_values_refuses_the_list(schema_file):
    data = {**GOOD, "items": ["a", None]}
    p = check(schema_file, data)
    assert not p.usable("items[1]") and not p.usable("items")
    assert p.shaped(data, "") == {"name": "box", "size": 2.5}


def test_keys_that_are_not_strings_are_checked_as_strings(schema_file):
    """YAML reads ``12:`` as a number; a JSON document's keys are strings."""
    p = check(schema_file, {**GOOD, "vars": {12: {"why": "a number key"}}})
    assert lines(p) == ["vars.12: '12' is not UPPER_CASE"]
    assert not p.usable("vars.12")


def test_a_block_is_checked_on_its_own_only_when_the_document_was_not(schema_file):
    entry = {"why": 3}
    p = check(schema_file, [entry], key="entries")
    assert lines(p) == ["entries[0].why: must be a string, got an integer (3)"]
    assert not p.usable("entries[0]")
    check_shape(p, [entry], schema_file, "entries")  # once per document
    assert len(p.items) == 1
    whole = check(schema_file, {**GOOD, "entries": [entry]})
    check_shape(whole, [entry], schema_file, "entries")
    assert len(whole.items) == 1


def test_subschema_follows_properties_patterns_items_and_refs(schema_file):
    schema = load_schema(schema_file)
    assert subschema(schema, ["entries", 0, "why"]) == {"type": "string", "description": "why"}
    assert subschema(schema, ["vars", "ANY", "note"])["description"] == "a note"
    assert subschema(schema, ["name", "deeper"]) is None


def test_an_invalid_schema_is_refused(tmp_path):
    from jsonschema.exceptions import SchemaError
    path = tmp_path / "bad.schema.json"
    path.write_text(json.dumps({"type": "mapping"}))
    with pytest.raises(SchemaError):
        load_schema(path)


def test_a_huge_whole_number_breaks_its_bound_without_converting(schema_file):
    """An int too large for a float is compared as an int, never turned into one."""
    assert lines(check(schema_file, {**GOOD, "size": 10 ** 400}))[0].startswith(
        "size: 1000000000")


@pytest.mark.parametrize("value", ["box\n", "\nbox", "bo\nx"])
def test_a_pattern_ends_at_the_end_of_the_text(schema_file, value):
    """ECMA-262's ``$``, as editors read the schema: Python's own would take ``"box\\n"``."""
    assert lines(check(schema_file, {**GOOD, "name": value})) == [f"name: {value!r} is not lowercase letters"]


def test_ecma_pattern_keeps_a_dollar_in_a_class_or_escaped():
    from tools.plan.jsonshape import ecma_pattern
    assert ecma_pattern("^[a$]+$").pattern == r"^[a$]+\Z"
    assert ecma_pattern(r"^\$x$").search("$x") and not ecma_pattern(r"^\$x$").search("$x\n")


def test_keep_bounded_names_a_bound_but_keeps_the_value(schema_file):
    """A runner's figures: ``size: 9`` is named and still read; a wrong type never is."""
    p = Problems(schema_file.parent / "thing.yaml", RecipeError)
    data = {**GOOD, "size": 9, "name": "Box", "count": "x"}
    check_shape(p, data, schema_file, keep_bounded=True)
    assert lines(p) == ["name: 'Box' is not lowercase letters",
                        "size: 9 is not a size (above 0, at most 8)",
                        "count: must be an integer, got a string ('x')"]
    assert p.shaped(data, "") == {**GOOD, "size": 9, "name": "Box"}


def test_keep_bounded_still_refuses_a_key_that_breaks_its_rule(schema_file):
    """A figure out of its bound is still read; a key that breaks ``propertyNames`` is not:
    nothing can be looked up under it."""
    p = Problems(schema_file.parent / "thing.yaml", RecipeError)
    check_shape(p, {**GOOD, "size": 99, "vars": {"lower": {"why": "w"}, "UP": {"why": "w"}}},
                schema_file, keep_bounded=True)
    assert lines(p) == ["size: 99 is not a size (above 0, at most 8)",
                        "vars.lower: 'lower' is not UPPER_CASE"]
    assert p.refused == {"vars.lower"}
    assert p.shaped({"lower": {}, "UP": {}}, "vars") == {"UP": {}}
