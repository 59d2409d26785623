"""tools.finish.archcheck: the finish step refuses a wheel whose binaries are for another machine
than its platform tag names, naming the wheel, each binary, the rule and the fix."""

from __future__ import annotations

import pytest
from wheelfactory import make_wheel

from tests.fixtures.binaries.make_binaries import (AMD64, ARM64, EM_AARCH64, EM_X86_64,
                                                   cross_compiled_so, elf_header, pe_dll)
from tools.core.errors import VerifyError
from tools.finish.archcheck import check_binaries

FITS = [
    # (tag, members, summary)
    ("cp312-cp312-manylinux_2_28_aarch64", {"ext/_C.so": elf_header(EM_AARCH64)},
     {"ext/_C.so": "aarch64 ELF"}),
    ("cp312-cp312-linux_x86_64", {"ext/_C.so": elf_header(EM_X86_64),       # grafted library too
                                  "ext.libs/libfoo-1234abcd.so.1": elf_header(EM_X86_64)},
     {"ext.libs/libfoo-1234abcd.so.1": "x86_64 ELF", "ext/_C.so": "x86_64 ELF"}),
    ("cp312-cp312-win_amd64", {"ext/_C.cp312-win_amd64.pyd": pe_dll(AMD64),
                               "ext.libs/helper.dll": pe_dll(AMD64)},
     {"ext.libs/helper.dll": "x86_64 PE", "ext/_C.cp312-win_amd64.pyd": "x86_64 PE"}),
    ("cp312-cp312-linux_x86_64", {"ext/libbar.so": b"INPUT(-lbaz)\n"}, {}),  # a linker script
]


@pytest.mark.parametrize("tag, members, summary", FITS, ids=[t for t, _, _ in FITS])
def test_binaries_that_fit_the_tag(tmp_path, tag, members, summary):
    report = check_binaries(make_wheel(tmp_path, "ext", "1.0", tag=tag, extra_files=members))
    assert report.summary() == summary


REFUSED = [
    # (tag, members, what the message must say)
    ("cp312-cp312-manylinux_2_28_aarch64", {"ext/_C.so": elf_header(EM_X86_64)},
     r"ext/_C\.so is an ELF binary for x86_64 \(e_machine 62, EM_X86_64\), but the wheel is tagged "
     r"manylinux_2_28_aarch64"),
    ("cp312-cp312-win_amd64", {"ext/_C.pyd": elf_header(EM_X86_64)},
     r"ext/_C\.pyd is an ELF binary for x86_64 .* whose binaries are PE for x86_64"),
    ("cp312-cp312-win_amd64", {"ext/_C.pyd": pe_dll(AMD64), "ext.libs/a.dll": pe_dll(ARM64)},
     r"ext\.libs/a\.dll is a PE binary for aarch64"),
    ("cp312-cp312-linux_x86_64", {"ext/_C.so": elf_header(EM_X86_64)[:10]},
     r"ext/_C\.so can't be read as a binary: an ELF header is 52 or 64 bytes"),
]


@pytest.mark.parametrize("tag, members, message", REFUSED, ids=[m[:30] for _, _, m in REFUSED])
def test_binaries_that_dont_fit_are_refused_by_name(tmp_path, tag, members, message):
    wheel = make_wheel(tmp_path, "ext", "1.0", tag=tag, extra_files=members)
    with pytest.raises(VerifyError, match=message) as info:
        check_binaries(wheel)
    assert str(info.value).startswith(f"{wheel.name}: 1 compiled file(s) don't fit")
    assert "a renamed wheel is never right" in info.value.hint


def test_a_real_aarch64_object_in_an_x86_64_wheel(tmp_path):
    so = cross_compiled_so(tmp_path / "m.so")
    if so is None:
        pytest.skip("aarch64-linux-gnu-gcc is not installed (apt-get install gcc-aarch64-linux-gnu); "
                    "the crafted headers above cover the same rule")
    good = make_wheel(tmp_path / "a", "ext", "1.0", tag="cp312-cp312-linux_aarch64",
                      extra_files={"ext/_C.so": so.read_bytes()})
    assert check_binaries(good).summary() == {"ext/_C.so": "aarch64 ELF"}
    bad = make_wheel(tmp_path / "b", "ext", "1.0", tag="cp312-cp312-linux_x86_64",
                     extra_files={"ext/_C.so": so.read_bytes()})
    with pytest.raises(VerifyError, match="is an ELF binary for aarch64"):
        check_binaries(bad)
