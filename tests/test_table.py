"""The compatibility table: the repository's table is valid and sane; bad tables are named."""

from __future__ import annotations

import copy
import json
import tomllib

import pytest
from jsonschema import Draft202012Validator

from tests.conftest import MINI_TABLE
from tools import ROOT
from tools.core.errors import TableError
from tools.plan.jsonshape import ShapeValidator, load_schema
from tools.plan.schema import load_yaml
from tools.plan.table import (TABLE_PATH, TABLE_SCHEMA_FILE, load_table, parse_table,
                              version_key)


def test_repository_table_is_valid_and_cites_sources():
    table = load_table()
    assert table.torch and table.cuda
    for entry in [*table.torch.values(), *table.cuda.values()]:
        assert len(entry.source) > 10, entry  # every entry says where it was checked
    # ordered numerically, never as text
    series = list(table.torch)
    assert series == sorted(series, key=version_key)


def test_repository_table_facts_checked_elsewhere():
    table = load_table()
    # the registry's torch 2.13.0 is built with CUDA 13.0, torch 2.9.1 with 12.8
    assert table.torch["2.13"].pypi_cuda == "13.0"
    assert table.torch["2.9"].pypi_cuda == "12.8"
    # CUDA 13 dropped Volta (sm_70); CUDA 12.8 added Blackwell sm_100/sm_120
    assert "70" not in table.cuda["13.0"].archs
    assert {"100", "120"} <= set(table.cuda["12.8"].archs)
    # torch >= 2.7 wheels are manylinux_2_28 with the C++11 ABI
    for s, t in table.torch.items():
        if version_key(s) >= (2, 7):
            assert t.manylinux == "2_28" and t.cxx11_abi, s


GIT = "0123abcdef0123abcdef0123abcdef0123abcdef"
TEST_INDEX = "https://download.pytorch.org/whl/test/"


def test_a_release_candidate_row(tmp_path):
    data = copy.deepcopy(MINI_TABLE)
    data["torch"]["2.10"]["candidate"] = {"git": GIT, "index": TEST_INDEX}
    table = parse_table(data, tmp_path / "table.yaml")
    rc = table.torch["2.10"].candidate
    assert (rc.git, rc.torch_index("13.0")) == (GIT, "https://download.pytorch.org/whl/test/cu130")
    assert table.torch["2.9"].candidate is None


