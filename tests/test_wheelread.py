"""tools.sitegen.wheelread: what the index reads from one wheel, the same in this process and in a worker."""

from __future__ import annotations

import email
import hashlib
import os
import re
import zipfile

import pytest
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion
from wheelfactory import make_wheel, metadata_text

from tests.fixtures.binaries.make_binaries import AMD64, EM_AARCH64, EM_X86_64, cross_compiled_so, elf_header, pe_dll
from tests.fixtures.hostile.make_wheels import SPECIAL_EXPECT, WHEELS, make_special

from tools.sitegen import wheelread, wheelzip
from tools.sitegen.wheelzip import WheelRejected
from tools.core.errors import IndexBuildError
from tools.sitegen.ledger_file import Entry
from tools.core.variant import Variant
from tools.core.workers import map_in_workers

BASE = "https://files.example/v1"
WHEN = "2026-01-02T03:04:05.678901Z"
ANY = "py3-none-any"


def test_index_wheel_writes_the_metadata_file_and_gives_the_ledger_entry(tmp_path):
    path = make_wheel(tmp_path, "ext", "1.0", local="cu128.torch2.8", requires_python=">=3.9",
                      manifest={"cuda": "12.8", "torch": "2.8", "archs": {"found": {"m.so": {"sass": ["90"]}}}})
    entry = wheelread.index_wheel(str(path), base_url=BASE, upload_time=WHEN)
    metadata = (tmp_path / (path.name + ".metadata")).read_bytes()
    with zipfile.ZipFile(path) as zf:
        assert metadata == zf.read("ext-1.0+cu128.torch2.8.dist-info/METADATA")
    data = path.read_bytes()
    assert entry == Entry(
        path.name, "ext", "1.0+cu128.torch2.8",
        f"{BASE}/ext-1.0%2Bcu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl",  # "+" quoted for hosts
        hashlib.sha256(data).hexdigest(), len(data), WHEN, ">=3.9", hashlib.sha256(metadata).hexdigest(),
        Variant("12.8", "2.8", None), {"m.so": {"ptx": [], "sass": ["90"]}},
    )

#: A bill of materials as the finish step writes it (tools/finish/sbom.py), in short.
SBOM_BYTES = b'{"bomFormat": "CycloneDX", "specVersion": "1.6", "components": []}'


def test_the_ledger_entry_keeps_each_sbom_documents_digest(tmp_path):
    """PEP 770's .dist-info/sboms/: every document there, by its path, with the sha256 of its
    bytes as the wheel holds them; a worker gives the same; none: null."""
    info = "ext-1.0+cu128.torch2.8.dist-info"
    other = b'{"bomFormat": "CycloneDX", "specVersion": "1.6", "metadata": {}}'
    path = make_wheel(tmp_path, "ext", "1.0", local="cu128.torch2.8",
                      manifest={"cuda": "12.8", "torch": "2.8"},
                      extra_files={f"{info}/sboms/cuwheels.cdx.json": SBOM_BYTES,
                                   f"{info}/sboms/auditwheel.cdx.json": other})
    entry = wheelread.index_wheel(str(path), base_url=BASE, upload_time=WHEN)
    with zipfile.ZipFile(path) as zf:  # read back from the zip, not from what was written
        held = {n: hashlib.sha256(zf.read(n)).hexdigest() for n in zf.namelist() if "/sboms/" in n}
    assert entry.sboms == held == {f"{info}/sboms/cuwheels.cdx.json": hashlib.sha256(SBOM_BYTES).hexdigest(),
                                   f"{info}/sboms/auditwheel.cdx.json": hashlib.sha256(other).hexdigest()}
    (line,) = map_in_workers("tools.sitegen.wheelread:indexer", [str(path)], workers=1, args=(BASE, WHEN))
    assert wheelread.parse_indexed(line, path.name) == entry
    plain = wheelread.index_wheel(str(make_wheel(tmp_path, "plain", "2.0", tag=ANY)), base_url=BASE,
                                  upload_time=WHEN)
    assert plain.sboms is None


