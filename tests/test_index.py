"""tools.index: the command, the order of the steps, and the ledger it keeps.

Clients (pip, uv) installing from the served index are in test_serve.py; each step has its own
test module (test_scan, test_yanks, test_placement, test_render, test_frontpage, test_swap).
"""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import re
import shutil
from datetime import datetime, timezone

import pytest
import yaml
from conftest import MINI_TABLE
from wheelfactory import make_wheel
from index_support import basic  # noqa: F401  (a fixture, used by name)
from index_support import ANY, BASE, assert_site_valid, build, manifest_wheel, page, project_json, snapshot

from tools import ROOT
from tools.index import main
from tools.core.errors import IndexBuildError
from tools.plan.recipes.model import load_all
from tools.plan.table import load_table
from tools.sitegen.ledger_file import load_ledger


def test_metadata_file_is_the_wheels_metadata_beside_it(basic):
    site, _ = basic
    wheel = site.parent / "wheels" / "flash_attn-2.8.3+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl"
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read("flash_attn-2.8.3+cu128.torch2.8.dist-info/METADATA")
    assert (wheel.parent / (wheel.name + ".metadata")).read_bytes() == metadata
    entry = project_json(site, "simple/flash-attn/index.json")["files"][0]
    assert entry["core-metadata"] == {"sha256": hashlib.sha256(metadata).hexdigest()}
    assert "dist-info-metadata" not in entry  # PEP 714: pip 22.3 to 23.1 break on the old key


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
    rc = main(["--wheels", str(tmp_path / "w"), "--site", str(tmp_path / "site"),
                   "--base-url", BASE, "--ledger", str(tmp_path / "l.json"), "--init-ledger"])
    assert rc == 0
    assert "1 files in 1 projects" in capsys.readouterr().out


def test_without_ledger_the_ledger_sits_beside_the_site_not_in_the_repository(tmp_path, capsys):
    # The default was the repository's index/ledger.json: a hand run rewrote the committed file
    # and left a lock file beside it.
    make_wheel(tmp_path / "w", "good", "1.0", tag=ANY)
    committed = ROOT / "index" / "ledger.json"
    before = committed.read_bytes()
    rc = main(["--wheels", str(tmp_path / "w"), "--site", str(tmp_path / "site"),
               "--base-url", BASE, "--init-ledger"])
    assert rc == 0
    assert json.loads((tmp_path / "site-ledger.json").read_text())["files"]
    assert committed.read_bytes() == before and not (ROOT / "index" / ".ledger.json.lock").exists()


def test_jobs_must_be_a_positive_number(tmp_path, capsys):
    make_wheel(tmp_path / "w", "good", "1.0", tag=ANY)
    with pytest.raises(SystemExit) as exc:
        main(["--wheels", str(tmp_path / "w"), "--site", str(tmp_path / "site"),
                  "--base-url", BASE, "--ledger", str(tmp_path / "l.json"), "--init-ledger", "--jobs", "0"])
    assert exc.value.code == 2
    assert "--jobs: '0' is not a number of processes" in capsys.readouterr().err
    assert not (tmp_path / "site").exists()


def test_a_schema_1_ledger_is_upgraded(tmp_path):
    fn = manifest_wheel(tmp_path)
    build(tmp_path)
    ledger_path, site = tmp_path / "ledger.json", tmp_path / "site"
    doc = json.loads(ledger_path.read_text())
    assert doc["schema"] == 5
    # The same ledger as a schema-1 run wrote it (no archs, no variant.serves, no sboms), and its
    # site copy.
    old = '{"schema": 1, "files": {\n' + ",\n".join(
        json.dumps(name) + ": " + json.dumps({k: ({x: y for x, y in v.items() if x != "serves"} if k == "variant" and v
                                                 else v)
                                              for k, v in data.items() if k not in ("archs", "sboms")},
                                             sort_keys=True)
        for name, data in sorted(doc["files"].items())
    ) + "\n}}\n"
    ledger_path.write_text(old)
    (site / "ledger.json").write_text(old)
    report = build(tmp_path, init_ledger=False)
    assert report.added == ()
    upgraded = json.loads(ledger_path.read_text())
    assert upgraded["schema"] == 5 and upgraded["files"][fn]["archs"] is None
    assert upgraded["files"][fn]["sboms"] is None
    assert page(site, "ledger.json") == ledger_path.read_text()
    assert build(tmp_path, init_ledger=False).reused_pages > 0  # and is stable from then on
    assert ledger_path.read_text() == page(site, "ledger.json")


