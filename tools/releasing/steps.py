"""The steps of a release run, one function each, as ``python -m tools.release`` runs them.

Each takes paths and values, not a command line, and returns what the command prints: the
batch of the plan job (:func:`choose_batch`, written by :func:`write_batch`), the live site
(:func:`read_site`), a job's environment from the plan artifact (:func:`job_env`), the
published wheels a cell needs (:func:`fetch_needed`), this run's artifacts
(:func:`download_artifacts`), and the failed tries after the run (:func:`count_attempts`).
:func:`api_from_env` is the paced API with the job's token.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.core import site
from tools.core.errors import PlanError
from tools.pipeline.buildreport import (BuildReport, ReportError, ReportedError, read_report,
                                        write_report)
from tools.plan.limits import load_limits
from tools.plan.cells import changed_only, plan, require_known, select
from tools.plan.groups import groups
from tools.plan.recipes.model import load_all
from tools.plan.runners import load_runners
from tools.plan.stored import stored_keys
from tools.plan.table import load_table
from tools.sitegen.ledger_file import load_ledger
from .artifacts import fetch
from .backlog import (History, fingerprints, load_attempts, pending_entries, record,
                      write_attempts)
from .batch import Batch, github_output_text, job_entry
from .ghapi import Api, ApiError
from .schedule import Schedule, as_markdown, drain, first_batch
from .site import fetch_state, find_site

#: The fields of a job's entry that reach its steps' environment, and their names there, per
#: kind of job (the called workflows' names). None may be a variable ccache reads: a build on
#: the runner (Windows, the host backend) inherits them, and ccache took CCACHE_PREFIX, the
#: cache key's prefix, for its prefix_command and ran it before every compiler call.
ENV_FIELDS = {
    "cell": {"id": "JOB_ID", "cells": "CELLS", "group": "GROUP", "shards": "SHARDS",
             "image": "IMAGE",
             "python": "CELL_PYTHON", "cuda": "CELL_CUDA",
             "ccache_prefix": "COMPILER_CACHE_PREFIX",
             "budget_minutes": "BUDGET_MINUTES", "ccache_save_bytes": "CCACHE_SAVE_BYTES",
             "store_key": "STORE_KEY"},
    "shard": {"id": "SHARD_ID", "group": "GROUP", "key": "GROUP_KEY", "shard": "SHARD",
              "of": "OF",
              "image": "IMAGE", "cuda": "CELL_CUDA", "cache_key": "CACHE_KEY",
              "budget_minutes": "BUDGET_MINUTES", "ccache_save_bytes": "CCACHE_SAVE_BYTES"}}


@dataclass(frozen=True)
class Sources:
    """The files a run plans from."""

    recipes: Path
    table: Path
    runners: Path | None
    limits: Path

    def runners_path(self) -> Path:
        """The runner file: the one named, else the recipes'."""
        return self.runners or self.recipes / "runners.yaml"


