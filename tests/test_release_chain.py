"""A run's release and publish, end to end, with the project's own commands against the stand-in
of GitHub's API (tests/github_standin.py), and pip installing what was published from the site
served on 127.0.0.1.

What a run's release and publish jobs do, in their order: this run's wheels listed page by page
and downloaded by id (``python -m tools.release artifacts``), the index built as a check (which
writes each wheel's ``.metadata``), the run's release uploaded through the paced API (``python -m
tools.release upload``), the releases the live ledger lacks found (``python -m tools.release
to-index``), their wheels downloaded from the assets' addresses, the site indexed with the
release's download address as its base, the failed tries counted (``python -m tools.release
attempts``), and the site served (``python -m tools.serve``) to a real ``pip install``. What
stands in: the API (this stand-in, not GitHub), ``gh release download`` (a plain download of the
asset's address), the build (a small pure-Python wheel of tests/wheelfactory.py in the cell's
artifact) and the attestation and Pages deployment, which need GitHub's OIDC and Pages.
"""

from __future__ import annotations

import io
import json
import os
import select
import subprocess
import sys
import urllib.request
import venv
import zipfile

from github_standin import github  # noqa: F401 (the fixture)
from tools import ROOT
from tools.pipeline.buildreport import BuildReport, ReportedError
from wheelfactory import make_wheel


def _report(report: BuildReport) -> bytes:
    """A build report's file, as a cell job uploads it."""
    return json.dumps(report.to_json()).encode()


