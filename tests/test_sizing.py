"""tools.plan.sizing: compile jobs and nvcc threads for a machine's cores and memory, the one rule
a build (on its own machine) and the plan (on the runner it plans for) share."""

from __future__ import annotations

import pytest

from tools.pipeline import buildenv
from tools.plan import sizing
from tools.plan.sizing import size_jobs


@pytest.mark.parametrize("cores,avail,job,threads,fixed,archs,expect", [
    (2, 24.0, 4.0, None, False, 1, (2, 1)),   # this machine: cores are the limit
    (64, 24.0, 4.0, None, False, 1, (5, 1)),  # big CPU, little memory: 24*0.85/4 = 5 jobs
    (16, 64.0, 4.0, 4, False, 4, (3, 4)),     # flash-attn style: jobs x threads x 4 GiB in 54 GiB
    (16, 10.0, 4.0, 4, False, 4, (1, 2)),     # threads are given up only until one job fits
    (8, 2.0, 4.0, 2, False, 2, (1, 1)),       # too little memory: one job, with a warning
    (2, 21.0, 3.5, 4, True, 1, (2, 4)),       # causal-conv1d, one arch: --threads 4 idles 3
    (16, 21.0, 3.5, 4, True, 4, (1, 4)),      # same, 4 archs: 14 GiB a job, threads untouchable
])
def test_size_jobs(cores, avail, job, threads, fixed, archs, expect):
    s = size_jobs(cores=cores, available_gib=avail, job_memory_gib=job, nvcc_threads=threads,
                  fixed_threads=fixed, archs=archs)
    assert (s.max_jobs, s.nvcc_threads) == expect
    per_job = job * min(s.nvcc_threads, archs)
    assert s.max_jobs * per_job <= max(avail * 0.85, per_job)
    if avail * 0.85 < per_job:
        assert "may be OOM-killed" in s.note


def test_the_build_sizes_with_the_plans_rule():
    # one function, re-exported: a shard's estimate and its build can't disagree on the rule
    assert buildenv.size_jobs is sizing.size_jobs and buildenv.Sizing is sizing.Sizing
