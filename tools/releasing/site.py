"""The live site a run merges into: its address (GitHub's Pages API), its ledger and its failed
tries, read the one way every job reads them.

THE LEDGER: the copy the live site publishes (every deployment ships the ledger it was built
from), so a run merges into exactly what is published. Only a site that has never been deployed
starts from the repository's ``index/ledger.json`` (or an empty ledger). Anything else (an
unreachable site, a site that serves an index but no ledger) stops the run: an index rebuilt from
a stale ledger would drop files. The failed tries (``attempts.json``) are optional: a site without
them (a first deployment, or one from before them) means every cell is tried.

Each fetch asks past the Pages CDN's cache (a query string of the run, ``Cache-Control:
no-cache``), so no copy older than the previous deployment is read.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from tools.core.errors import PlanError
from tools.sitegen.ledger_file import dump_ledger
from .ghapi import Api, ApiError

#: Seconds one fetch of the site may take, and how many times a transient failure is retried.
FETCH_TIMEOUT_S = 120
FETCH_TRIES = 5
_SETTINGS = 'in Settings → Pages, set the source to "GitHub Actions"'


def find_site(api: Api, repo: str) -> str:
    """The Pages site's address, without a trailing slash; ApiError naming the setting when the
    repository has no Pages site or builds it from a branch (deploy-pages can't deploy there)."""
    r = api.request("GET", f"repos/{repo}/pages")
    if r.status == 404:
        raise ApiError(f"GitHub Pages is not set up for {repo}; {_SETTINGS}")
    if r.status >= 400:
        raise ApiError(f"GET repos/{repo}/pages: HTTP {r.status}")
    page = r.json()
    if page.get("build_type") == "legacy":
        raise ApiError(f"{repo}'s Pages site is built from a branch; {_SETTINGS}")
    return str(page["html_url"]).rstrip("/")


def _get(url: str, tag: str) -> tuple[int, bytes]:
    """(status, body) of one fetch past the CDN's cache, a transient failure retried."""
    req = urllib.request.Request(f"{url}?run={tag}", headers={"Cache-Control": "no-cache"})
    for attempt in range(1, FETCH_TRIES + 1):
        try:
            with urllib.request.urlopen(req, timeout=FETCH_TIMEOUT_S) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as err:
            if err.code < 500 or attempt == FETCH_TRIES:
                return err.code, b""
        except (urllib.error.URLError, OSError):
            if attempt == FETCH_TRIES:
                raise
    raise AssertionError("unreachable")


def fetch_state(site: str, into: Path, repo_ledger: Path, tag: str) -> list[str]:
    """Write the live ``ledger.json`` (see the module docstring for where it comes from) and,
    when the site has one, ``attempts.json`` into ``into``; the lines saying what was read.
    PlanError when the ledger can't be trusted."""
    into.mkdir(parents=True, exist_ok=True)
    lines = []
    url = f"{site}/ledger.json"
    code, body = _get(url, tag)
    if code == 200:
        (into / "ledger.json").write_bytes(body)
        lines.append(f"ledger: {url}")
    elif code == 404:
        if _get(f"{site}/simple/", tag)[0] == 200:
            raise PlanError(f"{site} serves an index but no ledger.json; refusing to rebuild it "
                            "without one", hint="restore the site's ledger.json (the last "
                                                "deployment's), then run again")
        if repo_ledger.is_file():
            (into / "ledger.json").write_bytes(repo_ledger.read_bytes())
            lines.append(f"first deployment: starting from the repository's {repo_ledger.name}")
        else:
            (into / "ledger.json").write_text(dump_ledger({}), encoding="utf-8")
            lines.append("first deployment: starting from an empty ledger")
    else:
        raise PlanError(f"{url} answered HTTP {code}; not publishing from an unknown ledger",
                        hint="run again when the site answers")
    url = f"{site}/attempts.json"
    code, body = _get(url, tag)
    target = into / "attempts.json"
    if code == 200:
        target.write_bytes(body)
        lines.append(f"attempts: {url}")
    elif code == 404:
        target.unlink(missing_ok=True)
        lines.append("no attempts.json yet: every cell is tried")
    else:
        raise PlanError(f"{url} answered HTTP {code}", hint="run again when the site answers")
    return lines
