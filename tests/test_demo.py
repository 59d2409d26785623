"""tools.devtools.walkthrough without the build: which cell it picks from the repository's plan, and
what it prints at the end. (The whole demo, a real build, is ``make demo``.)"""

from __future__ import annotations

import pytest

from tools import ROOT
from tools.core.errors import PlanError
from tools.builder.planned import Planned
from tools.devtools.walkthrough import DEFAULT_PACKAGE, DemoResult, pick_cell, summary
from tools.plan.cells import find_cell, plan
from tools.plan.table import load_table


#: The repository's plan, made once for the module (as the demo makes it once per run).
PLANNED = Planned.make()


def _coordinates(package: str) -> list[tuple[str, str]]:
    """Every (Python, CUDA) the repository's plan has a cell of ``package`` for."""
    return sorted({(c.python, c.cuda) for c in plan() if c.package == package})


@pytest.mark.parametrize("python,cuda", _coordinates(DEFAULT_PACKAGE))
def test_the_picked_cell_takes_its_torch_from_the_registry_where_it_can(python, cuda):
    table = load_table()
    cell = pick_cell(PLANNED, DEFAULT_PACKAGE, python, cuda)
    assert (cell.package, cell.python, cell.cuda) == (DEFAULT_PACKAGE, python, cuda)
    candidates = [c for c in plan()
                  if (c.package, c.python, c.cuda) == (DEFAULT_PACKAGE, python, cuda)]
    served = [c for c in candidates if table.torch[c.torch].pypi_cuda == cuda]
    # The registry's own torch build when one matches (nothing but PyPI needed), else the first.
    assert cell == (served or candidates)[0]


@pytest.mark.parametrize("package,python,cuda", [
    (DEFAULT_PACKAGE, "3.12", "11.8"),     # a CUDA version the recipe doesn't build
    (DEFAULT_PACKAGE, "2.7", "12.8"),      # a Python no torch of the table has
    ("no_such_recipe", "3.12", "12.8"),
])
def test_no_cell_is_named_with_the_command_that_lists_them(package, python, cuda):
    with pytest.raises(PlanError, match=f"{package} has no cell for Python {python} and CUDA "
                                        f"{cuda}") as info:
        pick_cell(PLANNED, package, python, cuda)
    assert f"python -m tools.matrix --package {package} --format ids" in info.value.hint


def test_the_summary_says_where_everything_is(tmp_path):
    cell = find_cell("causal_conv1d-3.12-cu128-torch2.9")
    wheel = tmp_path / "wheelhouse" / "causal_conv1d-1.0+cu128.torch2.9-cp312-cp312-x.whl"
    result = DemoResult(cell, wheel, tmp_path / "wheelhouse", tmp_path / "site",
                        tmp_path / "venv", "http://127.0.0.1:41234/cu128/torch2.9/simple/", 754)
    text = summary(result)
    assert text.startswith("\ndone in 12m34s: pip installed " + wheel.name + " from the index")
    lines = [line.strip() for line in text.splitlines()]
    assert f"wheel         {wheel}" in lines
    assert f"build report  {ROOT / 'build-cells' / cell.id / 'report.json'}" in lines
    assert (f"index (site)  {tmp_path / 'site'}   (variant index: "
            f"{tmp_path / 'site' / 'cu128' / 'torch2.9' / 'simple'})") in lines
    assert f"make serve INDEX_DIR={tmp_path / 'site'} WHEELS_DIR={tmp_path / 'wheelhouse'} " \
           "PORT=8765" in lines
    local = "http://127.0.0.1:8765/cu128/torch2.9/simple/"
    assert f"pip install causal-conv1d --extra-index-url {local}" in lines
    # The uv snippet is valid TOML naming the same index for the package.
    snippet = "\n".join(lines[lines.index("[[tool.uv.index]]"):])
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    doc = tomllib.loads(snippet)
    assert doc["tool"]["uv"]["index"] == [{"name": "cuwheels-cu128-torch2.9", "url": local,
                                           "explicit": True}]
    assert doc["tool"]["uv"]["sources"] == {"causal-conv1d": {"index": "cuwheels-cu128-torch2.9"}}
