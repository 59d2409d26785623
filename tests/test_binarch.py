"""tools.core.binarch: what a compiled file's header says, and what a platform tag asks for.

The files are made byte by byte (tests/fixtures/binaries/make_binaries.py), so every machine gets
the same answers; a real aarch64 object from Debian's cross compiler is read too where one is
installed.
"""

from __future__ import annotations

import pytest

from tests.fixtures.binaries.make_binaries import (AMD64, ARM64, EM_AARCH64, EM_X86_64,
                                                   cross_compiled_so, elf_header, pe_dll)
from tools.core.binarch import (HEAD_BYTES, Binary, Expected, NotABinary, expected_for,
                                is_binary_name, mismatch, read_binary)

READ = [
    # (bytes, format, arch)
    (elf_header(EM_X86_64), "ELF", "x86_64"),                       # a Linux x86_64 .so
    (elf_header(EM_AARCH64), "ELF", "aarch64"),                     # a Linux aarch64 .so
    (elf_header(EM_AARCH64, little_endian=False), "ELF", "aarch64"),  # big-endian aarch64 (aarch64_be)
    (elf_header(21, little_endian=False), "ELF", "ppc64"),          # e_machine read big-endian for ppc64
    (elf_header(21, little_endian=True), "ELF", "ppc64le"),         # byte order tells ppc64le apart
    (elf_header(EM_X86_64, elf_class=1), "ELF", "x32"),             # 32-bit class on x86_64: no tag names it
    (elf_header(3, elf_class=1), "ELF", "i686"),                    # EM_386
    (elf_header(999), "ELF", "unknown"),                            # a machine no wheel tag names
    (pe_dll(AMD64), "PE", "x86_64"),                                # a win_amd64 .pyd
    (pe_dll(ARM64), "PE", "aarch64"),                               # a win_arm64 .pyd
    (pe_dll(0x1234), "PE", "unknown"),                              # a Machine no wheel tag names
]


@pytest.mark.parametrize("data, fmt, arch", READ, ids=[f"{f}-{a}-{i}" for i, (_, f, a) in enumerate(READ)])
def test_read_binary(data, fmt, arch):
    binary = read_binary(data[:HEAD_BYTES])
    assert (binary.format, binary.arch) == (fmt, arch)


def test_the_header_is_named_in_its_own_words():
    assert read_binary(elf_header(EM_X86_64)).machine == "e_machine 62, EM_X86_64"
    assert read_binary(pe_dll(ARM64)).machine == "Machine 0xAA64, ARM64"
    assert read_binary(pe_dll(AMD64)).describe() == "a PE binary for x86_64 (Machine 0x8664, AMD64)"


NOT_BINARIES = [
    b"",                        # empty
    b"INPUT(-lfoo)\n",          # a linker script named libfoo.so
    b"\x7fEL",                  # not even the magic
]


@pytest.mark.parametrize("data", NOT_BINARIES)
def test_files_that_are_neither_elf_nor_pe(data):
    assert read_binary(data) is None


def _pe_signature_moved(offset: int) -> bytes:
    data = bytearray(pe_dll(AMD64))
    data[0x3C:0x40] = offset.to_bytes(4, "little")
    return bytes(data)


BROKEN = [
    (elf_header(EM_X86_64)[:12], "an ELF header is 52 or 64 bytes"),            # cut short
    (b"\x7fELF\x03\x01" + bytes(14), "neither 32/64-bit"),                       # class 3
    (b"MZ" + bytes(10), "an MZ header is 64 bytes"),                            # cut short
    (_pe_signature_moved(0x40), "no PE signature at offset 64"),                 # DOS program
    ((_pe_signature_moved(1 << 20) + bytes(HEAD_BYTES))[:HEAD_BYTES], "past the first 4096 bytes"),  # beyond the head
    (_pe_signature_moved(1 << 20)[:600], "past the end of the file"),           # a short file
]


