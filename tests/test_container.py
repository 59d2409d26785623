"""The container backend: the cibuildwheel configuration generated per cell, checked by the real
cibuildwheel (its option parser and ``--print-build-identifiers``) without starting a container.

No container engine runs on the development machines, so nothing here builds in a container;
what is tested is everything up to that point: the options, the exact command and environment,
the staged tree the container receives, the tools run from that tree, and the errors.
"""

from __future__ import annotations

import copy
import io
import os
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from cibuildwheel.environment import parse_environment
from cibuildwheel.util.helpers import prepare_command

from tests.conftest import GOOD_RECIPE, MINI_TABLE
from tools import ROOT, build, container
from tools.errors import CompileError, RepairError, ToolchainError, VerifyError
from tools.matrix import cells_for, find_cell, plan
from tools.recipe import load_all, load_recipe, recipe_folders
from tools.digest import sha256_file
from tools.table import TABLE_PATH, parse_table

SETUP_PY = 'from setuptools import setup\nsetup(name="{name}", version="{version}")\n'
PATCH = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
Subject: [PATCH] Mark the tree as patched

Why: the stage step must hand cibuildwheel the patched tree.
---
--- a/setup.py
+++ b/setup.py
@@ -1,2 +1,3 @@
 from setuptools import setup
+# patched by the recipe
 setup(name="{name}", version="{version}")
