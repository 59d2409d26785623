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

import io
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from tools.core import regularfile
from tools.core.errors import CuwheelsError
from tools.core.httpclient import DEFAULT_PORTS, MAX_REDIRECTS, Client

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
    return (parts.hostname or "").rstrip("."), port if port is not None else DEFAULT_PORTS.get(parts.scheme.lower())


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


class Fetcher(Client):
    """Reads URLs by the rules of the module docstring (tools.core.httpclient's client, with the
    selector's rule of which hosts and its words for what went wrong).

    ``hosts``: the origins that may be read (``(host, port)``; port None for any), the index's
    and the ones the user allowed. ``timeout``: seconds for one request, connect to last byte.
    ``deadline``: seconds for every request of the run together, counted from now.
    """

    def __init__(self, hosts: Iterable[tuple[str, int | None]], *, timeout: float, deadline: float):
        super().__init__(timeout=timeout, deadline=deadline)
        self.hosts = [(host.lower(), port) for host, port in hosts]

    def allows(self, url: str) -> bool:
        """Whether ``url`` is on a host this fetcher may read (scheme and user info aside)."""
        try:
            host, port = url_origin(url)
        except ValueError:
            return False
        return any(host == h and (p is None or p == port) for h, p in self.hosts)

    def elsewhere(self, url: str) -> str | None:
        """``HOST:PORT`` when ``url`` is a plain http(s) URL on a host this fetcher may not read
        (the only refusal a caller may take as "not read" rather than as a broken index: the
        project's own sites publish their wheels on another host than their pages); None for a
        URL it may read, and for one :meth:`check` refuses for any other reason."""
        try:
            parts = urlsplit(url)
            host, port = url_origin(url)
        except ValueError:
            return None
        if parts.scheme.lower() not in DEFAULT_PORTS or "@" in parts.netloc or not host or self.allows(url):
            return None
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{port}" if port is not None else host

    def check(self, url: str, *, context: str = "") -> None:
        """IndexReadError unless ``url`` is one this fetcher may read; ``context`` says where it
        came from (a redirect), else the URL itself is named."""
        where = context or url
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise IndexReadError(f"{where}: not a URL ({exc})", hint=BROKEN_INDEX) from None
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS:
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

    def redirect_loop(self, url: str) -> IndexReadError:
        """The error for a URL that redirects more than MAX_REDIRECTS times."""
        return IndexReadError(f"{url}: more than {MAX_REDIRECTS} redirects",
                              hint="the index's server redirects in a loop: tell its owner")

    def time_spent(self) -> str:
        """Why a request is not made: the run's ``--deadline`` has passed."""
        return f"not read: the run's {self.deadline:g} s for reading the index are spent (--deadline)"

    def time_out(self, run_ends_first: bool) -> str:
        """Why a request ended unfinished: ``--timeout``, or ``--deadline`` when ``run_ends_first``."""
        if run_ends_first:
            return f"the run's {self.deadline:g} s for reading the index ran out (--deadline)"
        return f"no complete answer within {self.timeout:g} s (--timeout)"

    def get(self, url: str, accept: str, limit: int) -> tuple[int, str, bytes]:
        """(status, content type, body) of a GET of ``url``; a 404, 406 or 410 is a status with
        no body, any other HTTP error urllib's HTTPError. IndexReadError for a body over
        ``limit`` bytes (refused from its Content-Length when it says so, else cut at the cap)."""
        self.check(url)
        request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": USER_AGENT})
        try:
            with self.open(request) as resp:
                body = io.BytesIO()
                resp.copy(body, limit, lambda: _too_large(url, limit))
                status, ctype = resp.status, resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 406, 410):
                return exc.code, "", b""
            raise
        return status, ctype, body.getvalue()

    def size(self, url: str) -> int | None:
        """The Content-Length a HEAD request of ``url`` answers, or None when it gives none."""
        self.check(url)
        request = urllib.request.Request(url, method="HEAD", headers={"User-Agent": USER_AGENT})
        with self.open(request) as resp:
            length = (resp.headers.get("Content-Length") or "").strip()
        return int(length) if length.isdigit() else None


def _too_large(url: str, limit: int) -> IndexReadError:
    return IndexReadError(f"{url}: the answer is larger than {limit >> 20} MiB, the most the "
                          "selector reads for it",
                          hint=BROKEN_INDEX)


def open_site_file(path: Path) -> BinaryIO:
    """``path`` opened for reading in binary mode, if it is a regular file (tools.core.regularfile):
    IndexReadError for a FIFO, a device, a directory or a socket, checked on the open file (no
    window for a swap). FileNotFoundError when it doesn't exist."""
    try:
        return regularfile.open_regular(path)
    except regularfile.NotRegularFile as exc:
        raise _not_regular(path, exc) from None


def read_site_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (see open_site_file), IndexReadError over ``limit``."""
    try:
        return regularfile.read_regular(path, limit)
    except regularfile.NotRegularFile as exc:
        raise _not_regular(path, exc) from None
    except regularfile.FileTooLarge:
        raise IndexReadError(f"{path}: is larger than {limit >> 20} MiB, the most the selector reads "
                             "for it", hint="a cuwheels page is far smaller: the site is broken") from None


def _not_regular(path: Path, exc: regularfile.NotRegularFile) -> IndexReadError:
    return IndexReadError(f"{path}: is {exc.kind}, not a regular file: the selector reads only "
                          "regular files from a local site",
                          hint="point --index at a site directory written by the index step")
