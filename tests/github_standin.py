"""A stand-in of GitHub's REST API for one repository (``o/r``) on 127.0.0.1: releases and their
assets (with the documented limit of assets per release; a name uploaded twice refused as
GitHub's ``already_exists``; each asset read, downloaded through a redirect to storage, or
deleted by id, as the kernel store uses them), a run's artifacts (listed a page at a
time, each downloaded through a redirect to "storage", which refuses the token as Azure's does),
the assets' download addresses, and rate limits answered as GitHub answers them (403 with
``retry-after`` and a secondary-limit message). It is a stand-in: it keeps the API's shapes and
limits, not GitHub's storage, accounts or signatures, and says so in every answer (the header
``X-GitHub-Stand-In``).

The limits are recipes/limits.yaml's (``tools.plan.limits``): assets per release, REST requests
per hour (past it: 403 with ``x-ratelimit-remaining: 0``, as GitHub answers the primary limit)
and content-creating requests per minute and per hour (past them: 403 with ``retry-after`` and
the secondary limit's message). For a workflow run under act (tests/test_actchain.py) it also
lists the artifacts act's own artifact server stored (``artifacts_dir``: ``<run id>/<name>/*.zip``),
takes a Pages deployment of one of them (``POST /repos/o/r/pages/deployments`` with its
``artifact_id``, the tar inside unpacked into ``site_dir``) and serves that site under
``/site/``, the Pages address it answers.

    from github_standin import github   # the fixture: state, base_url = github(...)

``Clock`` and ``paced_api`` give a test the release's client (``tools.releasing.ghapi.Api``)
paced by the limits file on an injected clock, so the pacing waits cost no time.
"""

from __future__ import annotations

import io
import json
import mimetypes
import re
import tarfile
import threading
import time
import zipfile
from collections import deque
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

import pytest

from tools.plan.limits import load_limits
from tools.releasing.ghapi import Api

class Clock:
    """An injected clock: sleeping moves it on at once, and every wait is recorded."""

    def __init__(self):
        self.now, self.waits = 1000.0, []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.waits.append(s)
        self.now += s


def paced_api(base, clock, **limits):
    """The release's API client at ``base``, paced by the limits file (``limits`` replacing
    some of its figures) on ``clock``."""
    lim = replace(load_limits(), **limits)
    return Api(base, "token", lim, backoff_s=1, backoff_max_s=8, attempts=4, clock=clock,
               sleep=clock.sleep, say=lambda _: None)


#: Every answer says what answered it.
STAND_IN_HEADER = ("X-GitHub-Stand-In", "tests/github_standin.py: a stand-in of GitHub's REST API, "
                   "not GitHub")


class StandIn:
    """GitHub's release API for one repository, in memory, with its limits."""

    def __init__(self, assets_limit=None, rate_limit_every=0, fail_once=(), cut_listing=None,
                 limits=None, artifacts_dir=None, run_id="1", site_dir=None):
        limits = limits or load_limits()
        self.releases: list[dict] = []
        #: this run's artifacts: (name, zip bytes); a listing cut after ``cut_listing`` items
        self.artifacts: list[tuple[str, bytes]] = []
        self.cut_listing = cut_listing
        self.storage_saw_token = False
        #: the repository's Pages site (the API's answer), None: not set up
        self.pages: dict | None = {"html_url": "https://o.github.io/r/", "build_type": "workflow"}
        #: each uploaded asset's bytes, by (release id, name)
        self.blobs: dict[tuple[int, str], bytes] = {}
        self.assets: dict[int, list[dict]] = {}
        #: the next asset's id, and its upload time (one second after the previous one's)
        self.next_asset = 1000
        self.assets_limit = limits.assets_per_release if assets_limit is None else assets_limit
        #: the documented request limits: (limit, window seconds, times of the requests in it)
        self.rest_window = (limits.rest_requests_per_hour, 3600, deque())
        self.content_windows = [(limits.content_requests_per_minute, 60, deque()),
                                (limits.content_requests_per_hour, 3600, deque())]
        #: act's artifact server's directory for this run, and where a Pages deployment goes
        self.artifacts_dir = Path(artifacts_dir) if artifacts_dir else None
        self.run_id = run_id
        self.site_dir = Path(site_dir) if site_dir else None
        self.deployments: list[dict] = []
        self.rate_limit_every = rate_limit_every
        self.fail_once = set(fail_once)
        self.content = 0
        self.log: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()

    def all_artifacts(self) -> list[tuple[str, bytes]]:
        """The run's artifacts: those set by a test, then those act's artifact server stored."""
        found = list(self.artifacts)
        run = self.artifacts_dir / self.run_id if self.artifacts_dir else None
        for folder in sorted(run.iterdir()) if run and run.is_dir() else ():
            zips = sorted(folder.glob("*.zip"))
            if folder.is_dir() and zips:
                found.append((folder.name, zips[0].read_bytes()))
        return found

    def over_limit(self, content: bool) -> str | None:
        """Count one request; which documented limit it is past, if any ("rest", "content")."""
        now = time.monotonic()
        windows = [("rest", self.rest_window)] + \
            ([("content", w) for w in self.content_windows] if content else [])
        for _, (_, seconds, times) in windows:
            while times and times[0] <= now - seconds:
                times.popleft()
        for kind, (limit, _, times) in windows:
            if len(times) >= limit:
                return kind
        for _, (_, _, times) in windows:
            times.append(now)
        return None

    def deploy(self, artifact_id: int, base: str) -> dict:
        """A Pages deployment: the artifact's tar (upload-pages-artifact's) unpacked as the site."""
        name, data = self.all_artifacts()[artifact_id - 1]
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            tar = z.read("artifact.tar")
        site = self.site_dir
        site.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            t.extractall(site, filter="data")
        self.pages = {"html_url": f"{base}/site/", "build_type": "workflow"}
        self.deployments.append({"artifact": name, "id": len(self.deployments) + 1})
        return {"id": len(self.deployments), "status_url": f"{base}/site/",
                "page_url": f"{base}/site/"}


