"""The refresh's YAML: round-tripped with comments and layout kept (ruamel.yaml), and the
values it writes spelled the way the table and the recipes spell theirs."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from .registry import TorchFacts


def yaml_rt() -> YAML:
    """A round-trip loader and dumper that keeps quotes, comments and the files' indentation."""
    y = YAML()
    y.preserve_quotes = True
    y.width = 4096  # never re-wrap the long source/reason strings
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def dump(doc: Any) -> str:
    """A loaded document as text again."""
    out = io.StringIO()
    yaml_rt().dump(doc, out)
    return out.getvalue()


def quoted(text: str) -> DoubleQuotedScalarString:
    """A string written in double quotes, as the table's versions are."""
    return DoubleQuotedScalarString(text)


def flow(items: Iterable[str]) -> CommentedSeq:
    """A list of quoted strings on one line (``["3.10", "3.11"]``)."""
    seq = CommentedSeq([quoted(i) for i in items])
    seq.fa.set_flow_style()
    return seq


def like(old: Any, new: str) -> Any:
    """``new`` quoted the way the value it replaces was."""
    return type(old)(new) if isinstance(old, str) and type(old) is not str else new


def source(facts: TorchFacts, fields: Iterable[str], date: str) -> str:
    """A row's ``source:``: how each of ``fields`` was read, the wheel read, and when."""
    parts = [f"{k}: {facts.how[k]}" for k in fields if k in facts.how]
    return "; ".join(parts) + f"; {facts.how.get('read', '')}, by tools.refresh on {date}"


def show(value: Any) -> str:
    """A value as messages show it: lists in brackets, booleans in lower case."""
    if isinstance(value, list):
        return "[" + ", ".join(value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)
