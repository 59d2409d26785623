"""The one bounded HTTP client: what is read, from where, how much and for how long.

Everything the project reads from the network comes through :class:`Client`: the source step's
sdists and the registry client's answers (through :func:`download`), and the selector's pages and
wheels (tools.selector.fetch's ``Fetcher``, a Client with the selector's rules). Neither a hostile
answer nor a hostile URL reaches further than the caller meant:

- every URL, and every redirect's target before it is followed, is checked by the client's
  :meth:`Client.check` (the caller's rule of which origins may be read). The redirect's own body
  is never read, and more than :data:`MAX_REDIRECTS` of them end the request;
- only ``http:`` and ``https:`` are opened (and ``file:`` for a :func:`download` whose caller
  names ``file://`` as an origin): urllib's ``ftp:`` and ``data:`` handlers are never installed;
- a body larger than the caller's cap is refused while it arrives, whatever Content-Length says
  (:meth:`BoundedResponse.copy`);
- each request ends within the client's ``timeout`` seconds, headers included, and all of them
  within ``deadline`` seconds of the client's creation: a server that sends a byte a second never
  trips a per-read timeout, so a watch shuts the request's sockets down instead.

:func:`download` is the rule of the build's downloads: the URL's origin (scheme, host and port)
must be exactly one the caller names (:func:`check_url`), and a URL that carries a user name or
password is refused outright: ``https://pypi.org@127.0.0.1:8443/`` is a request to 127.0.0.1,
whatever its first characters say.

Only the standard library is used, in Python 3.8's dialect: this package ships whole inside the
selector's zipapp, which runs on the oldest Python a user may have.
"""

from __future__ import annotations

import abc
import http.client
import io
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

from .errors import CuwheelsError

#: PyPI's file host: where every sdist a recipe names, and every file PyPI's JSON API lists, lives.
PYPI_FILES = "https://files.pythonhosted.org"
#: Bytes asked for per read: one read never waits for more than the server has sent.
CHUNK = 1 << 20
#: Redirects followed for one request.
MAX_REDIRECTS = 10
#: The ports a URL without one means.
DEFAULT_PORTS = {"http": 80, "https": 443}
#: A URL longer than this is shown cut in messages.
_SHOWN = 200


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, lowercased, with the scheme's default port left out
    (ValueError for a port that is not a number)."""
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    netloc = host if port in (None, DEFAULT_PORTS.get(parts.scheme.lower())) else f"{host}:{port}"
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


class BoundedResponse:
    """An open response under its request's time limit (what :meth:`Client.open` returns)."""

    def __init__(self, response: Any, watch: _Watch, client: Client):
        self._response, self._watch, self._client = response, watch, client
        #: Bytes of the body read so far.
        self.received = 0

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
        return self._read(self._response.read, amount)

    def _read(self, how: Callable[[Any], bytes], amount: int | None) -> bytes:
        try:
            data = how(amount)
        except (OSError, http.client.HTTPException) as exc:
            raise self._client._network_error(exc, self._watch) from None
        # A watch's shutdown reads as the end of the body: it is not one.
        if self._watch.fired:
            raise TimeoutError(self._watch.why)
        self.received += len(data)
        return data

    def copy(self, sink: BinaryIO, limit: int, too_large: Callable[[], Exception]) -> int:
        """Write the body to ``sink`` as it arrives and return its length; ``too_large()`` is
        raised when it is over ``limit`` bytes: before a byte is read when Content-Length says
        so, else the moment it passes the cap (whatever Content-Length said)."""
        declared = (self.headers.get("Content-Length") or "").strip()
        if declared.isdigit() and int(declared) > limit:
            raise too_large()
        # read1: a read returns what has arrived, never waits for a whole chunk.
        read = getattr(self._response, "read1", self._response.read)
        while True:
            chunk = self._read(read, CHUNK)
            if not chunk:
                return self.received
            if self.received > limit:
                raise too_large()
            sink.write(chunk)

    def close(self) -> None:
        """Close the response and end its time limit."""
        self._watch.cancel()
        self._response.close()

    def __enter__(self) -> BoundedResponse:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _WatchedHandler:
    """Mixin for urllib's HTTP and HTTPS handlers: each connection opens its socket through the
    current request's watch."""

    client: Client

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        """urllib's ``do_open`` with connections whose sockets the request's watch can cut."""
        watch = self.client.watch

        def connection(host: str, **kw: Any) -> Any:
            conn = http_class(host, **kw)
            # http.client opens every socket through this attribute (a proxy tunnel included).
            conn._create_connection = watch.connect
            return conn

        return super().do_open(connection, req, **kwargs)  # type: ignore[misc]


