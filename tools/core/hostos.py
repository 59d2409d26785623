"""This machine's operating system, where a file name or a process depends on it.

The host backend and the kernel shards run natively on Windows runners (win_amd64 cells) as on
Linux ones. Each place that differs takes the platform as an argument, ``windows``, defaulting
to this machine's (:data:`WINDOWS`), so that both sides are exercised on any machine.

Standard library only.
"""

from __future__ import annotations

import os

#: Whether this machine runs Windows (where executables end in ``.exe`` and a venv's
#: interpreter is ``Scripts\\python.exe``).
WINDOWS = os.name == "nt"


def exe_name(name: str, windows: bool = WINDOWS) -> str:
    """The file name of the executable ``name`` (``nvcc``, ``ccache``): ``nvcc.exe`` on
    Windows, ``nvcc`` elsewhere."""
    return f"{name}.exe" if windows else name
