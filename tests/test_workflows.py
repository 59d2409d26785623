"""The GitHub workflows: linted for real, their plan step run for real, their safety rules checked.

The plan step's own script (taken from wheels.yml) runs in a scratch git repository holding a copy
of tools/ and a test recipe, and the publish job's ledger step runs against a local web server
standing in for the Pages site, so a change to a script, the planner or the ledger is caught here.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from conftest import MINI_TABLE
from tools import ROOT
from tools.devtools.lint_workflows import workflow_files

WORKFLOWS = ROOT / ".github" / "workflows"
SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"uses:\s*(\S+)\s+#\s*v\d+\.\d+\.\d+\s*$")
WRITE_GUARDS = ("github.event_name != 'pull_request'", "github.ref == 'refs/heads/main'")


def _load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the key `on` as True.
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


@pytest.fixture(scope="module")
def workflows() -> dict[str, dict]:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert files, "no workflows"
    return {f.name: _load(f) for f in files}


def _jobs(workflows):
    for name, wf in workflows.items():
        for job_id, job in wf["jobs"].items():
            yield f"{name}:{job_id}", job


def _steps(workflows):
    for where, job in _jobs(workflows):
        for i, step in enumerate(job.get("steps", [])):
            yield f"{where}:{step.get('name', i)}", job, step


def _step(job: dict, name_part: str) -> tuple[int, dict]:
    hits = [(i, s) for i, s in enumerate(job["steps"]) if name_part in s.get("name", "")]
    assert len(hits) == 1, f"expected one step named like {name_part!r}, found {len(hits)}"
    return hits[0]


# --------------------------------------------------------------------------- lint, for real
# (the lint module's own tests are tests/test_lint_workflows.py)


def test_workflows_are_clean():
    proc = subprocess.run([sys.executable, "-m", "tools.lint_workflows"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "workflows clean" in proc.stdout
    assert {p.name for p in workflow_files()} >= {"checks.yml", "refresh.yml", "wheels.yml"}


# --------------------------------------------------------------------------- safety rules


def test_no_pull_request_target(workflows):
    for name, wf in workflows.items():
        triggers = wf["on"] if isinstance(wf["on"], (dict, list)) else [wf["on"]]
        assert "pull_request_target" not in triggers, name
        assert "workflow_run" not in triggers, name  # runs with write access after a PR's run


def test_top_level_permissions_are_empty(workflows):
    for name, wf in workflows.items():
        assert wf.get("permissions") == {}, f"{name}: set `permissions: {{}}` at the top"


def test_every_job_sets_its_permissions(workflows):
    for where, job in _jobs(workflows):
        assert "permissions" in job, f"{where}: no permissions block"
        assert isinstance(job["permissions"], dict), f"{where}: name each permission"


def test_write_permissions_only_in_jobs_that_never_run_for_pull_requests(workflows):
    writers = []
    for where, job in _jobs(workflows):
        writes = sorted(k for k, v in job["permissions"].items() if v == "write")
        if not writes:
            assert set(job["permissions"].values()) <= {"read", "none"}, where
            continue
        writers.append((where, writes))
        cond = " ".join(str(job.get("if", "")).split())
        for guard in WRITE_GUARDS:
            assert guard in cond, f"{where} has {writes} but its `if` lacks {guard!r}"
    assert writers == [("refresh.yml:refresh", ["actions", "contents", "pull-requests"]),
                       ("wheels.yml:attest", ["attestations", "id-token"]),
                       ("wheels.yml:publish", ["contents", "id-token", "pages"])]


def test_actions_pinned_to_full_commit_shas(workflows):
    pins: dict[str, set[str]] = {}
    for where, _job, step in _steps(workflows):
        if "uses" in step:
            ref = step["uses"]
            assert SHA_PIN.match(ref), f"{where}: {ref} is not pinned to a 40-hex commit"
            action, sha = ref.split("@")
            pins.setdefault(action, set()).add(sha)
    assert all(len(shas) == 1 for shas in pins.values()), pins  # one version of each action
    for path in WORKFLOWS.glob("*.yml"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*(- )?uses:", line):
                assert VERSION_COMMENT.search(line), f"{path.name}:{n}: add a `# vX.Y.Z` comment"


def test_no_expressions_inside_run_scripts(workflows):
    # Inputs, branch names, matrix values and step outputs reach scripts through `env:` only.
    for where, _job, step in _steps(workflows):
        assert "${{" not in step.get("run", ""), f"{where}: pass the value through env:"


def test_checkouts_keep_no_credentials(workflows):
    for where, _job, step in _steps(workflows):
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, where


def test_no_secrets_and_the_token_only_where_publishing(workflows):
    for path in WORKFLOWS.glob("*.yml"):
        assert not re.search(r"\$\{\{[^}]*\bsecrets\b", path.read_text()), path.name
    for where, job in _jobs(workflows):
        if "github.token" in yaml.safe_dump(job):
            assert where in ("wheels.yml:publish", "refresh.yml:refresh"), where


def test_every_job_has_a_timeout(workflows):
    for where, job in _jobs(workflows):
        assert isinstance(job.get("timeout-minutes"), int), where


def test_build_job_runs_the_local_nox_session(workflows):
    job = workflows["wheels.yml"]["jobs"]["build"]
    assert job["name"] == "build-${{ matrix.id }}"          # the nox session name
    assert job["strategy"]["fail-fast"] is False
    assert job["strategy"]["max-parallel"] >= 1
    assert job["if"] == "needs.plan.outputs.count != '0'"  # no cells: skipped, not failed
    names = [s.get("name", "") for s in job["steps"]]
    free, _ = _step(job, "Free disk space")
    pull, pull_step = _step(job, "Pull the builder image")
    build, build_step = _step(job, "Build the cell")
    assert free < pull < build
    assert pull_step["env"]["IMAGE"] == "${{ matrix.image }}"
    assert "for attempt in" in pull_step["run"]
    assert 'docker pull --quiet "$IMAGE"' in pull_step["run"]
    # What the step runs, not how it is spelled: nox's session for the cell, on the container
    # backend with docker (what the runner has), and nothing else.
    (line,) = [ln for ln in build_step["run"].splitlines() if "nox" in ln]
    argv = shlex.split(line.split("||")[0])
    # the build stops itself before the step's and the job's limits (see the compiler cache)
    assert argv[:3] == ["timeout", "--kill-after=5m", "$TIME_LIMIT"]
    argv = argv[3:]
    assert Path(argv[0]).name == "nox"
    assert argv[1:3] == ["-s", "build-$CELL_ID"] and build_step["env"]["CELL_ID"] == "${{ matrix.id }}"
    posargs = argv[argv.index("--") + 1:]
    options = dict(zip(posargs[::2], posargs[1::2]))
    assert options == {"--backend": "container", "--engine": "docker"}
    assert build_step["timeout-minutes"] < job["timeout-minutes"]  # the report still uploads
    uploads = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert {u["with"]["name"] for u in uploads} == {"report-${{ matrix.id }}",
                                                    "wheels-${{ matrix.id }}"}
    assert names.index("Upload the build report") > build
    assert next(u for u in uploads if "report" in u["with"]["name"])["if"] == "always()"


CACHE_KEY = ("ccache-${{ matrix.package }}-cu${{ matrix.cuda }}-torch${{ matrix.torch }}"
             "-py${{ matrix.python }}-")


def test_compiler_cache_is_restored_always_and_saved_only_from_main(workflows):
    job = workflows["wheels.yml"]["jobs"]["build"]
    restore, restore_step = _step(job, "Restore the compiler cache")
    build, build_step = _step(job, "Build the cell")
    stop, stop_step = _step(job, "Stop the builder container")
    save, save_step = _step(job, "Save the compiler cache")
    assert restore < build < stop < save
    assert restore_step["uses"].startswith("actions/cache/restore@")
    assert save_step["uses"].startswith("actions/cache/save@")
    assert restore_step["uses"].split("@")[1] == save_step["uses"].split("@")[1]
    assert "if" not in restore_step                       # pull requests read it too
    # only trusted runs write it, and also after a failed or stopped build (that is the point)
    assert save_step["if"].startswith("always() && ")
    assert all(guard in save_step["if"] for guard in WRITE_GUARDS)
    assert stop_step["if"] == "always()"
    # the directory tools.pipeline.ccache uses by default (the container backend mounts it)
    from tools.pipeline.ccache import cache_dir
    path = restore_step["with"]["path"]
    assert path == save_step["with"]["path"] and Path(path).expanduser() == cache_dir({})
    # this cell's newest cache first, then another Python's of the same package, CUDA and torch
    keys = restore_step["with"]["restore-keys"].strip().splitlines()
    assert keys == [CACHE_KEY, CACHE_KEY.rsplit("-py", 1)[0] + "-"]
    run_key = CACHE_KEY + "${{ github.run_id }}-${{ github.run_attempt }}"
    assert restore_step["with"]["key"] == save_step["with"]["key"] == run_key
    # the build stops itself well before the step's backstop and the job's limit
    limit = int(build_step["env"]["TIME_LIMIT"].removesuffix("m"))
    assert limit + 5 < build_step["timeout-minutes"] < job["timeout-minutes"]


def _run_build_step(tmp_path, nox_script: str, limit: str) -> subprocess.CompletedProcess:
    """The build step's own script, with a stand-in nox, in a scratch directory."""
    job = _load(WORKFLOWS / "wheels.yml")["jobs"]["build"]
    _, step = _step(job, "Build the cell")
    nox = tmp_path / ".venv" / "bin" / "nox"
    nox.parent.mkdir(parents=True)
    nox.write_text("#!/bin/sh\n" + nox_script)
    nox.chmod(0o755)
    env = {**os.environ, "CELL_ID": "demo_ext-3.12-cu130", "TIME_LIMIT": limit}
    return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("nox_script,limit,code,out_of_time", [
    # a build past its time: stopped, and the message says how to continue
    ("sleep 30\n", "1s", 124, True),
    # a build that fails by itself keeps its own exit status, without that message
    ("exit 7\n", "10s", 7, False),
    # a build that passes
    ('test "$2" = build-demo_ext-3.12-cu130\n', "10s", 0, False),
])
def test_build_step_stops_itself_in_time(tmp_path, nox_script, limit, code, out_of_time):
    proc = _run_build_step(tmp_path, nox_script, limit)
    assert proc.returncode == code, proc.stderr
    message = ("::error title=out of time::demo_ext-3.12-cu130 stopped after 1s; on main its "
               "compiler cache is saved: re-run this job to continue from it")
    assert (message in proc.stdout) is out_of_time


