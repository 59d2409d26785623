"""Reading a cuwheels site: its simple-API pages, its selector facts, and a wheel's build manifest.

A site is a URL (``http(s)://``) or a local site directory (INDEX_DIR, or its ``file://`` URL).
Pages are read as PEP 691 JSON (``index.json``, as static hosts serve it; content negotiation at
the directory URL as a fallback) or PEP 503 HTML. GPU archs are not in the standard pages: they
come from a per-file ``_cuwheels`` key when the index provides one, else from the build manifest
(``cuwheels.json``) inside the wheel, read with HTTP range requests (a few kilobytes, never the
whole wheel unless it is small).

Nothing a site says is trusted: what is read, from where, how much and for how long is
tools.selector.fetch's; every page is checked against what a cuwheels index writes (each field's
type, a CUDA or torch version where one belongs) before anything uses it, and a page that is not
is an IndexReadError naming the page, the field and the rule. Text a page carries (a yank
reason, a file or project name) is made :func:`visible` before it can reach a terminal.
"""

from __future__ import annotations

import json
import re
import struct
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name, parse_sdist_filename,
                             parse_wheel_filename)

from tools.core.httpclient import describe
from tools.core.manifest import manifest_member
from tools.core.rangeread import RangeLimitExceeded, RangeReader, RangeUnsupported
from .detect import series_or_none
from .facts import FACTS_FILE, SiteFacts, parse_facts
from .fetch import (DEFAULT_DEADLINE, FACTS_LIMIT, MANIFEST_LIMIT, PAGE_LIMIT, PEEK_FULL_LIMIT, PEEK_READ_LIMIT,
                    BROKEN_INDEX, USER_AGENT, Fetcher, IndexReadError, open_site_file, read_site_file,
                    url_origin)

#: What zipfile raises for bytes that are not a readable zip (besides OSError).
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, struct.error, KeyError, ValueError)
_CUDA = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3})?")
_TORCH = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})?(?:\+[A-Za-z0-9.]{1,64})?")
_ARCH = re.compile(r"[0-9]{2,4}[a-z]?")


def visible(text: str, keep: str = "") -> str:
    """``text`` with every character that is not printable (escape sequences, control and
    format characters: a terminal acts on them, or hides what follows) written as a Python
    escape (``\\x1b``), but for those in ``keep``."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch in keep else ascii(ch)[1:-1] for ch in text)


def _bad(where: str, field: str, rule: str, value: Any) -> IndexReadError:
    """The error for a field of a document that breaks ``rule``."""
    return IndexReadError(f"{where}: {field} {rule}, not {visible(describe(value))}", hint=BROKEN_INDEX)


def load_json(data: bytes | str, where: str) -> Any:
    """The JSON document in ``data``; IndexReadError naming ``where`` for text that is not UTF-8
    or not JSON, or is nested too deeply for Python to read."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return json.loads(text)
    except UnicodeDecodeError as exc:
        raise IndexReadError(f"{where}: is not UTF-8 text ({exc.reason} at byte {exc.start})",
                             hint=BROKEN_INDEX) from None
    except ValueError as exc:
        raise IndexReadError(f"{where}: is not valid JSON: {visible(describe(str(exc)))}", hint=BROKEN_INDEX) from None
    except RecursionError:
        raise IndexReadError(f"{where}: its JSON is nested too deeply to read", hint=BROKEN_INDEX) from None


@dataclass
class IndexFile:
    """One file as a simple-API page lists it (its text fields already :func:`visible`)."""

    filename: str
    url: str
    requires_python: str | None = None
    yanked: Any = False
    size: int | None = None
    extra: dict[str, Any] | None = None  # the index's private ``_cuwheels`` data, checked (parse_cuwheels)


class _HtmlError(ValueError):
    """html.parser gave up on the page (Python 3.8 and 3.9 report it through ``error()``)."""


