"""A ledger's entries held to their file names (tools.sitegen.ledger_check)."""

from __future__ import annotations

import pytest

from tools.core.errors import IndexBuildError
from tools.sitegen.ledger_check import check_ledger
from tools.sitegen.ledger_file import Entry, Ledger, Removal

FILE = "demo-2.0+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl"


def entry(filename: str = FILE, **changes) -> Entry:
    fields = dict(filename=filename, name="demo", version="2.0+cu128.torch2.8", url=f"/files/{filename}",
                  sha256="a" * 64, size=10, upload_time="2026-01-02T03:04:05.000000Z", requires_python=None,
                  metadata_sha256="b" * 64, variant=None)
    return Entry(**(fields | changes))


def test_entries_that_are_their_files_pass():
    other = "Demo-2.0+cu128.torch2.8-cp312-cp312-manylinux_2_28_x86_64.whl"
    check_ledger(Ledger({FILE: entry()}, {other: Removal(entry(other, name="Demo", version="2.0+CU128.torch2.8"),
                                                         "2026-01-03T00:00:00Z")}), source="L")


@pytest.mark.parametrize(("change", "message"), [
    ({"name": "other"}, r"L: entry '.*': 'name' is 'other', but the file is of 'demo' \(rule: an entry's name is its file's project\)"),
    ({"version": "9.9"}, r"'version' is '9\.9', but the file is of version 2\.0\+cu128\.torch2\.8"),
    ({"version": "not a version"}, r"'version' is 'not a version'"),
])
def test_an_entry_that_is_not_its_file_is_refused(change, message):
    with pytest.raises(IndexBuildError, match=message):
        check_ledger(Ledger({FILE: entry(**change)}, {}), source="L")


def test_two_entries_of_one_wheel_are_refused_published_or_removed():
    spelled = "Demo-2.0+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl"
    for ledger in (Ledger({FILE: entry(), spelled: entry(spelled)}, {}),
                   Ledger({FILE: entry()}, {spelled: Removal(entry(spelled), "2026-01-03T00:00:00Z")})):
        with pytest.raises(IndexBuildError, match=r"are one wheel to installers .*\(rule: one entry per wheel\)"):
            check_ledger(ledger, source="L")