def test_one_attestation_per_wheel(workflows):
    job = workflows["wheels.yml"]["jobs"]["attest"]
    assert job["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    attests = [s for s in job["steps"]
               if s.get("uses", "").startswith("actions/attest-build-provenance@")]
    assert len(attests) == 1
    subject = attests[0]["with"]
    assert set(subject) == {"subject-path"}
    assert subject["subject-path"] == "${{ steps.wheel.outputs.path }}"  # one file, no glob
    _, find = _step(job, "Find the wheel")
    assert "expected one wheel" in find["run"]


def test_publish_builds_the_index_before_publishing_anything(workflows):
    job = workflows["wheels.yml"]["jobs"]["publish"]
    assert set(job["needs"]) == {"build", "attest"}
    assert job["concurrency"] == {"group": "publish-index", "cancel-in-progress": False}
    assert job["environment"]["name"] == "github-pages"
    ledger, _ = _step(job, "Fetch the current ledger")
    hold, _ = _step(job, "Hold back wheels already published")
    index, index_step = _step(job, "Build the index")
    release, release_step = _step(job, "Create the release")
    check, _ = _step(job, "Check the release")
    upload, upload_step = _step(job, "Upload the site")
    deploy, deploy_step = _step(job, "Deploy the site")
    assert ledger < hold < index < release < check < upload < deploy
    # With nothing new (every wheel already published), nothing is released or deployed.
    for step in job["steps"][hold + 1:]:
        if step["name"] != "Summary":
            assert step.get("if") == "steps.batch.outputs.new != '0'", step["name"]
    assert index_step["run"].startswith("make index ")
    assert 'BASE_URL="$BASE_URL"' in index_step["run"]
    assert "continue-on-error" not in index_step
    assert upload_step["uses"].startswith("actions/upload-pages-artifact@")
    assert deploy_step["uses"].startswith("actions/deploy-pages@")
    assert "wheelhouse/*.whl.metadata" in release_step["run"]
    _, name_step = _step(job, "Name the release")
    assert 'tag="wheels-$(date -u +%Y%m%d)-$GITHUB_RUN_ID"' in name_step["run"]
    assert "/releases/download/$tag" in name_step["run"]


