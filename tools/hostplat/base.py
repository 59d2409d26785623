"""What a build does differently on the OS of the machine it runs on: the :class:`HostOS` seam.

Cells build on Linux (x86_64, aarch64) and natively on Windows runners (win_amd64, the host
backend). Everything that differs between the two is one member of :class:`HostOS`, and each
OS is one module implementing it with module-level names (``tools.hostplat.linux``,
``tools.hostplat.windows``), as cibuildwheel keeps each platform in ``platforms/<name>.py``
behind one Protocol. Callers take ``host: HostOS`` (default: :func:`tools.hostplat.current`,
this machine's) and never ask which OS it is, so both sides run on any machine in the tests.

Also here: what an sdist's extraction hands a host to write (:class:`TreeMember`), planned and
checked OS-independently by ``tools.pipeline.source``.
"""

from __future__ import annotations

import stat
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

#: The kinds of member an sdist may hold (a :class:`TreeMember`'s ``kind``).
FOLDER, FILE, SYMLINK, HARDLINK = "folder", "file", "symbolic link", "hard link"
#: Bytes copied per read when a member is written.
COPY_BYTES = 256 << 10


@dataclass(frozen=True)
class TreeMember:
    """One member of an sdist to write: its path parts below the extraction folder, kind and
    header, and for a hard link the parts of the file it names."""

    parts: tuple[str, ...]
    kind: str
    member: tarfile.TarInfo
    source: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The member's path, normalized."""
        return "/".join(self.parts)


def file_mode(mode: int) -> int:
    """What ``tarfile``'s ``data`` filter keeps of a file's mode: no set-id, sticky or
    group/other write bits, the owner may read and write, execute only where the owner may."""
    mode = (mode & 0o755) | stat.S_IRUSR | stat.S_IWUSR
    return mode if mode & stat.S_IXUSR else mode & ~0o111


class HostOS(Protocol):
    """One OS a build runs on, as a platform module implements it (see the module docstring)."""

    #: ``linux`` or ``windows``: the OS as ``tools.core.platforms.Platform.os`` names it.
    name: str
    #: The PEP 508 marker variables of a machine of this OS (``sys_platform``, ``os_name``,
    #: ``platform_system``), for reading a requirement's marker there.
    markers: Mapping[str, str]
    #: The characters that separate folders in a path a user writes.
    path_separators: tuple[str, ...]
    #: The suffix of an object file the compiler writes (``.o``, ``.obj``).
    object_suffix: str
    #: Whether a script on PATH is an ``.exe`` launcher with the script inside (distlib's
    #: ScriptMaker), rather than a file with a shebang and its execute bits set.
    script_launchers: bool
    #: Whether ``os.execv`` replaces this process (POSIX); elsewhere it starts another one and
    #: returns at once, so a stand-in must run the program as a child and wait.
    execs: bool

    def exe_name(self, program: str) -> str:
        """The file name of the executable ``program`` (``nvcc``, ``ccache``)."""
        ...

    def venv_python(self, venv: Path) -> Path:
        """The interpreter of the virtual environment at ``venv``."""
        ...

    def join_command(self, args: Sequence[str]) -> str:
        """``args`` as one command line this OS's programs split back into them."""
        ...

    def compiler_links(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Which of the compiler links ``names`` a cached build makes (ccache masquerading)."""
        ...

    def stand_in_object(self, path: Path) -> Path | None:
        """An empty object file compiled at ``path``, or None when no C compiler answers."""
        ...

    def measure(self, command: str, *, cwd: Path, env: dict[str, str], log: Path,
                timeout: float, sample: float) -> tuple[int, float, int, int]:
        """Run one shell command line, its output into ``log``: (exit status, wall seconds,
        peak memory of its process tree sampled every ``sample`` seconds, largest single
        process's); past ``timeout`` its tree is killed and the status is -9."""
        ...

    def kill_tree(self, proc: subprocess.Popen) -> None:
        """Stop ``proc`` (started by :meth:`measure`'s way) and every process it started."""
        ...

    def write_tree(self, tar: tarfile.TarFile, entries: Sequence[TreeMember],
                   dest: Path) -> None:
        """Write the checked members of ``tar`` into the new, empty folder ``dest`` so that
        no write can go through a link, whatever the archive holds."""
        ...

    def available_memory(self, meminfo: Path, cgroup: Path) -> int:
        """Bytes of memory a build may use now (``meminfo``, ``cgroup``: Linux's files)."""
        ...

    def compiler_env(self, torch: str, env: Mapping[str, str]) -> dict[str, str]:
        """The compiler's variables a cell for this OS gets on top of ``env`` (the others),
        for torch series ``torch``."""
        ...
