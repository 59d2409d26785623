"""Job sizing: how many compile jobs and nvcc threads fit a machine's cores and memory.

Plain arithmetic on a machine's figures, shared by a build (``tools.pipeline.buildenv`` sizes the
machine it runs on) and the plan (``tools.plan.stages`` sizes the runner a release is planned
for), so that a shard's estimate and the shard's own build agree on the jobs in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Leave this share of available memory to the linker, the page cache and everything else.
MEMORY_HEADROOM = 0.85


@dataclass(frozen=True)
class Sizing:
    """How many compile jobs and nvcc threads a build gets, and why."""

    max_jobs: int
    nvcc_threads: int
    cores: int
    available_gib: float
    job_memory_gib: float
    note: str


def size_jobs(*, cores: int, available_gib: float, job_memory_gib: float,
              nvcc_threads: int | None, fixed_threads: bool = False, archs: int = 1) -> Sizing:
    """Choose MAX_JOBS and NVCC_THREADS.

    ``job_memory_gib`` is the peak of one nvcc thread (one arch compiled at a time); a job with
    ``t`` threads compiling ``n`` archs peaks at about ``job_memory_gib * min(t, n)``, since nvcc
    runs at most one thread per arch. A recipe's thread count is lowered only until one job fits,
    unless the package hard-codes it (``fixed_threads``); jobs then fill the memory budget up to
    the core count. When even one job doesn't fit, the build still runs with one job and the note
    says it may be killed.
    """
    budget = available_gib * MEMORY_HEADROOM
    threads = max(1, nvcc_threads or 1)
    if not fixed_threads:
        threads = min(threads, max(1, archs))  # more threads than archs would idle
        while threads > 1 and budget < job_memory_gib * min(threads, archs):
            threads -= 1
    per_job = job_memory_gib * min(threads, max(1, archs))
    jobs = max(1, min(cores, int(budget // per_job) if per_job > 0 else cores))
    if budget < per_job:
        note = (f"only {available_gib:.1f} GiB available but one compile job needs about "
                f"{per_job:.1f} GiB: the build may be OOM-killed; free memory, compile fewer "
                "archs (--archs) or use a bigger machine")
    else:
        fixed = " (fixed by the package)" if fixed_threads else ""
        note = (f"{jobs} job(s) x ~{per_job:.1f} GiB ({threads} nvcc thread(s){fixed}, "
                f"{archs} arch(s), ~{job_memory_gib:.1f} GiB per thread) within {budget:.1f} GiB "
                f"of {available_gib:.1f} GiB available, {cores} core(s)")
    return Sizing(jobs, threads, cores, round(available_gib, 1), job_memory_gib, note)