@pytest.mark.parametrize("mutate,expect", [
    # an unquoted CUDA version key
    (lambda t: t["cuda"].__setitem__(12.8, t["cuda"]["12.6"]), "quoted major.minor"),
    # a default arch the toolkit can't compile
    (lambda t: t["cuda"]["13.0"]["default_archs"].append("70"), "sm_70 is not in this CUDA"),
    # a torch entry pointing at a CUDA version with no entry
    (lambda t: t["torch"]["2.9"]["cuda"].append("11.8"), "CUDA 11.8 has no entry under cuda:"),
    # release of another series
    (lambda t: t["torch"]["2.9"].__setitem__("release", "2.8.1"), "2.8.1 is not a 2.9.x release"),
    (lambda t: t["torch"]["2.9"].pop("source"), "torch.2.9.source: required key is missing"),
    (lambda t: t["torch"]["2.9"].__setitem__("cxx11_abi", "yes"), "must be true or false"),
    # relaxing the nvcc check for a CUDA version this torch has no cells for
    (lambda t: t["torch"]["2.9"].__setitem__("relax_nvcc_check", {"12.9": "a long enough why"}),
     "torch.2.9.relax_nvcc_check.12.9: CUDA '12.9' is not in this torch's cuda list"),
    # ... or without saying why
    (lambda t: t["torch"]["2.9"].__setitem__("relax_nvcc_check", {"13.0": "needed"}),
     "relax_nvcc_check.13.0: reason is too short"),
    (lambda t: t["torch"]["2.9"].__setitem__("relax_nvcc_check", ["13.0"]),
     "torch.2.9.relax_nvcc_check: must be a mapping"),
    # a required key missing beside an optional one (the entry used to look complete: KeyError)
    (lambda t: (t["cuda"]["12.6"].pop("image"), t["cuda"]["12.6"].__setitem__("note", "n")),
     "cuda.12.6.image: required key is missing"),
    (lambda t: (t["torch"]["2.9"].__setitem__("cxx11_abi", "yes"),
                t["torch"]["2.9"].__setitem__("note", "a note")),
     "torch.2.9.cxx11_abi: must be true or false"),
    # release candidates: the commit and the index, and only ahead of every release
    (lambda t: t["torch"]["2.10"].__setitem__("candidate", {"git": "v2.10.0-rc3",
                                                            "index": TEST_INDEX}),
     "torch.2.10.candidate.git: 'v2.10.0-rc3' is not a commit (7 to 40 lowercase hex digits)"),
    (lambda t: t["torch"]["2.10"].__setitem__("candidate", {"git": GIT,
                                                            "index": "http://x.example/test"}),
     "torch.2.10.candidate.index: 'http://x.example/test' is not an https URL ending in /"),
    (lambda t: t["torch"]["2.10"].__setitem__("candidate", {"git": GIT}),
     "torch.2.10.candidate.index: required key is missing"),
    (lambda t: t["torch"]["2.9"].__setitem__("candidate", {"git": GIT, "index": TEST_INDEX}),
     "torch.2.9.candidate: a release candidate of 2.9 is older than the release row 2.10"),
])
def test_bad_table_is_named(tmp_path, mutate, expect):
    data = copy.deepcopy(MINI_TABLE)
    mutate(data)
    with pytest.raises(TableError) as info:
        parse_table(data, tmp_path / "table.yaml")
    assert expect in str(info.value) and "table.yaml" in str(info.value)


def test_relax_nvcc_check_is_optional_and_per_cuda(tmp_path):
    data = copy.deepcopy(MINI_TABLE)
    data["torch"]["2.9"]["relax_nvcc_check"] = {
        "13.0": "the cu130 build was compiled with CUDA 12 (upstream issue #0)"}
    table = parse_table(data, tmp_path / "table.yaml")
    assert table.torch["2.9"].nvcc_check_relaxed("13.0").startswith("the cu130 build")
    assert table.torch["2.9"].nvcc_check_relaxed("12.6") is None
    assert table.torch["2.8"].relax_nvcc_check == ()   # absent: nothing relaxed


def test_uncompilable_names_what_the_toolkit_cannot_build(mini_table):
    cuda = mini_table.cuda["13.0"]
    assert cuda.uncompilable(("70", "90", "90a", "120", "121")) == ["70", "121"]
    assert cuda.uncompilable(cuda.archs) == []


def test_the_table_file_is_read_with_the_strict_loader(tmp_path):
    path = tmp_path / "table.yaml"
    path.write_text((TABLE_PATH.read_text()).replace("cuda:\n", 'cuda:\n  "12.8": {}\n', 1))
    with pytest.raises(TableError, match="the key '12.8' is given twice"):
        load_table(path)


@pytest.mark.parametrize("text", ["12.x", "\u0661\u0662.\u0668", " 12.8", "1_2.8"])
def test_version_key_takes_only_ascii_dotted_digits(text):
    # int() reads Unicode digits, spaces and underscores: the one rule (variant.dotted_key) doesn't.
    with pytest.raises(ValueError, match="ASCII digits in dot-separated parts"):
        version_key(text)


# ---------------------------------------------------------------- the shape: table.schema.json

