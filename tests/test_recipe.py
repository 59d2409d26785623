"""``python -m tools.recipe``: the command checks recipes, exits non-zero naming each problem, and
notes a kernel span measured with other patches."""

from __future__ import annotations

import subprocess
import sys

from tools import ROOT
from tools.core.errors import RecipeError


def test_cli_exits_non_zero_and_names_the_problem(write_recipe, good_recipe):
    good_recipe["cuda"]["12.9"]["torch"] = ["1.0"]
    folder = write_recipe(good_recipe)
    proc = subprocess.run([sys.executable, "-m", "tools.recipe", str(folder)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == RecipeError.exit_code
    assert "cuda.12.9.torch" in proc.stderr and "1 of 1 recipe(s) invalid" in proc.stderr


def test_the_command_notes_a_kernel_span_measured_with_other_patches(tmp_path):
    """``python -m tools.recipe``: a recipe whose ``units.yaml`` span was measured with other
    patches is valid (the plan compiles those series apart) and the command says how to
    measure it again."""
    import shutil
    folder = tmp_path / "causal_conv1d"
    shutil.copytree(ROOT / "recipes" / "causal_conv1d", folder)
    run = lambda: subprocess.run([sys.executable, "-m", "tools.recipe", str(folder)], cwd=ROOT,
                                 capture_output=True, text=True, timeout=300)
    first = run()
    assert first.returncode == 0 and "note:" not in first.stdout
    patch = next((folder / "patches").glob("0002-*.patch"))
    patch.write_text(patch.read_text() + "\n")
    second = run()
    assert second.returncode == 0, second.stderr
    assert ("note: units.yaml kernels.13.0 was measured with another sdist or other patches, so "
            "torch 2.14, 2.13, 2.12, 2.11 compile their kernels apart") in second.stdout
    assert "--across-torch --write" in second.stdout
