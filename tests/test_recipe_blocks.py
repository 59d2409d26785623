"""tools.plan.recipes.blocks: a recipe's optional ``check``, ``probe`` and ``depends`` blocks,
parsed on their own into a ``Problems`` (tests/test_recipe.py reads them inside whole recipes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.core.errors import RecipeError
from tools.plan.recipes.blocks import (CHECK_FILE, Dependency, KernelCheck, ProbeSpec,
                                      parse_depends, parse_kernel_check, parse_probe)
from tools.plan.schema import Problems

REASON = "what the block is for, in a sentence"


def problems(folder: Path) -> Problems:
    return Problems(folder / "recipe.yaml", RecipeError)


@pytest.mark.parametrize("files,raw,expect,reported", [
    # no block and no check.py: nothing to check
    ((), None, None, []),
    # a check.py nobody declared is named
    ((CHECK_FILE,), None, None, ["check: check.py is in the recipe folder but not declared"]),
    ((CHECK_FILE,), {"file": CHECK_FILE, "reason": REASON}, CHECK_FILE, []),
    (("compare.py",), {"file": "compare.py", "reason": REASON}, "compare.py", []),
    # declared but absent: still parsed (the loader reports it), so the rest can be checked
    ((), {"file": CHECK_FILE, "reason": REASON}, CHECK_FILE,
     ["check.file: check.py is declared but does not exist beside recipe.yaml"]),
    # a path out of the folder, or not a Python file
    ((), {"file": "../x.py", "reason": REASON}, None,
     ["check.file: '../x.py' is not a Python file name in the recipe folder"]),
    ((), {"file": "check.sh", "reason": REASON}, None,
     ["check.file: 'check.sh' is not a Python file name in the recipe folder"]),
    ((CHECK_FILE,), {"file": CHECK_FILE, "reason": "why"}, CHECK_FILE,
     ["check.reason: reason is too short to explain anything"]),
    ((), {"file": CHECK_FILE}, None, ["check.reason: required key is missing"]),
    ((), "check.py", None, ["check: must be a mapping, got a string ('check.py')"]),
])
def test_kernel_check(tmp_path, files, raw, expect, reported):
    for name in files:
        (tmp_path / name).write_text("")
    p = problems(tmp_path)
    found = parse_kernel_check(p, raw, tmp_path)
    if expect is None:
        assert found is None
    else:
        assert found == KernelCheck(expect, tmp_path / expect, raw["reason"])
    assert [item.split("\n")[0] for item in p.items] == reported


@pytest.mark.parametrize("raw,expect,reported", [
    (None, None, []),
    ({"units": ["csrc/a.cu", "csrc/b.cu"], "reason": REASON},
     ProbeSpec(("csrc/a.cu", "csrc/b.cu"), REASON), []),
    ({"units": [], "reason": REASON}, None, ["probe.units: must not be empty"]),
    ({"units": ["a.cu", 1], "reason": REASON}, None,
     ["probe.units[1]: must be a string, got an integer (1)"]),
    ({"units": "a.cu", "reason": REASON}, None,
     ["probe.units: must be a list, got a string ('a.cu')"]),
    ({"reason": REASON}, None, ["probe.units: required key is missing"]),
    # a unit is a path inside the source tree: never absolute, never through '..'
    ({"units": ["csrc/a.cu", "../../etc/passwd", "/etc/shadow"], "reason": REASON}, None,
     ["probe.units[1]: '../../etc/passwd' is not a path inside the source tree",
      "probe.units[2]: '/etc/shadow' is not a path inside the source tree"]),
])
def test_probe(tmp_path, raw, expect, reported):
    p = problems(tmp_path)
    assert parse_probe(p, raw) == expect
    assert [item.split("\n")[0] for item in p.items] == reported


@pytest.mark.parametrize("raw,expect,reported", [
    ([], (), []),
    ([{"package": "causal_conv1d", "reason": REASON}],
     (Dependency("causal_conv1d", REASON),), []),
    # itself, twice, not a folder name: each entry named by its index; the good ones kept
    ([{"package": "mamba_ssm", "reason": REASON},
      {"package": "causal_conv1d", "reason": REASON},
      {"package": "causal_conv1d", "reason": REASON},
      {"package": "Causal-Conv1d", "reason": REASON}],
     (Dependency("causal_conv1d", REASON),),
     ["depends[0].package: a recipe can't depend on itself",
      "depends[2].package: causal_conv1d is listed twice",
      "depends[3].package: 'Causal-Conv1d' is not a recipe folder name"]),
    ([{"package": "causal_conv1d"}], (), ["depends[0].reason: required key is missing"]),
    (["causal_conv1d"], (), ["depends[0]: must be a mapping, got a string ('causal_conv1d')"]),
])
def test_depends(tmp_path, raw, expect, reported):
    p = problems(tmp_path)
    assert parse_depends(p, raw, "mamba_ssm") == expect
    assert [item.split("\n")[0] for item in p.items] == reported