def test_checks_run_the_make_targets(workflows):
    runs = [r for r in (s.get("run") for j in workflows["checks.yml"]["jobs"].values()
                        for s in j["steps"]) if r]
    assert runs == ["make test", "make recipes", "make lint"]
    # workflow_dispatch: refresh.yml starts the checks on its branch that way.
    assert workflows["checks.yml"]["on"] == {"pull_request": None, "push": {"branches": ["main"]},
                                             "workflow_dispatch": None}


# --------------------------------------------------------------------------- the plan step


@pytest.fixture
def scratch_repo(tmp_path, write_recipe, good_recipe):
    """A git repository with a copy of tools/ and the test table; returns (repo, add_recipe)."""
    repo = tmp_path
    shutil.copytree(ROOT / "tools", repo / "tools",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (repo / "recipes").mkdir()
    (repo / "recipes" / "table.yaml").write_text(yaml.safe_dump(MINI_TABLE, sort_keys=False))
    git(repo, "init", "--quiet", "--initial-branch=main")
    commit(repo, "base")

    def add_recipe() -> None:
        write_recipe(good_recipe)  # tmp_path/recipes/demo_ext/
        commit(repo, "add demo_ext")
    return repo, add_recipe


GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def test_planner_reads_a_fake_diff_of_a_changed_recipe(scratch_repo):
    repo, add_recipe = scratch_repo
    add_recipe()
    proc = subprocess.run(
        [sys.executable, "-m", "tools.matrix", "--format", "github", "--changed-files", "-"],
        cwd=repo, input="recipes/demo_ext/recipe.yaml\nREADME.md\n",
        capture_output=True, text=True, check=True)
    cells = json.loads(proc.stdout)["include"]
    assert len(cells) == 14 and {c["package"] for c in cells} == {"demo_ext"}
    assert {"id", "image", "python", "cuda", "torch"} <= set(cells[0])
    assert "changed recipes: demo_ext" in proc.stderr


def run_plan_step(repo: Path, workflows: dict, **env: str) -> tuple[dict, str, str]:
    """Run wheels.yml's plan script as Actions does; returns (outputs, summary, log)."""
    _, step = _step(workflows["wheels.yml"]["jobs"]["plan"], "Plan the cells")
    runner_temp = repo / ".runner-temp"
    runner_temp.mkdir(exist_ok=True)
    out, summary = runner_temp / "output", runner_temp / "summary"
    out.write_text("")
    summary.write_text("")
    full_env = {**os.environ, **GIT_ENV, "RUNNER_TEMP": str(runner_temp),
                "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary),
                "PR_CELL_CAP": str(workflows["wheels.yml"]["env"]["PR_CELL_CAP"]),
                "PY": sys.executable, "PUSH_BEFORE": "", "IN_PACKAGE": "", "IN_PYTHON": "",
                "IN_CUDA": "", "IN_TORCH": "", "IN_CAP": "", **env}
    # `shell: bash` runs a step as `bash --noprofile --norc -eo pipefail {0}`.
    script = runner_temp / "plan.sh"
    script.write_text(step["run"])
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                          cwd=repo, env=full_env, capture_output=True, text=True, timeout=120)
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    outputs["rc"] = proc.returncode
    return outputs, summary.read_text(), proc.stdout + proc.stderr


