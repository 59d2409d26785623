"""The platforms the project builds wheels for, and how each is spelled where it matters.

One name per platform, ``linux_x86_64``, ``linux_aarch64`` or ``win_amd64``, as the selector's
``--platform`` takes it and as ``selector.json``'s ``torch_platforms`` keys it. A wheel's platform
tag (``manylinux_2_28_aarch64``, ``manylinux2014_x86_64``, ``linux_x86_64``, ``win_amd64``) names
one of them, or none (macOS, musl, another CPU); ``any`` fits all of them. pip's ``--platform``
takes a wheel platform tag and uv's ``--python-platform`` a target triple, whose Linux form states
the glibc baseline (``aarch64-manylinux_2_28``).

Standard library only: the selector's single-file download (tools.selector.bundle) carries it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Platform:
    """One platform: its name, the OS and CPU arch of a machine that runs it (the arch as wheel
    tags spell it), a phrase for people, and uv's target for it when no glibc baseline is known."""

    name: str
    os: str
    arch: str
    shown: str
    uv_target: str


#: The platforms this project builds for, by name; a machine or wheel of another has no wheel here.
PLATFORMS = {
    "linux_x86_64": Platform("linux_x86_64", "linux", "x86_64", "Linux x86_64", "x86_64-unknown-linux-gnu"),
    "linux_aarch64": Platform("linux_aarch64", "linux", "aarch64", "Linux aarch64",
                              "aarch64-unknown-linux-gnu"),
    "win_amd64": Platform("win_amd64", "windows", "amd64", "Windows x86_64", "x86_64-pc-windows-msvc"),
}

#: How a CPU arch is spelled (``platform.machine()``, ``sysconfig.get_platform()``, a user) ->
#: the one name for it: Windows says ``AMD64``, Debian and macOS ``arm64``.
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}
#: Windows' wheel tags spell the arch their own way (``win_amd64``, ``win_arm64``).
_WINDOWS_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_([a-z0-9_]+)")
#: The glibc each legacy manylinux tag stands for (PEP 600).
_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def normalize_os(sys_platform: str) -> str:
    """``sys.platform`` as a platform's OS: ``linux``, ``windows``, else unchanged (``darwin``)."""
    if sys_platform.startswith("linux"):
        return "linux"
    if sys_platform in ("win32", "cygwin", "windows"):
        return "windows"
    return sys_platform


def tag_arch(os_name: str, arch: str) -> str:
    """``arch`` (as ``platform.machine()`` or a user says it) as wheel tags spell it on
    ``os_name``: ``AMD64`` -> ``x86_64`` on Linux, ``amd64`` on Windows; ``arm64`` -> ``aarch64``
    on Linux. An arch of no platform here is only lowercased."""
    cpu = arch.strip().lower()
    cpu = _ARCH_ALIASES.get(cpu, cpu)
    return _WINDOWS_ARCH.get(cpu, cpu) if os_name == "windows" else cpu


def platform_name(os_name: str, arch: str) -> str | None:
    """The platform of a machine running ``os_name`` (normalize_os) on ``arch`` (any spelling
    tag_arch reads), or None when the project builds nothing for it (macOS, Windows on ARM,
    ppc64le...)."""
    cpu = tag_arch(os_name, arch)
    if os_name == "linux" and cpu in ("x86_64", "aarch64"):
        return f"linux_{cpu}"
    if os_name == "windows" and cpu == "amd64":
        return "win_amd64"
    return None


def tag_platform(tag: str) -> tuple[str, tuple[int, int] | None] | None:
    """``(platform name, glibc baseline or None)`` of one wheel platform tag
    (``manylinux_2_28_aarch64`` -> ``("linux_aarch64", (2, 28))``; ``linux_x86_64`` promises no
    baseline; ``win_amd64`` needs none); None for a tag of no platform here, ``any`` included."""
    if tag == "win_amd64":
        return "win_amd64", None
    m = _MANYLINUX.fullmatch(tag)
    if m:
        arch, glibc = m.group(3), (int(m.group(1)), int(m.group(2)))
    else:
        prefix, _, arch = tag.partition("_")
        if prefix in _LEGACY:
            glibc = _LEGACY[prefix]
        elif prefix == "linux":
            glibc = None
        else:
            return None
    name = f"linux_{arch}"
    return (name, glibc) if name in PLATFORMS else None


def wheel_platforms(platform_tags: str) -> frozenset[str]:
    """The platform names a wheel's platform field covers (``manylinux_2_17_x86_64.manylinux2014_x86_64``
    is one platform; ``any`` is every platform)."""
    found = set()
    for tag in platform_tags.split("."):
        if tag == "any":
            return frozenset(PLATFORMS)
        parsed = tag_platform(tag)
        if parsed is not None:
            found.add(parsed[0])
    return frozenset(found)


def uv_python_platform(tag: str) -> str | None:
    """uv's ``--python-platform`` for a machine a wheel tagged ``tag`` installs on:
    ``manylinux_2_28_aarch64`` -> ``aarch64-manylinux_2_28`` (uv then accepts glibc up to 2.28),
    ``win_amd64`` -> ``x86_64-pc-windows-msvc``; None for a tag of no platform here."""
    parsed = tag_platform(tag)
    if parsed is None:
        return None
    name, glibc = parsed
    platform = PLATFORMS[name]
    if glibc is None:
        return platform.uv_target
    # uv's manylinux targets start at 2.17; an older baseline installs there too.
    major, minor = max(glibc, (2, 17))
    return f"{platform.arch}-manylinux_{major}_{minor}"
