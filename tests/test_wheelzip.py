"""tools.sitegen.wheelzip: a wheel's zip read with caps, by the fast reader and by the zipfile
module alike, and its member list checked as pip checks it."""

from __future__ import annotations

import re
import struct
import zipfile

import pytest
from packaging.utils import canonicalize_name
from wheelfactory import make_wheel

from tests.fixtures.hostile.make_wheels import WHEELS
from tests.fixtures.hostile.make_zips import ZIPS
from tools.sitegen import wheelzip
from tools.sitegen.wheelzip import WheelRejected, check_members


def test_zip_directory_agrees_with_zipfile(tmp_path):
    path = make_wheel(tmp_path, "ext", "1.0", local="cu128.torch2.8", manifest={"cuda": "12.8", "torch": "2.8"},
                      payload=b"x" * 1000)
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("ext/caf\u00e9.py", b"# a name that is not ASCII: zipfile flags it UTF-8\n")
    with open(path, "rb") as f, zipfile.ZipFile(path) as zf:
        fast = wheelzip.ZipDirectory(f.fileno(), path.stat().st_size)
        slow = wheelzip.ZipfileMembers(zf, fast.members())
        assert fast.members() == [(i.filename, i.flag_bits) for i in zf.infolist()]
        assert ("ext/caf\u00e9.py", 0x800) in fast.members()
        assert all(fast.read(n, 1 << 20) == slow.read(n, 1 << 20) == zf.read(n) for n in zf.namelist())


@pytest.mark.parametrize("reader", ["fast", "zipfile"])
def test_a_member_over_the_cap_is_refused_before_it_is_inflated(tmp_path, reader):
    path = make_wheel(tmp_path, "ext", "1.0", payload=b"\0" * 100_000)
    member = "ext/_payload.bin"
    with open(path, "rb") as f, zipfile.ZipFile(path) as zf:
        members = (wheelzip.ZipDirectory(f.fileno(), path.stat().st_size) if reader == "fast"
                   else wheelzip.ZipfileMembers(zf, []))
        assert len(members.read(member, 100_000)) == 100_000
        with pytest.raises(WheelRejected, match=f"'{member}' is 100000 bytes, over the 99999-byte cap"):
            members.read(member, 99_999)


@pytest.mark.parametrize("members, message", [
    ([("a/../../x", 0)], r"'a/\.\./\.\./x' would be written outside the install directory \(an absolute"),
    ([("/etc/x", 0)], "outside the install directory"),
    ([("x\x00y", 0)], "outside the install directory"),
    ([("C:x", 0)], "drive letter is path syntax"),
    ([("a\\..\\x", 0)], "drive letter is path syntax"),
    ([("demo-1.0.dist-info/METADATA", 1)], "is encrypted"),
    ([("demo/a.py", 0), ("demo/a.py", 0)], "is in the zip twice"),
    ([("demo/a.py", 0)], "^no METADATA"),
    ([("demo-1.0.dist-info/METADATA", 0), ("x-1.0.dist-info/WHEEL", 0)], "several .dist-info directories"),
    ([("demox-1.0.dist-info/METADATA", 0)], "is not named for the project"),
    ([("demo-1.0.dist-info/METADATA", 0), ("demo-1.0.dist-info/RECORD", 0)], "^no WHEEL"),
    ([("demo-1.0.dist-info/METADATA", 0), ("demo-1.0.dist-info/WHEEL", 0)], "^no RECORD"),
])
def test_member_lists_pip_refuses(members, message):
    with pytest.raises(WheelRejected, match=message):
        check_members(members, "demo")


def test_a_member_list_pip_installs():
    names = ["demo/__init__.py", "demo/a..b.py", "Demo-1.0+cu128.dist-info/METADATA", "Demo-1.0+cu128.dist-info/WHEEL",
             "Demo-1.0+cu128.dist-info/RECORD", "demo-1.0.data/scripts/x"]
    assert check_members([(n, 0x800) for n in names], "demo") == ("Demo-1.0+cu128.dist-info", False)
    names.append("Demo-1.0+cu128.dist-info/cuwheels.json")
    assert check_members([(n, 0) for n in names], "demo") == ("Demo-1.0+cu128.dist-info", True)


#: The hostile wheels refused by what this module reads; the others are refused by their name or
#: by what tools.sitegen.wheelread makes of the members' contents (tests/test_wheelread.py).
#: Wheels refused for their binaries (tools.sitegen.wheelread.check_binaries), not their zip.
BINARY_LEVEL = ("x86_64-binary-in-aarch64-wheel", "elf-binary-in-windows-wheel", "arm64-dll-in-amd64-wheel",
                "truncated-elf-header")
ZIP_LEVEL = [h for h in WHEELS if h.id not in ("escape-sequence-in-name", "metadata-names-another-project",
                                               "metadata-not-utf8", "manifest-not-an-object", "wheel-version-2",
                                               "manifest-wrong-types", "manifest-nested-100000-deep")
             and h.id not in BINARY_LEVEL]


