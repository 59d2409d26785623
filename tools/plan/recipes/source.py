"""A recipe's ``source:``: the registry's sdist, or an archive packed from one git commit.

Most packages publish an sdist on the registry, and a recipe names it (``pypi``, ``version``,
``sdist``, ``sha256``, ``url``). Some publish none: FlashAttention 3 lives in the ``hopper/``
folder of the flash-attention repository, and PyPI's ``flash-attn-3`` holds only a yanked
placeholder. For those a recipe names a **git source** instead (``project``, ``version``,
``sdist``, ``sha256`` and ``git:``): the repository, one whole commit id, and the paths the
archive holds, each from that commit or from a submodule at the commit the tree records for it.
The source step packs those paths into ``<sdist>`` (``tools.pipeline.gitsource``: fixed order,
owners and times, so the same commit always gives the same tar) and checks the tar's sha256
against the recipe's, as it checks a downloaded sdist's; from there the build is the same.
"""

from __future__ import annotations

import posixpath
import re
import urllib.parse
from dataclasses import dataclass

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..schema import Problems

#: Control characters: refused in a URL or a path (and in a requirement, ``model``).
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class GitPath:
    """One path a git source's archive holds: ``source`` in the repository (or in the
    submodule at ``submodule``), written at ``target`` in the archive ("." for its top)."""

    source: str
    target: str
    submodule: str | None = None


@dataclass(frozen=True)
class GitSource:
    """The commit a git source is packed from."""

    repository: str
    commit: str
    paths: tuple[GitPath, ...]
    reason: str

    @property
    def location(self) -> str:
        """The commit as pip spells a VCS requirement's location (PEP 610's ``url`` and
        ``commit_id`` in one): what manifests and bills of materials name as the source."""
        return f"git+{self.repository}@{self.commit}"


@dataclass(frozen=True)
class Source:
    """What a recipe builds: the registry's sdist, or (``git``) an archive of one commit."""

    #: The distribution's name: the registry's project, or a git source's ``project``.
    pypi: str
    version: str
    sdist: str
    sha256: str
    #: The sdist's URL; for a git source, :attr:`GitSource.location`.
    url: str
    git: GitSource | None = None


def parse_source(p: Problems, raw: object) -> Source | None:
    """``source``: its version a PEP 440 version, its sdist that version's; then either the
    registry's URL (``pypi``, ``url``) or a git source (``project``, ``git``), not both."""
    m = p.shaped(raw, "source")
    if m is None:
        return None
    given = set(raw) if isinstance(raw, dict) else set()
    registry, git = {"pypi", "url"} & given, {"project", "git"} & given
    if registry and git:
        p.add("source", f"has {', '.join(sorted(registry))} (a registry sdist) and "
              f"{', '.join(sorted(git))} (a git source)",
              "keep pypi and url for a registry sdist, or project and git for a git source")
        return None
    if not git and registry != {"pypi", "url"} or git and git != {"project", "git"}:
        missing = sorted(({"project", "git"} if git else {"pypi", "url"}) - given)
        p.add("source", f"lacks {', '.join(missing)}",
              "a registry sdist needs pypi and url; a git source needs project and git")
        return None
    if not all(k in m for k in ("version", "sdist", "sha256", *(git or registry))):
        return None                 # the schema named what it refused
    try:
        Version(m["version"])
    except InvalidVersion:
        p.add("source.version", f"{m['version']!r} is not a PEP 440 version",
              "write the release as the registry lists it, e.g. \"1.7.0\"")
    name = m["project"] if git else m["pypi"]
    # A plain file name ending in .tar.gz (the schema's: it becomes a path in the work folder,
    # written there and deleted on a hash mismatch), of this project and version.
    stem = m["sdist"].removesuffix(".tar.gz")
    if canonicalize_name(stem.rsplit("-", 1)[0]) != canonicalize_name(name) or \
            stem.rsplit("-", 1)[-1] != m["version"]:
        p.add("source.sdist", f"{m['sdist']!r} is not the sdist of {name} {m['version']}",
              f"expected {name.replace('-', '_')}-{m['version']}.tar.gz")
    if not git:
        _source_url(p, m["url"], m["sdist"])
        return Source(m["pypi"], m["version"], m["sdist"], m["sha256"], m["url"])
    source = _git(p, m["git"])
    return source and Source(m["project"], m["version"], m["sdist"], m["sha256"],
                             source.location, source)


