"""Git sources: pack the paths a recipe names from one commit into a reproducible sdist.

A recipe whose package publishes no sdist names a repository, a whole commit id and the paths to
take (``tools.plan.recipes.source``). :func:`pack` fetches that commit alone (``git fetch
--depth 1`` of its trees, then each path's files in one fetch; git checks every object
against its id, so the commit id names the bytes), and for
a path inside a submodule the commit the superproject's tree records for it, from the URL its
``.gitmodules`` gives at that commit. It reads each file's bytes and mode from git's objects
(``ls-tree``, ``cat-file``: no checkout, no ``.gitattributes`` filters, no hooks) and writes one
tar: the files in name order under ``<name>-<version>/``, folders made explicit, every member
owned by 0 and dated at the commit's time, then gzip with no name and no time. So the same
commit always gives the same tar, whatever machine or git version packs it; the recipe's
``sha256`` is that tar's (before gzip, whose bytes differ between zlib builds), and
:func:`tar_sha256` reads it back from any ``.tar.gz``.

Where the repository can't be reached, git's own ``url.<base>.insteadOf`` setting points it
at a copy (a mirror or a local clone holding the commit): the commit id is checked all the same.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import posixpath
import subprocess
import tarfile
import tempfile
import urllib.parse
from pathlib import Path

from tools.core.errors import SourceError
from tools.plan.recipes.model import Recipe
from tools.plan.recipes.source import GitPath, GitSource

#: Seconds one fetch may take (CUTLASS, the largest submodule a recipe takes, is about 200 MB).
FETCH_TIMEOUT = 1800
#: Members and bytes one packed archive may hold: the extraction step's own caps.
MAX_MEMBERS = 50_000
MAX_BYTES = 1 << 30
#: git without prompts, hooks, credential helpers or the user's templates.
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_NO_LAZY_FETCH": "1", "GIT_ASKPASS": "",
            "SSH_ASKPASS": "", "GIT_TEMPLATE_DIR": "", "GIT_CONFIG_NOSYSTEM": "1"}
_GIT_OPTIONS = ("-c", "core.hooksPath=/dev/null", "-c", "credential.helper=",
                "-c", "protocol.allow=never", "-c", "protocol.https.allow=always",
                "-c", "protocol.file.allow=always")


def _git(repo: Path, *args: str, data: bytes | None = None, timeout: float = 300,
         what: str) -> bytes:
    env = {**os.environ, **_GIT_ENV}
    try:
        done = subprocess.run(["git", *_GIT_OPTIONS, "-C", str(repo), *args], input=data,
                              capture_output=True, timeout=timeout, env=env)
    except FileNotFoundError:
        raise SourceError(f"{what}: git is not installed",
                          hint="install git: a git source is fetched with it") from None
    except subprocess.TimeoutExpired:
        raise SourceError(f"{what}: git {args[0]} took more than {timeout:.0f} s",
                          hint="check the network, or point git at a copy of the repository "
                               "(git config url.<copy>.insteadOf <repository>)") from None
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()
        raise SourceError(f"{what}: git {args[0]} failed: {err[-600:]}",
                          hint="check that the repository holds the commit; where it can't be "
                               "reached, point git at a copy that does (git config "
                               "url.<copy>.insteadOf <repository>)")
    return done.stdout


def fetch_commit(url: str, commit: str, where: Path, what: str) -> Path:
    """A bare repository at ``where`` holding ``commit`` from ``url``, the id checked: its
    trees only (a partial clone, ``blob:none``); :func:`read_files` fetches the files it takes."""
    where.mkdir(parents=True)
    _git(where, "init", "--quiet", "--bare", what=what)
    for key, value in (("remote.origin.url", url), ("remote.origin.promisor", "true"),
                       ("remote.origin.partialclonefilter", "blob:none"),
                       ("core.repositoryformatversion", "1"),
                       ("extensions.partialClone", "origin")):
        _git(where, "config", key, value, what=what)
    _git(where, "fetch", "--quiet", "--depth", "1", "--no-tags", "--filter=blob:none", "origin",
         commit, timeout=FETCH_TIMEOUT, what=what)
    got = _git(where, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}",
               what=what).decode().strip()
    if got != commit:
        raise SourceError(f"{what}: {url} gave {got or 'nothing'} for commit {commit}",
                          hint="the commit must be the whole 40-digit id")
    return where


def submodule_commit(repo: Path, commit: str, path: str, repository: str, what: str
                     ) -> tuple[str, str]:
    """The commit ``commit``'s tree records for the submodule at ``path``, and the https URL
    its ``.gitmodules`` gives (a relative one read against ``repository``)."""
    listed = _git(repo, "ls-tree", "-z", commit, "--", path, what=what).decode()
    fields = listed.rstrip("\0").split(None, 3)
    if len(fields) < 3 or fields[0] != "160000":
        raise SourceError(f"{what}: {path!r} is not a submodule in commit {commit}",
                          hint="name the submodule's path as the repository's .gitmodules "
                               "does, or drop submodule: for a plain folder")
    modules = _git(repo, "ls-tree", commit, "--", ".gitmodules", what=what).split()
    if len(modules) < 3:
        raise SourceError(f"{what}: commit {commit} has no .gitmodules, so no submodule at "
                          f"{path!r}", hint="drop submodule: for a plain folder")
    fetch_blobs(repo, [modules[2].decode()], what)
    names = _git(repo, "config", "--blob", f"{commit}:.gitmodules", "--get-regexp",
                 r"^submodule\..*\.path$", what=what).decode().splitlines()
    name = next((line.split(" ", 1)[0][len("submodule."):-len(".path")] for line in names
                 if line.split(" ", 1)[-1] == path), None)
    if name is None:
        raise SourceError(f"{what}: .gitmodules at {commit} has no submodule at {path!r}")
    url = _git(repo, "config", "--blob", f"{commit}:.gitmodules", "--get",
               f"submodule.{name}.url", what=what).decode().strip()
    if url.startswith(("./", "../")):
        url = urllib.parse.urljoin(repository.rstrip("/") + "/", url)
    if not url.startswith("https://"):
        raise SourceError(f"{what}: the submodule at {path!r} comes from {url!r}, not https",
                          hint="a git source takes submodules over https only")
    return fields[2], url


def read_files(repo: Path, commit: str, path: GitPath, what: str
               ) -> list[tuple[str, int, bytes]]:
    """Every file under ``path.source`` at ``commit``: (its place in the archive, its mode,
    its bytes or, for a link, its target). A submodule inside it is left out (it has its own
    ``paths`` entry when the archive needs it)."""
    spec = [] if path.source == "." else ["--", path.source]
    listed = _git(repo, "ls-tree", "-r", "-z", "--full-tree", commit, *spec, what=what)
    entries = []
    for line in listed.decode("utf-8", "surrogateescape").split("\0"):
        if not line:
            continue
        meta, name = line.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob":
            entries.append((name, int(mode, 8), sha))
    if not entries:
        raise SourceError(f"{what}: {path.source!r} holds no file at commit {commit}",
                          hint="name a path the commit has (git ls-tree -r <commit>)")
    if len(entries) > MAX_MEMBERS:
        raise SourceError(f"{what}: {path.source!r} holds {len(entries)} files, more than the "
                          f"{MAX_MEMBERS} an archive may", hint="take a smaller folder")
    shas = list(dict.fromkeys(sha for _, _, sha in entries))
    fetch_blobs(repo, shas, what)
    blobs = _cat(repo, shas, what)
    out = []
    for (name, mode, sha) in entries:
        if name == path.source:                     # a file: written at its place
            place = path.target
        else:
            rel = name if path.source == "." else name[len(path.source) + 1:]
            place = posixpath.normpath(posixpath.join(path.target, rel))
        out.append((place, mode, blobs[sha]))
    return out


def fetch_blobs(repo: Path, shas: list[str], what: str) -> None:
    """Fetch these files' objects in one request (a lazy fetch would ask once per file)."""
    _git(repo, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--filter=blob:none",
         "--stdin", "origin", data=("\n".join(shas) + "\n").encode(), timeout=FETCH_TIMEOUT,
         what=what)


