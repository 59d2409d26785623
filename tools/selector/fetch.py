"""What the selector reads, and the rules it reads by: the index is not trusted.

A site's pages name the URLs of its files, and an index that could name any URL could make the
selector read anything this machine reaches: a device (``file:///dev/zero`` never ends), a FIFO
(never answers), a service behind the firewall, or a server that sends one byte a second. So:

* only ``http`` and ``https`` URLs are read from the network, never one with a user name in it
  (``https://pypi.org@10.0.0.1/`` is a request to 10.0.0.1);
* only on the index's own host and port (the ``--index`` URL's, and ``--site-url``'s) or on a
  host the user allows (``--allow-host HOST[:PORT]``); a redirect anywhere else is refused, not
  followed, and its body is never read;
* every answer has a cap (:data:`PAGE_LIMIT` for a page, :data:`FACTS_LIMIT` for selector.json,
  :data:`PEEK_READ_LIMIT` for the parts of one wheel, :data:`MANIFEST_LIMIT` for its manifest);
* every request ends within ``timeout`` seconds from connecting to its last byte (not per read:
  at the limit the socket is shut down, whatever the server is doing), and all of them within
  ``deadline`` seconds of the first;
* a local site (a directory, INDEX_DIR) is read from regular files only: a FIFO, a device or a
  directory named as a page or a wheel is refused before it is opened for reading.

A refusal is an :class:`IndexReadError` (exit status 3) that names the URL or file, the rule and
what to do. A network failure stays an ``OSError`` (a timeout is a ``TimeoutError``): the caller
decides whether it is fatal (a page) or a note (a wheel read for its GPU archs).
"""

from __future__ import annotations

import http.client
import io
import os
import socket
import stat
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from tools.core.errors import CuwheelsError

USER_AGENT = "cuwheels-select/1"
#: The largest page read (a project page of a big site is a few megabytes).
PAGE_LIMIT = 16 << 20
#: The largest selector.json read (it is a few hundred bytes).
FACTS_LIMIT = 1 << 20
#: Wheels up to this size are read whole when the server ignores HTTP range requests.
PEEK_FULL_LIMIT = 16 << 20
#: The most bytes of one wheel read for its manifest: its directory and the manifest.
PEEK_READ_LIMIT = PEEK_FULL_LIMIT + (8 << 20)
#: The largest build manifest read (one is a few kilobytes), compressed or not.
MANIFEST_LIMIT = 1 << 20
#: Seconds for every request of one run together, unless told otherwise (``--deadline``).
DEFAULT_DEADLINE = 300.0
#: Redirects followed for one request.
MAX_REDIRECTS = 10

_DEFAULT_PORTS = {"http": 80, "https": 443}
#: The hint of an error that the index itself caused.
BROKEN_INDEX = "the index is broken or hostile: tell its owner, and don't install from it"


class IndexReadError(CuwheelsError):
    """The index can't be read: network, HTTP status, a page or manifest that is not what the
    selector reads, or a URL or answer it refuses (another host, another scheme, over a cap)."""

    exit_code = 3
    kind = "index"


def url_origin(url: str) -> tuple[str, int | None]:
    """``(host, port)`` of a URL, the port its scheme's default when it names none (None for a
    scheme without one). ValueError for a port that is not a number."""
    parts = urlsplit(url)
    port = parts.port
    return (parts.hostname or "").rstrip("."), port if port is not None else _DEFAULT_PORTS.get(parts.scheme.lower())


def origin(text: str) -> tuple[str, int | None]:
    """``(host, port)`` of an ``--allow-host`` value (``HOST``, ``HOST:PORT``, ``[IPv6]:PORT``, or
    a URL without a path); port None for any port. ValueError for text that names no host."""
    parts = urlsplit(text if "//" in text else f"//{text}")
    if parts.username is not None or parts.password is not None or parts.path not in ("", "/"):
        raise ValueError(f"{text!r} is not HOST or HOST:PORT")
    host, port = url_origin(parts.geturl())
    if not host:
        raise ValueError(f"{text!r} names no host")
    return host, port


