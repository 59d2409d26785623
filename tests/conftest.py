"""Shared fixtures: a small compatibility table, a valid recipe to mutate, and a small world of
two recipes with real sdists on disk (the planner's and the backends' tests use it), with a third
recipe that depends on one of them, planned and staged for the container."""

from __future__ import annotations

import copy
import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml

from tools.backends import containerized
from tools.backends.cibw import ContainerLimits, ContainerSpec, plan_invocation
from tools.backends.machine import HOOK_VARIABLE, SANDBOX_HOOK
from tools.builder.planned import Planned
from tools.core.digest import sha256_file
from tools.core.errors import ToolchainError
from tools.pipeline.build_toolchain import find_nvcc
from tools.plan.cells import find_cell, plan
from tools.plan.job import BuildJob, Inputs
from tools.plan.recipes.model import load_all
from tools.plan.table import parse_table


#: A small table with the shape of recipes/table.yaml; values are real where they matter.
MINI_TABLE = {
    "schema": 1,
    "cuda": {
        "12.6": {"archs": ["50", "60", "70", "75", "80", "86", "89", "90", "90a"],
                 "default_archs": ["50", "60", "70", "75", "80", "86", "90"],
                 "min_driver": "525.60.13", "image": "pytorch/manylinux2_28-builder:cuda12.6",
                 "source": "test"},
        "12.9": {"archs": ["70", "75", "80", "86", "89", "90", "90a", "100", "100a", "120"],
                 "default_archs": ["70", "75", "80", "86", "90", "100", "120"],
                 "min_driver": "525.60.13", "image": "pytorch/manylinux2_28-builder:cuda12.9",
                 "source": "test"},
        "13.0": {"archs": ["75", "80", "86", "89", "90", "90a", "100", "110", "120"],
                 "default_archs": ["75", "80", "86", "90", "100", "110", "120"],
                 "min_driver": "580.65.06", "image": "pytorch/manylinux2_28-builder:cuda13.0",
                 "source": "test"},
    },
    "torch": {
        "2.8": {"release": "2.8.0", "python": ["3.9", "3.10", "3.11", "3.12", "3.13"],
                "cuda": ["12.6", "12.9"], "pypi_cuda": "12.9", "manylinux": "2_28",
                "cxx11_abi": True, "source": "test"},
        "2.9": {"release": "2.9.1", "python": ["3.10", "3.11", "3.12", "3.13", "3.14"],
                "cuda": ["12.6", "13.0"], "pypi_cuda": "12.6", "manylinux": "2_28",
                "cxx11_abi": True, "source": "test"},
        "2.10": {"release": "2.10.0", "python": ["3.10", "3.11", "3.12", "3.13", "3.14"],
                 "cuda": ["12.6", "13.0"], "pypi_cuda": "13.0", "manylinux": "2_28",
                 "cxx11_abi": True, "source": "test"},
    },
}

GOOD_RECIPE = {
    "schema": 1,
    "package": "demo_ext",
    "summary": "A recipe used by the tests",
    "source": {"pypi": "demo-ext", "version": "1.0.0", "sdist": "demo_ext-1.0.0.tar.gz",
               "sha256": "a" * 64,
               "url": "https://files.example.invalid/demo_ext-1.0.0.tar.gz"},
    "imports": ["demo_ext_cuda", "demo_ext"],
    "python": ">=3.10",
    "cuda": {"12.9": {"torch": ["2.8"], "reason": "the CUDA 12 build users ask for"},
             "13.0": {"torch": ["2.10", "2.9"], "reason": "matches torch's default CUDA 13"}},
    "archs": {"*": ["80", "90"], "12.9": ["80", "90", "120"]},
    "arch_env": {"name": "DEMO_CUDA_ARCHS", "style": "plain",
                 "reason": "read by the patched setup.py"},
    "env": {"DEMO_FORCE_BUILD": {"value": "TRUE", "reason": "never download a prebuilt wheel"}},
    "build": {"isolation": False,
              "requires": [{"requirement": "ninja", "reason": "parallel compiles"}],
              "job_memory_gib": 2.0, "job_memory_reason": "measured peak of one nvcc job"},
    "patches": [{"file": "0001-Read-arch-list.patch", "reason": "the arch list is hard-coded",
                 "upstream": "not submitted"}],
}


@pytest.fixture(autouse=True, scope="session")
def _compiler_cache_dir(tmp_path_factory):
    """Builds in the tests compile through this run's own compiler cache, never the user's
    (~/.cache/cuwheels/ccache); the builds of one run share it, in every worker process of
    ``make test`` (pytest-xdist gives each worker a temporary directory of its own inside the
    run's; ccache takes concurrent builds)."""
    before = os.environ.get("CUWHEELS_CCACHE_DIR")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "ccache"
        shared.mkdir(exist_ok=True)
    else:
        shared = tmp_path_factory.mktemp("ccache")
    os.environ["CUWHEELS_CCACHE_DIR"] = str(shared)
    yield
    if before is None:
        os.environ.pop("CUWHEELS_CCACHE_DIR", None)
    else:
        os.environ["CUWHEELS_CCACHE_DIR"] = before


@pytest.fixture(autouse=True, scope="session")
def _machine_hook():
    """Container builds in the tests go through this project's development-machine hook
    (``tools.devtools.sandbox``: the rlimit-stripping runtime where the sandbox needs it, the
    stand-in images' labels), as a developer here sets it; a machine that needs neither is
    unaffected (containers start plainly first). A test of the plain machine passes its own
    environment."""
    before = os.environ.get(HOOK_VARIABLE)
    os.environ[HOOK_VARIABLE] = SANDBOX_HOOK
    yield
    if before is None:
        os.environ.pop(HOOK_VARIABLE, None)
    else:
        os.environ[HOOK_VARIABLE] = before


