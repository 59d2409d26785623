"""The ``TODO`` markers of a recipe template: a recipe that still holds one is refused.

``python -m tools.recipe new <name>`` writes every value it cannot know (the modules to import,
the CUDA versions, the memory of one compile job, each reason) as a string holding ``TODO``.
The validator names each one, by key path, before any other rule: a template cannot be merged
unedited, and its author sees the whole list of what is left at once.
"""

from __future__ import annotations

from typing import Any

from ..schema import Problems, join_path

#: The marker the template writes where the contributor must write a value.
TODO = "TODO"
#: How deep the scan goes (a recipe is 4 levels deep; YAML may nest without end).
_MAX_DEPTH = 16


def todo_marks(data: Any, where: str = "", depth: int = 0) -> list[tuple[str, str]]:
    """``(key path, text)`` for each key or string value of ``data`` (parsed YAML) that holds
    the marker.

    >>> todo_marks({"imports": ["TODO: the module"], "build": {"isolation": False}})
    [('imports[0]', 'TODO: the module')]
    """
    if depth > _MAX_DEPTH:
        return []
    found: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            at = join_path(where, key)
            if isinstance(key, str) and TODO in key:
                found.append((at, key))
            found += todo_marks(value, at, depth + 1)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found += todo_marks(value, f"{where}[{i}]", depth + 1)
    elif isinstance(data, str) and TODO in data:
        found.append((where or "(the document)", data))
    return found


def check_todos(p: Problems, data: Any) -> bool:
    """Add one problem to ``p`` per marker left in ``data``; True when there was any."""
    marks = todo_marks(data)
    for at, text in marks:
        p.add(at, f"still holds the template's {TODO} marker ({text[:120]!r})",
              "write the recipe's own value there (the marker and the comment on its line say "
              "what goes in); python -m tools.recipe new wrote it as a placeholder")
    return bool(marks)
