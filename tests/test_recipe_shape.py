"""tools.plan.recipes.shape: the recipe's JSON Schema is a valid draft 2020-12 schema, every
repository recipe satisfies it, it is the file loading a recipe checks against, and each
property says what it means."""

from __future__ import annotations

import json
import tomllib

import pytest
from jsonschema import Draft202012Validator

from tools import ROOT
from tools.core.errors import RecipeError
from tools.plan.jsonshape import ShapeValidator, load_schema
from tools.plan.recipes.model import load_recipe, recipe_folders
from tools.plan.recipes.shape import RECIPE_SCHEMA_FILE
from tools.plan.schema import load_yaml


@pytest.fixture(scope="module")
def schema():
    return json.loads(RECIPE_SCHEMA_FILE.read_text())


def test_the_schema_is_valid_draft_2020_12(schema):
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("folder", recipe_folders(), ids=lambda f: f.name)
def test_every_repository_recipe_satisfies_the_schema(schema, folder):
    data = load_yaml(folder / "recipe.yaml", RecipeError)
    assert [e.message for e in ShapeValidator(schema).iter_errors(data)] == []
    # plain draft 2020-12 too, as an editor checks it
    assert [e.message for e in Draft202012Validator(schema).iter_errors(data)] == []


def _properties(node, path="$"):
    """Every property schema under ``node``, with its path."""
    if isinstance(node, dict):
        for name, sub in node.get("properties", {}).items():
            yield f"{path}.{name}", sub
        for key, sub in node.items():
            if key in ("properties", "patternProperties", "$defs"):
                for name, child in sub.items():
                    yield from _properties(child, f"{path}.{name}")
            elif isinstance(sub, (dict, list)) and not key.startswith("x-"):
                yield from _properties(sub, f"{path}.{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from _properties(sub, f"{path}[{i}]")


def test_every_property_says_what_it_means(schema):
    missing = [path for path, sub in _properties(schema) if not sub.get("description")]
    assert missing == []
    assert len(list(_properties(schema))) > 60


def test_every_constraint_has_its_fix(schema):
    """A value that breaks a pattern, an enum or a bound is told what to write."""
    def constrained(node, path="$"):
        if isinstance(node, dict):
            if any(k in node for k in ("pattern", "enum", "const", "minimum", "maximum",
                                       "exclusiveMinimum", "maxLength", "minItems",
                                       "minProperties")):
                yield path, node
            for key, sub in node.items():
                if not key.startswith("x-"):
                    yield from constrained(sub, f"{path}.{key}")
        elif isinstance(node, list):
            for i, sub in enumerate(node):
                yield from constrained(sub, f"{path}[{i}]")
    found = list(constrained(schema))
    assert [path for path, node in found if not node.get("x-fix")] == []
    assert len(found) > 15


def test_loading_a_recipe_checks_it_against_this_file(schema, write_recipe, good_recipe,
                                                      mini_table):
    """The message's rule and fix are the file's own words: the code holds no second copy."""
    sha = schema["properties"]["source"]["properties"]["sha256"]
    good_recipe["source"]["sha256"] = "abc123"
    folder = write_recipe(good_recipe)
    with pytest.raises(RecipeError) as info:
        load_recipe(folder, mini_table)
    rule = sha["x-rule"].format(value="'abc123'")
    assert f"  - source.sha256: {rule}\n    fix: {sha['x-fix']}" in str(info.value)
    assert load_schema(RECIPE_SCHEMA_FILE) == schema


def test_the_schema_ships_with_the_tools():
    """Inside the tools package: the container stages tools/ whole, and an install carries it
    as package data."""
    assert RECIPE_SCHEMA_FILE.is_relative_to(ROOT / "tools")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = data["tool"]["setuptools"]["package-data"]["tools.plan.recipes"]
    assert any(RECIPE_SCHEMA_FILE.match(pattern) for pattern in package_data)
    farm = data["project"]["optional-dependencies"]["farm"]
    assert any(r.startswith("jsonschema==") for r in farm)


@pytest.mark.parametrize("path,value,expect", [
    # each shape rule the hand checks had, now the schema's, in the words they used
    ("schema", 2, "schema: version 2 is not understood\n    fix: use schema: 1"),
    ("package", "Demo-Ext", "package: 'Demo-Ext' must be lowercase letters, digits and underscores"),
    ("imports", ["demo ext"], "imports[0]: 'demo ext' is not an importable module name"),
    ("imports", [], "imports: must not be empty"),
    ("cuda", {}, "cuda: must list at least one CUDA version"),
    ("source/sdist", "demo_ext-1.0.0.zip", "source.sdist: 'demo_ext-1.0.0.zip' is not a .tar.gz sdist"),
    ("build/job_memory_gib", 0, "build.job_memory_gib: 0 is not a size of one compile job"),
    ("env/lower_case", {"value": "1", "reason": "what the build reads"},
     "env.lower_case: 'lower_case' is not an UPPER_CASE environment variable name"),
    ("env/DEMO_FORCE_BUILD", {"value": "x" * 5000, "reason": "what the build reads"},
     "env.DEMO_FORCE_BUILD.value: is 5000 characters long (at most 4096)"),
    ("arch_env/name", "arch list", "arch_env.name: 'arch list' is not an environment variable name"),
    ("build/number", 2.0, "build.number: must be an integer, got a number (2.0)"),
    # too large for a float: compared as the int it is (the hand check raised OverflowError)
    ("build/job_memory_gib", 10 ** 400, "build.job_memory_gib: 1000"),
    # a name ends at the end of the text, never before a final newline
    ("source/sha256", "0" * 64 + "\n", "source.sha256: '" + "0" * 64 + "\\n' is not 64 lowercase"),
])
def test_shape_rules_come_from_the_schema(path, value, expect, write_recipe, good_recipe,
                                          mini_table):
    *parents, last = path.split("/")
    node = good_recipe
    for key in parents:
        node = node[key]
    node[last] = value
    folder = write_recipe(good_recipe, name="demo_ext")
    with pytest.raises(RecipeError) as info:
        load_recipe(folder, mini_table)
    message = str(info.value)
    assert message.startswith(f"{folder / 'recipe.yaml'}: "), message
    assert f"  - {expect}" in message and "\n    fix: " in message
