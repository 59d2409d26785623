"""A wheel's zip, read as an index must read an untrusted one: members by name with a size cap,
and the member list checked as pip checks it before installing.

``ZipDirectory`` checks the layout as pip and uv would (every central record, each local header
against its central record, nothing unaccounted for before, between or after the entries), then
reads a few members and the first bytes of others (``head``: a binary's header) with
``os.pread``, no object per member (with zipfile.ZipFile, opening a small wheel costs about as
much as hashing it); ``ZipfileMembers`` is the zipfile module's reading of the checked members,
for a member the fast reader leaves to it (``Unsupported``: bzip2, lzma, a stream that disagrees
with its sizes). Either way a member is read only when the central directory says it fits the
caller's cap, and inflated never past it, whatever the stream holds.

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
#: The largest central directory read (a record is 46 bytes and a name: a wheel of 100,000
#: members has one of about 10 MB); the cap bounds what a crafted end record makes the index read.
MAX_CENTRAL = 64 << 20


class WheelRejected(Exception):
    """A wheel that can't be indexed; the message is the reason shown to people."""


class Unsupported(Exception):
    """A member the fast reader leaves to the zipfile module (a compression it doesn't inflate, a
    stream that disagrees with its sizes)."""


class ZipDirectory:
    """A wheel's zip read as pip and uv read it: ``members()`` (names and flags) and ``read(name, limit)``.

    The constructor checks the whole layout before anything is read from it, refusing
    (WheelRejected, naming the rule) what makes two readers see two archives: it walks every
    central record up to the central directory's end (pip's zipfile does; a reader trusting the
    end record's count would miss the members after it), refuses a count that disagrees with the
    records found, anything before, between or after the archive's parts that its records don't
    account for (prepended data, a local entry no central record names, bytes after the end
    record: uv refuses each), and compares each local header with its central record (name,
    flags, compression method, and CRC-32 and sizes where the local header carries them, else in
    the data descriptor): pip's zipfile refuses a name that differs, uv refuses every difference.
    Members must lie end to end, none overlapping another (a zip bomb's trick). A name must be
    ASCII unless the UTF-8 flag says how to decode it (zipfile decodes it as cp437, uv refuses
    it), and no Info-ZIP Unicode Path extra field may rename it (readers that honour it and
    readers that don't write different files).

    It reads with ``os.pread`` (the bytes were just hashed, so they come from the page cache)
    and builds no object per member; a member whose compression it doesn't inflate (bzip2,
    lzma) or whose stream disagrees with its sizes raises Unsupported from ``read``, and the
    caller reads it with the zipfile module (ZipfileMembers), which names the error.
    """

    _EOCD = struct.Struct("<4s4H2LH")
    _LOCATOR = struct.Struct("<4sLQL")
    _EOCD64 = struct.Struct("<4sQ2H2L4Q")
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
            raise WheelRejected("unreadable zip: no end of central directory record")
        count, cd_size, cd_offset, dir_end = self._end_record(tail, tail_start, end, size)
        if cd_size > MAX_CENTRAL:
            raise WheelRejected(f"unreadable zip: a central directory of {cd_size} bytes, over the {MAX_CENTRAL}-byte "
                                "cap the index reads (a wheel of 100,000 members has one of about 10 MB)")
        if cd_offset + cd_size != dir_end:
            raise WheelRejected(
                f"unreadable zip: {dir_end - cd_offset - cd_size} bytes the end of central directory record doesn't "
                "account for (its central directory's offset and size don't end where the end record starts: data "
                "prepended to the archive, or a lying record): uv refuses such a zip"
            )
        at = cd_offset - tail_start
        data = tail[at: at + cd_size] if at >= 0 else os.pread(fd, cd_size, cd_offset)
        if len(data) != cd_size:
            raise WheelRejected(f"unreadable zip: the file ends inside its central directory (at byte {size})")
        self._members: dict[str, tuple[int, int, int, int, int, int]] = {}
        self._listing: list[tuple[str, int]] = []
        spans = self._walk(data)
        if len(self._listing) != count:
            raise WheelRejected(
                f"unreadable zip: its end of central directory record counts {count} members, but the central "
                f"directory holds {len(self._listing)}: pip's zipfile reads them all, a reader trusting the count "
                "fewer; uv refuses such a zip"
            )
        self._check_tiling(spans, cd_offset)

    def _end_record(self, tail: bytes, tail_start: int, end: int, size: int) -> tuple[int, int, int, int]:
        """(member count, central directory size and offset, where the directory must end) from
        the end record at ``tail[end]`` (and its zip64 record when it has one)."""
        _sig, disk, cd_disk, n_disk, count, cd_size, cd_offset, comment = self._EOCD.unpack_from(tail, end)
        eocd_at = tail_start + end
        after = size - (eocd_at + self._EOCD.size + comment)
        if after != 0:
            raise WheelRejected(
                f"unreadable zip: {after} bytes after the end of central directory record and its comment: "
                "uv refuses such a zip" if after > 0 else
                "unreadable zip: the end of central directory record's comment runs past the end of the file"
            )
        earlier = tail.rfind(b"PK\x05\x06", 0, end)
        while earlier >= 0:
            # Another end record whose comment would also reach the end of the file: readers
            # searching from either side would take different ones.
            if earlier + self._EOCD.size <= len(tail) and \
                    earlier + self._EOCD.size + struct.unpack_from("<H", tail, earlier + 20)[0] == len(tail):
                raise WheelRejected("unreadable zip: two end of central directory records, the last inside the "
                                    "other's comment: readers may take either")
            earlier = tail.rfind(b"PK\x05\x06", 0, earlier)
        if disk or cd_disk or n_disk != count:
            raise WheelRejected("unreadable zip: its end record says it spans several disks: installers read one file")
        locator_at = end - self._LOCATOR.size
        if locator_at < 0 or tail[locator_at: locator_at + 4] != b"PK\x06\x07":
            if count == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
                raise WheelRejected("unreadable zip: a zip64 end record's values without its zip64 locator")
            return count, cd_size, cd_offset, eocd_at
        _sig, disk64, record_at, disks = self._LOCATOR.unpack_from(tail, locator_at)
        record = os.pread(self._fd, self._EOCD64.size, record_at)
        if len(record) < self._EOCD64.size or record[:4] != b"PK\x06\x06" or disk64 or disks != 1:
            raise WheelRejected("unreadable zip: its zip64 end of central directory locator points at no zip64 record")
        _sig, rest, _made, _need, disk, cd_disk, n_disk, count64, cd_size64, cd_offset64 = \
            self._EOCD64.unpack(record)
        if record_at + 12 + rest != tail_start + locator_at:
            raise WheelRejected("unreadable zip: bytes between the zip64 end of central directory record and its "
                                "locator")
        if disk or cd_disk or n_disk != count64:
            raise WheelRejected("unreadable zip: its end record says it spans several disks: installers read one file")
        return count64, cd_size64, cd_offset64, record_at

    def _walk(self, data: bytes) -> list[tuple[int, int, str]]:
        """Read every central record of ``data`` (the whole central directory) into the member
        table, each checked against its local header; (local header offset, end of the entry,
        name) of each, for _check_tiling.

        One loop with the common case inline (an ASCII name, no extra field, a local header that
        agrees field for field): a wheel has thousands of members, and this runs for each one.
        """
        central, local = self._CENTRAL.unpack_from, self._LOCAL.unpack_from
        tail, tail_start = self._tail, self._tail_start
        members, listing, spans = self._members, self._listing, []
        pos, size = 0, len(data)
        while pos < size:
            if pos + 46 > size or data[pos: pos + 4] != b"PK\x01\x02":
                raise WheelRejected(f"unreadable zip: byte {pos} of the central directory starts no central record")
            (_sig, _made, _need, flags, method, _time, _date, crc, csize, usize,
             nlen, xlen, clen, disk, _iattr, _eattr, offset) = central(data, pos)
            head = pos + 46
            pos = head + nlen + xlen + clen
            if pos > size:
                raise WheelRejected("unreadable zip: a central record runs past the central directory's end")
            raw = data[head: head + nlen]
            name = raw.decode("ascii") if raw.isascii() else _decode_name(raw, flags)
            if xlen or disk:
                usize, csize, offset = _central_extra(data[head + nlen: head + nlen + xlen], name, disk,
                                                      (usize, csize, offset))
            at = offset - tail_start
            header = tail[at: at + 30 + nlen] if at >= 0 else os.pread(self._fd, 30 + nlen, offset)
            fields = local(header) if len(header) == 30 + nlen else None
            if fields is not None and fields[0] == b"PK\x03\x04" and fields[2:4] == (flags, method) \
                    and fields[6:10] == (crc, csize, usize, nlen) and not flags & 0x8 and header[30:] == raw:
                start = offset + 30 + nlen + fields[10]  # nearly every member: the headers agree field for field
                stop = start + csize
            else:
                start, stop = self._check_local(raw, name, flags, method, crc, csize, usize, offset)
            members.setdefault(name, (flags, method, crc, csize, usize, start))
            listing.append((name, flags))
            spans.append((offset, stop, name))
        return spans

    def _check_local(self, raw_name: bytes, name: str, flags: int, method: int, crc: int, csize: int, usize: int,
                     offset: int) -> tuple[int, int]:
        """Compare the local header at ``offset`` with the member's central record; (where its
        data starts, where its entry ends: after the data and its data descriptor, if any)."""
        header = self._bytes(offset, self._LOCAL.size + len(raw_name) + 256)
        if len(header) < self._LOCAL.size or header[:4] != b"PK\x03\x04":
            raise WheelRejected(f"unreadable zip: no local header where the central record of {shown(name)} puts it")
        (_sig, _need, lflags, lmethod, _time, _date, lcrc, lcsize, lusize,
         nlen, xlen) = self._LOCAL.unpack_from(header)
        local_name = header[self._LOCAL.size: self._LOCAL.size + nlen]
        start = offset + self._LOCAL.size + nlen + xlen
        if local_name != raw_name:
            raise WheelRejected(
                f"unreadable zip: the local header of {shown(name)} names "
                f"{shown(local_name.decode('utf-8', 'backslashreplace'))}: pip and uv refuse such a wheel"
            )
        differ = _differ(name, "flags", hex(lflags), hex(flags)) if lflags != flags else None
        differ = differ or (_differ(name, "compression method", lmethod, method) if lmethod != method else None)
        if flags & 0x8:  # the CRC and sizes follow the data, in a data descriptor
            stop = self._check_descriptor(name, start + csize, crc, csize, usize)
        else:
            if lcsize == 0xFFFFFFFF or lusize == 0xFFFFFFFF:
                at = self._LOCAL.size + nlen
                extra = header[at: at + xlen] if at + xlen <= len(header) else self._bytes(offset + at, xlen)
                lusize, lcsize = _local_zip64(_extra_fields(extra, name).get(0x0001, b""), name, lusize, lcsize)
            differ = differ or (_differ(name, "CRC-32", lcrc, crc) if lcrc != crc else None)
            differ = differ or (_differ(name, "compressed size", lcsize, csize) if lcsize != csize else None)
            differ = differ or (_differ(name, "uncompressed size", lusize, usize) if lusize != usize else None)
            stop = start + csize
        if differ:
            raise WheelRejected(differ)
        return start, stop

    def _check_descriptor(self, name: str, at: int, crc: int, csize: int, usize: int) -> int:
        """Where the data descriptor at ``at`` ends; WheelRejected unless it states the central
        record's CRC-32 and sizes (in 4- or 8-byte fields, after an optional signature)."""
        data = self._bytes(at, 24)
        body = data[4:] if data[:4] == b"PK\x07\x08" else data
        skip = len(data) - len(body)
        for fmt in ("<3L", "<LQQ"):
            width = struct.calcsize(fmt)
            if len(body) >= width and struct.unpack_from(fmt, body) == (crc, csize, usize):
                return at + skip + width
        raise WheelRejected(f"unreadable zip: the data descriptor of {shown(name)} disagrees with its central record "
                            "(CRC-32 or sizes): uv refuses such a wheel")

    def _check_tiling(self, spans: list[tuple[int, int, str]], cd_offset: int) -> None:
        """WheelRejected unless the entries lie end to end from byte 0 to the central directory:
        no gap (a local entry no central record names, data prepended) and no overlap."""
        expected, before = 0, None
        for offset, stop, name in sorted(spans):
            if offset < expected:
                raise WheelRejected(
                    f"unreadable zip: member {shown(name)} overlaps {shown(before or '')} (entries sharing bytes: "
                    "a zip bomb's trick): uv refuses such a zip, as does the zipfile module of newer Python releases"
                )
            if offset > expected:
                self._gap(expected, offset)
            expected, before = stop, name
        if expected > cd_offset:
            raise WheelRejected(f"unreadable zip: member {shown(before or '')} runs into the central directory")
        if expected < cd_offset:
            self._gap(expected, cd_offset)

    def _gap(self, start: int, stop: int) -> None:
        what = ("a local entry no central record names" if self._bytes(start, 4) == b"PK\x03\x04"
                else "data no central record accounts for")
        raise WheelRejected(
            f"unreadable zip: bytes {start} to {stop} hold {what}: a reader of local headers (uv, streaming a "
            "download) sees another archive than one reading the central directory (pip); uv refuses such a zip"
        )

    def _bytes(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset``: from the tail already read when they lie in it."""
        at = offset - self._tail_start
        if at >= 0 and at + size <= len(self._tail):
            return self._tail[at: at + size]
        return os.pread(self._fd, size, offset)

    def members(self) -> list[tuple[str, int]]:
        """(name, flag bits) of every member, in archive order, a name written twice twice."""
        return self._listing

    def read(self, name: str, limit: int) -> bytes:
        """A member's bytes, CRC-checked; WheelRejected when it is over ``limit`` bytes."""
        _flags, method, crc, csize, usize, start = self._members[name]
        _check_size(name, usize, csize, limit)
        raw = self._bytes(start, csize)
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
        _flags, method, _crc, csize, usize, start = self._members[name]
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


def _differ(name: str, field: str, local: object, central: object) -> str:
    return (f"unreadable zip: the local header of {shown(name)} says {field} {local}, its central record {central}: "
            "readers of local headers and of the central directory see different members; uv refuses such a wheel")


def _central_extra(extra: bytes, name: str, disk: int, values: tuple[int, int, int]) -> tuple[int, int, int]:
    """A central record's sizes and offset (``values``) with those marked 0xFFFFFFFF read from
    its zip64 extra field; WheelRejected for an Info-ZIP Unicode Path field or another disk."""
    if disk:
        raise WheelRejected(f"member {shown(name)} is on another disk: installers read one file")
    fields = _extra_fields(extra, name)
    if 0x7075 in fields:
        raise WheelRejected(
            f"member {shown(name)} has an Info-ZIP Unicode Path extra field: readers that honour it and readers "
            "that don't write different files; no wheel builder writes one"
        )
    if 0x0001 in fields:
        return _zip64_values(fields[0x0001], name, *values)
    return values


def _decode_name(raw: bytes, flags: int) -> str:
    """A member name as every installer decodes it; WheelRejected where they would differ."""
    if raw.isascii():  # nearly every name: the same in UTF-8 and cp437, and decoded in C
        return raw.decode("ascii")
    if not flags & 0x800:
        raise WheelRejected(
            f"member {raw!r} has a non-ASCII name without the UTF-8 flag: pip's zipfile decodes it as cp437, "
            "uv refuses it; a wheel builder sets the flag"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WheelRejected(f"member {raw!r} has the UTF-8 flag but a name that is not UTF-8") from None


def _extra_fields(extra: bytes, name: str) -> dict[int, bytes]:
    """The extra fields of a header by id; WheelRejected for a field running past the others'
    end or an id given twice (readers would take either)."""
    fields: dict[int, bytes] = {}
    pos = 0
    while pos + 4 <= len(extra):
        kind, length = struct.unpack_from("<2H", extra, pos)
        if pos + 4 + length > len(extra) or kind in fields:
            raise WheelRejected(f"unreadable zip: the extra fields of {shown(name)} are malformed (zipfile refuses "
                                "them)")
        fields[kind] = extra[pos + 4: pos + 4 + length]
        pos += 4 + length
    return fields


def _local_zip64(field: bytes, name: str, usize: int, csize: int) -> tuple[int, int]:
    """A local header's sizes with those it marks 0xFFFFFFFF read from its zip64 extra field,
    which in a local header holds both sizes, uncompressed first (APPNOTE 4.5.3)."""
    if len(field) < 16:
        return _zip64_values(field, name, usize, csize, 0)[:2]
    full_usize, full_csize = struct.unpack_from("<2Q", field)
    return (full_usize if usize == 0xFFFFFFFF else usize), (full_csize if csize == 0xFFFFFFFF else csize)


def _zip64_values(field: bytes, name: str, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    """The sizes and offset a zip64 extra field gives for those its header marks 0xFFFFFFFF."""
    values = [usize, csize, offset]
    pos = 0
    for i, value in enumerate(values):
        if value == 0xFFFFFFFF:
            if pos + 8 > len(field):
                raise WheelRejected(f"unreadable zip: the zip64 extra field of {shown(name)} lacks a size or offset")
            values[i] = struct.unpack_from("<Q", field, pos)[0]
            pos += 8
    return values[0], values[1], values[2]


class ZipfileMembers:
    """The zipfile module's reading of a wheel ZipDirectory has checked (its ``members()``): for
    a member ZipDirectory doesn't inflate (bzip2, lzma) or whose stream disagrees with its sizes,
    the zipfile module reads it and names the error."""

    def __init__(self, zf: zipfile.ZipFile, members: list[tuple[str, int]]):
        self._zf = zf
        self._listing = members

    def members(self) -> list[tuple[str, int]]:
        """(name, flag bits) of every member, in archive order, as ZipDirectory read them."""
        return self._listing

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
    twice, or two names of one path (``a/./b.py`` and ``a/b.py``): which copy an installer takes
    is up to it.
    """
    seen: set[str] = set()
    paths: dict[str, str] = {}
    info_dirs: set[str] = set()
    for name, flags in members:
        if name in seen:
            raise WheelRejected(f"member {shown(name)} is in the zip twice: installers may take either copy")
        seen.add(name)
        # "a/./b.py", "a//b.py" and "a/b.py" are one file once installed: which copy is written
        # last is up to the installer (uv refuses such a wheel).
        path = name.rstrip("/")
        if "//" in path or "/./" in path or path.startswith("./") or path.endswith("/.") or path == ".":
            path = "/".join(part for part in path.split("/") if part not in ("", "."))
        if (other := paths.setdefault(path, name)) != name:
            raise WheelRejected(f"members {shown(other)} and {shown(name)} are installed to one path: installers may "
                                "write either copy; uv refuses such a wheel")
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
