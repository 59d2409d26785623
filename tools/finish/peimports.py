"""The import table of a Windows ``.pyd``/``.dll``: which DLLs it loads, and what it takes from each.

The ABI check's Windows counterpart reads this (tools.finish.wincheck). It is the PE/COFF format
as Microsoft's reference describes it: the optional header's data directories give the import
directory (entry 1) and the delay-load directory (entry 13) as RVAs, which the section table maps
to file offsets; each import descriptor names a DLL and points at a zero-terminated table of
64-bit (PE32+) or 32-bit (PE32) thunks, each an ordinal (high bit set) or the RVA of a hint and a
name. Standard library only, bounded for a crafted file: at most MAX_DLLS DLLs and MAX_FUNCTIONS
names per DLL are read, and every offset is checked against the file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from tools.core.errors import VerifyError

#: The most DLLs one file's import tables are read for (a real extension imports tens).
MAX_DLLS = 1024
#: The most functions read per imported DLL (torch extensions import thousands from torch_cpu).
MAX_FUNCTIONS = 1 << 16
_IMPORT, _DELAY = 1, 13


@dataclass(frozen=True)
class PeImports:
    """What one PE file imports: ``machine`` (the COFF header's Machine) and, per DLL name as
    written in the file, the function names (``#N`` for one imported by ordinal N). ``delayed``
    holds the DLLs it loads only on first use (delay-load imports), with theirs."""

    machine: int
    dlls: dict[str, tuple[str, ...]]
    delayed: dict[str, tuple[str, ...]]

    def all_dlls(self) -> list[str]:
        """Every DLL the file may load, eagerly or on first use, in file order."""
        return [*self.dlls, *(d for d in self.delayed if d not in self.dlls)]


class _Image:
    """A PE file's bytes with its section table, mapping RVAs to file offsets."""

    def __init__(self, data: bytes, where: str):
        self.data, self.where = data, where
        if data[:2] != b"MZ" or len(data) < 0x40:
            self.fail("no MZ header")
        (pe,) = struct.unpack_from("<I", data, 0x3C)
        if data[pe:pe + 4] != b"PE\0\0":
            self.fail(f"no PE signature at offset {pe}")
        self.machine, sections, _, _, _, optional_size, _ = self.unpack("<HHIIIHH", pe + 4)
        optional = pe + 24
        (magic,) = self.unpack("<H", optional)
        if magic not in (0x10B, 0x20B):
            self.fail(f"optional header magic 0x{magic:X} is neither PE32 nor PE32+")
        self.wide = magic == 0x20B
        count_at = optional + (108 if self.wide else 92)
        (count,) = self.unpack("<I", count_at)
        self.directories = [self.unpack("<II", count_at + 4 + 8 * k) for k in range(min(count, 16))]
        self.sections = [self.unpack("<IIII", optional + optional_size + 40 * k + 8)
                         for k in range(sections)]

    def fail(self, why: str) -> None:
        raise VerifyError(f"{self.where} is not a PE file this check can read: {why}",
                          hint="a .pyd/.dll must come from MSVC's linker (or one like it)")

    def unpack(self, fmt: str, offset: int) -> tuple:
        if offset < 0 or offset + struct.calcsize(fmt) > len(self.data):
            self.fail(f"a header at offset {offset} runs past the end of the file")
        return struct.unpack_from(fmt, self.data, offset)

    def offset(self, rva: int) -> int:
        for virtual_size, address, raw_size, raw_at in self.sections:
            if address <= rva < address + max(virtual_size, raw_size):
                return raw_at + rva - address
        self.fail(f"RVA 0x{rva:X} is in no section")
        return -1

    def string(self, rva: int) -> str:
        at = self.offset(rva)
        end = self.data.find(b"\0", at, at + 4096)
        if end < 0:
            self.fail(f"the name at RVA 0x{rva:X} is not terminated")
        return self.data[at:end].decode("latin-1")

    def directory(self, index: int) -> int:
        return self.directories[index][0] if index < len(self.directories) else 0

    def thunks(self, rva: int) -> tuple[str, ...]:
        fmt, size, ordinal = ("<Q", 8, 1 << 63) if self.wide else ("<I", 4, 1 << 31)
        names, at = [], self.offset(rva)
        for _ in range(MAX_FUNCTIONS):
            (value,) = self.unpack(fmt, at)
            if value == 0:
                break
            # A hint/name entry: two bytes of hint, then the name.
            names.append(f"#{value & 0xFFFF}" if value & ordinal else self.string((value & 0x7FFFFFFF) + 2))
            at += size
        return tuple(names)

    def descriptors(self, index: int, size: int, name_at: int, lookup_at: tuple[int, ...]
                    ) -> dict[str, tuple[str, ...]]:
        found: dict[str, tuple[str, ...]] = {}
        start = self.directory(index)
        if not start:
            return found
        at = self.offset(start)
        for _ in range(MAX_DLLS):
            entry = self.unpack(f"<{size // 4}I", at)
            if not any(entry):
                break
            first = next((entry[k] for k in lookup_at if entry[k]), 0)
            found[self.string(entry[name_at])] = self.thunks(first) if first else ()
            at += size
        return found


def read_imports(data: bytes, where: str = "the file") -> PeImports:
    """The imports of the PE file whose bytes are ``data`` (``where`` names it in errors);
    VerifyError for a file that is not a readable PE file."""
    image = _Image(data, where)
    # Import descriptor: OriginalFirstThunk, TimeDateStamp, ForwarderChain, Name, FirstThunk.
    dlls = image.descriptors(_IMPORT, 20, 3, (0, 4))
    # Delay-load descriptor: Attributes, DllName, ModuleHandle, IAT, INT, bound IAT, unload
    # IAT, TimeDateStamp (all RVAs for the attributes MSVC writes).
    delayed = image.descriptors(_DELAY, 32, 1, (4, 3))
    return PeImports(image.machine, dlls, delayed)


def file_imports(path: Path) -> PeImports:
    """The imports of the PE file at ``path``."""
    return read_imports(Path(path).read_bytes(), str(path))