def _nodes(node, path="$"):
    """Every schema node under ``node`` with its path (annotations left out)."""
    if isinstance(node, dict):
        yield path, node
        for key, sub in node.items():
            if not key.startswith("x-") and key not in ("enum", "const", "required"):
                yield from _nodes(sub, f"{path}.{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from _nodes(sub, f"{path}[{i}]")


@pytest.fixture(scope="module")
def table_schema():
    return json.loads(TABLE_SCHEMA_FILE.read_text())


def test_the_repository_table_satisfies_its_published_schema(table_schema):
    assert table_schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(table_schema)
    data = load_yaml(TABLE_PATH, TableError)
    assert [e.message for e in ShapeValidator(table_schema).iter_errors(data)] == []
    # plain draft 2020-12 too, as an editor checks it
    assert [e.message for e in Draft202012Validator(table_schema).iter_errors(data)] == []
    assert load_schema(TABLE_SCHEMA_FILE) == table_schema


def test_every_table_property_says_what_it_means_and_every_constraint_its_fix(table_schema):
    nodes = list(_nodes(table_schema))
    props = [(f"{path}.{name}", sub) for path, node in nodes
             for name, sub in node.get("properties", {}).items()]
    assert [path for path, sub in props if not sub.get("description")] == []
    assert len(props) >= 30
    constrained = [(path, node) for path, node in nodes
                   if any(k in node for k in ("pattern", "enum", "const", "minItems"))]
    assert [path for path, node in constrained if not node.get("x-fix")] == []
    assert len(constrained) >= 12


def test_the_table_schema_ships_with_the_tools():
    assert TABLE_SCHEMA_FILE.is_relative_to(ROOT / "tools")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = data["tool"]["setuptools"]["package-data"]["tools.plan"]
    assert any(TABLE_SCHEMA_FILE.match(pattern) for pattern in package_data)


@pytest.mark.parametrize("path,value,schema_path", [
    ("torch/2.9/manylinux", "2.28", "$defs/torch/properties/manylinux"),
    ("torch/2.9/python", ["3.12", "2.7"], "$defs/torch/properties/python/items"),
    ("cuda/13.0/archs", ["90", "sm_90"], "$defs/arch"),
    ("torch/2.10/candidate", {"git": "v2.10.0-rc3", "index": TEST_INDEX},
     "$defs/candidate/properties/git"),
    ("schema", 2, "properties/schema"),
])
def test_a_bad_tables_message_is_the_schema_files_own_words(tmp_path, table_schema, path,
                                                             value, schema_path):
    """The rule and the fix come from table.schema.json: the code holds no second copy."""
    data = copy.deepcopy(MINI_TABLE)
    *parents, last = path.split("/")
    node = data
    for key in parents:
        node = node[key]
    node[last] = value
    rules = table_schema
    for key in schema_path.split("/"):
        rules = rules[key]
    with pytest.raises(TableError) as info:
        parse_table(data, tmp_path / "table.yaml")
    shown = value[-1] if isinstance(value, list) else value.get("git") \
        if isinstance(value, dict) else value
    rule = rules["x-rule"].format(value=repr(shown))
    assert f"{rule}\n    fix: {rules['x-fix']}" in str(info.value)


def test_an_unquoted_version_key_breaks_the_schemas_key_rule(tmp_path, table_schema):
    """YAML reads ``12.8:`` as a number; the schema sees the text "12.8", so the code names the
    key, in the schema's words."""
    data = copy.deepcopy(MINI_TABLE)
    data["torch"][2.9] = data["torch"].pop("2.9")
    names = table_schema["properties"]["torch"]["propertyNames"]
    with pytest.raises(TableError) as info:
        parse_table(data, tmp_path / "table.yaml")
    assert f"torch.2.9: {names['x-rule']}\n    fix: {names['x-fix']}" in str(info.value)


def test_a_bad_arch_is_named_and_the_rules_across_fields_still_run(tmp_path):
    """A value that breaks a pattern is kept (keep_bounded): the default-archs rule runs in the
    same pass, as it did when the shape was checked by hand."""
    data = copy.deepcopy(MINI_TABLE)
    data["cuda"]["13.0"]["default_archs"].append("7x")
    with pytest.raises(TableError) as info:
        parse_table(data, tmp_path / "table.yaml")
    message = str(info.value)
    assert "cuda.13.0.default_archs[" in message and "'7x' is not an sm number" in message
    assert "cuda.13.0.default_archs: sm_7x is not in this CUDA's archs" in message
    assert "2 problems" in message
