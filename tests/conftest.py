"""Shared fixtures: a small compatibility table and a valid recipe to mutate."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tools.table import parse_table

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


@pytest.fixture
def mini_table(tmp_path):
    """The small table, parsed (its path points into tmp_path)."""
    return parse_table(copy.deepcopy(MINI_TABLE), tmp_path / "table.yaml")


@pytest.fixture
def write_recipe(tmp_path):
    """Write a recipe folder from a dict; returns the folder. Creates listed patch files."""
    def write(data: dict, *, name: str | None = None, patches: bool = True,
              extra_files: tuple[str, ...] = ()) -> Path:
        folder = tmp_path / "recipes" / (name or data.get("package", "demo_ext"))
        (folder / "patches").mkdir(parents=True, exist_ok=True)
        (folder / "recipe.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
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