"""

#: A second recipe unlike demo_ext: nvcc threads, a torch-style arch variable, versioned build
#: requirements, a flag value with spaces, torch from PyTorch's index for CUDA 12.6.
FLASHY = {
    **copy.deepcopy(GOOD_RECIPE),
    "package": "flashy",
    "source": {"pypi": "flashy", "version": "2.0.0", "sdist": "flashy-2.0.0.tar.gz",
               "sha256": "b" * 64, "url": "https://files.example.invalid/flashy-2.0.0.tar.gz"},
    "imports": ["flashy"],
    "cuda": {"12.6": {"torch": ["2.8", "2.9"], "reason": "the oldest CUDA torch 2.8 ships"}},
    "archs": {"*": ["80", "90"]},
    "arch_env": {"name": "FLASHY_ARCH_LIST", "style": "torch",
                 "reason": "read as TORCH_CUDA_ARCH_LIST style"},
    "env": {"FLASHY_NVCC_FLAGS": {"value": "-O3 --use_fast_math",
                                  "reason": "upstream's release flags"}},
    "build": {"isolation": False,
              "requires": [{"requirement": "packaging>=20", "reason": "setup.py imports it"},
                           {"requirement": "setuptools>=70", "reason": "bdist_wheel built in"}],
              "job_memory_gib": 4.0, "job_memory_reason": "measured peak of one nvcc job",
              "nvcc_threads": 4},
}


def _write_recipe(root: Path, data: dict, *, sdist: bool = True) -> dict:
    """A recipe folder with a real patch; with ``sdist``, a real sdist it matches."""
    data = copy.deepcopy(data)
    src = data["source"]
    folder = root / "recipes" / data["package"]
    (folder / "patches").mkdir(parents=True, exist_ok=True)
    fill = {"name": src["pypi"], "version": src["version"]}
    (folder / "patches" / "0001-Read-arch-list.patch").write_text(PATCH.format(**fill))
    if sdist:
        top = src["sdist"].removesuffix(".tar.gz")
        archive = root / "sdists" / src["sdist"]
        archive.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive, "w:gz") as tar:
            body = SETUP_PY.format(**fill).encode()
            info = tarfile.TarInfo(f"{top}/setup.py")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        src["sha256"] = sha256_file(archive)
    (folder / "recipe.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return data


@pytest.fixture
def world(tmp_path):
    """The mini table on disk and two recipes (demo_ext, flashy) with their sdists."""
    def make(table_data=MINI_TABLE):
        (tmp_path / "table.yaml").write_text(yaml.safe_dump(table_data))
        table = parse_table(copy.deepcopy(table_data), tmp_path / "table.yaml")
        for data in (GOOD_RECIPE, FLASHY):
            _write_recipe(tmp_path, data)
        recipes = load_all(tmp_path / "recipes", table)
        return table, recipes, plan(recipes, table)
    return make


def _invocation(cell_id, table, recipes, cells, tmp_path, *, limits=container.Limits(14, 4),
                engine="docker"):
    cell = find_cell(cell_id, cells)
    recipe = next(r for r in recipes if r.package == cell.package)
    return cell, recipe, container.plan_invocation(
        cell, recipe, table, archs=cell.archs, engine=engine, limits=limits,
        work_root=tmp_path / "work", recipe_revision="abc123")


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
      "FLASHY_NVCC_FLAGS": "-O3 --use_fast_math"}, []),
    # the same recipe, torch 2.9 for CUDA 12.6 comes from PyPI (its PyPI build is CUDA 12.6)
    ("flashy-3.13-cu126-torch2.9", "cp313-manylinux_x86_64",
     "pytorch/manylinux2_28-builder:cuda12.6",
     "torch==2.9.1 --index-url https://pypi.org/simple", {"FLASHY_ARCH_LIST": "8.0;9.0"}, []),
])
def test_generated_options(world, tmp_path, cell_id, ident, image, torch_install, env_expect,
                           absent):
    table, recipes, cells = world()
    cell, recipe, inv = _invocation(cell_id, table, recipes, cells, tmp_path)
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
    torch_step, deps_step = o["CIBW_BEFORE_BUILD"].split(" && ")
    assert torch_step == f"python -m pip install {torch_install}"
    assert deps_step.endswith("--index-url https://pypi.org/simple")
    assert "torch" not in deps_step
    assert o["CIBW_BEFORE_TEST"] == torch_step
    # the finish step, for this cell and its arch list; the smoke test imports the recipe's
    assert f"finish {{wheel}} {{dest_dir}} --cell {cell.id} --archs {','.join(cell.archs)}" \
        in o["CIBW_REPAIR_WHEEL_COMMAND"]
    assert o["CIBW_TEST_COMMAND"].endswith(f"{cell.torch_version} {' '.join(recipe.imports)}")
    assert f"toolchain --cell {cell.id}" in o["CIBW_BEFORE_ALL"]


def test_build_requirements_are_quoted_and_seeded_once(world, tmp_path):
    table, recipes, cells = world()
    _, _, inv = _invocation("flashy-3.12-cu126", table, recipes, cells, tmp_path)
    deps = inv.env["CIBW_BEFORE_BUILD"].split(" && ")[1]
    # the recipe pins setuptools itself: no second, unpinned setuptools
    assert deps == ("python -m pip install wheel 'packaging>=20' 'setuptools>=70' "
                    "--index-url https://pypi.org/simple")


def test_isolated_recipe_uses_plain_pip(world, tmp_path):
    data = copy.deepcopy(GOOD_RECIPE)
    data["build"]["isolation"] = True
    table, recipes, cells = world()
    _write_recipe(tmp_path, data)
    recipe = load_recipe(tmp_path / "recipes" / "demo_ext", table)
    cell = cells_for(recipe, table)[0]
    options = container.cibw_options(cell, recipe, table, archs=cell.archs, engine="podman",
                                     limits=container.Limits(8, 2), recipe_revision="r")
    assert options["CIBW_BUILD_FRONTEND"] == "pip"
    assert options["CIBW_CONTAINER_ENGINE"].startswith("podman; create_args: --memory=8g")


def test_finish_requirements_are_the_projects_pins():
    pins = container.finish_requirements()
    text = (ROOT / "pyproject.toml").read_text()
    assert [p.split("==")[0] for p in pins] == list(container.FINISH_REQUIREMENTS)
    assert all(f'"{p}"' in text for p in pins)


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
    assert parse_environment(container.environment(env)).as_dictionary({}) == env


def test_repair_command_is_what_the_finish_step_parses(world, tmp_path):
    table, recipes, cells = world()
    cell, _, inv = _invocation("demo_ext-3.11-cu130", table, recipes, cells, tmp_path)
    command = prepare_command(inv.env["CIBW_REPAIR_WHEEL_COMMAND"],
                              wheel="/tmp/cibuildwheel/built_wheel/demo_ext-1.0.0-cp311.whl",
                              dest_dir="/tmp/cibuildwheel/repaired_wheel",
                              project="/project", package="/project/demo_ext-1.0.0")
    words = shlex.split(command)
    assert words[:4] == ["PYTHONPATH=/project/cuwheels", "/tmp/cuwheels-tools/bin/python", "-m",
                         "tools.container"]
    args = container.parser().parse_args(words[4:])
    assert args.command == "finish" and args.cell == cell.id
    assert args.wheel == Path("/tmp/cibuildwheel/built_wheel/demo_ext-1.0.0-cp311.whl")
    assert args.dest_dir == Path("/tmp/cibuildwheel/repaired_wheel")
    assert tuple(args.archs.split(",")) == cell.archs
    assert args.build_python == "$(command -v python)" and args.recipe_revision == "abc123"


# --- cibuildwheel itself reads the configuration -----------------------------------------------

@pytest.mark.parametrize("cell_id", ["demo_ext-3.10-cu129", "demo_ext-3.14-cu130",
                                     "flashy-3.12-cu126-torch2.9"])
def test_cibuildwheel_plans_exactly_the_cell(world, tmp_path, cell_id):
    table, recipes, cells = world()
    cell, recipe, inv = _invocation(cell_id, table, recipes, cells, tmp_path)
    tree = inv.cwd / inv.argv[-1]
    tree.mkdir(parents=True)
    (tree / "setup.py").write_text(SETUP_PY.format(name="x", version="1"))
    # the real command line, with the generated variables and nothing else from CIBW_*
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")} | inv.env
    argv = [*inv.argv[:-1], "--print-build-identifiers", inv.argv[-1]]
    proc = subprocess.run(argv, cwd=inv.cwd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [container.identifier(cell)]
    # and its option parser reads back every option as generated
    opts = container.check_options(inv.env, tree, tmp_path / "out", container.identifier(cell))
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
    cell, _, inv = _invocation("demo_ext-3.12-cu129", table, recipes, cells, tmp_path)
    tree = inv.cwd / inv.argv[-1]
    tree.mkdir(parents=True)
    (tree / "pyproject.toml").write_text('[tool.cibuildwheel]\nbefore-all = "rm -rf /"\n'
                                         'test-requires = ["pytest"]\n')
    opts = container.check_options(inv.env, tree, tmp_path / "out", container.identifier(cell))
    assert opts.before_all == inv.env["CIBW_BEFORE_ALL"] and opts.test_requires == []


def test_every_test_cell_is_accepted_by_cibuildwheel(world, tmp_path):
    table, recipes, cells = world()
    assert len(cells) > 15
    for cell in cells:
        _, _, inv = _invocation(cell.id, table, recipes, cells, tmp_path)
        opts = container.check_options(inv.env, inv.cwd / inv.argv[-1], tmp_path / "out",
                                       container.identifier(cell))
        assert opts.manylinux_images["x86_64"] == cell.image, cell.id


def test_every_cell_of_every_recipe_is_accepted_by_cibuildwheel(tmp_path):
    assert TABLE_PATH.is_file() and recipe_folders()
    cells = plan()
    recipes = {r.package: r for r in load_all()}
    from tools.table import load_table
    table = load_table()
    for cell in cells:
        inv = container.plan_invocation(cell, recipes[cell.package], table, archs=cell.archs,
                                        engine="docker", limits=container.Limits(14, 4),
                                        work_root=tmp_path)
        opts = container.check_options(inv.env, inv.cwd / inv.argv[-1], tmp_path / "out",
                                       container.identifier(cell))
        assert opts.manylinux_images["x86_64"] == table.cuda[cell.cuda].image, cell.id


def test_a_rejected_configuration_is_a_toolchain_error(world, tmp_path):
    table, recipes, cells = world()
    cell, _, inv = _invocation("demo_ext-3.12-cu129", table, recipes, cells, tmp_path)
    bad = {**inv.env, "CIBW_BUILD_FRONTEND": "poetry"}
    with pytest.raises(ToolchainError, match="cibuildwheel rejects the generated options"):
        container.check_options(bad, tmp_path, tmp_path / "out", container.identifier(cell))
    with pytest.raises(ToolchainError, match="would build nothing, not cp312"):
        container.check_options({**inv.env, "CIBW_BUILD": "cp27-*"}, tmp_path, tmp_path / "o",
                                container.identifier(cell))


# --- dry run: the printed script is the plan, and it runs ----------------------------------------

def _use_table(monkeypatch, table):
    """tools.build reads the repository's table; these tests use the mini table."""
    monkeypatch.setattr(build, "load_table", lambda: table)


