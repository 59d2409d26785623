"""Serve a built index on 127.0.0.1, with the PEP 691 content negotiation static hosting lacks.

    python -m tools.serve --site build/site --wheels dist --port 8000 [--log requests.log]

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
bounds each later read or write of the connection, and ``--response-timeout`` (RESPONSE_TIMEOUT)
the whole of one response: a client reading slower is cut off. A path with a NUL byte (``%00``)
is a 400; a request line over 65,536 bytes a 414 (http.server's limit). A path the file system
refuses is answered, never dropped: 404 (not there, a name too long), 403 (not readable), 500.

Every file is sent with an ETag and a Last-Modified (tools.sitegen.httpfile), and
``If-None-Match`` / ``If-Modified-Since`` get a 304; pages (HTML, JSON, CSS) are gzipped for a
client that accepts it (``Vary: Accept-Encoding``); one ``Range`` gets a 206 (several: the whole
file; nothing inside the file: a 416). ``--host`` is an IPv4 or IPv6 address; the command refuses,
with a message and a non-zero exit, a port outside 0-65535, a port in use, a ``--log`` that is no
regular file and a number of seconds that isn't finite and above 0.
"""

from __future__ import annotations

import errno
import io
import ipaddress
import math
import os
import posixpath
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from stat import S_ISDIR, S_ISREG
from typing import Any, TextIO
from urllib.parse import parse_qs, unquote, urlsplit

from tools.core.errors import CuwheelsError
from . import httpfile

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
#: Seconds one response may take to send, however slowly the client reads: a 1 GB wheel takes
#: seconds on 127.0.0.1; a client reading slower than this is cut off.
RESPONSE_TIMEOUT = 600.0
#: Content types sent gzipped to a client that accepts it: the pages (a wheel is a zip already).
_COMPRESSIBLE = frozenset({TEXT_HTML, HTML_V1, JSON_V1, "application/json", "text/css"})
#: Bytes read from a file and written to the client at a time.
_CHUNK = 1 << 16


