"""A published pin can't be taken over, and a hand-edited ledger is refused: the real
``python -m tools.index``, then the real pip and uv asked what they install.

Each PINS case (tests/fixtures/hostile/make_pins.py) publishes one wheel of ``demo 2.0+cu128.torch2.8``
and brings a later wheel of the same version in a second run:

* where installers would take the later wheel instead of the published one on some machine, the
  run leaves it out (exit 11) naming the rule and the fix, the site and the ledger stay byte for
  byte as they were, and pip and uv, asked on that machine for the pinned version from the site
  served on 127.0.0.1, download the published bytes;
* the control, for the cases where the later wheel ranks strictly higher: the same two wheels
  published together (what the index did before the rule with a later batch), and pip and uv
  take the later one: what the rule prevents;
* a later wheel that only serves other machines (another Python, arch or older glibc), or a
  rebuild under a build number, is published, and those machines get it.

Each LEDGER_EDITS case edits the ledger's entry by hand; the run refuses the ledger whole (exit
11, naming the entry, the field and the rule) and changes nothing. Runs are bounded as in
tests/test_hostile_index.py; installers run with a 120 s timeout; the server stops with the test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_hostile_index import left_out, run, state

from tests.fixtures.hostile.make_pins import LEDGER_EDITS, PIN, PINS, Pin
from tools.core.regularfile import read_regular
from tools.pipeline.venvs import uv_bin
from tools.sitegen.ledger_file import MAX_LEDGER_BYTES
from tools.sitegen.server import make_server

RULE = "rule: a new file of a published version must never be chosen over a published one"
#: The cases whose later wheel ranks strictly above the published one on the machine asked.
STRICT = {"newer-manylinux", "py311-beside-py3", "platform-beside-any"}


def _index(root: Path, *extra: str):
    return run(["--wheels", str(root / "wheels"), "--site", str(root / "site"), "--base-url", "/files",
                "--ledger", str(root / "ledger.json"), *extra])


@contextmanager
def _served(root: Path) -> Iterator[tuple[str, Path]]:
    log = root / "requests.log"
    server = make_server(root / "site", root / "wheels", log_path=log)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"{server.url}/simple/", log
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _picks(client: str, pin: Pin, url: str, log: Path, tmp_path: Path) -> str:
    """The wheel ``client`` downloads for the pinned version on ``pin``'s machine."""
    seen = len(log.read_text().splitlines()) if log.exists() else 0
    target = tmp_path / f"{client}-{seen}"
    if client == "pip":
        platform_, version, abi = pin.pip
        # pip takes --platform as given: a glibc 2.34 machine is every manylinux level up to it.
        level, arch = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform_).groups()
        platforms = [f"--platform=manylinux_2_{m}_{arch}" for m in range(int(level), 16, -1)]
        cmd = [sys.executable, "-m", "pip", "--isolated", "download", "--no-deps", "--no-cache-dir",
               "--only-binary=:all:", *platforms, "--platform", f"linux_{arch}", "--python-version", version,
               "--implementation", "cp", "--abi", abi, "-d", str(target), "--index-url", url, PIN]
    else:
        platform_, version = pin.uv
        cmd = [uv_bin(), "pip", "install", "--no-config", "--no-cache", "--no-deps", "--target", str(target),
               "--python-platform", platform_, "--python-version", version, "--index-url", url, PIN]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fetched = [line.split()[1].rsplit("/", 1)[1] for line in log.read_text().splitlines()[seen:]
               if line.split()[1].endswith(".whl")]
    assert len(fetched) == 1, fetched
    return fetched[0].replace("%2B", "+")


