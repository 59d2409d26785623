"""``python -m tools.release`` (tools.releasing.steps): a job's entry from the plan artifact,
the published wheels a cell needs (served on 127.0.0.1, checked against the ledger's sha256),
the failed tries after a run, the live site a run merges into (the Pages API's stand-in and a
site served on 127.0.0.1); bad input named. The batch step and the upload are run for real in
tests/test_workflows.py and tests/test_ghapi.py."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading

import pytest

from github_standin import github  # noqa: F401 (the fixture)
from tools import ROOT
from tools.core.errors import PlanError
from tools.pipeline.buildreport import BuildReport, ReportedError, read_report, write_report
from tools.releasing.backlog import load_attempts
from tools.releasing.steps import (Sources, cell_ids, cell_jobs, count_attempts, fetch_needed,
                                   job_env)


def _release(*args, **kw):
    return subprocess.run([sys.executable, "-m", "tools.release", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, **kw)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """This repository's batch for causal_conv1d on Linux x86_64, from an empty ledger."""
    tmp = tmp_path_factory.mktemp("batch")
    out, summary = tmp / "out", tmp / "summary"
    proc = _release("batch", "--package", "causal_conv1d", "--platform", "linux_x86_64",
                    "--plan-out", str(tmp / "batch.json"), "--github-output", str(out),
                    "--summary", str(summary))
    assert proc.returncode == 0, proc.stderr
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    return json.loads((tmp / "batch.json").read_text()), outputs, summary.read_text()


def test_the_batch_outputs_ids_and_the_summary_the_schedule(batch):
    document, outputs, summary = batch
    first = [e["id"] for e in json.loads(outputs["cells1"])["include"]]
    # the cell jobs of causal_conv1d's CUDA 13.0 and 12.8 kernels, which the torch series of
    # each share, wait for their group's one shard; the others start at once
    waiting = [e["id"] for e in json.loads(outputs["cells2"])["include"]]
    jobs = first + waiting
    assert jobs and all(j.startswith("causal_conv1d-cu") and "-job" in j for j in jobs)
    assert waiting and all(j.startswith(("causal_conv1d-cu130-", "causal_conv1d-cu128-"))
                           for j in waiting)
    # the count is of cells: each job builds several
    cells = cell_ids(document)
    assert all(c.startswith("causal_conv1d-3.") for c in cells)
    assert outputs["count"] == str(len(cells)) and len(cells) > len(jobs)
    assert summary.startswith("## The backlog's schedule (this run is run 1)")
    assert "**Totals**: 1 runs" in summary


def test_a_jobs_entry_becomes_its_environment(batch):
    document, outputs, _ = batch
    job = json.loads(outputs["cells1"])["include"][0]["id"]
    env = dict(line.split("=", 1) for line in job_env(document, job))
    cells = cell_jobs(document)[job]
    assert env["JOB_ID"] == job and env["CELLS"] == " ".join(cells) and len(cells) > 1
    assert env["IMAGE"].startswith("pytorch/") and env["CELL_PYTHON"] in cells[0]
    assert int(env["CCACHE_SAVE_BYTES"]) > 0 and env["SHARDS"] == ""
    # the command prints the same lines
    proc = _release("entry", "--plan", "/dev/stdin", "--id", job, input=json.dumps(document))
    assert proc.returncode == 0 and proc.stdout.splitlines() == job_env(document, job)
    # a job of another run's plan: named
    with pytest.raises(PlanError, match="no job 'nope'"):
        job_env(document, "nope")


