"""Running another machine's image here: what the container backend adds for an emulated one.

A local stand-in image for another machine (``tools.devtools.armimage``: arm64 on x86_64) says
its machine in a label. podman runs it through the kernel's qemu-user handler, which passes the
host's ``/proc/cpuinfo`` through: an aarch64 program reading it finds no ARM core, and torch's
cpuinfo library then dereferences NULL while ``import torch`` loads ``torch._C`` (SIGSEGV, after
xbyak_aarch64's "Can't open MIDR_EL1 sysfs entry"; Debian 12's qemu 7.2). So the backend mounts
an aarch64 ``cpuinfo`` over it (runc allows a bind mount at that one file, as LXCFS uses).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from pathlib import Path

from tools.core.paths import cache_dir

#: The label naming the machine an image's binaries are for (``aarch64``); none: this machine's.
MACHINE_LABEL = "org.cuwheels.builder.machine"
#: The label naming the finish step's Python in an image that has no ``cp312`` (the arm64
#: stand-in's only Python is Debian's 3.11).
TOOLS_PYTHON_LABEL = "org.cuwheels.builder.tools-python"

#: What an aarch64 kernel shows in /proc/cpuinfo (two Neoverse N1 cores).
CPUINFO = "".join(
    f"processor\t: {i}\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 "
    "crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs\nCPU implementer\t: 0x41\n"
    "CPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n"
    for i in range(2))
#: The files each emulated machine needs in place of the host's.
CPUINFOS = {"aarch64": CPUINFO}


def cpuinfo_file(machine: str = "aarch64", cache: Path | None = None) -> Path:
    """A file holding ``machine``'s ``/proc/cpuinfo`` (:data:`CPUINFOS`), written once."""
    text = CPUINFOS[machine]
    path = (cache or cache_dir()) / f"{machine}-cpuinfo"
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def emulated_machine(labels: Mapping[str, str], host: str | None = None) -> str | None:
    """The machine an image's label names when it isn't this one (the container runs
    emulated), else None."""
    machine = labels.get(MACHINE_LABEL)
    return machine if machine and machine != (host or platform.machine()) else None


def emulation_volumes(labels: Mapping[str, str], host: str | None = None,
                      cache: Path | None = None) -> tuple[str, ...]:
    """``--volume`` values an emulated image needs (its ``/proc/cpuinfo``); none otherwise or
    for a machine with nothing to stand in."""
    machine = emulated_machine(labels, host)
    if machine is None or machine not in CPUINFOS:
        return ()
    return (f"{cpuinfo_file(machine, cache)}:/proc/cpuinfo:ro",)
