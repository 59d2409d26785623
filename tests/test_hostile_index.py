"""Hostile inputs against the real ``python -m tools.index``: nothing hostile gets in, nothing
published changes.

Each input (made by tests/fixtures/hostile/make_wheels.py, or here for the scenarios) runs through
the command as a separate process, and each test asserts:

* the named error: the reason or message the input must get, and exit status 11;
* the site and the ledger byte for byte as before every refused run (every file hashed before and
  after), and nothing written for the refused file (no ``.metadata`` beside it);
* bounded time and memory: the run ends within RUN_LIMIT_S seconds (killed otherwise), with at
  most MAX_AS_BYTES of address space (RLIMIT_AS), and its peak resident memory, with that of any
  worker it waited for (``wait4``), stays under MAX_RSS_MIB.

A hostile wheel is left out and the run goes on (exit 11 names it; the rest is published); a
hostile ledger, yank list or site copy of the ledger stops the run before anything is written.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from bounded import Run, run_bounded
from index_support import ANY, BASE, NOW, assert_site_valid, listed
from wheelfactory import make_wheel

from tests.fixtures.hostile.make_wheels import LEDGERS, SPECIAL_EXPECT, WHEELS, YANK_LISTS, make_special
from tools import ROOT
from tools.sitegen.generate import IndexRun, build_index
from tools.sitegen.scan import printable

#: Wall-clock seconds after which a run is killed and the test fails.
RUN_LIMIT_S = 60
#: Seconds a run may take on a loaded 2-core machine (a run here takes well under one).
MAX_SECONDS = 20
#: Address space each run may map (RLIMIT_AS): an unbounded read fails instead of swapping.
MAX_AS_BYTES = 4 << 30
#: Peak resident memory of a run (a run here stays near 60 MiB; 300 MiB of METADATA would not).
MAX_RSS_MIB = 200

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
PUBLISHED = "demo-1.0-py3-none-any.whl"


def run(argv: list[str], *, python_code: str | None = None) -> Run:
    """Run ``python -m tools.index ARGV`` (or ``python -c CODE ARGV``), bounded, and measure it."""
    cmd = [sys.executable, *(["-c", python_code] if python_code else ["-m", "tools.index"]), *argv]
    result = run_bounded(cmd, seconds=RUN_LIMIT_S, address_space=MAX_AS_BYTES, env=ENV)
    if result.seconds >= RUN_LIMIT_S:
        pytest.fail(f"{cmd} ran past {RUN_LIMIT_S} s")
    assert result.seconds < MAX_SECONDS, result
    assert result.peak_rss_mib < MAX_RSS_MIB, result
    return result


def index_args(root: Path, *extra: str, wheels: str = "wheels", site: str = "site",
               ledger: str = "ledger.json") -> list[str]:
    return ["--wheels", str(root / wheels), "--site", str(root / site), "--base-url", BASE,
            "--ledger", str(root / ledger), *extra]


def state(*paths: Path) -> dict[str, str]:
    """sha256 of every file under ``paths`` (each a file or a directory), by path; what is not a
    regular file by its kind (never opened: a FIFO would block)."""
    found: dict[str, str] = {}
    for top in paths:
        for path in [top, *(sorted(top.rglob("*")) if top.is_dir() and not top.is_symlink() else [])]:
            st = path.lstat() if path.exists() or path.is_symlink() else None
            if st is None:
                found[str(path)] = "absent"
            elif stat.S_ISREG(st.st_mode):
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                found[str(path)] = f"link to {os.readlink(path)}"
            elif not stat.S_ISDIR(st.st_mode):
                found[str(path)] = f"mode {stat.S_IFMT(st.st_mode):o}"
    return found


def published(root: Path) -> dict[str, str]:
    """A site and its ledger with one published wheel (built in this process), and their state."""
    make_wheel(root / "wheels", "demo", "1.0", tag=ANY)
    build_index(IndexRun(wheels_dir=root / "wheels", output_dir=root / "site", base_url=BASE,
                ledger_path=root / "ledger.json", init_ledger=True, now=NOW))
    return state(root / "site", root / "ledger.json", root / ".site.hashcache.json")


def left_out(run_: Run) -> dict[str, str]:
    """``{file name: reason}`` of the files a run says it left out."""
    assert run_.returncode == 11, run_
    assert "file(s) left out; the rest is published:" in run_.stderr, run_.stderr
    return dict(re.findall(r"^  (\S+?): (.*)$", run_.stderr, re.M))


# --------------------------------------------------------------------------- wheels


@pytest.mark.parametrize("hostile", WHEELS, ids=[h.id for h in WHEELS])
def test_a_hostile_wheel_is_left_out_by_name_and_nothing_published_changes(tmp_path, hostile):
    before = published(tmp_path)
    path = hostile.make(tmp_path / "wheels")
    result = run(index_args(tmp_path))
    reasons = left_out(result)
    assert list(reasons) == [printable(path.name)]
    assert re.search(hostile.expect, reasons[printable(path.name)]), reasons
    assert "Traceback" not in result.stderr
    assert state(tmp_path / "site", tmp_path / "ledger.json", tmp_path / ".site.hashcache.json") == before
    assert not Path(f"{path}.metadata").exists()


def test_things_that_are_not_files_are_left_out_without_blocking(tmp_path):
    before = published(tmp_path)
    special = make_special(tmp_path / "wheels")
    reasons = left_out(run(index_args(tmp_path)))
    assert sorted(reasons) == sorted(p.name for p in special)
    assert all(re.search(SPECIAL_EXPECT, reason) for reason in reasons.values()), reasons
    assert state(tmp_path / "site", tmp_path / "ledger.json") == {
        k: v for k, v in before.items() if "hashcache" not in k}


def test_every_hostile_wheel_in_one_batch_and_the_good_one_is_published(tmp_path):
    published(tmp_path)
    ledger_before = json.loads((tmp_path / "ledger.json").read_text())["files"]
    hostile = [h.make(tmp_path / "wheels") for h in WHEELS] + make_special(tmp_path / "wheels")
    good = make_wheel(tmp_path / "wheels", "good", "1.0", tag=ANY)
    reasons = left_out(run(index_args(tmp_path)))
    assert sorted(reasons) == sorted(printable(p.name) for p in hostile)
    files = json.loads((tmp_path / "ledger.json").read_text())["files"]
    assert files == {**ledger_before, good.name: files[good.name]}
    assert listed(tmp_path / "site", "", "good") == [good.name]
    assert_site_valid(tmp_path / "site")


# --------------------------------------------------------------------------- ledgers, yank lists, site files


def _refused(tmp_path: Path, result: Run, before: dict[str, str], expect: str, *paths: Path) -> None:
    """A run refused whole: exit 11, the named error, nothing written anywhere."""
    assert result.returncode == 11, result
    assert result.stderr.startswith("index error: "), result.stderr
    assert re.search(expect, result.stderr), result.stderr
    assert "Traceback" not in result.stderr
    assert state(*paths) == before


@pytest.mark.parametrize("hostile", LEDGERS, ids=[h.id for h in LEDGERS])
def test_a_hostile_ledger_is_refused_and_nothing_changes(tmp_path, hostile):
    published(tmp_path)
    valid = (tmp_path / "ledger.json").read_text()
    (tmp_path / "ledger.json").unlink()
    hostile.make(tmp_path / "ledger.json", valid)
    make_wheel(tmp_path / "wheels", "demo", "2.0", tag=ANY)  # a batch: nothing of it may be written
    paths = (tmp_path / "site", tmp_path / "ledger.json", tmp_path / "wheels")
    before = state(*paths)
    _refused(tmp_path, run(index_args(tmp_path)), before, hostile.expect, *paths)


@pytest.mark.parametrize("hostile", YANK_LISTS, ids=[h.id for h in YANK_LISTS])
def test_a_hostile_yank_list_is_refused_and_nothing_changes(tmp_path, hostile):
    """(A yank list is read before the batch; only naming a file never published is found after
    it, when the batch's new wheels have their .metadata: never trusted, written again next run.)"""
    published(tmp_path)
    yanks = hostile.make(tmp_path / "yanked.yaml", PUBLISHED)
    make_wheel(tmp_path / "wheels", "demo", "2.0", tag=ANY)
    paths = (tmp_path / "site", tmp_path / "ledger.json", yanks)
    before = state(*paths)
    _refused(tmp_path, run(index_args(tmp_path, "--yanked", str(yanks))), before, hostile.expect, *paths)


def _sites_ledger(change):
    def make(site: Path) -> None:
        path = site / "ledger.json"
        text = path.read_text()
        path.unlink()
        change(path, text)
    return make


def _with_another_file(doc: dict) -> dict:
    doc["files"]["demo-1.1-py3-none-any.whl"] = {**doc["files"][PUBLISHED], "version": "1.1"}
    return doc


SITE_COPIES = [
    ("nested-100000-deep", r"ledger\.json is not a ledger: its JSON is nested too deeply",
     _sites_ledger(lambda path, text: path.write_text("[" * 100_000))),
    ("not-utf8", r"ledger\.json is not UTF-8 text", _sites_ledger(lambda path, text: path.write_bytes(b"\xff"))),
    ("other-sha256", r"publishes 1 file\(s\) with another sha256 than the ledger records: demo-1\.0",
     _sites_ledger(lambda path, text: path.write_text(re.sub(r'"sha256": "[0-9a-f]', '"sha256": "x', text)
                                                      .replace('"sha256": "x', '"sha256": "f')))),
    ("a-file-the-ledger-lacks", r"publishes 1 file\(s\) the ledger doesn't have: demo-1\.1",
     _sites_ledger(lambda path, text: path.write_text(json.dumps(_with_another_file(json.loads(text)))))),
    ("a-fifo", r"refusing to replace .*: it is not empty and is not a site built by tools\.index",
     _sites_ledger(lambda path, text: os.mkfifo(path))),
]


@pytest.mark.parametrize("case, expect, make", SITE_COPIES, ids=[c[0] for c in SITE_COPIES])
def test_a_site_whose_ledger_copy_was_tampered_with_is_refused(tmp_path, case, expect, make):
    published(tmp_path)
    make(tmp_path / "site")
    paths = (tmp_path / "site", tmp_path / "ledger.json", tmp_path / "wheels")
    before = state(*paths)
    _refused(tmp_path, run(index_args(tmp_path)), before, expect, *paths)


@pytest.mark.parametrize("lock", [".site.lock", ".ledger.json.lock"])
def test_a_lock_file_that_is_not_a_file_is_a_named_error(tmp_path, lock):
    """A file system error no step names (here: opening a lock file) is still an IndexBuildError."""
    published(tmp_path)
    (tmp_path / lock).unlink()
    (tmp_path / lock).mkdir()
    paths = (tmp_path / "site", tmp_path / "ledger.json")
    before = state(*paths)
    _refused(tmp_path, run(index_args(tmp_path)), before,
             rf"^index error: the index could not be built: \[Errno 21\] Is a directory: '\S+/{re.escape(lock)}'",
             *paths)


@pytest.mark.parametrize("what", ["hash-cache-nested-deep", "hash-cache-fifo", "fingerprints-nested-deep"])
def test_a_broken_cache_beside_the_site_is_no_cache(tmp_path, what):
    """The hash cache and the page fingerprints are shortcuts: a crafted one is ignored (the
    wheels are hashed again, the pages rendered), never trusted, never a hang."""
    before = published(tmp_path)
    cache, fingerprints = tmp_path / ".site.hashcache.json", tmp_path / "site" / ".index-fingerprints.json"
    if what == "hash-cache-fifo":
        cache.unlink()
        os.mkfifo(cache)
    else:
        (cache if what.startswith("hash") else fingerprints).write_text("[" * 100_000)
    result = run(index_args(tmp_path))
    assert result.returncode == 0, result
    assert "(0 new, 1 hashed, 0 removed)" in result.stdout if what.startswith("hash") else "0 hashed" in result.stdout
    assert state(tmp_path / "site") == {k: v for k, v in before.items() if k.startswith(str(tmp_path / "site"))}


# --------------------------------------------------------------------------- the ledger's promise


def test_a_rebuild_under_a_published_name_with_the_ledger_gone_is_refused(tmp_path):
    before = published(tmp_path)
    (tmp_path / "ledger.json").unlink()
    for path in (tmp_path / "wheels").iterdir():
        path.unlink()
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY, requires_dist=["numpy"])  # other bytes
    paths = (tmp_path / "site", tmp_path / "ledger.json")
    before = state(*paths)
    # As make index ran it before: --init-ledger always. The site's own ledger.json is the ledger.
    _refused(tmp_path, run(index_args(tmp_path, "--init-ledger")), before,
             rf"files are immutable.*\n  {PUBLISHED}: \d+ bytes, published with \d+ bytes", *paths)
    # Without the flag: refused, naming the site and what would be lost.
    _refused(tmp_path, run(index_args(tmp_path)), before,
             r"does not exist, and the site .* publishes 1 file\(s\)", *paths)


