"""The recipe reference: every field of ``recipe.schema.json`` as Markdown, for the docs.

``docs/contributing/recipe-reference.md`` holds it as a generated part (``recipe-reference``,
``tools.devtools.docpages``): one table per top-level field, one row per field under it, with
its key path, type, whether it is required, its description, and the schema's constraints, the
rule a value breaks (``x-rule``) and the fix the validator prints (``x-fix``). The schema is
the one source: a field added there appears here when the pages are regenerated.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .shape import RECIPE_SCHEMA_FILE

#: The name a key of a free-form mapping gets in a path, by the mapping's path.
_KEY_NAMES = {"cuda": "<X.Y>", "archs": "<X.Y or *>", "env": "<NAME>",
              "platforms": "<platform>", "platforms.<platform>.archs": "<X.Y or *>"}
#: The constraint keywords shown, in this order, with how each reads.
_CONSTRAINTS = (("const", "exactly {}"), ("enum", "one of {}"), ("default", "default {}"),
                ("pattern", "matches {}"), ("minimum", "at least {}"),
                ("exclusiveMinimum", "above {}"), ("maximum", "at most {}"),
                ("maxLength", "at most {} characters"), ("minItems", "at least {} item(s)"),
                ("minProperties", "at least {} entry(ies)"))


@dataclass(frozen=True)
class Field:
    """One row of the reference."""

    path: str
    node: dict[str, Any]
    required: str  # "yes", "no", or "per entry" for a key of a free-form mapping


def _schema() -> dict[str, Any]:
    return json.loads(RECIPE_SCHEMA_FILE.read_text(encoding="utf-8"))


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``node`` with its ``$ref`` (``#/$defs/<name>``) merged under its own keys."""
    ref = node.get("$ref")
    if not isinstance(ref, str):
        return node
    return {**defs[ref.rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}


def fields(node: dict[str, Any], path: str, defs: dict[str, Any]) -> Iterator[Field]:
    """Every field below ``node`` (an object or array schema at ``path``), depth first."""
    required = set(node.get("required", ()))
    for key, child in node.get("properties", {}).items():
        child = _resolve(child, defs)
        at = f"{path}.{key}" if path else key
        yield Field(at, child, "yes" if key in required else "no")
        yield from fields(child, at, defs)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        at = f"{path}.{_KEY_NAMES.get(path, '<key>')}"
        extra = _resolve(extra, defs)
        yield Field(at, extra, "per entry")
        yield from fields(extra, at, defs)
    items = node.get("items")
    if isinstance(items, dict):
        items = _resolve(items, defs)
        at = f"{path}[]"
        if items.get("type") == "object":
            yield from fields(items, at, defs)
        else:
            yield Field(at, items, "per item")


def _type(node: dict[str, Any]) -> str:
    kind = node.get("type", "any")
    kinds = kind if isinstance(kind, list) else [kind]
    if "array" in kinds and isinstance(node.get("items"), dict):
        inner = node["items"].get("type", "any")
        kinds = [f"array of {inner}" if k == "array" else k for k in kinds]
    return " or ".join(kinds)


def _code(value: Any) -> str:
    return f"`{json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value}`"


def _md(text: str) -> str:
    """``text`` safe in a table cell: outside its `code` spans, what Markdown would read as
    HTML (``<name>``), emphasis (``"*"``) or a cell's end (``|``) is escaped; inside them
    nothing is (the table extension splits no cell inside a code span, and shows a backslash
    there as written)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = (parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                    .replace("*", "\\*").replace("|", "\\|"))
    return "`".join(parts)


def _constraints(node: dict[str, Any]) -> list[str]:
    out = [how.format(", ".join(map(_code, node[key])) if key == "enum" else _code(node[key]))
           for key, how in _CONSTRAINTS if key in node]
    if isinstance(node.get("propertyNames"), dict):
        out += [f"keys: {c}" for c in _constraints(node["propertyNames"])]
    for sub in node.get("allOf", ()):
        out += _constraints(sub)
    return out


def _said(node: dict[str, Any], key: str) -> list[str]:
    """``x-rule`` / ``x-fix`` of ``node``, its ``allOf`` parts and its key rules, as text."""
    value = node.get(key)
    out = ([f"{k}: {v}" for k, v in value.items()] if isinstance(value, dict)
           else [value] if isinstance(value, str) else [])
    for sub in node.get("allOf", ()):
        out += _said(sub, key)
    if isinstance(node.get("propertyNames"), dict):
        out += [f"keys: {said}" for said in _said(node["propertyNames"], key)]
    return out


def _cell(parts: list[str], *, text: bool = True) -> str:
    # A table cell is one line: its parts are joined by a line break of HTML.
    shown = [(_md(p) if text else p).replace("\n", " ") for p in parts]
    return "<br>".join(shown) or "—"


def _row(f: Field) -> str:
    node = f.node
    return "| " + " | ".join([
        f"`{f.path}`", _type(node), f.required, _cell([node.get("description", "")]),
        _cell(_constraints(node), text=False), _cell(_said(node, "x-rule")),
        _cell(_said(node, "x-fix")),
    ]) + " |"


def reference_markdown() -> str:
    """The reference's Markdown: the schema's own description, then one section per top-level
    field (in the schema's order) with a table of it and every field under it."""
    schema = _schema()
    defs = schema.get("$defs", {})
    header = ("| Field | Type | Required | Description | Constraints | Rule broken (x-rule) "
              "| Fix (x-fix) |\n|---|---|---|---|---|---|---|")
    top_required = set(schema.get("required", ()))
    out = [_md(schema.get("description", "")), "",
           f"Required at the top level: {', '.join(f'`{k}`' for k in schema.get('required', ()))}."
           " `{value}` and the like in a rule are filled with the value found."]
    for key, node in schema["properties"].items():
        node = _resolve(node, defs)
        rows = [_row(Field(key, node, "yes" if key in top_required else "no")),
                *(_row(f) for f in fields(node, key, defs))]
        out += ["", f"### `{key}`", "", _md(node.get("description", "")), "", header, *rows]
    return "\n".join(out)
