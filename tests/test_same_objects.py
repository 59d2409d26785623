"""benchmarks/same_objects.py: what it edits in a command line and what it masks in an object
(the compiles themselves run by hand: two flash_attn units take minutes each)."""

from __future__ import annotations

from benchmarks.same_objects import compare, masked, only_arch


def test_only_arch_keeps_one_gencode_pair_and_everything_else():
    argv = ["nvcc", "-c", "a.cu", "-gencode", "arch=compute_80,code=sm_80", "-gencode",
            "arch=compute_90,code=sm_90", "--threads", "1"]
    assert only_arch(argv, "90") == ["nvcc", "-c", "a.cu", "-gencode",
                                     "arch=compute_90,code=sm_90", "--threads", "1"]
    assert only_arch(argv, None) == argv


def _object(pid: bytes, module: bytes, tail: bytes = b"") -> bytes:
    return (b"\x7fELF tmpxft_" + pid + b"_00000000-6_k.cudafe1.cpp\x00_ZN73_INTERNAL_" + module
            + b"_36_k_cu_" + module + b"_2132846ignoreE\x00_GLOBAL__N__" + module + b"_1k" + tail)


def test_nvcc_s_per_compile_names_are_masked_and_nothing_else():
    a, b = _object(b"00002233", b"19de2e12"), _object(b"00002256", b"753b0fdd")
    assert a != b and masked(a) == masked(b)
    row = compare(a, b, control=_object(b"00002299", b"19de2e12"))
    assert row["identical"] is False and row["identical_with_nvcc_names_masked"] is True
    assert row["control_identical_with_nvcc_names_masked"] is True
    # a difference in the code itself stays a difference
    assert compare(a, _object(b"00002256", b"753b0fdd", b"\x90"))[
        "identical_with_nvcc_names_masked"] is False