def test_one_run_reads_one_table_the_recipes_folders(tmp_path, write_recipe, good_recipe, capsys):
    """An index run with another recipes folder takes that folder's table.yaml for the placement
    (each torch series' C++ ABI), selector.json and the front page's planned cells."""
    write_recipe(good_recipe)  # demo_ext: CUDA 13.0 for torch 2.10 and 2.9, 12.9 for 2.8
    recipes = tmp_path / "recipes"
    table = copy.deepcopy(MINI_TABLE)
    table["torch"]["2.8"]["cxx11_abi"] = False  # unlike recipes/table.yaml's torch 2.8
    table["cuda"]["13.0"]["min_driver"] = "590.1.2"
    table["torch"]["2.10"]["python"] = ["3.12"]
    (recipes / "table.yaml").write_text(yaml.safe_dump(table))
    own = load_table()
    assert own.torch["2.8"].cxx11_abi and own.cuda["13.0"].min_driver != "590.1.2"
    w = tmp_path / "w"
    make_wheel(w, "flash-attn", "2.8.3", local="cu12torch2.8cxx11abiFALSE")

    rc = main(["--wheels", str(w), "--site", str(tmp_path / "site"), "--base-url", BASE,
               "--ledger", str(tmp_path / "l.json"), "--init-ledger", "--recipes", str(recipes)])
    assert rc == 0, capsys.readouterr().err
    site = tmp_path / "site"
    assert (site / "cu12" / "torch2.8" / "simple" / "flash-attn").is_dir()  # the ABI of this table
    assert json.loads(page(site, "selector.json"))["min_driver"]["13.0"] == "590.1.2"
    missing = page(site, "index.html")[page(site, "index.html").index('<h2 id="missing">'):]
    row = re.search(r'<tr class="todo"><td>2\.10</td><td>13\.0</td><td>linux_x86_64</td><td>(.*?)</td>',
                    missing).group(1)
    assert re.findall(r'title="([^"]+)"', row) == ["demo_ext-3.12-cu130"]  # this table's Pythons

    # --table names another table: it wins over the folder's, for all three again.
    rc = main(["--wheels", str(w), "--site", str(tmp_path / "site"), "--base-url", BASE,
               "--ledger", str(tmp_path / "l.json"), "--recipes", str(recipes),
               "--table", str(own.path)])
    assert rc == 0, capsys.readouterr().err
    assert not (site / "cu12").exists()
    assert json.loads(page(site, "selector.json"))["min_driver"]["13.0"] == own.cuda["13.0"].min_driver
    missing = page(site, "index.html")[page(site, "index.html").index('<h2 id="missing">'):]
    row = re.search(r'<tr class="todo"><td>2\.10</td><td>13\.0</td><td>linux_x86_64</td><td>(.*?)</td>',
                    missing).group(1)
    (recipe,) = load_all(recipes, own)
    assert re.findall(r'title="([^"]+)"', row) == [f"demo_ext-{py}-cu130" for py in recipe.pythons_for("2.10", own)]


# --------------------------------------------------------------------------- the ledger is the authority


def _cli(tmp_path, *extra, ledger="ledger.json"):
    return main(["--wheels", str(tmp_path / "wheels"), "--site", str(tmp_path / "site"),
                 "--base-url", BASE, "--ledger", str(tmp_path / ledger), *extra])


def test_a_missing_ledger_over_a_site_is_refused_or_started_from_the_sites_copy(tmp_path, capsys):
    w = tmp_path / "wheels"
    fn = make_wheel(w, "demo", "1.0", tag=ANY).name
    build(tmp_path)
    site_ledger = page(tmp_path / "site", "ledger.json")
    (tmp_path / "ledger.json").unlink()
    # A rebuild under the published name, with the ledger gone.
    (w / fn).unlink()
    (w / (fn + ".metadata")).unlink()
    make_wheel(w, "demo", "1.0", tag=ANY, requires_dist=["numpy"])
    assert _cli(tmp_path) == 11
    err = capsys.readouterr().err
    assert f"ledger {tmp_path / 'ledger.json'} does not exist, and the site {tmp_path / 'site'} publishes 1 file(s)" in err
    assert "--init-ledger to start it from the site's own ledger.json" in err and "--start-over" in err
    # --init-ledger starts it from the site's copy: the rebuild is refused as a changed published file.
    assert _cli(tmp_path, "--init-ledger") == 11
    assert "files are immutable" in capsys.readouterr().err
    assert not (tmp_path / "ledger.json").exists() and page(tmp_path / "site", "ledger.json") == site_ledger
    (w / fn).unlink()
    make_wheel(w, "demo", "2.0", tag=ANY)
    assert _cli(tmp_path, "--init-ledger") == 0
    out = capsys.readouterr().out
    assert "(1 new, 1 hashed, 0 removed)" in out and "started from the site's own ledger.json" in out
    files = json.loads((tmp_path / "ledger.json").read_text())["files"]
    assert files[fn] == json.loads(site_ledger)["files"][fn]  # the same upload time, the same sha256


