"""Serve a built index on 127.0.0.1, with the PEP 691 content negotiation static hosting lacks.

    python -m tools.serve --site build/site --files dist --port 8000 [--log requests.log]

(the command is tools/serve.py; this module is the server: make_server, serve).

The site (tools.index output) is served at ``/``; the wheels directory at ``/files/``, so a site
built with ``--base-url /files`` (or ``http://127.0.0.1:8000/files``) works end to end. For a
directory holding both ``index.html`` and ``index.json`` the ``Accept`` header decides (PEP 691):
``application/vnd.pypi.simple.v1+json`` (or ``...latest+json``) gets the JSON, ``text/html`` and
``application/vnd.pypi.simple.v1+html`` the HTML, ties go to HTML, nothing acceptable is a 406;
``?format=<content type>`` overrides the header, as on PyPI. ``--no-negotiate`` always answers
HTML, like a static host. ``--log FILE`` appends ``METHOD PATH STATUS`` per request (tests read it
to see which wheels were downloaded; characters a terminal would act on are escaped, and a request
refused before its path was read logs ``-`` for it); ``--exit-after SECONDS`` stops the server by
itself.

A client has ``--request-timeout`` seconds (REQUEST_TIMEOUT) to send a request line and its
headers, counted from the first read, not per read: a request sent half, or a byte at a time,
is answered by closing the connection instead of holding its thread. The same number of seconds
bounds each later read or write of the connection. A path with a NUL byte (``%00``) is a 400; a
request line over 65,536 bytes a 414 (http.server's limit).
"""

from __future__ import annotations

import io
import posixpath
import shutil
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from tools.core.errors import CuwheelsError

JSON_V1 = "application/vnd.pypi.simple.v1+json"
HTML_V1 = "application/vnd.pypi.simple.v1+html"
TEXT_HTML = "text/html"
#: Server preference, used to break ties in q-value: HTML first, for browsers, curl and old clients.
_OFFERS = (TEXT_HTML, HTML_V1, JSON_V1)
_ALIASES = {
    "application/vnd.pypi.simple.latest+json": JSON_V1,
    "application/vnd.pypi.simple.latest+html": HTML_V1,
}
FILES_PREFIX = "/files/"
#: Seconds a client has to send a request line and headers (and the most one read or write waits).
REQUEST_TIMEOUT = 30.0


def parse_accept(header: str) -> list[tuple[str, float]]:
    """``Accept`` as ``[(media range, q)]``, PyPI's ``latest`` aliases resolved to v1."""
    ranges = []
    for part in header.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        if not media:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        media = media.lower()
        ranges.append((_ALIASES.get(media, media), q))
    return ranges


def negotiate(accept: str | None) -> str | None:
    """The content type to answer with for an ``Accept`` header (None: nothing acceptable)."""
    if not accept:
        return TEXT_HTML
    ranges = parse_accept(accept)
    best, best_q = None, 0.0
    for offer in _OFFERS:
        major = offer.split("/")[0]
        # The most specific matching range sets the q-value (RFC 9110, 12.5.1).
        q = None
        for pattern in (offer, f"{major}/*", "*/*"):
            matches = [rq for media, rq in ranges if media == pattern]
            if matches:
                q = max(matches)
                break
        if q is not None and q > best_q:
            best, best_q = offer, q
    return best


