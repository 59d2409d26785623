"""tools.core.hostos: an executable's file name on Windows and elsewhere."""

from __future__ import annotations

import os

from tools.core.hostos import WINDOWS, exe_name


def test_an_executable_is_named_with_exe_on_windows_only():
    assert exe_name("nvcc", windows=True) == "nvcc.exe"
    assert exe_name("nvcc", windows=False) == "nvcc"
    # the default is this machine's
    assert WINDOWS == (os.name == "nt")
    assert exe_name("ccache") == ("ccache.exe" if os.name == "nt" else "ccache")