@pytest.fixture(autouse=True, scope="session")
def _no_python_downloads():
    """A Python this machine lacks is never downloaded by the tests (uv fetches Pythons from
    GitHub; the tests reach only the registry and 127.0.0.1): ``.ci/run`` installs the ones the
    suite builds for beforehand. Where a test needs none, the search says where it looked."""
    before = os.environ.get("UV_PYTHON_DOWNLOADS")
    os.environ["UV_PYTHON_DOWNLOADS"] = "never"
    yield
    if before is None:
        os.environ.pop("UV_PYTHON_DOWNLOADS", None)
    else:
        os.environ["UV_PYTHON_DOWNLOADS"] = before


@pytest.fixture(autouse=True, scope="session")
def _nvcc_on_path():
    """Tests that run ``nvcc`` by name run the one the builds use. On a machine with no CUDA
    toolkit that is the CUDA 13.0 toolkit from PyPI (``find_nvcc`` installs it into the cache
    once), whose bin/ goes first on PATH as NVIDIA's installation guide puts /usr/local/cuda/bin
    (``.ci/run`` does the same): nvcc finds its own toolkit through the PATH it was run by.
    Where none can be had, those tests skip, saying so."""
    before = os.environ.get("PATH", "")
    if shutil.which("nvcc") is None:
        try:
            home = find_nvcc().cuda_home
        except ToolchainError:
            home = None
        if home:
            os.environ["PATH"] = os.pathsep.join([str(Path(home) / "bin"), before])
    yield
    os.environ["PATH"] = before


@pytest.fixture
def mini_table(tmp_path):
    """The small table, parsed (its path points into tmp_path)."""
    return parse_table(copy.deepcopy(MINI_TABLE), tmp_path / "table.yaml")


class _PlainDumper(yaml.SafeDumper):
    """Writes a repeated object out again: the recipe loader refuses anchors and aliases."""

    def ignore_aliases(self, data):
        return True


@pytest.fixture
def write_recipe(tmp_path):
    """Write a recipe folder from a dict; returns the folder. Creates listed patch files."""
    def write(data: dict, *, name: str | None = None, patches: bool = True,
              extra_files: tuple[str, ...] = ()) -> Path:
        folder = tmp_path / "recipes" / (name or data.get("package", "demo_ext"))
        (folder / "patches").mkdir(parents=True, exist_ok=True)
        (folder / "recipe.yaml").write_text(yaml.dump(data, Dumper=_PlainDumper, sort_keys=False))
        if patches:
            for entry in data.get("patches") or []:
                if isinstance(entry, dict) and isinstance(entry.get("file"), str):
                    (folder / "patches" / entry["file"]).write_text("--- a/x\n+++ b/x\n")
        for extra in extra_files:
            (folder / "patches" / extra).write_text("")
        return folder
    return write


@pytest.fixture
def good_recipe():
    """A deep copy of the valid test recipe, to mutate."""
    return copy.deepcopy(GOOD_RECIPE)


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
    "env": {"FLASHY_BUILD_TYPE": {"value": "Release fast math",
                                  "reason": "upstream's release build"}},
    "build": {"isolation": False,
              "requires": [{"requirement": "packaging>=20", "reason": "setup.py imports it"},
                           {"requirement": "setuptools>=70", "reason": "bdist_wheel built in"}],
              "job_memory_gib": 4.0, "job_memory_reason": "measured peak of one nvcc job",
              "nvcc_threads": 4},
}


def write_sdist_recipe(root: Path, data: dict, *, sdist: bool = True) -> dict:
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
            write_sdist_recipe(tmp_path, data)
        recipes = load_all(tmp_path / "recipes", table)
        return table, recipes, plan(recipes, table)
    return make


@pytest.fixture
def dependent_world(world, tmp_path, good_recipe):
    """The test world plus dep_ext, whose cells need demo_ext's; returns its folder (tmp_path)."""
    # Imported here, not above: the dependent recipe is test_needs's, and that module pulls in the
    # build tests' helpers, which a suite that never asks for this fixture need not import.
    from tests.test_needs import _dependent
    world()
    write_sdist_recipe(tmp_path, _dependent(good_recipe))
    return tmp_path


@pytest.fixture
def staged_dependent(dependent_world):
    """dep_ext's cell for CUDA 13.0 and torch 2.9, from one plan of the dependent world, staged
    for the container under ``work/``: ``(planned, cell, staged)``."""
    planned = Planned.make(dependent_world / "recipes", dependent_world / "table.yaml")
    cell = planned.cell("dep_ext-3.12-cu130-torch2.9")
    staged = containerized.assemble(planned.job(cell), dependent_world / "work" / cell.id,
                                 Inputs(sdist=dependent_world / "sdists" / "dep_ext-1.0.0.tar.gz"))
    return planned, cell, staged


def plan_cell(cell_id, table, recipes, cells, tmp_path, *, limits=ContainerLimits(14, 4), engine="docker"):
    """A cell of the world, its recipe and its cibuildwheel plan (work under ``tmp_path``)."""
    cell = find_cell(cell_id, cells)
    recipe = next(r for r in recipes if r.package == cell.package)
    return cell, recipe, plan_invocation(
        BuildJob(cell, recipe, table), ContainerSpec(engine, limits), archs=cell.archs,
        work_root=tmp_path / "work", recipe_revision="abc123")