@pytest.mark.parametrize("hostile", ZIP_LEVEL, ids=[h.id for h in ZIP_LEVEL])
def test_both_readers_refuse_each_hostile_zip(tmp_path, hostile):
    """The fast reader and the zipfile module, each alone, refuse the same way (or the fast one
    leaves the file to zipfile, which refuses it)."""
    path = hostile.make(tmp_path)
    size = path.stat().st_size

    def read(members):
        info_dir, _ = check_members(members.members(), canonicalize_name(path.name.split("-")[0]))
        for name in ("WHEEL", "METADATA", "cuwheels.json"):
            try:
                members.read(f"{info_dir}/{name}", 4 << 20 if name == "METADATA" else 1 << 20)
            except KeyError:
                pass

    with open(path, "rb") as f:
        try:
            read(wheelzip.ZipDirectory(f.fileno(), size))
        except wheelzip.Unsupported:
            pass  # left to zipfile
        except WheelRejected as exc:
            assert re.search(hostile.expect, str(exc)), str(exc)
        else:
            pytest.fail("the fast reader accepted it")
        with pytest.raises((WheelRejected, zipfile.BadZipFile)) as exc:
            with zipfile.ZipFile(f) as zf:
                read(wheelzip.ZipfileMembers(zf, [(i.filename, i.flag_bits) for i in zf.infolist()]))
    if exc.type is WheelRejected:
        assert re.search(hostile.expect, str(exc.value)), str(exc.value)
    else:
        assert re.search(hostile.expect, f"unreadable zip: {exc.value}")


# --------------------------------------------------------------------------- the layout, checked as pip and uv would

#: The hostile zips (tests/fixtures/hostile/make_zips.py) refused by this module: the others are
#: refused for their METADATA or manifest (tests/test_wheelread.py).
LAYOUT = [h for h in ZIPS if not h.id.startswith(("metadata-", "manifest-"))]


def _check(path):
    with open(path, "rb") as f:
        directory = wheelzip.ZipDirectory(f.fileno(), path.stat().st_size)
        check_members(directory.members(), canonicalize_name(path.name.split("-")[0]))
        return directory


@pytest.mark.parametrize("hostile", LAYOUT, ids=[h.id for h in LAYOUT])
def test_a_zip_whose_layout_says_two_things_is_refused_naming_the_rule(tmp_path, hostile):
    path = hostile.make(tmp_path)
    with pytest.raises(WheelRejected) as exc:
        _check(path)
    assert re.search(hostile.expect, str(exc.value)), str(exc.value)


class _Stream:
    """A file that can't seek: the zipfile module writes each member's CRC-32 and sizes in a data
    descriptor after its data, as a streaming writer does."""

    def __init__(self):
        self.data = bytearray()

    def write(self, chunk):
        self.data += chunk
        return len(chunk)

    def flush(self):
        pass


def _rewritten(path, tmp_path, *, stream=False, zip64=False, monkeypatch=None):
    """``path``'s members written again: through a file that can't seek, or with zip64 end records."""
    out = tmp_path / "out" / path.name
    out.parent.mkdir(exist_ok=True)
    if zip64:  # the zipfile module writes zip64 end records past this many members
        monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 2)
    target = _Stream() if stream else out
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
    if stream:
        out.write_bytes(bytes(target.data))
    return out


@pytest.mark.parametrize("layout", ["data-descriptors", "zip64-end-records"])
def test_layouts_wheel_builders_write_are_read(tmp_path, monkeypatch, layout):
    path = make_wheel(tmp_path, "ext", "1.0", manifest={"cuda": "12.8", "torch": "2.8"}, payload=b"x" * 5000)
    out = _rewritten(path, tmp_path, stream=layout == "data-descriptors", zip64=layout == "zip64-end-records",
                     monkeypatch=monkeypatch)
    data = out.read_bytes()
    assert (b"PK\x07\x08" in data) == (layout == "data-descriptors")
    assert (b"PK\x06\x06" in data) == (layout == "zip64-end-records")
    directory = _check(out)
    with zipfile.ZipFile(out) as zf:
        assert directory.members() == [(i.filename, i.flag_bits) for i in zf.infolist()]
        assert all(directory.read(n, 1 << 20) == zf.read(n) for n in zf.namelist())


def test_a_central_directory_over_its_cap_is_refused_unread(tmp_path):
    path = make_wheel(tmp_path, "ext", "1.0")
    data = bytearray(path.read_bytes())
    struct.pack_into("<L", data, data.rindex(b"PK\x05\x06") + 12, 100 << 20)  # the directory's size
    path.write_bytes(bytes(data))
    with pytest.raises(WheelRejected, match=r"a central directory of 104857600 bytes, over the 67108864-byte cap"):
        _check(path)


def test_an_end_record_inside_another_ones_comment_is_refused(tmp_path):
    path = make_wheel(tmp_path, "ext", "1.0")
    data = path.read_bytes()
    fake = data[data.rindex(b"PK\x05\x06"):]  # a copy of the end record, as the real one's comment
    real = bytearray(fake)
    struct.pack_into("<H", real, 20, len(fake))
    path.write_bytes(data[:data.rindex(b"PK\x05\x06")] + bytes(real) + fake)
    with pytest.raises(WheelRejected, match="two end of central directory records"):
        _check(path)


@pytest.mark.parametrize("members, message", [
    ([("demo/a.py", 0), ("demo/./a.py", 0)], r"members 'demo/a\.py' and 'demo/\./a\.py' are installed to one path"),
    ([("demo//a.py", 0), ("demo/a.py", 0)], "are installed to one path"),
])
def test_two_names_of_one_path_are_refused(members, message):
    with pytest.raises(WheelRejected, match=message):
        check_members(members, "demo")