def test_too_many_or_too_large_sbom_documents_leave_the_wheel_out(tmp_path, monkeypatch):
    info = "ext-1.0.dist-info"
    many = {f"{info}/sboms/{i}.cdx.json": SBOM_BYTES for i in range(wheelread.MAX_SBOMS + 1)}
    path = make_wheel(tmp_path, "ext", "1.0", tag=ANY, extra_files=many)
    reason = wheelread.index_wheel(str(path), base_url=BASE, upload_time=WHEN)
    assert reason.startswith(f"{wheelread.MAX_SBOMS + 1} SBOM documents under ")
    monkeypatch.setattr(wheelread, "MAX_SBOM", len(SBOM_BYTES) - 1)
    one = make_wheel(tmp_path / "one", "ext", "1.0", tag=ANY,
                     extra_files={f"{info}/sboms/cuwheels.cdx.json": SBOM_BYTES})
    reason = wheelread.index_wheel(str(one), base_url=BASE, upload_time=WHEN)
    assert isinstance(reason, str) and "sboms/cuwheels.cdx.json" in reason
    assert not (tmp_path / "one" / (one.name + ".metadata")).exists()


def test_a_worker_gives_exactly_what_this_process_gives(tmp_path):
    paths = [
        make_wheel(tmp_path, "ext", "1.0", local="cu128.torch2.8", manifest={"cuda": "12.8", "torch": "2.8"}),
        make_wheel(tmp_path, "plain", "2.0", tag=ANY),  # no variant, no manifest
        make_wheel(tmp_path, "renamed", "1.0", tag=ANY, metadata_name="other"),  # rejected
        make_wheel(tmp_path, "nometa", "1.0", tag=ANY, omit_metadata=True),  # rejected
        tmp_path / "bad name.whl",  # rejected by its name
        tmp_path / "gone-1.0-py3-none-any.whl",  # missing
    ]
    paths[4].write_bytes(b"")
    here = [wheelread.index_wheel(str(p), base_url=BASE, upload_time=WHEN) for p in paths]
    lines = list(map_in_workers("tools.sitegen.wheelread:indexer", [str(p) for p in paths], workers=2, args=(BASE, WHEN)))
    there = [wheelread.parse_indexed(line, p.name) for line, p in zip(lines, paths)]
    assert there == here
    assert [type(x) for x in here] == [Entry, Entry, str, str, str, str]
    assert "METADATA Name 'other' disagrees" in here[2] and here[3].startswith("no METADATA")
    assert here[4].startswith("invalid wheel filename") and here[5].startswith("unreadable file")


def test_a_metadata_file_that_cant_be_written_leaves_the_wheel_out(tmp_path):
    path = make_wheel(tmp_path, "demo", "1.0", tag=ANY)
    (tmp_path / (path.name + ".metadata")).mkdir()  # in the way
    reason = wheelread.index_wheel(str(path), base_url=BASE, upload_time=WHEN)
    assert isinstance(reason, str) and ".metadata can't be written" in reason and "Is a directory" in reason