def describe(value: Any) -> str:
    """A value from an untrusted document, short enough for a message: never the repr of a
    whole nested structure (building it is the cost, and may recurse without end)."""
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'} of {len(value)} items"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by its owner: nothing left to cut


class _Watch:
    """One request's time limit: when it is up, the request's sockets are shut down, which ends
    the read in progress (a timeout per ``recv`` would let one byte a second go on forever)."""

    def __init__(self, seconds: float, why: str):
        self.why = why
        self.fired = False
        self._twins: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True
        self._timer.start()

    def connect(self, *args: Any, **kwargs: Any) -> socket.socket:
        """``socket.create_connection``, the socket watched from the moment it exists (before a
        proxy tunnel or a TLS handshake, which read from it too)."""
        sock = socket.create_connection(*args, **kwargs)
        # A duplicate, ours to shut down: a TLS wrap detaches the connection's own socket object,
        # and a shutdown acts on the connection whichever descriptor names it.
        twin = sock.dup()
        with self._lock:
            self._twins.append(twin)
            fired = self.fired
        if fired:
            _shut(twin)
        return sock

    def _cut(self) -> None:
        with self._lock:
            self.fired = True
            twins = list(self._twins)
        for twin in twins:
            _shut(twin)

    def cancel(self) -> None:
        """The request is over: stop the timer and close the duplicates."""
        self._timer.cancel()
        with self._lock:
            twins, self._twins = self._twins, []
        for twin in twins:
            twin.close()


class _Answer:
    """An open response under its request's time limit (what RangeReader and Fetcher read)."""

    def __init__(self, response: Any, watch: _Watch):
        self._response, self._watch = response, watch

    @property
    def status(self) -> int:
        """The HTTP status."""
        return self._response.status

    @property
    def headers(self) -> Any:
        """The response headers."""
        return self._response.headers

    def read(self, amount: int | None = None) -> bytes:
        """Up to ``amount`` bytes of the body (all of it for None); TimeoutError when the
        request's time ran out, ConnectionError when the answer is not valid HTTP."""
        try:
            data = self._response.read(amount)
        except (OSError, http.client.HTTPException) as exc:
            raise _network_error(exc, self._watch) from None
        if self._watch.fired:
            raise TimeoutError(self._watch.why)
        return data

    def close(self) -> None:
        """Close the response and end its time limit."""
        self._watch.cancel()
        self._response.close()

    def __enter__(self) -> _Answer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _network_error(exc: OSError | http.client.HTTPException, watch: _Watch) -> OSError:
    """The OSError to raise for a failed request: a TimeoutError when its time ran out, a
    ConnectionError for an answer that is not HTTP (http.client's errors are not OSErrors)."""
    # The sockets' own timeout is the request's whole time: when it fires first, that time is up.
    if watch.fired or isinstance(getattr(exc, "reason", exc), socket.timeout):
        return TimeoutError(watch.why)
    if isinstance(exc, http.client.HTTPException):
        return ConnectionError(f"the answer is not valid HTTP ({type(exc).__name__}: {describe(str(exc))})")
    return exc


class _WatchedHandler:
    """Mixin for urllib's HTTP and HTTPS handlers: each connection opens its socket through the
    current request's watch."""

    fetcher: Fetcher

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        """urllib's ``do_open`` with connections whose sockets the request's watch can cut."""
        watch = self.fetcher.watch

        def connection(host: str, **kw: Any) -> Any:
            conn = http_class(host, **kw)
            # http.client opens every socket through this attribute (a proxy tunnel included).
            conn._create_connection = watch.connect
            return conn

        return super().do_open(connection, req, **kwargs)  # type: ignore[misc]


class _HTTPHandler(_WatchedHandler, urllib.request.HTTPHandler):
    def __init__(self, fetcher: Fetcher):
        super().__init__()
        self.fetcher = fetcher


