"""tools.plan.job: a cell found by id travels with its recipe and table as one job."""

from __future__ import annotations

import pytest

from tools.core.errors import PlanError
from tools.plan.job import BuildJob, Inputs, load_job


def test_load_job(world, tmp_path):
    world()
    job = load_job("flashy-3.12-cu126-torch2.9", tmp_path / "recipes", tmp_path / "table.yaml")
    assert isinstance(job, BuildJob) and job.id == job.cell.id == "flashy-3.12-cu126-torch2.9"
    assert (job.cell.package, job.cell.torch, job.recipe.package) == ("flashy", "2.9", "flashy")
    assert job.table.path == tmp_path / "table.yaml"
    with pytest.raises(PlanError, match="no cell 'flashy-3.12-cu118'") as info:
        load_job("flashy-3.12-cu118", tmp_path / "recipes", tmp_path / "table.yaml")
    assert "flashy-3.12-cu126" in info.value.hint


def test_inputs_default_to_the_registry():
    """No sdist, no wheelhouse, online, the table's torch index: what a plain build uses."""
    assert Inputs() == Inputs(sdist=None, sdist_dir=None, wheelhouse=None, offline=False,
                              torch_index=None)