def parse_accept(header: str) -> list[tuple[str, float]]:
    """``Accept`` as ``[(media range, q)]``, PyPI's ``latest`` aliases resolved to v1."""
    return [(_ALIASES.get(media, media), q) for media, q in httpfile.weighted(header)]


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
        # An error http.server answers itself (a malformed request) is bounded like any response.
        self._deadline = self._head.deadline + self.server.response_timeout
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

    def end_headers(self) -> None:
        """Send the headers, within what is left of the response's time."""
        self._bound_write()
        super().end_headers()

    def _bound_write(self) -> None:
        # Each write waits at most the idle limit, and never past the response's deadline: a
        # client that reads slowly is cut off once the response has taken RESPONSE_TIMEOUT.
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the response took longer than {self.server.response_timeout:g} s")
        self.connection.settimeout(min(self._head.idle, left))

    def _serve(self, *, head: bool) -> None:
        self._deadline = time.monotonic() + self.server.response_timeout
        try:
            self._answer(head)
        except _Refused as refused:
            self._error(refused.status, refused.detail, refused.headers)

    def _answer(self, head: bool) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        if "\x00" in path:
            # No file name holds one, and the file system calls below would raise a ValueError for it.
            raise _Refused(HTTPStatus.BAD_REQUEST, "the path holds a NUL byte (%00)")
        if path.startswith(FILES_PREFIX):
            root, rel = self.server.files_dir, path[len(FILES_PREFIX):]
            listable = False
        else:
            root, rel = self.server.site_dir, path.lstrip("/")
            listable = True
        target = _inside(root, rel)
        st = _stat(target) if target is not None else None
        if st is None or (not listable and not S_ISREG(st.st_mode)):
            raise _Refused(HTTPStatus.NOT_FOUND)
        ctype, vary = None, []
        if S_ISDIR(st.st_mode):
            if not url.path.endswith("/"):
                # PEP 503: pages live at URLs with a trailing slash.
                location = url.path + "/" + (f"?{url.query}" if url.query else "")
                self.send_response(HTTPStatus.MOVED_PERMANENTLY)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            html, js = target / "index.html", target / "index.json"
            html_st, js_st = _stat(html, regular=True), _stat(js, regular=True)
            if html_st and js_st and self.server.negotiate:
                vary.append("Accept")
                # "+" stays a plus: a content type has no spaces, and ?format=...v1+json is how people type it.
                query = parse_qs(url.query.replace("+", "%2B"))
                wanted = query.get("format", [None])[0] or self.headers.get("Accept")
                ctype = negotiate(wanted)
                if ctype is None:
                    raise _Refused(HTTPStatus.NOT_ACCEPTABLE, f"serves {TEXT_HTML}, {HTML_V1}, {JSON_V1}")
                target, st = (js, js_st) if ctype == JSON_V1 else (html, html_st)
            elif html_st:
                target, st, ctype = html, html_st, TEXT_HTML
            else:
                raise _Refused(HTTPStatus.NOT_FOUND)
        elif not S_ISREG(st.st_mode):
            raise _Refused(HTTPStatus.NOT_FOUND)
        self._send_file(target, st, ctype or _content_type(target), vary, head)

    def _send_file(self, target: Path, st: os.stat_result, ctype: str, vary: list[str], head: bool) -> None:
        """A file's answer: 304 when the client's copy is current, the page gzipped when the
        client accepts it, one byte range (206) when asked for, else the whole file."""
        validators = httpfile.Validators.of(st)
        body, encoding = None, None
        if ctype in _COMPRESSIBLE:
            vary.append("Accept-Encoding")
            if httpfile.accepts_gzip(self.headers.get("Accept-Encoding")):
                body = _read(lambda: httpfile.gzipped(str(target), st.st_size, st.st_mtime_ns))
                encoding = "gzip" if body is not None else None
        etag = validators.encoded(encoding)
        common = [("ETag", etag), ("Last-Modified", validators.last_modified)]
        if vary:
            common.append(("Vary", ", ".join(vary)))
        if httpfile.not_modified(self.headers.get("If-None-Match"), self.headers.get("If-Modified-Since"),
                                 etag, validators.mtime):
            self._send_head(HTTPStatus.NOT_MODIFIED, common)
            return
        common.append(("Content-Type", ctype + ("; charset=utf-8" if ctype == TEXT_HTML else "")))
        if body is not None:
            self._send_head(HTTPStatus.OK, [*common, ("Content-Encoding", "gzip"), ("Content-Length", str(len(body)))])
            if not head:
                self._write(body)
            return
        span = None
        if httpfile.if_range_holds(self.headers.get("If-Range"), validators):
            try:
                span = httpfile.byte_range(self.headers.get("Range"), st.st_size)
            except httpfile.Unsatisfiable as exc:
                raise _Refused(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, str(exc),
                               [("Content-Range", f"bytes */{st.st_size}")]) from None
        f = _read(lambda: open(target, "rb"))
        with f:
            first, last = span or (0, st.st_size - 1)
            headers = [*common, ("Accept-Ranges", "bytes"), ("Content-Length", str(last - first + 1))]
            if span is None:
                self._send_head(HTTPStatus.OK, headers)
            else:
                self._send_head(HTTPStatus.PARTIAL_CONTENT,
                                [*headers, ("Content-Range", f"bytes {first}-{last}/{st.st_size}")])
            if not head:
                f.seek(first)
                left = last - first + 1
                while left > 0:
                    chunk = f.read(min(left, _CHUNK))
                    if not chunk:  # the file shrank while being sent: the client sees a short body
                        self.close_connection = True
                        break
                    self._write(chunk)
                    left -= len(chunk)

    def _send_head(self, status: HTTPStatus, headers: list[tuple[str, str]]) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()

    def _write(self, data: bytes) -> None:
        self._bound_write()
        self.wfile.write(data)

    def _error(self, status: HTTPStatus, detail: str = "", headers: Sequence[tuple[str, str]] = ()) -> None:
        body = f"{status.value} {status.phrase}{': ' + detail if detail else ''}\n".encode()
        self._send_head(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))),
                                 *headers])
        if self.command != "HEAD":
            self._write(body)

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
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop, before Python 3.13
        return None
    if resolved != root and root not in resolved.parents:
        return None
    return target


