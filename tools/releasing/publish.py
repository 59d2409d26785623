"""A run's release on GitHub, and the releases the index lacks, through the paced API.

**The release** of a run (``upload_release``): found by its tag (a re-run finds its own) or
created as a draft, so nobody sees half of it; every file the release lacks under the same name
and size is uploaded (what an earlier attempt sent is not sent again); a release that would hold
more than ``assets_per_release`` files is refused before anything is sent, naming the limit;
then the release is made public, and its asset list, read page by page, must hold every file.

**The releases the index lacks** (``releases_to_index``): every public release whose tag is a
run's (``wheels-<run id>``), page by page (not the newest 30), with the wheels among its assets
that the ledger has no entry for, oldest run first; the assets of a release the ledger's
addresses already name are not listed again (``ledger_tags``).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from tools.sitegen.ledger_file import Ledger
from .ghapi import Api, ApiError

#: A run's release tag (the release job names it from the run id alone).
RUN_TAG = re.compile(r"wheels-(\d+)")
#: The release a published file's address downloads from.
_DOWNLOAD = re.compile(r"/releases/download/([^/]+)/")


@dataclass(frozen=True)
class Uploaded:
    """What ``upload_release`` did."""

    tag: str
    release_id: int
    sent: int
    kept: int


def upload_release(api: Api, repo: str, tag: str, target: str, files: list[Path],
                   notes: str) -> Uploaded:
    """Put ``files`` in the release ``tag`` of ``repo`` (see the module docstring)."""
    names = [f.name for f in files]
    if len(set(names)) != len(names):
        raise ApiError(f"{tag}: two files of the same name", hint="one wheel per cell")
    r = api.request("GET", f"repos/{repo}/releases/tags/{urllib.parse.quote(tag)}")
    if r.status == 404:
        drafts = [x for x in api.pages(f"repos/{repo}/releases") if x["tag_name"] == tag]
        release = drafts[0] if drafts else api.json(
            "POST", f"repos/{repo}/releases", {"tag_name": tag, "target_commitish": target,
                                               "name": tag, "body": notes, "draft": True,
                                               "make_latest": "false"})
    elif r.status == 200:
        release = r.json()
    else:
        raise ApiError(f"GET release {tag}: HTTP {r.status}")
    rid = release["id"]
    have = {a["name"]: a for a in api.pages(f"repos/{repo}/releases/{rid}/assets")
            if a.get("state") == "uploaded"}
    limit = api.limits.assets_per_release
    total = len(set(have) | set(names))
    if total > limit:
        raise ApiError(f"{tag}: {total} assets, over GitHub's {limit} per release",
                       hint="the schedule keeps a run within it; plan the run again")
    upload = release["upload_url"].split("{", 1)[0]
    sent = kept = 0
    for f in files:
        size = f.stat().st_size
        if f.name in have and have[f.name]["size"] == size:
            kept += 1
            continue
        if f.name in have:  # a partial upload of an earlier attempt
            api.request("DELETE", f"repos/{repo}/releases/assets/{have[f.name]['id']}")
        r = api.request("POST", f"{upload}?name={urllib.parse.quote(f.name)}",
                        data=f.read_bytes(),
                        headers={"Content-Type": "application/octet-stream"})
        if r.status >= 400:
            raise ApiError(f"upload {f.name} to {tag}: HTTP {r.status}: {r.body[:200]!r}")
        sent += 1
    api.json("PATCH", f"repos/{repo}/releases/{rid}", {"draft": False})
    now = {a["name"] for a in api.pages(f"repos/{repo}/releases/{rid}/assets")
           if a.get("state") == "uploaded"}
    missing = sorted(set(names) - now)
    if missing:
        raise ApiError(f"{tag} lacks {len(missing)} file(s) after the upload: "
                       + ", ".join(missing[:5]), hint="re-run the job: it sends what is missing")
    return Uploaded(tag, rid, sent, kept)


def ledger_tags(ledger: Ledger) -> frozenset[str]:
    """The run releases the ledger's files (published or removed) were published from: the tag
    in each file's address. A publish indexes a release whole or deploys nothing, so a release
    named here has nothing left to index."""
    urls = [e.url for e in ledger.files.values()] + [r.entry.url for r in ledger.removed.values()]
    return frozenset(m.group(1) for u in urls if (m := _DOWNLOAD.search(u)))


def releases_to_index(api: Api, repo: str, indexed: set[str],
                      skip_tags: frozenset[str] = frozenset()) -> list[tuple[str, list[str]]]:
    """Per public run release, oldest run first, the wheels it holds that ``indexed`` (the
    ledger's file names, published or removed) lacks; releases with none are left out. A release
    in ``skip_tags`` (:func:`ledger_tags`) is not even listed: the plan job asks this every hour,
    and the releases pile up."""
    found = []
    for rel in api.pages(f"repos/{repo}/releases"):
        m = RUN_TAG.fullmatch(rel.get("tag_name", ""))
        if rel.get("draft") or not m or rel["tag_name"] in skip_tags:
            continue
        wheels = sorted(a["name"] for a in api.pages(f"repos/{repo}/releases/{rel['id']}/assets")
                        if a.get("state") == "uploaded" and a["name"].endswith(".whl")
                        and a["name"] not in indexed)
        if wheels:
            found.append((int(m.group(1)), rel["tag_name"], wheels))
    return [(tag, wheels) for _, tag, wheels in sorted(found)]
