"""One run's batch: the plan artifact its jobs read, and the small outputs of its plan job.

A run's jobs are the compile groups the schedule chose for it (``tools.releasing.schedule``):
their shards and cell jobs (each building one or more of a group's cells after one setup), as
``tools.plan.stages.Release`` plans them. The **plan artifact**
(``batch.json``) holds every job's full entry (``Release.shard_jobs``/``cell_jobs``: image,
archs, shards read, budget, cache key, ...), the cells the run's cells need from the index, and
for a cell whose group the kernel store covers, the key whose entries it pulls (``store_key``).
The plan job's **outputs** carry only what GitHub must know before a job starts: per stage, a
matrix of ``{"id", "runner"}`` entries (``runs-on`` can't come from an artifact), and the counts.
Each job then reads its own entry from the artifact by id (``python -m tools.release entry``).
So the outputs grow by about 70 characters a job whatever the entries hold: 814 jobs, about
0.12 MB in UTF-16, against GitHub's 1 MB a job (``recipes/limits.yaml``).

The stages per platform are the workflow's: ``shards``, ``cells1`` (cells that read no shard, up
to a matrix's limit, which start at once) and ``cells2`` (the cells that read shards, and those
``cells1`` had no room for, which start when the platform's shards have finished), named with the
platform's id part (``tools.plan.stages.matrix_key``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tools.core.errors import PlanError
from tools.core.variant import PLATFORM_PART
from tools.plan.stages import Release, matrix_key, platform_matrices

#: 2: the cell stages hold cell jobs, each with its ``cells``.
BATCH_SCHEMA = 2
#: The stage names of one platform, in the order the workflow runs them.
STAGES = ("shards", "cells1", "cells2")


@dataclass(frozen=True)
class Batch:
    """One run's jobs: the staged release of its groups, and where each needed wheel is."""

    release: Release
    #: Per cell id, the published wheels it needs: ``[{"cell", "file", "url", "sha256"}]``.
    needed: dict[str, list[dict[str, str]]]
    #: GitHub's jobs per matrix (``recipes/limits.yaml``).
    jobs_per_matrix: int
    #: The bytes of compiler cache each job that saves one may save (the schedule's share of
    #: the repository's cache; 0: none saved).
    cache_share: int = 0

    def stages(self) -> dict[str, list[dict[str, Any]]]:
        """Every platform's stages (:func:`matrix_key` names), each its full job entries in
        the order the workflow runs them; PlanError when a stage is over the matrix limit."""
        shards, cells = self.release.shard_jobs(), self.release.cell_jobs()
        # a cell job of a group the kernel store covers pulls the store's entries of its key
        stored = {g.group.id: g.group.key for g in self.release.groups if g.stored}
        for job in cells:
            job["store_key"] = stored.get(job["group"], "")
            for cell in job["cells"]:
                cell["needs_wheels"] = self.needed.get(cell["id"], [])
        for job in shards + cells:
            job["ccache_save_bytes"] = self.cache_share
        out: dict[str, list[dict[str, Any]]] = {}
        for platform in PLATFORM_PART:
            staged = platform_matrices([j for j in shards if j["platform"] == platform],
                                       [j for j in cells if j["platform"] == platform],
                                       self.jobs_per_matrix)
            out.update({matrix_key(name, platform): staged[name]["include"] for name in STAGES})
        return out

    def document(self) -> dict[str, Any]:
        """The plan artifact: every job's full entry, by stage."""
        return {"schema": BATCH_SCHEMA, "stages": self.stages()}

    def outputs(self) -> dict[str, str]:
        """The plan job's outputs: per stage its matrix of ``{"id", "runner"}`` and its count,
        and ``count``, the cells of every platform."""
        out: dict[str, str] = {}
        cells = 0
        for name, jobs in self.stages().items():
            out[name] = json.dumps({"include": [{"id": j["id"], "runner": j["runner"]}
                                                for j in jobs]}, separators=(",", ":"))
            out[f"{name}_count"] = str(len(jobs))
            if name.startswith("cells"):
                cells += sum(len(j["cells"]) for j in jobs)
        out["count"] = str(cells)
        return out


def output_bytes(outputs: dict[str, str]) -> int:
    """The outputs' size as GitHub counts it: UTF-16 bytes of every name and value."""
    return sum(len(f"{k}{v}".encode("utf-16-le")) for k, v in outputs.items())


def github_output_text(outputs: dict[str, str]) -> str:
    """The outputs as lines of ``$GITHUB_OUTPUT`` (``name=value``); PlanError for a value with a
    newline, which that form can't carry."""
    for name, value in outputs.items():
        if "\n" in value or "\r" in value:
            raise PlanError(f"output {name} holds a line break", hint="outputs are one line each")
    return "".join(f"{k}={v}\n" for k, v in outputs.items())


def job_entry(document: dict[str, Any], job_id: str) -> dict[str, Any]:
    """The full entry of job ``job_id`` (a shard or a cell job), or of a cell of a cell job, in
    a plan artifact's ``document``; PlanError naming the id when the artifact has none (a job
    of another run's plan)."""
    if not isinstance(document, dict) or document.get("schema") != BATCH_SCHEMA:
        raise PlanError(f"not a batch plan of schema {BATCH_SCHEMA}",
                        hint="download this run's plan artifact (batch-plan), made by this "
                             "version of the tools")
    for jobs in document.get("stages", {}).values():
        for job in jobs:
            if job.get("id") == job_id:
                return job
            for cell in job.get("cells", ()):
                if cell.get("id") == job_id:
                    return cell
    raise PlanError(f"the batch plan has no job {job_id!r}",
                    hint="the job and the plan artifact must be of the same run")