def test_plan_step_push_builds_the_changed_recipe(scratch_repo, workflows):
    repo, add_recipe = scratch_repo
    before = git(repo, "rev-parse", "HEAD")
    add_recipe()
    outputs, summary, log = run_plan_step(repo, workflows, EVENT="push", PUSH_BEFORE=before)
    assert outputs["rc"] == 0, log
    cells = json.loads(outputs["matrix"])["include"]
    assert outputs["count"] == "14" == str(len(cells))
    assert "`demo_ext-3.12-cu130-torch2.9`" in summary
    assert "::warning" not in log


def test_plan_step_pull_request_is_capped_with_a_warning(scratch_repo, workflows):
    repo, add_recipe = scratch_repo
    add_recipe()  # HEAD^1 is the base, as in the merge commit Actions checks out
    outputs, summary, log = run_plan_step(repo, workflows, EVENT="pull_request")
    assert outputs["rc"] == 0, log
    cap = workflows["wheels.yml"]["env"]["PR_CELL_CAP"]
    assert outputs["count"] == str(cap) == str(len(json.loads(outputs["matrix"])["include"]))
    assert f"::warning title=matrix capped::capped: 14 cells planned, building the first {cap}" \
        in log
    assert "**Warning**: capped: 14 cells planned" in summary


