"""The wheel as users' own tools see it: ``installer``'s RECORD validation and ``auditwheel show``.

Our checks (tools.finish.checks, tools.finish.abi) say the wheel is right; these say the
tools that users and distributors run accept it. Both have failed on wheels our other checks
passed: a RECORD that listed directories made ``auditwheel show`` (6.4.2, 6.8.2) crash with
``IsADirectoryError`` while pip and uv installed the wheel happily.

``auditwheel show`` has no ``--exclude``: torch's libraries are never found next to the
extension, so it always calls a torch extension consistent with ``linux_x86_64`` only. What it
can judge is the glibc symbol versions the extension needs ("This constrains the platform tag
to ..."): the wheel's manylinux tag must be at least that (a wheel tagged ``manylinux_2_28`` whose
symbols need glibc 2.34 would fail to load on the machines its tag promises).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_wheel_filename

from tools.core.errors import ToolchainError, VerifyError

_CONSTRAINT = re.compile(r'This constrains the platform tag to\s+"([^"]+)"')
_CONSISTENT = re.compile(r'consistent with the following platform tag:\s+"([^"]+)"')
_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")


@dataclass(frozen=True)
class UsersView:
    """What users' tools said of one wheel (for the build report)."""

    record_files: int                 # files whose hash and size installer checked against RECORD
    auditwheel_constraint: str | None  # the tag the symbol versions constrain it to, if any
    auditwheel_ran: bool = True        # False for a Windows wheel: auditwheel reads ELF only


def validate_record(wheel: Path) -> int:
    """Check every file of ``wheel`` against its RECORD with ``installer`` (what ``python -m
    installer --validate-record all`` does); return how many files were checked.

    VerifyError naming the wheel and installer's complaint when a file is missing from RECORD,
    RECORD lists a file the zip lacks, or a hash or size differs.
    """
    try:
        from installer.sources import WheelFile
        from installer.sources import _WheelFileValidationError as InvalidRecord
    except ImportError:
        raise ToolchainError("the installer package is not installed",
                             hint="make setup (installer is a pinned dependency of the farm)") from None
    try:
        with WheelFile.open(wheel) as source:
            source.validate_record(validate_contents=True)
            return sum(1 for _ in source.get_contents())
    except InvalidRecord as exc:
        raise VerifyError(f"{Path(wheel).name}: installer --validate-record all refuses it: "
                          f"{'; '.join(exc.issues)}",
                          hint="RECORD must list every file of the wheel, and files only, with "
                               "their sha256 and size (tools.finish.wheelmeta writes it)") from None


def manylinux_glibc(tag: str) -> tuple[int, int] | None:
    """The glibc version a ``manylinux_X_Y_arch`` tag promises; None for other tags.

    >>> manylinux_glibc("manylinux_2_28_x86_64"), manylinux_glibc("linux_x86_64")
    ((2, 28), None)
    """
    m = _MANYLINUX.match(tag)
    return (int(m.group(1)), int(m.group(2))) if m else None


def auditwheel_show(wheel: Path, *, auditwheel: str | None = None) -> str | None:
    """Run ``auditwheel show`` on ``wheel``; return the tag its symbol versions constrain it to
    (None when they constrain nothing). VerifyError when auditwheel fails on the wheel, or when
    the wheel's manylinux tag promises an older glibc than its symbols need."""
    command = [auditwheel or str(Path(sys.executable).with_name("auditwheel")), "show", str(wheel)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except FileNotFoundError:
        raise ToolchainError(f"auditwheel not found ({command[0]})",
                             hint="make setup (auditwheel is a pinned dependency of the farm)") from None
    name = Path(wheel).name
    if proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise VerifyError(f"{name}: `auditwheel show` fails on it (exit {proc.returncode}): "
                          f"{said[-1] if said else 'no output'}",
                          hint="users' and distributors' tooling runs auditwheel: the wheel's "
                               "layout must be one it reads (files only in RECORD, one .dist-info)")
    text = " ".join(proc.stdout.split())
    found = _CONSTRAINT.search(text) or _CONSISTENT.search(text)
    constraint = found.group(1) if found else None
    needed = manylinux_glibc(constraint) if constraint else None
    if needed is None:
        return constraint
    _, _, _, tags = parse_wheel_filename(name)
    for tag in sorted({t.platform for t in tags}):
        promised = manylinux_glibc(tag)
        if promised is not None and promised < needed:
            raise VerifyError(f"{name} is tagged {tag}, but `auditwheel show` says its symbol "
                              f"versions constrain it to {constraint}: it would not load on the "
                              "older glibc its tag promises",
                              hint="repair it to the policy auditwheel names (tools.finish.auditwheel_repair "
                                   "picks the lowest policy the build allows)")
    return constraint


def is_linux_wheel(wheel: Path) -> bool:
    """True when every platform tag of ``wheel`` is a Linux one (what ``auditwheel`` reads)."""
    _, _, _, tags = parse_wheel_filename(Path(wheel).name)
    return all(t.platform.startswith(("linux_", "manylinux", "musllinux_")) for t in tags)


def check_as_users_do(wheel: Path) -> UsersView:
    """Both checks on the finished ``wheel`` (see the module docstring); ``auditwheel show`` only
    on a Linux wheel (it reads ELF files; a Windows wheel's ``.pyd`` are PE files, which
    tools.finish.winrepair checks), on any architecture: it reads an aarch64 wheel on an x86_64
    machine as on an aarch64 one."""
    records = validate_record(wheel)
    if not is_linux_wheel(wheel):
        return UsersView(record_files=records, auditwheel_constraint=None, auditwheel_ran=False)
    return UsersView(record_files=records, auditwheel_constraint=auditwheel_show(wheel))