def test_a_wheel_changed_in_place_with_its_size_and_mtime_is_refused(tmp_path):
    published(tmp_path)
    wheel = tmp_path / "wheels" / PUBLISHED
    st = wheel.stat()
    with open(wheel, "r+b") as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(wheel, ns=(st.st_atime_ns, st.st_mtime_ns))
    paths = (tmp_path / "site", tmp_path / "ledger.json")
    before = state(*paths)
    _refused(tmp_path, run(index_args(tmp_path)), before, rf"files are immutable.*\n  {PUBLISHED}: sha256", *paths)


@pytest.mark.parametrize("respelled", [
    "Demo-1.0-py3-none-any.whl", "demo-1.0.0-py3-none-any.whl", "demo-1.0-py3.py3-none-any.whl",
], ids=["project", "version", "tags"])
def test_another_spelling_of_a_published_wheel_is_left_out(tmp_path, respelled):
    before = published(tmp_path)
    name, version = respelled.split("-")[:2]
    path = make_wheel(tmp_path / "wheels", name, version, tag=ANY, requires_dist=["evil"], filename=respelled)
    reasons = left_out(run(index_args(tmp_path)))
    assert list(reasons) == [respelled]
    assert reasons[respelled].startswith(f"installers take it for {PUBLISHED}, published (same demo 1.0")
    assert state(tmp_path / "site", tmp_path / "ledger.json", tmp_path / ".site.hashcache.json") == before
    assert not Path(f"{path}.metadata").exists()


