"""A small strict reader for the project's YAML data (the table and the recipes).

Every problem names the file, the key path and the rule, and says how to fix it. Problems are
collected rather than raised one at a time, so a contributor sees every mistake in one run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.core.errors import CuwheelsError

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
               list: "a list", dict: "a mapping"}


def load_yaml(path: Path, error: type[CuwheelsError]) -> Any:
    """Parse a YAML file, turning I/O and syntax problems into ``error`` with the file named."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot be read: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise error(f"{path}{where}: not valid YAML: {getattr(exc, 'problem', exc)}",
                    hint="check indentation and quoting; versions like 12.10 must be quoted") from None


@dataclass
class Problems:
    """Collects problems found in one file; ``raise_if_any`` turns them into one error."""

    path: Path
    error: type[CuwheelsError]
    items: list[str] = field(default_factory=list)

    def add(self, where: str, reason: str, fix: str | None = None) -> None:
        """Record that the value at key path ``where`` breaks a rule."""
        line = f"{where}: {reason}" if where else reason
        self.items.append(f"{line}\n    fix: {fix}" if fix else line)

    def raise_if_any(self) -> None:
        """Raise ``error`` listing every problem, if there were any."""
        if self.items:
            count = f"{len(self.items)} problem{'s' if len(self.items) > 1 else ''}"
            body = "\n".join(f"  - {item}" for item in self.items)
            raise self.error(f"{self.path}: {count}:\n{body}")

    def mapping(self, value: Any, where: str, required: Mapping[str, type | tuple],
                optional: Mapping[str, type | tuple] | None = None) -> dict[str, Any] | None:
        """Check that ``value`` is a mapping with exactly the allowed keys of the allowed types.

        Returns the mapping when its shape is right (wrong-typed values are reported and
        dropped), or None when it isn't a mapping at all.
        """
        optional = optional or {}
        if not isinstance(value, dict):
            self.add(where or "(top level)", f"must be a mapping, got {_describe(value)}")
            return None
        known = {**required, **optional}
        for key in value:
            if key not in known:
                allowed = ", ".join(sorted(known))
                self.add(_join(where, key), "unknown key",
                         f"remove it or use one of: {allowed}")
        out: dict[str, Any] = {}
        for key, kind in known.items():
            if key not in value:
                if key in required:
                    self.add(_join(where, key), "required key is missing",
                             f"add `{key}:` ({_type_name(kind)})")
                continue
            if self.typed(value[key], _join(where, key), kind):
                out[key] = value[key]
        return out

    def typed(self, value: Any, where: str, kind: type | tuple) -> bool:
        """Report and return False when ``value`` isn't of type ``kind`` (bool is not an int)."""
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = any(isinstance(value, k) and not (isinstance(value, bool) and k in (int, float))
                 for k in kinds)
        if not ok:
            self.add(where, f"must be {_type_name(kind)}, got {_describe(value)}",
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

    def reason(self, value: Any, where: str) -> None:
        """A ``reason:`` must say something: every recipe line carries its why."""
        if isinstance(value, str) and len(value.strip()) < 8:
            self.add(where, "reason is too short to explain anything",
                     "write one sentence saying why this line exists")


def _join(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)


def _type_name(kind: type | tuple) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return f"{_TYPE_NAMES.get(type(value), type(value).__name__)} ({value!r:.40})"
