"""tools.serve, and the real clients (pip, uv, pypi-simple) installing from the served index.

Every server here runs in a thread of the test process and is shut down by its fixture; every
client runs with a timeout, an isolated configuration and no cache.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest
from pypi_simple import ACCEPT_HTML_ONLY, ACCEPT_JSON_ONLY, PyPISimple
from wheelfactory import installed, make_wheel

from bounded import Run, run_bounded
from tests.fixtures.hostile.make_pages import HALF_SENT, REQUESTS
from tools import ROOT
from tools.core.errors import CuwheelsError
from tools.sitegen.generate import IndexRun, build_index
from tools.pipeline.venvs import uv_bin
from tools.sitegen.server import HTML_V1, JSON_V1, TEXT_HTML, make_server, negotiate

ANY = "py3-none-any"
CLIENT_TIMEOUT = 120


# --------------------------------------------------------------------------- negotiation


@pytest.mark.parametrize(
    "accept, expected",
    [
        (None, TEXT_HTML),  # no header: HTML, as a static host would answer
        ("*/*", TEXT_HTML),  # curl: ties go to HTML
        # pip 26's header
        (f"{JSON_V1}, {HTML_V1}; q=0.1, text/html; q=0.01", JSON_V1),
        # uv's header
        (f"{JSON_V1}, {HTML_V1};q=0.2, text/html;q=0.01", JSON_V1),
        ("application/vnd.pypi.simple.latest+json", JSON_V1),  # PyPI's alias
        (HTML_V1, HTML_V1),
        (f"{JSON_V1};q=0.5, text/html", TEXT_HTML),
        ("text/html,application/xhtml+xml,*/*;q=0.8", TEXT_HTML),  # a browser
        (f"{JSON_V1};q=0, */*;q=0.1", TEXT_HTML),  # q=0 means "not this one"
        ("image/png", None),  # nothing we serve: 406
        (f"{JSON_V1};q=zz", None),  # a broken q-value counts as 0
    ],
)
def test_negotiate(accept, expected):
    assert negotiate(accept) == expected


# --------------------------------------------------------------------------- the server


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory) -> Path:
    """An index exercising what the clients must handle: dependencies, yanks, variants."""
    root = tmp_path_factory.mktemp("index")
    w = root / "wheels"
    for v in ("1.0", "1.5", "2.0"):
        make_wheel(w, "demo-lib", v, tag=ANY)
    make_wheel(w, "demo-app", "1.0", tag=ANY, requires_dist=["demo-lib"])
    make_wheel(w, "demo-app", "2.0", tag=ANY, requires_dist=["demo-lib<2"])
    # Unsatisfiable: the resolver must read its metadata and go back to 2.0.
    make_wheel(w, "demo-app", "3.0", tag=ANY, requires_dist=["demo-lib>=9"])
    make_wheel(w, "demo-yank", "1.0", tag=ANY)
    make_wheel(w, "demo-yank", "1.1", tag=ANY)
    for label in ("cu128.torch2.8", "cu128.torch2.9", "cu130.torch2.13", "cu12torch2.9cxx11abiTRUE"):
        make_wheel(w, "demo-ext", "1.0", local=label, tag=ANY)
    make_wheel(w, "demo-py", "1.0", tag=ANY, requires_python=">=3.99")  # never installable
    for build in (None, "1", "2"):  # rebuilds of one version: recipe build numbers 0, 1, 2
        make_wheel(w, "demo-rebuilt", "1.0", local="cu128.torch2.8", tag=ANY, build_tag=build)
    (root / "yanked.yaml").write_text('demo_yank-1.1-py3-none-any.whl: "broken <build>"\n')
    build_index(IndexRun(
        wheels_dir=w, output_dir=root / "site", base_url="/files", ledger_path=root / "ledger.json",
        yanked_path=root / "yanked.yaml", init_ledger=True,
    ))
    return root


class Running:
    """A server in a thread, with its request log."""

    def __init__(self, root: Path, *, negotiate: bool = True):
        self.log = root / f"requests-{time.monotonic_ns()}.log"
        self.server = make_server(root / "site", root / "wheels", negotiate=negotiate, log_path=self.log)
        self.url = self.server.url
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def requests(self) -> list[str]:
        """``METHOD PATH STATUS`` lines logged so far; each call only returns the new ones."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        new, self._seen = lines[getattr(self, "_seen", 0):], len(lines)
        return new