@pytest.mark.parametrize("data, message", BROKEN, ids=[m for _, m in BROKEN])
def test_a_damaged_header_is_named(data, message):
    with pytest.raises(NotABinary, match=message):
        read_binary(data)


TAGS = [
    ("linux_x86_64", Expected("ELF", "x86_64")),
    ("manylinux_2_28_x86_64", Expected("ELF", "x86_64")),
    ("manylinux2014_aarch64", Expected("ELF", "aarch64")),
    ("manylinux_2_28_aarch64", Expected("ELF", "aarch64")),
    ("musllinux_1_2_aarch64", Expected("ELF", "aarch64")),
    ("linux_armv7l", Expected("ELF", "armv7l")),
    ("win_amd64", Expected("PE", "x86_64")),
    ("win_arm64", Expected("PE", "aarch64")),
    ("win32", Expected("PE", "i686")),
    ("any", None),                       # pure Python: nothing to check
    ("macosx_11_0_arm64", None),         # Mach-O: not checked here
]


@pytest.mark.parametrize("tag, expected", TAGS, ids=[t for t, _ in TAGS])
def test_expected_for(tag, expected):
    assert expected_for(tag) == expected


NAMES = [
    ("flash_attn_2_cuda.cpython-312-aarch64-linux-gnu.so", True),
    ("pkg.libs/libgomp-a34b3233.so.1.0.0", True),   # a grafted library keeps its version suffix
    ("pkg/_C.cp312-win_amd64.pyd", True),
    ("pkg.libs/helper-0123abcd.dll", True),
    ("pkg/_C.PYD", True),                            # Windows names are case-insensitive
    ("pkg/solutions.json", False),
    ("pkg/resolve.py", False),
]


@pytest.mark.parametrize("name, binary", NAMES, ids=[n for n, _ in NAMES])
def test_is_binary_name(name, binary):
    assert is_binary_name(name) is binary


def test_mismatch_names_the_member_what_it_is_the_rule_and_the_fix():
    binary = read_binary(elf_header(EM_X86_64))
    why = mismatch("pkg/_C.so", binary, ["manylinux_2_28_aarch64"])
    assert why.startswith("pkg/_C.so is an ELF binary for x86_64 (e_machine 62, EM_X86_64), but "
                          "the wheel is tagged manylinux_2_28_aarch64, whose binaries are ELF "
                          "for aarch64: every compiled file in a wheel must be for the machine")
    assert "fix: rebuild it for manylinux_2_28_aarch64" in why


def test_a_binary_that_fits_every_tag():
    binary = read_binary(elf_header(EM_X86_64))
    assert mismatch("m.so", binary, ["manylinux2014_x86_64", "manylinux_2_17_x86_64"]) is None
    assert mismatch("m.so", binary, ["any"]) is None
    assert mismatch("m.pyd", Binary("PE", "x86_64", "Machine 0x8664"), ["win_amd64"]) is None


def test_an_elf_file_in_a_windows_wheel_and_a_pe_file_in_a_linux_one():
    assert "whose binaries are PE for x86_64" in mismatch("m.pyd", read_binary(elf_header(EM_X86_64)),
                                                          ["win_amd64"])
    assert "whose binaries are ELF for x86_64" in mismatch("m.so", read_binary(pe_dll(AMD64)),
                                                           ["linux_x86_64"])


def test_a_real_cross_compiled_aarch64_object(tmp_path):
    so = cross_compiled_so(tmp_path / "m.so")
    if so is None:
        pytest.skip("aarch64-linux-gnu-gcc is not installed (apt-get install gcc-aarch64-linux-gnu); "
                    "the crafted headers above cover the same rule")
    binary = read_binary(so.read_bytes()[:HEAD_BYTES])
    assert binary == Binary("ELF", "aarch64", "e_machine 183, EM_AARCH64")
    assert mismatch("m.so", binary, ["manylinux_2_28_aarch64"]) is None
    assert mismatch("m.so", binary, ["manylinux_2_28_x86_64"]) is not None