@pytest.mark.parametrize("pin", PINS, ids=[p.id for p in PINS])
def test_a_later_wheel_of_a_published_version_never_changes_its_pin(tmp_path, pin):
    first, later = pin.make(tmp_path / "made")
    (tmp_path / "wheels").mkdir()
    shutil.copy(first, tmp_path / "wheels")
    assert _index(tmp_path, "--init-ledger").returncode == 0
    before = state(tmp_path / "site", tmp_path / "ledger.json")
    shutil.copy(later, tmp_path / "wheels")
    result = _index(tmp_path)
    if pin.refused:
        reasons = left_out(result)
        assert list(reasons) == [later.name], result.stderr
        assert RULE in reasons[later.name] and first.name in reasons[later.name], reasons
        assert "-1-" in reasons[later.name].rsplit("e.g. ", 1)[1], reasons  # the name to publish it under
        assert state(tmp_path / "site", tmp_path / "ledger.json") == before
        expected = first.name
    else:
        assert result.returncode == 0, result.stderr
        expected = later.name
    with _served(tmp_path) as (url, log):
        for client in ("pip", "uv"):
            assert _picks(client, pin, url, log, tmp_path) == expected, client


@pytest.mark.parametrize("pin", [p for p in PINS if p.id in STRICT], ids=sorted(STRICT))
def test_without_the_rule_installers_would_take_the_later_wheel(tmp_path, pin):
    """The control: both wheels on the pages (published in one batch, as a later batch was
    before the rule), pip and uv take the later bytes for the pinned version."""
    first, later = pin.make(tmp_path / "made")
    (tmp_path / "wheels").mkdir()
    for wheel in (first, later):
        shutil.copy(wheel, tmp_path / "wheels")
    assert _index(tmp_path, "--init-ledger").returncode == 0
    with _served(tmp_path) as (url, log):
        for client in ("pip", "uv"):
            assert _picks(client, pin, url, log, tmp_path) == later.name, client


def _published_ledger(tmp_path: Path) -> dict[str, str]:
    pin = PINS[0]
    first, _ = pin.make(tmp_path / "made")
    (tmp_path / "wheels").mkdir()
    shutil.copy(first, tmp_path / "wheels")
    assert _index(tmp_path, "--init-ledger").returncode == 0
    return state(tmp_path / "site", tmp_path / "ledger.json", tmp_path / "wheels")


@pytest.mark.parametrize("case", LEDGER_EDITS, ids=list(LEDGER_EDITS))
def test_a_hand_edited_ledger_entry_is_refused_and_nothing_changes(tmp_path, case):
    edit, expect = LEDGER_EDITS[case]
    _published_ledger(tmp_path)
    ledger = tmp_path / "ledger.json"
    ledger.write_text(edit(read_regular(ledger).decode()))
    before = state(tmp_path / "site", ledger, tmp_path / "wheels")
    result = _index(tmp_path)
    assert result.returncode == 11, result
    assert re.search(expect, result.stderr), result.stderr
    assert "Traceback" not in result.stderr
    assert state(tmp_path / "site", ledger, tmp_path / "wheels") == before


@pytest.mark.parametrize("copy", ["ledger", "site-copy"])
def test_a_ledger_over_the_cap_is_refused_unread(tmp_path, copy):
    """The ledger, or the site's copy of it that ``--init-ledger`` starts from: a sparse 3 GiB
    file is refused by its size, never read into memory."""
    _published_ledger(tmp_path)
    ledger = tmp_path / "ledger.json"
    big = ledger if copy == "ledger" else tmp_path / "site" / "ledger.json"
    if copy == "site-copy":
        ledger.unlink()
    with big.open("r+b") as f:
        f.truncate(3 << 30)
    # Every other file hashed; the big one by its size and times (hashing 3 GiB would be the slow part).
    others = [p for p in (*(tmp_path / "site").rglob("*"), ledger) if p != big and p.exists()]
    before = state(*others), big.stat(), sorted((tmp_path / "site").rglob("*"))
    result = _index(tmp_path, *(["--init-ledger"] if copy == "site-copy" else []))
    assert result.returncode == 11, result
    assert f"{big} is over {MAX_LEDGER_BYTES >> 20} MiB, the most a ledger is read to" in result.stderr
    assert "Traceback" not in result.stderr
    after = big.stat()
    assert state(*others) == before[0] and (after.st_size, after.st_mtime_ns) == (3 << 30, before[1].st_mtime_ns)
    assert sorted((tmp_path / "site").rglob("*")) == before[2]  # nothing written beside them
