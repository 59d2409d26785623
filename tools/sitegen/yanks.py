"""Yanks and removals: the yank list (``index/yanked.yaml``) and the checks that nothing published
is lost or changed by mistake.

A yanked file stays listed, marked on every page (PEP 592: pip and uv skip it for ranges and still
install it for an exact pin); a file leaves the index only through ``--remove FILENAME``.

The yank list is read by a strict YAML loader: no aliases (a few lines of ``&a [*b, *b, ...]``
expand to gigabytes), no key written twice (YAML lets the second silently win), at most
MAX_YANK_LIST bytes; any of them, or a list that isn't UTF-8 or is nested too deeply, is an
IndexBuildError naming the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from tools.core.errors import IndexBuildError
from .ledger import Entry, read_regular

#: The largest yank list read (a line per yanked file: far more than an index ever yanks).
MAX_YANK_LIST = 8 << 20


class _StrictLoader(yaml.SafeLoader):
    """safe_load without aliases and without a key written twice."""

    def compose_node(self, parent, index):
        """yaml's hook for each node: an alias is refused before it is expanded."""
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"an alias (*{event.anchor}) is not allowed here: write each value out",
                event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        """yaml's hook for each mapping: a key written twice is refused, not overwritten."""
        seen: set[str] = set()
        for key, _value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key.value!r} is written twice (the second would silently win)",
                        key.start_mark)
                seen.add(key.value)
        return super().construct_mapping(node, deep=deep)


def load_yanked(path: Path | None) -> dict[str, str]:
    """The yank list: ``{filename: reason}`` (an empty reason yanks without one); None: no list."""
    if path is None:
        return {}
    try:
        data = read_regular(path, limit=MAX_YANK_LIST)
    except FileNotFoundError:
        raise IndexBuildError(f"yank list {path} does not exist") from None
    except OSError as exc:
        raise IndexBuildError(f"yank list {path} can't be read: {exc.strerror or exc}",
                              hint=f"a yank list is a plain file of one line per yanked file, at most "
                              f"{MAX_YANK_LIST} bytes") from None
    try:
        doc = yaml.load(data.decode("utf-8"), Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except UnicodeDecodeError as exc:
        raise IndexBuildError(f"yank list {path} is not UTF-8 text: {exc}") from None
    except yaml.YAMLError as exc:
        raise IndexBuildError(f"yank list {path} is not valid YAML: {exc}",
                              hint="write it as plain 'filename: reason' lines") from None
    except RecursionError:
        raise IndexBuildError(f"yank list {path} is nested too deeply",
                              hint="a yank list is one mapping of 'filename: reason' lines") from None
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
                f"yank list {path}: entry {_short(filename)} is not 'filename: reason'"
            )
        if reason and not reason.isprintable():
            raise IndexBuildError(f"yank list {path}: the reason for {_short(filename)} must be one line of text")
        yanked[filename] = reason or ""
    return yanked


def _short(value: object) -> str:
    # A crafted key may be megabytes long: the message shows its start.
    text = repr(value)
    return text if len(text) <= 120 else text[:120] + "..."


def check_yanked(yanked: Mapping[str, str], entries: Mapping[str, Entry], *, source: str) -> None:
    """Refuse a yank list naming files the index doesn't have (a typo would yank nothing)."""
    unknown = sorted(set(yanked) - set(entries))
    if unknown:
        shown = ", ".join(_short(fn)[1:-1] for fn in unknown[:5]) + (
            f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise IndexBuildError(
            f"yank list {source} names files that were never published: {shown}",
            hint="yank entries are exact wheel file names, as listed in the ledger",
        )


def check_nothing_dropped(previous: Mapping[str, Entry], entries: Mapping[str, Entry],
                          removed: Iterable[str]) -> None:
    """Refuse to publish a site that silently lacks files the previous site listed, or lists one
    with other bytes.

    ``previous``: the files the current site lists (its ledger.json); ``removed``: the files the
    ledger records as removed (--remove), which may leave.
    """
    dropped = sorted(set(previous) - set(entries) - set(removed))
    if dropped:
        shown = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
        raise IndexBuildError(
            f"the current site publishes {len(dropped)} file(s) the ledger doesn't have: {shown}",
            hint="use the ledger this site was built from; to delete files on purpose, "
            "pass --remove FILENAME for each",
        )
    changed = sorted(fn for fn, e in previous.items() if fn in entries and entries[fn].sha256 != e.sha256)
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise IndexBuildError(
            f"the current site publishes {len(changed)} file(s) with another sha256 than the ledger records: "
            f"{shown}",
            hint="a published file never changes: use the ledger this site was built from",
        )
