"""Reading a cuwheels site: its simple-API pages, its selector facts, and a wheel's build manifest.

A site is a URL (``http(s)://``, ``file://``) or a local site directory (INDEX_DIR). Pages are
read as PEP 691 JSON (``index.json``, as static hosts serve it; content negotiation at the
directory URL as a fallback) or PEP 503 HTML. GPU archs are not in the standard pages: they come
from a per-file ``_cuwheels`` key when the index provides one, else from the build manifest
(``cuwheels.json``) inside the wheel, read with HTTP range requests (a few kilobytes, never the
whole wheel unless it is small).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from tools.core.manifest import read_manifest
from tools.core.rangeread import RangeReader, RangeUnsupported
from .facts import FACTS_FILE, SiteFacts, parse_facts

#: Wheels up to this size are read whole when the server ignores HTTP range requests.
PEEK_FULL_LIMIT = 16 << 20
USER_AGENT = "cuwheels-select/1"


class IndexReadError(Exception):
    """The index can't be read (network, HTTP status, bad JSON)."""


@dataclass
class IndexFile:
    """One file as a simple-API page lists it."""

    filename: str
    url: str
    requires_python: str | None = None
    yanked: Any = False
    size: int | None = None
    extra: dict[str, Any] | None = None  # the index's private ``_cuwheels`` data, if any