class _HeadReader(io.RawIOBase):
    """A connection's reads, each allowed only what is left of the time to send a request head
    (``deadline``, a ``time.monotonic()``), or ``idle`` seconds once the head is in (None)."""

    def __init__(self, sock: socket.socket, idle: float):
        super().__init__()
        self.sock, self.idle = sock, idle
        self.deadline: float | None = None

    def readable(self) -> bool:
        """Always: it is the connection's reading side."""
        return True

    def readinto(self, buffer) -> int:
        """Read what the client sent into ``buffer``; TimeoutError once the head's time is up."""
        wait = self.idle
        if self.deadline is not None:
            wait = min(wait, self.deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError("the request line and headers took too long")
        self.sock.settimeout(wait)
        return self.sock.recv_into(buffer)


class IndexHandler(BaseHTTPRequestHandler):
    """Serves the site and the wheel files; configured through the server's attributes."""

    server_version = "cuwheels-serve"

    def setup(self) -> None:
        """The connection, read through a _HeadReader (what puts a time limit on a request head)."""
        super().setup()
        self.rfile.close()  # http.server's own reader, never used: the one below replaces it
        self._head = _HeadReader(self.connection, self.server.request_timeout)
        self.rfile = io.BufferedReader(self._head)

    def handle_one_request(self) -> None:
        """One request, its head due within the server's request timeout."""
        # A request refused before its line is parsed must not log the previous request's path.
        self.command, self.path = None, None
        self._head.deadline = time.monotonic() + self.server.request_timeout
        super().handle_one_request()

    def parse_request(self) -> bool:
        """http.server's parsing (it reads the headers); the head's time limit ends with it."""
        try:
            return super().parse_request()
        finally:
            self._head.deadline = None
            # The answer's writes wait up to the idle limit, not what was left of the head's time.
            self.connection.settimeout(self._head.idle)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._serve(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(head=True)

    def _serve(self, *, head: bool) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        if "\x00" in path:
            # No file name holds one, and the file system calls below would raise a ValueError for it.
            self._error(HTTPStatus.BAD_REQUEST, "the path holds a NUL byte (%00)")
            return
        if path.startswith(FILES_PREFIX):
            root, rel = self.server.files_dir, path[len(FILES_PREFIX):]
            listable = False
        else:
            root, rel = self.server.site_dir, path.lstrip("/")
            listable = True
        target = _inside(root, rel)
        if target is None or (not listable and not target.is_file()):
            self._error(HTTPStatus.NOT_FOUND)
            return
        ctype, vary = None, False
        if target.is_dir():
            if not url.path.endswith("/"):
                # PEP 503: pages live at URLs with a trailing slash.
                location = url.path + "/" + (f"?{url.query}" if url.query else "")
                self.send_response(HTTPStatus.MOVED_PERMANENTLY)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            html, js = target / "index.html", target / "index.json"
            if js.is_file() and html.is_file() and self.server.negotiate:
                vary = True
                # "+" stays a plus: a content type has no spaces, and ?format=...v1+json is how people type it.
                query = parse_qs(url.query.replace("+", "%2B"))
                wanted = query.get("format", [None])[0] or self.headers.get("Accept")
                ctype = negotiate(wanted)
                if ctype is None:
                    self._error(HTTPStatus.NOT_ACCEPTABLE, f"serves {TEXT_HTML}, {HTML_V1}, {JSON_V1}")
                    return
                target = js if ctype == JSON_V1 else html
            elif html.is_file():
                target, ctype = html, TEXT_HTML
            else:
                self._error(HTTPStatus.NOT_FOUND)
                return
        elif not target.is_file():
            self._error(HTTPStatus.NOT_FOUND)
            return
        ctype = ctype or _content_type(target)
        try:
            f = open(target, "rb")
        except OSError:
            self._error(HTTPStatus.NOT_FOUND)
            return
        with f:
            size = f.seek(0, 2)
            f.seek(0)
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", ctype + ("; charset=utf-8" if ctype == TEXT_HTML else ""))
            self.send_header("Content-Length", str(size))
            if vary:
                self.send_header("Vary", "Accept")
            self.end_headers()
            if not head:
                shutil.copyfileobj(f, self.wfile)

    def _error(self, status: HTTPStatus, detail: str = "") -> None:
        body = f"{status.value} {status.phrase}{': ' + detail if detail else ''}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        code = getattr(code, "value", code)
        log = self.server.request_log
        if log is not None:
            line = f"{self.command or '-'} {self.path or '-'} {code}"
            if not line.isprintable():
                # The path is the client's: a line break or an escape sequence must not reach the log raw.
                line = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in line)
            with self.server.log_lock:
                log.write(line + "\n")
                log.flush()
        if not self.server.quiet:
            super().log_request(code, size)


def _inside(root: Path, rel: str) -> Path | None:
    """``root/rel`` if it stays inside ``root`` (no ``..``, no symlink out), else None."""
    normalized = posixpath.normpath("/" + rel).lstrip("/")
    target = (root / normalized) if normalized not in ("", ".") else root
    try:
        resolved = target.resolve()
    except OSError:
        return None
    if resolved != root and root not in resolved.parents:
        return None
    return target


def _content_type(path: Path) -> str:
    name = path.name
    if name.endswith(".html"):
        return TEXT_HTML
    if name == "index.json" and "simple" in path.parts:
        return JSON_V1
    if name.endswith(".json"):
        return "application/json"
    if name.endswith(".css"):
        return "text/css"
    if name.endswith(".png"):
        return "image/png"
    return "application/octet-stream"


class IndexServer(ThreadingHTTPServer):
    """A threading HTTP server carrying the handler's configuration."""

    daemon_threads = True

    def __init__(self, address, *, site_dir: Path, files_dir: Path | None, negotiate: bool,
                 log_path: Path | None, quiet: bool, request_timeout: float = REQUEST_TIMEOUT):
        self.site_dir = Path(site_dir).resolve()
        self.request_timeout = request_timeout
        # Without --files, /files/ serves an empty place rather than the site.
        self.files_dir = Path(files_dir).resolve() if files_dir is not None else self.site_dir / ".no-files"
        self.negotiate = negotiate
        self.quiet = quiet
        self.log_lock = threading.Lock()
        self.request_log = open(log_path, "a", encoding="utf-8") if log_path else None
        super().__init__(address, IndexHandler)

    def server_close(self) -> None:
        """Close the socket and the request log."""
        super().server_close()
        if self.request_log is not None:
            self.request_log.close()

    @property
    def url(self) -> str:
        """``http://host:port`` the server listens on (the real port when 0 was asked for)."""
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


def make_server(
    site_dir: Path,
    files_dir: Path | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    negotiate: bool = True,
    log_path: Path | None = None,
    quiet: bool = True,
    request_timeout: float = REQUEST_TIMEOUT,
) -> IndexServer:
    """A server for ``site_dir`` (at ``/``) and ``files_dir`` (at ``/files/``), not yet serving.

    Port 0 picks a free port (see ``.url``). Run it with ``serve_forever()`` and stop it with
    ``shutdown()`` + ``server_close()``. ``request_timeout``: seconds a client has to send a
    request's line and headers (and the most one read or write of a connection waits).
    """
    if not 0 < request_timeout < float("inf"):
        raise CuwheelsError(f"request timeout {request_timeout!r}: must be a positive number of seconds")
    if not Path(site_dir).is_dir():
        raise CuwheelsError(f"site directory {site_dir} does not exist", hint="run `make index` first")
    if files_dir is not None and not Path(files_dir).is_dir():
        raise CuwheelsError(f"files directory {files_dir} does not exist")
    return IndexServer((host, port), site_dir=site_dir, files_dir=files_dir, negotiate=negotiate,
                       log_path=log_path, quiet=quiet, request_timeout=request_timeout)


def serve(server: IndexServer, *, exit_after: float = 0) -> None:
    """Serve until stopped (Ctrl-C, or ``exit_after`` seconds when above 0), then close the
    server and its request log."""
    if exit_after > 0:
        timer = threading.Timer(exit_after, server.shutdown)
        timer.daemon = True
        timer.start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