def _zip(**members: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _run(*args: str, env: dict, stdin: str | None = None) -> str:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{args}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def test_a_runs_wheels_are_released_indexed_and_installed_with_pip(tmp_path, github):
    state, base = github(rate_limit_every=5)
    env = {**os.environ, "GH_TOKEN": "t", "GITHUB_API_URL": base, "PYTHONPATH": str(ROOT),
           "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    # this run: a cell job of two cells, one built (its wheel and report are the job's
    # artifacts) and one failed (its report only); and a job that left nothing (stopped early)
    built = make_wheel(tmp_path / "built", "chaindemo", "1.0", tag="py3-none-any")
    state.artifacts = [("wheels-chaindemo-cu130-job1", _zip(**{built.name: built.read_bytes()})),
                       ("report-chaindemo-cu130-job1", _zip(**{
                           "chaindemo-3.12-cu130/report.json": _report(BuildReport(
                               "chaindemo-3.12-cu130", "container", "passed")),
                           "chaindemo-3.13-cu130/report.json": _report(BuildReport(
                               "chaindemo-3.13-cu130", "container",
                               error=ReportedError("compile", "nvcc failed")))}))]
    plan = tmp_path / "batch.json"
    plan.write_text(json.dumps({"schema": 2, "stages": {"cells1": [
        {"id": "chaindemo-cu130-job1", "cells": [{"id": "chaindemo-3.12-cu130"},
                                                 {"id": "chaindemo-3.13-cu130"}]},
        {"id": "chaindemo-cu130-job2", "cells": [{"id": "chaindemo-3.14-cu130"}]}]}}))
    temp = tmp_path / "runner-temp"
    temp.mkdir()

    # the release job
    wheelhouse = tmp_path / "wheelhouse"
    out = _run("tools.release", "artifacts", "--repo", "o/r", "--run-id", "42", "--plan",
               str(plan), "--what", "wheels", "--dir", str(wheelhouse), env=env)
    assert "chaindemo-cu130-job2: no wheel (its builds failed: chaindemo-3.14-cu130)" in out
    assert "wheels: 1 downloaded, 1 missing" in out
    download = f"{base}/o/r/releases/download/wheels-42"
    _run("tools.index", "--wheels", str(wheelhouse), "--site", str(tmp_path / "check"),
         "--base-url", download, "--ledger", str(temp / "check-ledger.json"), "--init-ledger",
         env=env)
    assert (wheelhouse / f"{built.name}.metadata").is_file()
    notes = temp / "notes.md"
    notes.write_text("Wheels built by run 42.")
    out = _run("tools.release", "upload", "--repo", "o/r", "--tag", "wheels-42", "--target",
               "abc", "--dir", str(wheelhouse), "--notes", str(notes), env=env)
    assert "wheels-42: sent 2, 0 already there" in out
    assert state.releases[0]["draft"] is False

    # the publish job, from a live ledger that has nothing yet
    ledger = temp / "ledger.json"
    ledger.write_text('{"schema": 2, "files": {}}')
    missing = _run("tools.release", "to-index", "--repo", "o/r", "--ledger", str(ledger),
                   env=env).splitlines()
    assert missing == [f"wheels-42\t{built.name}"]
    releases = tmp_path / "releases" / "wheels-42"
    releases.mkdir(parents=True)
    with urllib.request.urlopen(f"{download}/{built.name}") as answer:  # gh release download
        (releases / built.name).write_bytes(answer.read())
    reports = temp / "reports"
    _run("tools.release", "artifacts", "--repo", "o/r", "--run-id", "42", "--plan", str(plan),
         "--what", "reports", "--dir", str(reports), env=env)
    # each cell's report in a folder of its own, as the attempts count and the front page read
    assert sorted(p.relative_to(reports).as_posix() for p in reports.rglob("*")
                  if p.is_file()) == ["chaindemo-3.12-cu130/report.json",
                                      "chaindemo-3.13-cu130/report.json"]
    site = tmp_path / "site"
    _run("tools.index", "--wheels", str(releases), "--site", str(site), "--base-url",
         download, "--ledger", str(ledger), env=env)
    published = json.loads(ledger.read_text())["files"]
    assert published[built.name]["url"] == f"{download}/{built.name}"

    # the site, served on 127.0.0.1, and pip installing from it: the wheel comes from the
    # release's address, its .metadata too
    (tmp_path / "none").mkdir()  # the site's files are the release's, none served from here
    serve = subprocess.Popen([sys.executable, "-m", "tools.serve", "--site", str(site),
                              "--wheels", str(tmp_path / "none"), "--port", "0", "--quiet",
                              "--exit-after", "120"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([serve.stdout], [], [], 60)
        line = serve.stdout.readline() if ready else ""
        assert line.startswith("serving http://127.0.0.1:"), line + (
            serve.stderr.read() if serve.poll() is not None else "")
        index = line.split()[1].rstrip("/") + "/simple/"
        target = tmp_path / "venv"
        venv.create(target, with_pip=True)
        pip = subprocess.run([str(target / "bin" / "python"), "-m", "pip", "install",
                              "--isolated", "--no-cache-dir", "--index-url", index,
                              "chaindemo==1.0"], env=env, capture_output=True, text=True,
                             timeout=300)
        assert pip.returncode == 0, pip.stdout + pip.stderr
        got = subprocess.run([str(target / "bin" / "python"), "-c",
                              "import chaindemo; print(chaindemo.__version__)"],
                             capture_output=True, text=True, timeout=60)
        assert got.stdout.strip() == "1.0"
    finally:
        serve.terminate()
        serve.wait(timeout=10)
        serve.stdout.close()
        serve.stderr.close()
    # pip read the wheel from the release (the stand-in's log) and its metadata beside it
    fetched = [p for m, p, code in state.log if m == "GET" and p.startswith("/o/r/releases/download/")]
    assert f"/o/r/releases/download/wheels-42/{built.name}" in fetched

    # the failed tries, for the next run's backlog: the failed cell and the one with no report,
    # each counted once
    from tools.releasing.steps import Sources, count_attempts
    src = Sources(ROOT / "recipes", ROOT / "recipes" / "table.yaml", None,
                  ROOT / "recipes" / "limits.yaml")
    line = count_attempts(src, attempts=temp / "attempts.json",
                          document=json.loads(plan.read_text()), reports=reports)
    assert line.startswith("3 cells ran, 2 failed")