def test_plan_step_without_a_recipe_change_plans_nothing(scratch_repo, workflows):
    repo, add_recipe = scratch_repo
    add_recipe()
    before = git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("docs only\n")
    commit(repo, "docs")
    outputs, summary, log = run_plan_step(repo, workflows, EVENT="push", PUSH_BEFORE=before)
    assert outputs["rc"] == 0, log
    assert (outputs["count"], outputs["matrix"]) == ("0", '{"include":[]}')
    assert "No cells to build" in summary


def test_plan_step_push_with_unknown_previous_commit_falls_back_to_head_parent(
        scratch_repo, workflows):
    repo, add_recipe = scratch_repo
    add_recipe()
    outputs, _, log = run_plan_step(repo, workflows, EVENT="push", PUSH_BEFORE="0" * 40)
    assert outputs["rc"] == 0, log
    assert outputs["count"] == "14"
    assert "::warning title=plan::the commit before this push is unknown" in log


def test_plan_step_dispatch_filters(scratch_repo, workflows):
    repo, add_recipe = scratch_repo
    add_recipe()
    outputs, _, log = run_plan_step(repo, workflows, EVENT="workflow_dispatch",
                                    IN_PACKAGE="demo_ext", IN_PYTHON="3.12", IN_CUDA="13.0",
                                    IN_CAP="256")
    assert outputs["rc"] == 0, log
    ids = [c["id"] for c in json.loads(outputs["matrix"])["include"]]
    assert ids == ["demo_ext-3.12-cu130", "demo_ext-3.12-cu130-torch2.9"]


@pytest.mark.parametrize("env,message", [
    ({"IN_CAP": "0"}, "cap must be a whole number from 1 to 256"),           # below the range
    ({"IN_CAP": "300"}, "cap must be a whole number from 1 to 256"),         # GitHub's matrix limit
    ({"IN_PACKAGE": "$(touch pwned)"}, "unknown package(s): $(touch pwned)"),  # stays a string
])
def test_plan_step_dispatch_rejects_bad_inputs(scratch_repo, workflows, env, message):
    repo, add_recipe = scratch_repo
    add_recipe()
    outputs, _, log = run_plan_step(repo, workflows, EVENT="workflow_dispatch", **env)
    assert outputs["rc"] != 0
    assert message in log
    assert "matrix" not in outputs
    assert not (repo / "pwned").exists()


# --------------------------------------------------------------------------- the ledger step


@pytest.fixture
def pages_site(tmp_path):
    """A local web server standing in for the Pages site; returns (site folder, base URL)."""
    site = tmp_path / "site"
    site.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site, f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


def run_ledger_step(workdir: Path, workflows: dict, site_url: str) -> tuple[int, str, str]:
    """Run wheels.yml's ledger step; returns (exit status, log, the ledger it left)."""
    _, step = _step(workflows["wheels.yml"]["jobs"]["publish"], "Fetch the current ledger")
    runner_temp = workdir / ".runner-temp"
    runner_temp.mkdir(exist_ok=True)
    script = runner_temp / "ledger.sh"
    script.write_text(step["run"])
    env = {**os.environ, "RUNNER_TEMP": str(runner_temp), "SITE_URL": site_url,
           "PY": sys.executable, "GITHUB_RUN_ID": "1", "GITHUB_RUN_ATTEMPT": "1",
           "PYTHONPATH": str(ROOT), "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
    ledger = runner_temp / "ledger.json"
    return proc.returncode, proc.stdout + proc.stderr, ledger.read_text() if ledger.exists() else ""


LIVE = '{"schema": 1, "files": {\n"a-1.0-py3-none-any.whl": {}\n}}\n'


def test_ledger_step_takes_the_live_sites_ledger(tmp_path, pages_site, workflows):
    site, url = pages_site
    (site / "ledger.json").write_text(LIVE)
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "ledger.json").write_text('{"schema": 1, "files": {}}\n')
    rc, log, ledger = run_ledger_step(tmp_path, workflows, url)
    assert rc == 0, log
    assert ledger == LIVE  # the live copy wins over the repository's


