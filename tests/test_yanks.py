"""tools.sitegen.yanks: the yank list, and files leaving the index only on purpose."""

from __future__ import annotations

import shutil

import pytest
from wheelfactory import make_wheel
from index_support import (
    ANY, build, listed, page, project_json, yank_file,
)

from tools import ROOT
from tools.core.errors import IndexBuildError
from tools.sitegen.ledger import load_ledger
from tools.sitegen import yanks


def test_yanked_files_are_marked_on_every_page_listing_them(tmp_path):
    w = tmp_path / "wheels"
    fn = make_wheel(w, "ext", "1.0", local="cu128.torch2.8").name
    make_wheel(w, "ext", "1.1", local="cu128.torch2.8")
    build(tmp_path, yanked_path=yank_file(tmp_path, {fn: ""}))
    for prefix in ("", "cu128/torch2.8/"):
        html = page(tmp_path / "site", f"{prefix}simple/ext/index.html")
        assert html.count("data-yanked") == 1 and 'data-yanked=""' in html
        yanked = {f["filename"]: f["yanked"] for f in project_json(tmp_path / "site", f"{prefix}simple/ext/index.json")["files"]}
        assert yanked[fn] is True  # no reason: JSON says true
        assert sum(1 for v in yanked.values() if v) == 1


def test_yank_list_errors(tmp_path):
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    with pytest.raises(IndexBuildError, match="never published: demo-9.0"):
        build(tmp_path, yanked_path=yank_file(tmp_path, {"demo-9.0-py3-none-any.whl": "typo"}))
    with pytest.raises(IndexBuildError, match="yank list .*nope.yaml does not exist"):
        build(tmp_path, yanked_path=tmp_path / "nope.yaml")
    (tmp_path / "yanked.yaml").write_text("- a list\n")
    with pytest.raises(IndexBuildError, match="must be a mapping"):
        build(tmp_path, yanked_path=tmp_path / "yanked.yaml")


def test_the_repository_yank_list_and_ledger_start_empty():
    assert yanks.load_yanked(ROOT / "index" / "yanked.yaml") == {}
    assert load_ledger(ROOT / "index" / "ledger.json") == {}


def test_removal_is_explicit(tmp_path):
    w = tmp_path / "wheels"
    gone = make_wheel(w, "demo", "1.0", tag=ANY).name
    make_wheel(w, "demo", "2.0", tag=ANY)
    build(tmp_path)
    # A ledger that lost an entry (a wrong --ledger, a bad merge) can't shrink the site.
    shutil.rmtree(w)
    with pytest.raises(IndexBuildError, match="publishes 2 file.*the ledger doesn.t have: demo-1.0") as exc:
        build(tmp_path, ledger_path=tmp_path / "other.json")
    assert "--remove" in str(exc.value)
    report = build(tmp_path, init_ledger=False, remove=[gone])
    assert report.removed == (gone,) and report.files == 1
    assert gone not in load_ledger(tmp_path / "ledger.json")
    assert listed(tmp_path / "site", "", "demo") == ["demo-2.0-py3-none-any.whl"]
    with pytest.raises(IndexBuildError, match="no such file"):
        build(tmp_path, init_ledger=False, remove=["nope-1.0-py3-none-any.whl"])


def test_a_yank_reason_is_one_line(tmp_path):
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    with pytest.raises(IndexBuildError, match="one line of text"):
        build(tmp_path, yanked_path=yank_file(tmp_path, {"demo-1.0-py3-none-any.whl": "a\nb"}))
