"""tools.sitegen.yanks: the yank list, and files leaving the index only on purpose."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone

import pytest
from wheelfactory import make_wheel
from index_support import (
    ANY, build, listed, page, project_json, yank_file,
)

from tools import ROOT
from tools.core.errors import IndexBuildError
from tools.index import main
from tools.sitegen.ledger_file import Ledger, Removal, dump_ledger, load_ledger, load_ledger_document
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
    (tmp_path / "other.json").write_text(dump_ledger({}))
    with pytest.raises(IndexBuildError, match="publishes 2 file.*the ledger doesn.t have: demo-1.0") as exc:
        build(tmp_path, ledger_path=tmp_path / "other.json", init_ledger=False)
    assert "--remove" in str(exc.value)
    report = build(tmp_path, init_ledger=False, remove=[gone])
    assert report.removed == (gone,) and report.files == 1
    assert gone not in load_ledger(tmp_path / "ledger.json")
    assert listed(tmp_path / "site", "", "demo") == ["demo-2.0-py3-none-any.whl"]
    with pytest.raises(IndexBuildError, match="no such file"):
        build(tmp_path, init_ledger=False, remove=["nope-1.0-py3-none-any.whl"])
    with pytest.raises(IndexBuildError, match=f"--remove {gone}: already removed"):
        build(tmp_path, init_ledger=False, remove=[gone])


def test_a_removed_file_stays_removed_until_restored(tmp_path, capsys):
    w = tmp_path / "wheels"
    gone = make_wheel(w, "demo", "1.0", tag=ANY)
    make_wheel(w, "demo", "2.0", tag=ANY)
    build(tmp_path)
    published = load_ledger_document(tmp_path / "ledger.json").files[gone.name]
    later = datetime(2026, 3, 4, 5, 6, 7, tzinfo=timezone.utc)
    build(tmp_path, init_ledger=False, remove=[gone.name], now=later)
    ledger = load_ledger_document(tmp_path / "ledger.json")
    assert ledger.removed == {gone.name: Removal(published, "2026-03-04T05:06:07.000000Z")}
    # The next ordinary run, with the wheel still in the batch: it stays out, and says so.
    report = build(tmp_path, init_ledger=False)
    assert report.added == () and report.kept_out == (gone.name,) and report.files == 1
    assert listed(tmp_path / "site", "", "demo") == ["demo-2.0-py3-none-any.whl"]
    # Other bytes under the removed name stop the run, as for a published name.
    gone.unlink()
    make_wheel(w, "demo", "1.0", tag=ANY, requires_dist=["numpy"])
    with pytest.raises(IndexBuildError, match=r"published \(and removed since\)"):
        build(tmp_path, init_ledger=False)
    # Another spelling of the removed wheel is refused as the same wheel.
    gone.unlink()
    respelled = make_wheel(w, "Demo", "1.0.0", tag=ANY, filename="Demo-1.0.0-py3-none-any.whl")
    report = build(tmp_path, init_ledger=False)
    assert [(r.filename, "installers take it for demo-1.0-py3-none-any.whl, published (and removed since)" in r.reason)
            for r in report.rejected] == [(respelled.name, True)]
    respelled.unlink()
    # --restore puts the entry back as it was published (its URL and upload time), no wheel needed.
    report = build(tmp_path, init_ledger=False, restore=[gone.name])
    assert report.restored == (gone.name,)
    assert load_ledger_document(tmp_path / "ledger.json") == Ledger(
        {**ledger.files, gone.name: published}, {})
    assert listed(tmp_path / "site", "", "demo") == [gone.name, "demo-2.0-py3-none-any.whl"]
    with pytest.raises(IndexBuildError, match="records no removal"):
        build(tmp_path, init_ledger=False, restore=[gone.name])


def test_a_yank_reason_is_one_line(tmp_path):
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    with pytest.raises(IndexBuildError, match="one line of text"):
        build(tmp_path, yanked_path=yank_file(tmp_path, {"demo-1.0-py3-none-any.whl": "a\nb"}))


@pytest.mark.parametrize("text, message", [
    # An alias bomb: nine lines that expand to a billion strings.
    ('a: &a ["x","x","x","x","x","x","x","x","x"]\n'
     + "".join(f'{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},'
               f'*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n' for i in range(8))
     + "demo-1.0-py3-none-any.whl: *i\n", r"an (anchor|alias) \([&*]a\) is not allowed"),
    ("demo-1.0-py3-none-any.whl: first\ndemo-1.0-py3-none-any.whl: second\n", "is given twice"),
    ("[" * 50_000, "nested too deeply|not valid YAML"),
    ("demo-1.0-py3-none-any.whl: [a, b]\n", "is not 'filename: reason'"),
])
def test_a_yank_list_is_read_strictly(tmp_path, text, message):
    path = tmp_path / "yanked.yaml"
    path.write_text(text)
    with pytest.raises(IndexBuildError, match=message) as exc:
        yanks.load_yanked(path)
    assert str(path) in str(exc.value)


def test_a_yank_list_that_is_not_utf8_or_too_large_is_refused(tmp_path):
    path = tmp_path / "yanked.yaml"
    path.write_bytes(b"demo-1.0-py3-none-any.whl: caf\xe9\n")
    with pytest.raises(IndexBuildError, match="not UTF-8 text"):
        yanks.load_yanked(path)
    path.write_bytes(b"#" * (yanks.MAX_YANK_LIST + 1))
    with pytest.raises(IndexBuildError, match="larger than 8388608 bytes"):
        yanks.load_yanked(path)


def test_a_yank_of_some_files_of_a_version_is_warned_about(tmp_path, capsys):
    """Yanking one platform's file of a version: pip and uv pip skip that file, but uv lock keeps
    the version whole and uv sync installs the yanked file (tests/test_uv_installs.py measures
    it), so the run says so, once per such version, and still publishes."""
    w = tmp_path / "wheels"
    make_wheel(w, "demo", "1.0", tag=ANY)
    linux = make_wheel(w, "demo", "1.1", tag="py3-none-manylinux_2_17_x86_64").name
    make_wheel(w, "demo", "1.1", tag=ANY)
    whole = make_wheel(w, "other", "2.0", tag=ANY).name  # a version's only file: no warning
    yanked = yank_file(tmp_path, {linux: "broken on linux", whole: ""})
    rc = main(["--wheels", str(w), "--site", str(tmp_path / "site"), "--base-url", "/files",
               "--ledger", str(tmp_path / "ledger.json"), "--init-ledger", "--yanked", str(yanked)])
    out = capsys.readouterr().out
    assert rc == 0
    warnings = [line for line in out.splitlines() if line.startswith("  warning: ")]
    assert warnings == [
        f"  warning: demo 1.1: the yank list yanks 1 of its 2 files ({linux}); pip and uv pip skip only "
        "those, but uv lock keeps 1.1 and uv sync may install a yanked file: yank every file of the "
        "version, or publish a fixed version"]
    assert yanks.partial_yanks({}, load_ledger(tmp_path / "ledger.json")) == []
