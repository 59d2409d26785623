"""The one safe reader of a regular file: a FIFO, a device, a directory or a socket put where a
file was expected is refused before a byte is read, and a read has a cap.

A path the project reads may not be what it seems: a recipe, a ledger, a wheel in a wheel
directory or a page of a local site can be a FIFO (opening it waits for a writer, forever), a
device (``/dev/zero`` never ends) or a link to one. So the file is opened with ``O_NONBLOCK``
(the open itself never waits), checked with ``fstat`` on the open descriptor (no window for a
swap between a check and the open), and read at most ``limit + 1`` bytes (a file over the cap
is refused, not read whole).

Each caller turns :class:`NotRegularFile` and :class:`FileTooLarge` (both OSErrors, so a caller
that only says "can't be read" needs nothing more) into its own failure class and words.
Only the standard library is used, in Python 3.8's dialect: this package ships inside the
selector's zipapp.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO, Union

#: What a path may be given as.
PathLike = Union[str, "os.PathLike[str]"]

# Windows has neither O_NONBLOCK nor O_CLOEXEC (nor FIFOs to wait on).
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class NotRegularFile(OSError):
    """The path is a FIFO, a device, a directory or a socket (errno EINVAL, "not a regular
    file"); ``mode`` is its ``st_mode``, ``kind`` says what it is in words."""

    def __init__(self, path: PathLike, mode: int):
        super().__init__(errno.EINVAL, "not a regular file", str(path))
        self.mode = mode
        self.kind = kind_of(mode)


class FileTooLarge(OSError):
    """The regular file holds more than the caller's ``limit`` bytes (errno EFBIG)."""

    def __init__(self, path: PathLike, limit: int):
        super().__init__(errno.EFBIG, f"over {limit} bytes", str(path))
        self.limit = limit


def kind_of(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, as a message says it ("a FIFO", "a device", "a
    directory", "a socket", else "not a regular file")."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_fd(path: PathLike) -> int:
    """A read-only, blocking descriptor of the regular file at ``path`` (the caller closes it);
    NotRegularFile for anything else, the open's own OSError (FileNotFoundError...) when it
    can't be opened."""
    fd = os.open(path, _FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, mode)
        # Back to blocking reads: O_NONBLOCK was for the open (a regular file ignores it anyway).
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: PathLike) -> BinaryIO:
    """The regular file at ``path`` opened for reading in binary mode (see :func:`open_fd`)."""
    fd = open_fd(path)
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: PathLike, limit: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (see :func:`open_fd`); FileTooLarge, before any
    read when its size is over ``limit``, after at most ``limit + 1`` bytes were read when it grew
    past it (None: no cap)."""
    with open_regular(path) as f:
        if limit is not None and os.fstat(f.fileno()).st_size > limit:
            raise FileTooLarge(path, limit)  # a 3 GiB file is refused without reading 256 MiB of it
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise FileTooLarge(path, limit)
    return data
