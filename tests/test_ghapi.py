"""tools.releasing.ghapi and publish: every call paced and backed off by the limits file, against
a stand-in of GitHub's release API on 127.0.0.1 that enforces the documented limits (assets per
release, rate limits answered with 403/429 and retry-after, a server error). It is a stand-in: it
keeps the API's shapes and limits, not GitHub's storage."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from tools.plan.limits import load_limits
from tools.releasing.ghapi import Api, ApiError
from tools.releasing.publish import releases_to_index, upload_release


class StandIn:
    """GitHub's release API for one repository, in memory, with its limits."""

    def __init__(self, assets_limit=1000, rate_limit_every=0, fail_once=()):
        self.releases: list[dict] = []
        self.assets: dict[int, list[dict]] = {}
        self.assets_limit = assets_limit
        self.rate_limit_every = rate_limit_every
        self.fail_once = set(fail_once)
        self.content = 0
        self.log: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()


def _handler(state: StandIn, base: list[str]):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code, body=None, headers=None):
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            state.log.append((self.command, self.path, code))

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
                if self.command != "GET":
                    state.content += 1
                    if state.rate_limit_every and state.content % state.rate_limit_every == 0:
                        return self._send(403, {"message": "You have exceeded a secondary rate "
                                                           "limit"}, {"Retry-After": "2"})
                m = re.fullmatch(r"/repos/o/r/releases/tags/(.+)", path)
                if m:
                    found = [r for r in state.releases if r["tag_name"] == m.group(1)
                             and not r["draft"]]
                    return self._send(200, found[0]) if found else self._send(404, {})
                if path == "/repos/o/r/releases" and self.command == "GET":
                    return self._send(200, self._page(state.releases[::-1]))
                if path == "/repos/o/r/releases" and self.command == "POST":
                    got = json.loads(body)
                    rid = len(state.releases) + 1
                    rel = {"id": rid, "tag_name": got["tag_name"], "draft": got["draft"],
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
                    asset = {"id": len(assets) + 1000, "name": name, "size": len(body),
                             "state": "uploaded"}
                    assets.append(asset)
                    return self._send(201, asset)
                return self._send(404, {"message": "Not Found"})

        do_GET = do_POST = do_PATCH = do_DELETE = _any
    return H


@pytest.fixture
def github():
    made = []

    def start(**kw):
        state, base = StandIn(**kw), [""]
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state, base))
        base[0] = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        made.append(server)
        return state, base[0]
    yield start
    for server in made:
        server.shutdown()
        server.server_close()


class Clock:
    """An injected clock: sleeping moves it on at once, and every wait is recorded."""

    def __init__(self):
        self.now, self.waits = 1000.0, []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.waits.append(s)
        self.now += s


def _api(base, clock, **limits):
    lim = replace(load_limits(), **limits)
    return Api(base, "token", lim, backoff_s=1, backoff_max_s=8, attempts=4, clock=clock,
               sleep=clock.sleep, say=lambda _: None)


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
