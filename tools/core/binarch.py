"""Which machine a compiled file is for, and whether that is the machine its wheel's tag names.

A wheel tagged ``manylinux_2_28_aarch64`` whose ``.so`` is an x86_64 binary installs without a
word on an ARM machine and fails at import with ``cannot open shared object file: wrong ELF
class`` or ``Exec format error``; a ``win_amd64`` wheel holding an ELF file fails the same way.
Nothing else in a wheel says what its binaries are, so the finish step (tools.finish.archcheck)
and the index (tools.sitegen.wheelread) read the first bytes of each one:

- ELF (Linux): ``e_ident`` (class, byte order) and ``e_machine`` (EM_X86_64 = 62,
  EM_AARCH64 = 183; the System V ABI's table).
- PE/COFF (Windows ``.pyd``/``.dll``): the ``MZ`` header's ``e_lfanew`` points at ``PE\\0\\0``,
  followed by the COFF header's ``Machine`` (IMAGE_FILE_MACHINE_AMD64 = 0x8664,
  IMAGE_FILE_MACHINE_ARM64 = 0xAA64; Microsoft's PE format reference).

Standard library only: the index's worker processes import it, and tools/core is what the
selector's single file carries.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

#: How many leading bytes of a file ``read_binary`` looks at. An ELF header needs 20; a PE file's
#: ``PE\0\0`` signature sits where ``e_lfanew`` says, 0x80 to 0x118 for MSVC's and MinGW's
#: linkers: a file putting it further out is refused rather than read further.
HEAD_BYTES = 4096

#: ELF ``e_machine`` -> the architecture as wheel tags spell it (ppc64 is told apart by byte order).
ELF_MACHINES = {3: "i686", 40: "armv7l", 62: "x86_64", 183: "aarch64", 21: "ppc64", 22: "s390x",
                243: "riscv64"}
#: The names the ELF specification gives those values, for messages.
ELF_NAMES = {3: "EM_386", 40: "EM_ARM", 62: "EM_X86_64", 183: "EM_AARCH64", 21: "EM_PPC64",
             22: "EM_S390", 243: "EM_RISCV"}
#: PE/COFF ``Machine`` -> the architecture, spelled as for ELF, so one comparison serves both.
PE_MACHINES = {0x014C: "i686", 0x8664: "x86_64", 0xAA64: "aarch64", 0x01C4: "armv7l"}
#: Microsoft's names for those values, for messages.
PE_NAMES = {0x014C: "I386", 0x8664: "AMD64", 0xAA64: "ARM64", 0x01C4: "ARMNT"}

#: Windows platform tags -> the architecture of their binaries.
WINDOWS_TAGS = {"win_amd64": "x86_64", "win_arm64": "aarch64", "win32": "i686"}
#: A Linux platform tag: ``linux_<arch>``, ``manylinux_X_Y_<arch>``, ``manylinux2014_<arch>``...
_LINUX_TAG = re.compile(r"(?:many|musl)?linux(?:_\d+_\d+|1|2010|2014)?_(\w+)")


class NotABinary(ValueError):
    """A file that starts like an ELF or PE file but whose header can't be read."""


@dataclass(frozen=True)
class Binary:
    """What a compiled file's header says: ``format`` (``ELF``/``PE``), ``arch`` (as wheel tags
    spell it: ``x86_64``, ``aarch64``, or ``unknown``) and ``machine``, the header's own words."""

    format: str
    arch: str
    machine: str

    def describe(self) -> str:
        """``an ELF binary for x86_64 (e_machine 62, EM_X86_64)``, for messages."""
        article = "an" if self.format == "ELF" else "a"
        return f"{article} {self.format} binary for {self.arch} ({self.machine})"


@dataclass(frozen=True)
class Expected:
    """The binaries a platform tag calls for: their ``format`` and ``arch``."""

    format: str
    arch: str

    def matches(self, binary: Binary) -> bool:
        """True when ``binary`` is of this format and architecture."""
        return binary.format == self.format and binary.arch == self.arch


def read_binary(head: bytes) -> Binary | None:
    """The format and machine of a file whose first bytes are ``head`` (at least HEAD_BYTES of
    them, or the whole file); None for a file that is neither ELF nor PE. NotABinary for one that
    starts like either but is cut short or malformed.

    >>> read_binary(b"\\x7fELF\\x02\\x01\\x01" + bytes(11) + b"\\xb7\\x00").describe()
    'an ELF binary for aarch64 (e_machine 183, EM_AARCH64)'
    >>> read_binary(b"#!/bin/sh\\n") is None
    True
    """
    if head[:4] == b"\x7fELF":
        return _elf(head)
    if head[:2] == b"MZ":
        return _pe(head)
    return None