@pytest.fixture(scope="module", params=["negotiating", "static"])
def server(request, demo_index) -> Iterator[Running]:
    """The demo index served with content negotiation (JSON to pip/uv) and like a static host (HTML)."""
    running = Running(demo_index, negotiate=request.param == "negotiating")
    running.mode = request.param
    yield running
    running.stop()


def get(url: str, path: str, headers: dict | None = None, method: str = "GET") -> http.client.HTTPResponse:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request(method, path, headers=headers or {})
    resp = conn.getresponse()
    resp.body = resp.read()
    conn.close()
    return resp


@pytest.fixture(scope="module")
def negotiating(demo_index) -> Iterator[Running]:
    running = Running(demo_index)
    yield running
    running.stop()


def test_json_for_json_clients_html_for_others(negotiating):
    resp = get(negotiating.url, "/simple/demo-lib/", {"Accept": JSON_V1})
    assert resp.status == 200 and resp.getheader("Content-Type") == JSON_V1
    assert resp.getheader("Vary") == "Accept, Accept-Encoding"
    assert json.loads(resp.body)["meta"]["api-version"] == "1.1"
    resp = get(negotiating.url, "/simple/demo-lib/")
    assert resp.getheader("Content-Type") == "text/html; charset=utf-8" and b"<html>" in resp.body
    resp = get(negotiating.url, "/simple/demo-lib/", {"Accept": HTML_V1})
    assert resp.getheader("Content-Type") == HTML_V1
    resp = get(negotiating.url, f"/simple/?format={JSON_V1}")
    assert json.loads(resp.body)["projects"]
    assert get(negotiating.url, "/simple/", {"Accept": "image/png"}).status == 406
    head = get(negotiating.url, "/simple/", {"Accept": JSON_V1}, method="HEAD")
    assert head.status == 200 and head.body == b"" and int(head.getheader("Content-Length")) > 0


def test_static_mode_always_answers_html(demo_index):
    running = Running(demo_index, negotiate=False)
    try:
        resp = get(running.url, "/simple/", {"Accept": JSON_V1})
        assert resp.getheader("Content-Type") == "text/html; charset=utf-8"
        # The JSON is still there, at its documented path.
        resp = get(running.url, "/simple/demo-lib/index.json")
        assert resp.getheader("Content-Type") == JSON_V1
    finally:
        running.stop()


def test_paths(negotiating):
    resp = get(negotiating.url, "/simple/demo-lib")
    assert resp.status == 301 and resp.getheader("Location") == "/simple/demo-lib/"
    wheel = get(negotiating.url, "/files/demo_lib-1.0-py3-none-any.whl")
    assert wheel.status == 200 and wheel.body[:2] == b"PK"
    meta = get(negotiating.url, "/files/demo_lib-1.0-py3-none-any.whl.metadata")
    assert meta.status == 200 and meta.body.startswith(b"Metadata-Version")
    plus = get(negotiating.url, "/files/demo_ext-1.0%2Bcu128.torch2.8-py3-none-any.whl")
    assert plus.status == 200
    assert get(negotiating.url, "/files/").status == 404  # no listing of the wheels directory
    assert get(negotiating.url, "/files/../ledger.json").status == 404  # not the site through /files/
    assert get(negotiating.url, "/../../etc/passwd").status == 404
    assert get(negotiating.url, "/simple/nope/").status == 404
    home = get(negotiating.url, "/")
    assert home.status == 200 and b"Coverage" in home.body
    log = negotiating.requests()
    assert "GET /files/demo_lib-1.0-py3-none-any.whl 200" in log
    assert "GET /simple/demo-lib 301" in log


def test_pypi_simple_client_reads_both_forms_and_verifies_metadata(server):
    accept = ACCEPT_JSON_ONLY if server.mode == "negotiating" else ACCEPT_HTML_ONLY
    with PyPISimple(endpoint=server.url + "/simple/", accept=accept) as client:
        assert "demo-ext" in client.get_index_page().projects
        page = client.get_project_page("demo_lib")  # normalized by the client
        assert [p.version for p in page.packages] == ["1.0", "1.5", "2.0"]
        for pkg in page.packages:
            assert pkg.has_metadata
            # Downloads <wheel>.metadata and checks it against data-core-metadata.
            assert "Name: demo-lib" in client.get_package_metadata(pkg)
        yank = client.get_project_page("demo-yank").packages[1]
        assert yank.is_yanked and yank.yanked_reason == "broken <build>"