def choose_batch(src: Sources, *, ledger: Path | None, attempts: Path | None,
                 filters: dict[str, list[str] | None], changed: list[str] | None,
                 pending: list[str] = (), say: Any = print,
                 kernel_store: Path | None = None) -> tuple[Batch, Schedule]:
    """This run's batch: the first run of the schedule of the backlog (the cells ``filters``
    selects, less what ``ledger`` publishes, the ``pending`` wheels of complete releases the
    ledger lacks yet, and what ``attempts`` gave up on). ``changed``: a pull request's changed
    paths: only the recipes they touch, at most the policy's sample, published or not (no
    ledger, no attempts). ``kernel_store``: the kernel store's listing (``kernels list``): a
    group it covers gets no shards, its cells read the store (``tools.plan.stored``)."""
    table = load_table(src.table)
    recipes = load_all(src.recipes, table)
    cells = plan(recipes, table)
    runners = load_runners(src.runners_path(), {r.package for r in recipes})
    limits = load_limits(src.limits)
    packages = filters.get("package")
    entries, released, tries = [], [], {}
    if changed is None:
        entries = list(load_ledger(ledger).values()) if ledger else []
        indexed = {e.filename for e in entries}
        released = pending_entries([n for n in pending if n not in indexed])
        tries = load_attempts(attempts)
    else:
        packages = changed_only(packages, changed, {c.package for c in cells})
        say(f"changed recipes: {', '.join(packages) or 'none'}")
    require_known(packages, cells)
    platforms = filters.get("platform")
    unknown = sorted(set(platforms or ()) - set(table.platforms))
    if unknown:
        raise PlanError(f"unknown platform(s): {', '.join(unknown)}",
                        hint=f"known: {', '.join(table.platforms)} (recipes/table.yaml platforms:)")
    selected = select(cells, packages=packages, pythons=filters.get("python"),
                      cudas=filters.get("cuda"), torches=filters.get("torch"),
                      default_torch_only=False, platforms=platforms) if packages != [] else []
    if changed is not None and len(selected) > limits.pull_request_cells:
        say(f"capped: {len(selected)} cells changed, a pull request builds the first "
            f"{limits.pull_request_cells} (recipes/limits.yaml pull_request_cells)")
        selected = selected[:limits.pull_request_cells]
    found = drain(selected, cells, recipes, table, runners, limits,
                  History(entries, tries, released, stored_keys(kernel_store)),
                  fingerprints(recipes, src.table, runners.path))
    # the wheels a cell needs come from the index: the ledger's entries, never the released ones
    return first_batch(found, cells, recipes, entries), found


def write_batch(batch: Batch, schedule: Schedule, *, plan_out: Path,
                github_output: Path | None, summary: Path | None, pending: int) -> str:
    """Write the plan artifact, append the plan job's outputs (``pending``: the released wheels
    the ledger lacks yet, which this run's publish indexes even when it builds nothing) and the
    step summary; the schedule for people."""
    plan_out.write_text(json.dumps(batch.document(), indent=1))
    if github_output:
        with github_output.open("a") as out:
            out.write(github_output_text({**batch.outputs(), "pending": str(pending)}))
    text = as_markdown(schedule)
    if summary:
        with summary.open("a") as out:
            out.write("## The backlog's schedule (this run is run 1)\n\n" + text + "\n")
    return text


def read_site(api: Api, repo: str, into: Path, repo_ledger: Path,
              github_output: Path | None) -> list[str]:
    """The live site's address (an output ``base_url``), ledger and failed tries, into ``into``
    (``tools.releasing.site``); the lines saying what was read."""
    base = find_site(api, repo)
    run = f"{os.environ.get('GITHUB_RUN_ID', 'local')}-{os.environ.get('GITHUB_RUN_ATTEMPT', '1')}"
    lines = fetch_state(base, into, repo_ledger, run)
    if github_output:
        with github_output.open("a") as out:
            out.write(github_output_text({"base_url": base}))
    return [f"site: {base}", *lines, *address_warning(base)]


def address_warning(base: str) -> list[str]:
    """A warning annotation when the site is served somewhere other than the project's address
    (``tools/core/site.py``): the README, the docs and the selector's default index would send
    people elsewhere (a fork that has not set its own address yet)."""
    if base.rstrip("/") + "/" == site.INDEX_URL:
        return []
    return [f"::warning title=project address::the index is served at {base.rstrip('/')}/ but "
            f"tools/core/site.py says {site.INDEX_URL}, which the README, the docs and the "
            "selector's default index point people to: set INDEX_URL and REPOSITORY_URL there, "
            "then run python -m tools.devtools.docpages and commit the pages"]


def schedule_of(src: Sources, selected: list, cells: list, recipes: list, table: Any, *,
                ledger: Path, attempts: Path | None, kernel_store: Path | None = None
                ) -> Schedule:
    """The schedule of the backlog of ``selected`` (``python -m tools.matrix --format
    schedule``) over the ledger and attempts files and the kernel store's listing."""
    runners = load_runners(src.runners_path(), {r.package for r in recipes})
    history = History(list(load_ledger(ledger).values()), load_attempts(attempts),
                      stored=stored_keys(kernel_store))
    return drain(selected, cells, recipes, table, runners, load_limits(src.limits), history,
                 fingerprints(recipes, src.table, runners.path))


