"""The cibuildwheel options of a Windows cell (``cp312-win_amd64``), checked by cibuildwheel's own
parser for ``--platform windows``.

Windows builds run on a Windows runner with Visual Studio and the CUDA toolkit installed (no
container: PyTorch builds its own Windows CUDA wheels that way), so the options differ from the
Linux ones (tools.backends.cibw) where Windows differs:

- ``DISTUTILS_USE_SDK=1``: setuptools uses the MSVC environment the runner's developer prompt
  set up instead of looking for its own (torch's cpp_extension warns without it).
- torch 2.13's headers need C++20 and MSVC's conformance mode in host code: ``/permissive-
  /std:c++20`` in ``CXXFLAGS``, which reach cl.exe for the ``.cpp`` files only. They must not
  reach the cl.exe that nvcc runs (cudafe++ crashes): a package whose setup.py hard-codes
  ``/std:c++17`` still needs a recipe patch. Both from mjun0812/flash-attention-prebuild-wheels
  (``build_windows.ps1``, ``.github/workflows/_build_windows.yml``), whose workflow builds
  flash-attn on ``windows-2022`` runners.
- the repair is delvewheel with torch's DLLs excluded (tools.finish.winrepair), the same command
  the finish step runs; the checks of the finish step then run on the repaired wheel.

No Windows build has run in this project: these options are checked by cibuildwheel's parser
only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.finish.winrepair import TORCH_DLL_EXCLUDES
from tools.pipeline.buildenv import build_env
from tools.plan.matrix import Cell, torch_index
from tools.plan.recipe import Recipe
from tools.plan.table import Table, version_key
from tools.pipeline.venvs import PYPI_SIMPLE
from .cibw import Limits, _q, _sh, cell_sizing, check_options, environment, smoke_command

#: The first torch series whose headers MSVC compiles only as C++20 in conformance mode.
CXX20_FROM = "2.13"
#: The host-only C++ flags for those (see the module docstring).
MSVC_CXX20 = "/permissive- /std:c++20"


def windows_identifier(cell: Cell) -> str:
    """cibuildwheel's build identifier for a Windows cell: ``cp312-win_amd64``."""
    return f"cp{cell.python.replace('.', '')}-win_amd64"


def windows_env(cell: Cell, recipe: Recipe, *, archs: tuple[str, ...], limits: Limits
                ) -> dict[str, str]:
    """The build's variables on Windows: the recipe's and the arch list as on Linux, the CUDA
    toolkit where the runner put it (``CUDA_PATH``, not overridden), ``DISTUTILS_USE_SDK=1`` and,
    from torch 2.13, C++20 for host code."""
    env = build_env(recipe, cell, cell_sizing(recipe, archs, limits), archs=archs, cuda_home=None)
    env["DISTUTILS_USE_SDK"] = "1"
    if version_key(cell.torch) >= version_key(CXX20_FROM):
        env["CXXFLAGS"] = MSVC_CXX20
    return env


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
