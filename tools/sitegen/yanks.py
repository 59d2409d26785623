"""Yanks and removals: the yank list (``index/yanked.yaml``) and the checks that nothing published
is lost by mistake.

A yanked file stays listed, marked on every page (PEP 592: pip and uv skip it for ranges and still
install it for an exact pin); a file leaves the index only through ``--remove FILENAME``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from tools.core.errors import IndexBuildError
from .ledger import Entry


def load_yanked(path: Path | None) -> dict[str, str]:
    """The yank list: ``{filename: reason}`` (an empty reason yanks without one); None: no list."""
    if path is None:
        return {}
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IndexBuildError(f"yank list {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise IndexBuildError(f"yank list {path} is not valid YAML: {exc}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise IndexBuildError(
            f"yank list {path} must be a mapping of wheel filename to reason, got {type(doc).__name__}"
        )
    yanked: dict[str, str] = {}
    for filename, reason in doc.items():
        if not isinstance(filename, str) or not (reason is None or isinstance(reason, str)):
            raise IndexBuildError(
                f"yank list {path}: entry {filename!r}: {reason!r} is not 'filename: reason'"
            )
        if reason and not reason.isprintable():
            raise IndexBuildError(f"yank list {path}: the reason for {filename} must be one line of text")
        yanked[filename] = reason or ""
    return yanked


def check_yanked(yanked: Mapping[str, str], entries: Mapping[str, Entry], *, source: str) -> None:
    """Refuse a yank list naming files the index doesn't have (a typo would yank nothing)."""
    unknown = sorted(set(yanked) - set(entries))
    if unknown:
        raise IndexBuildError(
            f"yank list {source} names files that were never published: {', '.join(unknown)}",
            hint="yank entries are exact wheel file names, as listed in the ledger",
        )


def check_nothing_dropped(previous: Iterable[str], entries: Mapping[str, Entry], removed: Iterable[str]) -> None:
    """Refuse to publish a site that silently lacks files the previous site listed."""
    dropped = sorted(set(previous) - set(entries) - set(removed))
    if dropped:
        shown = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
        raise IndexBuildError(
            f"the current site publishes {len(dropped)} file(s) the ledger doesn't have: {shown}",
            hint="use the ledger this site was built from; to delete files on purpose, "
            "pass --remove FILENAME for each",
        )
