"""Source step: fetch the recipe's sdist, verify its sha256, extract it safely, apply patches.

The sdist comes from the registry URL in the recipe, or, for a git source, is packed from its
commit (``tools.pipeline.gitsource``), or from ``--sdist PATH`` / ``--sdist-dir DIR`` on
machines without internet. Nothing is compiled from bytes whose hash differs from the recipe's,
from an archive that would write outside its extraction directory or past the caps below, or
from a tree a patch didn't apply to cleanly.

Extraction does not lean on ``tarfile``'s own filters: their checks resolve paths with
``os.path.realpath``, and in a Python without the CVE-2025-4517 fix (3.11.7 is one) a chain of
links longer than PATH_MAX gets ``filter="data"`` to write outside. ``tarfile`` only reads the
headers here, and the archive is read twice. The first pass reads only the headers and refuses, before anything is
written, an archive past :data:`MAX_MEMBERS` members or :data:`MAX_EXTRACTED_BYTES` bytes, a
member that is absolute, has ``..``, is a device or FIFO or lies below a link, and every link
that leaves the tree, goes through another link or is not an earlier file (hard links). The
second pass writes, the host's way (``tools.hostplat``, ``HostOS.write_tree``): every folder
is opened below the one before with ``O_NOFOLLOW``, every file is created with ``O_EXCL`` and
symbolic links are made last, so that no write can follow a link whatever the archive holds.
Windows has neither ``dir_fd`` nor ``O_NOFOLLOW``: there each member is written by its path
under the new, empty extraction folder, which the same rules keep safe (no member below a link,
links made last).
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import stat
import subprocess
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.core.digest import sha256_file
from tools.core.httpclient import PYPI_FILES, download
from tools.core.errors import PatchError, SourceError
from tools.hostplat import HostOS, current
from tools.hostplat.base import FILE, FOLDER, HARDLINK, SYMLINK, TreeMember
from tools.plan.recipes.model import Patch, Recipe
from .gitsource import pack, tar_sha256

#: The largest sdist taken, downloaded or local (flash-attn 2.8.3's, the largest a recipe
#: builds, is 8.5 MB).
MAX_SDIST_BYTES = 128 << 20
#: Seconds one sdist download may take in all (at 1 MB/s the largest allowed one takes 2 min).
DOWNLOAD_DEADLINE = 300.0
#: Members one sdist may hold (flash-attn 2.8.3's has 7,533).
MAX_MEMBERS = 50_000
#: Bytes one sdist may extract to (flash-attn 2.8.3's extracts to 93 MB; gzip can turn 2 MB
#: into 2 GiB).
MAX_EXTRACTED_BYTES = 1 << 30
#: Characters of a member's path or a link's target (the longest in a built sdist is 257).
MAX_PATH_CHARS = 1024
#: Folders one member path may go down (the deepest in a built sdist is 11).
MAX_DEPTH = 64
#: Bytes of headers (long names, pax records) the whole archive may carry, and one read of the
#: archive may ask for: ``tarfile`` reads a header extension whole, at the size the header says.
MAX_HEADER_BYTES = 64 << 20
MAX_READ = 1 << 20


@dataclass(frozen=True)
class PreparedSource:
    """An extracted, patched source tree ready to build."""

    sdist: Path
    sha256: str
    tree: Path
    patches: tuple[str, ...]


def _plain_name(name: str, where: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise SourceError(f"{where}: {name!r} is not a plain file name",
                          hint="the sdist is written into the work folder under its own name: "
                               "no folders, no '..'")
    return name


def fetch_sdist(recipe: Recipe, dest_dir: Path, *, sdist: Path | None = None,
                sdist_dir: Path | None = None, timeout: float = 120,
                deadline: float = DOWNLOAD_DEADLINE, max_bytes: int = MAX_SDIST_BYTES,
                origins: tuple[str, ...] = (PYPI_FILES,)) -> Path:
    """Put the recipe's sdist in ``dest_dir`` (from a path, a directory or the registry) and
    verify its sha256; a mismatch raises SourceError naming both hashes.

    A download must come from one of ``origins`` (PyPI's file host), take at most ``deadline``
    seconds in all (``timeout`` per read) and ``max_bytes`` bytes; a local file is held to the
    same size.
    """
    src = recipe.source
    name = _plain_name(src.sdist, f"{recipe.path} (source.sdist)")
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / name
    if sdist is not None or sdist_dir is not None:
        local = sdist if sdist is not None else sdist_dir / name
        if not local.is_file():
            if sdist is not None:
                raise SourceError(f"--sdist {sdist}: no such file")
            raise SourceError(f"{name} is not in --sdist-dir {sdist_dir}",
                              hint=f"download it where there is internet: {src.url}")
        if local.stat().st_size > max_bytes:
            raise SourceError(f"{local}: {local.stat().st_size} bytes, more than the "
                              f"{max_bytes} an sdist may have", hint="check that it is the sdist "
                              f"{recipe.path} names ({name})")
        shutil.copyfile(local, target)
        origin = str(local)
    elif src.git is not None:
        origin = f"the tar packed from {src.url}"
        pack(recipe, dest_dir)
    else:
        origin = src.url
        partial = target.with_name(name + ".part")
        try:
            with partial.open("wb") as fh:
                download(src.url, fh, origins=origins, error=SourceError, max_bytes=max_bytes,
                         deadline=deadline, timeout=timeout,
                         hint="on a machine without internet pass --sdist PATH or --sdist-dir DIR")
        except SourceError:
            partial.unlink(missing_ok=True)
            raise
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise SourceError(f"writing {partial} failed: {exc.strerror}") from None
        partial.replace(target)
    if src.git is not None:
        try:
            actual = tar_sha256(target)
        except SourceError:
            target.unlink()
            raise
    else:
        actual = sha256_file(target)
    if actual != src.sha256:
        target.unlink()
        raise SourceError(
            f"{name} from {origin} has sha256 {actual}{' (its tar)' if src.git else ''}, but "
            f"{recipe.path} (source.sha256) says {src.sha256}",
            hint=("the recipe's sha256 is of the tar python -m tools.recipe archive packs from "
                  "its commit: check the commit and paths, then write the one it prints"
                  if src.git else "if the registry file really changed, check why before "
                  "updating the recipe; otherwise the download is corrupt or not the file the "
                  "recipe means"))
    return target


class _Headers:
    """The decompressed archive as ``tarfile`` reads it, with no single read over
    :data:`MAX_READ` bytes and, while ``budget`` is set, no more than ``budget`` bytes read in
    all (the first pass reads only headers: member data is skipped by seeking)."""

    def __init__(self, raw: gzip.GzipFile, archive: Path):
        self.raw, self.archive = raw, archive
        self.budget: int | None = MAX_HEADER_BYTES

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes; SourceError for an unbounded or oversized read."""
        if size is None or size < 0 or size > MAX_READ:
            raise SourceError(f"{self.archive.name}: a tar header asks to read "
                              f"{'everything' if size is None or size < 0 else size} bytes at "
                              f"once (at most {MAX_READ} are read)",
                              hint="refusing to extract: the archive is hostile or broken")
        data = self.raw.read(size)
        if self.budget is not None:
            self.budget -= len(data)
            if self.budget < 0:
                raise SourceError(f"{self.archive.name}: more than {MAX_HEADER_BYTES} bytes of "
                                  "tar headers", hint="refusing to extract: the archive is "
                                                      "hostile or broken")
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move in the decompressed stream (forward by decompressing, back by starting over)."""
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        """The position in the decompressed stream."""
        return self.raw.tell()


def _refuse(archive: Path, what: str, hint: str = "refusing to extract: the archive is "
                                                  "hostile or broken") -> SourceError:
    return SourceError(f"{archive.name}: {what}", hint=hint)


def _shown(name: str) -> str:
    """A member's name or a link's target as a message quotes it: the first 200 characters."""
    return repr(name) if len(name) <= 200 else f"{name[:200]!r}..."


def _path_parts(name: str, archive: Path, what: str) -> tuple[str, ...]:
    """A member path (or a hard link's target) as its parts; SourceError for anything that could
    name a place outside the extraction folder."""
    if len(name) > MAX_PATH_CHARS:
        raise _refuse(archive, f"{what} {_shown(name)} is {len(name)} characters long (at most "
                               f"{MAX_PATH_CHARS})")
    if name.startswith("/"):
        raise _refuse(archive, f"{what} {_shown(name)} has an absolute path")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise _refuse(archive, f"{what} {_shown(name)} contains '..'",
                      "refusing to extract: it would write outside the source tree")
    if len(parts) > MAX_DEPTH:
        raise _refuse(archive, f"{what} {_shown(name)} is {len(parts)} folders deep (at most "
                               f"{MAX_DEPTH})")
    return parts


def _kind(member: tarfile.TarInfo, archive: Path) -> str:
    if member.isdev() or member.isfifo():
        raise _refuse(archive, f"member {_shown(member.name)} is a device or FIFO",
                      "refusing to extract: an sdist holds only files and folders")
    if member.sparse is not None:
        raise _refuse(archive, f"member {_shown(member.name)} is a sparse file")
    if member.isdir():
        return FOLDER
    if member.isreg():
        return FILE
    if member.issym():
        return SYMLINK
    if member.islnk():
        return HARDLINK
    raise _refuse(archive, f"member {_shown(member.name)} has tar type {member.type!r}, not a "
                           "file, folder or link")


def link_problem(parts: tuple[str, ...], target: str, is_link: Callable[[str], bool]
                 ) -> str | None:
    """What is wrong with a symbolic link at ``parts`` (below the extraction folder) to
    ``target``, in words, or None: the link must resolve, walked part by part from its folder,
    to a place in the tree, and no part on the way may be a link itself (``is_link`` of the
    path so far), so that the text of the target is all there is to its meaning. The sdist's
    rule, and the patched tree's (:func:`check_patched_tree`)."""
    if not target or len(target) > MAX_PATH_CHARS or "\0" in target:
        return "has an empty or overlong target"
    if target.startswith("/"):
        return "points outside the source tree"
    here = list(parts[:-1])
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not here:
                return "points outside the source tree"
            here.pop()
            continue
        here.append(part)
        if is_link("/".join(here)):
            return f"goes through the link {_shown('/'.join(here))}: links to links are refused"
    return None


def _check_symlink(entry: TreeMember, kinds: dict[str, str], archive: Path) -> None:
    """A symbolic link of the archive must keep :func:`link_problem`'s rule, through the
    archive's own links."""
    problem = link_problem(entry.parts, entry.member.linkname,
                           lambda name: kinds.get(name) == SYMLINK)
    if problem:
        raise _refuse(archive, f"link {_shown(entry.name)} -> {_shown(entry.member.linkname)} "
                               f"{problem}")


def _hard_link_source(member: tarfile.TarInfo, name: str, archive: Path) -> tuple[str, ...]:
    """The parts of the path a hard link names (from the top of the archive, as tar writes it)."""
    try:
        return _path_parts(member.linkname, archive, f"hard link {_shown(name)} ->")
    except SourceError:
        raise _refuse(archive, f"hard link {_shown(name)} -> {_shown(member.linkname)} points "
                               "outside the source tree") from None


def _plan(tar: tarfile.TarFile, archive: Path) -> tuple[list[TreeMember], str]:
    """Every member to write, in archive order, and the one top-level folder; SourceError for
    the first rule the archive breaks. Nothing is written."""
    entries: list[TreeMember] = []
    kinds: dict[str, str] = {}
    count = total = 0
    while (member := tar.next()) is not None:
        count += 1
        if count > MAX_MEMBERS:
            raise _refuse(archive, f"more than {MAX_MEMBERS} members")
        kind = _kind(member, archive)
        parts = _path_parts(member.name, archive, "member")
        if not parts:
            if kind == FOLDER:
                continue  # "./": the extraction folder itself
            raise _refuse(archive, f"member {_shown(member.name)} has no name")
        if kind == FILE:
            total += member.size
            if total > MAX_EXTRACTED_BYTES:
                raise _refuse(archive, f"extracts to more than {MAX_EXTRACTED_BYTES} bytes (at "
                                       f"member {_shown(member.name)})")
        name = "/".join(parts)
        if name in kinds:
            if kind == FOLDER and kinds[name] == FOLDER:
                continue
            raise _refuse(archive, f"member {_shown(name)} appears twice ({kinds[name]}, then "
                                   f"{kind})")
        kinds[name] = kind
        entries.append(TreeMember(parts, kind, member, _hard_link_source(member, name, archive)
                              if kind == HARDLINK else ()))
    files_seen: set[str] = set()
    for entry in entries:
        for depth in range(1, len(entry.parts)):
            above = "/".join(entry.parts[:depth])
            if kinds.get(above, FOLDER) != FOLDER:
                raise _refuse(archive, f"member {_shown(entry.name)} lies below {_shown(above)}, a "
                                       f"{kinds[above]}: nothing is written through a link")
        if entry.kind == SYMLINK:
            _check_symlink(entry, kinds, archive)
        elif entry.kind == HARDLINK:
            if "/".join(entry.source) not in files_seen:
                raise _refuse(archive, f"hard link {_shown(entry.name)} -> "
                                       f"{_shown(entry.member.linkname)} points outside the "
                                       "source tree (not to a file before it in the archive)")
        if entry.kind == FILE:
            files_seen.add(entry.name)
    tops = sorted({e.parts[0] for e in entries})
    if len(tops) != 1:
        raise SourceError(f"{archive.name}: expected one top-level directory, found "
                          f"{', '.join(tops[:10]) or 'nothing'}")
    if kinds.get(tops[0], FOLDER) != FOLDER:
        raise SourceError(f"{archive.name}: expected one top-level directory, found "
                          f"{tops[0]}, a {kinds[tops[0]]}")
    return entries, tops[0]


def extract_sdist(archive: Path, dest: Path, *, host: HostOS = current()) -> Path:
    """Extract a .tar.gz safely into ``dest`` and return its single top-level directory.

    Every rule of the module's docstring is checked before anything is written; whatever fails,
    ``dest`` is left absent rather than half-written. ``host`` (default: this machine's)
    writes the members its safe way (``HostOS.write_tree``: by descriptor on Linux, by path on
    Windows).
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    try:
        with gzip.GzipFile(archive, "rb") as raw:
            stream = _Headers(raw, archive)
            with tarfile.open(fileobj=stream, mode="r:") as tar:
                entries, top = _plan(tar, archive)
                stream.budget = None  # the sizes were checked; now the data is read
                try:
                    host.write_tree(tar, entries, dest)
                except OSError as exc:
                    raise SourceError(f"{archive.name}: extracting into {dest} failed: "
                                      f"{exc.strerror}") from None
    except SourceError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise SourceError(f"{archive.name} is not a readable .tar.gz: {exc}") from None
    return dest / top


#: The rule a patched tree is held to, as its errors name it.
LINK_RULE = ("the sdist's link rule: a symbolic link resolves inside the source tree without "
             "going through another link, and a tree holds only files, folders and links")


def check_patched_tree(tree: Path) -> str | None:
    """The first thing in ``tree`` the sdist's rules refuse, in words (a symbolic link that
    breaks :func:`link_problem`'s rule, a device, FIFO or socket), or None. Links are never
    followed; paths are named from the extraction folder, as the sdist's are."""
    top = tree.name

    def is_link(name: str) -> bool:
        return (tree.parent / name).is_symlink()

    for folder, dirs, files in os.walk(tree):
        for name in sorted(dirs + files):
            path = Path(folder, name)
            parts = (top, *path.relative_to(tree).parts)
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                target = os.readlink(path)
                problem = link_problem(parts, target, is_link)
                if problem:
                    return f"link {_shown('/'.join(parts))} -> {_shown(target)} {problem}"
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                return f"{_shown('/'.join(parts))} is a device, FIFO or socket"
    return None


def apply_patches(tree: Path, patches: tuple[Patch, ...]) -> tuple[str, ...]:
    """Apply patches in order with ``patch -p1``; each is dry-run first so a failing one leaves
    the tree as the previous patch left it and the error names the patch and the hunk.

    After each, the tree is held to the sdist's link rules (:func:`check_patched_tree`): a git
    patch makes symbolic links (``new file mode 120000``). A patch that breaks them, or fails
    once applied for real, is a PatchError naming it, and the tree is removed (links not
    followed), so that nothing builds from it."""
    applied = []
    for patch in patches:
        base = ["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch",
                "-i", str(patch.path.resolve())]
        dry = subprocess.run([*base, "--dry-run"], cwd=tree, capture_output=True, text=True,
                             timeout=120)
        if dry.returncode != 0:
            out = (dry.stdout + dry.stderr).strip()
            hunks = re.findall(r"Hunk #\d+ FAILED at \d+", out)
            files = re.findall(r"^(?:patching|checking) file (\S+)", out, re.M)
            where = f"{', '.join(hunks)} in {files[-1]}" if hunks and files else out[-600:]
            raise PatchError(f"{patch.file} does not apply to {tree.name}: {where}",
                             hint=f"refresh the patch against this version of the source "
                                  f"(patches/{patch.file}), or drop it if upstream fixed it")
        real = subprocess.run(base, cwd=tree, capture_output=True, text=True, timeout=120)
        problem = check_patched_tree(tree)
        if problem or real.returncode != 0:
            shutil.rmtree(tree, ignore_errors=True)
        if problem:
            raise PatchError(f"{patch.file} (patches/{patch.file}) applied to {tree.name} "
                             f"makes {problem} ({LINK_RULE})",
                             hint="a recipe patch changes files in the tree; remove the link "
                                  "from the patch (or make it point inside the tree)")
        if real.returncode != 0:
            out = (real.stdout + real.stderr).strip()
            raise PatchError(f"{patch.file} passed its dry run but failed applied to "
                             f"{tree.name}: {out[-600:]}",
                             hint=f"refresh the patch (patches/{patch.file}): a later part of "
                                  "it depends on what an earlier part makes")
        applied.append(patch.file)
    return tuple(applied)


def prepare_source(recipe: Recipe, workdir: Path, *, sdist: Path | None = None,
                   sdist_dir: Path | None = None) -> PreparedSource:
    """Fetch, verify, extract and patch: the whole source step."""
    archive = fetch_sdist(recipe, workdir / "sdist", sdist=sdist, sdist_dir=sdist_dir)
    tree = extract_sdist(archive, workdir / "src")
    applied = apply_patches(tree, recipe.patches)
    return PreparedSource(archive, recipe.source.sha256, tree, applied)
