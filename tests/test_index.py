"""tools.index: the command, the order of the steps, and the ledger it keeps.

Clients (pip, uv) installing from the served index are in test_serve.py; each step has its own
test module (test_scan, test_yanks, test_placement, test_render, test_coverage, test_site).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from datetime import datetime, timezone

import pytest
from wheelfactory import make_wheel
from index_support import basic  # noqa: F401  (a fixture, used by name)
from index_support import ANY, BASE, assert_site_valid, build, manifest_wheel, page, project_json

from tools.sitegen import generate as idx
from tools.core.errors import IndexBuildError
from tools.sitegen.ledger import load_ledger


def test_metadata_file_is_the_wheels_metadata_beside_it(basic):
    site, _ = basic
    wheel = site.parent / "wheels" / "flash_attn-2.8.3+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl"
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read("flash_attn-2.8.3+cu128.torch2.8.dist-info/METADATA")
    assert (wheel.parent / (wheel.name + ".metadata")).read_bytes() == metadata
    entry = project_json(site, "simple/flash-attn/index.json")["files"][0]
    assert entry["core-metadata"] == entry["dist-info-metadata"] == {"sha256": hashlib.sha256(metadata).hexdigest()}


def test_a_new_batch_keeps_everything_published_before(tmp_path):
    w1, w2 = tmp_path / "batch1", tmp_path / "batch2"
    old = make_wheel(w1, "demo", "1.0", tag=ANY).name
    build(tmp_path, wheels_dir=w1)
    later = datetime(2026, 2, 1, tzinfo=timezone.utc)
    new = make_wheel(w2, "demo", "2.0", tag=ANY).name
    report = build(tmp_path, wheels_dir=w2, base_url="https://elsewhere/v2", init_ledger=False, now=later)
    assert report.added == (new,) and report.files == 2
    files = {f["filename"]: f for f in project_json(tmp_path / "site", "simple/demo/index.json")["files"]}
    assert files[old]["url"] == f"{BASE}/{old}"  # where it was published, not the new base URL
    assert files[old]["upload-time"] == "2026-01-02T03:04:05.678901Z"
    assert files[new]["url"] == f"https://elsewhere/v2/{new}"
    assert files[new]["upload-time"] == "2026-02-01T00:00:00.000000Z"
    assert sorted(load_ledger(tmp_path / "ledger.json")) == sorted([old, new])
    assert_site_valid(tmp_path / "site")


def test_ledger_holds_everything_needed_to_render(tmp_path):
    make_wheel(tmp_path / "wheels", "ext", "1.0", local="cu128.torch2.8", requires_python=">=3.10")
    build(tmp_path)
    site_before = {p.relative_to(tmp_path / "site"): p.read_bytes() for p in (tmp_path / "site").rglob("*") if p.is_file()}
    shutil.rmtree(tmp_path / "wheels")
    build(tmp_path, init_ledger=False)  # no wheel files at all now
    site_after = {p.relative_to(tmp_path / "site"): p.read_bytes() for p in (tmp_path / "site").rglob("*") if p.is_file()}
    assert site_after == site_before


def test_missing_ledger_is_refused_without_init(tmp_path):
    with pytest.raises(IndexBuildError, match="does not exist"):
        build(tmp_path, init_ledger=False)
    assert not (tmp_path / "site").exists()


def test_main_exits_zero_when_everything_is_indexed(tmp_path, capsys):
    make_wheel(tmp_path / "w", "good", "1.0", tag=ANY)
    rc = idx.main(["--wheels-dir", str(tmp_path / "w"), "--output-dir", str(tmp_path / "site"),
                   "--base-url", BASE, "--ledger", str(tmp_path / "l.json"), "--init-ledger"])
    assert rc == 0
    assert "1 files in 1 projects" in capsys.readouterr().out


def test_jobs_must_be_a_positive_number(tmp_path, capsys):
    make_wheel(tmp_path / "w", "good", "1.0", tag=ANY)
    with pytest.raises(SystemExit) as exc:
        idx.main(["--wheels-dir", str(tmp_path / "w"), "--output-dir", str(tmp_path / "site"),
                  "--base-url", BASE, "--ledger", str(tmp_path / "l.json"), "--init-ledger", "--jobs", "0"])
    assert exc.value.code == 2
    assert "--jobs: '0' is not a number of processes" in capsys.readouterr().err
    assert not (tmp_path / "site").exists()


def test_a_schema_1_ledger_is_upgraded(tmp_path):
    fn = manifest_wheel(tmp_path)
    build(tmp_path)
    ledger_path, site = tmp_path / "ledger.json", tmp_path / "site"
    doc = json.loads(ledger_path.read_text())
    assert doc["schema"] == 3
    # The same ledger as a schema-1 run wrote it (no archs, no variant.serves), and its site copy.
    old = '{"schema": 1, "files": {\n' + ",\n".join(
        json.dumps(name) + ": " + json.dumps({k: ({x: y for x, y in v.items() if x != "serves"} if k == "variant" and v
                                                 else v)
                                              for k, v in data.items() if k != "archs"}, sort_keys=True)
        for name, data in sorted(doc["files"].items())
    ) + "\n}}\n"
    ledger_path.write_text(old)
    (site / "ledger.json").write_text(old)
    report = build(tmp_path, init_ledger=False)
    assert report.added == ()
    upgraded = json.loads(ledger_path.read_text())
    assert upgraded["schema"] == 3 and upgraded["files"][fn]["archs"] is None
    assert page(site, "ledger.json") == ledger_path.read_text()
    assert build(tmp_path, init_ledger=False).reused_pages > 0  # and is stable from then on
    assert ledger_path.read_text() == page(site, "ledger.json")
