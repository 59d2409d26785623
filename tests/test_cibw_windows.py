"""tools.backends.cibw_windows: a Windows cell's cibuildwheel options, accepted by cibuildwheel's
own parser for ``--platform windows`` (it runs on Linux; no Windows build runs here)."""

from __future__ import annotations

import pytest
from cibuildwheel.environment import parse_environment

from tools import ROOT
from tools.backends import cibw
from tools.backends.cibw_windows import (check_windows_options, delvewheel_repair_command,
                                        windows_identifier, windows_options)
from tools.core.errors import ToolchainError
from tools.finish.winrepair import TORCH_DLL_EXCLUDES
from tools.pipeline.buildenv import MSVC_CXX20
from tools.plan.cells import plan
from tools.plan.recipe_model import load_all
from tools.plan.table import load_table, version_key

#: A package tree cibuildwheel can read (its requires-python).
PACKAGE = ROOT / "tests" / "fixtures" / "tinyext"
LIMITS = cibw.Limits(14, 4)


def _cells():
    """The table, the recipes and the plan's Windows cells."""
    recipes = {r.package: r for r in load_all()}
    return load_table(), recipes, [c for c in plan() if c.platform == "win_amd64"]


def test_every_windows_cell_of_every_recipe_is_accepted(tmp_path):
    table, recipes, cells = _cells()
    assert {version_key(c.torch) >= version_key("2.13") for c in cells} == {True, False}
    for cell in cells:
        options = windows_options(cell, recipes[cell.package], table, archs=cell.archs, limits=LIMITS)
        build = check_windows_options(options, PACKAGE, tmp_path / "out", windows_identifier(cell))
        env = build.environment.as_dictionary(prev_environment={})
        assert env["DISTUTILS_USE_SDK"] == "1", cell.id
        assert env["TORCH_CUDA_ARCH_LIST"], cell.id
        assert "CUDA_HOME" not in env, cell.id      # the runner's CUDA_PATH is the toolkit
        cxx20 = version_key(cell.torch) >= version_key("2.13")
        assert (env.get("CXXFLAGS") == MSVC_CXX20) is cxx20, cell.id
        assert build.repair_command.startswith("delvewheel repair -w {dest_dir} --exclude c10.dll"), cell.id


def test_a_linux_cell_has_no_windows_options():
    table, recipes, _ = _cells()
    cell = next(c for c in plan() if c.platform == "linux_x86_64")
    with pytest.raises(ToolchainError, match="not a Windows one"):
        windows_options(cell, recipes[cell.package], table, archs=cell.archs, limits=LIMITS)


def test_the_repair_excludes_every_torch_dll():
    command = delvewheel_repair_command()
    words = command.split()
    assert [words[i + 1] for i, w in enumerate(words) if w == "--exclude"] == list(TORCH_DLL_EXCLUDES)
    assert words[-1] == "{wheel}"


def test_environment_is_what_cibuildwheel_parses():
    table, recipes, cells = _cells()
    cell = cells[0]
    options = windows_options(cell, recipes[cell.package], table, archs=cell.archs, limits=LIMITS)
    parsed = parse_environment(options["CIBW_ENVIRONMENT_WINDOWS"]).as_dictionary(prev_environment={})
    assert parsed["SOURCE_DATE_EPOCH"].isdigit()


def test_a_rejected_windows_configuration_is_a_toolchain_error(tmp_path):
    table, recipes, cells = _cells()
    cell = cells[0]
    options = windows_options(cell, recipes[cell.package], table, archs=cell.archs, limits=LIMITS)
    with pytest.raises(ToolchainError, match="cibuildwheel rejects the generated Windows options"):
        check_windows_options({**options, "CIBW_BUILD_FRONTEND": "poetry"}, PACKAGE, tmp_path,
                              windows_identifier(cell))
    with pytest.raises(ToolchainError, match="would build nothing"):
        check_windows_options({**options, "CIBW_BUILD": "cp27-*"}, PACKAGE, tmp_path,
                              windows_identifier(cell))
