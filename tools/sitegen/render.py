"""Rendering: every page of the site, from the ledger's entries, the yank list and the placement.

HTML pages follow PEP 503 (normalized names, trailing slashes, ``#sha256=`` on every link), PEP 629
(``pypi:repository-version``), PEP 592 (``data-yanked``) and PEP 658/714 (``data-core-metadata``
only: PEP 714 renamed the older ``data-dist-info-metadata`` and tells servers not to send it, because
pip 22.3 to 23.1 break on it: ``TypeError: unhashable type: 'dict'`` on the JSON key, "inconsistent
Name" on the HTML attribute, pypa/pip#12042 and #12038). Each page has a PEP 691 JSON twin (API 1.1, PEP 700: ``size``,
``upload-time``, ``versions``) as ``index.json`` in the same directory. Every file also carries, in the
JSON only, ``"_cuwheels": {cuda, torch, cxx11_abi, archs}`` (and ``serves``, the torch series of
a stable-ABI build) (PEP 691 reserves ``_`` keys; pip and uv ignore them), read by
tools.selector: its variant (null fields for a file without one, a pure-Python wheel) and the
GPU code its build manifest lists (``archs``: null when the ledger has none on record), so that
the selector never reads a wheel of this index (nor needs its host) for the arch check.

Every file's link is rendered once, in one template pass, however many pages list it; a project
page whose inputs have the fingerprint recorded in the current site is reused instead (``reuse``).
The front page (``index.html``) is for people: a picker (tools.sitegen.picker) that gives the
commands for a platform, torch series, CUDA version and Python, the same commands for every
variant index in plain sections (the page without JavaScript holds them all), the glibc each
index's wheels need, the coverage matrix and what is missing (tools.sitegen.frontpage), and the
links of tools.core.site.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from markupsafe import Markup

from .frontpage import PlanFacts, coverage_matrix, missing_cells, missing_report_pages
from .picker import command, picker_facts, variant_wheels
from .ledger_file import Entry, dump_ledger
from .placement import FileView, is_candidate_build, place_variants, project_name
from tools.plan.table import Table, load_table
from tools.selector.bundle import site_files as selector_site_files
from tools.selector.facts import FACTS_FILE
from .selectorfacts import with_torch_platforms
from . import templating
from .templating import jinja_env
from tools.core import site as public
from tools.core.variant import Variant, uv_index_name
from .wheelread import parse_version

#: PEP 629 / PEP 691 API version of every page: 1.1 is PEP 700 (size, upload-time, versions).
API_VERSION = "1.1"
#: Bumped when what a page says about a file changes (2: the JSON's ``_cuwheels``; 3: no more
#: ``dist-info-metadata``; 4: ``_cuwheels`` on every file, its variant fields null for a file
#: without one, and the HTML's ``data-upload-time`` and ``<meta charset>``); part of every page
#: fingerprint, so a site built before is rendered again rather than reused.
PAGE_FORMAT = 4

_encode_str = json.encoder.encode_basestring_ascii


class _Link(NamedTuple):
    """What a project page's link says about a file (attributes: Jinja's fastest lookup)."""

    filename: str
    url: str
    sha256: str
    requires_python: str | None
    metadata_sha256: str
    upload_time: str
    yanked: str | None


def file_views(entries: Mapping[str, Entry], yanked: Mapping[str, str]) -> dict[str, FileView]:
    """Every file with its project and sort key, in page order (nothing rendered yet)."""
    ordered = list(entries.values())
    # Versions are compared as PEP 440 versions, once per distinct version, not once per file.
    rank = {v: i for i, v in enumerate(sorted({e.version for e in ordered}, key=parse_version))}
    views = [
        FileView(e, project_name(e.name), yanked.get(e.filename), (rank[e.version], e.filename)) for e in ordered
    ]
    # Sorted once here; every page lists its files in this order (a stable subset of it).
    views.sort(key=_sort_key)
    return {f.entry.filename: f for f in views}


def _render_files(files: Iterable[FileView]) -> None:
    """Render the link and JSON object of every file not rendered yet: one template pass."""
    todo = list({id(f): f for f in files if f.html is None}.values())
    links = [
        _Link(f.entry.filename, f.entry.url, f.entry.sha256, f.entry.requires_python,
              f.entry.metadata_sha256, f.entry.upload_time, f.yanked)
        for f in todo
    ]
    lines = jinja_env().get_template("simple_links.html").render(files=links).split("\n")[:-1]
    if len(lines) != len(todo):
        raise AssertionError("a link spans lines: a file name or yank reason has a line break")
    for f, line in zip(todo, lines, strict=True):
        f.html = line
        f.json = _file_json(f.entry, f.yanked)


def _file_json(e: Entry, reason: str | None) -> str:
    """A file's PEP 691/700 object, encoded by hand: json.dumps per file dominates an incremental
    run (test_render checks the output against json.loads)."""
    s = _encode_str
    yanked = "false" if reason is None else (s(reason) if reason else "true")
    requires = f'"requires-python":{s(e.requires_python)},' if e.requires_python else ""
    meta = f'{{"sha256":{s(e.metadata_sha256)}}}'
    # Private build data for tools.selector (PEP 691 reserves "_" keys; installers ignore them), on
    # every file: what the ledger recorded from its build manifest, null where it has none, so that
    # the selector never needs the wheel (nor its host) to check a GPU arch.
    archs = "null" if e.archs is None else json.dumps(e.archs, separators=(",", ":"), sort_keys=True)
    v = e.variant
    if v is None:
        extra = f',"_cuwheels":{{"cuda":null,"torch":null,"cxx11_abi":null,"archs":{archs}}}'
    else:
        abi = "null" if v.cxx11_abi is None else ("true" if v.cxx11_abi else "false")
        # A stable-ABI build also says which torch series it serves (absent otherwise, so that the
        # pages of every other file stay as they were).
        serves = f',"serves":[{",".join(map(s, v.serves))}]' if v.serves else ""
        extra = f',"_cuwheels":{{"cuda":{s(v.cuda)},"torch":{s(v.torch)},"cxx11_abi":{abi},"archs":{archs}{serves}}}'
    return (
        f'{{"filename":{s(e.filename)},"url":{s(e.url)},"hashes":{{"sha256":{s(e.sha256)}}},{requires}'
        f'"core-metadata":{meta},"yanked":{yanked},"size":{int(e.size)},'
        f'"upload-time":{s(e.upload_time)}{extra}}}'
    )


@lru_cache(maxsize=None)
def _normalized_version(text: str) -> str:
    return str(parse_version(text))


def _sort_key(f: FileView) -> tuple:
    return f.sort_key


def json_text(doc: Any) -> str:
    """Compact JSON, as the site's JSON documents are written."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def script_json(doc: Any) -> Markup:
    """JSON to sit inside a ``<script type="application/json">``: ``<``, ``>`` and ``&`` as
    ``\\u`` escapes, so no value can close the element, and not HTML-escaped (a script's text
    is not decoded)."""
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


