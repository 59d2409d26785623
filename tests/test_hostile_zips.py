"""Zips that pip and uv read otherwise than a lax reader, against the real ``python -m tools.index``:
each is left out by name and rule, the rest is published, and the real pip and uv refuse them too.

The inputs come from tests/fixtures/hostile/make_zips.py; each run goes through the bounded runner
and the assertions of tests/test_hostile_index.py: exit 11 naming the file and the rule, no
traceback, the site, ledger and hash cache byte for byte as before, nothing written for the
refused file, bounded time and memory. The installers are run against the same files served from
127.0.0.1 (a find-links directory: the index publishes none of them), by a server the fixture stops.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from index_support import ANY, listed
from test_hostile_index import index_args, left_out, published, run, state
from wheelfactory import make_wheel

from tests.fixtures.hostile.make_zips import ENTRIES, READ_AS_PIP, ZIPS, read_as_pip
from tools.pipeline.venvs import uv_bin
from tools.sitegen.scan import printable

#: What the real installers refuse (measured with pip 26.3 and uv 0.13.9, installing from a
#: find-links page on 127.0.0.1). uv, streaming a download, refuses every zip whose layout says two
#: things; pip refuses fewer. Each other case is refused by this index alone, for the reason its
#: message gives (a name other readers decode otherwise, a field stated twice, a manifest variant
#: that would name a variant index).
UV_REFUSES = {
    "end-record-count-hides-an-escaping-member", "end-record-count-hides-a-second-metadata",
    "end-record-count-too-high", "local-name-differs", "local-size-differs", "local-crc-differs",
    "local-method-differs", "local-flags-differ", "local-entry-in-no-central-record", "data-after-the-end-record",
    "data-before-the-archive", "non-ascii-name-without-utf8-flag", "same-path-twice", "metadata-name-folded",
    "overlapping-entries",
}
PIP_REFUSES = {
    "end-record-count-hides-an-escaping-member", "local-name-differs", "metadata-name-folded",
    "metadata-requires-python-folded",
}


def _site_state(root: Path) -> dict[str, str]:
    return state(root / "site", root / "ledger.json", root / ".site.hashcache.json")


@pytest.mark.parametrize("hostile", ZIPS, ids=[h.id for h in ZIPS])
def test_a_zip_read_otherwise_by_installers_is_left_out_by_name_and_rule(tmp_path, hostile):
    before = published(tmp_path)
    path = hostile.make(tmp_path / "wheels")
    result = run(index_args(tmp_path))
    reasons = left_out(result)
    assert list(reasons) == [printable(path.name)]
    assert re.search(hostile.expect, reasons[path.name]), reasons
    assert "Traceback" not in result.stderr
    assert _site_state(tmp_path) == before
    assert not Path(f"{path}.metadata").exists()


@pytest.mark.parametrize("case", READ_AS_PIP, ids=[c[0] for c in READ_AS_PIP])
def test_metadata_is_published_as_pip_reads_it(tmp_path, case):
    path = read_as_pip(tmp_path / "wheels", case)
    result = run(index_args(tmp_path, "--init-ledger"))
    assert result.returncode == 0, result
    entry = json.loads((tmp_path / "ledger.json").read_text())["files"][path.name]
    assert entry["requires_python"] == case[2]
    assert Path(f"{path}.metadata").read_bytes() == case[1].encode()


@pytest.mark.parametrize("hostile", ENTRIES, ids=[h.id for h in ENTRIES])
def test_a_directory_entry_that_is_no_wheel_is_its_own_rejection(tmp_path, hostile):
    published(tmp_path)
    ledger_before = json.loads((tmp_path / "ledger.json").read_text())["files"]
    path = hostile.make(tmp_path / "wheels")
    good = make_wheel(tmp_path / "wheels", "good", "1.0", tag=ANY)
    result = run(index_args(tmp_path))
    reasons = left_out(result)
    assert list(reasons) == [path.name]
    assert re.search(hostile.expect, reasons[path.name]), reasons
    assert "Traceback" not in result.stderr
    files = json.loads((tmp_path / "ledger.json").read_text())["files"]
    assert files == {**ledger_before, good.name: files[good.name]}  # the rest is published
    assert listed(tmp_path / "site", "", "good") == [good.name]
    assert path.is_symlink() or path.is_dir()  # left as it was


def test_every_case_in_one_batch_and_the_good_wheels_are_published(tmp_path):
    published(tmp_path)
    ledger_before = json.loads((tmp_path / "ledger.json").read_text())["files"]
    hostile = [h.make(tmp_path / "wheels") for h in (*ZIPS, *ENTRIES)]
    good = [make_wheel(tmp_path / "wheels", "good", "1.0", tag=ANY)]
    good += [read_as_pip(tmp_path / "wheels", case) for case in READ_AS_PIP]
    result = run(index_args(tmp_path))
    assert sorted(left_out(result)) == sorted(p.name for p in hostile)
    assert "Traceback" not in result.stderr
    files = json.loads((tmp_path / "ledger.json").read_text())["files"]
    assert sorted(files) == sorted([*ledger_before, *(p.name for p in good)])
    assert not any(Path(f"{p}.metadata").exists() for p in hostile)


# --------------------------------------------------------------------------- the real pip and uv


@pytest.fixture(scope="module")
def find_links(tmp_path_factory) -> Iterator[str]:
    """Every hostile zip, and one good wheel, in a directory served on 127.0.0.1 as a find-links page."""
    root = tmp_path_factory.mktemp("zips")
    for h in ZIPS:
        h.make(root)
    make_wheel(root, "control", "1.0", tag=ANY)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _install(client: str, url: str, project: str, target: Path) -> tuple[int, str]:
    if client == "pip":
        cmd = [sys.executable, "-m", "pip", "--isolated", "install", "--no-cache-dir", "--no-input", "--no-deps",
               "--no-index", "--find-links", url, "--target", str(target), project]
    else:
        cmd = [uv_bin(), "pip", "install", "--no-config", "--no-cache", "--python", sys.executable, "--no-deps",
               "--no-index", "--find-links", url, "--target", str(target), project]
    # The machine's pip and uv configuration (find-links, extra index URLs) must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    return proc.returncode, proc.stdout + proc.stderr


CASES = [("uv", h) for h in sorted(UV_REFUSES)] + [("pip", h) for h in sorted(PIP_REFUSES)]


@pytest.mark.parametrize("client", ["pip", "uv"])
def test_the_installers_install_the_control_wheel(find_links, tmp_path, client):
    code, output = _install(client, find_links, "control", tmp_path / "t")
    assert code == 0, output
    assert (tmp_path / "t" / "control" / "__init__.py").exists()


@pytest.mark.parametrize("client, hostile_id", CASES, ids=[f"{c}-{h}" for c, h in CASES])
def test_the_installers_refuse_what_the_index_refuses(find_links, tmp_path, client, hostile_id):
    (hostile,) = [h for h in ZIPS if h.id == hostile_id]
    project = hostile.make(tmp_path / "probe").name.split("-")[0]  # the file name states the project
    code, output = _install(client, find_links, project, tmp_path / "t")
    assert code != 0, output
    assert not (tmp_path / "t" / project).exists()
    assert not Path("/tmp/cuwheels-escaped.py").exists()
