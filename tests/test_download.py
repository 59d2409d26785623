"""tools.core.httpclient (download): one origin, a size cap and a total deadline, against a server on
127.0.0.1 (the hostile-input suite runs the same through the source step and the registry)."""

from __future__ import annotations

import io
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tools.core.httpclient import check_url, download, origin, shown
from tools.core.errors import SourceError

BODY = b"0123456789" * 1000


class Handler(BaseHTTPRequestHandler):
    """``/body`` answers BODY, ``/same`` redirects to it, ``/away`` to another origin,
    ``/slow`` sends a byte every 20 ms; every path asked is recorded."""

    asked: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's naming
        """Answer the path."""
        self.asked.append(self.path)
        port = self.server.server_address[1]
        if self.path == "/body":
            self._send(200, {"Content-Length": str(len(BODY))}, BODY)
        elif self.path == "/same":
            self._send(302, {"Location": "/body", "Content-Length": "0"})
        elif self.path == "/away":
            self._send(302, {"Location": f"http://localhost:{port}/body", "Content-Length": "0"})
        elif self.path == "/slow":
            self._send(200, {"Content-Length": "100000"})
            try:
                for _ in range(500):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.02)
            except (BrokenPipeError, ConnectionResetError):
                pass
        else:
            self._send(404, {"Content-Length": "0"})

    def _send(self, status, headers, body=b""):
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        """Quiet."""


@pytest.fixture(scope="module")
def base():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def fetch(url: str, base: str, **kwargs) -> bytes:
    sink = io.BytesIO()
    options = {"origins": (base,), "error": SourceError, "max_bytes": 1 << 20, "deadline": 10.0,
               **kwargs}
    assert download(url, sink, **options) == len(sink.getvalue())
    return sink.getvalue()


@pytest.mark.parametrize("url,expect", [
    ("https://files.pythonhosted.org/packages/x.tar.gz", "https://files.pythonhosted.org"),
    ("HTTPS://Files.PythonHosted.org:443/x", "https://files.pythonhosted.org"),  # default port
    ("http://127.0.0.1:8443/x", "http://127.0.0.1:8443"),
    ("http://[::1]:80/x", "http://[::1]"),
    ("file:///dev/zero", "file://"),
])
def test_origin(url, expect):
    assert origin(url) == expect


@pytest.mark.parametrize("url,message", [
    # the host after '@' is the one asked
    ("https://files.pythonhosted.org@127.0.0.1:8443/x.tar.gz", "a user name or password"),
    ("https://user:pw@files.pythonhosted.org/x.tar.gz", "a user name or password"),
    ("https://files.pythonhosted.org.evil.example/x.tar.gz",
     "https://files.pythonhosted.org.evil.example is not https://files.pythonhosted.org"),
    ("http://files.pythonhosted.org/x.tar.gz", "http://files.pythonhosted.org is not"),
    ("https://files.pythonhosted.org:8443/x.tar.gz", "https://files.pythonhosted.org:8443 is not"),
    ("https://files.pythonhosted.org:x/x.tar.gz", "not a URL with a host and port"),
    ("https://[files.pythonhosted.org/x.tar.gz", "not a URL with a host and port"),
    ("https://files.pythonhosted.org/x.tar.gz\r\nHost: evil", "spaces or control characters"),
    ("file:///dev/zero", "file:// is not"),
])
def test_check_url_refuses_every_other_place(url, message):
    check_url("https://files.pythonhosted.org/ok.tar.gz", ["https://files.pythonhosted.org"],
              SourceError)
    with pytest.raises(SourceError) as info:
        check_url(url, ["https://files.pythonhosted.org"], SourceError)
    assert message in str(info.value)


def test_a_body_within_the_bounds_arrives_whole(base):
    assert fetch(f"{base}/body", base) == BODY


def test_a_redirect_is_followed_on_the_same_origin_only(base):
    assert fetch(f"{base}/same", base) == BODY
    asked = len(Handler.asked)
    with pytest.raises(SourceError, match=r"http://localhost:\d+ is not http://127.0.0.1"):
        fetch(f"{base}/away", base)
    assert Handler.asked[asked:] == ["/away"]  # the other origin was never asked


def test_a_body_past_the_cap_is_refused(base):
    with pytest.raises(SourceError, match=f"larger than {len(BODY) - 1} bytes"):
        fetch(f"{base}/body", base, max_bytes=len(BODY) - 1)


def test_the_deadline_is_for_the_whole_download_not_per_read(base):
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"did not finish within 1 s \(\d+ bytes arrived\)"):
        fetch(f"{base}/slow", base, deadline=1.0, timeout=30)
    assert time.monotonic() - started < 4  # each byte came well within the 30 s per read


def test_a_refused_url_is_never_asked(base):
    asked = len(Handler.asked)
    port = base.rsplit(":", 1)[1]
    with pytest.raises(SourceError, match="a user name or password"):
        fetch(f"http://127.0.0.1:{port}@localhost:{port}/body", base)
    assert len(Handler.asked) == asked


def test_a_failed_request_names_the_url_and_the_callers_hint(base):
    with pytest.raises(SourceError, match=r"reading http://127.0.0.1:\d+/missing failed: HTTP "
                                          r"Error 404") as info:
        fetch(f"{base}/missing", base, hint="pass --sdist PATH")
    assert info.value.hint == "pass --sdist PATH"


def test_shown_cuts_a_long_url():
    assert shown("https://h/x") == "https://h/x"
    assert shown("https://h/" + "x" * 500).endswith("... (310 more characters)")
