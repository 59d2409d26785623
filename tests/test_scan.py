"""tools.sitegen.scan: a batch against the ledger: known files compared, new ones read (here or in workers), bad ones named."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from wheelfactory import make_wheel
from index_support import (
    ANY, BASE, assert_site_valid, build, listed, project_json, snapshot,
)

from tools.core import digest
from tools.index import main
from tools.core.errors import IndexBuildError
from tools.sitegen.ledger_file import load_ledger
from tools.sitegen import scan


@pytest.mark.parametrize("jobs", [1, 2])
def test_one_release_for_several_pythons_shares_one_metadata_file(tmp_path, monkeypatch, jobs):
    # Same METADATA, so one file and hard links to it: one per process that read some of them
    # (each worker links only to its own). Each is still the right METADATA, the one the page's
    # data-core-metadata hash describes.
    import zipfile

    w = tmp_path / "wheels"
    pythons = ("cp310", "cp311", "cp312")
    wheels = [make_wheel(w, "ext", "1.0", local="cu128.torch2.8", tag=f"{py}-{py}-manylinux_2_28_x86_64")
              for py in pythons]
    other = make_wheel(w, "ext", "1.1", local="cu128.torch2.8", tag="cp312-cp312-manylinux_2_28_x86_64")
    monkeypatch.setattr(digest, "PARALLEL_MIN_BYTES", 0)  # with jobs=2: workers, as for a large batch
    build(tmp_path, jobs=jobs)
    inodes = {(st.st_dev, st.st_ino): st.st_nlink for st in (os.stat(f"{p}.metadata") for p in wheels)}
    assert len(inodes) <= jobs and sum(inodes.values()) == len(pythons)
    if jobs == 1:
        assert list(inodes.values()) == [len(pythons)]
    assert os.stat(f"{other}.metadata").st_nlink == 1
    files = {f["filename"]: f for f in project_json(tmp_path / "site", "cu128/torch2.8/simple/ext/index.json")["files"]}
    for wheel in [*wheels, other]:
        data = Path(f"{wheel}.metadata").read_bytes()
        with zipfile.ZipFile(wheel) as zf:
            assert data == zf.read(f"ext-{wheel.name.split('-')[1]}.dist-info/METADATA")
        assert files[wheel.name]["core-metadata"] == {"sha256": hashlib.sha256(data).hexdigest()}


def test_same_name_other_bytes_is_refused_and_nothing_changes(tmp_path):
    w = tmp_path / "wheels"
    fn = make_wheel(w, "demo", "1.0", tag=ANY).name
    build(tmp_path)
    before = {p: p.read_bytes() for p in [tmp_path / "ledger.json", *(tmp_path / "site").rglob("*.html")]}
    (w / fn).unlink()
    (w / (fn + ".metadata")).unlink()
    make_wheel(w, "demo", "1.0", tag=ANY, requires_dist=["numpy"])  # rebuilt, same name
    make_wheel(w, "demo", "2.0", tag=ANY)
    with pytest.raises(IndexBuildError, match="files are immutable") as exc:
        build(tmp_path, init_ledger=False)
    assert fn in str(exc.value) and "published with" in str(exc.value)
    assert {p: p.read_bytes() for p in before} == before
    assert not (w / "demo-2.0-py3-none-any.whl.metadata").exists()  # nothing written for the batch


def test_known_files_are_not_hashed_again(tmp_path, monkeypatch):
    w = tmp_path / "wheels"
    for v in ("1.0", "1.1", "1.2"):
        make_wheel(w, "demo", v, tag=ANY)
    assert build(tmp_path).hashed == 3
    reads = []
    real_hash_files, real_index_wheel = scan.hash_files, scan.index_wheel

    def hash_files(paths, **kw):  # known wheels whose hashes aren't cached
        reads.extend(os.path.basename(p) for p in paths)
        return real_hash_files(paths, **kw)

    def index_wheel(path, **kw):  # new wheels, in this process (a small batch)
        reads.append(os.path.basename(path))
        return real_index_wheel(path, **kw)

    monkeypatch.setattr(scan, "hash_files", hash_files)
    monkeypatch.setattr(scan, "index_wheel", index_wheel)
    make_wheel(w, "demo", "2.0", tag=ANY)
    report = build(tmp_path, init_ledger=False)
    assert report.hashed == 1 and reads == ["demo-2.0-py3-none-any.whl"]
    # A touched file is hashed again, found unchanged, and stays published as it was.
    os.utime(w / "demo-1.0-py3-none-any.whl", ns=(1, 1))
    reads.clear()
    report = build(tmp_path, init_ledger=False)
    assert reads == ["demo-1.0-py3-none-any.whl"] and report.added == () and report.files == 4


def test_missing_metadata_file_of_a_known_wheel_is_restored(tmp_path):
    w = tmp_path / "wheels"
    fn = make_wheel(w, "demo", "1.0", tag=ANY).name
    build(tmp_path)
    content = (w / (fn + ".metadata")).read_bytes()
    (w / (fn + ".metadata")).unlink()
    build(tmp_path, init_ledger=False)
    assert (w / (fn + ".metadata")).read_bytes() == content


def test_bad_wheels_are_named_and_left_out_and_the_rest_is_indexed(tmp_path, capsys):
    w = tmp_path / "wheels"
    good = make_wheel(w, "good", "1.0", tag=ANY).name
    make_wheel(w, "renamed", "1.0", tag=ANY, metadata_name="other")
    make_wheel(w, "relabelled", "1.0", local="cu128.torch2.8", tag=ANY, metadata_version="1.0")
    make_wheel(w, "nometa", "1.0", tag=ANY, omit_metadata=True)
    make_wheel(w, "liar", "1.0", local="cu128.torch2.8", tag=ANY, manifest={"cuda": "13.0", "torch": "2.13"})
    (w / "broken-1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 not really a zip")
    (w / "not_a_wheel.whl").write_bytes(b"")
    (w / "demo-1.0.tar.gz").write_bytes(b"")
    rc = main([
        "--wheels", str(w), "--site", str(tmp_path / "site"), "--base-url", BASE,
        "--ledger", str(tmp_path / "ledger.json"), "--init-ledger",
    ])
    err = capsys.readouterr().err
    assert rc == 11
    reasons = dict(re.findall(r"^  (\S+): (.*)$", err, re.M))
    assert reasons == {
        "broken-1.0-py3-none-any.whl": reasons["broken-1.0-py3-none-any.whl"],
        "demo-1.0.tar.gz": "not a wheel: only .whl files are indexed",
        "liar-1.0+cu128.torch2.8-py3-none-any.whl": reasons["liar-1.0+cu128.torch2.8-py3-none-any.whl"],
        "nometa-1.0-py3-none-any.whl": reasons["nometa-1.0-py3-none-any.whl"],
        "not_a_wheel.whl": reasons["not_a_wheel.whl"],
        "relabelled-1.0+cu128.torch2.8-py3-none-any.whl": reasons["relabelled-1.0+cu128.torch2.8-py3-none-any.whl"],
        "renamed-1.0-py3-none-any.whl": reasons["renamed-1.0-py3-none-any.whl"],
    }
    assert reasons["broken-1.0-py3-none-any.whl"].startswith("unreadable zip")
    assert "build manifest says CUDA 13.0" in reasons["liar-1.0+cu128.torch2.8-py3-none-any.whl"]
    assert reasons["nometa-1.0-py3-none-any.whl"].startswith("no METADATA")
    assert reasons["not_a_wheel.whl"].startswith("invalid wheel filename")
    assert "METADATA Version '1.0' disagrees" in reasons["relabelled-1.0+cu128.torch2.8-py3-none-any.whl"]
    assert "METADATA Name 'other' disagrees" in reasons["renamed-1.0-py3-none-any.whl"]
    assert sorted(load_ledger(tmp_path / "ledger.json")) == [good]
    assert listed(tmp_path / "site", "", "good") == [good]
    assert_site_valid(tmp_path / "site")


def test_a_corrupt_stream_and_data_before_the_archive_are_named(tmp_path):
    w = tmp_path / "wheels"
    good = make_wheel(w, "good", "1.0", tag=ANY)
    prefixed = make_wheel(w, "prefixed", "1.0", tag=ANY)
    # Data before the archive: zipfile allows for it, uv refuses it (tools.sitegen.wheelzip).
    prefixed.write_bytes(b"#!/bin/sh\n" + prefixed.read_bytes())
    corrupt = make_wheel(w, "corrupt", "1.0", tag=ANY)
    data = bytearray(corrupt.read_bytes())
    # The first occurrence of the name is METADATA's local header; its deflated bytes follow.
    meta_at = data.index(b"corrupt-1.0.dist-info/METADATA") + len("corrupt-1.0.dist-info/METADATA")
    data[meta_at + 2] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    report = build(tmp_path)
    reasons = {r.filename: r.reason for r in report.rejected}
    assert sorted(reasons) == [corrupt.name, prefixed.name]
    assert reasons[corrupt.name].startswith("unreadable zip")
    assert reasons[prefixed.name].startswith("unreadable zip: 10 bytes the end of central directory record doesn't")
    assert listed(tmp_path / "site", "", "good") == [good.name]


def test_worker_processes_index_exactly_what_one_process_does(tmp_path, monkeypatch):
    w = tmp_path / "wheels"
    for v in range(12):
        make_wheel(w, "ext", f"1.{v}", local="cu128.torch2.8", manifest={"cuda": "12.8", "torch": "2.8"})
    make_wheel(w, "renamed", "1.0", tag=ANY, metadata_name="other")
    (w / "broken-1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 not really a zip")
    (w / "bad name.whl").write_bytes(b"")
    monkeypatch.setattr(digest, "PARALLEL_MIN_BYTES", 0)  # a small batch, as if it were a large one
    started = []
    real_index, real_hash = scan.map_in_workers, digest.map_in_workers
    monkeypatch.setattr(scan, "map_in_workers", lambda target, items, **kw: started.append((target, len(items), kw["workers"]))
                        or real_index(target, items, **kw))
    monkeypatch.setattr(digest, "map_in_workers", lambda target, items, **kw: started.append((target, len(items), kw["workers"]))
                        or real_hash(target, items, **kw))
    reports = {}
    for jobs in (1, 2):
        reports[jobs] = build(tmp_path, output_dir=tmp_path / f"site{jobs}",
                              ledger_path=tmp_path / f"ledger{jobs}.json", jobs=jobs)
    assert started == [("tools.sitegen.wheelread:indexer", 15, 2)]  # jobs=1 started none
    assert reports[1].rejected == reports[2].rejected and len(reports[2].rejected) == 3
    assert reports[2].hashed == 12
    assert (tmp_path / "ledger1.json").read_text() == (tmp_path / "ledger2.json").read_text()
    assert snapshot(tmp_path / "site1") == snapshot(tmp_path / "site2")
    # Known wheels whose hashes aren't cached are compared in the workers too.
    os.unlink(tmp_path / ".site2.hashcache.json")
    assert build(tmp_path, output_dir=tmp_path / "site2", ledger_path=tmp_path / "ledger2.json",
                 init_ledger=False, jobs=2).hashed == 12
    assert started[1:] == [("tools.core.digest:hasher", 12, 2),
                           ("tools.sitegen.wheelread:indexer", 3, 2)]  # the rejected files, read again as new


def test_an_error_while_reading_a_batch_stops_the_workers_at_once(tmp_path, monkeypatch):
    import subprocess as sp

    from tools.core import workers

    w = tmp_path / "wheels"
    for v in range(300):
        make_wheel(w, "ext", f"1.{v}", tag=ANY)
    monkeypatch.setattr(digest, "PARALLEL_MIN_BYTES", 0)  # a small batch, as if it were a large one
    started = []

    class Popen(sp.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

    def parse_indexed(line, filename):
        raise IndexBuildError(f"{filename}: stop here")

    monkeypatch.setattr(workers.subprocess, "Popen", Popen)
    monkeypatch.setattr(scan, "parse_indexed", parse_indexed)
    try:
        build(tmp_path, jobs=2)
    except IndexBuildError as exc:
        # Checked while the traceback (and so the reading loop's frame) is still alive: the
        # workers were stopped and waited for by the error itself, not by garbage collection.
        assert "stop here" in str(exc)
        assert len(started) == 2 and all(proc.returncode is not None for proc in started)
    else:
        pytest.fail("the build went on after an error")
    assert not (tmp_path / "ledger.json").exists() and not (tmp_path / "site").exists()


def test_a_wheel_rewritten_in_place_with_its_size_and_mtime_is_hashed_again(tmp_path):
    # Size and mtime are what a rewrite can keep (os.utime); the inode change time is not.
    w = tmp_path / "wheels"
    fn = make_wheel(w, "demo", "1.0", tag=ANY).name
    build(tmp_path)
    before = snapshot(tmp_path / "site")
    st = os.stat(w / fn)
    with open(w / fn, "r+b") as f:  # in place: the same inode, the same size, one byte changed
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(w / fn, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(w / fn).st_size, os.stat(w / fn).st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    with pytest.raises(IndexBuildError, match=f"{fn}: sha256 .* published with"):
        build(tmp_path, init_ledger=False)
    assert snapshot(tmp_path / "site") == before


def test_a_hash_cache_of_the_older_schema_is_not_trusted(tmp_path):
    w = tmp_path / "wheels"
    make_wheel(w, "demo", "1.0", tag=ANY)
    build(tmp_path)
    cache = tmp_path / ".site.hashcache.json"
    doc = json.loads(cache.read_text())
    assert doc["schema"] == scan.CACHE_SCHEMA == 2
    (record,) = doc["files"].values()
    assert len(record) == 5  # size, mtime, ctime, inode, sha256
    cache.write_text(json.dumps({"schema": 1, "files": {k: [v[0], v[1], v[4]] for k, v in doc["files"].items()}}))
    assert build(tmp_path, init_ledger=False).hashed == 1
    cache.write_text("[" * 100_000)  # a cache that can't be read is no cache
    assert scan.load_hash_cache(cache) == {}


@pytest.mark.parametrize("published, respelled", [
    ("flash_attn-2.8.3+cu128.torch2.8-cp311-cp311-linux_x86_64.whl",
     "Flash_Attn-2.8.3+cu128.torch2.8-cp311-cp311-linux_x86_64.whl"),  # the project spelled otherwise
    ("flash_attn-2.8.3+cu128.torch2.8-cp311-cp311-linux_x86_64.whl",
     "flash_attn-2.8.3.0+cu128.torch2.8-cp311-cp311-linux_x86_64.whl"),  # the version
    ("demo-1.0-py2.py3-none-any.whl", "demo-1.0-py3.py2-none-any.whl"),  # the tag set
    ("demo-1.0-1-py3-none-any.whl", "demo-1.0-01-py3-none-any.whl"),  # the build tag
])
def test_a_published_wheel_spelled_otherwise_is_left_out_unread(tmp_path, published, respelled):
    w = tmp_path / "wheels"

    def wheel(fn):
        name, version = fn.split("-")[:2]
        return make_wheel(w, name, version, tag="-".join(fn[:-4].split("-")[-3:]), filename=fn)

    wheel(published)
    build(tmp_path)
    ledger = (tmp_path / "ledger.json").read_bytes()
    wheel(respelled)
    report = build(tmp_path, init_ledger=False)
    assert [r.filename for r in report.rejected] == [respelled]
    assert report.rejected[0].reason.startswith(f"installers take it for {published}, published (same ")
    assert (tmp_path / "ledger.json").read_bytes() == ledger
    assert not (w / (respelled + ".metadata")).exists()  # refused before it was read


def test_two_spellings_in_one_batch_are_both_left_out_and_a_new_build_number_is_not_a_spelling(tmp_path):
    w = tmp_path / "wheels"
    a = make_wheel(w, "flash-attn", "2.8.3", tag=ANY).name
    b = make_wheel(w, "flash-attn", "2.8.3.0", tag=ANY).name
    rebuilt = make_wheel(w, "flash-attn", "2.8.3", tag=ANY, build_tag="1").name
    report = build(tmp_path)
    assert sorted(r.filename for r in report.rejected) == sorted([a, b])
    assert all("of this batch" in r.reason for r in report.rejected)
    assert report.added == (rebuilt,)


def test_a_name_with_control_characters_is_shown_escaped(tmp_path, capsys):
    w = tmp_path / "wheels"
    (w).mkdir()
    (w / "evil\x1b[2J-1.0-py3-none-any.whl").write_bytes(b"")
    rc = main(["--wheels", str(w), "--site", str(tmp_path / "site"), "--base-url", BASE,
               "--ledger", str(tmp_path / "ledger.json"), "--init-ledger"])
    err = capsys.readouterr().err
    assert rc == 11 and "\x1b" not in err and "evil\\x1b[2J-1.0-py3-none-any.whl: invalid wheel filename" in err


def test_a_symlink_loop_or_dangling_link_is_its_own_rejection(tmp_path):
    w = tmp_path / "wheels"
    good = make_wheel(w, "good", "1.0", tag=ANY)
    (w / "loop-1.0-py3-none-any.whl").symlink_to("loop-1.0-py3-none-any.whl")  # ELOOP on stat
    (w / "gone-1.0-py3-none-any.whl").symlink_to("nowhere")
    report = build(tmp_path)
    reasons = {r.filename: r.reason for r in report.rejected}
    assert reasons["loop-1.0-py3-none-any.whl"].startswith("unreadable directory entry (Too many levels of symbolic")
    assert reasons["gone-1.0-py3-none-any.whl"].startswith("not a regular file")
    assert listed(tmp_path / "site", "", "good") == [good.name]


def test_a_directory_named_like_a_stale_temporary_file_is_left_as_it_is_and_named(tmp_path):
    w = tmp_path / "wheels"
    good = make_wheel(w, "good", "1.0", tag=ANY)
    folder, stale = w / ".good-1.0-py3-none-any.whl.metadata.x1.tmp", w / ".good-1.0-py3-none-any.whl.metadata.x2.tmp"
    folder.mkdir()
    stale.write_bytes(b"half")
    for path in (folder, stale):
        os.utime(path, (1, 1))  # older than the minute a running index may still be writing it
    report = build(tmp_path)
    assert [(r.filename, r.reason.split(":")[0]) for r in report.rejected] == [
        (folder.name, "named like a temporary .metadata file of a killed run, but not a regular file")]
    assert folder.is_dir() and not stale.exists()  # the real leftover is removed, the directory kept
    assert listed(tmp_path / "site", "", "good") == [good.name]