def _dry_run(monkeypatch, tmp_path, table, cell_id, capsys, *extra):
    _use_table(monkeypatch, table)
    monkeypatch.setenv("CUWHEELS_CONTAINER_MEMORY_GIB", "14")
    monkeypatch.setenv("CUWHEELS_CONTAINER_CPUS", "4")
    rc = build.main([cell_id, "--backend", "container", "--dry-run", "--recipes",
                     str(tmp_path / "recipes"), "--work", str(tmp_path / "work"), *extra])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out, err


def test_dry_run_prints_a_script_that_runs(world, tmp_path, monkeypatch, capsys):
    table, recipes, cells = world()
    out, err = _dry_run(monkeypatch, tmp_path, table, "demo_ext-3.12-cu129", capsys)
    assert "backend: container (--backend container)" in err
    assert not (tmp_path / "work" / "demo_ext-3.12-cu129").exists()   # nothing downloaded
    assert out.startswith("#!/bin/sh\n# cell demo_ext-3.12-cu129: demo-ext 1.0.0, Python 3.12")
    assert "# workaround: none" in out
    assert subprocess.run(["sh", "-n"], input=out, text=True).returncode == 0
    lines = [line for line in out.splitlines() if not line.startswith("#")]
    assert lines[0] == "set -e"
    stage_line = lines[1]
    # the cibuildwheel command: a `cd`, an `env` with every CIBW_* variable, the command
    command = " ".join(line.rstrip("\\").strip() for line in lines[2:])
    words = shlex.split(command)
    assert words[0] == "cd" and words[2:4] == ["&&", "env"]
    variables = dict(w.split("=", 1) for w in words[4:] if w.startswith("CIBW_"))
    argv = words[4 + len(variables):]
    cell = find_cell("demo_ext-3.12-cu129", cells)
    expected = container.plan_invocation(
        cell, next(r for r in recipes if r.package == "demo_ext"), table, archs=cell.archs,
        engine="docker", limits=container.Limits(14, 4), work_root=tmp_path / "work",
        recipe_revision=variables["CIBW_REPAIR_WHEEL_COMMAND"].rsplit(" ", 1)[-1])
    assert variables == expected.env and argv == list(expected.argv)
    # the first command stages the source for real (from the recipe's sdist, here local)
    stage_words = shlex.split(stage_line)
    proc = subprocess.run([*stage_words[3:], "--sdist",
                           str(tmp_path / "sdists" / "demo_ext-1.0.0.tar.gz")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    tree = Path(proc.stdout.strip())
    assert tree == Path(words[1]) / argv[-1]
    assert "# patched by the recipe" in (tree / "setup.py").read_text()
    # then the printed command itself, asked only what it would build
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")} | variables
    proc = subprocess.run([*argv[:-1], "--print-build-identifiers", argv[-1]], cwd=words[1],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["cp312-manylinux_x86_64"]


def test_dry_run_names_the_sdist_given(world, tmp_path, monkeypatch, capsys):
    table, _, _ = world()
    sdist = tmp_path / "sdists" / "flashy-2.0.0.tar.gz"
    out, _ = _dry_run(monkeypatch, tmp_path, table, "flashy-3.11-cu126", capsys,
                      "--sdist", str(sdist), "--archs", "90")
    assert f"--sdist {sdist}" in out
    assert "# archs: sm_90\n" in out and "--archs 90 " in out
    assert "FLASHY_ARCH_LIST=9.0 " in out
    assert "NVCC_THREADS=1" in out  # one arch: nvcc runs one thread per arch at most


def test_stage_gives_the_container_the_tree_and_the_tools(world, tmp_path):
    table, recipes, cells = world()
    cell = find_cell("flashy-3.12-cu126", cells)
    recipe = next(r for r in recipes if r.package == "flashy")
    staged = container.stage(cell, recipe, table, tmp_path / "work" / cell.id,
                             sdist=tmp_path / "sdists" / "flashy-2.0.0.tar.gz")
    assert staged.project == tmp_path / "work" / cell.id / "src"
    assert sorted(p.name for p in staged.project.iterdir()) == ["cuwheels", "flashy-2.0.0"]
    assert staged.patches == ("0001-Read-arch-list.patch",)
    tools = staged.project / "cuwheels"
    assert (tools / "tools" / "container.py").is_file()
    assert not list(tools.rglob("__pycache__"))
    assert (tools / "recipes" / "table.yaml").read_text() == (tmp_path / "table.yaml").read_text()
    assert (tools / "recipes" / "flashy" / "patches" / "0001-Read-arch-list.patch").is_file()


def _fake_nvcc(root: Path, release: str) -> Path:
    bin_dir = root / "cuda" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    nvcc = bin_dir / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    nvcc.chmod(0o755)
    return root / "cuda"


@pytest.mark.parametrize("release,rc,says", [
    ("12.9", 0, "nvcc 12.9 at"),                          # the image matches the cell
    ("12.8", 0, "same major, so torch accepts it"),       # a minor difference: noted
    ("13.0", ToolchainError.exit_code, "refuses a different major"),  # wrong image: refused
])
def test_staged_tools_check_the_images_nvcc(world, tmp_path, release, rc, says):
    """What before-all runs in the container, run from the staged copy outside the repo."""
    table, recipes, cells = world()
    cell = find_cell("demo_ext-3.12-cu129", cells)
    recipe = next(r for r in recipes if r.package == "demo_ext")
    staged = container.stage(cell, recipe, table, tmp_path / "work" / cell.id,
                             sdist=tmp_path / "sdists" / "demo_ext-1.0.0.tar.gz")
    env = {**os.environ, "PYTHONPATH": str(staged.project / "cuwheels"),
           "CUDA_HOME": str(_fake_nvcc(tmp_path, release))}
    where = subprocess.run([sys.executable, "-c", "import tools; print(tools.__file__)"],
                           env=env, cwd=tmp_path, capture_output=True, text=True)
    assert where.stdout.strip() == str(staged.project / "cuwheels" / "tools" / "__init__.py")
    proc = subprocess.run([sys.executable, "-m", "tools.container", "toolchain", "--cell",
                           cell.id], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == rc, proc.stderr
    assert says in proc.stdout + proc.stderr


# --- CUDA newer than the torch build's: relaxed only where the table says so ---------------------

CHECK_213 = """\
        if cuda_ver.major != torch_cuda_version.major:
            raise RuntimeError(CUDA_MISMATCH_MESSAGE, cuda_str_version, torch.version.cuda)
        logger.warning(CUDA_MISMATCH_WARN, cuda_str_version, torch.version.cuda)
"""
CHECK_OLD = """\
        if cuda_ver.major != torch_cuda_version.major:
            raise RuntimeError(CUDA_MISMATCH_MESSAGE.format(cuda_str_version, torch.version.cuda))
        warnings.warn(CUDA_MISMATCH_WARN.format(cuda_str_version, torch.version.cuda))
"""


@pytest.mark.parametrize("source", [CHECK_213, CHECK_OLD])   # torch 2.13's form; torch 2.0-2.8's
def test_relax_turns_the_major_check_into_the_minor_warning(source):
    relaxed = container.relax_nvcc_check(source)
    assert "        if False:  # if cuda_ver.major" in relaxed
    assert container.relax_nvcc_check(relaxed) == relaxed               # idempotent
    compile(relaxed.replace("        ", "", 1).replace("\n        ", "\n"), "x", "exec")


def test_relax_refuses_a_torch_without_the_check():
    with pytest.raises(ToolchainError, match="0 copies of the nvcc check"):
        container.relax_nvcc_check("def _check_cuda_version():\n    pass\n")


def test_relax_patches_the_torch_a_python_imports(tmp_path, monkeypatch):
    torch = tmp_path / "site" / "torch"
    (torch / "utils").mkdir(parents=True)
    (torch / "__init__.py").write_text("")
    (torch / "utils" / "cpp_extension.py").write_text("def check():\n" + CHECK_213)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    changed = container.relax_installed(sys.executable)
    assert changed == torch / "utils" / "cpp_extension.py"
    assert "if False:" in changed.read_text()


def test_relax_only_where_the_table_says(world, tmp_path, monkeypatch, capsys):
    data = copy.deepcopy(MINI_TABLE)
    data["torch"]["2.9"]["relax_nvcc_check"] = {
        "13.0": "test: pretend the cu130 build of torch 2.9 was compiled with CUDA 12"}
    table, recipes, cells = world(data)
    _, _, relaxed = _invocation("demo_ext-3.12-cu130-torch2.9", table, recipes, cells, tmp_path)
    _, _, plain = _invocation("demo_ext-3.12-cu130", table, recipes, cells, tmp_path)
    assert relaxed.env["CIBW_BEFORE_BUILD"].endswith(
        'tools.container relax-nvcc-check --python "$(command -v python)"')
    assert "relax-nvcc-check" not in plain.env["CIBW_BEFORE_BUILD"]
    assert "relax" not in " ".join(plain.env.values())
    out, _ = _dry_run(monkeypatch, tmp_path, table, "demo_ext-3.12-cu130-torch2.9", capsys)
    assert "# workaround: torch's nvcc version check relaxed (test: pretend" in out


# --- no engine: a clear error, or the host backend with a reason ---------------------------------

def _no_engine_path(tmp_path, monkeypatch):
    """A PATH whose docker fails as a client without a daemon does, and no podman."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon at "
                      "unix:///var/run/docker.sock. Is the docker daemon running?' >&2\nexit 1\n")
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_container_backend_without_an_engine_says_so(world, tmp_path, monkeypatch, capsys):
    table, _, _ = world()
    _use_table(monkeypatch, table)
    _no_engine_path(tmp_path, monkeypatch)
    rc = build.main(["demo_ext-3.12-cu129", "--backend", "container", "--recipes",
                     str(tmp_path / "recipes"), "--work", str(tmp_path / "work"),
                     "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == ToolchainError.exit_code
    assert "toolchain error: no container engine answers (`docker info` failed: Cannot " \
           "connect to the Docker daemon" in err
    assert "podman is not installed" in err
    assert "fix: start the engine" in err and "--backend host" in err and "--dry-run" in err
    assert not (tmp_path / "out").exists()
    report = yaml.safe_load((tmp_path / "work" / "demo_ext-3.12-cu129" / "report.json")
                            .read_text())
    assert report["verdict"] == "failed" and report["error"]["kind"] == "toolchain"
    assert [s["name"] for s in report["steps"]] == ["engine"]


def test_container_backend_with_this_machines_engine(world, tmp_path, monkeypatch, capsys):
    """The same with the real client: on the development machines no engine answers."""
    if any(build.engine_answers(e)[0] for e in ("docker", "podman")):
        pytest.skip("a container engine answers here")
    table, _, _ = world()
    _use_table(monkeypatch, table)
    rc = build.main(["demo_ext-3.12-cu129", "--backend", "container", "--engine", "docker",
                     "--recipes", str(tmp_path / "recipes"), "--work", str(tmp_path / "work")])
    assert rc == ToolchainError.exit_code
    assert "no container engine answers (" in capsys.readouterr().err


def test_auto_backend_falls_back_to_host_with_the_reason(world, tmp_path, monkeypatch, capsys):
    table, _, _ = world()
    _no_engine_path(tmp_path, monkeypatch)
    chosen, why = build.choose_backend("auto", None)
    assert chosen == "host"
    assert why.startswith("auto: no container engine answers (`docker info` failed: Cannot")
    assert why.endswith("podman is not installed), using host")
    # through the command line: the host backend starts (and stops at its first step here)
    _use_table(monkeypatch, table)
    rc = build.main(["demo_ext-3.12-cu129", "--recipes", str(tmp_path / "recipes"),
                     "--work", str(tmp_path / "work"), "--sdist", str(tmp_path / "missing")])
    err = capsys.readouterr().err
    assert rc != 0
    assert "backend: host (auto: no container engine answers" in err


def test_limits_come_from_the_environment_or_the_machine(monkeypatch):
    assert container.default_limits({"CUWHEELS_CONTAINER_MEMORY_GIB": "30",
                                     "CUWHEELS_CONTAINER_CPUS": "8"}) == container.Limits(30, 8)
    mine = container.default_limits({})
    assert mine.memory_gib >= 2 and mine.cpus >= 1
    with pytest.raises(ToolchainError, match="whole numbers"):
        container.default_limits({"CUWHEELS_CONTAINER_MEMORY_GIB": "lots"})


# --- a failed run names its cause ----------------------------------------------------------------

@pytest.mark.parametrize("log,kind,says", [
    # the finish step raised one of ours: the same error, its fix kept
    ("Repairing wheel...\n[demo 0m01s] step 2/3: inspect ...\nverify error: requested GPU archs "
     "missing\n  fix: check the arch env var\n", VerifyError, "in the container: requested GPU"),
    # nvcc killed at the container's memory limit
    ("Building wheel...\nKilled\nerror: command '/usr/local/cuda/bin/nvcc' failed with exit "
     "code 137\n", CompileError, "most likely out of memory (limit 14 GiB, no swap)"),
    # a compile error names the file
    ("Building wheel...\ncsrc/kernel.cu(12): error: identifier \"x\" is undefined\n",
     CompileError, "while compiling csrc/kernel.cu:12"),
    # torch not installable
    ("Running before_build...\nERROR: No matching distribution found for torch==2.8.0\n",
     ToolchainError, "setting up the container's build environment failed (before-build"),
    ("Repairing wheel...\nTraceback...\n", RepairError, "the repair step failed"),
    ("Testing wheel...\nImportError: undefined symbol: _ZN3c10\n", VerifyError, "smoke test"),
    # the image has no interpreter for the cell's Python (e.g. 3.15 in an older image)
    ("Starting container image pytorch/x...\ncibuildwheel: error:   '/opt/python/cp315-cp315/"
     "bin/python' executable doesn't exist in image 'pytorch/x' to build 'cp315-manylinux_x86_64'"
     ".\n", ToolchainError, "the image lacks the cell's Python"),
    # the image never started
    ("Starting container image pytorch/x...\nError: pull access denied\n", ToolchainError,
     "cibuildwheel failed before building"),
])
def test_failures_are_classified(tmp_path, log, kind, says):
    exc = container.classify_failure(log, log=tmp_path / "cibuildwheel.log",
                                     limits=container.Limits(14, 4), code=1)
    assert type(exc) is kind and says in str(exc) and str(tmp_path / "cibuildwheel.log") in str(exc)


def test_classified_finish_error_keeps_its_fix(tmp_path):
    exc = container.classify_failure(
        "verify error: requested GPU archs missing\n  fix: check the arch env var\n",
        log=tmp_path / "l", limits=container.Limits(1, 1), code=1)
    assert exc.hint == "check the arch env var"


# --- the local script ---------------------------------------------------------------------------

def _local(tmp_path, *args):
    stub = tmp_path / "python"
    stub.write_text('#!/bin/sh\necho "$PWD"\nfor a in "$@"; do echo "$a"; done\n')
    stub.chmod(0o755)
    return subprocess.run([str(ROOT / "tools" / "build_local.sh"), *args], capture_output=True,
                          text=True, env={**os.environ, "CUWHEELS_PYTHON": str(stub)})


@pytest.mark.parametrize("args,expected", [
    (["docker", "flash_attn", "3.12", "12.9"],
     ["flash_attn-3.12-cu129", "--backend", "container", "--engine", "docker"]),
    (["podman", "flash_attn", "3.12", "129", "--dry-run"],
     ["flash_attn-3.12-cu129", "--backend", "container", "--engine", "podman", "--dry-run"]),
    (["docker", "mamba_ssm", "3.11", "13.0", "--torch", "2.9", "--archs", "90"],
     ["mamba_ssm-3.11-cu130-torch2.9", "--backend", "container", "--engine", "docker",
      "--archs", "90"]),
])
def test_build_local_calls_the_container_backend(tmp_path, args, expected):
    proc = _local(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(ROOT), "-m", "tools.build", *expected]


@pytest.mark.parametrize("args,says", [
    (["lxc", "flash_attn", "3.12", "12.9"], "unknown engine: lxc"),
    (["docker", "flash_attn", "312", "12.9"], "PYTHON is like 3.12"),
    (["docker", "flash_attn", "3.12", "cu129"], "CUDA is like 12.9 or 129"),
    (["docker", "flash_attn"], "usage:"),
])
def test_build_local_rejects_bad_arguments(tmp_path, args, says):
    proc = _local(tmp_path, *args)
    assert proc.returncode == 2 and says in proc.stderr
