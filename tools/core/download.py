"""Bounded downloads: one origin, a size cap and a total deadline.

What the source step (an sdist) and the registry client (PyPI's answers, an sdist) read from the
network comes through :func:`download`, so that neither a hostile answer nor a hostile URL reaches
further than the caller meant:

- the URL's origin (scheme, host and port) must be exactly one the caller names, and a URL that
  carries a user name or password is refused outright: ``https://pypi.org@127.0.0.1:8443/`` is a
  request to 127.0.0.1, whatever its first characters say;
- a redirect is followed only to one of those origins;
- a body larger than ``max_bytes`` is refused while it arrives, whatever Content-Length says;
- the whole request ends at ``deadline`` seconds, headers included: a server that sends a byte a
  second never trips a per-read timeout, so a watchdog shuts the connection down instead.

Only the standard library is used: this package ships whole inside the selector's zipapp.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from typing import BinaryIO

from .errors import CuwheelsError

#: PyPI's file host: where every sdist a recipe names, and every file PyPI's JSON API lists, lives.
PYPI_FILES = "https://files.pythonhosted.org"
#: Bytes asked for per read: one read never waits for more than the server has sent.
CHUNK = 1 << 20
#: A URL longer than this is shown cut in messages.
_SHOWN = 200

_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, lowercased, with the scheme's default port left out
    (ValueError for a port that is not a number)."""
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    netloc = host if port in (None, _DEFAULT_PORTS.get(parts.scheme.lower())) else f"{host}:{port}"
    return f"{parts.scheme.lower()}://{netloc}"


def shown(url: str) -> str:
    """``url`` as a message shows it: cut to a readable length."""
    return url if len(url) <= _SHOWN else f"{url[:_SHOWN]}... ({len(url) - _SHOWN} more characters)"


def check_url(url: str, origins: Iterable[str], error: type[CuwheelsError]) -> None:
    """Raise ``error`` unless ``url`` is on exactly one of ``origins`` (``https://host[:port]``)
    and names no user or password."""
    allowed = sorted({origin(o) for o in origins})
    expected = " or ".join(allowed)
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise error(f"{shown(url)!r}: a URL with spaces or control characters is refused",
                    hint=f"the file must be on {expected}")
    try:
        parts = urllib.parse.urlsplit(url)
        here = origin(url)
    except ValueError as exc:  # a port that is no number, a bracketed host that is no address
        raise error(f"{shown(url)}: not a URL with a host and port ({exc})",
                    hint=f"the file must be on {expected}") from None
    if "@" in parts.netloc:
        raise error(f"{shown(url)}: a URL with a user name or password (the part before '@') is "
                    f"refused: the request would go to {parts.hostname!r}, not to the host it "
                    "starts with", hint=f"the file must be on {expected}, with nothing before the "
                                        "host name")
    if here not in allowed:
        raise error(f"{shown(url)}: {here} is not {expected}",
                    hint=f"only files on {expected} are downloaded here")


class _Watchdog:
    """Shuts the sockets of one download down when its deadline passes."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def watch(self, sock: socket.socket) -> socket.socket:
        """Register ``sock`` (shut down at once when the deadline already passed)."""
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)
        return sock

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: nothing left to stop


def _opener(allowed: list[str], watch: _Watchdog,
            error: type[CuwheelsError]) -> urllib.request.OpenerDirector:
    """urllib's opener with connections the watchdog can stop and redirects kept on ``allowed``."""

    def connect(*args, **kwargs) -> socket.socket:
        return watch.watch(socket.create_connection(*args, **kwargs))

    class Http(http.client.HTTPConnection):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._create_connection = connect

    class Https(http.client.HTTPSConnection):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._create_connection = connect

    class HttpHandler(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(Http, req)

    class HttpsHandler(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(Https, req, context=self._context)

    class Redirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req, fp, code, msg, headers, newurl):
            check_url(urllib.parse.urljoin(req.full_url, newurl), allowed, error)
            return super().redirect_request(req, fp, code, msg, headers, newurl)

    return urllib.request.build_opener(HttpHandler, HttpsHandler, Redirects)


def download(url: str, sink: BinaryIO, *, origins: Iterable[str], error: type[CuwheelsError],
             max_bytes: int, deadline: float, timeout: float = 60, hint: str | None = None,
             user_agent: str | None = None) -> int:
    """Write the body at ``url`` to ``sink`` and return its length.

    ``error`` is raised (``hint`` as its fix when the network failed) when the URL is not on one
    of ``origins``, a redirect leaves them, the body passes ``max_bytes``, the whole request takes
    more than ``deadline`` seconds, or the request fails. No single read waits longer than
    ``timeout`` seconds.
    """
    allowed = sorted({origin(o) for o in origins})
    check_url(url, allowed, error)
    headers = {"User-Agent": user_agent} if user_agent else {}
    request = urllib.request.Request(url, headers=headers)
    too_big = (f"{shown(url)}: the answer is larger than {max_bytes} bytes, the most this "
               "download takes", "a file this large is not what was asked for; check the URL")
    started = time.monotonic()
    got = 0

    def late() -> CuwheelsError:
        return error(f"{shown(url)}: the download did not finish within {deadline:g} s ({got} "
                     "bytes arrived)", hint="the server is too slow or stalls; run again later")

    try:
        with _Watchdog(deadline) as watch, _opener(allowed, watch, error).open(
                request, timeout=min(timeout, deadline)) as resp:
            declared = resp.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise error(too_big[0], hint=too_big[1])
            read = getattr(resp, "read1", resp.read)
            while chunk := read(CHUNK):
                got += len(chunk)
                if got > max_bytes:
                    raise error(too_big[0], hint=too_big[1])
                if watch.expired:
                    raise late()
                sink.write(chunk)
            if watch.expired:  # the watchdog's shutdown reads as the end of the body
                raise late()
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        if time.monotonic() - started >= deadline:
            raise late() from None
        raise error(f"reading {shown(url)} failed: {exc}", hint=hint) from None
    return got
