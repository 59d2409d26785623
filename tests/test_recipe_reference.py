"""tools.plan.recipes.reference: the recipe reference page lists every field of the recipe
schema, with its rule and fix, and follows the schema when it changes."""

from __future__ import annotations

import json

from tools.plan.recipes import reference
from tools.plan.recipes.shape import RECIPE_SCHEMA_FILE


def _leaves(node: dict, path: str = "") -> list[str]:
    """The key paths of the schema's named properties (the rows a reader looks up)."""
    out = []
    for key, child in node.get("properties", {}).items():
        at = f"{path}.{key}" if path else key
        out += [at, *_leaves(child, at)]
    for step, name in (("additionalProperties", None), ("items", "[]")):
        child = node.get(step)
        if isinstance(child, dict):
            out += _leaves(child, f"{path}{name}" if name else f"{path}.*")
    return out


def test_every_field_of_the_schema_has_a_row_with_its_rule_and_fix():
    schema = json.loads(RECIPE_SCHEMA_FILE.read_text())
    page = reference.reference_markdown()
    rows = [line.split(" | ")[0].removeprefix("| `").removesuffix("`")
            for line in page.splitlines() if line.startswith("| `")]
    for path in _leaves(schema):
        # A free-form mapping's key is shown by what it stands for (<X.Y>, <NAME>, ...).
        pattern = path.split(".")
        assert any(len(_parts(r)) == len(pattern) and all(
            p == "*" or p == q for p, q in zip(pattern, _parts(r))) for r in rows), path
    for needed in ("cuda.<X.Y>.torch_from", "build.requires[].requirement", "env.<NAME>.value",
                   "platforms.<platform>.archs.<X.Y or *>", "source.sha256", "probe.units[]"):
        assert needed in rows, needed
    assert "| `source.sha256` | string | yes | " in page
    assert "| `build.nvcc_threads` | integer | no | " in page
    assert "one of `plain`, `torch`" in page  # arch_env.style's enum
    assert "keys: {value} is not an UPPER_CASE environment variable name" in page
    for text in ("copy the sha256 digest from the registry's file listing",
                 "{value} is not 64 lowercase hex digits"):
        assert text in page


def _parts(row: str) -> list[str]:
    # <X.Y or *> holds a dot and a space: keep each <...> whole when splitting a path.
    out, depth, cur = [], 0, ""
    for ch in row:
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "." and not depth:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


def test_a_field_added_to_the_schema_appears_on_the_page(tmp_path, monkeypatch):
    schema = json.loads(RECIPE_SCHEMA_FILE.read_text())
    schema["properties"]["build"]["properties"]["cache_key"] = {
        "type": "string", "description": "a <key> for the *cache*", "pattern": "^[a-z]+$",
        "x-rule": "{value} is not lowercase", "x-fix": "write it in lowercase | no digits"}
    copy = tmp_path / "recipe.schema.json"
    copy.write_text(json.dumps(schema))
    monkeypatch.setattr(reference, "RECIPE_SCHEMA_FILE", copy)
    page = reference.reference_markdown()
    assert ("| `build.cache_key` | string | no | a &lt;key&gt; for the \\*cache\\* | matches "
            "`^[a-z]+$` | {value} is not lowercase | write it in lowercase \\| no digits |") in page
