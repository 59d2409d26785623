"""tools.upstream.exclusions: a failed probe becomes an ``exclude:`` entry of its recipe, written
into the recipe's YAML with its comments kept, checked with the project's loader; an entry the
loader refuses is not written, and the note says what to do instead.

The table is the tests' small one (tests/conftest.py) with torch 2.11 added for CUDA 12.6 and 13.0.
"""

from __future__ import annotations

import copy
import io

import pytest
import yaml
from ruamel.yaml import YAML

from conftest import MINI_TABLE
from tools.plan.recipes.model import load_recipe
from tools.plan.table import parse_table
from tools.upstream.exclusions import add_exclusion, check, note_refused, reason
from tools.upstream.verdicts import ProbeTarget, Verdict

WHY = "what this line of the recipe is for"
DATE = "2026-11-23"
ERROR = "torch/include/ATen/ATen.h:5: #error C++20 or later compatible compiler is required"


@pytest.fixture
def table(tmp_path):
    data = copy.deepcopy(MINI_TABLE)
    data["torch"]["2.11"] = {"release": "2.11.0", "python": ["3.10", "3.11", "3.12"],
                             "cuda": ["12.6", "13.0"], "pypi_cuda": "13.0", "manylinux": "2_28",
                             "cxx11_abi": True, "source": "test"}
    return parse_table(data, tmp_path / "table.yaml")


def failed(builds: tuple[str, ...]) -> Verdict:
    t = ProbeTarget("demo_ext", "2.11", None, "demo_ext-3.10-cu130", "13.0", "90", builds)
    return Verdict(t, "fails", f"fails at `csrc/a.cpp`: {ERROR} (demo_ext-3.10-cu130, sm_90)",
                   "csrc/a.cpp", ERROR)


def roundtrip(text: str, verdict: Verdict) -> str:
    y = YAML()
    y.preserve_quotes = True
    y.width = 4096
    doc = y.load(text)
    add_exclusion(doc, verdict, DATE)
    out = io.StringIO()
    y.dump(doc, out)
    return out.getvalue()


def recipe_text(good_recipe, cuda: dict, **extra) -> str:
    data = copy.deepcopy(good_recipe)
    data["cuda"] = cuda
    data["archs"] = {"*": ["80", "90"]}
    data.update(extra)
    return "# a comment the writer keeps\n" + yaml.safe_dump(data, sort_keys=False)


def test_a_failure_for_one_cuda_version_excludes_that_pair(table, good_recipe, write_recipe):
    text = recipe_text(good_recipe, {"13.0": {"torch_from": "2.9", "reason": WHY}})
    new = roundtrip(text, failed(("13.0",)))
    assert new.startswith(text)  # appended: the rest of the file byte for byte
    assert new[len(text):] == (
        "# Series the recipe's ranges include but that do not build: each from a probe, with its "
        "first error (tools.refresh --probes)\n"
        'exclude:\n- {torch: "2.11", cuda: "13.0", reason: "' + reason(failed(("13.0",)), DATE)
        + '"}\n')
    folder = write_recipe(yaml.safe_load(new))
    recipe = load_recipe(folder, table)
    assert recipe.cuda[0].torch == ("2.10", "2.9")
    assert recipe.why_not("2.11", "13.0", table) == (
        "excluded for CUDA 13.0: probe of demo_ext-3.10-cu130 (sm_90) on 2026-11-23 failed at "
        f"csrc/a.cpp: {ERROR}; remove this entry once a patch or a new release compiles it "
        "(python -m tools.probe)")


def test_a_failure_for_several_cuda_versions_excludes_the_series(table, good_recipe,
                                                                 write_recipe):
    text = recipe_text(good_recipe, {"12.6": {"torch_from": "2.9", "reason": WHY},
                                     "13.0": {"torch_from": "2.9", "reason": WHY}},
                       exclude=[{"torch": "2.9", "cuda": "12.6", "reason": WHY}])
    new = yaml.safe_load(roundtrip(text, failed(("12.6", "13.0"))))
    assert [{k: e[k] for k in e if k != "reason"} for e in new["exclude"]] == [
        {"torch": "2.9", "cuda": "12.6"}, {"torch": "2.11"}]  # appended to the existing list
    recipe = load_recipe(write_recipe(new), table)
    assert {t.cuda: t.torch for t in recipe.cuda} == {"12.6": ("2.10",), "13.0": ("2.10", "2.9")}


def test_an_exclusion_the_loader_refuses_is_a_note(table, good_recipe, write_recipe):
    """A range that holds only the new series can't exclude it: the CUDA version would build
    nothing, which the loader refuses; the note says to narrow the recipe by hand."""
    data = copy.deepcopy(good_recipe)
    data["cuda"] = {"13.0": {"torch_from": "2.11", "reason": WHY}}
    data["archs"] = {"*": ["80", "90"]}
    folder = write_recipe(data)
    path = folder / "recipe.yaml"
    new = roundtrip(path.read_text(), failed(("13.0",)))
    problem = check(new, path, table)
    assert problem is not None and "exclude takes out every series of its range" in problem
    assert check(path.read_text(), path, table) is None
    note = note_refused(failed(("13.0",)), path, problem)
    assert note.startswith(f"demo_ext: fails at `csrc/a.cpp`: {ERROR} (demo_ext-3.10-cu130, "
                           f"sm_90); no exclusion was proposed, because {path} would not load "
                           "with it (cuda.13.0: exclude takes out every series of its range "
                           "2.11 and newer for CUDA 13.0 (2.11)")
    assert note.endswith("narrow its cuda: entries so that torch 2.11 is left out, by hand")
