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

from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

from tools.core.errors import IndexBuildError
from tools.plan.schema import parse_yaml, read_text
from .ledger_file import Entry
from .placement import project_name

#: The largest yank list read (a line per yanked file: far more than an index ever yanks).
MAX_YANK_LIST = 8 << 20


def load_yaml_capped(path: Path) -> object:
    """The yank list's YAML document, read and parsed strictly (at most MAX_YANK_LIST bytes)."""
    return parse_yaml(read_text(path, IndexBuildError, limit=MAX_YANK_LIST), path, IndexBuildError)


def load_yanked(path: Path | None) -> dict[str, str]:
    """The yank list: ``{filename: reason}`` (an empty reason yanks without one); None: no list."""
    if path is None:
        return {}
    if not Path(path).exists():
        raise IndexBuildError(f"yank list {path} does not exist")
    # The one strict YAML reader (tools.plan.schema): a regular file, UTF-8, capped, no aliases,
    # no key written twice, nesting bounded; every problem an IndexBuildError naming the file.
    doc = load_yaml_capped(Path(path))
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


def partial_yanks(yanked: Mapping[str, str], entries: Mapping[str, Entry]) -> list[str]:
    """A warning per version of which the yank list yanks some files but not all.

    pip and ``uv pip install`` judge each file, but ``uv lock`` keeps such a version (every file
    of it, yanked ones too) and ``uv sync`` then installs the yanked file where it is the best
    match, as ``uv pip install ==version`` does: installers that lock see a version as yanked
    or not as a whole. Yanking every file of the version, or publishing a fixed one, avoids it.
    """
    files: dict[tuple[str, str], list[str]] = defaultdict(list)
    for filename, entry in entries.items():
        files[(project_name(entry.name), entry.version)].append(filename)
    warnings = []
    for (project, version), names in sorted(files.items()):
        hit = sorted(fn for fn in names if fn in yanked)
        if hit and len(hit) < len(names):
            shown = ", ".join(hit[:3]) + (f" and {len(hit) - 3} more" if len(hit) > 3 else "")
            warnings.append(
                f"{project} {version}: the yank list yanks {len(hit)} of its {len(names)} files ({shown}); "
                f"pip and uv pip skip only those, but uv lock keeps {version} and uv sync may install a "
                "yanked file: yank every file of the version, or publish a fixed version")
    return warnings


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
