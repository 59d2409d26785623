"""A release's stages on one machine: every shard of a compile group, then its cells.

``python -m tools.shard release GROUP [--shards N]`` runs the jobs CI runs for the group, in the
same order and with the same commands, for a person with one large machine or a cluster node:
each shard as its own process (``python -m tools.shard run GROUP --shard K/N``) into its own
cache directory, then each cell (``python -m tools.build CELL --shard-caches DIR``), which reads
the shard caches read-only. A failed shard stops nothing: its units compile in the cells, and
the cells' reports say which and why. A failed cell doesn't stop the others either; the summary
lists every job with its exit status and time, and the exit status is non-zero when any cell
failed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools import ROOT
from tools.plan.groups import Group

#: How one job is run: (argv, log path) -> exit status. Injected by tests; the default runs the
#: command as a child process with its output in the log.
JobRunner = Callable[[list[str], Path], int]


def run_job(argv: list[str], log: Path) -> int:
    """Run one job's command from the repository root, its output into ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        return subprocess.run(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT).returncode


@dataclass
class JobResult:
    """One job of the release: its id, kind, exit status, seconds and log."""

    id: str
    kind: str
    status: int
    seconds: float
    log: str


def release_jobs(group: Group, shards: int, cells: Sequence[str], *, common: Sequence[str],
                 cache: Path, work: Path, out: Path, archs: str | None,
                 backend: str = "host") -> list[tuple[str, str, list[str]]]:
    """The (id, kind, argv) of every job of ``group``'s release, in order: its shards, then
    ``cells`` (ids of the group's cells), all through ``backend`` (host or container: the
    shards' command lines must be the cells')."""
    py = [sys.executable, "-m"]
    arch = ["--archs", archs] if archs else []
    jobs = [(f"{group.id}-shard{k}", "shard",
             [*py, "tools.shard", "run", group.id, "--shard", f"{k}/{shards}", *arch,
              "--backend", backend, "--cache", str(cache), "--work", str(work), *common])
            for k in range(1, shards + 1)]
    jobs += [(cell, "cell", [*py, "tools.build", cell, "--backend", backend, *arch,
                             "--shard-caches", str(cache), "--work", str(work), "--wheels", str(out),
                             *common])
             for cell in cells]
    return jobs


def run_release(jobs: list[tuple[str, str, list[str]]], logs: Path, *,
                runner: JobRunner = run_job, say=print) -> list[JobResult]:
    """Run ``jobs`` one after another (each may use the whole machine), each job's output in
    ``<logs>/<id>.log``; returns every job's result."""
    results = []
    for i, (job_id, kind, argv) in enumerate(jobs, 1):
        log = logs / f"{job_id}.log"
        say(f"[{i}/{len(jobs)}] {kind} {job_id} ... (log: {log})")
        start = time.monotonic()
        status = runner(argv, log)
        seconds = time.monotonic() - start
        results.append(JobResult(job_id, kind, status, round(seconds, 1), str(log)))
        say(f"[{i}/{len(jobs)}] {kind} {job_id}: {'ok' if status == 0 else f'exit {status}'} "
            f"in {seconds / 60:.1f} min")
    return results