def test_serve_command_stops_by_itself(demo_index, tmp_path):
    log = tmp_path / "req.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.serve", "--site", str(demo_index / "site"), "--wheels",
         str(demo_index / "wheels"), "--port", "0", "--log", str(log), "--quiet", "--exit-after", "3"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    try:
        started = time.monotonic()
        line = proc.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:")
        url = line.split()[1].rstrip("/")
        assert get(url, "/simple/", {"Accept": JSON_V1}).getheader("Content-Type") == JSON_V1
        # No signal: --exit-after alone must stop it, cleanly, and not before its time.
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - started >= 3
        with pytest.raises(OSError):  # nothing listens any more
            get(url, "/simple/", {})
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()
    assert log.read_text().startswith("GET /simple/ 200")


def test_serve_command_refuses_a_missing_site(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tools.serve", "--site", str(tmp_path / "nope")],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and "does not exist" in proc.stderr


# --------------------------------------------------------------------------- hostile requests

#: The request timeout of the server the hostile requests meet (seconds).
REQUEST_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def guarded(demo_index, tmp_path_factory) -> Iterator[tuple[str, Path, Path]]:
    """``python -m tools.serve --log`` with a 1 s request timeout: (URL, request log, its stderr).
    It stops by itself after 300 s."""
    work = tmp_path_factory.mktemp("guarded")
    log, errors = work / "requests.log", work / "stderr"
    with open(errors, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tools.serve", "--site", str(demo_index / "site"), "--wheels",
             str(demo_index / "wheels"), "--port", "0", "--log", str(log), "--exit-after", "300",
             "--request-timeout", str(REQUEST_TIMEOUT)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("serving http://127.0.0.1:"), line + errors.read_text()
        yield line.split()[1].rstrip("/"), log, errors
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _exchange(url: str, data: bytes, limit: float = 10) -> bytes:
    """What the server answers to ``data`` on a new connection, until it closes it (at most
    ``limit`` seconds)."""
    answer = b""
    with socket.create_connection(_address(url), timeout=limit) as sock:
        sock.sendall(data)
        ends = time.monotonic() + limit
        while time.monotonic() < ends:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer


@pytest.mark.parametrize("name", list(REQUESTS))
def test_a_hostile_request_is_answered_not_dropped(name, guarded):
    url, log, errors = guarded
    data, status, logged = REQUESTS[name]
    seen = log.read_text().splitlines() if log.exists() else []
    answer = _exchange(url, data)
    first = answer.split(b"\r\n", 1)[0]
    # http.server answers a request whose version it can't read as HTTP/0.9 did: the body alone.
    code = first.split(b" ")[1] if first.startswith(b"HTTP/") else re.search(rb"Error code: (\d+)", answer)[1]
    assert code == str(status).encode(), answer[:200]
    assert logged in log.read_text().splitlines()[len(seen):]
    assert get(url, "/simple/", {}).status == 200  # and it goes on serving
    assert "Traceback" not in errors.read_text()


def _closed_within(sock: socket.socket, seconds: float, drip: float) -> float | None:
    """Seconds until the server closed ``sock`` (sending a byte every ``drip`` seconds meanwhile,
    when above 0), or None when it was still open after ``seconds``."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if drip:
            try:
                sock.send(b"a")
            except OSError:
                return time.monotonic() - start
        readable, _, _ = select.select([sock], [], [], drip or 0.1)
        if readable:
            try:
                if not sock.recv(65536):
                    return time.monotonic() - start
            except OSError:
                return time.monotonic() - start
    return None


@pytest.mark.parametrize("name", list(HALF_SENT))
def test_a_half_sent_request_is_closed_in_time(name, guarded):
    url, _, errors = guarded
    sent, drip = HALF_SENT[name]
    with socket.create_connection(_address(url), timeout=10) as sock:
        sock.sendall(sent)
        took = _closed_within(sock, REQUEST_TIMEOUT + 5, drip)
    assert took is not None and took < REQUEST_TIMEOUT + 1.5, took
    assert "Traceback" not in errors.read_text()


def test_many_half_sent_requests_hold_nothing(guarded):
    """Fifty connections that never finish their request: the server answers others meanwhile,
    and closes every one of them within its request timeout."""
    url, _, errors = guarded
    socks = [socket.create_connection(_address(url), timeout=10) for _ in range(50)]
    try:
        for sock in socks:
            sock.sendall(b"GET /simple/ HTTP/1.1\r\nHost: x\r\n")
        assert get(url, "/simple/", {}).status == 200
        took = [_closed_within(sock, REQUEST_TIMEOUT + 5, 0) for sock in socks]
    finally:
        for sock in socks:
            sock.close()
    assert None not in took and max(took) < REQUEST_TIMEOUT + 1.5, took
    assert "Traceback" not in errors.read_text()


def test_a_request_timeout_must_be_a_positive_number(demo_index):
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(CuwheelsError, match="must be a positive number of seconds"):
            make_server(demo_index / "site", request_timeout=bad)


# --------------------------------------------------------------------------- pip and uv


def _clean_env() -> dict[str, str]:
    # The machine's pip configuration (find-links, extra index URLs) must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _uv() -> str:
    return uv_bin()


@pytest.fixture
def venv(tmp_path) -> Path:
    """A fresh virtual environment without pip (pip runs from outside with --python)."""
    path = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=60)
    return path


def install(client: str, venv: Path, index_url: str, *requirements: str) -> subprocess.CompletedProcess:
    if client == "pip":
        cmd = [sys.executable, "-m", "pip", "--isolated", "--python", str(venv / "bin" / "python"), "install",
               "--no-cache-dir", "--no-input", "--index-url", index_url, *requirements]
    else:
        cmd = [_uv(), "pip", "install", "--no-config", "--no-cache", "--python", str(venv / "bin" / "python"),
               "--index-url", index_url, *requirements]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CLIENT_TIMEOUT, env=_clean_env(), cwd=venv)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    return proc


def downloaded_wheels(log: list[str]) -> list[str]:
    """Wheel file names fetched, according to the server's request log."""
    paths = (unquote(line.split()[1]) for line in log)
    return sorted(p.rsplit("/", 1)[1] for p in paths if p.endswith(".whl"))


CLIENTS = ["pip", "uv"]


@pytest.mark.parametrize("client", CLIENTS)
def test_dependency_resolution_reads_metadata_files_not_wheels(client, server, venv):
    """demo-app 3.0 is unsatisfiable: its metadata is read from .metadata, its wheel never fetched."""
    server.requests()
    install(client, venv, server.url + "/simple/", "demo-app")
    assert installed(venv) == {"demo_app": "2.0", "demo_lib": "1.5"}
    log = server.requests()
    assert downloaded_wheels(log) == ["demo_app-2.0-py3-none-any.whl", "demo_lib-1.5-py3-none-any.whl"]
    assert any("demo_app-3.0-py3-none-any.whl.metadata 200" in line for line in log)
    assert not [line for line in log if not line.endswith(" 200")]


@pytest.mark.parametrize("client", CLIENTS)
def test_yanked_file_is_skipped_for_a_range(client, server, venv):
    install(client, venv, server.url + "/simple/", "demo-yank>=1.0")
    assert installed(venv) == {"demo_yank": "1.0"}


@pytest.mark.parametrize("client", CLIENTS)
def test_yanked_file_is_installed_for_an_exact_pin(client, server, venv):
    install(client, venv, server.url + "/simple/", "demo-yank==1.1")
    assert installed(venv) == {"demo_yank": "1.1"}


@pytest.mark.parametrize(
    "client, index, version",
    [
        ("pip", "cu128/torch2.9/simple/", "1.0+cu128.torch2.9"),
        ("uv", "cu128/torch2.9/simple/", "1.0+cu128.torch2.9"),
        ("pip", "cu128/torch2.8/simple/", "1.0+cu128.torch2.8"),
        ("uv", "cu130/torch2.13/simple/", "1.0+cu130.torch2.13"),
        # The combined index holds every torch build: the highest label wins, whatever torch is installed.
        ("pip", "simple/", "1.0+cu130.torch2.13"),
    ],
)
def test_a_variant_index_picks_the_build_for_its_torch(client, index, version, server, venv):
    server.requests()
    install(client, venv, f"{server.url}/{index}", "demo-ext")
    assert installed(venv) == {"demo_ext": version}
    assert downloaded_wheels(server.requests()) == [f"demo_ext-{version}-py3-none-any.whl"]


@pytest.mark.parametrize("client", CLIENTS)
def test_the_highest_build_number_of_a_version_is_installed(client, server, venv):
    server.requests()
    install(client, venv, f"{server.url}/cu128/torch2.8/simple/", "demo-rebuilt")
    assert installed(venv) == {"demo_rebuilt": "1.0+cu128.torch2.8"}
    assert downloaded_wheels(server.requests()) == ["demo_rebuilt-1.0+cu128.torch2.8-2-py3-none-any.whl"]


def test_uv_project_snippet_from_the_front_page_works(demo_index, negotiating, tmp_path):
    """The [tool.uv.index] + [tool.uv.sources] text on index.html, pasted into a project, resolves."""
    snippet = _front_page_section(demo_index / "site", "cuwheels-cu128-torch2.9")[-1]
    snippet = snippet.replace('url = "', f'url = "{negotiating.url}/', 1)  # the page's script does this in a browser
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "consumer"\nversion = "0"\nrequires-python = ">=3.10"\n'
        'dependencies = ["demo-ext"]\n\n' + snippet
    )
    env = _clean_env()
    proc = subprocess.run(
        [_uv(), "lock", "--no-cache", "--default-index", f"{negotiating.url}/simple/", "--python", sys.executable],
        cwd=project, capture_output=True, text=True, timeout=CLIENT_TIMEOUT, env=env,
    )
    assert proc.returncode == 0, proc.stderr
    lock = (project / "uv.lock").read_text()
    assert 'version = "1.0+cu128.torch2.9"' in lock
    assert f'registry = "{negotiating.url}/cu128/torch2.9/simple/"' in lock


def _front_page_section(site: Path, index_id: str) -> list[str]:
    """The <pre> blocks of one variant index on index.html, as text a person would copy."""
    import html
    import re

    page = (site / "index.html").read_text()
    section = re.search(rf'<details[^>]*id="{re.escape(index_id)}">(.*?)</details>', page, re.S).group(1)
    return [html.unescape(re.sub(r"<[^>]+>", "", block)) for block in re.findall(r"<pre>(.*?)</pre>", section, re.S)]


def test_pip_command_from_the_front_page_works(demo_index, negotiating, venv):
    """The pip line on index.html, as pasted (the page's script fills in the host), installs."""
    import shlex

    pip_block = _front_page_section(demo_index / "site", "cuwheels-cu128-torch2.9")[0]
    line = next(line for line in pip_block.splitlines() if line.startswith("pip install demo-ext "))
    args = shlex.split(line.replace("--extra-index-url ", f"--extra-index-url {negotiating.url}/"))
    env = _clean_env()
    # The default index stands in for PyPI, which the test must not reach: it has no demo-ext.
    env["PIP_INDEX_URL"] = f"{negotiating.url}/nothing-here/"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), *args[1:], "--no-cache-dir"],
        capture_output=True, text=True, timeout=CLIENT_TIMEOUT, env=env, cwd=venv,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert installed(venv) == {"demo_ext": "1.0+cu128.torch2.9"}