class _Links(HTMLParser):
    """PEP 503 anchors: href, data-requires-python, data-yanked and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = {"attrs": dict(attrs), "text": ""}

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.links.append(self._open)
            self._open = None


_JSON_V1 = "application/vnd.pypi.simple.v1+json"


class Index:
    """A cuwheels site: a URL (``http(s)://``, ``file://``) or a local directory (INDEX_DIR)."""

    def __init__(self, location: str, *, site_url: str | None = None, timeout: float = 30):
        self.timeout = timeout
        loc = location.strip()
        if loc.startswith("file://"):
            loc = urllib.request.url2pathname(urllib.parse.urlsplit(loc).path)
        self.local: Path | None = None
        if re.match(r"https?://", loc):
            self.root = site_root(loc)
        else:
            path = Path(loc).expanduser().resolve()
            if not path.is_dir():
                raise IndexReadError(f"--index {location}: no such directory, and not an http(s) URL")
            self.local = Path(site_root(path.as_posix() + "/"))
            self.root = self.local.as_uri() + "/"
        #: The URL printed in commands (a local site is usually published elsewhere).
        self.public_root = site_root(site_url) if site_url else self.root
        self._cache: dict[str, list[IndexFile] | None] = {}
        self._facts: SiteFacts | None = None
        self._facts_read = False
        #: Why ``facts()`` is None (empty while it isn't).
        self.facts_note = ""

    def index_url(self, prefix: str) -> str:
        """The simple-index URL to give pip for ``prefix`` (``""`` or ``cu128/torch2.8/``)."""
        return f"{self.public_root}{prefix}simple/"

    def files(self, prefix: str, project: str) -> list[IndexFile] | None:
        """The files of ``project`` in the simple index under ``prefix``; None when it has none."""
        key = f"{prefix}simple/{project}/"
        if key not in self._cache:
            self._cache[key] = self._read_project(key)
        return self._cache[key]

    def projects(self) -> list[str] | None:
        """Every project in the combined index (None when the root page can't be read)."""
        body, _ = self._get_page("simple/")
        if body is None:
            return None
        if isinstance(body, dict):
            return [canonicalize_name(p["name"]) for p in body.get("projects", []) if isinstance(p, dict)]
        return [canonicalize_name(link["text"].strip()) for link in body]

    def facts(self) -> SiteFacts | None:
        """The site's selector facts (tools.selector.facts), or None when it publishes none; then
        ``facts_note`` says why (an older site, or a file this selector can't read)."""
        if not self._facts_read:
            self._facts_read = True
            text, where = self._get_file(FACTS_FILE)
            if text is None:
                self.facts_note = f"the index publishes no {FACTS_FILE} (a site built by an older cuwheels)"
            else:
                try:
                    self._facts = parse_facts(json.loads(text), where)
                except ValueError as exc:  # FactsError, or JSON that doesn't parse
                    self.facts_note = f"{where} can't be read: {exc}"
        return self._facts

    def _get_file(self, rel: str) -> tuple[str | None, str]:
        """(text, where) of one file under the site root; (None, where) when it doesn't exist."""
        if self.local is not None:
            path = self.local / rel
            try:
                return path.read_text(encoding="utf-8"), str(path)
            except FileNotFoundError:
                return None, str(path)
            except (OSError, UnicodeDecodeError) as exc:
                raise IndexReadError(f"can't read {path}: {exc}") from None
        url = self.root + rel
        status, _, body = self._http(url, "application/json")
        if status != 200:
            return None, url
        try:
            return body.decode("utf-8"), url
        except UnicodeDecodeError as exc:
            raise IndexReadError(f"{url} is not UTF-8 text: {exc}") from None

    def _read_project(self, rel: str) -> list[IndexFile] | None:
        body, base = self._get_page(rel)
        if body is None:
            return None
        files = []
        if isinstance(body, dict):
            for f in body.get("files", []):
                if not isinstance(f, dict) or "filename" not in f or "url" not in f:
                    continue
                extra = f.get("_cuwheels")
                files.append(IndexFile(
                    filename=f["filename"], url=urllib.parse.urljoin(base, f["url"]),
                    requires_python=f.get("requires-python"), yanked=f.get("yanked", False),
                    size=f.get("size"), extra=extra if isinstance(extra, dict) else None,
                ))
        else:
            for link in body:
                attrs = link["attrs"]
                href = attrs.get("href") or ""
                yanked = attrs.get("data-yanked")
                files.append(IndexFile(
                    filename=link["text"].strip(),
                    url=urllib.parse.urljoin(base, href.split("#", 1)[0]),
                    requires_python=attrs.get("data-requires-python"),
                    yanked=False if yanked is None else (yanked or True),
                ))
        return files or None

    def _get_page(self, rel: str) -> tuple[Any, str]:
        """(parsed JSON dict or list of HTML links, base URL) of a page; (None, "") if missing."""
        if self.local is not None:
            directory = self.local / rel
            for name in ("index.json", "index.html"):
                path = directory / name
                if path.is_file():
                    text = path.read_text(encoding="utf-8")
                    return self._parse(text, name.endswith(".json"), path.as_uri()), path.as_uri()
            return None, ""
        url = self.root + rel
        # Static hosts can't negotiate: the JSON twin is index.json; a negotiating server (PyPI,
        # tools.serve) answers the directory URL itself, with JSON when asked for it.
        for target, accept in ((url + "index.json", "application/json, " + _JSON_V1),
                               (url, f"{_JSON_V1}, text/html;q=0.1")):
            status, ctype, body = self._http(target, accept)
            if status == 200:
                is_json = "json" in ctype or body.lstrip()[:1] == b"{"
                try:
                    return self._parse(body.decode("utf-8"), is_json, target), target
                except (ValueError, UnicodeDecodeError):
                    continue
        return None, ""

    @staticmethod
    def _parse(text: str, is_json: bool, where: str) -> Any:
        """A JSON page as a dict, an HTML page as its list of links; IndexReadError for bad JSON."""
        if is_json:
            try:
                doc = json.loads(text)
            except ValueError as exc:
                raise IndexReadError(f"{where} is not valid JSON: {exc}") from None
            if not isinstance(doc, dict):
                raise IndexReadError(f"{where} is not a simple-API JSON page")
            return doc
        parser = _Links()
        parser.feed(text)
        return parser.links

    def _http(self, url: str, accept: str) -> tuple[int, str, bytes]:
        """(status, content type, body) of a GET; a missing page is a status, any other failure IndexReadError."""
        req = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": USER_AGENT})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, resp.headers.get("Content-Type", ""), resp.read()
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 406, 410):
                return exc.code, "", b""
            raise IndexReadError(f"{url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise IndexReadError(f"can't read {url}: {reason}") from None


def site_root(location: str) -> str:
    """The site root of an index URL or path: strips ``simple/...`` and ``cuXYZ/torchX.Y/``."""
    text = re.sub(r"index\.(html|json)$", "", location.strip())
    if not text.endswith("/"):
        text += "/"
    text = re.sub(r"simple/(?:[^/]+/)?$", "", text)
    text = re.sub(r"cu\d+/torch\d+\.\d+/$", "", text)
    return text


# --------------------------------------------------------------------------- reading a wheel's manifest


def read_wheel_manifest(url: str, size: int | None, *, timeout: float = 30) -> tuple[dict[str, Any] | None, str]:
    """(manifest or None, what happened) for the wheel at ``url``, reading as little as possible."""
    try:
        if url.startswith("file://"):
            with zipfile.ZipFile(urllib.request.url2pathname(urllib.parse.urlsplit(url).path)) as zf:
                manifest = read_manifest(zf)
            return manifest, "read from the local wheel"
        if size is None:
            head = urllib.request.Request(url, method="HEAD", headers={"User-Agent": USER_AGENT})
            with urllib.request.urlopen(head, timeout=timeout) as resp:
                size = int(resp.headers.get("Content-Length") or 0)
        if not size:
            return None, "the wheel's size is unknown"
        reader = RangeReader(url, size, timeout=timeout, user_agent=USER_AGENT,
                             whole_file_limit=PEEK_FULL_LIMIT)
        reader.prefetch_tail()
        with zipfile.ZipFile(reader) as zf:
            manifest = read_manifest(zf)
        return manifest, f"read {reader.fetched} of {size} bytes in {reader.requests} request(s)"
    except RangeUnsupported:
        return None, f"the server ignores HTTP range requests and the wheel is {size >> 20} MiB"
    except (OSError, urllib.error.URLError, zipfile.BadZipFile, ValueError, KeyError) as exc:
        return None, f"couldn't read the wheel: {exc}"
