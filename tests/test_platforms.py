"""tools.core.platforms: the platform names, and how wheel tags, machines and uv spell them."""

from __future__ import annotations

import pytest

from tools.core.platforms import (
    PLATFORMS, normalize_os, platform_name, tag_arch, tag_platform, uv_python_platform, wheel_platforms,
)


@pytest.mark.parametrize("sys_platform, machine, name", [
    ("linux", "x86_64", "linux_x86_64"),
    ("linux", "aarch64", "linux_aarch64"),
    ("linux", "arm64", "linux_aarch64"),      # what some tools say for aarch64
    ("win32", "AMD64", "win_amd64"),          # platform.machine() on Windows
    ("win32", "ARM64", None),                 # Windows on ARM: no wheels
    ("darwin", "arm64", None),                # macOS: no CUDA
    ("linux", "ppc64le", None),
    ("linux", "i686", None),                  # a 32-bit interpreter on a 64-bit kernel
])
def test_a_machines_platform(sys_platform, machine, name):
    assert platform_name(normalize_os(sys_platform), machine) == name


@pytest.mark.parametrize("tag, expected", [
    ("manylinux_2_28_x86_64", ("linux_x86_64", (2, 28))),
    ("manylinux_2_28_aarch64", ("linux_aarch64", (2, 28))),
    ("manylinux2014_aarch64", ("linux_aarch64", (2, 17))),   # legacy alias (PEP 600)
    ("manylinux1_x86_64", ("linux_x86_64", (2, 5))),
    ("linux_x86_64", ("linux_x86_64", None)),                # no baseline promised
    ("win_amd64", ("win_amd64", None)),
    ("win_arm64", None),
    ("musllinux_1_2_x86_64", None),                          # no glibc: none of ours
    ("macosx_11_0_arm64", None),
    ("manylinux_2_28_ppc64le", None),
    ("any", None),                                           # every platform: see wheel_platforms
])
def test_a_tags_platform(tag, expected):
    assert tag_platform(tag) == expected


@pytest.mark.parametrize("field, expected", [
    ("manylinux_2_17_x86_64.manylinux2014_x86_64", {"linux_x86_64"}),  # one platform, two spellings
    ("manylinux_2_28_aarch64", {"linux_aarch64"}),
    ("win_amd64", {"win_amd64"}),
    ("any", set(PLATFORMS)),
    ("macosx_11_0_arm64", set()),
])
def test_the_platforms_a_wheel_covers(field, expected):
    assert wheel_platforms(field) == expected


@pytest.mark.parametrize("tag, target", [
    ("manylinux_2_28_x86_64", "x86_64-manylinux_2_28"),
    ("manylinux_2_28_aarch64", "aarch64-manylinux_2_28"),
    ("manylinux2014_aarch64", "aarch64-manylinux_2_17"),
    ("manylinux1_x86_64", "x86_64-manylinux_2_17"),   # uv's oldest manylinux target
    ("linux_x86_64", "x86_64-unknown-linux-gnu"),
    ("win_amd64", "x86_64-pc-windows-msvc"),
    ("macosx_11_0_arm64", None),
])
def test_uvs_python_platform_for_a_wheel(tag, target):
    assert uv_python_platform(tag) == target


@pytest.mark.parametrize("os_name, arch, tag", [
    ("linux", "x86_64", "x86_64"),
    ("linux", "AMD64", "x86_64"),
    ("linux", "arm64", "aarch64"),
    ("windows", "AMD64", "amd64"),     # win_amd64
    ("windows", "x86_64", "amd64"),
    ("windows", "ARM64", "arm64"),     # win_arm64
    ("darwin", "arm64", "aarch64"),
    ("linux", "ppc64le", "ppc64le"),
])
def test_an_arch_as_wheel_tags_spell_it(os_name, arch, tag):
    assert tag_arch(os_name, arch) == tag