class _Links(HTMLParser):
    """PEP 503 anchors: href, data-requires-python, data-yanked and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None

    def error(self, message: str) -> None:
        """Where Python 3.8 and 3.9's _markupbase reports markup it can't parse (``<![1``)."""
        raise _HtmlError(message)

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


def parse_archs(found: Any, where: str, field: str) -> dict[str, dict[str, list[str]]]:
    """A build manifest's ``archs.found`` (module path -> ``{sass: [...], ptx: [...]}``), checked;
    IndexReadError naming ``where`` and ``field`` for anything else."""
    if not isinstance(found, dict):
        raise _bad(where, field, "must map module paths to their {sass, ptx} archs", found)
    out = {}
    for module, report in found.items():
        if not isinstance(report, dict):
            raise _bad(where, f"{field}[{visible(describe(module))}]", "must be an object {sass, ptx}", report)
        entry = {}
        for key in ("sass", "ptx"):
            archs = report.get(key) or []
            if not isinstance(archs, list) or not all(isinstance(a, str) and _ARCH.fullmatch(a) for a in archs):
                raise _bad(where, f"{field}[{visible(describe(module))}].{key}",
                           'must be a list of GPU archs such as ["80", "90a"]', archs)
            entry[key] = archs
        out[visible(module)] = entry
    return out


def parse_cuwheels(extra: Any, where: str, field: str) -> dict[str, Any]:
    """A file's ``_cuwheels`` object (tools.sitegen.render writes it), checked: ``cuda`` a CUDA
    version, ``torch`` a torch version (kept as its series), ``cxx11_abi`` a boolean, ``serves`` a
    list of torch series, ``archs`` as :func:`parse_archs` (or ``{found: ...}``), or null where the
    index records no GPU code for the file; each optional."""
    if not isinstance(extra, dict):
        raise _bad(where, field, "must be an object", extra)
    out: dict[str, Any] = {}
    cuda = extra.get("cuda")
    if cuda is not None:
        if not isinstance(cuda, str) or not _CUDA.fullmatch(cuda):
            raise _bad(where, f"{field}.cuda", 'must be a CUDA version such as "12.8"', cuda)
        out["cuda"] = cuda
    torch = extra.get("torch")
    if torch is not None:
        if not isinstance(torch, str) or not _TORCH.fullmatch(torch):
            raise _bad(where, f"{field}.torch", 'must be a torch version such as "2.8"', torch)
        out["torch"] = series_or_none(torch)
    abi = extra.get("cxx11_abi")
    if abi is not None and not isinstance(abi, bool):
        raise _bad(where, f"{field}.cxx11_abi", "must be true, false or null", abi)
    out["cxx11_abi"] = abi
    serves = extra.get("serves")
    if serves is not None:
        if not isinstance(serves, list) or not all(isinstance(s, str) and _TORCH.fullmatch(s) for s in serves):
            raise _bad(where, f"{field}.serves", 'must be a list of torch series such as ["2.9", "2.10"]', serves)
        out["serves"] = [series_or_none(s) for s in serves]
    archs = extra.get("archs")
    if archs is not None:
        found = archs.get("found", archs) if isinstance(archs, dict) else archs
        out["archs"] = parse_archs(found, where, f"{field}.archs")
    elif "archs" in extra:
        out["archs"] = None  # the index's word: no GPU code on record (tools.selector.checks.check_arch)
    return out


def _text(value: Any, where: str, field: str, *, required: bool = False) -> str | None:
    """A string field of a page (made visible); None when absent and not ``required``."""
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise _bad(where, field, "must be a non-empty string" if required else "must be a string", value)
    return visible(value)


def _objects(doc: dict[str, Any], key: str, where: str) -> list[tuple[int, dict[str, Any]]]:
    """``doc[key]`` as (index, object) pairs; IndexReadError unless it is a list of objects."""
    entries = doc.get(key, [])
    if not isinstance(entries, list):
        raise _bad(where, key, "must be a list", entries)
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise _bad(where, f"{key}[{i}]", "must be an object", entry)
    return list(enumerate(entries))


def parse_json_files(doc: dict[str, Any], base: str, where: str) -> list[IndexFile]:
    """The files of a PEP 691 project page, each field checked; relative URLs against ``base``."""
    files = []
    for i, f in _objects(doc, "files", where):
        filename = _text(f.get("filename"), where, f"files[{i}].filename", required=True)
        field = f"files[{i}] ({filename})"
        url = f.get("url")
        if not isinstance(url, str) or not url:
            raise _bad(where, f"{field}.url", "must be a non-empty string", url)
        yanked = f.get("yanked", False)
        if not isinstance(yanked, (bool, str)):
            raise _bad(where, f"{field}.yanked", "must be true, false or a reason (a string)", yanked)
        size = f.get("size")
        if size is not None and (type(size) is not int or size < 0):
            raise _bad(where, f"{field}.size", "must be a number of bytes", size)
        extra = f.get("_cuwheels")
        files.append(IndexFile(
            filename=filename or "", url=urllib.parse.urljoin(base, url),
            requires_python=_text(f.get("requires-python"), where, f"{field}.requires-python"),
            yanked=visible(yanked) if isinstance(yanked, str) else yanked, size=size,
            extra=None if extra is None else parse_cuwheels(extra, where, f"{field}._cuwheels"),
        ))
    return files


class Index:
    """A cuwheels site: a URL (``http(s)://``) or a local directory (INDEX_DIR, or ``file://``).

    ``timeout``: seconds for one request, whole; ``deadline``: seconds for all of them;
    ``allow_hosts``: ``(host, port)`` pairs (port None: any) that may be read besides the
    index's own host (tools.selector.fetch).
    """

    def __init__(self, location: str, *, site_url: str | None = None, timeout: float = 30,
                 deadline: float = DEFAULT_DEADLINE, allow_hosts: tuple[tuple[str, int | None], ...] = ()):
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
        hosts = list(allow_hosts)
        for url in (self.root, self.public_root):
            if re.match(r"https?://", url):
                try:
                    hosts.append(url_origin(url))
                except ValueError as exc:
                    raise IndexReadError(f"--index {location}: {exc}") from None
        self.fetcher = Fetcher(hosts, timeout=timeout, deadline=deadline)
        if self.local is None:
            self.fetcher.check(self.root)
        self._cache: dict[str, list[IndexFile] | None] = {}
        self._facts: SiteFacts | None = None
        self._facts_read = False
        #: Why ``facts()`` is None (empty while it isn't).
        self.facts_note = ""
        #: What was left out of the pages read, and why (files of another project).
        self.notes: list[str] = []

    def index_url(self, prefix: str) -> str:
        """The simple-index URL to give pip for ``prefix`` (``""`` or ``cu128/torch2.8/``)."""
        return f"{self.public_root}{prefix}simple/"

    def files(self, prefix: str, project: str) -> list[IndexFile] | None:
        """The files of ``project`` in the simple index under ``prefix``; None when it has none.

        A file whose name is another project's (its name part, canonicalized, is not
        ``project``'s) is left out, and :attr:`notes` says so: pip would never install it for
        ``project``, and a page that lists it is broken or hostile."""
        key = f"{prefix}simple/{project}/"
        if key not in self._cache:
            listed = self._read_project(key) or []
            wanted = canonicalize_name(project)
            kept = []
            for f in listed:
                other = file_project(f.filename)
                if other is None or other == wanted:
                    kept.append(f)
                else:
                    self.notes.append(f"{key}: skipped {f.filename}: it is a file of {other}, not of {wanted}")
            self._cache[key] = kept or None
        return self._cache[key]

    def projects(self) -> list[str] | None:
        """Every project in the combined index (None when the root page can't be read)."""
        body, where = self._get_page("simple/")
        if body is None:
            return None
        if isinstance(body, dict):
            names = []
            for i, p in _objects(body, "projects", where):
                names.append(canonicalize_name(_text(p.get("name"), where, f"projects[{i}].name", required=True) or ""))
            return names
        return [canonicalize_name(visible(link["text"].strip())) for link in body]

    def facts(self) -> SiteFacts | None:
        """The site's selector facts (tools.selector.facts), or None when it publishes none; then
        ``facts_note`` says why (an older site, or a file this selector can't read)."""
        if not self._facts_read:
            self._facts_read = True
            data, where = self._get_file(FACTS_FILE)
            if data is None:
                self.facts_note = f"the index publishes no {FACTS_FILE} (a site built by an older cuwheels)"
            else:
                try:
                    self._facts = parse_facts(load_json(data, where), where)
                except IndexReadError as exc:  # not UTF-8, not JSON
                    self.facts_note = f"{where} can't be read: {exc.message}"
                except ValueError as exc:  # FactsError
                    self.facts_note = f"{where} can't be read: {visible(str(exc))}"
        return self._facts

    def not_read(self, url: str) -> str | None:
        """Why the wheel at ``url`` is not read for its manifest: it is on another host than the
        index's (one ``--allow-host`` doesn't name); None when it may be read, or when the URL is
        one the selector refuses outright (:meth:`wheel_manifest` raises for it)."""
        named = self.fetcher.elsewhere(url)
        if named is None:
            return None
        return (f"the wheel is on {named}, not on the index's host; pass --allow-host {named} to "
                "read its build manifest from there")

    def wheel_manifest(self, url: str, size: int | None) -> tuple[dict[str, Any] | None, str]:
        """(manifest or None, what happened) for the wheel at ``url``, reading as little as
        possible. A wheel that can't be read, or is on another host (:meth:`not_read`), is a
        None and why; IndexReadError for a URL the selector refuses, a read past its caps, or a
        manifest that is not a JSON object."""
        where = visible(url)
        if self.local is not None and url.startswith("file:"):
            path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
            try:
                with open_site_file(path) as fh, zipfile.ZipFile(fh) as zf:
                    return _manifest_in(zf, where), "read from the local wheel"
            except (OSError, *_ZIP_ERRORS) as exc:
                return None, f"couldn't read the wheel: {visible(str(exc))}"
        not_read = self.not_read(url)
        if not_read:
            return None, not_read
        self.fetcher.check(url)
        try:
            if size is None:
                size = self.fetcher.size(url)
            if not size:
                return None, "the wheel's size is unknown"
            reader = RangeReader(url, size, user_agent=USER_AGENT, whole_file_limit=PEEK_FULL_LIMIT,
                                 max_fetched=PEEK_READ_LIMIT, opener=self.fetcher.open)
            reader.prefetch_tail()
            with zipfile.ZipFile(reader) as zf:
                manifest = _manifest_in(zf, where)
            return manifest, f"read {reader.fetched} of {size} bytes in {reader.requests} request(s)"
        except RangeUnsupported:
            return None, f"the server ignores HTTP range requests and the wheel is {size >> 20} MiB"
        except RangeLimitExceeded as exc:
            raise IndexReadError(visible(exc.message),
                                 hint="a wheel's directory and manifest are far smaller: the wheel is broken "
                                      "or hostile") from None
        except (OSError, *_ZIP_ERRORS) as exc:
            return None, f"couldn't read the wheel: {visible(str(exc))}"

    def _get_file(self, rel: str) -> tuple[bytes | None, str]:
        """(bytes, where) of one file under the site root; (None, where) when it doesn't exist."""
        if self.local is not None:
            path = self.local / rel
            try:
                return read_site_file(path, FACTS_LIMIT), str(path)
            except (FileNotFoundError, NotADirectoryError):
                return None, str(path)
            except OSError as exc:
                raise IndexReadError(f"can't read {path}: {visible(str(exc))}") from None
        url = self.root + rel
        status, _, body = self._http(url, "application/json", FACTS_LIMIT)
        return (body if status == 200 else None), url

    def _read_project(self, rel: str) -> list[IndexFile] | None:
        body, base = self._get_page(rel)
        if body is None:
            return None
        if isinstance(body, dict):
            files = parse_json_files(body, base, base)
        else:
            files = []
            for link in body:
                attrs = link["attrs"]
                href = attrs.get("href") or ""
                yanked = attrs.get("data-yanked")
                requires = attrs.get("data-requires-python")
                files.append(IndexFile(
                    filename=visible(link["text"].strip()),
                    url=urllib.parse.urljoin(base, href.split("#", 1)[0]),
                    requires_python=visible(requires) if requires else requires,
                    yanked=False if yanked is None else (visible(yanked) or True),
                ))
        return files or None

    def _get_page(self, rel: str) -> tuple[Any, str]:
        """(parsed JSON dict or list of HTML links, base URL) of a page; (None, "") if missing."""
        if self.local is not None:
            directory = self.local / rel
            for name in ("index.json", "index.html"):
                path = directory / name
                try:
                    data = read_site_file(path, PAGE_LIMIT)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                except OSError as exc:
                    raise IndexReadError(f"can't read {path}: {visible(str(exc))}") from None
                return self._parse(data, name.endswith(".json"), str(path)), path.as_uri()
            return None, ""
        url = self.root + rel
        # Static hosts can't negotiate: the JSON twin is index.json; a negotiating server (PyPI,
        # tools.serve) answers the directory URL itself, with JSON when asked for it.
        for target, accept in ((url + "index.json", "application/json, " + _JSON_V1),
                               (url, f"{_JSON_V1}, text/html;q=0.1")):
            status, ctype, body = self._http(target, accept, PAGE_LIMIT)
            if status == 200:
                is_json = "json" in ctype or body.lstrip()[:1] == b"{"
                return self._parse(body, is_json, target), target
        return None, ""

    @staticmethod
    def _parse(data: bytes, is_json: bool, where: str) -> Any:
        """A JSON page as a dict, an HTML page as its list of links; IndexReadError for a page
        that is not UTF-8, not JSON or not a JSON object."""
        if is_json:
            doc = load_json(data, where)
            if not isinstance(doc, dict):
                raise IndexReadError(f"{where}: is not a simple-API JSON page (a JSON object)", hint=BROKEN_INDEX)
            return doc
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise IndexReadError(f"{where}: is not UTF-8 text ({exc.reason} at byte {exc.start})",
                                 hint=BROKEN_INDEX) from None
        parser = _Links()
        try:
            parser.feed(text)
            parser.close()
        except (AssertionError, ValueError, IndexError, RecursionError) as exc:
            # html.parser raises on some declarations (``<![`` and a non-name): AssertionError
            # from 3.10 on, _HtmlError (through error()) before; no page of ours has one.
            raise IndexReadError(f"{where}: is not an HTML page the selector can read (html.parser: "
                                 f"{visible(str(exc)[:200])})", hint=BROKEN_INDEX) from None
        return parser.links

    def _http(self, url: str, accept: str, limit: int) -> tuple[int, str, bytes]:
        """(status, content type, body) of a GET; a missing page is a status, any other failure
        IndexReadError."""
        try:
            return self.fetcher.get(url, accept, limit)
        except urllib.error.HTTPError as exc:
            raise IndexReadError(f"{url}: HTTP {exc.code} {visible(str(exc.reason))}",
                                 hint="check the --index URL (a cuwheels site's root), or try again later") from None
        except OSError as exc:
            reason = getattr(exc, "reason", exc)
            raise IndexReadError(f"can't read {url}: {visible(str(reason))}",
                                 hint="check the --index URL and that the site answers; a slow site needs a "
                                      "larger --timeout or --deadline") from None


def _manifest_in(zf: zipfile.ZipFile, where: str) -> dict[str, Any] | None:
    """The build manifest of the open wheel ``zf`` (from ``where``), or None when it has none.

    Its size is checked before it is read (zipfile stops at the size the directory gives);
    an encrypted or oddly compressed one is a BadZipFile (the wheel can't be read), and one that
    is not a JSON object an IndexReadError.
    """
    member = manifest_member(zf.namelist())
    if member is None:
        return None
    info = zf.getinfo(member)
    if max(info.file_size, info.compress_size) > MANIFEST_LIMIT:
        raise IndexReadError(f"{where}: {visible(member)} is {max(info.file_size, info.compress_size)} bytes; a "
                             f"build manifest is at most {MANIFEST_LIMIT} bytes", hint=BROKEN_INDEX)
    if info.flag_bits & 0x1:
        raise zipfile.BadZipFile(f"{member} is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise zipfile.BadZipFile(f"{member} is compressed with method {info.compress_type}, not deflate")
    named = f"{where} ({visible(member)})"
    manifest = load_json(zf.read(member), named)
    if not isinstance(manifest, dict):
        raise _bad(named, "the manifest", "must be a JSON object", manifest)
    return manifest


def file_project(filename: str) -> str | None:
    """The canonical project name a wheel's or sdist's file name gives, or None for a name that
    is neither (such a file is never offered: tools.selector.checks.parse_wheel skips it)."""
    try:
        if filename.endswith(".whl"):
            return canonicalize_name(parse_wheel_filename(filename)[0])
        if filename.endswith((".tar.gz", ".zip")):
            return canonicalize_name(parse_sdist_filename(filename)[0])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


def site_root(location: str) -> str:
    """The site root of an index URL or path: strips ``simple/...`` and ``cuXYZ/torchX.Y/``."""
    text = re.sub(r"index\.(html|json)$", "", location.strip())
    if not text.endswith("/"):
        text += "/"
    text = re.sub(r"simple/(?:[^/]+/)?$", "", text)
    text = re.sub(r"cu\d+/torch\d+\.\d+/$", "", text)
    return text