class _Refused(Exception):
    """A request answered with an error status: the status, a detail for its body, headers."""

    def __init__(self, status: HTTPStatus, detail: str = "", headers: Sequence[tuple[str, str]] = ()):
        super().__init__(status, detail)
        self.status, self.detail, self.headers = status, detail, headers


#: What the file system says about a path, as the status the client gets.
_NOT_THERE = {errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP}
_FORBIDDEN = {errno.EACCES, errno.EPERM}


def _refusal(exc: OSError) -> _Refused:
    """The answer to a path the file system refused: 404 (not there, a name too long), 403 (not
    readable by the server) or 500 (anything else, named in the body)."""
    if exc.errno in _NOT_THERE:
        return _Refused(HTTPStatus.NOT_FOUND)
    if exc.errno in _FORBIDDEN:
        return _Refused(HTTPStatus.FORBIDDEN, "the server may not read this path")
    reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
    return _Refused(HTTPStatus.INTERNAL_SERVER_ERROR, f"the file could not be read ({reason})")


def _stat(path: Path, *, regular: bool = False) -> os.stat_result | None:
    """``path``'s stat (following links); None when nothing is there (or, with ``regular``,
    no regular file); a path the file system refuses is a _Refused."""
    try:
        st = path.stat()
    except OSError as exc:
        if exc.errno in _NOT_THERE:
            return None
        raise _refusal(exc) from None
    return st if not regular or S_ISREG(st.st_mode) else None


def _read(opener: Callable[[], Any]) -> Any:
    """``opener()``, an OSError of it answered as _refusal says."""
    try:
        return opener()
    except OSError as exc:
        raise _refusal(exc) from None


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
    """A threading HTTP server carrying the handler's configuration (IPv4 or IPv6, by its address)."""

    daemon_threads = True

    def __init__(self, address, *, site_dir: Path, files_dir: Path | None, negotiate: bool,
                 log_path: Path | None, quiet: bool, request_timeout: float = REQUEST_TIMEOUT,
                 response_timeout: float = RESPONSE_TIMEOUT):
        self.site_dir = Path(site_dir).resolve()
        self.request_timeout, self.response_timeout = request_timeout, response_timeout
        # Without --wheels, /files/ serves an empty place rather than the site.
        self.files_dir = Path(files_dir).resolve() if files_dir is not None else self.site_dir / ".no-files"
        self.negotiate = negotiate
        self.quiet = quiet
        self.log_lock = threading.Lock()
        if ipaddress.ip_address(address[0]).version == 6:
            self.address_family = socket.AF_INET6
        self.request_log = open_request_log(log_path) if log_path else None
        try:
            super().__init__(address, IndexHandler)
        except BaseException:
            if self.request_log is not None:
                self.request_log.close()
            raise

    def server_close(self) -> None:
        """Close the socket and the request log."""
        super().server_close()
        if self.request_log is not None:
            self.request_log.close()

    def handle_error(self, request, client_address) -> None:
        """One line on stderr for a connection that failed (a client gone mid-answer, a reset),
        not socketserver's traceback."""
        exc = sys.exc_info()[1]
        if not self.quiet:
            print(f"{client_address[0]}: connection ended: {type(exc).__name__}: {exc}", file=sys.stderr)

    @property
    def url(self) -> str:
        """``http://host:port`` the server listens on (the real port when 0 was asked for)."""
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def open_request_log(path: Path) -> TextIO:
    """The request log at ``path``, opened to append: a regular file (created when missing);
    a FIFO, device or folder is refused, without ever waiting for a reader."""
    hint = "--log names a regular file, appended to (created when missing)"
    try:
        # O_NONBLOCK: opening a FIFO nobody reads fails at once (ENXIO) instead of waiting.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise CuwheelsError(f"request log {path}: {exc.strerror}", hint=hint) from None
    if not S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CuwheelsError(f"request log {path} is not a regular file", hint=hint)
    os.set_blocking(fd, True)
    return open(fd, "a", encoding="utf-8")