# --------------------------------------------------------------------------- caching, compression, ranges


def test_a_current_copy_gets_a_304(negotiating):
    """ETag and Last-Modified on every file; If-None-Match (which wins) or If-Modified-Since
    naming the current file is a 304 with no body."""
    for path in ("/simple/demo-lib/", "/files/demo_lib-1.0-py3-none-any.whl"):
        first = get(negotiating.url, path)
        etag, modified = first.getheader("ETag"), first.getheader("Last-Modified")
        assert first.status == 200 and etag.startswith('"') and modified.endswith(" GMT")
        for headers in ({"If-None-Match": etag}, {"If-None-Match": f'"x", W/{etag}'},
                        {"If-Modified-Since": modified}):
            again = get(negotiating.url, path, headers)
            assert (again.status, again.body, again.getheader("ETag")) == (304, b"", etag), headers
        for headers in ({"If-None-Match": '"x"', "If-Modified-Since": modified},
                        {"If-Modified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"},
                        {"If-Modified-Since": "not a date"}):
            assert get(negotiating.url, path, headers).body == first.body, headers


def test_pages_are_gzipped_for_a_client_that_accepts_it(negotiating):
    plain = get(negotiating.url, "/simple/demo-lib/", {"Accept": JSON_V1})
    packed = get(negotiating.url, "/simple/demo-lib/", {"Accept": JSON_V1, "Accept-Encoding": "gzip, br"})
    assert packed.getheader("Content-Encoding") == "gzip" and plain.getheader("Content-Encoding") is None
    assert gzip.decompress(packed.body) == plain.body and len(packed.body) < len(plain.body)
    assert packed.getheader("Vary") == plain.getheader("Vary") == "Accept, Accept-Encoding"
    assert packed.getheader("ETag") != plain.getheader("ETag")  # another representation
    again = get(negotiating.url, "/simple/demo-lib/", {"Accept": JSON_V1, "Accept-Encoding": "gzip",
                                                        "If-None-Match": packed.getheader("ETag")})
    assert again.status == 304
    assert get(negotiating.url, "/simple/", {"Accept-Encoding": "gzip;q=0"}).getheader("Content-Encoding") is None
    head = get(negotiating.url, "/simple/demo-lib/", {"Accept": JSON_V1, "Accept-Encoding": "gzip"}, method="HEAD")
    assert head.body == b"" and head.getheader("Content-Length") == str(len(packed.body))
    # A wheel is a zip already: sent as it is.
    wheel = get(negotiating.url, "/files/demo_lib-1.0-py3-none-any.whl", {"Accept-Encoding": "gzip"})
    assert wheel.getheader("Content-Encoding") is None and wheel.body[:2] == b"PK"


