"""tools.core.symbols: the one demangler, with c++filt and without it."""

from __future__ import annotations

import shutil

import pytest

from tools.core import symbols

C10_SYMBOL = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib"


def test_demangling_without_cxxfilt(monkeypatch):
    monkeypatch.setattr(symbols.shutil, "which", lambda prog: None)
    assert symbols.demangle(C10_SYMBOL) == "c10::cuda::c10_cuda_check_implementation(...)"
    assert symbols.demangle("_ZNK3c1010TensorImpl4sizeEl") == "c10::TensorImpl::size(...)"
    assert symbols.demangle("not_mangled") == "not_mangled"
    assert symbols.demangle_all([C10_SYMBOL, "not_mangled"]) == [C10_SYMBOL, "not_mangled"]


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="needs c++filt (binutils)")
def test_demangling_with_cxxfilt():
    assert symbols.demangle(C10_SYMBOL) == \
        "c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool)"
    assert symbols.demangle_all(["_ZN2at3barEi", "not_mangled"]) == ["at::bar(int)", "not_mangled"]
    assert symbols.demangle("not_mangled") == "not_mangled"


def test_qualified_name_reads_std_and_nested_names():
    assert symbols.qualified_name("_ZSt9terminatev") == "std::terminate(...)"
    assert symbols.qualified_name("_ZN5flash12run_mha_fwd_EPv") == "flash::run_mha_fwd_(...)"
    assert symbols.qualified_name("_Z") is None