def check_seconds(value: float, what: str) -> float:
    """``value`` if it is a finite number of seconds above 0, else a CuwheelsError naming ``what``."""
    if not 0 < value < math.inf:
        raise CuwheelsError(f"{what} {value!r}: must be a positive number of seconds")
    return value


def check_address(host: str, port: int) -> None:
    """Refuse a host that is no IP address, or a port outside 0-65535, naming the fix."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise CuwheelsError(f"host {host!r} is not an IP address",
                            hint="127.0.0.1 (this machine), ::1 (IPv6), 0.0.0.0 or :: (every interface)") from None
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise CuwheelsError(f"port {port!r} is outside 0-65535", hint="0 picks a free port")


_BIND_ERRORS = {
    errno.EADDRINUSE: ("port {port} on {host} is already in use",
                       "stop what listens there, or pick another --port (0: any free port)"),
    errno.EADDRNOTAVAIL: ("{host} is not an address of this machine", "127.0.0.1 or ::1 serve this machine"),
    errno.EACCES: ("port {port} needs privileges this user lacks", "use a port above 1023, or 0"),
    errno.EAFNOSUPPORT: ("{host}: this machine has no IPv6", "use 127.0.0.1"),
}


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
    response_timeout: float = RESPONSE_TIMEOUT,
) -> IndexServer:
    """A server for ``site_dir`` (at ``/``) and ``files_dir`` (at ``/files/``), not yet serving.

    ``host`` is an IPv4 or IPv6 address; port 0 picks a free port (see ``.url``); an address
    that can't be listened on (a port in use) is a CuwheelsError saying so. Run it with
    ``serve_forever()`` and stop it with ``shutdown()`` + ``server_close()``. ``request_timeout``:
    seconds a client has to send a request's line and headers (and the most one read or write of
    a connection waits); ``response_timeout``: the most seconds one response may take to send.
    """
    check_seconds(request_timeout, "request timeout")
    check_seconds(response_timeout, "response timeout")
    check_address(host, port)
    if not Path(site_dir).is_dir():
        raise CuwheelsError(f"site directory {site_dir} does not exist", hint="run `make index` first")
    if files_dir is not None and not Path(files_dir).is_dir():
        raise CuwheelsError(f"files directory {files_dir} does not exist")
    try:
        return IndexServer((host, port), site_dir=site_dir, files_dir=files_dir, negotiate=negotiate,
                           log_path=log_path, quiet=quiet, request_timeout=request_timeout,
                           response_timeout=response_timeout)
    except OSError as exc:
        message, hint = _BIND_ERRORS.get(exc.errno, ("cannot listen on {host} port {port}: " + str(exc.strerror),
                                                      "pick another --host or --port"))
        raise CuwheelsError(message.format(host=host, port=port), hint=hint) from None


def serve(server: IndexServer, *, exit_after: float | None = None) -> None:
    """Serve until stopped (Ctrl-C, or ``exit_after`` seconds: a finite number above 0; None
    or 0: never), then close the server and its request log."""
    if exit_after:
        try:
            check_seconds(exit_after, "exit after")
        except CuwheelsError:
            server.server_close()
            raise
        timer = threading.Timer(exit_after, server.shutdown)
        timer.daemon = True
        timer.start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