def job_env(document: dict[str, Any], job_id: str) -> list[str]:
    """A job's entry in the plan artifact as ``NAME=value`` lines for ``$GITHUB_ENV``."""
    job = job_entry(document, job_id)
    lines = []
    for key, name in ENV_FIELDS["shard" if "shard" in job else "cell"].items():
        if key not in job:
            continue
        value = [c["id"] for c in job[key]] if key == "cells" else job[key]
        text = " ".join(value) if isinstance(value, list) else str(value)
        if "\n" in text or "\r" in text:
            raise PlanError(f"{job_id}: {key} holds a line break", hint="a plan artifact bug")
        lines.append(f"{name}={text}")
    return lines


def fetch_needed(document: dict[str, Any], job_id: str, into: Path) -> list[str]:
    """Download the published wheels cell ``job_id`` needs into ``into``, each checked against
    the ledger's sha256; one line per wheel."""
    into.mkdir(parents=True, exist_ok=True)
    lines = []
    for need in job_entry(document, job_id).get("needs_wheels", []):
        name = Path(need["file"]).name
        if name != need["file"] or not name.endswith(".whl"):
            raise PlanError(f"{job_id}: needed file {need['file']!r} is not a wheel's name")
        if not str(need["url"]).startswith(("https://", "http://")):
            raise PlanError(f"{job_id}: {name}'s address {str(need['url'])[:80]!r} is not a web "
                            "address", hint="the ledger's url of a published file is one")
        with urllib.request.urlopen(need["url"], timeout=600) as answer:
            data = answer.read()
        if hashlib.sha256(data).hexdigest() != need["sha256"]:
            raise PlanError(f"{name}: its bytes are not the ones the ledger publishes",
                            hint="the index's file changed: report it")
        (into / name).write_bytes(data)
        lines.append(f"{need['cell']}: {name}")
    return lines


def planned_keys(src: Sources) -> frozenset[str]:
    """The group keys of the full plan (every planned cell's compile group): the kernel store
    keeps entries of these only (``tools.releasing.kernelstore.prune``)."""
    table = load_table(src.table)
    recipes = load_all(src.recipes, table)
    return frozenset(g.key for g in groups(plan(recipes, table), recipes))


def api_from_env(limits_path: Path) -> Api:
    """The paced API with the job's token (``GH_TOKEN``) at ``GITHUB_API_URL``."""
    token = os.environ.get("GH_TOKEN") or os.environ.get("GITHUB_TOKEN")
    if not token:
        raise ApiError("no token: set GH_TOKEN", hint="the workflow passes github.token")
    return Api(os.environ.get("GITHUB_API_URL", "https://api.github.com"), token,
               load_limits(limits_path))


def cell_jobs(document: dict[str, Any]) -> dict[str, list[str]]:
    """The cell jobs of a plan artifact, in stage order: each job's id and its cells' ids."""
    return {j["id"]: [c["id"] for c in j["cells"]] for name, jobs in
            document.get("stages", {}).items() if name.startswith("cells") for j in jobs}


def cell_ids(document: dict[str, Any]) -> list[str]:
    """The cells of a plan artifact, in stage order."""
    return [c for cells in cell_jobs(document).values() for c in cells]


