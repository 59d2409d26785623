"""A run's artifacts, listed page by page and downloaded by id, never by one cut listing.

``download-artifact`` with ``pattern:`` lists a run's artifacts in one call, and listings cut at
100 or 1000 entries have been reported, silently: a release built on such a listing would leave
wheels out. Here the run's artifacts are listed through the REST API page by page until the
listing's ``total_count`` is reached (fewer is an error, never a silent cut), and each wanted
artifact is downloaded by its id: the API answers with a redirect to storage, followed without
the token. Each zip is extracted into its own folder, refusing members that would land outside
it (absolute paths, ``..``, links), so a hostile artifact can't write elsewhere.
"""

from __future__ import annotations

import io
import stat
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from .ghapi import Api, ApiError

#: The largest artifact extracted (a wheel is under 2 GiB; a shard's cache is a few GB at most).
MAX_ARTIFACT_BYTES = 8 << 30


def list_run_artifacts(api: Api, repo: str, run_id: str) -> list[dict[str, Any]]:
    """Every artifact of the run, page by page; ApiError when the pages hold fewer than the
    listing's ``total_count`` (a cut listing)."""
    out: list[dict[str, Any]] = []
    per = api.limits.artifacts_per_page
    total = None
    for page in range(1, api.limits.artifacts_per_run // per + 2):
        got = api.json("GET", f"repos/{repo}/actions/runs/{run_id}/artifacts"
                              f"?per_page={per}&page={page}")
        total = got["total_count"]
        out.extend(got["artifacts"])
        if len(got["artifacts"]) < per or len(out) >= total:
            break
    if total is None or len(out) < total:
        raise ApiError(f"run {run_id}: listed {len(out)} of its {total} artifacts",
                       hint="a cut listing: re-run the job")
    return [a for a in out if not a.get("expired")]


def extract(data: bytes | BinaryIO, into: Path) -> list[Path]:
    """The zip's files (``data``: its bytes, or a file holding it), written under ``into``;
    ApiError for a member that would land outside it or is not a plain file or folder."""
    written = []
    with zipfile.ZipFile(io.BytesIO(data) if isinstance(data, bytes) else data) as z:
        for info in z.infolist():
            name = PurePosixPath(info.filename)
            kind = (info.external_attr >> 16) & 0o170000
            if name.is_absolute() or ".." in name.parts or "\\" in info.filename \
                    or kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise ApiError(f"artifact member {info.filename!r} is not a plain file inside it",
                               hint="an artifact of this run must hold plain files only")
            if info.is_dir():
                continue
            target = into.joinpath(*name.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, target.open("wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            written.append(target)
    return written


def download(api: Api, repo: str, artifact: dict[str, Any], into: Path) -> list[Path]:
    """One artifact by id, extracted under ``into``."""
    if artifact.get("size_in_bytes", 0) > MAX_ARTIFACT_BYTES:
        raise ApiError(f"artifact {artifact['name']} is over {MAX_ARTIFACT_BYTES} bytes")
    r = api.request("GET", f"repos/{repo}/actions/artifacts/{artifact['id']}/zip",
                    follow=False)
    if r.status == 200:
        return extract(r.body, into)
    if r.status not in (301, 302, 303, 307, 308):
        raise ApiError(f"artifact {artifact['name']}: HTTP {r.status}")
    # storage's address carries its own signature: never send it the token. The zip goes to a
    # file, a chunk at a time (a shard's cache can be gigabytes), then is extracted.
    with tempfile.TemporaryFile() as tmp:
        with urllib.request.urlopen(r.headers["location"], timeout=api.timeout_s) as answer:
            size = 0
            while chunk := answer.read(1 << 20):
                size += len(chunk)
                if size > MAX_ARTIFACT_BYTES:
                    raise ApiError(f"artifact {artifact['name']} is over {MAX_ARTIFACT_BYTES} "
                                   "bytes")
                tmp.write(chunk)
        tmp.seek(0)
        return extract(tmp, into)


def named(api: Api, repo: str, run_id: str, names: list[str]) -> dict[str, dict[str, Any]]:
    """The run's artifacts of these few ``names``, one filtered listing each (``?name=``, an
    exact match): for a job that wants a handful of a large run's artifacts (a cell, its shard
    caches), cheaper than every page of the run's listing."""
    out = {}
    for name in names:
        got = api.json("GET", f"repos/{repo}/actions/runs/{run_id}/artifacts"
                              f"?name={urllib.parse.quote(name)}")
        live = [a for a in got["artifacts"] if a["name"] == name and not a.get("expired")]
        if live:
            out[name] = max(live, key=lambda a: a["id"])  # a re-run's upload is the newest
    return out


def fetch(api: Api, repo: str, run_id: str, names: list[str], into: Path,
          separate: bool = True, few: bool = False) -> tuple[list[str], list[str]]:
    """Download the run's artifacts of these ``names`` (each into its own folder under ``into``
    when ``separate``); (found, missing) names. Artifacts outside ``names`` are left alone.
    ``few``: look each name up (:func:`named`) instead of listing the whole run."""
    by_name = named(api, repo, run_id, names) if few else \
        {a["name"]: a for a in list_run_artifacts(api, repo, run_id)}
    found, missing = [], []
    for name in names:
        if name not in by_name:
            missing.append(name)
            continue
        download(api, repo, by_name[name], into / name if separate else into)
        found.append(name)
    return found, missing
