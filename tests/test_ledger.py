"""tools.ledger: the record of everything published, its format and its atomic writes."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest
from wheelfactory import make_wheel

from tools import ROOT
from tools.core.errors import IndexBuildError
from tools.sitegen.generate import IndexRun, build_index
from tools.sitegen.ledger_file import (
    MAX_LEDGER_BYTES,
    Entry,
    Ledger,
    Removal,
    atomic_write,
    dump_ledger,
    encode_entry,
    entry_from_json,
    is_rfc3339,
    load_ledger,
    load_ledger_document,
    lock_path,
    parse_ledger,
    parse_ledger_document,
    read_ledger_text,
    url_problem,
    write_ledger,
)
from tools.core.variant import Variant

SHA = "a" * 64


def entry(filename: str = "demo-1.0-py3-none-any.whl", **changes) -> Entry:
    fields = dict(
        filename=filename, name="demo", version="1.0", url=f"https://h/{filename}", sha256=SHA,
        size=10, upload_time="2026-01-02T03:04:05.000000Z", requires_python=">=3.9",
        metadata_sha256="b" * 64, variant=Variant("12.8", "2.8", True),
    )
    fields.update(changes)
    return Entry(**fields)


def test_round_trip_keeps_every_field():
    entries = {e.filename: e for e in (entry(), entry("demo-2.0-py3-none-any.whl", variant=None, requires_python=None),
                                       entry("demo-3.0-py3-none-any.whl", archs=ARCHS))}
    assert parse_ledger(dump_ledger(entries)) == entries
    assert parse_ledger(dump_ledger(entries), trusted=True) == entries


def schema_1_text(entries: dict) -> str:
    """A ledger as schema 1 wrote it: no ``archs`` key, no ``variant.serves``, no ``sboms``."""
    lines = []
    for fn in sorted(entries):
        data = entries[fn].to_json()
        del data["archs"], data["sboms"]
        if data["variant"] is not None:
            del data["variant"]["serves"]
        lines.append(json.dumps(fn) + ": " + json.dumps(data, sort_keys=True))
    return '{"schema": 1, "files": {\n' + ",\n".join(lines) + "\n}}\n"


@pytest.mark.parametrize("trusted", [False, True])
def test_schema_1_ledger_loads_with_null_archs_and_is_written_as_schema_4(trusted):
    entries = {fn: entry(fn) for fn in ("a-1.0-py3-none-any.whl", "b-1.0-py3-none-any.whl")}
    old = schema_1_text(entries)
    parsed = parse_ledger(old, trusted=trusted)
    assert parsed == entries and all(e.archs is None for e in parsed.values())
    # Adding to it must not keep its schema-1 lines under a newer header.
    new = dict(parsed) | {"c-1.0-py3-none-any.whl": entry("c-1.0-py3-none-any.whl", archs=ARCHS)}
    text = dump_ledger(new, base=(old, Ledger(parsed, {})))
    assert text == dump_ledger(new)
    doc = json.loads(text)
    assert doc["schema"] == 5 and doc["removed"] == {} and doc["files"]["a-1.0-py3-none-any.whl"]["archs"] is None
    assert doc["files"]["a-1.0-py3-none-any.whl"]["sboms"] is None
    assert doc["files"]["c-1.0-py3-none-any.whl"]["archs"] == ARCHS
    assert parse_ledger(text) == new


def test_schema_1_entries_may_not_have_archs_and_schema_2_entries_must():
    e = entry()
    schema_4 = {k: v for k, v in e.to_json().items() if k != "sboms"}
    with_archs = '{"schema": 1, "files": {"demo-1.0-py3-none-any.whl": ' + json.dumps(schema_4) + "}}"
    with pytest.raises(IndexBuildError, match=r"unknown keys \['archs'\]"):
        parse_ledger(with_archs)
    data = dict(schema_4)
    del data["archs"]
    with pytest.raises(IndexBuildError, match=r"missing keys \['archs'\]"):
        parse_ledger('{"schema": 2, "files": {"demo-1.0-py3-none-any.whl": ' + json.dumps(data) + "}}")


SBOM = "demo-1.0.dist-info/sboms/cuwheels.cdx.json"


def test_schema_5_entries_keep_their_sbom_digests_and_older_ones_must_not_have_them():
    e = entry(sboms={SBOM: "c" * 64})
    for trusted in (False, True):
        assert parse_ledger(dump_ledger({e.filename: e}), trusted=trusted)[e.filename] == e
    assert json.loads(dump_ledger({e.filename: e}))["files"][e.filename]["sboms"] == {SBOM: "c" * 64}
    # schema 4 had no sboms: the key is refused there, and its entries read back with null
    with pytest.raises(IndexBuildError, match=r"unknown keys \['sboms'\]"):
        parse_ledger('{"schema": 4, "files": {"demo-1.0-py3-none-any.whl": '
                     + json.dumps(e.to_json()) + '}, "removed": {}}')
    old = {k: v for k, v in e.to_json().items() if k != "sboms"}
    read = parse_ledger('{"schema": 4, "files": {"demo-1.0-py3-none-any.whl": '
                        + json.dumps(old) + '}, "removed": {}}')
    assert read[e.filename].sboms is None
    with pytest.raises(IndexBuildError, match=r"missing keys \['sboms'\]"):
        parse_ledger('{"schema": 5, "files": {"demo-1.0-py3-none-any.whl": '
                     + json.dumps(old) + '}, "removed": {}}')


@pytest.mark.parametrize("bad", [{}, [], {SBOM: "C" * 64}, {SBOM: "c" * 63}, {"x.json": "c" * 64},
                                 {SBOM: None}, "c" * 64, {SBOM + "\n": "c" * 64}])
def test_a_bad_sboms_value_is_refused_naming_the_entry_and_the_rule(bad):
    data = entry().to_json() | {"sboms": bad}
    with pytest.raises(IndexBuildError) as info:
        parse_ledger('{"schema": 5, "files": {"demo-1.0-py3-none-any.whl": ' + json.dumps(data)
                     + '}, "removed": {}}')
    assert "entry 'demo-1.0-py3-none-any.whl': 'sboms' must be null or a non-empty" in str(info.value)
    assert "restore the entry from <site>/ledger.json" in info.value.hint


def test_one_line_per_file_sorted_by_filename():
    # A diff of the ledger must show exactly which files were published or deleted.
    entries = {fn: entry(fn) for fn in ("b-1.0-py3-none-any.whl", "a-1.0-py3-none-any.whl")}
    lines = dump_ledger(entries).splitlines()
    assert lines[0] == '{"schema": 5, "files": {'
    assert lines[1].startswith('"a-1.0-py3-none-any.whl": {') and lines[2].startswith('"b-1.0')
    assert lines[3] == '}, "removed": {}}'
    assert json.loads(dump_ledger(entries))["schema"] == 5


ARCHS = {"ext/_C.so": {"ptx": ["120"], "sass": ["80", "90"]}, "ext/é.so": {"ptx": [], "sass": []}}


@pytest.mark.parametrize("variant", [None, Variant("12", "2.8", None), Variant("13.0", "2.13", False),
                                     Variant("13.0", "2.14", True, ("2.11", "2.12", "2.13", "2.14"))])
@pytest.mark.parametrize("archs", [None, ARCHS])
def test_hand_written_encoder_matches_json_dumps(variant, archs):
    e = entry("dé-1.0-py3-none-any.whl", variant=variant, requires_python=None, name='quote"d', archs=archs)
    expected = json.dumps(e.filename) + ": " + json.dumps(e.to_json(), sort_keys=True)
    assert encode_entry(e) == expected


def test_adding_to_a_dumped_ledger_gives_the_same_text_as_dumping_it_whole():
    old = {fn: entry(fn) for fn in ("b-1.0-py3-none-any.whl", "d-1.0-py3-none-any.whl")}
    new = dict(old) | {fn: entry(fn) for fn in ("a-1.0-py3-none-any.whl", "c-1!2.0-py3-none-any.whl")}
    assert dump_ledger(new, base=(dump_ledger(old), Ledger(old, {}))) == dump_ledger(new)
    shrunk = {"b-1.0-py3-none-any.whl": old["b-1.0-py3-none-any.whl"]}
    assert dump_ledger(shrunk, base=(dump_ledger(old), Ledger(old, {}))) == dump_ledger(shrunk)  # a removal: whole
    # With removals recorded: the same text as a whole dump, whether they change or not.
    gone = {"d-1.0-py3-none-any.whl": Removal(old.pop("d-1.0-py3-none-any.whl"), "2026-02-03T00:00:00.000000Z")}
    base = (dump_ledger(old, removed=gone), Ledger(old, gone))
    new = dict(old) | {"e-1.0-py3-none-any.whl": entry("e-1.0-py3-none-any.whl")}
    assert dump_ledger(new, removed=gone, base=base) == dump_ledger(new, removed=gone)
    assert dump_ledger(new, removed={}, base=base) == dump_ledger(new)


def test_trusted_parse_gives_the_same_entries():
    entries = {fn: entry(fn) for fn in ("a-1.0-py3-none-any.whl", "b-1.0-py3-none-any.whl")}
    entries["b-1.0-py3-none-any.whl"] = entries["b-1.0-py3-none-any.whl"]._replace(variant=None)
    text = dump_ledger(entries)
    assert parse_ledger(text, trusted=True) == parse_ledger(text) == entries


def test_empty_ledger_is_valid_json():
    assert parse_ledger(dump_ledger({})) == {}


def test_missing_ledger_is_refused_unless_asked_for(tmp_path):
    with pytest.raises(IndexBuildError, match="does not exist") as exc:
        load_ledger(tmp_path / "nope.json")
    assert "--init-ledger" in str(exc.value)
    assert load_ledger(tmp_path / "nope.json", init=True) == {}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sha256": "ABC"}, "not a lowercase hex sha256"),  # hashes are compared as text
        ({"size": -1}, "byte count"),
        ({"size": True}, "byte count"),  # bool is an int in Python
        ({"url": ""}, "non-empty string"),
        ({"variant": {"cuda": "12.8"}}, "'variant' must be null or"),
        ({"extra": 1}, "unknown keys"),
        ({"requires_python": 3}, "string or null"),
        ({"archs": ["80"]}, "'archs' must be null or"),
        ({"archs": {"m.so": {"sass": ["80"]}}}, "'archs' must be null or"),
        ({"archs": {"m.so": {"sass": [80], "ptx": []}}}, "'archs' must be null or"),
        ({"url": "javascript:alert(1)"}, "scheme 'javascript'"),  # pages link files: http(s) only
        ({"url": "file:///etc/passwd"}, "scheme 'file'"),
        ({"url": "https:///x.whl"}, "has no host"),
        ({"url": "https://h/a b.whl"}, "characters a link can't carry"),
        ({"url": 'https://h/"x.whl'}, "characters a link can't carry"),
        ({"upload_time": "yesterday"}, "not an RFC 3339 UTC time"),  # PEP 700's upload-time
        ({"upload_time": "2026-02-31T00:00:00Z"}, "not an RFC 3339 UTC time"),
        ({"upload_time": "2026-01-02T03:04:05+01:00"}, "not an RFC 3339 UTC time"),
    ],
)
def test_bad_entries_name_the_file_and_the_field(change, message):
    data = entry().to_json() | change
    with pytest.raises(IndexBuildError, match=message) as exc:
        entry_from_json("demo-1.0-py3-none-any.whl", data, source="index/ledger.json")
    assert "index/ledger.json: entry 'demo-1.0-py3-none-any.whl'" in str(exc.value)


@pytest.mark.parametrize("filename", ["x<script>.whl", "demo-1.0-py3-none-any.tar.gz", "a b.whl"])
def test_file_names_must_be_plain_wheel_names(filename):
    # Pages print file names unescaped: the ledger is where that is made safe.
    with pytest.raises(IndexBuildError, match="not a wheel file name"):
        entry_from_json(filename, entry().to_json())


def test_missing_key_is_named():
    data = entry().to_json()
    del data["metadata_sha256"]
    with pytest.raises(IndexBuildError, match=r"missing keys \['metadata_sha256'\]"):
        entry_from_json("x.whl", data)


@pytest.mark.parametrize("text", ["[]", '{"schema": 4, "files": {}}', '{"schema": 2}', '{"schema": true, "files": {}}',
                                  "{"])
def test_other_documents_are_refused(text):
    with pytest.raises(IndexBuildError):
        parse_ledger(text, source="L")


def test_schema_3_records_which_torch_series_a_stable_abi_build_serves():
    # One stable-ABI file, listed in four variant indexes: the ledger keeps the list.
    stable = Variant("13.0", "2.14", True, ("2.11", "2.12", "2.13", "2.14"))
    fn = "xformers-0.0.35+cu130.torch2.14-py39-none-manylinux_2_28_x86_64.whl"
    text = dump_ledger({fn: entry(fn, variant=stable)})
    assert '"serves": ["2.11", "2.12", "2.13", "2.14"]' in text
    for trusted in (False, True):
        assert parse_ledger(text, trusted=trusted)[fn].variant == stable
    # An exact build says serves: null, and reads back as serving its own series only.
    one = "a-1.0-py3-none-any.whl"
    exact = parse_ledger(dump_ledger({one: entry(one, variant=Variant("13.0", "2.13", True))}))
    assert '"serves": null' in dump_ledger(exact) and exact[one].variant.served == ("2.13",)


def test_schema_2_variants_may_not_name_serves_and_schema_3_serves_must_be_a_nonempty_list():
    data = entry(variant=Variant("13.0", "2.14", True, ("2.13", "2.14"))).to_json()
    del data["sboms"]  # schemas 2 and 3 have no sboms
    with pytest.raises(IndexBuildError, match="cuda: str, torch: str, cxx11_abi: bool.null},"):
        parse_ledger('{"schema": 2, "files": {"demo-1.0-py3-none-any.whl": ' + json.dumps(data) + "}}")
    for bad in ([], "2.13", [2.13]):
        data["variant"]["serves"] = bad
        with pytest.raises(IndexBuildError, match=r"serves: \[str\]\|null"):
            parse_ledger('{"schema": 3, "files": {"demo-1.0-py3-none-any.whl": ' + json.dumps(data) + "}}")


def test_write_ledger_replaces_atomically(tmp_path):
    path = tmp_path / "index" / "ledger.json"
    write_ledger(path, {"demo-1.0-py3-none-any.whl": entry()})
    write_ledger(path, {})
    assert load_ledger(path) == {}
    assert [p.name for p in path.parent.iterdir()] == ["ledger.json"]  # no temporary left
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_bytes(b"old")

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


# --------------------------------------------------------------------------- hold-back


def _hold_back(tmp_path, batch):
    return subprocess.run([sys.executable, "-m", "tools.ledger", "hold-back", "--ledger", str(tmp_path / "ledger.json"),
                           "--wheels", str(batch), "--to", str(tmp_path / "held")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_hold_back_leaves_only_new_file_names_in_the_batch(tmp_path):
    first = tmp_path / "first"
    rerun = make_wheel(first, "demo", "1.0", tag="py3-none-any")
    rebuilt = make_wheel(first, "demo", "1.1", tag="py3-none-any")
    build_index(IndexRun(wheels_dir=first, output_dir=tmp_path / "site", base_url="https://h/1",
                ledger_path=tmp_path / "ledger.json", init_ledger=True))
    batch = tmp_path / "batch"
    batch.mkdir()
    shutil.copy(rerun, batch)  # the same bytes again: a re-run of a build
    (batch / (rerun.name + ".metadata")).write_text("Name: demo\n")
    make_wheel(batch, "demo", "1.1", tag="py3-none-any", requires_dist=["numpy"])  # same name, other bytes
    new = make_wheel(batch, "demo", "1.1", tag="py3-none-any", build_tag="1", requires_dist=["numpy"])
    proc = _hold_back(tmp_path, batch)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{rerun.name}: already published, same bytes (a re-run): not published again"
    assert lines[1].startswith(f"{rebuilt.name}: already published with other bytes: the published file stays")
    assert "raise build.number in its recipe" in lines[1]
    assert lines[2] == f"1 new wheel(s) to publish, 2 held back in {tmp_path / 'held'}"
    assert sorted(p.name for p in batch.iterdir()) == [new.name]
    assert sorted(p.name for p in (tmp_path / "held").iterdir()) == sorted(
        [rerun.name, rerun.name + ".metadata", rebuilt.name])
    # What is left goes through the index, which would have refused the rebuilt file.
    report = build_index(IndexRun(wheels_dir=batch, output_dir=tmp_path / "site", base_url="https://h/2",
                         ledger_path=tmp_path / "ledger.json"))
    assert report.added == (new.name,) and report.files == 3


def test_hold_back_holds_removed_names_too(tmp_path):
    first = tmp_path / "first"
    gone = make_wheel(first, "demo", "1.0", tag="py3-none-any")
    build_index(IndexRun(wheels_dir=first, output_dir=tmp_path / "site", base_url="https://h/1",
                ledger_path=tmp_path / "ledger.json", init_ledger=True))
    build_index(IndexRun(wheels_dir=first, output_dir=tmp_path / "site", base_url="https://h/1",
                ledger_path=tmp_path / "ledger.json", remove=[gone.name]))
    proc = _hold_back(tmp_path, first)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == (
        f"{gone.name}: removed from the index (--remove), and stays out: not published again. "
        f"To publish it again: python -m tools.index --restore {gone.name}")
    assert not gone.exists() and (tmp_path / "held" / gone.name).exists()


def test_hold_back_without_a_ledger_fails_and_moves_nothing(tmp_path):
    make_wheel(tmp_path / "batch", "demo", "1.0", tag="py3-none-any")
    proc = _hold_back(tmp_path, tmp_path / "batch")
    assert proc.returncode == 11
    assert str(tmp_path / "ledger.json") in proc.stderr
    assert len(list((tmp_path / "batch").iterdir())) == 1 and not (tmp_path / "held").exists()


# --------------------------------------------------------------------------- removals (schema 4)


def test_a_removal_keeps_the_entry_as_published_and_reads_back():
    kept, gone = entry("demo-2.0-py3-none-any.whl"), entry("demo-1.0-py3-none-any.whl", archs=ARCHS)
    removed = {gone.filename: Removal(gone, "2026-02-03T04:05:06.000000Z")}
    text = dump_ledger({kept.filename: kept}, removed=removed)
    lines = text.splitlines()
    assert lines[-3:] == ['}, "removed": {', lines[-2], "}}"] and lines[-2].startswith('"demo-1.0-py3-none-any.whl": {')
    assert json.loads(lines[-2].split(": ", 1)[1]) == gone.to_json() | {"removed_time": "2026-02-03T04:05:06.000000Z"}
    for trusted in (False, True):
        assert parse_ledger_document(text, trusted=trusted) == Ledger({kept.filename: kept}, removed)
    assert parse_ledger(text) == {kept.filename: kept}  # what the index publishes
    only_removed = dump_ledger({}, removed=removed)
    assert only_removed.startswith('{"schema": 5, "files": {}, "removed": {\n')
    assert parse_ledger_document(only_removed) == Ledger({}, removed)


@pytest.mark.parametrize("text, message", [
    # A key this reader doesn't know is refused, not dropped; schema 3 had no removals.
    ('{"schema": 4, "files": {}, "removed": {}, "later": 1}', r"exactly the keys \['files', 'removed', 'schema'\]"),
    ('{"schema": 3, "files": {}, "removed": {}}', r"exactly the keys \['files', 'schema'\]"),
    ('{"schema": 4, "files": {}}', "exactly the keys"),
    ('{"schema": 4, "files": {}, "removed": []}', "exactly the keys"),
    ('{"schema": 4, "files": {}, "removed": {"demo-1.0-py3-none-any.whl": {"sha256": "x"}}}', "'removed_time' string"),
    ("[" * 100_000, "nested too deeply"),
    ('{"schema": 4, "files": {}, "removed": {}}' + "x", "not valid JSON"),
])
def test_malformed_documents_are_named_errors(text, message):
    with pytest.raises(IndexBuildError, match=message) as exc:
        parse_ledger_document(text, source="L")
    assert str(exc.value).startswith("L")


def test_a_file_both_published_and_removed_is_refused():
    e = entry()
    text = dump_ledger({e.filename: e}).replace('"removed": {}', '"removed": {' + json.dumps(e.filename) + ": "
                                                + json.dumps(Removal(e, "2026-11-21T19:30:00.000000Z").to_json()) + "}")
    with pytest.raises(IndexBuildError, match="both published and removed"):
        parse_ledger_document(text, source="L")


def test_a_ledger_that_is_not_utf8_is_a_named_error(tmp_path):
    path = tmp_path / "ledger.json"
    path.write_bytes(b'{"schema": 4, "files": {}, "removed": {}}\xff')
    with pytest.raises(IndexBuildError, match=f"ledger {path} is not UTF-8 text"):
        load_ledger_document(path)


def test_the_lock_file_sits_beside_the_ledger(tmp_path):
    assert lock_path(tmp_path / "site-ledger.json") == tmp_path / ".site-ledger.json.lock"


@pytest.mark.parametrize("url", ["https://h/files/x.whl", "http://h:8000/x.whl", "/files/x.whl", "x.whl",
                                 "../files/x%2B1.whl", "HTTPS://H/x.whl"])
def test_http_urls_and_references_are_published_urls(url):
    assert url_problem(url) is None


@pytest.mark.parametrize("text", ["2026-01-02T03:04:05Z", "2026-01-02T03:04:05.000000Z", "2024-02-29T23:59:59.5Z"])
def test_rfc3339_utc_times_are_accepted(text):
    assert is_rfc3339(text)


@pytest.mark.parametrize("text", ["", "yesterday", "2026-01-02 03:04:05Z", "2026-01-02T03:04:05",
                                  "2025-02-29T00:00:00Z", "2026-01-02T25:00:00Z", "2026-01-02T03:04:05.1234567Z"])
def test_other_times_are_not(text):
    assert not is_rfc3339(text)


def test_a_ledger_over_the_cap_is_refused_by_its_size(tmp_path):
    path = tmp_path / "ledger.json"
    with path.open("wb") as f:
        f.truncate(MAX_LEDGER_BYTES + 1)  # sparse: refused by its size, never read
    with pytest.raises(IndexBuildError, match=f"is over {MAX_LEDGER_BYTES >> 20} MiB"):
        read_ledger_text(path)