def test_one_byte_range_is_a_206(negotiating):
    path = "/files/demo_lib-1.0-py3-none-any.whl"
    whole = get(negotiating.url, path)
    size = len(whole.body)
    assert whole.getheader("Accept-Ranges") == "bytes"
    for spec, first, last in (("0-3", 0, 3), ("-4", size - 4, size - 1), ("10-", 10, size - 1)):
        part = get(negotiating.url, path, {"Range": f"bytes={spec}"})
        assert part.status == 206 and part.body == whole.body[first:last + 1], spec
        assert part.getheader("Content-Range") == f"bytes {first}-{last}/{size}"
    beyond = get(negotiating.url, path, {"Range": f"bytes={size}-"})
    assert beyond.status == 416 and beyond.getheader("Content-Range") == f"bytes */{size}"
    # Several ranges, or an If-Range naming another version of the file: the whole file.
    for headers in ({"Range": "bytes=0-1,4-5"}, {"Range": "bytes=0-3", "If-Range": '"stale"'}):
        assert get(negotiating.url, path, headers).body == whole.body, headers
    current = {"Range": "bytes=0-3", "If-Range": whole.getheader("ETag")}
    assert get(negotiating.url, path, current).status == 206


def test_a_slow_reader_is_cut_off(tmp_path):
    """A client that stops reading a large file holds its connection RESPONSE bound seconds at
    most; the server answers others meanwhile."""
    site, files = tmp_path / "site", tmp_path / "files"
    site.mkdir()
    files.mkdir()
    (site / "index.html").write_text("<html>home</html>")
    size = 64 << 20
    with open(files / "big.whl", "wb") as f:
        f.truncate(size)
    server = make_server(site, files, response_timeout=1.0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        with sock:
            sock.settimeout(10)
            sock.connect(_address(server.url))
            sock.sendall(b"GET /files/big.whl HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(2.5)  # reads nothing past the bound
            assert get(server.url, "/").status == 200
            received, started = 0, time.monotonic()
            while time.monotonic() - started < 10:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                received += len(chunk)
            else:
                pytest.fail("the connection was still open")
        assert received < size
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# --------------------------------------------------------------------------- what the file system refuses


def _serving(cmd: list[str], stderr) -> tuple[subprocess.Popen, str]:
    """``cmd`` (a tools.serve command) started, and the URL it serves once it says so."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    assert line.startswith("serving http://"), line
    return proc, line.split()[1].rstrip("/")


def test_a_path_the_file_system_refuses_is_answered(tmp_path):
    """A name too long for the file system is a 404 and a folder the server may not search a 403,
    each with a body; no traceback, no dropped connection. As root, the server runs without the
    capabilities that skip permission checks, as an ordinary user would."""
    site = tmp_path / "site"
    (site / "locked" / "inner").mkdir(parents=True)
    (site / "index.html").write_text("<html>home</html>")
    (site / "locked" / "index.html").write_text("<html>locked</html>")
    (site / "locked" / "inner" / "index.html").write_text("<html>inner</html>")
    cmd = [sys.executable, "-m", "tools.serve", "--site", str(site), "--port", "0", "--exit-after", "60"]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: permissions can't be refused")
        cmd = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *cmd]
    (site / "locked").chmod(0)
    long = "a" * 300
    try:
        with open(tmp_path / "stderr", "w") as stderr:
            proc, url = _serving(cmd, stderr)
        try:
            for path, status in ((f"/{long}/x", 404), (f"/simple/{long}/", 404), (f"/files/{long}", 404),
                                 (f"/{long}", 404), ("/locked/", 403), ("/locked/inner/", 403),
                                 ("/locked/inner/index.html", 403)):
                resp = get(url, path)
                assert resp.status == status and resp.body.startswith(str(status).encode()), path
            assert get(url, "/").status == 200
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            proc.stdout.close()
    finally:
        (site / "locked").chmod(0o755)
    assert "Traceback" not in (tmp_path / "stderr").read_text()


# --------------------------------------------------------------------------- the command's options


def _serve_bounded(demo_index: Path, *args: str) -> Run:
    return run_bounded([sys.executable, "-m", "tools.serve", "--site", str(demo_index / "site"), *args],
                       seconds=30, address_space=4 << 30)


@pytest.mark.parametrize("args, code, message", [
    (["--port", "99999"], 2, "99999 is outside 0-65535"),
    (["--port", "-1"], 2, "-1 is outside 0-65535"),
    (["--port", "http"], 2, "'http' is not a port number"),
    (["--host", "localhost"], 1, "host 'localhost' is not an IP address"),
    (["--host", "192.0.2.1"], 1, "192.0.2.1 is not an address of this machine"),
    (["--exit-after", "nan"], 2, "'nan' is not a number of seconds above 0"),
    (["--exit-after", "inf"], 2, "'inf' is not a number of seconds above 0"),
    (["--exit-after", "0"], 2, "'0' is not a number of seconds above 0"),
    (["--request-timeout", "-1"], 2, "'-1' is not a number of seconds above 0"),
    (["--response-timeout", "nan"], 2, "'nan' is not a number of seconds above 0"),
])
def test_the_command_refuses_a_bad_option(demo_index, args, code, message):
    run = _serve_bounded(demo_index, "--exit-after", "5", *args)
    assert run.returncode == code and message in run.stderr, run
    assert "Traceback" not in run.stderr and run.seconds < 20


def test_the_command_refuses_a_port_in_use(demo_index):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        run = _serve_bounded(demo_index, "--port", str(port), "--exit-after", "5")
    assert run.returncode == 1 and f"port {port} on 127.0.0.1 is already in use" in run.stderr, run
    assert "Traceback" not in run.stderr


def test_the_request_log_must_be_a_regular_file(demo_index, tmp_path):
    """A FIFO nobody reads is refused at once (opening it would wait for a reader forever), and
    so is a folder."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for log in (fifo, tmp_path):
        run = _serve_bounded(demo_index, "--port", "0", "--log", str(log), "--exit-after", "5")
        assert run.returncode == 1 and f"request log {log}" in run.stderr, run
        assert "Traceback" not in run.stderr and run.seconds < 5


def _has_ipv6() -> bool:
    try:
        with socket.create_server(("::1", 0), family=socket.AF_INET6):
            return True
    except OSError:
        return False


def test_ipv6_is_served_or_refused_by_name(demo_index):
    if not _has_ipv6():
        run = _serve_bounded(demo_index, "--host", "::1", "--port", "0", "--exit-after", "1")
        assert run.returncode == 1 and "::1" in run.stderr and "Traceback" not in run.stderr, run
        return
    server = make_server(demo_index / "site", host="::1")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        assert server.url.startswith("http://[::1]:")
        conn = http.client.HTTPConnection("::1", server.server_address[1], timeout=10)
        conn.request("GET", "/simple/")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    run = _serve_bounded(demo_index, "--host", "::1", "--port", "0", "--exit-after", "1")
    assert run.returncode == 0 and run.stdout.startswith("serving http://[::1]:"), run