def _cat(repo: Path, shas: list[str], what: str) -> dict[str, bytes]:
    """The bytes of each blob (``shas`` without repeats), read in one ``git cat-file
    --batch``."""
    raw = _git(repo, "cat-file", "--batch", data=("\n".join(shas) + "\n").encode(),
               what=what)                   # GIT_NO_LAZY_FETCH: every blob was fetched
    out, at, total = {}, 0, 0
    for sha in shas:
        end = raw.index(b"\n", at)
        header = raw[at:end].split()
        if len(header) != 3:
            raise SourceError(f"{what}: the repository did not give object {sha}",
                              hint="check that the repository (or the copy git is pointed "
                                   "at) holds the commit's files")
        size = int(header[2])
        total += size
        if total > MAX_BYTES:
            raise SourceError(f"{what}: more than {MAX_BYTES} bytes of files",
                              hint="take a smaller folder")
        out[sha] = raw[end + 1:end + 1 + size]
        at = end + 1 + size + 1
    return out


def commit_time(repo: Path, commit: str, what: str) -> int:
    """The commit's committer time: every member's date."""
    return int(_git(repo, "show", "-s", "--format=%ct", commit, what=what).decode().strip())


def write_archive(files: list[tuple[str, int, bytes]], top: str, mtime: int, target: Path
                  ) -> str:
    """Write the files under ``top/`` as a .tar.gz at ``target``; the tar's sha256."""
    folders = {top}
    for name, _, _ in files:
        parts = name.split("/")[:-1]
        folders.update(posixpath.join(top, *parts[:i]) for i in range(1, len(parts) + 1))
    members = [(f, None, None) for f in folders] + [
        (posixpath.join(top, name), mode, data) for name, mode, data in files]
    digest = hashlib.sha256()
    partial = target.with_name(target.name + ".part")
    with partial.open("wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0,
                                                   filename="") as gz:
        sink = _Hashing(gz, digest)
        with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for name, mode, data in sorted(members, key=lambda m: m[0]):
                info = tarfile.TarInfo(name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
                if mode is None:
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                elif mode == 0o120000:
                    info.type, info.mode = tarfile.SYMTYPE, 0o777
                    info.linkname = data.decode("utf-8", "surrogateescape")
                    tar.addfile(info)
                else:
                    info.mode = 0o755 if mode & 0o111 else 0o644
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    partial.replace(target)
    return digest.hexdigest()


class _Hashing(io.RawIOBase):
    """A write-only stream that hashes what passes to ``sink``."""

    def __init__(self, sink, digest):
        self.sink, self.digest = sink, digest

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.digest.update(b)
        return self.sink.write(b)


def tar_sha256(archive: Path) -> str:
    """The sha256 of the tar inside a .tar.gz: what a git source's ``sha256`` pins."""
    digest = hashlib.sha256()
    try:
        with gzip.open(archive, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except (OSError, EOFError) as exc:
        raise SourceError(f"{archive}: not a readable .tar.gz ({exc})") from None
    return digest.hexdigest()


def pack(recipe: Recipe, dest_dir: Path) -> Path:
    """Pack ``recipe``'s git source into ``dest_dir/<sdist>``; nothing is left there when any
    step fails. The caller checks the sha256 (:func:`tar_sha256`) as for a downloaded sdist."""
    src = recipe.source
    git: GitSource = src.git
    what = f"{recipe.path} (source.git)"
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / src.sdist
    with tempfile.TemporaryDirectory(dir=dest_dir, prefix=".git-") as tmp:
        root = fetch_commit(git.repository, git.commit, Path(tmp) / "repo", what)
        repos: dict[str | None, tuple[Path, str]] = {None: (root, git.commit)}
        files: dict[str, tuple[int, bytes]] = {}
        for i, path in enumerate(git.paths):
            if path.submodule not in repos:
                commit, url = submodule_commit(root, git.commit, path.submodule,
                                               git.repository, what)
                repos[path.submodule] = (fetch_commit(url, commit, Path(tmp) / f"sub{i}",
                                                      f"{what}, submodule {path.submodule}"),
                                         commit)
            repo, commit = repos[path.submodule]
            for name, mode, data in read_files(repo, commit, path, what):
                if name in files:
                    raise SourceError(f"{what}: paths[{i}] writes {name!r}, which an earlier "
                                      "path wrote too", hint="give the paths places that don't "
                                      "share files")
                files[name] = (mode, data)
        if len(files) > MAX_MEMBERS:
            raise SourceError(f"{what}: {len(files)} files, more than the {MAX_MEMBERS} an "
                              "archive may hold", hint="take smaller folders")
        mtime = commit_time(root, git.commit, what)
        try:
            write_archive([(n, m, d) for n, (m, d) in files.items()],
                          src.sdist.removesuffix(".tar.gz"), mtime, target)
        except BaseException:
            target.with_name(target.name + ".part").unlink(missing_ok=True)
            raise
    return target
