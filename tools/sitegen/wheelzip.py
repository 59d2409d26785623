"""A wheel's zip, read as an index must read an untrusted one: members by name with a size cap,
and the member list checked as pip checks it before installing.

``ZipDirectory`` reads the central directory, a few members and the first bytes of others
(``head``: a binary's header) with ``os.pread``, no object per member (with zipfile.ZipFile,
opening a small wheel costs about as much as hashing it); ``ZipfileMembers`` is the zipfile
module's reading with the same three methods, for every layout the
fast reader leaves to it (``Unsupported``). Either way a member is read only when the central
directory says it fits the caller's cap, and inflated never past it, whatever the stream holds.

``check_members`` refuses what pip refuses (a member written outside the install directory, an
encrypted member, no or several ``.dist-info`` directories, one not named for the project, no
METADATA, WHEEL or RECORD) and a name written twice.
"""

from __future__ import annotations

import os
import re
import struct
import zipfile
import zlib

from packaging.utils import canonicalize_name

from tools.core.manifest import MANIFEST_NAME


#: The most compressed bytes ``ZipDirectory.head`` reads for a member's first bytes.
_HEAD_INPUT = 64 << 10


class WheelRejected(Exception):
    """A wheel that can't be indexed; the message is the reason shown to people."""


class Unsupported(Exception):
    """A zip layout the fast reader leaves to the zipfile module (zip64, prepended data...)."""