class _RefusingRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to a URL the fetcher would read itself, without reading the
    redirect's body (urllib's own handler reads it whole, however long it is)."""

    def __init__(self, fetcher: Fetcher):
        super().__init__()
        self.fetcher = fetcher

    def http_error_302(self, req: Any, fp: Any, code: int, msg: str, headers: Any) -> Any:
        """Check the target, then follow it as a new request under the same time limit."""
        target = headers.get("Location") or headers.get("URI")
        fp.close()
        if not target:
            raise urllib.error.HTTPError(req.full_url, code, f"{msg} (a redirect without a Location)",
                                         headers, io.BytesIO())
        new_url = urljoin(req.full_url, target)
        self.fetcher.check(new_url, context=f"{req.full_url} redirects (HTTP {code}) to {new_url}")
        hops = getattr(req, "cuwheels_redirects", 0) + 1
        if hops > MAX_REDIRECTS:
            raise IndexReadError(f"{req.full_url}: more than {MAX_REDIRECTS} redirects",
                                 hint="the index's server redirects in a loop: tell its owner")
        new = self.redirect_request(req, fp, code, msg, headers, new_url)
        new.cuwheels_redirects = hops
        return self.parent.open(new, timeout=req.timeout)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


class Fetcher:
    """Reads URLs by the rules of the module docstring.

    ``hosts``: the origins that may be read (``(host, port)``; port None for any), the index's
    and the ones the user allowed. ``timeout``: seconds for one request, connect to last byte.
    ``deadline``: seconds for every request of the run together, counted from now.
    """

    #: The watch of the request in progress, set by :meth:`open` (the selector reads in sequence).
    watch: _Watch

    def __init__(self, hosts: Iterable[tuple[str, int | None]], *, timeout: float, deadline: float):
        self.hosts = [(host.lower(), port) for host, port in hosts]
        self.timeout = timeout
        self.deadline = deadline
        self._ends = time.monotonic() + deadline
        handlers: list[Any] = [urllib.request.ProxyHandler(), urllib.request.UnknownHandler(),
                               _HTTPHandler(self), _RefusingRedirects(self),
                               urllib.request.HTTPDefaultErrorHandler(), urllib.request.HTTPErrorProcessor()]
        if hasattr(urllib.request, "HTTPSHandler"):  # absent from a Python built without ssl
            handlers.append(_HTTPSHandler(self))
        # Not build_opener: it adds the file:, ftp: and data: handlers, which must never be used.
        self._opener = urllib.request.OpenerDirector()
        for handler in handlers:
            self._opener.add_handler(handler)

    def allows(self, url: str) -> bool:
        """Whether ``url`` is on a host this fetcher may read (scheme and user info aside)."""
        try:
            host, port = url_origin(url)
        except ValueError:
            return False
        return any(host == h and (p is None or p == port) for h, p in self.hosts)

    def check(self, url: str, *, context: str = "") -> None:
        """IndexReadError unless ``url`` is one this fetcher may read; ``context`` says where it
        came from (a redirect), else the URL itself is named."""
        where = context or url
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise IndexReadError(f"{where}: not a URL ({exc})", hint=BROKEN_INDEX) from None
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise IndexReadError(
                f"{where}: the selector reads only http:// and https:// URLs from an index, not "
                f"{scheme + ':' if scheme else 'a URL without a scheme'}",
                hint=BROKEN_INDEX)
        if "@" in parts.netloc:
            raise IndexReadError(
                f"{where}: a URL with a user name or password ({parts.netloc}) is refused: the "
                f"host it reads is {parts.hostname}, not what it seems",
                hint=BROKEN_INDEX)
        if not self.allows(url):
            try:
                host, port = url_origin(url)
            except ValueError:
                raise IndexReadError(f"{where}: the port in {parts.netloc} is not a port number (0 to 65535)",
                                     hint=BROKEN_INDEX) from None
            host = f"[{host}]" if ":" in host else host
            named = f"{host}:{port}" if port is not None else host
            allowed = ", ".join(f"{h}:{p}" if p is not None else h for h, p in self.hosts) or "none"
            raise IndexReadError(
                f"{where}: {named} is not the index's host (reads are allowed from: {allowed})",
                hint=f"if you trust {named}, pass --allow-host {named}")

    def open(self, request: urllib.request.Request) -> _Answer:
        """The open response to ``request`` (checked, redirects checked, under the time limit):
        what RangeReader calls for each range."""
        url = request.full_url
        self.check(url)
        left = self._ends - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"not read: the run's {self.deadline:g} s for reading the index are spent "
                               "(--deadline)")
        if left < self.timeout:
            seconds, why = left, f"the run's {self.deadline:g} s for reading the index ran out (--deadline)"
        else:
            seconds, why = self.timeout, f"no complete answer within {self.timeout:g} s (--timeout)"
        self.watch = watch = _Watch(seconds, why)
        try:
            response = self._opener.open(request, timeout=seconds)
        except urllib.error.HTTPError as exc:
            watch.cancel()
            exc.close()
            raise
        except (OSError, http.client.HTTPException) as exc:
            watch.cancel()
            raise _network_error(exc, watch) from None
        except BaseException:
            watch.cancel()
            raise
        return _Answer(response, watch)

    def get(self, url: str, accept: str, limit: int) -> tuple[int, str, bytes]:
        """(status, content type, body) of a GET of ``url``; a 404, 406 or 410 is a status with
        no body, any other HTTP error urllib's HTTPError. IndexReadError for a body over
        ``limit`` bytes (refused from its Content-Length when it says so, else cut at the cap)."""
        self.check(url)
        request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": USER_AGENT})
        try:
            with self.open(request) as resp:
                length = resp.headers.get("Content-Length") or ""
                if length.strip().isdigit() and int(length) > limit:
                    raise _too_large(url, limit)
                body = resp.read(limit + 1)
                status, ctype = resp.status, resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 406, 410):
                return exc.code, "", b""
            raise
        if len(body) > limit:
            raise _too_large(url, limit)
        return status, ctype, body

    def size(self, url: str) -> int | None:
        """The Content-Length a HEAD request of ``url`` answers, or None when it gives none."""
        self.check(url)
        request = urllib.request.Request(url, method="HEAD", headers={"User-Agent": USER_AGENT})
        with self.open(request) as resp:
            length = (resp.headers.get("Content-Length") or "").strip()
        return int(length) if length.isdigit() else None


if hasattr(urllib.request, "HTTPSHandler"):
    class _HTTPSHandler(_WatchedHandler, urllib.request.HTTPSHandler):
        def __init__(self, fetcher: Fetcher):
            super().__init__()
            self.fetcher = fetcher


def _too_large(url: str, limit: int) -> IndexReadError:
    return IndexReadError(f"{url}: the answer is larger than {limit >> 20} MiB, the most the "
                          "selector reads for it",
                          hint=BROKEN_INDEX)


def open_regular(path: Path) -> Any:
    """``path`` opened for reading in binary mode, if it is a regular file: IndexReadError for a
    FIFO, a device, a directory or a socket, checked on the open file (no window for a swap).
    FileNotFoundError when it doesn't exist."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer; the check below refuses it anyway.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a directory" if stat.S_ISDIR(mode) else "not a regular file")
            raise IndexReadError(f"{path}: is {kind}, not a regular file: the selector reads only "
                                 "regular files from a local site",
                                 hint="point --index at a site directory written by the index step")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (see open_regular), IndexReadError over ``limit``."""
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise IndexReadError(f"{path}: is larger than {limit >> 20} MiB, the most the selector reads "
                             "for it", hint="a cuwheels page is far smaller: the site is broken")
    return data
