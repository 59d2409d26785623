"""Source step: fetch the recipe's sdist, verify its sha256, extract it safely, apply patches.

The sdist comes from the registry URL in the recipe, or from ``--sdist PATH`` / ``--sdist-dir DIR``
on machines without internet. Nothing is compiled from bytes whose hash differs from the recipe's,
from an archive member that would land outside the extraction directory, or from a tree a patch
didn't apply to cleanly.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tools.core.digest import sha256_file
from tools.core.errors import PatchError, SourceError
from tools.plan.recipe import Patch, Recipe

#: Download copy size.
_CHUNK = 1 << 20


@dataclass(frozen=True)
class PreparedSource:
    """An extracted, patched source tree ready to build."""

    sdist: Path
    sha256: str
    tree: Path
    patches: tuple[str, ...]


def fetch_sdist(recipe: Recipe, dest_dir: Path, *, sdist: Path | None = None,
                sdist_dir: Path | None = None, timeout: float = 120) -> Path:
    """Put the recipe's sdist in ``dest_dir`` (from a path, a directory or the registry) and
    verify its sha256; a mismatch raises SourceError naming both hashes."""
    src = recipe.source
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / src.sdist
    if sdist is not None:
        if not sdist.is_file():
            raise SourceError(f"--sdist {sdist}: no such file")
        shutil.copyfile(sdist, target)
        origin = str(sdist)
    elif sdist_dir is not None:
        local = sdist_dir / src.sdist
        if not local.is_file():
            raise SourceError(f"{src.sdist} is not in --sdist-dir {sdist_dir}",
                              hint=f"download it where there is internet: {src.url}")
        shutil.copyfile(local, target)
        origin = str(local)
    else:
        origin = src.url
        partial = target.with_suffix(".part")
        try:
            with urllib.request.urlopen(src.url, timeout=timeout) as resp, partial.open("wb") as fh:
                shutil.copyfileobj(resp, fh, _CHUNK)
        except (urllib.error.URLError, OSError) as exc:
            partial.unlink(missing_ok=True)
            raise SourceError(f"downloading {src.url} failed: {exc}",
                              hint="on a machine without internet pass --sdist PATH or "
                                   "--sdist-dir DIR") from None
        partial.replace(target)
    actual = sha256_file(target)
    if actual != src.sha256:
        target.unlink()
        raise SourceError(
            f"{src.sdist} from {origin} has sha256 {actual}, but "
            f"{recipe.path} (source.sha256) says {src.sha256}",
            hint="if the registry file really changed, check why before updating the recipe; "
                 "otherwise the download is corrupt or not the file the recipe means")
    return target


def _check_member(member: tarfile.TarInfo, dest: Path, archive: Path) -> None:
    name = member.name
    pure = PurePosixPath(name)
    if pure.is_absolute() or name.startswith("/"):
        raise SourceError(f"{archive.name}: member {name!r} has an absolute path",
                          hint="refusing to extract: the archive is hostile or broken")
    if ".." in pure.parts:
        raise SourceError(f"{archive.name}: member {name!r} contains '..'",
                          hint="refusing to extract: it would write outside the source tree")
    if member.isdev() or member.isfifo():
        raise SourceError(f"{archive.name}: member {name!r} is a device or FIFO",
                          hint="refusing to extract: an sdist holds only files and folders")
    if member.issym() or member.islnk():
        link = PurePosixPath(member.linkname)
        base = pure.parent if member.issym() else PurePosixPath()
        resolved = (dest / base / link).resolve() if not link.is_absolute() else Path(link)
        if link.is_absolute() or not resolved.is_relative_to(dest.resolve()):
            raise SourceError(f"{archive.name}: link {name!r} -> {member.linkname!r} points "
                              "outside the source tree",
                              hint="refusing to extract: the archive is hostile or broken")


def extract_sdist(archive: Path, dest: Path) -> Path:
    """Extract a .tar.gz safely into ``dest`` and return its single top-level directory.

    Absolute paths, ``..``, devices and links pointing outside are refused before anything is
    written.
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            for member in members:
                _check_member(member, dest, archive)
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise SourceError(f"{archive.name} is not a readable .tar.gz: {exc}") from None
    tops = [p for p in dest.iterdir()]
    if len(tops) != 1 or not tops[0].is_dir():
        raise SourceError(f"{archive.name}: expected one top-level directory, found "
                          f"{', '.join(sorted(p.name for p in tops)) or 'nothing'}")
    return tops[0]


def apply_patches(tree: Path, patches: tuple[Patch, ...]) -> tuple[str, ...]:
    """Apply patches in order with ``patch -p1``; each is dry-run first so a failing one leaves
    the tree as the previous patch left it and the error names the patch and the hunk."""
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
        subprocess.run(base, cwd=tree, capture_output=True, text=True, check=True, timeout=120)
        applied.append(patch.file)
    return tuple(applied)


def prepare_source(recipe: Recipe, workdir: Path, *, sdist: Path | None = None,
                   sdist_dir: Path | None = None) -> PreparedSource:
    """Fetch, verify, extract and patch: the whole source step."""
    archive = fetch_sdist(recipe, workdir / "sdist", sdist=sdist, sdist_dir=sdist_dir)
    tree = extract_sdist(archive, workdir / "src")
    applied = apply_patches(tree, recipe.patches)
    return PreparedSource(archive, recipe.source.sha256, tree, applied)