class ZipDirectory:
    """A wheel's zip central directory: ``members()`` (names and flags) and ``read(name, limit)``.

    It reads only the directory and the members asked for, with ``os.pread`` (the bytes were
    just hashed, so they come from the page cache), and builds no object per member: with
    zipfile.ZipFile, opening a small wheel costs about as much as hashing it. Anything unusual
    raises Unsupported, and the caller falls back to zipfile (ZipfileMembers), the authority on
    what a valid zip is.
    """

    _EOCD = struct.Struct("<4s4H2LH")
    _CENTRAL = struct.Struct("<4s6H3L5H2L")
    _LOCAL = struct.Struct("<4s5H3L2H")

    def __init__(self, fd: int, size: int):
        self._fd = fd
        # The end record is the last 22 bytes unless the zip has a comment (up to 64 KiB). One
        # 32 KiB read usually holds it, the central directory and the .dist-info files (written
        # last in a wheel), so reading METADATA costs no further system call.
        for span in (32 << 10, self._EOCD.size + 0xFFFF + (32 << 10)):
            tail_start = max(0, size - span)
            tail = os.pread(fd, size - tail_start, tail_start)
            end = tail.rfind(b"PK\x05\x06")
            if end >= 0 or tail_start == 0:
                break
        self._tail, self._tail_start = tail, tail_start
        if end < 0 or end + self._EOCD.size > len(tail):
            raise Unsupported("no end of central directory record")
        _sig, _disk, _cd_disk, _n_disk, count, cd_size, cd_offset, _comment = self._EOCD.unpack_from(tail, end)
        if count == 0xFFFF or cd_offset == 0xFFFFFFFF or cd_offset + cd_size != tail_start + end:
            raise Unsupported("zip64 or data before the archive")
        if cd_offset >= tail_start:
            data, pos = tail, cd_offset - tail_start
        else:  # a directory larger than 64 KiB: read it whole
            data, pos = os.pread(fd, cd_size, cd_offset), 0
        stop = pos + cd_size
        self._members: dict[str, tuple[int, int, int, int, int, int]] = {}
        self._listing: list[tuple[str, int]] = []
        for _ in range(count):
            if pos + self._CENTRAL.size > stop:
                raise Unsupported("truncated central directory")
            (sig, _made, _need, flags, method, _time, _date, crc, csize, usize,
             nlen, xlen, clen, _dstart, _iattr, _eattr, offset) = self._CENTRAL.unpack_from(data, pos)
            if sig != b"PK\x01\x02":
                raise Unsupported("bad central directory entry")
            raw = data[pos + self._CENTRAL.size: pos + self._CENTRAL.size + nlen]
            if raw.isascii():  # nearly every name: the same in UTF-8 and cp437, and decoded in C
                name = raw.decode("ascii")
            else:  # cp437's decoder is Python code: only for the names that need it
                name = raw.decode("utf-8" if flags & 0x800 else "cp437")
            self._members[name] = (flags, method, crc, csize, usize, offset)
            self._listing.append((name, flags))
            pos += self._CENTRAL.size + nlen + xlen + clen

    def members(self) -> list[tuple[str, int]]:
        """(name, flag bits) of every member, in archive order, a name written twice twice."""
        return self._listing

    def read(self, name: str, limit: int) -> bytes:
        """A member's bytes, CRC-checked; WheelRejected when it is over ``limit`` bytes."""
        _flags, method, crc, csize, usize, offset = self._members[name]
        _check_size(name, usize, csize, limit)
        at = offset - self._tail_start
        if at >= 0 and at + self._LOCAL.size <= len(self._tail):
            header = self._tail[at: at + self._LOCAL.size]
        else:
            header = os.pread(self._fd, self._LOCAL.size, offset)
        if len(header) < self._LOCAL.size:
            raise Unsupported("truncated local header")
        sig, *_rest, nlen, xlen = self._LOCAL.unpack(header)
        if sig != b"PK\x03\x04":
            raise Unsupported("bad local header")
        start = offset + self._LOCAL.size + nlen + xlen
        at = start - self._tail_start
        if at >= 0 and at + csize <= len(self._tail):
            raw = self._tail[at: at + csize]
        else:
            raw = os.pread(self._fd, csize, start)
        if method == zipfile.ZIP_STORED:
            out = raw
        elif method == zipfile.ZIP_DEFLATED:
            # Never more than the directory says (checked against the limit): a member whose
            # stream inflates further is refused, not inflated.
            out = zlib.decompressobj(-15).decompress(raw, usize + 1)
        else:
            raise Unsupported(f"compression method {method}")
        if len(out) != usize or zlib.crc32(out) != crc:
            raise Unsupported("size or CRC mismatch")
        return out

    def head(self, name: str, size: int) -> bytes:
        """A member's first ``size`` bytes (all of a shorter member), inflating only that far:
        what a binary's header check needs from a library of hundreds of megabytes."""
        _flags, method, _crc, csize, usize, offset = self._members[name]
        header = os.pread(self._fd, self._LOCAL.size, offset)
        if len(header) < self._LOCAL.size:
            raise Unsupported("truncated local header")
        sig, *_rest, nlen, xlen = self._LOCAL.unpack(header)
        if sig != b"PK\x03\x04":
            raise Unsupported("bad local header")
        start = offset + self._LOCAL.size + nlen + xlen
        want = min(size, usize)
        if method == zipfile.ZIP_STORED:
            out = os.pread(self._fd, min(want, csize), start)
        elif method == zipfile.ZIP_DEFLATED:
            # A header of a few KiB deflates into less than that; a stream needing more input than
            # HEAD_INPUT to give it is unusual: zipfile, which streams, reads it instead.
            raw = os.pread(self._fd, min(csize, _HEAD_INPUT), start)
            out = zlib.decompressobj(-15).decompress(raw, want)
        else:
            raise Unsupported(f"compression method {method}")
        if len(out) != want:
            raise Unsupported("member shorter than its directory entry says")
        return out


class ZipfileMembers:
    """The zipfile module's reading of a wheel, with ZipDirectory's ``members()`` and ``read()``."""

    def __init__(self, zf: zipfile.ZipFile):
        self._zf = zf

    def members(self) -> list[tuple[str, int]]:
        """(name, flag bits) of every member, in archive order."""
        return [(info.filename, info.flag_bits) for info in self._zf.infolist()]

    def read(self, name: str, limit: int) -> bytes:
        """A member's bytes, CRC-checked by zipfile; WheelRejected when it is over ``limit`` bytes."""
        info = self._zf.getinfo(name)
        _check_size(name, info.file_size, info.compress_size, limit)
        with self._zf.open(info) as f:
            data = f.read(limit + 1)  # the directory's sizes may lie: never more than the limit
        if len(data) > limit:
            raise WheelRejected(f"{shown(name)} inflates past the {limit}-byte cap the index reads")
        return data

    def head(self, name: str, size: int) -> bytes:
        """A member's first ``size`` bytes (all of a shorter member)."""
        with self._zf.open(name) as f:
            return f.read(size)


