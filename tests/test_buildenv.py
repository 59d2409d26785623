"""The build environment: available memory, the arch list, the variables a build sets (the
job sizing arithmetic is tools.plan.sizing's, tests/test_sizing.py)."""

from __future__ import annotations

import pytest

from tools.pipeline import buildenv
from tools.pipeline.buildenv import available_memory_gib, build_env, format_archs, size_for, size_jobs
from tools.plan.matrix import cells_for
from tools.plan.recipe import load_recipe


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
    monkeypatch.setattr(buildenv, "windows_available_memory", lambda: 12 * 2**30)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable: 25165824 kB\n")
    assert available_memory_gib(meminfo, tmp_path / "none", windows=True) == pytest.approx(12.0)
    assert available_memory_gib(meminfo, tmp_path / "none", windows=False) == pytest.approx(24.0)


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