def test_start_over_names_every_file_the_site_loses(tmp_path, capsys):
    w = tmp_path / "wheels"
    old = [make_wheel(w, "demo", v, tag=ANY).name for v in ("1.0", "1.1")]
    build(tmp_path)
    for p in w.iterdir():
        p.unlink()
    new = make_wheel(w, "demo", "2.0", tag=ANY).name
    assert _cli(tmp_path, "--start-over") == 11
    assert "--start-over: ledger" in capsys.readouterr().err  # the ledger exists: never thrown away
    (tmp_path / "ledger.json").rename(tmp_path / "ledger.aside.json")
    assert _cli(tmp_path, "--start-over") == 0
    out = capsys.readouterr().out
    assert "started over: 2 file(s) the site published are no longer listed:" in out
    assert [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("  dropped: ")] == old
    assert sorted(load_ledger(tmp_path / "ledger.json")) == [new]


@pytest.mark.parametrize("inside", ["ledger", "wheels"])
def test_the_ledger_and_the_wheels_may_not_sit_inside_the_site(tmp_path, inside):
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    build(tmp_path)
    before = snapshot(tmp_path / "site")
    kwargs = ({"ledger_path": tmp_path / "site" / "ledger.json"} if inside == "ledger"
              else {"wheels_dir": tmp_path / "site" / "simple"})
    with pytest.raises(IndexBuildError, match=f"is inside the site {tmp_path / 'site'}"):
        build(tmp_path, init_ledger=False, **kwargs)
    assert snapshot(tmp_path / "site") == before


def test_one_ledger_is_locked_whatever_the_site(tmp_path):
    import fcntl

    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    with open(tmp_path / ".ledger.json.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # another run, building another site from it
        with pytest.raises(IndexBuildError, match=f"another index build holds {tmp_path / '.ledger.json.lock'}"):
            build(tmp_path, output_dir=tmp_path / "other-site")
    assert not (tmp_path / "ledger.json").exists() and not (tmp_path / "other-site").exists()


def test_a_site_listing_other_bytes_than_the_ledger_is_refused(tmp_path):
    w = tmp_path / "wheels"
    fn = make_wheel(w, "demo", "1.0", tag=ANY).name
    build(tmp_path)
    doc = json.loads((tmp_path / "ledger.json").read_text())
    doc["files"][fn]["sha256"] = "f" * 64
    (tmp_path / "other.json").write_text(json.dumps(doc))
    shutil.rmtree(w)  # the ledger alone says what the site publishes
    with pytest.raises(IndexBuildError, match=f"publishes 1 file.s. with another sha256 than the ledger records: {fn}"):
        build(tmp_path, init_ledger=False, ledger_path=tmp_path / "other.json")


@pytest.mark.parametrize("step", ["render", "ledger"])
def test_a_full_disk_is_a_named_error_and_changes_nothing(tmp_path, monkeypatch, capsys, step):
    """ENOSPC, simulated by a write that fails as a full file system's does, while the new site is
    written or while the ledger is (tests/test_hostile_index.py fills a real tmpfs)."""
    from tools.sitegen import ledger_file as ledger_module, swap

    w = tmp_path / "wheels"
    make_wheel(w, "demo", "1.0", tag=ANY)
    build(tmp_path)
    before = snapshot(tmp_path / "site"), (tmp_path / "ledger.json").read_bytes()
    make_wheel(w, "demo", "2.0", tag=ANY)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    if step == "render":
        monkeypatch.setattr(swap.WrittenPages, "__setitem__", full)
    else:
        monkeypatch.setattr(ledger_module.os, "fsync", full)
    assert _cli(tmp_path) == 11
    err = capsys.readouterr().err
    what = "writing the new site in" if step == "render" else f"writing the ledger {tmp_path / 'ledger.json'}"
    assert err.startswith(f"index error: {what}") and "No space left on device" in err
    assert "fix: the file system is full: free space there and run again; the site and the ledger are unchanged" in err
    assert (snapshot(tmp_path / "site"), (tmp_path / "ledger.json").read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".ledger.json.lock", ".site.hashcache.json", ".site.lock", "ledger.json", "site", "wheels"]