def _check_size(name: str, size: int, compressed: int, limit: int) -> None:
    # Deflate never grows data by more than a few bytes per 16 KiB block: a compressed size far
    # over the limit is a lie or a member that is itself too large.
    if size > limit or compressed > limit + (limit >> 6) + 1024:
        raise WheelRejected(
            f"{shown(name)} is {max(size, compressed)} bytes, over the {limit}-byte cap the index reads "
            "(real wheels stay far below it)"
        )


def shown(text: str, limit: int = 120) -> str:
    """``text`` quoted for a message: control characters escaped, cut at ``limit`` characters."""
    quoted = repr(text)
    return quoted if len(quoted) <= limit else quoted[:limit] + "...'"


#: A member path that leaves the directory it is installed into: absolute, or with a ``..`` part.
_ESCAPES = re.compile(r"^/|(?:^|/)\.\.(?:/|$)|\x00")
#: The same where backslashes and drive letters are path syntax too (Windows): pip on Linux writes
#: such a member under a strange name; no real wheel has one.
_ESCAPES_ELSEWHERE = re.compile(r"^\\|^[A-Za-z]:|(?:^|[/\\])\.\.(?:[/\\]|$)")


def check_members(members: list[tuple[str, int]], dist: str) -> tuple[str, bool]:
    """Check a wheel's member list as pip would before installing it: the ``.dist-info``
    directory's name, and whether it holds the build manifest; WheelRejected naming the first
    rule broken.

    pip refuses a member that would be written outside the install directory, an encrypted
    member, a wheel with no or several top-level ``.dist-info`` directories or one not named for
    the project, and one without METADATA, WHEEL or RECORD; so does this index, rather than
    publish a file no installer can install. It also refuses a member that would leave the
    install directory where a backslash or a drive letter is path syntax, and a name written
    twice: which copy an installer takes is up to it.
    """
    seen: set[str] = set()
    info_dirs: set[str] = set()
    for name, flags in members:
        if name in seen:
            raise WheelRejected(f"member {shown(name)} is in the zip twice: installers may take either copy")
        seen.add(name)
        if flags & 0x1:
            raise WheelRejected(f"member {shown(name)} is encrypted: pip can't install the wheel")
        if _ESCAPES.search(name):
            raise WheelRejected(
                f"member {shown(name)} would be written outside the install directory (an absolute or "
                "'..' path): pip refuses the wheel"
            )
        if _ESCAPES_ELSEWHERE.search(name):
            raise WheelRejected(
                f"member {shown(name)} would be written outside the install directory where '\\' or a "
                "drive letter is path syntax (Windows): no real wheel has such a member"
            )
        top = name.partition("/")[0]
        if top.endswith(".dist-info"):
            info_dirs.add(top)
    if len(info_dirs) > 1:
        listed = ", ".join(shown(d) for d in sorted(info_dirs)[:5])
        raise WheelRejected(f"several .dist-info directories ({listed}): pip refuses the wheel")
    if not info_dirs:
        raise WheelRejected("no METADATA: the wheel has no <name>-<version>.dist-info directory")
    (info_dir,) = info_dirs
    if canonicalize_name(info_dir[: -len(".dist-info")].rpartition("-")[0]) != dist:
        raise WheelRejected(
            f"its .dist-info directory {shown(info_dir)} is not named for the project "
            f"({dist!r}-<version>.dist-info): pip refuses the wheel"
        )
    for required in ("METADATA", "WHEEL", "RECORD"):
        if f"{info_dir}/{required}" not in seen:
            raise WheelRejected(f"no {required}: the wheel has no {shown(info_dir + '/' + required)}; "
                                "pip refuses such a wheel")
    return info_dir, f"{info_dir}/{MANIFEST_NAME}" in seen
