"""tools.sharding.unitlist: a unit list read again keeps what was measured for the same version
(the unit seconds, the torch spans, the units without Python headers) and drops it for another."""

from __future__ import annotations

import shutil

import yaml

from tools.plan.job import load_job
from tools.plan.recipes.model import load_recipe
from tools.probing.compdb import Unit
from tools.sharding.unitlist import render_units


def test_a_unit_list_read_again_keeps_the_measurements_of_its_version(tmp_path):
    job = load_job("causal_conv1d-3.12-cu130")
    committed = yaml.safe_load((job.recipe.folder / "units.yaml").read_text())
    assert {"kernels", "python_free"} & set(committed)
    units = [Unit(name, kind, "nvcc -c x -o y", tmp_path, tmp_path / "y")
             for kind, names in committed["units"].items() for name in names]
    again = yaml.safe_load(render_units(job.cell, job.recipe, units, "2.14.1+cu130"))
    for block in ("measured", "kernels", "python_free"):
        assert again.get(block) == committed.get(block), block
    # another version of the package: its units are measured again, the records go
    folder = tmp_path / "causal_conv1d"
    shutil.copytree(job.recipe.folder, folder)
    (folder / "units.yaml").write_text(yaml.safe_dump({**committed, "version": "0.1"}))
    other = load_recipe(folder, job.table)
    fresh = yaml.safe_load(render_units(job.cell, other, units, "2.14.1+cu130"))
    assert "kernels" not in fresh and "python_free" not in fresh
