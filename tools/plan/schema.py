"""A small strict reader for the project's YAML data (the table and the recipes).

Every problem names the file, the key path and the rule, and says how to fix it. Problems are
collected rather than raised one at a time, so a contributor sees every mistake in one run.

The files are plain data, so the reader takes only what plain data needs: a regular file of at
most :data:`MAX_YAML_BYTES` bytes, UTF-8, nested at most :data:`MAX_DEPTH` deep, each key once
(YAML's own rule; PyYAML lets the last of two ``sha256:`` win), and no anchors, aliases or merge
keys (an alias bomb of a few lines expands to gigabytes before anything could look at it).
"""

from __future__ import annotations

import reprlib
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.core.errors import CuwheelsError
from tools.core.regularfile import FileTooLarge, NotRegularFile, read_regular

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
               list: "a list", dict: "a mapping", type(None): "null"}

#: The largest table or recipe read (recipes/table.yaml, the largest, is 17 KB).
MAX_YAML_BYTES = 1 << 20
#: Mappings and lists inside each other (a recipe goes 4 deep).
MAX_DEPTH = 32
#: Characters of one problem's text: a hostile value never makes a message long.
MAX_PROBLEM_CHARS = 1000
_SYNTAX_HINT = "check indentation and quoting; versions like 12.10 must be quoted"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(yaml.MarkedYAMLError):
    """A YAML feature plain data doesn't use, or a key given twice; its ``hint`` says what to do."""

    def __init__(self, problem: str, mark: Any, hint: str):
        super().__init__(problem=problem, problem_mark=mark)
        self.hint = hint


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors, aliases or merge keys, with each key once and a
    nesting limit."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        """Compose one node, refusing an alias or an anchor, or one level too deep."""
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(f"an alias (*{event.anchor[:40]}) is not allowed here",
                           event.start_mark, "write the value out: these files are plain data")
        if getattr(event, "anchor", None) is not None:
            raise _Refused(f"an anchor (&{event.anchor[:40]}) is not allowed here",
                           event.start_mark, "write the value out: these files are plain data")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested more than {MAX_DEPTH} levels deep", event.start_mark,
                               "these files are a few levels deep; check the brackets")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        """Construct a mapping, refusing a merge key and a key given twice."""
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                raise _Refused("a merge key (<<) is not allowed here", key_node.start_mark,
                               "write the keys out: these files are plain data")
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark)
            except TypeError:
                continue  # an unhashable key: PyYAML's own construction names it
            if first is not key_node.start_mark:
                raise _Refused(f"the key {reprlib.repr(key)} is given twice (first on line "
                               f"{first.line + 1})", key_node.start_mark,
                               "keep one of them: YAML keys are unique, and a reader would "
                               "silently take the last")
        return super().construct_mapping(node, deep)


def read_text(path: Path, error: type[CuwheelsError], limit: int = MAX_YAML_BYTES) -> str:
    """The UTF-8 text of the regular file ``path``, at most ``limit`` bytes; ``error`` names the
    file and the rule otherwise (a FIFO or a device is never opened for a blocking read)."""
    try:
        data = read_regular(path, limit)
    except NotRegularFile as exc:
        what = "a folder" if stat.S_ISDIR(exc.mode) else \
            "a device, FIFO or socket (or a link to one)"
        raise error(f"{path}: is not a regular file but {what}",
                    hint="it must be a plain text file in the repository") from None
    except FileTooLarge:
        raise error(f"{path}: larger than {limit} bytes", hint="these files are a few kilobytes; "
                    "check that it is the file meant") from None
    except OSError as exc:
        raise error(f"{path}: cannot be read: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r})",
                    hint="save the file as UTF-8") from None


def parse_yaml(text: str, path: Path, error: type[CuwheelsError]) -> Any:
    """Parse YAML ``text`` read from ``path`` with the strict loader, turning every problem into
    ``error`` with the file and the place named."""
    loader = None
    try:
        loader = _StrictLoader(text)  # its reader already refuses control characters
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"{path}{where}: not valid YAML: {problem[:MAX_PROBLEM_CHARS]}",
                    hint=getattr(exc, "hint", _SYNTAX_HINT)) from None
    except ValueError as exc:  # a number with more digits than Python converts, a 13th month
        raise error(f"{path}: not valid YAML: {str(exc).split(';')[0][:MAX_PROBLEM_CHARS]}",
                    hint="write numbers and dates of a sensible size") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(path: Path, error: type[CuwheelsError]) -> Any:
    """Read and parse a YAML file (:func:`read_text`, :func:`parse_yaml`): every I/O, size,
    encoding and syntax problem is ``error`` with the file named."""
    return parse_yaml(read_text(path, error), path, error)


@dataclass
class Problems:
    """Collects problems found in one file; ``raise_if_any`` turns them into one error."""

    path: Path
    error: type[CuwheelsError]
    items: list[str] = field(default_factory=list)
    #: Key paths whose values a JSON Schema refused (``tools.plan.jsonshape``): the code reads
    #: around them (:meth:`usable`, :meth:`shaped`), so nothing is reported twice.
    refused: set[str] = field(default_factory=set)
    #: The parts of the document already checked against its schema ("" for the whole).
    checked: set[str] = field(default_factory=set)

    def add(self, where: str, reason: str, fix: str | None = None) -> None:
        """Record that the value at key path ``where`` breaks a rule."""
        line = f"{where}: {reason}" if where else reason
        if len(line) > MAX_PROBLEM_CHARS:
            cut = len(line) - MAX_PROBLEM_CHARS
            line = f"{line[:MAX_PROBLEM_CHARS]}... ({cut} more characters)"
        self.items.append(f"{line}\n    fix: {fix}" if fix else line)

    def raise_if_any(self) -> None:
        """Raise ``error`` listing every problem, if there were any."""
        if self.items:
            count = f"{len(self.items)} problem{'s' if len(self.items) > 1 else ''}"
            body = "\n".join(f"  - {item}" for item in self.items)
            raise self.error(f"{self.path}: {count}:\n{body}")

    def usable(self, where: str) -> bool:
        """Whether the value at key path ``where`` passed the schema (or wasn't checked)."""
        return where not in self.refused

    def shaped(self, value: Any, where: str) -> dict[str, Any] | None:
        """The mapping ``value`` at ``where`` without the keys the schema refused, or None
        when it is no mapping or the schema refused it (a required key missing or refused)."""
        if not isinstance(value, dict) or where in self.refused:
            return None
        return {k: v for k, v in value.items() if join_path(where, k) not in self.refused}

    def mapping(self, value: Any, where: str, required: Mapping[str, type | tuple],
                optional: Mapping[str, type | tuple] | None = None) -> dict[str, Any] | None:
        """Check that ``value`` is a mapping with exactly the allowed keys of the allowed types.

        Returns the mapping when its shape is right (wrong-typed values are reported and
        dropped), or None when it isn't a mapping at all.
        """
        optional = optional or {}
        if not isinstance(value, dict):
            self.add(where or "(top level)", f"must be a mapping, got {describe(value)}")
            return None
        known = {**required, **optional}
        for key in value:
            if key not in known:
                allowed = ", ".join(sorted(known))
                self.add(join_path(where, key), "unknown key",
                         f"remove it or use one of: {allowed}")
        out: dict[str, Any] = {}
        for key, kind in known.items():
            if key not in value:
                if key in required:
                    self.add(join_path(where, key), "required key is missing",
                             f"add `{key}:` ({_type_name(kind)})")
                continue
            if self.typed(value[key], join_path(where, key), kind):
                out[key] = value[key]
        return out

    def entry(self, value: Any, where: str, required: Mapping[str, type | tuple],
              optional: Mapping[str, type | tuple] | None = None) -> dict[str, Any] | None:
        """:meth:`mapping`, returned only when every required key is there with its type (each
        problem reported all the same): a parser may then read any required key directly."""
        out = self.mapping(value, where, required, optional)
        return out if out is not None and all(key in out for key in required) else None

    def typed(self, value: Any, where: str, kind: type | tuple) -> bool:
        """Report and return False when ``value`` isn't of type ``kind`` (bool is not an int)."""
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = any(isinstance(value, k) and not (isinstance(value, bool) and k in (int, float))
                 for k in kinds)
        if not ok:
            self.add(where, f"must be {_type_name(kind)}, got {describe(value)}",
                     "quote version numbers (\"12.8\") so YAML keeps them as strings"
                     if str in kinds and isinstance(value, (int, float)) else None)
        return ok

    def strings(self, value: Any, where: str, *, nonempty: bool = True) -> tuple[str, ...] | None:
        """Check a list of strings; returns it as a tuple, or None if it's not one."""
        if not self.typed(value, where, list):
            return None
        good = all(self.typed(item, f"{where}[{i}]", str) for i, item in enumerate(value))
        if nonempty and not value:
            self.add(where, "must not be empty")
            return None
        return tuple(value) if good else None

    def once(self, items: Any, where: str, what: str, key: Any = None) -> bool:
        """Report each item of ``items`` (strings) given again at ``where`` (``key`` of an item,
        e.g. a normalized name, decides what counts as the same); True when none is."""
        seen: set = set()
        repeated = []
        for item in items or ():
            same = key(item) if key else item
            if same in seen and item not in repeated:
                repeated.append(item)
            seen.add(same)
        for item in repeated:
            shown = repr(item[:100]) + ("..." if len(item) > 100 else "")
            self.add(where, f"lists the {what} {shown} more than once (rule: each {what} "
                     "once; a repeat is a mistake)", f"remove the repeated {what} {shown}")
        return not repeated

    def reason(self, value: Any, where: str) -> None:
        """A ``reason:`` must say something: every recipe line carries its why."""
        if isinstance(value, str) and len(value.strip()) < 8:
            self.add(where, "reason is too short to explain anything",
                     "write one sentence saying why this line exists")


def join_path(where: str, key: Any) -> str:
    """``where.key``, or ``key`` at the top level: a key path as messages write it."""
    return f"{where}.{key}" if where else str(key)


def _type_name(kind: type | tuple) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 40
_SHORT.maxlist = _SHORT.maxdict = _SHORT.maxset = 3
_SHORT.maxlevel = 2


def describe(value: Any) -> str:
    """A value's type and a short repr of it, as messages show a wrong value."""
    if value is None:
        return "nothing (null)"
    # reprlib stops early: the repr of a huge value is never built whole
    return f"{_TYPE_NAMES.get(type(value), type(value).__name__)} ({_SHORT.repr(value):.40})"