def _elf(head: bytes) -> Binary:
    if len(head) < 20:
        raise NotABinary(f"an ELF header is 52 or 64 bytes; this file has {len(head)}")
    ei_class, ei_data = head[4], head[5]
    if ei_class not in (1, 2) or ei_data not in (1, 2):
        raise NotABinary(f"ELF class {ei_class} / data encoding {ei_data} are neither 32/64-bit "
                         "nor little/big-endian")
    (machine,) = struct.unpack_from("<H" if ei_data == 1 else ">H", head, 18)
    arch = ELF_MACHINES.get(machine, "unknown")
    if arch == "ppc64" and ei_data == 1:
        arch = "ppc64le"
    if arch == "x86_64" and ei_class == 1:
        arch = "x32"  # the x32 ABI: 32-bit ELF for x86_64, which no wheel tag names
    name = ELF_NAMES.get(machine)
    return Binary("ELF", arch, f"e_machine {machine}" + (f", {name}" if name else ""))


def _pe(head: bytes) -> Binary:
    if len(head) < 0x40:
        raise NotABinary(f"an MZ header is 64 bytes; this file has {len(head)}")
    (offset,) = struct.unpack_from("<I", head, 0x3C)
    if offset + 6 > len(head):
        if len(head) >= HEAD_BYTES:
            raise NotABinary(f"its PE header is at offset {offset}, past the first {HEAD_BYTES} "
                             "bytes, where linkers put it")
        raise NotABinary(f"its PE header would be at offset {offset}, past the end of the file")
    if head[offset:offset + 4] != b"PE\0\0":
        raise NotABinary(f"no PE signature at offset {offset} (an MS-DOS program, or damaged)")
    (machine,) = struct.unpack_from("<H", head, offset + 4)
    name = PE_NAMES.get(machine)
    return Binary("PE", PE_MACHINES.get(machine, "unknown"),
                  f"Machine 0x{machine:04X}" + (f", {name}" if name else ""))


def expected_for(platform_tag: str) -> Expected | None:
    """The binaries a wheel platform tag calls for; None for ``any`` and for tags whose binaries
    this project does not check (macOS: Mach-O, fat binaries).

    >>> expected_for("manylinux_2_28_aarch64"), expected_for("win_amd64")
    (Expected(format='ELF', arch='aarch64'), Expected(format='PE', arch='x86_64'))
    """
    if platform_tag in WINDOWS_TAGS:
        return Expected("PE", WINDOWS_TAGS[platform_tag])
    m = _LINUX_TAG.fullmatch(platform_tag)
    if m is None:
        return None
    arch = m.group(1)
    # A 32-bit ARM wheel's binaries are EM_ARM whatever the tag's revision (armv6l, armv7l).
    return Expected("ELF", "armv7l" if arch in ("armv6l", "armv7l") else arch)


def is_binary_name(name: str) -> bool:
    """True for a member name compiled code goes by: ``*.so``, ``*.so.N`` (a grafted library),
    ``*.pyd``, ``*.dll``. Other files are not read (a data file that happens to start with ``MZ``
    is not a binary loaded by anyone).

    >>> [is_binary_name(n) for n in ("a/_C.so", "a.libs/libgomp-a34b3233.so.1.0.0", "a/_C.pyd",
    ...                              "a/readme.txt")]
    [True, True, True, False]
    """
    base = name.rpartition("/")[2].lower()
    return base.endswith((".so", ".pyd", ".dll")) or ".so." in base


def mismatch(member: str, binary: Binary, platform_tags: tuple[str, ...] | list[str]) -> str | None:
    """Why ``binary`` (the wheel's member ``member``) doesn't belong in a wheel tagged
    ``platform_tags``, naming the member, what it is, the rule and the fix; None when it fits
    every tag this project checks."""
    for tag in sorted(set(platform_tags)):
        want = expected_for(tag)
        if want is None or want.matches(binary):
            continue
        return (f"{member} is {binary.describe()}, but the wheel is tagged {tag}, whose binaries "
                f"are {want.format} for {want.arch}: every compiled file in a wheel must be for the "
                f"machine its platform tag names (installers trust the tag, and the import fails on "
                f"every machine the tag names); fix: rebuild it for "
                f"{tag}, or name the wheel for the machine its binaries are for")
    return None