def test_ledger_step_first_deployment_starts_from_the_repository(tmp_path, pages_site, workflows):
    _, url = pages_site
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "ledger.json").write_text(LIVE)
    rc, log, ledger = run_ledger_step(tmp_path, workflows, url)
    assert rc == 0, log
    assert ledger == LIVE and "first deployment" in log


def test_ledger_step_first_deployment_without_any_ledger_starts_empty(tmp_path, pages_site,
                                                                       workflows):
    _, url = pages_site
    rc, log, ledger = run_ledger_step(tmp_path, workflows, url)
    assert rc == 0, log
    from tools.sitegen.ledger import dump_ledger
    assert json.loads(ledger) == json.loads(dump_ledger({}))  # the ledger module's current schema


def test_ledger_step_refuses_a_site_without_its_ledger(tmp_path, pages_site, workflows):
    site, url = pages_site
    (site / "simple").mkdir()
    (site / "simple" / "index.html").write_text("<html></html>")
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "ledger.json").write_text(LIVE)
    rc, log, _ = run_ledger_step(tmp_path, workflows, url)
    assert rc != 0
    assert "serves an index but no ledger.json" in log


def run_hold_back_step(workdir: Path, workflows: dict) -> tuple[int, str, str]:
    """Run wheels.yml's hold-back step as Actions does; returns (exit status, log, its outputs)."""
    _, step = _step(workflows["wheels.yml"]["jobs"]["publish"], "Hold back wheels already published")
    runner_temp = workdir / ".runner-temp"
    script = runner_temp / "hold-back.sh"
    script.write_text(step["run"])
    output = runner_temp / "output"
    output.write_text("")
    env = {**os.environ, "RUNNER_TEMP": str(runner_temp), "GITHUB_OUTPUT": str(output),
           "PY": sys.executable, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr, output.read_text()


def test_hold_back_step_publishes_only_new_names_and_warns_about_rebuilds(tmp_path, workflows):
    from tools.sitegen.generate import build_index
    from wheelfactory import make_wheel

    runner_temp = tmp_path / ".runner-temp"
    runner_temp.mkdir()
    published = tmp_path / "published"
    make_wheel(published, "demo", "1.0", tag="py3-none-any")
    build_index(wheels_dir=published, output_dir=tmp_path / "site", base_url="https://h/1",
                ledger_path=runner_temp / "ledger.json", init_ledger=True)
    wheelhouse = tmp_path / "wheelhouse"
    rebuilt = make_wheel(wheelhouse, "demo", "1.0", tag="py3-none-any", requires_dist=["numpy"])
    rc, log, outputs = run_hold_back_step(tmp_path, workflows)
    assert rc == 0, log
    assert outputs == "new=0\n"
    assert f"::warning title=not published::{rebuilt.name}: already published with other bytes" in log
    new = make_wheel(wheelhouse, "demo", "1.0", tag="py3-none-any", build_tag="1", requires_dist=["numpy"])
    rc, log, outputs = run_hold_back_step(tmp_path, workflows)
    assert rc == 0, log
    assert outputs == "new=1\n" and "::warning" not in log
    assert [p.name for p in wheelhouse.iterdir()] == [new.name]


# --------------------------------------------------------------------------- the refresh workflow


def test_refresh_runs_daily_and_by_hand_and_only_on_main(workflows):
    wf = workflows["refresh.yml"]
    assert set(wf["on"]) == {"schedule", "workflow_dispatch"}  # never for a pull request
    assert len(wf["on"]["schedule"]) == 1
    assert wf["concurrency"] == {"group": "registry-refresh", "cancel-in-progress": False}
    (job_id, job), = wf["jobs"].items()
    assert job["permissions"] == {"contents": "write", "pull-requests": "write",
                                  "actions": "write"}
    _, read = _step(job, "Read the registry")
    _, pr = _step(job, "Open or update the pull request")
    assert read["run"].startswith(".venv/bin/python -m tools.refresh --write --summary ")
    assert "env" not in read  # the registry is read without the token
    assert pr["env"] == {"GH_TOKEN": "${{ github.token }}"}


FAKE_GH = """#!/bin/bash
# Stands in for the GitHub CLI: logs each call; `pr list` answers $FAKE_PR.
echo "gh $*" >> "$GH_LOG"
if [[ "$1 $2" == "pr list" ]]; then echo "${FAKE_PR:-}"; fi
"""


@pytest.fixture
def refresh_repo(tmp_path):
    """A clone of a bare 'origin' holding a recipe, and a fake gh on PATH; returns a runner."""
    origin, work, bin_dir = tmp_path / "origin.git", tmp_path / "work", tmp_path / "bin"
    git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(origin))
    git(tmp_path, "clone", "--quiet", str(origin), str(work))
    (work / "recipes" / "causal_conv1d").mkdir(parents=True)
    (work / "recipes" / "table.yaml").write_text("schema: 1\n")
    (work / "recipes" / "causal_conv1d" / "recipe.yaml").write_text('version: "1.6.1"\n')
    commit(work, "base")
    git(work, "push", "--quiet", "origin", "HEAD:refs/heads/main")
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(FAKE_GH)
    (bin_dir / "gh").chmod(0o755)

    def run(workflows, *, pr: str = "") -> tuple[int, str, list[str]]:
        """Run the pull request step as Actions does: (exit status, summary, gh calls)."""
        wf = workflows["refresh.yml"]
        _, step = _step(wf["jobs"]["refresh"], "Open or update the pull request")
        runner_temp = tmp_path / ".runner-temp"
        runner_temp.mkdir(exist_ok=True)
        (runner_temp / "summary.md").write_text("## Registry refresh\n\n- causal_conv1d: 1.6.1 -> 1.7.0\n")
        script, log, summary = runner_temp / "pr.sh", runner_temp / "gh.log", runner_temp / "step"
        script.write_text(step["run"])
        for f in (log, summary):
            f.write_text("")
        env = {**os.environ, **GIT_ENV, "PATH": f"{bin_dir}:{os.environ['PATH']}",
               "RUNNER_TEMP": str(runner_temp), "GITHUB_STEP_SUMMARY": str(summary),
               "GH_LOG": str(log), "FAKE_PR": pr, "GH_TOKEN": "not-a-token",
               "BRANCH": wf["env"]["BRANCH"], "BUILD_CAP": str(wf["env"]["BUILD_CAP"])}
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                              cwd=work, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.returncode, summary.read_text(), log.read_text().splitlines()
    return work, origin, run


