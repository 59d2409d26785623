"""tools.sitegen.swap: writing the site, reusing unchanged pages, and the atomic swap (a killed run changes nothing)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from wheelfactory import make_wheel
from index_support import (
    ANY, BASE, assert_site_valid, build, listed, page, snapshot, yank_file,
)

from tools import ROOT
from tools.core.errors import IndexBuildError
from tools.plan.table import load_table
from tools.sitegen.ledger_file import load_ledger
from tools.sitegen import render
from tools.sitegen import swap as site


def test_a_failed_write_leaves_the_previous_site(tmp_path, monkeypatch):
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    build(tmp_path)
    before = snapshot(tmp_path / "site")
    make_wheel(tmp_path / "wheels", "demo", "2.0", tag=ANY)

    real = site.WrittenPages.__setitem__
    written = []

    def die_at_the_fifth_page(self, rel, data):
        if len(written) == 5:
            raise KeyboardInterrupt  # as if killed halfway through writing the new site
        written.append(rel)
        real(self, rel, data)

    monkeypatch.setattr(site.WrittenPages, "__setitem__", die_at_the_fifth_page)
    with pytest.raises(KeyboardInterrupt):
        build(tmp_path, init_ledger=False)
    assert snapshot(tmp_path / "site") == before
    assert [p.name for p in tmp_path.iterdir() if ".new-" in p.name] == []


def test_fallback_swap_without_renameat2_and_recovery(tmp_path, monkeypatch):
    monkeypatch.setattr(site, "_exchange", lambda a, b: False)
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    build(tmp_path)
    make_wheel(tmp_path / "wheels", "demo", "2.0", tag=ANY)
    build(tmp_path, init_ledger=False)
    assert len(listed(tmp_path / "site", "", "demo")) == 2
    assert len(listed(tmp_path / ".site.prev", "", "demo")) == 1  # the previous site, kept for a rollback
    # A run killed between the two renames leaves the old site at .site.prev: the next run restores it.
    shutil.rmtree(tmp_path / ".site.prev")
    (tmp_path / ".site.swapping").touch()
    os.rename(tmp_path / "site", tmp_path / ".site.prev")
    (tmp_path / ".site.new-x").mkdir()
    trash = site.recover(tmp_path / "site")
    assert len(listed(tmp_path / "site", "", "demo")) == 2
    assert [p.name for p in trash] == [".site.new-x"]
    build(tmp_path, init_ledger=False)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".site.")) == [
        ".site.hashcache.json", ".site.lock", ".site.prev",
    ]


def test_a_site_deleted_by_hand_is_not_resurrected(tmp_path):
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    build(tmp_path)
    build(tmp_path, init_ledger=False)  # leaves the previous site at .site.prev
    shutil.rmtree(tmp_path / "site")
    (tmp_path / "ledger.json").unlink()
    shutil.rmtree(tmp_path / "wheels")
    report = build(tmp_path)  # from scratch, on purpose
    assert report.files == 0 and listed(tmp_path / "site", "", "demo") == []


def test_refuses_to_replace_a_directory_it_did_not_make(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "precious.txt").write_text("keep me")
    with pytest.raises(IndexBuildError, match="refusing to replace"):
        build(tmp_path)
    assert (tmp_path / "site" / "precious.txt").read_text() == "keep me"


def test_a_second_concurrent_build_is_refused(tmp_path):
    import fcntl

    with open(tmp_path / ".site.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        with pytest.raises(IndexBuildError, match="another index build"):
            build(tmp_path)


def test_the_site_lock_is_held_once_however_it_is_taken(tmp_path):
    """locked() (filelock: flock on POSIX, msvcrt's lock on Windows) refuses a second holder
    while the first holds it, and lets the next one in after."""
    from tools.sitegen.swap import locked

    lock = tmp_path / ".site.lock"
    with locked(lock):
        with pytest.raises(IndexBuildError, match="another index build holds"):
            with locked(lock):
                pass
    with locked(lock):
        pass


def test_site_survives_being_killed_at_any_moment(tmp_path):
    """SIGKILL a real build at several moments: the site is always the old one or the new one."""
    w = tmp_path / "wheels"
    for i in range(60):
        make_wheel(w, f"proj{i % 6}", f"1.{i}", local=f"cu12{i % 3}.torch2.{7 + i % 2}", tag=ANY)
    cmd = [sys.executable, "-m", "tools.index", "--wheels", str(w), "--site", str(tmp_path / "site"),
           "--base-url", BASE, "--ledger", str(tmp_path / "ledger.json"), "--init-ledger",
]
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=60, capture_output=True)
    extra = 0
    for delay in (0.05, 0.15, 0.25, 0.35, 0.45, 0.6):
        make_wheel(w, "late", f"1.{extra}", tag=ANY)
        extra += 1
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert_site_valid(tmp_path / "site")
        published = set(json.loads((tmp_path / "site" / "ledger.json").read_text())["files"])
        assert published <= set(load_ledger(tmp_path / "ledger.json"))  # the site never lists what the ledger lacks
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=60, capture_output=True)
    assert len(listed(tmp_path / "site", "", "late")) == extra
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".site.")) == [
        ".site.hashcache.json", ".site.lock", ".site.prev",
    ]


def test_an_incremental_site_is_the_same_as_a_full_render(tmp_path):
    w = tmp_path / "wheels"
    for label in ("cu128.torch2.8", "cu128.torch2.9", "cu12torch2.8cxx11abiTRUE", None):
        make_wheel(w, "ext", "1.0", local=label, tag=ANY)
    make_wheel(w, "other", "1.0", local="cu128.torch2.9", tag=ANY)
    make_wheel(w, "pure", "1.0", tag=ANY)
    build(tmp_path)
    make_wheel(w, "ext", "2.0", local="cu128.torch2.8", tag=ANY)
    yanks = {"other-1.0+cu128.torch2.9-py3-none-any.whl": "bad"}
    report = build(tmp_path, init_ledger=False, yanked_path=yank_file(tmp_path, yanks))
    # Rendered again: ext in simple/ and cu128/torch2.8 (a new file), other in simple/ and
    # cu128/torch2.9 (a yank). Reused, HTML and JSON: pure, ext in cu128/torch2.9 and cu12/torch2.8.
    assert report.reused_pages == 6
    full = render.render_site(load_ledger(tmp_path / "ledger.json"), yanks, table=load_table(),
                              ledger_text=(tmp_path / "ledger.json").read_text())
    assert snapshot(tmp_path / "site") == {Path(k): v for k, v in full.pages.items()}


def test_a_page_rendered_after_being_linked_never_writes_into_the_current_site(tmp_path):
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    build(tmp_path)
    site = tmp_path / "site"
    (site / "simple" / "demo" / "index.html").write_text("edited by hand")  # same fingerprint on record
    (site / "simple" / "demo" / "index.json").unlink()  # so the page pair is rendered after all
    build(tmp_path, init_ledger=False)
    assert (tmp_path / ".site.prev" / "simple" / "demo" / "index.html").read_text() == "edited by hand"
    assert "Links for demo" in page(site, "simple/demo/index.html")
    assert_site_valid(site)