def download_artifacts(api: Api, repo: str, run_id: str, document: dict[str, Any], what: str,
                       into: Path, cell: str | None = None) -> list[str]:
    """This run's ``wheels`` (every cell job's, into ``into``; at most a wheel per cell of the
    jobs found), ``reports`` (``into/<cell>/report.json``) or ``shards`` (the shard caches
    cell job ``cell`` reads, into ``into/<shard>/``); one line per missing artifact and a
    count. A cell job's artifacts (``report-<job>``, ``wheels-<job>``) hold its cells' reports
    (``<cell>/report.json``) and wheels: a job whose later cell failed still has the earlier
    ones'."""
    into.mkdir(parents=True, exist_ok=True)
    lines = []
    jobs = cell_jobs(document)
    if what == "shards":
        if not cell:
            raise PlanError("--what shards needs --id JOB", hint="the cell job reading the caches")
        found, missing = fetch(api, repo, run_id, list(job_entry(document, cell).get("shards", [])),
                               into, few=True)
        lines += [f"{n}: no cache (the shard failed or was stopped): the build compiles its "
                  "units itself" for n in missing]
    elif what == "reports":
        found, missing = fetch(api, repo, run_id, [f"report-{j}" for j in jobs], into)
        for name in found:  # <dir>/report-<job>/<cell>/report.json -> <dir>/<cell>/report.json
            for c in jobs[name.removeprefix("report-")]:
                if (into / name / c / "report.json").is_file():
                    (into / name / c).rename(into / c)
            shutil.rmtree(into / name)
    else:
        found, missing = fetch(api, repo, run_id, [f"wheels-{j}" for j in jobs], into,
                               separate=False)
        wheels = list(into.glob("*.whl"))
        most = sum(len(jobs[n.removeprefix("wheels-")]) for n in found)
        if len(wheels) > most:
            raise PlanError(f"{len(found)} wheel artifacts of {most} cells held {len(wheels)} "
                            "wheels", hint="each cell job's artifact holds a wheel per cell")
        lines += [f"{n.removeprefix('wheels-')}: no wheel (its builds failed: "
                  f"{', '.join(jobs[n.removeprefix('wheels-')])})" for n in missing]
    return lines + [f"{what}: {len(found)} downloaded, {len(missing)} missing, "
                    f"{api.made} requests"]


#: How a build report's error reads in the attempts file (``ReportedError.line``).
_ERROR_LINE = re.compile(r"^(\w+) error: ")


def count_attempts(src: Sources, *, attempts: Path, document: dict[str, Any], reports: Path,
                   report_url: str = "", reports_out: Path | None = None) -> str:
    """Write the attempts file after this run (from its cells' build reports: an error, or no
    report at all, is a failed try) and, into ``reports_out``, a report of the last error of
    each attempted cell that has none there (the front page's "what is missing")."""
    table = load_table(src.table)
    recipes = load_all(src.recipes, table)
    cells = {c.id: c for c in plan(recipes, table)}
    runners = load_runners(src.runners_path(), {r.package for r in recipes})
    results: dict[str, str | None] = {}
    for cell in cell_ids(document):
        path = reports / cell / "report.json"
        if not path.is_file():
            results[cell] = "no build report (the job failed before it wrote one, or was stopped)"
            continue
        try:
            report = read_report(path)
        except ReportError as exc:
            results[cell] = f"its build report could not be read: {exc.message}"
            continue
        results[cell] = report.error.line() if report.error else None
    after = record(load_attempts(attempts), results,
                   fingerprints(recipes, src.table, runners.path), cells,
                   {c: report_url for c, e in results.items() if e})
    write_attempts(attempts, after)
    limit = load_limits(src.limits).tries
    for cell, attempt in after.items() if reports_out else ():
        target = reports_out / cell / "report.json"
        if target.exists() or cell not in cells:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        state = "given up until its recipe, the table or the runner file changes" \
            if attempt.tries >= limit else "tried again by the next run"
        # A failed try's summary, as a build report no backend wrote (the front page reads it).
        said = _ERROR_LINE.match(attempt.error)
        write_report(target, BuildReport(cell, None, report_url=attempt.report or None,
                                         error=ReportedError(
                                             said.group(1) if said else "build",
                                             f"{attempt.error} (failed {attempt.tries} run(s) "
                                             f"in a row; {state})")))
    failed = sum(1 for e in results.values() if e)
    return f"{len(results)} cells ran, {failed} failed; {len(after)} cells with failed tries"
