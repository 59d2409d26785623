"""What the real uv does with the index on a static host: ``--exclude-newer`` (it reads each
file's upload time from the HTML's ``data-upload-time``) and which index a dependency of an
index package comes from (``[tool.uv.sources]`` routes direct dependencies only).

The static host is the standard library's file server (one file per URL, the content type by
extension, ``index.html`` for a folder) and ``tools.serve --no-negotiate``; both run on
127.0.0.1 in a thread the fixture stops. No registry is reached: the default index is a path
of the same server that has nothing.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from wheelfactory import make_wheel

from tools.pipeline.venvs import uv_bin
from tools.sitegen.generate import IndexRun, build_index
from tools.sitegen.server import make_server

FIRST = datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc)   # demo-t 1.0 and demo-lib, demo-app
SECOND = datetime(2026, 3, 10, 12, 0, tzinfo=timezone.utc)  # demo-t 1.1
ANY = "py3-none-any"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 - http.server's signature
        pass


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    """An index built in two runs, two months apart: demo-t 1.0 in the first, 1.1 in the second;
    demo-app (which needs demo-lib) and demo-lib only here."""
    root = tmp_path_factory.mktemp("uvindex")
    w = root / "wheels"
    make_wheel(w, "demo-t", "1.0", tag=ANY)
    make_wheel(w, "demo-lib", "1.0", tag=ANY)
    make_wheel(w, "demo-app", "1.0", tag=ANY, requires_dist=["demo-lib"])
    run = dict(wheels_dir=w, output_dir=root / "site", base_url="/files", ledger_path=root / "ledger.json")
    build_index(IndexRun(**run, init_ledger=True, now=FIRST))
    make_wheel(w, "demo-t", "1.1", tag=ANY)
    build_index(IndexRun(**run, now=SECOND))
    # The static host's tree: the site, with the wheels at /files/.
    static = root / "static"
    shutil.copytree(root / "site", static)
    (static / "files").symlink_to(w, target_is_directory=True)
    return root


def _thread(server) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module", params=["file server", "tools.serve --no-negotiate"])
def static_url(request, index) -> Iterator[str]:
    """The index's URL on a static host."""
    if request.param == "file server":
        server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(index / "static")))
        url = f"http://127.0.0.1:{server.server_address[1]}"
    else:
        server = make_server(index / "site", index / "wheels", negotiate=False)
        url = server.url
    thread = _thread(server)
    yield url
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _env() -> dict[str, str]:
    # The machine's uv configuration (an index URL, a cache) must not leak in.
    return {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}


def _uv(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([uv_bin(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=_env())


@pytest.mark.parametrize("cutoff, picks", [
    ("2026-12-31T00:00:00Z", "demo-t==1.1"),
    ("2026-02-01T00:00:00Z", "demo-t==1.0"),  # between the two runs
    ("2025-12-31T00:00:00Z", None),           # before both: nothing
])
def test_exclude_newer_on_a_static_host(static_url, tmp_path, cutoff, picks):
    (tmp_path / "req.in").write_text("demo-t\n")
    proc = _uv("pip", "compile", "--no-config", "--no-cache", "--index-url", f"{static_url}/simple/",
               "--exclude-newer", cutoff, "req.in", cwd=tmp_path)
    if picks is None:
        assert proc.returncode != 0 and "exclude-newer" in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        assert picks in proc.stdout.splitlines(), proc.stdout
    assert "missing an upload date" not in proc.stderr


def test_uv_pip_install_dry_run_with_exclude_newer(static_url, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    proc = _uv("pip", "install", "--dry-run", "--no-config", "--no-cache", "--python", str(venv / "bin" / "python"),
               "--index-url", f"{static_url}/simple/", "--exclude-newer", "2026-02-01T00:00:00Z", "demo-t",
               cwd=tmp_path)
    assert proc.returncode == 0 and " + demo-t==1.0" in proc.stderr, proc.stderr


_HEAD = ('[project]\nname = "consumer"\nversion = "0"\nrequires-python = ">=3.10"\ndependencies = [{deps}]\n\n'
         '[tool.uv]\npackage = false\n\n[[tool.uv.index]]\nname = "cuwheels"\nurl = "{url}/simple/"\n')
_SOURCES = '\n[tool.uv.sources]\n' + "".join(f'{name} = {{ index = "cuwheels" }}\n' for name in ("demo-app", "demo-lib"))


@pytest.mark.parametrize("deps, extra, resolves", [
    # An explicit index routes only the direct dependencies its sources name: demo-lib, which
    # demo-app needs, is looked for on the default index only, even with a source of its own.
    ('"demo-app"', "explicit = true\n" + _SOURCES.replace('demo-lib = { index = "cuwheels" }\n', ""), False),
    ('"demo-app"', "explicit = true\n" + _SOURCES, False),
    # Naming the dependency as a direct one, with its source, routes it.
    ('"demo-app", "demo-lib"', "explicit = true\n" + _SOURCES, True),
    # An index that is not explicit is searched before the default one, for every package.
    ('"demo-app"', "", True),
])
def test_where_uv_takes_the_dependency_of_an_index_package(static_url, tmp_path, deps, extra, resolves):
    (tmp_path / "pyproject.toml").write_text(_HEAD.format(deps=deps, url=static_url) + extra)
    proc = _uv("lock", "--no-cache", "--default-index", f"{static_url}/nothing-here/", "--python", sys.executable,
               cwd=tmp_path)
    if not resolves:
        assert proc.returncode != 0 and "demo-lib was not found in the package registry" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    lock = (tmp_path / "uv.lock").read_text()
    assert lock.count(f'source = {{ registry = "{static_url}/simple/" }}') == 2, lock