def test_no_name_of_a_jobs_environment_is_read_by_ccache(batch):
    # a build on the runner (Windows, the host backend) inherits the job's environment: ccache
    # read CCACHE_PREFIX, once the cache key's prefix, as a program to run before the compiler
    from tools.core.errors import ToolchainError
    from tools.pipeline.ccache import find_ccache
    try:
        ccache = find_ccache()
    except ToolchainError as exc:
        pytest.skip(str(exc))
    document, outputs, _ = batch
    job = json.loads(outputs["cells1"])["include"][0]["id"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CCACHE_")}
    env.update(line.split("=", 1) for line in job_env(document, job))
    shown = subprocess.run([ccache, "--show-config"], env=env, capture_output=True, text=True,
                           timeout=60, check=True).stdout
    assert [line for line in shown.splitlines() if line.startswith("(environment)")] == []

@pytest.fixture
def served(tmp_path):
    folder = tmp_path / "files"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_a_needed_wheel_comes_from_the_index_checked_against_the_ledger(tmp_path, served):
    folder, base = served
    name = "torch_scatter-2.1.2+cu130.torch2.14-cp312-cp312-manylinux_2_28_x86_64.whl"
    (folder / name).write_bytes(b"wheel bytes")
    good = {"cell": "torch_scatter-3.12-cu130", "file": name, "url": f"{base}/{name}",
            "sha256": hashlib.sha256(b"wheel bytes").hexdigest()}
    doc = {"schema": 2, "stages": {"cells1": [{"id": "sparse-job1", "cells": [
        {"id": "sparse", "needs_wheels": [good]}]}]}}
    assert fetch_needed(doc, "sparse", tmp_path / "needed") == [f"torch_scatter-3.12-cu130: {name}"]
    assert (tmp_path / "needed" / name).read_bytes() == b"wheel bytes"
    # other bytes than the ledger's: refused, nothing kept
    bad = {**good, "sha256": "0" * 64}
    doc["stages"]["cells1"][0]["cells"][0]["needs_wheels"] = [bad]
    with pytest.raises(PlanError, match="not the ones the ledger publishes"):
        fetch_needed(doc, "sparse", tmp_path / "other")
    assert not (tmp_path / "other" / name).exists()
    # an address that is no web address (a hand-edited ledger): refused, nothing read
    doc["stages"]["cells1"][0]["cells"][0]["needs_wheels"] = [{**good, "url": "file:///etc/passwd"}]
    with pytest.raises(PlanError, match="is not a web address"):
        fetch_needed(doc, "sparse", tmp_path / "other")
    # a name that is a path: refused before anything is fetched
    doc["stages"]["cells1"][0]["cells"][0]["needs_wheels"] = [{**good, "file": "../x.whl"}]
    with pytest.raises(PlanError, match="is not a wheel's name"):
        fetch_needed(doc, "sparse", tmp_path / "other")


def test_the_failed_tries_after_a_run(tmp_path, batch):
    document, outputs, _ = batch
    cells = cell_ids(document)
    reports = tmp_path / "reports"
    # cell 0 built; cell 1 failed with a report; the others left no report (failed early)
    write_report(reports / cells[0] / "report.json",
                 BuildReport(cells[0], "container", verdict="passed"))
    write_report(reports / cells[1] / "report.json", BuildReport(
        cells[1], "container", error=ReportedError("compile", "nvcc failed")))
    attempts = tmp_path / "attempts.json"
    src = Sources(ROOT / "recipes", ROOT / "recipes" / "table.yaml", None,
                  ROOT / "recipes" / "limits.yaml")
    import shutil
    for run in (1, 2, 3):  # each run's publish job downloads its reports into a folder of its own
        out = tmp_path / f"out{run}"
        shutil.copytree(reports, out)
        line = count_attempts(src, attempts=attempts, document=document, reports=out,
                              report_url="https://runs/1", reports_out=out)
        assert line.startswith(f"{len(cells)} cells ran, {len(cells) - 1} failed")
    tries = load_attempts(attempts)
    assert cells[0] not in tries and tries[cells[1]].tries == 3
    assert tries[cells[1]].error == "compile error: nvcc failed"
    assert tries[cells[1]].report == "https://runs/1"
    assert tries[cells[2]].error.startswith("no build report")
    # the front page gets a report for each attempted cell without one of this run, a build
    # report the front page reads like any other
    written = read_report(out / cells[2] / "report.json")
    assert written.verdict == "failed" and written.backend is None
    assert written.report_url == "https://runs/1" and written.error.kind == "build"
    assert "failed 3 run(s) in a row; given up until its recipe" in written.error.message
    # a cell with a report of this run keeps it
    assert read_report(out / cells[1] / "report.json").error == ReportedError("compile",
                                                                              "nvcc failed")


def test_a_report_that_is_not_one_is_a_failed_try_naming_the_file(tmp_path, batch):
    document, outputs, _ = batch
    cell = cell_ids(document)[0]
    (tmp_path / "r" / cell).mkdir(parents=True)
    (tmp_path / "r" / cell / "report.json").write_text('{"schema": 99, "cell": "x"}')
    src = Sources(ROOT / "recipes", ROOT / "recipes" / "table.yaml", None,
                  ROOT / "recipes" / "limits.yaml")
    count_attempts(src, attempts=tmp_path / "attempts.json",
                   document={"stages": {"cells1": [{"id": "j", "cells": [{"id": cell}]}]}},
                   reports=tmp_path / "r")
    error = load_attempts(tmp_path / "attempts.json")[cell].error
    assert error == (f"its build report could not be read: {tmp_path / 'r' / cell / 'report.json'}"
                     ": schema 99: this code reads build reports of schema 1")


# --------------------------------------------------------------------------- the live site

LIVE = '{"schema": 1, "files": {\n"a-1.0-py3-none-any.whl": {}\n}}\n'


def _site(tmp_path, github, pages_url=None, **pages):
    """``python -m tools.release site`` against the stand-in API, whose Pages site is ``served``
    (a folder on 127.0.0.1); returns (exit status, log, outputs, the folder it wrote)."""
    import os
    state, base = github()
    state.pages = pages or ({"html_url": pages_url, "build_type": "workflow"} if pages_url
                            else None)
    out, into = tmp_path / "output", tmp_path / "temp"
    out.write_text("")
    repo_ledger = tmp_path / "repo-ledger.json"
    env = {**os.environ, "GH_TOKEN": "t", "GITHUB_API_URL": base, "GITHUB_RUN_ID": "7",
           "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    proc = _release("site", "--repo", "o/r", "--dir", str(into), "--repo-ledger",
                    str(repo_ledger), "--github-output", str(out), env=env)
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    return proc.returncode, proc.stdout + proc.stderr, outputs, into


def test_the_live_sites_ledger_and_tries_win(tmp_path, github, served):
    folder, url = served
    (folder / "ledger.json").write_text(LIVE)
    (folder / "attempts.json").write_text('{"schema": 1, "cells": {}}\n')
    (tmp_path / "repo-ledger.json").write_text('{"schema": 1, "files": {}}\n')
    rc, log, outputs, into = _site(tmp_path, github, url + "/")
    assert rc == 0, log
    assert outputs == {"base_url": url}  # no trailing slash
    assert (into / "ledger.json").read_text() == LIVE  # the live copy, not the repository's
    assert (into / "attempts.json").is_file()


def test_a_site_served_away_from_the_projects_address_is_named(tmp_path, github, served):
    from tools.core import site
    _, url = served
    rc, log, _, _ = _site(tmp_path, github, url)
    assert rc == 0, log
    assert f"::warning title=project address::the index is served at {url}/" in log
    assert site.INDEX_URL in log and "tools/core/site.py" in log


def test_the_projects_own_address_gets_no_warning():
    from tools.core import site
    from tools.releasing.steps import address_warning
    assert address_warning(site.INDEX_URL.rstrip("/")) == []


def test_a_first_deployment_starts_from_the_repositorys_ledger(tmp_path, github, served):
    _, url = served
    (tmp_path / "repo-ledger.json").write_text(LIVE)
    rc, log, _, into = _site(tmp_path, github, url)
    assert rc == 0, log
    assert (into / "ledger.json").read_text() == LIVE and "first deployment" in log
    assert not (into / "attempts.json").exists() and "every cell is tried" in log


def test_a_first_deployment_without_any_ledger_starts_empty(tmp_path, github, served):
    from tools.sitegen.ledger_file import dump_ledger
    _, url = served
    rc, log, _, into = _site(tmp_path, github, url)
    assert rc == 0, log
    assert json.loads((into / "ledger.json").read_text()) == json.loads(dump_ledger({}))


def test_a_site_serving_an_index_without_its_ledger_is_refused(tmp_path, github, served):
    folder, url = served
    (folder / "simple").mkdir()
    (folder / "simple" / "index.html").write_text("<html></html>")
    (tmp_path / "repo-ledger.json").write_text(LIVE)
    rc, log, outputs, into = _site(tmp_path, github, url)
    assert rc != 0 and "serves an index but no ledger.json" in log
    assert not (into / "ledger.json").exists() and "base_url" not in outputs


@pytest.mark.parametrize("pages,message", [
    # Pages built from a branch: deploy-pages can't deploy there
    ({"html_url": "https://o.github.io/r/", "build_type": "legacy"},
     "o/r's Pages site is built from a branch; in Settings → Pages, set the source to "
     '"GitHub Actions"'),
    # no Pages site at all
    (None, 'GitHub Pages is not set up for o/r; in Settings → Pages, set the source to '
           '"GitHub Actions"'),
])
def test_a_site_github_cant_deploy_to_names_the_setting(tmp_path, github, pages, message):
    rc, log, outputs, _ = _site(tmp_path, github, **(pages or {}))
    assert rc != 0 and message in log and outputs == {}