def test_refresh_with_nothing_new_opens_nothing(refresh_repo, workflows):
    _, origin, run = refresh_repo
    _, summary, calls = run(workflows)
    assert calls == []
    assert "Nothing new in the registry" in summary
    assert git(origin, "branch", "--list", "--format=%(refname:short)") == "main"


def test_refresh_opens_one_pull_request_and_dispatches_its_checks(refresh_repo, workflows):
    work, origin, run = refresh_repo
    branch = workflows["refresh.yml"]["env"]["BRANCH"]
    (work / "recipes" / "causal_conv1d" / "recipe.yaml").write_text('version: "1.7.0"\n')
    _, summary, calls = run(workflows)
    pushed = git(origin, "show", f"{branch}:recipes/causal_conv1d/recipe.yaml")
    assert pushed == 'version: "1.7.0"'
    assert calls[0] == "gh auth setup-git"
    assert calls[1].startswith(f"gh pr list --head {branch} --base main --state open")
    assert calls[2].startswith(f"gh pr create --base main --head {branch} --title ")
    assert calls[3:] == [
        f"gh workflow run checks.yml --ref {branch}",
        f"gh workflow run wheels.yml --ref {branch} -f package=causal_conv1d -f cap=8 "
        "-f publish=false"]
    assert "Dispatched the checks and the builds of: causal_conv1d" in summary


def test_refresh_with_the_same_change_updates_the_pull_request_only(refresh_repo, workflows):
    work, origin, run = refresh_repo
    branch = workflows["refresh.yml"]["env"]["BRANCH"]
    recipe = work / "recipes" / "causal_conv1d" / "recipe.yaml"
    recipe.write_text('version: "1.7.0"\n')
    run(workflows)
    first = git(origin, "rev-parse", branch)
    # The next day: a fresh checkout of main, the same change, the pull request open (#7).
    git(work, "switch", "--quiet", "main")
    recipe.write_text('version: "1.7.0"\n')
    _, summary, calls = run(workflows, pr="7")
    assert git(origin, "rev-parse", branch) == first  # not pushed again
    assert [c.split(" --title")[0] for c in calls[2:]] == ["gh pr edit 7"]  # no new dispatch
    assert "no new checks dispatched" in summary
