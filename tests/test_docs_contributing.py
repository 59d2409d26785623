"""Every command the Contributing pages besides the tutorial show runs here (the tutorial's own
are tests/test_docs_tutorial.py): "Recipes in depth" (docs/contributing/adding-a-recipe.md),
"Probe builds" (probes.md) and "Working on the project" (setup.md).

A block that repeats a line of the tutorial is run there. ``make test`` is this suite itself
(what ``.ci/run`` runs). The probes and ``make demo`` compile for minutes: ``make test-slow``.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import yaml

from tools import ROOT
from test_docs_tutorial import make_clone, page_blocks, sh

PAGES = [ROOT / "docs" / "contributing" / name for name in ("adding-a-recipe.md", "probes.md", "setup.md")]
EXAMPLE = ROOT / "docs" / "contributing" / "example" / "torch_spline_conv"
FENCE = re.compile(r"^( *)```bash\n(.*?)^ *```$", re.S | re.M)


def blocks() -> list[str]:
    """Every bash block of the pages, dedented."""
    return [textwrap.dedent(m.group(2)).strip() for page in PAGES
            for m in FENCE.finditer(page.read_text())]


def block(start: str) -> str:
    found = [b for b in blocks() if b.startswith(start)]
    assert len(found) == 1, f"{len(found)} blocks start {start!r}"
    return found[0]


def tutorial_lines() -> set[str]:
    return {line for b in page_blocks() for line in b.splitlines()}


RUN_HERE = ("curl -s https://pypi.org/pypi/torch-spline-conv/json", ".venv/bin/python -c",
            "curl -fsSLO", "python -m tools.probe mamba_ssm", "make demo")


def test_every_command_block_is_run_by_a_test():
    tutorial = tutorial_lines()
    for text in blocks():
        if text.startswith(RUN_HERE):
            continue
        lines = [line.split("  #")[0].strip() for line in text.splitlines()]
        if lines == ["make demo", "make test"]:
            continue  # make demo: below; make test: this suite
        assert set(lines) <= tutorial, f"no test runs this block:\n{text}"


def _example_source() -> dict:
    return yaml.safe_load((EXAMPLE / "recipe.yaml").read_text())["source"]


@pytest.mark.network
def test_the_registry_lookup_prints_the_recipes_sdist(tmp_path):
    src = _example_source()
    out = sh(block("curl -s https://pypi.org/pypi/torch-spline-conv/json"), tmp_path).stdout
    assert out.split() == [src["sdist"], src["sha256"], src["url"]]


def test_the_table_listing(tmp_path):
    out = sh(block(".venv/bin/python -c").replace(".venv/bin/python", str(ROOT / ".venv/bin/python")),
             tmp_path).stdout
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert "pypi: 13.0" in rows["2.14"] and "cuda:" in rows["2.14"] and "python:" in rows["2.14"]


def _diff(patch: str) -> str:
    """A patch's diff, without git's signature (its version) or the index line's hashes."""
    body = patch.split("\ndiff --git", 1)[1].rsplit("\n-- \n", 1)[0]
    return re.sub(r"^index [0-9a-f]+\.\.[0-9a-f]+", "index", body, flags=re.M)


@pytest.mark.network
def test_the_patch_is_made_as_shown(tmp_path):
    sh(block("curl -fsSLO"), tmp_path)
    made = sorted((tmp_path / "patches").glob("*.patch"))
    assert [p.name for p in made] == ["0001-Build-with-ninja.patch"]
    text = made[0].read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "From: cuwheels <cuwheels@users.noreply.example>" in text
    assert _diff(text) == _diff((EXAMPLE / "patches" / "0001-Build-with-ninja.patch").read_text())


@pytest.mark.slow
@pytest.mark.timeout(7200)  # compiles for half an hour or more on two cores
def test_the_probe_commands(tmp_path):
    clone = make_clone(tmp_path)
    env_python = str(ROOT / ".venv" / "bin" / "python")
    for line in block("python -m tools.probe mamba_ssm").splitlines():
        command = line.split("  #")[0].strip().replace("python -m", f"{env_python} -m", 1) \
            if line.startswith("python") else line.split("  #")[0].strip()
        sh(command, clone, timeout=3600)
    assert "kernels:" in (clone / "recipes" / "flash_attn" / "units.yaml").read_text()


@pytest.mark.slow
@pytest.mark.timeout(7200)  # compiles for half an hour or more on two cores
def test_make_demo(tmp_path):
    clone = make_clone(tmp_path)
    out = sh("make demo", clone, timeout=3600).stdout
    assert re.search(r"done in \d+m\d\ds: pip installed causal_conv1d-\S+\.whl from the index this demo emitted", out)
