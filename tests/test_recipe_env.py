"""The rules a recipe's build variables are held to (``tools.plan.recipes.env``): which classes
of variable are the system's, a tool's or the pipeline's, and which are a package's own."""

from __future__ import annotations

import re

import pytest

from tools.plan.recipes.env import ENV_RULES, RESERVED_ENV, env_name_refused, env_rule
from tools.plan.recipes.model import load_all


@pytest.mark.parametrize("name,rule", [
    ("COMPILER_PATH", "gcc"), ("GCC_EXEC_PREFIX", "gcc"), ("CPLUS_INCLUDE_PATH", "gcc"),
    ("OBJC_INCLUDE_PATH", "gcc"), ("LIBRARY_PATH", "gcc"), ("DEPENDENCIES_OUTPUT", "gcc"),
    ("SUNPRO_DEPENDENCIES", "gcc"), ("NVCC_CCBIN", "nvcc"), ("NVCC_PREPEND_FLAGS", "nvcc"),
    ("NVCC_APPEND_FLAGS", "nvcc"), ("CUDA_NVCC_EXECUTABLE", "nvcc"),
    ("CMAKE_CXX_COMPILER_LAUNCHER", "cmake"), ("CMAKE_TOOLCHAIN_FILE", "cmake"),
    ("CMAKE_PREFIX_PATH", "cmake"), ("XDG_CONFIG_HOME", "config-root"),
    ("XDG_CACHE_HOME", "config-root"), ("PIP_CONFIG_FILE", "pip"), ("UV_CONFIG_FILE", "uv"),
    ("DIST_EXTRA_CONFIG", "setuptools"), ("SKBUILD_CMAKE_ARGS", "setuptools"),
    ("LD_PRELOAD", "loader"), ("DYLD_INSERT_LIBRARIES", "loader"), ("PYTHONPATH", "python"),
    ("VIRTUAL_ENV", "python"), ("TORCH_NVCC_FLAGS", "torch"), ("PYTORCH_NVCC", "torch"),
    ("CCACHE_PREFIX", "pipeline"), ("PKG_CONFIG_PATH", "pkg-config"),
    ("GIT_SSH_COMMAND", "git"), ("HTTPS_PROXY", "network"), ("GCONV_PATH", "libc"),
    ("BASH_ENV", "shell"), ("MY_PKG_LAUNCHER", "program"), ("MY_PKG_CXX_COMPILER", "program"),
    ("MY_PKG_NVCC_FLAGS", "flags"), ("MY_PKG_CUTLASS_DIR", "search-path"),
    ("MY_PKG_SRC_PATH", "search-path"), ("ROCM_HOME", "config-root"),
])
def test_each_class_is_refused_by_its_rule(name, rule):
    assert env_rule(name).name == rule
    why, fix = env_name_refused(name)
    assert why.startswith(f"{name} is not the package's to set: ") and f"(rule {rule!r}" in why
    assert fix.startswith("remove it")


@pytest.mark.parametrize("name", ["PATH", "HOME", "CC", "CPATH", "TMPDIR"])
def test_a_one_word_name_is_refused_by_its_form(name):
    why, _ = env_name_refused(name)
    assert "a one-word name" in why and "(rule 'one-word')" in why


def test_every_variable_of_every_real_recipe_is_allowed():
    """The rules leave what the recipes set alone (FORCE_CUDA, FLASH_ATTENTION_FORCE_BUILD,
    the packages' own arch variables)."""
    recipes = load_all()
    names = {v.name for r in recipes for v in r.env} | \
        {r.arch_env.name for r in recipes if r.arch_env.name != "TORCH_CUDA_ARCH_LIST"}
    assert len(names) >= 10
    assert {n: env_name_refused(n) for n in names} == {n: None for n in names}


def test_rules_are_named_once_and_their_patterns_compile():
    assert len({r.name for r in ENV_RULES}) == len(ENV_RULES)
    for rule in ENV_RULES:
        re.compile(rule.pattern)
        assert len(rule.why) > 40  # says what the variable makes run, read or write


def test_the_pipelines_own_variables_are_reserved_before_the_rules():
    """NVCC_THREADS and CUDA_HOME fall under rules too, but the pipeline's message is the one
    that points to the recipe key that sets them."""
    assert "nvcc_threads" in RESERVED_ENV["NVCC_THREADS"]
    assert env_rule("NVCC_THREADS").name == "nvcc" and env_rule("CUDA_HOME").name == "nvcc"