def test_a_second_site_from_the_same_ledger_waits_its_turn(tmp_path):
    published(tmp_path)
    paths = (tmp_path / "ledger.json", tmp_path / "other-site")
    make_wheel(tmp_path / "batch", "other", "1.0", tag=ANY)
    before = state(*paths)
    # Another run holds the ledger (building the first site): a run for another site is refused.
    with open(tmp_path / ".ledger.json.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        result = run(index_args(tmp_path, wheels="batch", site="other-site"))
    _refused(tmp_path, result, before, r"another index build holds .*\.ledger\.json\.lock", *paths)


def test_two_sites_built_at_once_from_one_ledger_never_lose_a_file(tmp_path):
    """Two real runs started together, one site each, one ledger: whichever order they take, the
    ledger ends with every file a run published, and each site lists only what it records."""
    published(tmp_path)
    for batch in ("a", "b"):
        for i in range(40):
            make_wheel(tmp_path / f"batch-{batch}", f"proj{batch}", f"1.{i}", tag=ANY)
    cmd = [sys.executable, "-m", "tools.index"]
    procs = {batch: subprocess.Popen(cmd + index_args(tmp_path, wheels=f"batch-{batch}", site=f"site-{batch}",
                                                      ledger="ledger.json", ) + ["--init-ledger"],
                                     cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for batch in ("a", "b")}
    results = {batch: (proc.wait(timeout=RUN_LIMIT_S), proc.communicate()) for batch, proc in procs.items()}
    ledger = set(json.loads((tmp_path / "ledger.json").read_text())["files"])
    for batch, (rc, (out, err)) in results.items():
        if rc == 0:
            site = set(json.loads((tmp_path / f"site-{batch}" / "ledger.json").read_text())["files"])
            assert {f"proj{batch}-1.{i}-py3-none-any.whl" for i in range(40)} <= site <= ledger
        else:
            assert rc == 11 and "another index build holds" in err, err
    assert any(rc == 0 for rc, _ in results.values())


def test_a_removed_file_does_not_come_back(tmp_path):
    published(tmp_path)
    make_wheel(tmp_path / "wheels", "demo", "2.0", tag=ANY)
    assert run(index_args(tmp_path, "--remove", PUBLISHED)).returncode == 0
    paths = (tmp_path / "site", tmp_path / "ledger.json")
    before = state(*paths)
    result = run(index_args(tmp_path))  # an ordinary run, the removed wheel still in the batch
    assert result.returncode == 0, result
    assert f"left out, removed from the index: {PUBLISHED} (--restore {PUBLISHED} publishes it again)" in result.stdout
    assert "(0 new," in result.stdout
    assert state(*paths) == before


FULL_DISK = """
import errno, os, runpy, sys
from tools.sitegen import ledger_file, swap
def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
if sys.argv[1] == "render":
    swap.WrittenPages.__setitem__ = full
else:
    ledger_file.os.fsync = full
sys.argv = ["tools.index", *sys.argv[2:]]
runpy.run_module("tools.index", run_name="__main__")
"""


@pytest.mark.parametrize("step", ["render", "ledger"])
def test_a_full_disk_simulated_is_a_named_error(tmp_path, step):
    """ENOSPC from the write itself (the command's module run with that write failing as a full
    file system's does), while the site or the ledger is written."""
    published(tmp_path)
    make_wheel(tmp_path / "wheels", "demo", "2.0", tag=ANY)
    paths = (tmp_path / "site", tmp_path / "ledger.json")
    before = state(*paths)
    result = run([step, *index_args(tmp_path)], python_code=FULL_DISK)
    what = r"writing the new site in \S+" if step == "render" else r"writing the ledger \S+"
    _refused(tmp_path, result, before, rf"^index error: {what} failed: \[Errno 28\] No space left on device", *paths)
    assert "fix: the file system is full: free space there and run again" in result.stderr
    assert not list(tmp_path.glob(".site.new-*"))


def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                            "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs \"$d\" && umount \"$d\""],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


REAL_FULL_DISK = """
set -u
mount -t tmpfs -o size=2m tmpfs "$T/roomy"
mount -t tmpfs -o size=2m tmpfs "$T/tight"
cd "$ROOT"
run() { timeout 60 "$PY" -m tools.index --wheels "$T/wheels" --base-url https://files.example/v1 \
          --site "$T/$SITE_FS/site" --ledger "$T/$LEDGER_FS/ledger.json" "$@"; }
snap() { "$PY" -c 'import hashlib, json, sys, pathlib
print(json.dumps({str(p): hashlib.sha256(p.read_bytes()).hexdigest()
                  for top in sys.argv[1:] for p in sorted(pathlib.Path(top).rglob("*")) if p.is_file()
                  and p.name != "filler"}))' "$T/roomy" "$T/tight"; }
run --init-ledger > "$T/first.out" 2>&1 || exit 3
snap > "$T/before.json"
dd if=/dev/zero of="$T/$FULL/filler" bs=4k 2>/dev/null
cp "$T/batch/"* "$T/wheels/"
run > "$T/second.out" 2> "$T/second.err"
echo $? > "$T/second.rc"
rm "$T/$FULL/filler"
snap > "$T/after.json"
"""


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="no user namespace here to mount a small tmpfs in")
@pytest.mark.parametrize("full", ["site", "ledger"])
def test_a_really_full_disk_is_a_named_error(tmp_path, full):
    """A real ENOSPC: the site and the ledger on two 2 MiB tmpfs (in a user and mount namespace),
    the one that holds ``full`` filled up before the second run."""
    for d in ("roomy", "tight", "batch"):
        (tmp_path / d).mkdir()
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    make_wheel(tmp_path / "batch", "demo", "2.0", tag=ANY)
    env = {**ENV, "T": str(tmp_path), "ROOT": str(ROOT), "PY": sys.executable,
           "SITE_FS": "tight" if full == "site" else "roomy", "LEDGER_FS": "tight" if full == "ledger" else "roomy",
           "FULL": "tight"}
    proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", REAL_FULL_DISK],
                          env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, (proc.stdout, proc.stderr, (tmp_path / "first.out").read_text())
    rc, err = int((tmp_path / "second.rc").read_text()), (tmp_path / "second.err").read_text()
    assert rc == 11, err
    what = "writing the new site in" if full == "site" else "writing the ledger"
    assert err.startswith(f"index error: {what}") and "No space left on device" in err, err
    assert "fix: the file system is full: free space there and run again" in err
    assert json.loads((tmp_path / "after.json").read_text()) == json.loads((tmp_path / "before.json").read_text())


