"""Hostile recipes against the real code, made by ``tests/fixtures/hostile/make_recipes.py``:
build variables that make a compiler, nvcc, CMake or an installer run or read something else,
values a shell-like parser would change, repeated list items, and patches that make links out of
the source tree.

Each refusal runs the real command or step in a process of its own under the bounded runner of
``tests/test_hostile_inputs.py`` and asserts the named error and its exit code, that nothing
beside the work folder changed, and bounded time and memory. The values a recipe may give are
followed to both backends: cibuildwheel's own parser of ``CIBW_ENVIRONMENT`` and the host
backend's process environment must both give them back byte for byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cibuildwheel.environment import parse_environment
from test_hostile_inputs import PREPARE, assert_refused, run_python, snapshot

from tests.fixtures.hostile import make_recipes
from tools.backends.cibw import environment
from tools.core.errors import PatchError, RecipeError
from tools.pipeline.build_toolchain import build_process_env
from tools.pipeline.buildenv import build_env
from tools.plan.cells import cells_for
from tools.plan.recipes.model import load_recipe
from tools.plan.sizing import size_jobs
from tools.plan.table import load_table

#: The variable the value cases set (a package's own name: allowed).
VALUE_NAME = "CAUSAL_CONV1D_BUILD_LABEL"


def _refused_recipe(run, folder: Path, expect: str) -> None:
    assert_refused(run, RecipeError, expect)
    assert str(folder / "recipe.yaml") in run.stderr  # the file is named
    assert "fix: " in run.stderr


# --------------------------------------------------------------------------- variables

def test_every_refused_variable_falls_under_its_rule():
    from tools.plan.recipes.env import env_rule
    assert {name: env_rule(variable).name for name, (variable, _, _) in
            make_recipes.REFUSED_ENV.items()} == \
        {name: rule for name, (_, _, rule) in make_recipes.REFUSED_ENV.items()}


@pytest.mark.parametrize("name", sorted(make_recipes.REFUSED_ENV))
def test_a_variable_that_runs_or_reads_elsewhere_is_refused(tmp_path, name):
    variable, value, rule = make_recipes.REFUSED_ENV[name]
    folder = make_recipes.env_recipe(tmp_path, variable, value)
    (tmp_path / "outside.txt").write_text(make_recipes.OUTSIDE_TEXT)
    before = snapshot(tmp_path)
    run = run_python("-m", "tools.recipe", str(folder))
    _refused_recipe(run, folder, f"env.{variable}: {variable} is not the package's to set")
    assert f"(rule {rule!r}" in run.stderr
    assert snapshot(tmp_path) == before


def test_the_stand_in_assembler_runs_when_gcc_is_given_compiler_path(tmp_path):
    """The attack is real: gcc runs the ``as`` it finds in ``COMPILER_PATH``."""
    marker = tmp_path / "ran.txt"
    bin_dir = make_recipes.stand_in_compiler(tmp_path / "bin", marker)
    (tmp_path / "x.c").write_text("int x;\n")
    proc = subprocess.run(["gcc", "-c", "x.c", "-o", "x.o"], cwd=tmp_path, capture_output=True,
                          env={**os.environ, "COMPILER_PATH": str(bin_dir)}, timeout=60)
    assert proc.returncode != 0 and marker.read_text() == "ran\n"


def test_a_build_with_compiler_path_is_refused_before_anything_runs(tmp_path):
    """The same variable in a recipe: ``python -m tools.build`` refuses the recipe while
    planning, so the stand-in never runs and no work folder is made."""
    marker = tmp_path / "ran.txt"
    bin_dir = make_recipes.stand_in_compiler(tmp_path / "bin", marker)
    folder = make_recipes.env_recipe(tmp_path / "recipes", "COMPILER_PATH", str(bin_dir))
    work, out = tmp_path / "work", tmp_path / "out"
    before = snapshot(tmp_path)
    run = run_python("-m", "tools.build", "causal_conv1d-3.12-cu130", "--backend", "host",
                     "--recipes", str(folder.parent), "--work", str(work), "--wheels", str(out),
                     "--offline", "--interpreter", sys.executable, "--sdist",
                     str(tmp_path / "none.tar.gz"))
    _refused_recipe(run, folder, "env.COMPILER_PATH: COMPILER_PATH is not the package's to set")
    assert not marker.exists() and not work.exists() and not out.exists()
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- values

@pytest.fixture(scope="module")
def table():
    return load_table()


def _never_run(command, env):
    raise AssertionError(f"cibuildwheel would run {command}")


@pytest.mark.parametrize("value", make_recipes.HOSTILE_VALUES, ids=ascii)
def test_a_value_reaches_both_backends_unchanged(tmp_path, table, value):
    folder = make_recipes.env_recipe(tmp_path, VALUE_NAME, value)
    run = run_python("-m", "tools.recipe", str(folder))
    assert run.returncode == 0, run.stderr
    recipe = load_recipe(folder, table)
    cell = cells_for(recipe, table)[0]
    sizing = size_jobs(cores=2, available_gib=16, job_memory_gib=3.5, nvcc_threads=4, archs=2)
    env = build_env(recipe, cell, sizing, archs=("80", "90"), cuda_home="/usr/local/cuda")
    assert env[VALUE_NAME] == value
    # the container backend: cibuildwheel's own parser, which nothing may make run a command
    parsed = parse_environment(environment(env)).as_dictionary(prev_environment={},
                                                               executor=_never_run)
    assert parsed == env
    # the host backend: the build's process environment, read back by a real child process
    child = subprocess.run([sys.executable, "-c", f"import os, sys; sys.stdout.buffer.write("
                            f"os.environb[b'{VALUE_NAME}'])"], capture_output=True, timeout=30,
                           env=build_process_env(Path(sys.executable), env))
    assert child.stdout == value.encode(), child.stderr


# --------------------------------------------------------------------------- repeats

@pytest.mark.parametrize("name", sorted(make_recipes.REPEATS))
def test_a_repeated_list_item_is_refused(tmp_path, name):
    change, expect = make_recipes.REPEATS[name]
    folder = make_recipes.changed_recipe(tmp_path, change)
    before = snapshot(tmp_path)
    run = run_python("-m", "tools.recipe", str(folder))
    _refused_recipe(run, folder, expect)
    assert "(rule: each " in run.stderr and "fix: remove the repeated " in run.stderr
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- patches


def test_every_patch_case_is_run():
    """Each case but the control is refused below; the control applies."""
    assert [n for n, (_, expect) in make_recipes.PATCHES.items() if expect is None] == \
        ["link-inside"]


@pytest.mark.parametrize("name", sorted(n for n, (_, e) in make_recipes.PATCHES.items() if e))
def test_a_patch_that_leaves_the_tree_is_refused(tmp_path, name):
    folder, sdist = make_recipes.patch_case(tmp_path, name)
    work = tmp_path / "work"
    outside = work / "outside.txt"
    before = snapshot(tmp_path, leave_out=(work / "sdist", work / "src"))
    run = run_python("-c", PREPARE, str(sdist), str(work), str(folder))
    assert_refused(run, PatchError, make_recipes.PATCHES[name][1])
    assert make_recipes.PATCH in run.stderr
    tree = work / "src" / make_recipes.TOP
    if "does not apply" not in make_recipes.PATCHES[name][1]:  # applied, then held to the rules
        assert "the sdist's link rule" in run.stderr
        assert not tree.exists(), "a refused tree is not kept"
    else:  # refused by its dry run: the tree is as extracted
        assert sorted(p.name for p in tree.iterdir()) == ["alias.py", "setup.py"]
    assert outside.read_text() == make_recipes.OUTSIDE_TEXT
    assert not (tmp_path / "planted.txt").exists() and not (work / "planted.txt").exists()
    assert snapshot(tmp_path, leave_out=(work / "sdist", work / "src")) == before


def test_a_patch_making_a_link_inside_the_tree_applies(tmp_path):
    """The control: a link to a file of the tree is what the sdist rules allow."""
    folder, sdist = make_recipes.patch_case(tmp_path, "link-inside")
    run = run_python("-c", PREPARE, str(sdist), str(tmp_path / "work"), str(folder))
    assert run.returncode == 0, run.stderr
    tree = Path(run.stdout.strip())
    assert os.readlink(tree / "again.py") == "setup.py"