class _HTTPHandler(_WatchedHandler, urllib.request.HTTPHandler):
    def __init__(self, client: Client):
        super().__init__()
        self.client = client


if hasattr(urllib.request, "HTTPSHandler"):  # absent from a Python built without ssl
    class _HTTPSHandler(_WatchedHandler, urllib.request.HTTPSHandler):
        def __init__(self, client: Client):
            super().__init__()
            self.client = client


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to a URL the client would read itself, without reading the
    redirect's body (urllib's own handler reads it whole, however long it is)."""

    def __init__(self, client: Client):
        super().__init__()
        self.client = client

    def http_error_302(self, req: Any, fp: Any, code: int, msg: str, headers: Any) -> Any:
        """Check the target, then follow it as a new request under the same time limit."""
        target = headers.get("Location") or headers.get("URI")
        fp.close()
        if not target:
            raise urllib.error.HTTPError(req.full_url, code, f"{msg} (a redirect without a Location)",
                                         headers, io.BytesIO())
        new_url = urllib.parse.urljoin(req.full_url, target)
        self.client.check(new_url, context=f"{req.full_url} redirects (HTTP {code}) to {new_url}")
        hops = getattr(req, "cuwheels_redirects", 0) + 1
        if hops > MAX_REDIRECTS:
            raise self.client.redirect_loop(req.full_url)
        new = self.redirect_request(req, fp, code, msg, headers, new_url)
        new.cuwheels_redirects = hops
        return self.parent.open(new, timeout=req.timeout)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


class Client(abc.ABC):
    """Reads URLs by the rules of the module docstring; a subclass says which URLs
    (:meth:`check`) and how its failures read.

    ``timeout``: seconds for one request, connect to last byte. ``deadline``: seconds for every
    request of this client together, counted from now. ``read_timeout``: seconds one socket
    operation may wait (the request's own time when None; then a socket's timeout is the
    request's time running out).
    """

    #: The watch of the request in progress, set by :meth:`open` (a client reads in sequence).
    watch: _Watch

    def __init__(self, *, timeout: float, deadline: float, read_timeout: float | None = None):
        self.timeout = timeout
        self.deadline = deadline
        self.read_timeout = read_timeout
        self._ends = time.monotonic() + deadline
        handlers: list[Any] = [urllib.request.ProxyHandler(), urllib.request.UnknownHandler(),
                               _HTTPHandler(self), _CheckedRedirects(self),
                               urllib.request.HTTPDefaultErrorHandler(), urllib.request.HTTPErrorProcessor()]
        if hasattr(urllib.request, "HTTPSHandler"):
            handlers.append(_HTTPSHandler(self))
        # Not build_opener: it adds the file:, ftp: and data: handlers, which must never be used.
        self._opener = urllib.request.OpenerDirector()
        for handler in handlers:
            self._opener.add_handler(handler)

    @abc.abstractmethod
    def check(self, url: str, *, context: str = "") -> None:
        """Raise the caller's error unless ``url`` may be read; ``context`` says where it came
        from (a redirect), else the URL itself is named. Each client has its own rules (the
        build's downloads: an origin list; the selector: its index's host)."""

    def redirect_loop(self, url: str) -> Exception:
        """The error for a request of ``url`` that redirected more than MAX_REDIRECTS times."""
        return ConnectionError(f"{url}: more than {MAX_REDIRECTS} redirects")

    def time_spent(self) -> str:
        """Why a request is not made: the client's deadline has passed."""
        return f"not read: the {self.deadline:g} s for reading are spent"

    def time_out(self, run_ends_first: bool) -> str:
        """Why a request ended unfinished: its own ``timeout``, or the client's deadline when
        ``run_ends_first``."""
        if run_ends_first:
            return f"the {self.deadline:g} s for reading ran out"
        return f"no complete answer within {self.timeout:g} s"

    def open(self, request: urllib.request.Request) -> BoundedResponse:
        """The open response to ``request`` (checked, redirects checked, under the time limit).

        An HTTP error status is urllib's HTTPError; a request whose time ran out a TimeoutError;
        an answer that is not HTTP a ConnectionError; a network failure urllib's own OSError."""
        self.check(request.full_url)
        left = self._ends - time.monotonic()
        if left <= 0:
            raise TimeoutError(self.time_spent())
        seconds = min(left, self.timeout)
        self.watch = watch = _Watch(seconds, self.time_out(left < self.timeout))
        socket_seconds = seconds if self.read_timeout is None else min(self.read_timeout, seconds)
        try:
            response = self._opener.open(request, timeout=socket_seconds)
        except urllib.error.HTTPError as exc:
            watch.cancel()
            exc.close()
            raise
        except (OSError, http.client.HTTPException) as exc:
            watch.cancel()
            raise self._network_error(exc, watch) from None
        except BaseException:
            watch.cancel()
            raise
        return BoundedResponse(response, watch, self)

    def _network_error(self, exc: OSError | http.client.HTTPException, watch: _Watch) -> OSError:
        """The OSError to raise for a failed request: a TimeoutError when its time ran out, a
        ConnectionError for an answer that is not HTTP (http.client's errors are not OSErrors)."""
        # Without a read_timeout the sockets' own timeout is the request's whole time: when it
        # fires first, that time is up.
        timed_out = self.read_timeout is None and isinstance(getattr(exc, "reason", exc), socket.timeout)
        if watch.fired or timed_out:
            return TimeoutError(watch.why)
        if isinstance(exc, http.client.HTTPException):
            return ConnectionError(f"the answer is not valid HTTP ({type(exc).__name__}: {describe(str(exc))})")
        return exc


class _OriginClient(Client):
    """A client of :func:`download`: URLs on exactly the given origins (:func:`check_url`)."""

    def __init__(self, allowed: list[str], error: type[CuwheelsError], **kwargs: Any):
        super().__init__(**kwargs)
        self.allowed, self.error = allowed, error
        # A caller that names file:// as an origin (a test's local page, a mirror on disk) reads
        # local files: only then is urllib's file: handler installed.
        if any(o.startswith("file:") for o in allowed):
            self._opener.add_handler(urllib.request.FileHandler())

    def check(self, url: str, *, context: str = "") -> None:
        """``error`` unless ``url`` is on one of the allowed origins (a redirect's target is
        named as itself)."""
        check_url(url, self.allowed, self.error)

    def redirect_loop(self, url: str) -> Exception:
        """``error`` naming the URL that redirects in a loop."""
        return self.error(f"{shown(url)}: more than {MAX_REDIRECTS} redirects",
                          hint="the server redirects in a loop; check the URL")


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
    started = time.monotonic()
    answer: BoundedResponse | None = None

    def too_big() -> CuwheelsError:
        return error(f"{shown(url)}: the answer is larger than {max_bytes} bytes, the most this "
                     "download takes", hint="a file this large is not what was asked for; check the URL")

    client = _OriginClient(allowed, error, timeout=deadline, deadline=deadline,
                           read_timeout=min(timeout, deadline))
    try:
        with client.open(request) as answer:
            return answer.copy(sink, max_bytes, too_big)
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        if time.monotonic() - started >= deadline:
            got = answer.received if answer is not None else 0
            raise error(f"{shown(url)}: the download did not finish within {deadline:g} s ({got} "
                        "bytes arrived)", hint="the server is too slow or stalls; run again later") from None
        raise error(f"reading {shown(url)} failed: {exc}", hint=hint) from None