def _source_url(p: Problems, url: str, sdist: str) -> None:
    """``source.url``: https, a host alone (no user, password or port), no query or fragment,
    ending in the sdist's name. Which host it may be is the download's to check
    (``tools.pipeline.source``)."""
    fix = "copy the URL from the registry's file listing"
    problem = _url_problem(url)
    if problem:
        p.add("source.url", problem, fix)
    elif not _is_https(url) or not url.endswith("/" + sdist):
        p.add("source.url", "must be an https URL ending in the sdist file name", fix)


def _is_https(url: str) -> bool:
    """An https URL with a host (``url`` already passed :func:`_url_problem`)."""
    parts = urllib.parse.urlsplit(url)
    return parts.scheme == "https" and bool(parts.hostname)


def _url_problem(url: str) -> str | None:
    """Why ``url`` is not a plain URL (a host alone: no user, password or port; no query or
    fragment), or None; the scheme is the caller's to check."""
    if CONTROL_RE.search(url) or " " in url:
        return "contains spaces or control characters"
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:  # a bracketed host that is no IPv6 address
        return f"{url!r} is not a URL ({exc})"
    if "@" in parts.netloc:
        return (f"{url!r} has a user name or password before '@': the download would go to "
                f"{parts.hostname!r}")
    if ":" in parts.netloc.rsplit("]", 1)[-1]:
        return f"{url!r} names a port"
    if parts.query or parts.fragment or "?" in url or "#" in url:
        return f"{url!r} has a query or fragment"
    return None


def _git(p: Problems, raw: object) -> GitSource | None:
    """``source.git``: an https repository, a whole commit id, and paths that stay inside the
    repository and the archive, each written once."""
    m = p.shaped(raw, "source.git")
    if m is None or not all(k in m for k in ("repository", "commit", "paths", "reason")):
        return None
    p.reason(m["reason"], "source.git.reason")
    problem = _url_problem(m["repository"]) or (
        None if _is_https(m["repository"]) else f"{m['repository']!r} is not an https URL")
    if problem:
        p.add("source.git.repository", problem,
              "write the https URL git clones, e.g. https://github.com/OWNER/NAME")
    paths, targets = [], set()
    for i, entry in enumerate(m["paths"]):
        where = f"source.git.paths[{i}]"
        e = p.shaped(entry, where)
        if e is None or "from" not in e or "to" not in e:
            continue
        bad = [(k, e[k]) for k in ("from", "to", "submodule") if k in e
               and _path_problem(e[k])]
        for key, value in bad:
            p.add(f"{where}.{key}", f"{value!r} {_path_problem(value)}",
                  "write a relative path with '/' between its parts, e.g. csrc/cutlass/include "
                  "(or . for the whole)")
        if bad:
            continue
        # Nested places are allowed (the package's folder at the top, a submodule's headers
        # below it); a file two paths would both write is refused when the archive is packed.
        target = posixpath.normpath(e["to"])
        if target in targets:
            p.add(f"{where}.to", f"{e['to']!r} is the place of a path given before it",
                  "give every path its own place in the archive")
        targets.add(target)
        paths.append(GitPath(posixpath.normpath(e["from"]), target,
                             posixpath.normpath(e["submodule"]) if "submodule" in e else None))
    return GitSource(m["repository"], m["commit"], tuple(paths), m["reason"])


def _path_problem(path: str) -> str | None:
    """Why ``path`` can't name a place inside a repository or an archive, or None."""
    if not path or CONTROL_RE.search(path) or "\\" in path:
        return "is empty or has control characters or backslashes"
    if path.startswith("/") or ".." in path.split("/"):
        return "leaves the tree (absolute, or '..')"
    return None
