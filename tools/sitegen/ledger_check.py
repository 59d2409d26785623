"""A ledger's entries held to their file names: what a hand edit could make the pages say.

tools.sitegen.ledger_file checks each entry's fields alone (types, hashes, the URL's scheme, the
time's form); this module checks what needs the file name read as installers read it
(tools.sitegen.wheelread.wheel_identity): that the entry's ``name`` and ``version`` are the
file's (a page lists a file under its entry's name: another project's name would put it on that
project's page), and that no two entries, published or removed, are one wheel to installers.
"""

from __future__ import annotations

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion

from tools.core.errors import IndexBuildError
from .ledger_file import Ledger
from .wheelread import parse_version, wheel_identity

HINT = "restore the ledger from the site it was published with (<site>/ledger.json)"


def check_ledger(ledger: Ledger, *, source: str) -> None:
    """IndexBuildError, naming ``source``, the entry, the field and the rule, for the first entry
    whose name or version is not its file's, or that is one wheel with another entry."""
    seen: dict[tuple, str] = {}
    everything = [*((e, "") for e in ledger.files.values()),
                  *((r.entry, " (removed)") for r in ledger.removed.values())]
    for entry, what in everything:
        where = f"{source}: entry{what} {entry.filename!r}"
        ident = wheel_identity(entry.filename)
        if ident is None:
            raise IndexBuildError(f"{where}: not a valid wheel file name", hint=HINT)
        project, version, build, tags = ident
        if canonicalize_name(entry.name) != project:
            raise IndexBuildError(
                f"{where}: 'name' is {entry.name[:100]!r}, but the file is of {project!r} "
                "(rule: an entry's name is its file's project)", hint=HINT)
        try:
            same = parse_version(entry.version) == version
        except InvalidVersion:
            same = False
        if not same:
            raise IndexBuildError(
                f"{where}: 'version' is {entry.version[:100]!r}, but the file is of version {version} "
                "(rule: an entry's version is its file's)", hint=HINT)
        key = (project, version, build, tags)
        if key in seen:
            raise IndexBuildError(
                f"{where} and {seen[key]!r} are one wheel to installers (same project, version, build "
                "tag and tags, spelled otherwise) (rule: one entry per wheel)", hint=HINT)
        seen[key] = entry.filename