def _handler(state: StandIn, base: list[str]):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code, body=None, headers=None):
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(code)
            self.send_header(*STAND_IN_HEADER)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            state.log.append((self.command, self.path, code))

        def _bytes(self, data, content_type=None):
            self.send_response(200)
            self.send_header(*STAND_IN_HEADER)
            if content_type:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            state.log.append((self.command, self.path, 200))

        def _page(self, items):
            q = parse_qs(urlparse(self.path).query)
            per, page = int(q.get("per_page", ["30"])[0]), int(q.get("page", ["1"])[0])
            return items[(page - 1) * per:page * per]

        def _any(self):
            with state.lock:
                path = urlparse(self.path).path
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                key = f"{self.command} {path}"
                if key in state.fail_once:
                    state.fail_once.discard(key)
                    return self._send(502, {"message": "Bad Gateway"})
                if path.startswith("/site/") and self.command == "GET":
                    return self._site(path[len("/site/"):])
                over = state.over_limit(self.command != "GET") if path.startswith("/repos/") \
                    else None
                if over == "rest":
                    return self._send(403, {"message": "API rate limit exceeded"},
                                      {"x-ratelimit-remaining": "0",
                                       "x-ratelimit-reset": str(int(time.time()) + 60)})
                if over == "content":
                    return self._send(403, {"message": "You have exceeded a secondary rate "
                                                       "limit"}, {"Retry-After": "60"})
                if self.command != "GET":
                    state.content += 1
                    if state.rate_limit_every and state.content % state.rate_limit_every == 0:
                        return self._send(403, {"message": "You have exceeded a secondary rate "
                                                           "limit"}, {"Retry-After": "2"})
                if path == "/repos/o/r/pages/deployments" and self.command == "POST":
                    got = json.loads(body)
                    return self._send(200, state.deploy(int(got["artifact_id"]), base[0]))
                if path == "/repos/o/r/pages":
                    return self._send(200, state.pages) if state.pages else \
                        self._send(404, {"message": "Not Found"})
                m = re.fullmatch(r"/repos/o/r/actions/runs/(\d+)/artifacts", path)
                if m:
                    items = [{"id": i + 1, "name": n, "size_in_bytes": len(z), "expired": False}
                             for i, (n, z) in enumerate(state.all_artifacts())]
                    wanted = parse_qs(urlparse(self.path).query).get("name")
                    if wanted:  # the API's exact-name filter
                        items = [a for a in items if a["name"] == wanted[0]]
                    shown = items[:state.cut_listing] if state.cut_listing else items
                    return self._send(200, {"total_count": len(items),
                                            "artifacts": self._page(shown)})
                m = re.fullmatch(r"/repos/o/r/actions/artifacts/(\d+)/zip", path)
                if m:  # a redirect to storage's signed address, as GitHub answers
                    return self._send(302, None, {"Location": f"{base[0]}/storage/{m.group(1)}"
                                                              "?sig=signed"})
                m = re.fullmatch(r"/storage/(\d+)", path)
                if m:
                    if self.headers.get("Authorization"):
                        state.storage_saw_token = True
                        return self._send(400, {"message": "two kinds of authentication"})
                    return self._bytes(state.all_artifacts()[int(m.group(1)) - 1][1])
                m = re.fullmatch(r"/repos/o/r/releases/assets/(\d+)", path)
                if m:  # one asset: its JSON, its bytes (a redirect to storage), or deleted
                    found = [(rid, a) for rid, assets in state.assets.items() for a in assets
                             if a["id"] == int(m.group(1))]
                    if not found:
                        return self._send(404, {"message": "Not Found"})
                    rid, asset = found[0]
                    if self.command == "DELETE":
                        state.assets[rid].remove(asset)
                        del state.blobs[(rid, asset["name"])]
                        return self._send(204)
                    if self.headers.get("Accept") == "application/octet-stream":
                        return self._send(302, None, {"Location": asset["browser_download_url"]
                                                      + "?sig=signed"})
                    return self._send(200, asset)
                m = re.fullmatch(r"/o/r/releases/download/([^/]+)/([^/]+)", path)
                if m:  # an asset's browser_download_url
                    if "sig=" in self.path and self.headers.get("Authorization"):
                        state.storage_saw_token = True
                        return self._send(400, {"message": "two kinds of authentication"})
                    tag, name = m.group(1), unquote(m.group(2))
                    rel = next((r for r in state.releases if r["tag_name"] == tag), None)
                    asset = next((a for a in state.assets.get(rel["id"], []) if a["name"] == name),
                                 None) if rel else None
                    if asset is None:
                        return self._send(404, {"message": "Not Found"})
                    return self._bytes(state.blobs[(rel["id"], name)])
                m = re.fullmatch(r"/repos/o/r/releases/tags/(.+)", path)
                if m:
                    found = [r for r in state.releases if r["tag_name"] == m.group(1)
                             and not r["draft"]]
                    return self._send(200, {**found[0], "assets": state.assets[found[0]["id"]]}) \
                        if found else self._send(404, {})
                if path == "/repos/o/r/releases" and self.command == "GET":
                    return self._send(200, self._page(state.releases[::-1]))
                if path == "/repos/o/r/releases" and self.command == "POST":
                    got = json.loads(body)
                    rid = len(state.releases) + 1
                    rel = {"id": rid, "tag_name": got["tag_name"], "draft": got["draft"],
                           "prerelease": got.get("prerelease", False),
                           "upload_url": f"{base[0]}/uploads/{rid}/assets{{?name,label}}"}
                    state.releases.append(rel)
                    state.assets[rid] = []
                    return self._send(201, rel)
                m = re.fullmatch(r"/repos/o/r/releases/(\d+)/assets", path)
                if m:
                    return self._send(200, self._page(state.assets[int(m.group(1))]))
                m = re.fullmatch(r"/repos/o/r/releases/(\d+)", path)
                if m and self.command == "PATCH":
                    rel = state.releases[int(m.group(1)) - 1]
                    rel.update(json.loads(body))
                    return self._send(200, rel)
                m = re.fullmatch(r"/uploads/(\d+)/assets", path)
                if m:
                    assets = state.assets[int(m.group(1))]
                    if len(assets) >= state.assets_limit:
                        return self._send(422, {"message": "too many assets"})
                    name = parse_qs(urlparse(self.path).query)["name"][0]
                    if any(a["name"] == name for a in assets):  # GitHub's already_exists
                        return self._send(422, {"message": "Validation Failed",
                                                "errors": [{"code": "already_exists"}]})
                    rid = int(m.group(1))
                    tag = state.releases[rid - 1]["tag_name"]
                    state.next_asset += 1
                    asset = {"id": state.next_asset, "name": name, "size": len(body),
                             "state": "uploaded",
                             "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(
                                 1_700_000_000 + state.next_asset)),
                             "browser_download_url":
                             f"{base[0]}/o/r/releases/download/{tag}/{name}"}
                    assets.append(asset)
                    state.blobs[(rid, name)] = body
                    return self._send(201, asset)
                return self._send(404, {"message": "Not Found"})

        def _site(self, rel):
            # the deployed site, as Pages serves it: a folder's index.html
            root = state.site_dir.resolve() if state.site_dir else None
            target = (root / unquote(rel)).resolve() if root else None
            if target and target.is_dir():
                target = target / "index.html"
            if not (target and target.is_file() and target.is_relative_to(root)):
                return self._send(404, {"message": "Not Found"})
            # with its type, as Pages sends it: pip skips an index page of no known type
            kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
            return self._bytes(target.read_bytes(),
                               kind + ("; charset=utf-8" if kind.startswith("text/") else ""))

        do_GET = do_POST = do_PATCH = do_DELETE = _any
    return H


@pytest.fixture
def github():
    """Start stand-ins: ``github(**StandIn options)`` -> (state, base URL); all stop after the test."""
    made = []

    def start(**kw):
        state, base, server = serve(**kw)
        made.append(server)
        return state, base
    yield start
    for server in made:
        server.shutdown()
        server.server_close()


def serve(**kw) -> tuple[StandIn, str, ThreadingHTTPServer]:
    """A stand-in serving on 127.0.0.1 in a daemon thread: (state, base URL, server to stop)."""
    state, base = StandIn(**kw), [""]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state, base))
    base[0] = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return state, base[0], server