@lru_cache(maxsize=1)
def render_identity() -> str:
    """A hash of everything that shapes a page besides its files: this module and the templates.

    Part of every page fingerprint, so a change to either renders every page again.
    """
    digest = hashlib.sha256(f"{API_VERSION} {PAGE_FORMAT}".encode())
    templates = [*templating.TEMPLATES.glob("*.html"), *templating.TEMPLATES.glob("*.js")]
    for path in [Path(__file__), *sorted(templates)]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def page_fingerprint(path: str, files: Sequence[FileView]) -> str:
    """What a project page depends on: its path, its files (as published, with yank status).

    A file's variant and archs are not listed: like its bytes, they never change under one sha256.
    """
    digest = hashlib.sha256(f"{render_identity()}\n{path}\n".encode())
    digest.update("\n".join(
        f"{f.entry.filename} {f.entry.sha256} {f.entry.upload_time} {f.entry.url} {f.entry.name} {f.yanked!r}"
        for f in files
    ).encode())
    return digest.hexdigest()


#: Page path -> fingerprint of every project page, kept in the site (so it is swapped with it).
FINGERPRINTS = ".index-fingerprints.json"

#: ``reuse(page path, fingerprint)``: put the previous site's page at that path in the new site
#: and return True when it was rendered from the same inputs; else return False.
Reuse = Callable[[str, str], bool]


def variant_title(variant: Variant) -> str:
    """``CUDA 12.8 · torch 2.8``, or ``any CUDA 12.x · torch 2.8`` for a major-only CUDA, with
    ``(release candidate)`` for a pre-release index."""
    cuda = f"CUDA {variant.cuda}" if variant.exact_cuda else f"any CUDA {variant.cuda}.x"
    return f"{cuda} · torch {variant.torch}" + (" (release candidate)" if variant.prerelease else "")


@dataclass(frozen=True)
class Site:
    """A rendered site: ``pages`` maps each relative path to its bytes."""

    pages: dict[str, bytes]
    projects: tuple[str, ...]
    variant_indexes: tuple[str, ...]
    #: project pages taken unchanged from the previous site (both HTML and JSON count)
    reused: int = 0


