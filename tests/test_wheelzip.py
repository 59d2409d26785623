"""tools.sitegen.wheelzip: a wheel's zip read with caps, by the fast reader and by the zipfile
module alike, and its member list checked as pip checks it."""

from __future__ import annotations

import re
import zipfile

import pytest
from packaging.utils import canonicalize_name
from wheelfactory import make_wheel

from tests.fixtures.hostile.make_wheels import WHEELS
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
