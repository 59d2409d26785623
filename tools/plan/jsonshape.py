"""A data file's shape checked against a published JSON Schema (draft 2020-12), its errors as
:class:`~tools.plan.schema.Problems`.

The schema is the one source of a file's shape: which keys a mapping allows and needs, each
value's type, patterns, enums, ranges and list items. Editors read the same file as a
contributor types (``# yaml-language-server: $schema=...``); here the ``jsonschema`` library
validates, and each of its errors becomes a problem that names the file, the key path, the rule
and the fix, as the hand-written checks did. Two annotation keywords (the specification allows
unknown ones) carry the words: ``x-rule``, the rule as a message says it (a string, or a mapping
from a validation keyword to one; ``{value}`` is the value, shortened, and ``{minimum}``,
``{maximum}``, ... the schema's own numbers), and ``x-fix``, what to do; ``description`` says
what a key means, and is the fix where no ``x-fix`` is given.

A value the schema refuses is left out of what the code reads next (:meth:`Problems.shaped`),
and so is a mapping whose required key was refused or missing: the cross-field rules that stay
code (an arch the table's nvcc knows, a torch series the table has, a patch file that exists)
run on well-shaped values only, and nothing is reported twice.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from functools import lru_cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.validators import extend

from .schema import Problems, describe, join_path

#: JSON Schema's type names as the messages say them.
_JSON_TYPES = {"string": "a string", "integer": "an integer", "number": "a number",
               "boolean": "true or false", "array": "a list", "object": "a mapping",
               "null": "null"}
_QUOTE_HINT = "quote version numbers (\"12.8\") so YAML keeps them as strings"


def _whole_number(checker: Any, instance: Any) -> bool:
    # 2.0 is no build number: a float never passes as an integer (JSON Schema lets it)
    return isinstance(instance, int) and not isinstance(instance, bool)


def _finite(keyword: str) -> Any:
    """The bound ``keyword``, which NaN breaks too (it compares false with every number, so
    ``minimum`` and ``maximum`` alone let ``.nan`` through)."""
    bound = Draft202012Validator.VALIDATORS[keyword]

    def check(validator: Any, limit: Any, instance: Any, schema: dict) -> Any:
        # a float only: an int of 400 digits is finite, and too large to convert to one
        if isinstance(instance, float) and not math.isfinite(instance):
            yield ValidationError(f"{instance} is not a finite number")
            return
        yield from bound(validator, limit, instance, schema)
    return check


@lru_cache(maxsize=256)
def ecma_pattern(pattern: str) -> re.Pattern:
    """``pattern`` compiled as JSON Schema reads it (ECMA-262): ``$`` is the end of the text.
    Python's ``$`` also matches before a final newline, which would let ``"FOO\\n"`` pass
    ``^[A-Z]+$``; outside a character class it becomes ``\\Z``."""
    out, in_class, escaped = [], False, False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "$" and not in_class:
            out.append(r"\Z")
            continue
        out.append(char)
    return re.compile("".join(out))


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict) -> Any:
    if validator.is_type(instance, "string") and not ecma_pattern(pattern).search(instance):
        yield ValidationError(f"{_VALUE.repr(instance)} does not match {pattern!r}")


#: What makes a value unreadable, whatever ``keep_bounded`` says: the wrong type, a required
#: key missing.
_UNREADABLE = ("type", "required")
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
#: Draft 2020-12, with ``integer`` meaning a whole number written as one, every bound refusing
#: NaN and the infinities, and ``$`` in a pattern the end of the text, as ECMA-262 has it.
ShapeValidator = extend(Draft202012Validator,
                        validators={**{k: _finite(k) for k in _BOUNDS}, "pattern": _pattern},
                        type_checker=Draft202012Validator.TYPE_CHECKER
                        .redefine("integer", _whole_number))


@lru_cache(maxsize=8)
def load_schema(path: Path) -> dict:
    """The JSON Schema at ``path``, checked to be a valid draft 2020-12 schema."""
    schema = json.loads(Path(path).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return schema


@lru_cache(maxsize=8)
def _validator(path: Path) -> Draft202012Validator:
    return ShapeValidator(load_schema(path))


def subschema(schema: dict, tokens: list) -> dict | None:
    """The part of ``schema`` that governs the value at the key path ``tokens`` (keys and list
    indexes), following local ``$ref`` pointers; None where the schema says nothing."""
    node: Any = _resolve(schema, schema)
    for token in tokens:
        if not isinstance(node, dict):
            return None
        if isinstance(token, int):
            node = node.get("items")
        elif token in node.get("properties", {}):
            node = node["properties"][token]
        else:
            node = next((s for pattern, s in node.get("patternProperties", {}).items()
                         if ecma_pattern(pattern).search(token)),
                        node.get("additionalProperties"))
        node = _resolve(schema, node) if isinstance(node, dict) else None
    return node


def _resolve(root: dict, node: dict) -> dict:
    """``node``, or what its local ``$ref`` (``#/$defs/...``) points to."""
    seen = 0
    while isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/") and seen < 32:
        target: Any = root
        for part in node["$ref"][2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        node, seen = target, seen + 1
    return node


def check_shape(p: Problems, instance: Any, schema_file: Path, key: str = "", *,
                keep_bounded: bool = False) -> None:
    """Check ``instance`` against the schema in ``schema_file`` (with ``key``: against the
    schema of the document's top-level ``key``, ``instance`` being its value), every error into
    ``p`` and every refused value into ``p.refused``. With ``keep_bounded``, a value of the
    right type that breaks a pattern, an enum or a bound is named but still read, so that the
    rules across fields that use it are checked in the same run (a runner's figures); a key
    that breaks ``propertyNames`` is refused all the same.

    Done once per document: a block parser checks its own block this way when it is called on
    its own, and does nothing when the whole document was checked first."""
    if "" in p.checked or key in p.checked:
        return
    p.checked.add(key)
    root = load_schema(schema_file)
    validator = _validator(schema_file)
    base: list = [key] if key else []
    if key:
        part = subschema(root, base)
        if part is None:
            return
        validator = validator.evolve(schema=part)
    refused: list[list] = []
    said: set[tuple[str, str]] = set()
    for error in validator.iter_errors(_json_copy(instance)):
        found = _report(p, error, base, said, root)
        # a key that breaks its rule is never read: nothing can be looked up under it
        if not keep_bounded or error.validator in _UNREADABLE or \
                "propertyNames" in error.relative_schema_path:
            refused += found
            p.refused.update(where for where in map(_where, found) if where)
    _propagate(p, root, refused)


def _json_copy(value: Any) -> Any:
    """``value`` with every mapping key a string, as in a JSON document (YAML reads ``12.9:``
    as a number; what the key must be is the code's to say, against the table)."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_copy(v) for v in value]
    return value


def _where(tokens: list) -> str:
    """``build.requires[0].reason``: a key path as the messages write it."""
    out = ""
    for token in tokens:
        out = f"{out}[{token}]" if isinstance(token, int) else join_path(out, token)
    return out


def _report(p: Problems, error: ValidationError, base: list, said: set, root: dict
            ) -> list[list]:
    """Add ``error`` to ``p`` as a problem (file, key path, rule, fix); the key path whose value
    it breaks (none for an unknown key, refused here: nothing reads it)."""
    tokens = base + list(error.absolute_path)
    if "propertyNames" in error.relative_schema_path:
        tokens.append(error.instance)  # the key itself broke the rule
    where, schema, kind = _where(tokens), error.schema, error.validator
    if not isinstance(schema, dict):
        schema = {}
    if kind == "additionalProperties":
        allowed = ", ".join(sorted(schema.get("properties", {})))
        for extra in _extras(error.instance, schema):
            p.add(join_path(where, extra), "unknown key", f"remove it or use one of: {allowed}")
            p.refused.add(join_path(where, extra))
        return []
    if kind == "required":
        if (where, kind) in said:
            return []  # jsonschema reports each missing key apart: all are named at once
        said.add((where, kind))
        for name in error.validator_value:
            if name not in error.instance:
                named = schema.get("properties", {}).get(name, {})
                kinds = _resolve(root, named).get("type", "object")
                p.add(join_path(where, name), "required key is missing",
                      f"add `{name}:` ({_type_names(kinds)})")
    elif kind == "type":
        value = error.instance
        quote = "string" in _listed(error.validator_value) and \
            isinstance(value, (int, float)) and not isinstance(value, bool)
        p.add(where or "(top level)", f"must be {_type_names(error.validator_value)}, got "
              f"{describe(value)}", _QUOTE_HINT if quote else _fix(schema, kind))
    else:
        rule = _rule(schema, kind, error)
        if (where, rule) in said:
            return []  # two bounds of one value broken alike (NaN breaks both)
        said.add((where, rule))
        p.add(where or "(top level)", rule, _fix(schema, kind))
    return [tokens]


def _propagate(p: Problems, root: dict, refused: list[list]) -> None:
    """A refused value refuses what holds it when the code can't read that without it: a
    mapping whose required key is refused, a list of plain values one of whose items is. A
    list of mappings keeps its other items, and the document itself is always read."""
    pending = list(refused)
    while pending:
        tokens = pending.pop()
        if len(tokens) < 2:
            continue  # the document itself: its top-level keys are read one by one
        parent, last = tokens[:-1], tokens[-1]
        node = subschema(root, parent)
        if node is None:
            continue
        if isinstance(last, int):
            item = node.get("items")
            spread = not (isinstance(item, dict) and _resolve(root, item).get("type") == "object")
        else:
            spread = last in node.get("required", ())
        if spread and _where(parent) not in p.refused:
            p.refused.add(_where(parent))
            pending.append(parent)


def _extras(instance: Any, schema: dict) -> list[str]:
    """The keys of ``instance`` that neither ``properties`` nor ``patternProperties`` name."""
    named = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [key for key in instance if key not in named
            and not any(ecma_pattern(pattern).search(key) for pattern in patterns)]


def _listed(kinds: Any) -> list[str]:
    return list(kinds) if isinstance(kinds, list) else [kinds]


def _type_names(kinds: Any) -> str:
    return " or ".join(_JSON_TYPES.get(k, str(k)) for k in _listed(kinds))


class _Fields(dict):
    """The values an ``x-rule`` may name; an unknown ``{name}`` is left as written."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _rule(schema: dict, kind: str, error: ValidationError) -> str:
    """The rule ``error`` breaks, in words: the schema's ``x-rule`` for its keyword, else a
    sentence made from the keyword."""
    value = error.instance
    shown = _VALUE.repr(value)
    rule = schema.get("x-rule")
    if isinstance(rule, dict):
        rule = rule.get(kind)
    if isinstance(rule, str):
        fields = _Fields({k: v for k, v in schema.items()
                          if isinstance(v, (int, float, str)) and not k.startswith("x-")})
        fields.update(value=shown, length=len(value) if isinstance(value, (str, list, dict))
                      else "")
        return rule.format_map(fields)
    limit = error.validator_value
    if kind == "enum":
        return f"{shown} is not one of {', '.join(map(str, limit))}"
    if kind in ("minItems", "minProperties") and limit == 1:
        return "must not be empty"
    if kind == "maxLength":
        return f"is {len(value)} characters long (at most {limit})"
    if kind == "pattern":
        return f"{shown} does not match {limit}"
    return error.message[:MAX_RULE_CHARS]


#: The longest rule taken from jsonschema's own message (a value is shown inside it whole).
MAX_RULE_CHARS = 300


def _fix(schema: dict, kind: str) -> str | None:
    """What to do: the schema's ``x-fix`` (for the keyword, when it is a mapping), else its
    ``description`` (what the key means), else the enum's values."""
    fix = schema.get("x-fix")
    if isinstance(fix, dict):
        fix = fix.get(kind)
    if isinstance(fix, str):
        return fix
    if kind == "enum" and isinstance(schema.get("enum"), list):
        return f"use one of {', '.join(map(str, schema['enum']))}"
    description = schema.get("description")
    return f"write {description[0].lower()}{description[1:]}" if description else None


_VALUE = reprlib.Repr()
_VALUE.maxstring = _VALUE.maxother = 200
_VALUE.maxlist = _VALUE.maxdict = 5
_VALUE.maxlevel = 2
