"""The import table of a Windows ``.pyd``/``.dll``: which DLLs it loads, and what it takes from each.

tools.finish.winrepair reads this to check that every DLL an extension loads is vendored, torch's,
Python's or Windows'. The PE/COFF parsing is ``pefile``'s (installed with delvewheel, the Windows
repair tool, and pinned beside it): its import directory (data directory 1) and delay-load
directory (13). Around it, this module keeps what the check needs from a reader of untrusted
files: every failure is a VerifyError naming the file, never a traceback, and an import table
pefile could read only in part (it notes what it skipped as a warning, and goes on) is a failure
too, so that no imported DLL goes unseen. pefile caps the symbols it reads (MAX_IMPORT_SYMBOLS,
8192 over the file: a torch extension imports a few thousand), the DLL and function names' lengths,
and the entries of a table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tools.core.errors import VerifyError

#: pefile's one warning of the import parse that is no damage: a heuristic about packers (a DLL
#: that imports LoadLibrary and GetProcAddress and little else).
_NOT_DAMAGE = ("Imported symbols contain entries typical of packed executables",)


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


def _fail(where: str, why: str) -> VerifyError:
    return VerifyError(f"{where} is not a PE file this check can read: {why}",
                       hint="a .pyd/.dll must come from MSVC's linker (or one like it)")


def _check_headers(data: bytes, where: str) -> None:
    """VerifyError, in this check's words, for a file without the MZ header, the PE signature
    or a whole COFF header (pefile's own words for these are less plain)."""
    if data[:2] != b"MZ" or len(data) < 0x40:
        raise _fail(where, "no MZ header")
    pe = int.from_bytes(data[0x3C:0x40], "little")
    if data[pe:pe + 4] != b"PE\0\0":
        raise _fail(where, f"no PE signature at offset {pe}")
    if pe + 4 + 20 > len(data):
        raise _fail(where, f"a header at offset {pe + 4} runs past the end of the file")


def _names(entries: list) -> dict[str, tuple[str, ...]]:
    """DLL name -> function names (``#N`` for ordinal N) of pefile's import entries."""
    found: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        functions = tuple(f"#{imp.ordinal}" if imp.import_by_ordinal or imp.name is None
                          else imp.name.decode("latin-1") for imp in entry.imports)
        found[entry.dll.decode("latin-1")] = functions
    return found


def read_imports(data: bytes, where: str = "the file") -> PeImports:
    """The imports of the PE file whose bytes are ``data`` (``where`` names it in errors);
    VerifyError for a file that is not a readable PE file, or whose import tables are damaged."""
    # Imported here: the finish step in a Linux container imports this module (through
    # winrepair) with only the Linux tools installed, and never reads a PE file there.
    import pefile

    _check_headers(data, where)
    try:
        pe = pefile.PE(data=data, fast_load=True)
        try:
            before = len(pe.get_warnings())
            pe.parse_data_directories(directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"],
                                                   pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT"]])
            damage = [w for w in pe.get_warnings()[before:] if not w.startswith(_NOT_DAMAGE)]
            if damage:
                raise _fail(where, f"its import tables are damaged ({damage[0]})")
            return PeImports(pe.FILE_HEADER.Machine,
                             _names(getattr(pe, "DIRECTORY_ENTRY_IMPORT", [])),
                             _names(getattr(pe, "DIRECTORY_ENTRY_DELAY_IMPORT", [])))
        finally:
            pe.close()
    except pefile.PEFormatError as exc:
        raise _fail(where, str(exc.value)) from None


def file_imports(path: Path) -> PeImports:
    """The imports of the PE file at ``path``."""
    return read_imports(Path(path).read_bytes(), str(path))
