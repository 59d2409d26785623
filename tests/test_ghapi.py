"""tools.releasing.ghapi and publish: every call paced and backed off by the limits file, against
a stand-in of GitHub's release API on 127.0.0.1 that enforces the documented limits (assets per
release, rate limits answered with 403/429 and retry-after, a server error). It is a stand-in: it
keeps the API's shapes and limits, not GitHub's storage."""

from __future__ import annotations

import pytest

from github_standin import Clock, github  # noqa: F401 (the fixture)
from github_standin import paced_api as _api

from tools.releasing.ghapi import ApiError
from tools.releasing.publish import releases_to_index, upload_release


def _files(tmp_path, n):
    out = []
    for i in range(n):
        wheel = tmp_path / f"demo-1.0+cu130.torch2.14-{i}-cp312-cp312-linux_x86_64.whl"
        wheel.write_bytes(b"w" * (i + 1))
        meta = tmp_path / f"{wheel.name}.metadata"
        meta.write_bytes(b"Metadata-Version: 2.1\n")
        out += [wheel, meta]
    return out


def test_a_release_uploads_through_rate_limits_and_server_errors(tmp_path, github):
    state, base = github(rate_limit_every=7, fail_once={"POST /repos/o/r/releases"})
    clock = Clock()
    api = _api(base, clock)
    files = _files(tmp_path, 10)
    done = upload_release(api, "o/r", "wheels-1", "abc", files, "notes")
    assert (done.sent, done.kept) == (20, 0)
    assert {a["name"] for a in state.assets[1]} == {f.name for f in files}
    assert state.releases[0]["draft"] is False
    # the 403s were waited out as GitHub asked (retry-after: 2), the 502 with the back-off
    assert clock.waits.count(2.0) >= 3 and 1 in clock.waits
    assert any(code == 403 for _, _, code in state.log)


def test_a_rerun_sends_only_what_is_missing(tmp_path, github):
    state, base = github()
    files = _files(tmp_path, 3)
    upload_release(_api(base, Clock()), "o/r", "wheels-1", "abc", files[:4], "notes")
    state.releases[0]["draft"] = True  # the first attempt stopped before making it public
    done = upload_release(_api(base, Clock()), "o/r", "wheels-1", "abc", files, "notes")
    assert (done.sent, done.kept) == (2, 4) and len(state.assets[1]) == 6


def test_a_release_over_the_asset_limit_is_refused_before_anything_is_sent(tmp_path, github):
    state, base = github(assets_limit=4)
    with pytest.raises(ApiError, match="6 assets, over GitHub's 4 per release"):
        upload_release(_api(base, Clock(), assets_per_release=4), "o/r", "wheels-1", "abc",
                       _files(tmp_path, 3), "notes")
    assert not any(state.assets.values())


def test_content_calls_are_paced_to_the_share_of_the_limits(tmp_path, github):
    state, base = github()
    clock = Clock()
    # 10 content-creating calls a minute at most: 0.8 of them, 8
    api = _api(base, clock, content_requests_per_minute=10)
    upload_release(api, "o/r", "wheels-1", "abc", _files(tmp_path, 10), "notes")
    posts = [c for c in state.log if c[0] in ("POST", "PATCH")]
    assert len(posts) == 22
    # 22 calls at 8 a minute: at least two full minutes of waiting
    assert sum(clock.waits) >= 120


def test_a_call_that_keeps_failing_stops_naming_itself(tmp_path, github):
    state, base = github(rate_limit_every=1)
    with pytest.raises(ApiError, match=r"POST \S+: HTTP 403 \(rate limit\), 4 times"):
        upload_release(_api(base, Clock()), "o/r", "wheels-1", "abc", _files(tmp_path, 1), "n")


def test_the_releases_the_index_lacks_are_read_page_by_page(tmp_path, github):
    state, base = github()
    api = _api(base, Clock())
    for run in range(1, 4):
        upload_release(api, "o/r", f"wheels-{run}", "abc", _files(tmp_path, 60)[:120], "n")
    names = [a["name"] for a in state.assets[1] if a["name"].endswith(".whl")]
    found = releases_to_index(api, "o/r", set(names[:10]))
    assert [t for t, _ in found] == ["wheels-1", "wheels-2", "wheels-3"]  # oldest run first
    # the same file names in each: what the ledger has is left out of every one
    assert [len(w) for _, w in found] == [50, 50, 50]
    # 120 assets a release: a second page of each was read
    assert any("page=2" in p for _, p, _ in state.log)


# --------------------------------------------------------------------------- a run's artifacts


def _zip(**members: bytes) -> bytes:
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name.replace("__", "/"), data)
    return buf.getvalue()


def _job(cell: str) -> str:
    """The cell job of one cell in these tests' plans."""
    return cell.replace("-3.12-", "-") + "-job1"


def _plan(cells: list[str], shards: dict[str, list[str]] | None = None) -> dict:
    """A plan artifact of a cell job per cell."""
    return {"schema": 2, "stages": {"cells1": [
        {"id": _job(c), "shards": (shards or {}).get(c, []), "cells": [{"id": c}]}
        for c in cells]}}


