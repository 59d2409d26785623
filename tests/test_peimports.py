"""tools.finish.peimports: the import table of PE files made byte by byte."""

from __future__ import annotations

import pytest

from tests.fixtures.binaries.make_binaries import AMD64, ARM64, pe_dll
from tools.core.errors import VerifyError
from tools.finish.peimports import read_imports

TABLES = [
    # (imports written, machine)
    ({}, AMD64),                                                        # imports nothing
    ({"KERNEL32.dll": ["GetLastError", "CloseHandle"]}, AMD64),
    ({"torch_cpu.dll": ["??0Tensor@at@@QEAA@XZ"], "python312.dll": ["PyModule_Create2"]}, AMD64),
    ({"KERNEL32.dll": ["GetLastError"]}, ARM64),
]


@pytest.mark.parametrize("imports, machine", TABLES, ids=[str(i) for i, _ in enumerate(TABLES)])
def test_read_imports(imports, machine):
    found = read_imports(pe_dll(machine, imports))
    assert found.machine == machine
    assert found.dlls == {dll: tuple(functions) for dll, functions in imports.items()}
    assert found.all_dlls() == list(imports)


BROKEN = [
    (b"MZ", "no MZ header"),
    (pe_dll(AMD64)[:0x90], "a header at offset 132 runs past the end of the file"),
    (b"MZ" + bytes(0x3A) + (0x40).to_bytes(4, "little") + bytes(64), "no PE signature at offset 64"),
]


@pytest.mark.parametrize("data, message", BROKEN, ids=[m for _, m in BROKEN])
def test_a_file_that_is_not_a_readable_pe_is_named(data, message):
    with pytest.raises(VerifyError, match=f"x.pyd is not a PE file this check can read: {message}"):
        read_imports(data, "x.pyd")