KILL_BETWEEN_RENAMES = """
import os, runpy, signal, sys
from tools.sitegen import swap
swap._exchange = lambda a, b: False  # a file system without RENAME_EXCHANGE
real_rename = os.rename
def rename(src, dst):
    real_rename(src, dst)
    if str(dst).endswith("/.site.prev"):
        os.kill(os.getpid(), signal.SIGKILL)  # killed between the two renames
os.rename = rename
sys.argv = ["tools.index", *sys.argv[1:]]
runpy.run_module("tools.index", run_name="__main__")
"""


def test_killed_between_the_two_renames_of_the_fallback_swap(tmp_path):
    """Without RENAME_EXCHANGE, a run killed between its two renames leaves no site for a moment:
    the old one, whole, at .site.prev, and the ledger already recording the new files; the next
    run puts it back and publishes them."""
    published(tmp_path)
    new = make_wheel(tmp_path / "wheels", "demo", "2.0", tag=ANY).name
    result = run(index_args(tmp_path), python_code=KILL_BETWEEN_RENAMES)
    assert result.returncode == -9
    assert not (tmp_path / "site").exists() and (tmp_path / ".site.swapping").exists()
    old = json.loads((tmp_path / ".site.prev" / "ledger.json").read_text())["files"]
    assert set(old) == {PUBLISHED} and new in json.loads((tmp_path / "ledger.json").read_text())["files"]
    result = run(index_args(tmp_path))
    assert result.returncode == 0, result
    assert listed(tmp_path / "site", "", "demo") == [PUBLISHED, new]
    assert_site_valid(tmp_path / "site")
    assert not (tmp_path / ".site.swapping").exists()