def test_every_wheel_of_the_run_is_listed_page_by_page_and_downloaded_by_id(tmp_path, github):
    from tools.releasing.steps import download_artifacts
    state, base = github()
    cells = [f"demo-3.12-cu130-n{i}" for i in range(130)]
    # 120 cell jobs built (a wheel and a report each), 10 failed (a report only); a job's
    # reports are in its cells' folders
    for i, cell in enumerate(cells):
        if i < 120:
            state.artifacts.append((f"wheels-{_job(cell)}",
                                    _zip(**{f"demo-{i}-py3-none-any.whl": b"w"})))
        state.artifacts.append((f"report-{_job(cell)}", _zip(**{f"{cell}__report.json": b"{}"})))
    api = _api(base, Clock())
    lines = download_artifacts(api, "o/r", "7", _plan(cells), "wheels", tmp_path / "wh")
    assert len(list((tmp_path / "wh").glob("*.whl"))) == 120
    assert lines[-1].startswith("wheels: 120 downloaded, 10 missing")
    assert "demo-cu130-n129-job1: no wheel (its builds failed: demo-3.12-cu130-n129)" in lines
    # 250 artifacts: three pages, then one download each; never the token to storage
    assert sum(1 for _, p, _ in state.log if "/artifacts?" in p) == 3
    assert not state.storage_saw_token
    # the reports, each as <cell>/report.json
    download_artifacts(api, "o/r", "7", _plan(cells), "reports", tmp_path / "rep")
    assert len(list((tmp_path / "rep").glob("*/report.json"))) == 130
    assert (tmp_path / "rep" / cells[0] / "report.json").is_file()
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == sorted(cells)


def test_a_cut_listing_is_an_error_not_a_silent_loss(tmp_path, github):
    from tools.releasing.artifacts import list_run_artifacts
    state, base = github(cut_listing=100)
    state.artifacts = [(f"wheels-c{i}", _zip(a=b"x")) for i in range(150)]
    with pytest.raises(ApiError, match="listed 100 of its 150 artifacts"):
        list_run_artifacts(_api(base, Clock()), "o/r", "7")


def test_a_cells_shard_caches_by_name_a_missing_one_is_said(tmp_path, github):
    from tools.releasing.steps import download_artifacts
    state, base = github()
    state.artifacts = [("g-shard1", _zip(**{"ccache__a__b": b"obj"})),
                       ("g-shard3", _zip(**{"ccache__c": b"obj"})),
                       ("other-shard1", _zip(x=b"no"))]
    plan = _plan(["c"], {"c": ["g-shard1", "g-shard2", "g-shard3"]})
    lines = download_artifacts(_api(base, Clock()), "o/r", "7", plan, "shards", tmp_path / "sc",
                               cell=_job("c"))
    assert (tmp_path / "sc" / "g-shard1" / "ccache" / "a" / "b").read_bytes() == b"obj"
    assert sorted(p.name for p in (tmp_path / "sc").iterdir()) == ["g-shard1", "g-shard3"]
    assert lines[0].startswith("g-shard2: no cache")
    # one exact-name lookup per shard, never a listing of the whole run
    listings = [p for _, p, _ in state.log if "/artifacts?" in p]
    assert listings == [f"/repos/o/r/actions/runs/7/artifacts?name=g-shard{k}" for k in (1, 2, 3)]


@pytest.mark.parametrize("member", ["../escaped.py", "/abs/path", "a/../../b"])
def test_an_artifact_member_outside_its_folder_is_refused(tmp_path, member):
    import io
    import zipfile
    from tools.releasing.artifacts import extract
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(member, b"x")
    with pytest.raises(ApiError, match="not a plain file inside it"):
        extract(buf.getvalue(), tmp_path / "in")
    assert not (tmp_path / "escaped.py").exists() and not (tmp_path / "in").exists()


def test_the_upload_command_end_to_end(tmp_path, github):
    """``python -m tools.release upload`` as the release job runs it, against the stand-in."""
    import os
    import subprocess
    import sys
    from tools import ROOT
    state, base = github()
    (tmp_path / "wh").mkdir()
    files = _files(tmp_path / "wh", 3)
    notes = tmp_path / "notes.md"
    notes.write_text("notes")
    env = {**os.environ, "GH_TOKEN": "t", "GITHUB_API_URL": base, "NO_PROXY": "127.0.0.1",
           "no_proxy": "127.0.0.1"}
    proc = subprocess.run([sys.executable, "-m", "tools.release", "upload", "--repo", "o/r",
                           "--tag", "wheels-9", "--target", "abc", "--dir", str(tmp_path / "wh"),
                           "--notes", str(notes)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "wheels-9: sent 6, 0 already there" in proc.stdout
    assert {a["name"] for a in state.assets[1]} == {f.name for f in files}
    # without a token: a clear error, nothing sent
    env.pop("GH_TOKEN")
    env.pop("GITHUB_TOKEN", None)
    proc = subprocess.run([sys.executable, "-m", "tools.release", "upload", "--repo", "o/r",
                           "--tag", "wheels-9", "--target", "abc", "--dir", str(tmp_path / "wh"),
                           "--notes", str(notes)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0 and "no token: set GH_TOKEN" in proc.stderr


def test_a_release_the_ledger_already_names_is_not_listed_again(tmp_path, github):
    """The plan job asks for the releases the index lacks every hour: a release whose files the
    ledger publishes from (its tag in their addresses) costs no asset listing."""
    from tools.releasing.publish import ledger_tags
    from tools.sitegen.ledger_file import Ledger
    state, base = github()
    api = _api(base, Clock())
    for run in (1, 2):
        upload_release(api, "o/r", f"wheels-{run}", "abc", _files(tmp_path, 2), "n")
    published = [a for a in state.assets[1] if a["name"].endswith(".whl")]
    entry = type("E", (), {"url": published[0]["browser_download_url"]})()
    tags = ledger_tags(Ledger({published[0]["name"]: entry}, {}))
    assert tags == {"wheels-1"}
    state.log.clear()
    found = releases_to_index(api, "o/r", {published[0]["name"]}, tags)
    assert [t for t, _ in found] == ["wheels-2"]
    assert not any("/releases/1/assets" in p for _, p, _ in state.log)
