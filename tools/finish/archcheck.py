"""Every compiled file in a wheel is for the machine its platform tag names.

An aarch64 cell whose build ran an x86_64 compiler (a cross toolchain missing, a wrong image)
still produces a wheel named ``..._aarch64.whl``; pip installs it on an ARM machine and the import
fails there. The header of each binary says what it is (tools.core.binarch); this step reads
them all, before the wheel is published, and the index reads them again for wheels it did not
build (tools.sitegen.wheelread).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from tools.core.binarch import HEAD_BYTES, Binary, NotABinary, is_binary_name, mismatch, read_binary
from tools.core.errors import VerifyError


@dataclass(frozen=True)
class BinaryReport:
    """The binaries of one wheel, by member name, and the platform tags they were checked for."""

    platforms: tuple[str, ...]
    binaries: dict[str, Binary]

    def summary(self) -> dict[str, str]:
        """Member -> ``x86_64 ELF``, for the build report and the manifest."""
        return {name: f"{b.arch} {b.format}" for name, b in sorted(self.binaries.items())}


def wheel_platforms(wheel: Path) -> tuple[str, ...]:
    """The platform tags in ``wheel``'s file name, sorted; VerifyError for a name that is no
    wheel's."""
    try:
        _, _, _, tags = parse_wheel_filename(Path(wheel).name)
    except InvalidWheelFilename as exc:
        raise VerifyError(f"{Path(wheel).name!r} is not a wheel file name: {exc}") from None
    return tuple(sorted({tag.platform for tag in tags}))


def check_binaries(wheel: Path) -> BinaryReport:
    """Read the header of every compiled member of ``wheel`` (``*.so``, ``*.so.N``, ``*.pyd``,
    ``*.dll``) and check it against the wheel's platform tags.

    VerifyError naming the wheel, each binary that doesn't fit (what it is and what the tag asks
    for), the rule and the fix; also for a member that starts like an ELF or PE file but whose
    header can't be read.
    """
    wheel = Path(wheel)
    platforms = wheel_platforms(wheel)
    binaries: dict[str, Binary] = {}
    problems: list[str] = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir() or not is_binary_name(info.filename):
                continue
            with zf.open(info) as fh:
                head = fh.read(HEAD_BYTES)
            try:
                binary = read_binary(head)
            except NotABinary as exc:
                problems.append(f"{info.filename} can't be read as a binary: {exc}")
                continue
            if binary is None:
                continue  # named like a library, holds something else (a linker script)
            binaries[info.filename] = binary
            if (why := mismatch(info.filename, binary, platforms)) is not None:
                problems.append(why)
    if problems:
        shown = "\n  ".join(problems[:10])
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise VerifyError(f"{wheel.name}: {len(problems)} compiled file(s) don't fit its "
                          f"platform tag {', '.join(platforms)}:\n  {shown}{more}",
                          hint="build the cell on (or for) the machine its platform names: the "
                               "aarch64 builder image for linux_aarch64, a Windows runner for "
                               "win_amd64; a renamed wheel is never right")
    return BinaryReport(platforms, binaries)
