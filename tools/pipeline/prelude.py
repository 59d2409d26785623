"""The prelude of every build on this machine: toolchain, source, Python.

The host backend, the probe and a kernel shard each compile here, and each needs the same three
things before its first compile: the nvcc it compiles with (checked against the cell's CUDA),
the package's source (fetched, verified, extracted, patched) and a Python with the cell's torch
and the recipe's build requirements. Each is one named step (``toolchain``, ``source``,
``python``), timed and reported by the caller's :class:`~tools.pipeline.report.Progress`;
:func:`prepare` runs the three and returns them as one :class:`Prelude`. (The container backend
has its own: the image brings the toolchain and the Python.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tools.plan.job import BuildJob, Inputs
from .build_toolchain import BuildPython, Nvcc, check_nvcc, find_nvcc
from .report import Progress, Step
from .source import PreparedSource, prepare_source
from .venvs import prepare_python


@dataclass(frozen=True)
class Prelude:
    """What a build on this machine compiles with: nvcc, the patched source and the Python."""

    nvcc: Nvcc
    source: PreparedSource
    python: BuildPython


def find_toolchain(job: BuildJob, step: Step, progress: Progress,
                   toolkit: Path | None = None) -> Nvcc:
    """The ``toolchain`` step: this machine's nvcc (or the one of ``toolkit``, a toolkit root),
    with a note when its CUDA is not the cell's."""
    nvcc = find_nvcc({**os.environ, "CUDA_HOME": str(toolkit)}) if toolkit else find_nvcc()
    if warning := check_nvcc(nvcc, job.cell):
        progress.say(f"note: {warning}")
    step.detail.update(nvcc=nvcc.path, nvcc_version=nvcc.version, cuda_home=nvcc.cuda_home)
    return nvcc


def fetch_source(job: BuildJob, work: Path, inputs: Inputs, step: Step) -> PreparedSource:
    """The ``source`` step: the sdist fetched (or taken from the inputs), checked, extracted
    and patched under ``work``."""
    prepared = prepare_source(job.recipe, work, sdist=inputs.sdist, sdist_dir=inputs.sdist_dir)
    step.detail.update(sdist=prepared.sdist.name, sha256=prepared.sha256,
                       patches=list(prepared.patches))
    return prepared


def make_python(job: BuildJob, work: Path, inputs: Inputs, step: Step) -> BuildPython:
    """The ``python`` step: a fresh venv with the cell's torch and the build requirements."""
    bp = prepare_python(job, work, inputs, log=work / "python.log")
    step.detail.update(torch=bp.torch_version, torch_cuda=bp.torch_cuda,
                       cxx11_abi=bp.cxx11_abi)
    return bp


def prepare(job: BuildJob, work: Path, inputs: Inputs, progress: Progress, *,
            python: BuildPython | None = None) -> Prelude:
    """Run the three steps in order; ``python``: an interpreter the caller checked already
    (``--interpreter``), used as it is instead of the ``python`` step."""
    nvcc = progress.run("toolchain", lambda step: find_toolchain(job, step, progress,
                                                                  inputs.toolkit))
    source = progress.run("source", lambda step: fetch_source(job, work, inputs, step))
    if python is None:
        python = progress.run("python", lambda step: make_python(job, work, inputs, step))
    return Prelude(nvcc, source, python)
