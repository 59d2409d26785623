"""The build environment: available memory, the arch list, the variables a build sets (the
job sizing arithmetic is tools.plan.sizing's, tests/test_sizing.py)."""

from __future__ import annotations

import dataclasses

import pytest

from tools.hostplat import linux, windows
from tools.hostplat.windows import MSVC_CXX20
from tools.pipeline.buildenv import (available_memory_gib, build_env, format_archs, size_for,
                                     size_jobs)
from tools.plan.cells import cells_for
from tools.plan.recipes.model import load_recipe
from tools.plan.recipes.env import EnvVar


def test_cgroup_limit_caps_available_memory(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 33554432 kB\nMemAvailable: 25165824 kB\n")
    cgroup = tmp_path / "memory.max"
    cgroup.write_text(str(8 * 2**30))
    assert available_memory_gib(meminfo, cgroup) == pytest.approx(8.0)
    cgroup.write_text("max\n")
    assert available_memory_gib(meminfo, cgroup) == pytest.approx(24.0)


def test_windows_memory_comes_from_windows_not_proc(tmp_path, monkeypatch):
    """Windows has no /proc/meminfo, no cgroup and no os.sysconf: its available physical memory
    is GlobalMemoryStatusEx's (here stood in for; Linux has no kernel32 to call)."""
    monkeypatch.setattr(windows, "physical_memory_available", lambda: 12 * 2**30)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable: 25165824 kB\n")
    assert available_memory_gib(meminfo, tmp_path / "none", host=windows) == pytest.approx(12.0)
    assert available_memory_gib(meminfo, tmp_path / "none", host=linux) == pytest.approx(24.0)


def test_format_archs():
    assert format_archs(("80", "90a", "100"), "plain") == "80;90a;100"
    assert format_archs(("80", "90a", "100"), "torch") == "8.0;9.0a;10.0"


def test_build_env(write_recipe, good_recipe, mini_table):
    good_recipe["build"]["nvcc_threads"] = 4
    recipe = load_recipe(write_recipe(good_recipe), mini_table)
    cell = cells_for(recipe, mini_table)[0]
    sizing = size_jobs(cores=2, available_gib=24, job_memory_gib=2.0, nvcc_threads=4, archs=2)
    env = build_env(recipe, cell, sizing, archs=("90",), cuda_home="/usr/local/cuda")
    assert env["DEMO_CUDA_ARCHS"] == "90" and env["TORCH_CUDA_ARCH_LIST"] == "9.0"
    assert env["DEMO_FORCE_BUILD"] == "TRUE"
    assert env["MAX_JOBS"] == "2" and env["NVCC_THREADS"] == "2"  # two archs, two threads
    assert env["SOURCE_DATE_EPOCH"].isdigit() and env["CUDA_HOME"] == "/usr/local/cuda"


def test_fixed_threads_are_not_exported(write_recipe, good_recipe, mini_table):
    good_recipe["build"].update(nvcc_threads=4, nvcc_threads_fixed=True)
    recipe = load_recipe(write_recipe(good_recipe), mini_table)
    sizing = size_for(recipe, ("80", "90"), cores=2, available_gib=24)
    env = build_env(recipe, cells_for(recipe, mini_table)[0], sizing, archs=("80", "90"),
                    cuda_home=None)
    assert "NVCC_THREADS" not in env and sizing.nvcc_threads == 4


def _win_cell(recipe, table, torch):
    """The recipe's first cell as a Windows cell of torch series ``torch``."""
    return dataclasses.replace(cells_for(recipe, table)[0], platform="win_amd64",
                               platform_tag="win_amd64", torch=torch)


def _env(recipe, cell):
    sizing = size_for(recipe, ("90",), cores=2, available_gib=24)
    return build_env(recipe, cell, sizing, archs=("90",), cuda_home=None)


def test_windows_cell_from_torch_2_13_gets_msvc_and_cxx20(write_recipe, good_recipe, mini_table):
    recipe = load_recipe(write_recipe(good_recipe), mini_table)
    for torch in ("2.13", "2.15"):
        env = _env(recipe, _win_cell(recipe, mini_table, torch))
        assert env["DISTUTILS_USE_SDK"] == "1"
        assert env["CXXFLAGS"] == MSVC_CXX20 == "/permissive- /std:c++20"
        assert env["DEMO_FORCE_BUILD"] == "TRUE" and env["TORCH_CUDA_ARCH_LIST"] == "9.0"


def test_windows_cell_before_torch_2_13_gets_msvc_only(write_recipe, good_recipe, mini_table):
    recipe = load_recipe(write_recipe(good_recipe), mini_table)
    for torch in ("2.12", "2.8"):
        env = _env(recipe, _win_cell(recipe, mini_table, torch))
        assert env["DISTUTILS_USE_SDK"] == "1" and "CXXFLAGS" not in env


def test_linux_cells_get_no_msvc_variables(write_recipe, good_recipe, mini_table):
    """Linux x86_64 and aarch64 cells' variables are what they were: none of Windows'."""
    recipe = load_recipe(write_recipe(good_recipe), mini_table)
    linux = cells_for(recipe, mini_table)[0]
    for platform in ("linux_x86_64", "linux_aarch64"):
        cell = dataclasses.replace(linux, platform=platform, torch="2.13")
        env = _env(recipe, cell)
        assert not {"DISTUTILS_USE_SDK", "CXXFLAGS"} & set(env)
        assert set(env) == {"DEMO_CUDA_ARCHS", "DEMO_FORCE_BUILD", "TORCH_CUDA_ARCH_LIST",
                            "MAX_JOBS", "SOURCE_DATE_EPOCH"}


def test_recipe_cxxflags_are_kept_after_the_cxx20_flags(write_recipe, good_recipe, mini_table):
    """A CXXFLAGS of the recipe's own (the loader refuses the name today; build_env still must
    drop neither) keeps its flags, after ours so that cl.exe lets them win where they differ
    (a ``/std:``); ours are not repeated when they are all there. A Linux cell keeps it as it is."""
    recipe = load_recipe(write_recipe(good_recipe), mini_table)

    def with_flags(value):
        return dataclasses.replace(recipe, env=(*recipe.env,
                                                EnvVar("CXXFLAGS", value, "a test flag")))

    env = _env(with_flags("/O2 /std:c++17"), _win_cell(recipe, mini_table, "2.13"))
    assert env["CXXFLAGS"] == "/permissive- /std:c++20 /O2 /std:c++17"
    env = _env(with_flags("/std:c++20 /permissive- /O2"), _win_cell(recipe, mini_table, "2.14"))
    assert env["CXXFLAGS"] == "/std:c++20 /permissive- /O2"
    env = _env(with_flags("/O2"), _win_cell(recipe, mini_table, "2.12"))
    assert env["CXXFLAGS"] == "/O2" and env["DISTUTILS_USE_SDK"] == "1"
    linux = dataclasses.replace(cells_for(recipe, mini_table)[0], torch="2.13")
    assert _env(with_flags("-O2"), linux)["CXXFLAGS"] == "-O2"