def render_site(
    entries: Mapping[str, Entry],
    yanked: Mapping[str, str],
    *,
    table: Table,
    site_url: str | None = None,
    ledger_text: str | None = None,
    pages: dict[str, bytes] | None = None,
    reuse: Reuse | None = None,
    planned: PlanFacts | None = None,
) -> Site:
    """Every page of the site; writes nothing itself (``pages`` may be a dict that writes).

    ``table``: the compatibility table of the run, read by the placement (each torch series'
    C++ ABI), the selector's facts (``selector.json``) and the front page. A project page whose
    fingerprint (page_fingerprint) matches the previous site's is left to ``reuse`` instead of
    being rendered again (it is then not in ``pages``); every other page is rendered, each file's
    link once whatever the number of pages listing it. ``planned``
    (tools.sitegen.frontpage.load_planned) adds to the front page which planned cells have no
    wheel yet (tools.sitegen.frontpage.missing_cells), with the build reports of failed cells as
    pages it links to.
    """
    views = file_views(entries, yanked)
    pages = {} if pages is None else pages
    placed = place_variants(entries.values(), table=table)
    # A build against a torch release candidate is in its pre-release index only (placement).
    combined = [v for v in views.values() if not is_candidate_build(v.entry.version)]
    indexes: list[tuple[str, str | None, list[FileView]]] = [("", None, combined)]
    for variant, placed_entries in placed.items():
        files = sorted((views[e.filename] for e in placed_entries), key=_sort_key)
        indexes.append((f"{variant.index_path}/", variant_title(variant), files))

    fingerprints: dict[str, str] = {}
    todo: list[tuple[str, str, str, list[FileView]]] = []
    roots: list[tuple[str, str | None, list[dict[str, str]]]] = []
    reused = 0
    for prefix, title, files in indexes:
        by_project: dict[str, list[FileView]] = defaultdict(list)
        for f in files:
            by_project[f.project].append(f)
        projects = []
        for normalized in sorted(by_project):
            group = by_project[normalized]
            # The display name is the one the newest release spells (a project may rename itself).
            name = group[-1].entry.name
            projects.append({"name": name, "normalized": normalized})
            base = f"{prefix}simple/{normalized}/"
            fp = page_fingerprint(base, group)
            fingerprints[base + "index.html"] = fingerprints[base + "index.json"] = fp
            if reuse is not None and reuse(base + "index.html", fp) and reuse(base + "index.json", fp):
                reused += 2
            else:
                todo.append((base, normalized, name, group))
        roots.append((prefix, title, projects))

    _render_files(f for *_, group in todo for f in group)
    project_tpl = jinja_env().get_template("simple_project.html")
    for base, normalized, name, group in todo:
        pages[base + "index.html"] = project_tpl.render(
            api_version=API_VERSION, name=name, links=Markup("\n".join(f.html for f in group)),
        ).encode("utf-8")
        versions = [_normalized_version(v) for v in dict.fromkeys(f.entry.version for f in group)]
        pages[base + "index.json"] = (
            f'{{"meta":{{"api-version":"{API_VERSION}"}},"name":{json_text(normalized)},'
            f'"versions":{json_text(versions)},"files":[{",".join(f.json for f in group)}]}}'
        ).encode("utf-8")

    root_tpl = jinja_env().get_template("simple_root.html")
    for prefix, title, projects in roots:
        pages[f"{prefix}simple/index.html"] = root_tpl.render(
            api_version=API_VERSION, projects=projects, variant_title=title
        ).encode("utf-8")
        pages[f"{prefix}simple/index.json"] = json_text({
            "meta": {"api-version": API_VERSION},
            "projects": [{"name": p["name"]} for p in projects],
        }).encode("utf-8")

    wheels = variant_wheels(placed, views)
    variants = [
        {
            "path": variant.index_path,
            "title": variant_title(variant),
            "exact": variant.exact_cuda,
            "uv_name": uv_index_name(variant.index_path),
            "projects": projects,
            "wheels": wheels[variant.index_path],
        }
        for variant, (_prefix, _title, projects) in zip(placed, roots[1:], strict=True)
    ]
    missing = missing_cells(planned, table, placed) if planned is not None else []
    report_pages = missing_report_pages(missing, planned.reports if planned else {})  # sets each failed cell's link
    site = (site_url.rstrip("/") + "/") if site_url else None
    picker = picker_facts(placed, views, table)
    pages["index.html"] = jinja_env().get_template("home.html").render(
        api_version=API_VERSION,
        site_url=site,
        links={"docs": public.DOCS_URL, "repository": public.REPOSITORY_URL,
               "issues": public.ISSUES_URL},
        picker_json=script_json({**picker, "site": site, "missing": bool(missing)}),
        command=command,
        variants=variants,
        matrix=coverage_matrix(views, placed),
        missing=missing,
        file_count=len(entries),
        yanked_count=sum(1 for fn in yanked if fn in entries),
    ).encode("utf-8")
    for name, data in report_pages.items():  # item by item: ``pages`` may write on assignment
        pages[name] = data
    for name, data in selector_site_files(table).items():  # cuwheels-select.pyz and selector.json
        pages[name] = with_torch_platforms(data, table or load_table()) if name == FACTS_FILE \
            else data
    pages["ledger.json"] = (ledger_text if ledger_text is not None else dump_ledger(dict(entries))).encode("utf-8")
    pages[FINGERPRINTS] = json_text(fingerprints).encode("utf-8")
    return Site(
        pages=pages,
        projects=tuple(p["normalized"] for p in roots[0][2]),
        variant_indexes=tuple(v["path"] for v in variants),
        reused=reused,
    )

