"""C++ symbol names in readable form: one demangler for the ABI check and the selector's doctor.

Standard library only, so that the selector's single-file download can carry it. ``c++filt`` does
the work where it is installed; without it a mangled name is reduced to its qualified name
(``c10::cuda::c10_cuda_check_implementation(...)``), enough to see whose symbol it is.
"""

from __future__ import annotations

import shutil
import subprocess

#: Seconds one c++filt run may take (it answers in milliseconds; a hung one must not hang us).
CXXFILT_TIMEOUT = 60


def demangle_all(names: list[str]) -> list[str]:
    """C++ names for mangled ``names`` (same order), via c++filt; unchanged without it."""
    cxxfilt = shutil.which("c++filt")
    if not names or cxxfilt is None:
        return list(names)
    try:
        proc = subprocess.run([cxxfilt], input="\n".join(names) + "\n", capture_output=True,
                              text=True, timeout=CXXFILT_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return list(names)
    out = proc.stdout.splitlines()
    return out if proc.returncode == 0 and len(out) == len(names) else list(names)


def demangle(symbol: str) -> str:
    """One C++ symbol in readable form: c++filt's answer, else its qualified name, else itself."""
    readable = demangle_all([symbol])[0]
    if readable != symbol:
        return readable
    return qualified_name(symbol) or symbol


def qualified_name(symbol: str) -> str | None:
    """The qualified name of an Itanium-mangled function, without its parameters.

    >>> qualified_name("_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib")
    'c10::cuda::c10_cuda_check_implementation(...)'
    >>> qualified_name("not_mangled") is None
    True
    """
    if not symbol.startswith("_Z"):
        return None
    s, i = symbol[2:], 0
    nested = s.startswith("N")
    if nested:
        i = 1
        while i < len(s) and s[i] in "KVr":  # cv-qualifiers of a member function
            i += 1
    parts = []
    if s.startswith("St", i):
        parts.append("std")
        i += 2
    while i < len(s) and s[i].isdigit():
        j = i
        while j < len(s) and s[j].isdigit():
            j += 1
        n = int(s[i:j])
        parts.append(s[j:j + n])
        i = j + n
        if not nested:
            break
    return "::".join(parts) + "(...)" if parts else None
