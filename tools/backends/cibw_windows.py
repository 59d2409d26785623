"""The cibuildwheel options of a Windows cell (``cp312-win_amd64``), checked by cibuildwheel's own
parser for ``--platform windows``.

Windows builds run on a Windows runner with Visual Studio and the CUDA toolkit installed (no
container: PyTorch builds its own Windows CUDA wheels that way), so the options differ from the
Linux ones (tools.backends.cibw) where Windows differs:

- the build's variables are tools.pipeline.buildenv.build_env's, as for every backend: for a
  Windows cell these hold ``DISTUTILS_USE_SDK=1`` and, from torch 2.13, ``/permissive-
  /std:c++20`` in ``CXXFLAGS`` (the reasons and sources are in that module's docstring);
- the repair is delvewheel with torch's DLLs excluded (tools.finish.winrepair), the same command
  the finish step runs; the checks of the finish step then run on the repaired wheel.

No Windows build has run in this project: these options are checked by cibuildwheel's parser
only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.core.errors import ToolchainError
from tools.finish.winrepair import TORCH_DLL_EXCLUDES
from tools.pipeline.buildenv import build_env, windows_cell
from tools.plan.cells import Cell, torch_index
from tools.plan.recipe_model import Recipe
from tools.plan.table import Table
from tools.pipeline.venvs import PYPI_SIMPLE
from .cibw import Limits, _q, _sh, cell_sizing, check_options, environment, smoke_command


def windows_identifier(cell: Cell) -> str:
    """cibuildwheel's build identifier for a Windows cell: ``cp312-win_amd64``."""
    return f"cp{cell.python.replace('.', '')}-win_amd64"


def windows_env(cell: Cell, recipe: Recipe, *, archs: tuple[str, ...], limits: Limits
                ) -> dict[str, str]:
    """The build's variables on Windows: build_env's, which for a Windows cell hold the MSVC
    ones (``DISTUTILS_USE_SDK=1`` and, from torch 2.13, C++20 for host code), with the CUDA
    toolkit where the runner put it (``CUDA_PATH``, not overridden). ToolchainError for a cell
    of another platform, whose variables have none of them."""
    if not windows_cell(cell):
        raise ToolchainError(f"{cell.id} is a {cell.platform} cell, not a Windows one: it has "
                             "no Windows cibuildwheel options",
                             hint="use the options of tools.backends.cibw for it")
    return build_env(recipe, cell, cell_sizing(recipe, archs, limits), archs=archs,
                     cuda_home=None)


def delvewheel_repair_command() -> str:
    """``CIBW_REPAIR_WHEEL_COMMAND_WINDOWS``: delvewheel with torch's DLLs excluded. The names
    are not quoted: cibuildwheel runs the command with cmd.exe, which takes single quotes
    literally and expands no ``*``."""
    return _sh(["delvewheel", "repair", "-w", "{dest_dir}",
                *(w for name in TORCH_DLL_EXCLUDES for w in ("--exclude", name)), "{wheel}"])


def windows_options(cell: Cell, recipe: Recipe, table: Table, *, archs: tuple[str, ...],
                    limits: Limits) -> dict[str, str]:
    """Every cibuildwheel option of a Windows cell, as the ``CIBW_*`` variables that set them."""
    index = torch_index(cell, table) or PYPI_SIMPLE
    torch = _sh(["python", "-m", "pip", "install", _q(cell.torch_requirement),
                 "--index-url", _q(index)])
    rest = [d.requirement for d in recipe.build.requires]
    frontend = "pip" if recipe.build.isolation else "pip; args: --no-build-isolation"
    return {
        "CIBW_BUILD": windows_identifier(cell),
        "CIBW_ARCHS_WINDOWS": "AMD64",
        "CIBW_BUILD_FRONTEND": frontend,
        "CIBW_BUILD_VERBOSITY": "1",
        "CIBW_ENVIRONMENT_WINDOWS": environment(windows_env(cell, recipe, archs=archs,
                                                            limits=limits)),
        "CIBW_BEFORE_BUILD_WINDOWS": " && ".join(
            [torch] + ([_sh(["python", "-m", "pip", "install", *map(_q, rest),
                             "--index-url", PYPI_SIMPLE])] if rest else [])),
        "CIBW_REPAIR_WHEEL_COMMAND_WINDOWS": delvewheel_repair_command(),
        "CIBW_BEFORE_TEST_WINDOWS": torch,
        "CIBW_TEST_COMMAND_WINDOWS": smoke_command(cell, recipe),
    }


def check_windows_options(options: dict[str, str], package_dir: Path, output_dir: Path,
                          expected: str) -> Any:
    """Hand the options to cibuildwheel's own parser as ``--platform windows`` does (it runs on
    any machine); return its BuildOptions for ``expected``. ToolchainError when it rejects them
    or would build anything but the one identifier."""
    return check_options(options, package_dir, output_dir, expected, platform="windows")