def test_a_metadata_file_cut_short_is_not_left_behind(tmp_path, monkeypatch):
    path = make_wheel(tmp_path, "demo", "1.0", tag=ANY)
    real_write = os.write

    def full(fd, data):  # a file system that fills up after the file is created
        real_write(fd, bytes(data[:10]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(wheelread.os, "write", full)
    reason = wheelread.index_wheel(str(path), base_url=BASE, upload_time=WHEN)
    monkeypatch.undo()
    assert "No space left on device" in reason
    assert not (tmp_path / (path.name + ".metadata")).exists()


def test_wheels_with_the_same_metadata_share_one_file(tmp_path):
    # One release for two Pythons: the same METADATA, so the second .metadata is a hard link.
    a = make_wheel(tmp_path, "ext", "1.0", local="cu128.torch2.8", tag="cp311-cp311-linux_x86_64")
    b = make_wheel(tmp_path, "ext", "1.0", local="cu128.torch2.8", tag="cp312-cp312-linux_x86_64")
    c = make_wheel(tmp_path, "ext", "1.1", local="cu128.torch2.8", tag="cp312-cp312-linux_x86_64")
    written: dict[str, str] = {}
    entries = [wheelread.index_wheel(str(p), base_url=BASE, upload_time=WHEN, written=written) for p in (a, b, c)]
    meta = [os.stat(f"{p}.metadata") for p in (a, b, c)]
    assert entries[0].metadata_sha256 == entries[1].metadata_sha256 != entries[2].metadata_sha256
    assert os.path.samestat(meta[0], meta[1]) and meta[0].st_nlink == 2
    assert not os.path.samestat(meta[0], meta[2]) and meta[2].st_nlink == 1
    assert written == {entries[0].metadata_sha256: f"{a}.metadata", entries[2].metadata_sha256: f"{c}.metadata"}
    with zipfile.ZipFile(b) as zf:
        assert (tmp_path / f"{b.name}.metadata").read_bytes() == zf.read("ext-1.0+cu128.torch2.8.dist-info/METADATA")


def test_a_leftover_metadata_file_is_replaced_not_written_through(tmp_path):
    # A killed run left b's .metadata as a hard link to another wheel's: writing b's must not
    # change the other file.
    b = make_wheel(tmp_path, "ext", "1.0", tag=ANY)
    other = tmp_path / "other-1.0-py3-none-any.whl.metadata"
    other.write_bytes(b"the other wheel's METADATA")
    os.link(other, f"{b}.metadata")
    entry = wheelread.index_wheel(str(b), base_url=BASE, upload_time=WHEN, written={})
    assert other.read_bytes() == b"the other wheel's METADATA" and other.stat().st_nlink == 1
    assert hashlib.sha256((tmp_path / f"{b.name}.metadata").read_bytes()).hexdigest() == entry.metadata_sha256


def test_metadata_is_written_where_no_hard_link_can_be_made(tmp_path, monkeypatch):
    a = make_wheel(tmp_path, "ext", "1.0", tag="cp311-cp311-linux_x86_64")
    b = make_wheel(tmp_path, "ext", "1.0", tag="cp312-cp312-linux_x86_64")
    written: dict[str, str] = {}
    wheelread.index_wheel(str(a), base_url=BASE, upload_time=WHEN, written=written)

    def no_links(src, dst):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(wheelread.os, "link", no_links)
    entry = wheelread.index_wheel(str(b), base_url=BASE, upload_time=WHEN, written=written)
    monkeypatch.undo()
    assert isinstance(entry, Entry)
    assert (tmp_path / f"{b.name}.metadata").read_bytes() == (tmp_path / f"{a.name}.metadata").read_bytes()
    assert (tmp_path / f"{b.name}.metadata").stat().st_nlink == 1


def test_a_line_that_is_not_a_result_is_an_error(tmp_path):
    with pytest.raises(IndexBuildError, match="a worker answered 'Traceback"):
        wheelread.parse_indexed("Traceback (most recent call last):", "x.whl")
    line = wheelread.indexer(BASE, WHEN)(str(make_wheel(tmp_path, "demo", "1.0", tag=ANY)))
    with pytest.raises(IndexBuildError, match="answered for another file"):
        wheelread.parse_indexed(line, "other-1.0-py3-none-any.whl")


@pytest.mark.parametrize("filename", [
    "demo-1.0-py3-none-any.whl",
    "flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp312-cp312-linux_x86_64.whl",  # Dao-AILab's label
    "ext-1.0+cu128.torch2.8-1-cp311-cp311-manylinux_2_28_x86_64.whl",  # a build tag
    "ext-1.0-1abc-py2.py3-none-any.whl",  # build tag with a suffix, a compressed tag set
    "Ext.Name-1.0.post1-py3-none-any.whl",  # a name to normalize
    "ext-1.0-py3-none-any.zip",  # not .whl
    "ext-1.0-none-any.whl",  # a tag part missing
    "ext-1.0-x-y-py3-none-any.whl",  # too many parts
    "ext-not.a.version-py3-none-any.whl",  # invalid version
    "ext-1.0-abc-py3-none-any.whl",  # build tag without a leading digit
    "ext__x-1.0-py3-none-any.whl",  # "__" in the name
    "ext-1.0-py3-none-.whl",  # an empty platform tag
    "-1.0-py3-none-any.whl",  # an empty name
])
def test_filename_check_accepts_exactly_what_packaging_accepts(filename):
    # check_filename parses in two cached halves; packaging's whole-name parse is the authority.
    try:
        name, version, _build, _tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        with pytest.raises(wheelread.WheelRejected) as rejected:
            wheelread.check_filename(filename)
        assert str(rejected.value) == f"invalid wheel filename: {exc}"  # packaging's message, the name quoted
    else:
        for _ in range(2):  # the second time from the caches
            assert wheelread.check_filename(filename) == (name, version)


def test_a_member_the_fast_reader_leaves_to_zipfile_is_read_by_zipfile(tmp_path):
    # bzip2: the fast reader inflates stored and deflated members only; the zipfile module reads
    # the others, from the member list the fast reader checked.
    path = make_wheel(tmp_path, "ext", "1.0", tag=ANY, omit_metadata=True)
    text = metadata_text("ext", "1.0", requires_python=">=3.9").encode()
    info = zipfile.ZipInfo("ext-1.0.dist-info/METADATA", date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_BZIP2
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr(info, text)
    with open(path, "rb") as f, pytest.raises(wheelzip.Unsupported, match="compression method 12"):
        wheelzip.ZipDirectory(f.fileno(), path.stat().st_size).read("ext-1.0.dist-info/METADATA", 1 << 20)
    entry = wheelread.index_wheel(str(path), base_url=BASE, upload_time=WHEN)
    assert (tmp_path / f"{path.name}.metadata").read_bytes() == text
    assert entry.requires_python == ">=3.9" and entry.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_metadata_headers_are_read_by_the_email_parser():
    text = b"Metadata-Version: 2.1\nName: a\nVersion: 1\nRequires-Python: >=3.9\nDescription: x\n  more\n\nbody: no"
    assert wheelread.parse_metadata_headers(text) == {
        "metadata-version": ["2.1"], "name": ["a"], "version": ["1"], "requires-python": [">=3.9"],
        "description": ["x\n  more"],
    }


#: METADATA texts where a line-by-line reader and the email parser (pip's) disagree.
TRICKY_METADATA = [
    "Name: a\r\nVersion: 1\r\n\r\nRequires-Python: <3\r\n",        # \r\n: the blank line ends the headers
    "Name: a\rVersion: 1\r\rRequires-Python: <3\r",                    # a lone \r ends a line too
    "Name: a\nVersion: 1\nno header here\nRequires-Python: <3\n",       # a line that is no header ends them
    "Name: a\nVersion: 1\u2028Requires-Python: <3\n",                   # \u2028 ends no line for email
    "Name: a\x0bb\x0cc\x1cd\x85e\nVersion: 1\n",                        # nor do these (str.splitlines's)
    "Name: a\n\tb\nVersion: 1\n",                                      # a folded value
    "Name : a\nVersion: 1\n",                                            # a space before the colon: no header
    "From nobody\nName: a\nVersion: 1\n",                               # a mbox From line
    ":x\nName: a\nVersion: 1\n",                                        # an empty header name
    "Name: a\nVersion: 1\nName: b\n",                                   # a field twice, in order
    "Name: a\nVersion: 1",                                               # no line end at all
    "",
]


@pytest.mark.parametrize("text", TRICKY_METADATA)
def test_metadata_headers_are_what_pip_reads(text):
    # importlib.metadata, through which pip reads METADATA, parses it with email.message_from_string.
    expected: dict[str, list[str]] = {}
    for key, value in email.message_from_string(text).items():
        expected.setdefault(key.lower(), []).append(value)
    assert wheelread.parse_metadata_headers(text.encode()) == expected


@pytest.mark.parametrize("text, message", [
    ("Name: a\nVersion: 1\nVersion: 2\n", "METADATA states Version 2 times: state it once"),
    ("Name: a\n b\nVersion: 1\n", "METADATA's Name spans several lines \\('a\\\\n b'\\): pip keeps the line break"),
    ("Name: a\r\n\tb\r\nVersion: 1\r\n", "METADATA's Name spans several lines"),
])
def test_a_field_the_index_reads_is_stated_once_on_one_line(text, message):
    with pytest.raises(WheelRejected, match=message):
        wheelread.metadata_field(wheelread.parse_metadata_headers(text.encode()),
                                 "Version" if "Version: 2" in text else "Name")


@pytest.mark.parametrize("fallback", [False, True], ids=["fast-reader", "zipfile"])
@pytest.mark.parametrize("hostile", WHEELS, ids=[h.id for h in WHEELS])
def test_each_hostile_wheel_is_left_out_with_its_reason_and_nothing_written(tmp_path, monkeypatch, hostile,
                                                                             fallback):
    """What index_wheel answers for each hostile wheel (tests/fixtures/hostile), with the fast zip
    reader and with the zipfile module alone: a reason, never an exception, and no .metadata."""
    if fallback:  # every member read by the zipfile module, as one the fast reader doesn't inflate
        def unsupported(self, name, size):
            raise wheelzip.Unsupported("as if the member were compressed otherwise")
        monkeypatch.setattr(wheelzip.ZipDirectory, "read", unsupported)
        monkeypatch.setattr(wheelzip.ZipDirectory, "head", unsupported)
    path = hostile.make(tmp_path)
    reason = wheelread.index_wheel(str(path), base_url=BASE, upload_time=WHEN)
    assert isinstance(reason, str) and re.search(hostile.expect, reason), reason
    assert len(reason) <= wheelread.MAX_REASON + 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_file_that_is_not_regular_is_refused_without_blocking(tmp_path):
    for path in make_special(tmp_path):
        reason = wheelread.index_wheel(str(path), base_url=BASE, upload_time=WHEN)
        assert re.search(SPECIAL_EXPECT, reason), reason


def test_a_rebuild_number_is_part_of_a_wheels_identity():
    same = {wheelread.wheel_identity(fn) for fn in (
        "Flash_Attn-2.8.3.0+CU128.torch2.8-cp311-cp311-linux_x86_64.whl",
        "flash_attn-2.8.3+cu128.torch2.8-cp311-cp311-linux_x86_64.whl")}
    assert len(same) == 1
    (ident,) = same
    assert ident[:3] == ("flash-attn", wheelread.parse_version("2.8.3+cu128.torch2.8"), ())
    assert wheelread.wheel_identity("flash_attn-2.8.3+cu128.torch2.8-1-cp311-cp311-linux_x86_64.whl") != ident
    assert wheelread.wheel_identity("not a wheel.whl") is None
    assert wheelread.project_of("Flash.Attn-2.8.3-py3-none-any.whl") == "flash-attn"


# --------------------------------------------------------------------------- binaries against the platform tag

BINARY_WHEELS = [
    # (tag, member, bytes): wheels whose binaries fit their tag, indexed
    ("cp312-cp312-manylinux_2_28_aarch64", "ext/_C.so", elf_header(EM_AARCH64)),
    ("cp312-cp312-manylinux_2_28_x86_64", "ext/_C.so", elf_header(EM_X86_64)),
    ("cp312-cp312-win_amd64", "ext/_C.cp312-win_amd64.pyd", pe_dll(AMD64)),
    ("cp312-cp312-manylinux_2_28_x86_64", "ext/libfoo.so", b"INPUT(-lbar)\n"),  # a linker script: not a binary
    ("py3-none-any", "ext/_C.so", elf_header(EM_AARCH64)),                      # no machine to check against
]


@pytest.mark.parametrize("tag, member, data", BINARY_WHEELS, ids=[f"{t}-{m}" for t, m, _ in BINARY_WHEELS])
def test_a_wheel_whose_binaries_fit_its_tag_is_indexed(tmp_path, tag, member, data):
    path = make_wheel(tmp_path, "ext", "1.0", tag=tag, extra_files={member: data})
    assert isinstance(wheelread.index_wheel(str(path), base_url=BASE, upload_time=WHEN), Entry)


def test_both_readers_give_a_members_first_bytes(tmp_path):
    """ZipDirectory.head inflates only the first bytes; zipfile's reading agrees with it, for a
    deflated member larger than the head and for a stored one shorter than it."""
    big = elf_header(EM_AARCH64) + os.urandom(64 << 10)
    path = make_wheel(tmp_path, "ext", "1.0", extra_files={"ext/_C.so": big},
                      payload=b"tiny")
    size = path.stat().st_size
    with open(path, "rb") as f, zipfile.ZipFile(f) as zf:
        fast = wheelzip.ZipDirectory(f.fileno(), size)
        slow = wheelzip.ZipfileMembers(zf, fast.members())
        for name, want in (("ext/_C.so", big[:4096]), ("ext/_payload.bin", b"tiny")):
            assert fast.head(name, 4096) == slow.head(name, 4096) == want


def test_a_real_cross_compiled_aarch64_extension_is_indexed_only_under_its_own_tag(tmp_path):
    so = cross_compiled_so(tmp_path / "build" / "m.so")
    if so is None:
        pytest.skip("aarch64-linux-gnu-gcc is not installed (apt-get install gcc-aarch64-linux-gnu); "
                    "test_hostile_index covers the rule with a crafted header")
    good = make_wheel(tmp_path / "a", "ext", "1.0", tag="cp312-cp312-manylinux_2_28_aarch64",
                      extra_files={"ext/_C.so": so.read_bytes()})
    assert isinstance(wheelread.index_wheel(str(good), base_url=BASE, upload_time=WHEN), Entry)
    bad = make_wheel(tmp_path / "b", "ext", "1.0", tag="cp312-cp312-manylinux_2_28_x86_64",
                     extra_files={"ext/_C.so": so.read_bytes()})
    reason = wheelread.index_wheel(str(bad), base_url=BASE, upload_time=WHEN)
    assert reason.startswith("'ext/_C.so' is an ELF binary for aarch64 (e_machine 183, EM_AARCH64)")
    assert not (tmp_path / "b" / (bad.name + ".metadata")).exists()
