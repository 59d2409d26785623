"""Writing the site: pages written as they are rendered into a staging directory, pages of the
current site reused by hard link, and the atomic swap of the new site for the old.

The new site is written into a temporary directory beside INDEX_DIR and swapped in with one
``renameat2(RENAME_EXCHANGE)``: at every moment INDEX_DIR is the whole old site or the whole new
one. The previous site stays at ``.<name>.prev`` until the next run (a rollback is one ``mv``). A
lock file (``.<name>.lock``) keeps two runs off the same site.

Where RENAME_EXCHANGE is missing (not Linux, a kernel before 3.15, a file system without it:
some FUSE and network file systems; renameat2 then fails with ENOSYS, EINVAL or EOPNOTSUPP), no
system call replaces a non-empty directory atomically, and the swap is four steps: the marker
``.<name>.swapping`` is created, INDEX_DIR is renamed to ``.<name>.prev``, the new site is renamed
to INDEX_DIR, the marker is removed. Between the two renames (microseconds) INDEX_DIR does not
exist: a web server serving it answers 404 for that moment. A run killed there leaves the old
site, whole, at ``.<name>.prev``, the new one at ``.<name>.new-*``, and the marker; the ledger
already records the new files (a site lists only what the ledger records, either way). The next
run on that site, before anything else, puts ``.<name>.prev`` back (recover), and publishes the
new files; by hand, ``mv .<name>.prev <name>`` does the same. Without the marker (a site deleted
by hand), ``.<name>.prev`` is never put back.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tools.core.errors import IndexBuildError
from tools.core.regularfile import read_regular
from .render import FINGERPRINTS, Reuse

#: The largest fingerprint record read (a line per page): a larger file is ignored.
MAX_FINGERPRINTS = 256 << 20


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2); False where that isn't supported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def side_path(output_dir: Path, what: str) -> Path:
    """A path beside the site: ``.<name>.<what>`` (never published)."""
    return output_dir.with_name(f".{output_dir.name}.{what}")


def recover(output_dir: Path) -> list[Path]:
    """Repair what an earlier run left beside the site; return the directories to delete.

    A site moved to ``.<name>.prev`` by a run killed before the new one took its place is put
    back (only then: the ``.<name>.swapping`` marker says so; a site deleted by hand stays
    deleted). Staging directories of killed runs, and the previous site kept by the last run, are
    renamed aside (``.<name>.trash-*``) for the caller to delete while it works.
    """
    prev, swapping = side_path(output_dir, "prev"), side_path(output_dir, "swapping")
    if swapping.exists():
        if prev.exists() and not output_dir.exists():
            os.rename(prev, output_dir)
        swapping.unlink()
    if prev.exists():
        os.rename(prev, side_path(output_dir, f"trash-{os.getpid()}-prev"))
    trash = []
    for pattern in (f".{output_dir.name}.new-*", f".{output_dir.name}.trash-*"):
        trash.extend(output_dir.parent.glob(pattern))
    return trash


def swap_in(staging: Path, output_dir: Path) -> None:
    """Make ``staging`` the site at ``output_dir`` in one atomic step.

    The previous site is kept at ``.<name>.prev`` until the next run (a rollback is one ``mv``).
    """
    prev = side_path(output_dir, "prev")
    if not output_dir.exists():
        os.rename(staging, output_dir)
    elif _exchange(staging, output_dir):
        os.rename(staging, prev)  # staging now holds the previous site
    else:
        # No atomic exchange here: a run killed between these two renames leaves the old site
        # at .prev and no site; the marker tells recover() to put it back in the next run.
        swapping = side_path(output_dir, "swapping")
        swapping.touch()
        os.rename(output_dir, prev)
        os.rename(staging, output_dir)
        swapping.unlink()


class WrittenPages(dict):
    """The pages dict render_site fills, writing each page under ``root`` as it is rendered."""

    def __init__(self, root: Path):
        super().__init__()
        self._root = root
        self._made: set[str] = set()

    def __setitem__(self, rel: str, data: bytes) -> None:
        super().__setitem__(rel, data)
        path = os.path.join(self._root, rel)
        parent = os.path.dirname(path)
        if parent not in self._made:
            os.makedirs(parent, exist_ok=True)
            self._made.add(parent)
        try:
            f = open(path, "xb")
        except FileExistsError:
            # A page linked from the current site, then rendered after all: writing through the
            # link would change the current site, so the link goes first.
            os.unlink(path)
            f = open(path, "xb")
        with f:
            f.write(data)


def delete_in_background(paths: Sequence[Path]) -> threading.Thread:
    """Delete directory trees in a thread: file system calls overlap with this run's work."""
    def reap() -> None:
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)

    thread = threading.Thread(target=reap, name="index-reaper", daemon=True)
    thread.start()
    return thread


def check_replaceable(output_dir: Path) -> None:
    """Never replace a directory this module didn't make (a mistyped --site would be lost)."""
    if output_dir.exists() and any(output_dir.iterdir()):
        if not (output_dir / "simple" / "index.html").is_file() or not (output_dir / "ledger.json").is_file():
            raise IndexBuildError(
                f"refusing to replace {output_dir}: it is not empty and is not a site built by tools.index",
                hint="point --site at a new directory or at a previous index",
            )


@contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Hold the lock file ``lock_path`` (a site's or a ledger's), or raise IndexBuildError when
    another build holds it (``filelock``: ``flock`` on POSIX, as before it, ``msvcrt.locking``
    on Windows)."""
    from filelock import FileLock, Timeout

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise IndexBuildError(f"another index build holds {lock_path}", hint="wait for it to finish") from None
    try:
        yield
    finally:
        lock.release()


def reuser(output_dir: Path, staging: Path) -> Reuse:
    """Links the current site's pages whose recorded fingerprint still matches into ``staging``.

    A hard link, not a copy: the page's bytes are neither read nor written again, and the current
    site keeps its own name for them until it is deleted.
    """
    try:
        recorded = json.loads(read_regular(output_dir / FINGERPRINTS, limit=MAX_FINGERPRINTS))
    except (OSError, ValueError, RecursionError):
        recorded = {}  # only a shortcut: without it every page is rendered
    if not isinstance(recorded, dict):
        recorded = {}
    made: set[str] = set()

    def reuse(rel: str, fingerprint: str) -> bool:
        if recorded.get(rel) != fingerprint:
            return False
        target = os.path.join(staging, rel)
        parent = os.path.dirname(target)
        try:
            if parent not in made:
                os.makedirs(parent, exist_ok=True)
                made.add(parent)
            os.link(os.path.join(output_dir, rel), target)
        except OSError:
            return False  # gone, or a file system without hard links: render it
        return True

    return reuse
