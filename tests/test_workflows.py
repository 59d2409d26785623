"""The GitHub workflows: linted for real, their plan step run for real, their safety rules checked.

The plan job's batch step (taken from wheels.yml) runs in a scratch git repository holding a copy
of tools/ and a test recipe, so a change to the script or the planner is caught here. The
release's commands themselves are tested in tests/test_release.py, tests/test_ghapi.py and
tests/test_release_chain.py against a stand-in of GitHub's API; here the hold-back, release-name,
index and disk steps run against stand-ins for gh, df, sudo and systemctl, and the refresh step
pushes to a bare repository whose pre-receive hook applies GitHub's rule against a workflow token
changing .github/workflows/.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import MINI_TABLE
from tools import ROOT
from tools.devtools.workflow_audit import workflow_files

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
    # the release job attests what it releases (one attestation of every wheel of the run); the
    # kernel store's job writes the store's release (no job that runs a package's build may)
    assert writers == [("refresh.yml:refresh", ["actions", "contents", "pull-requests"]),
                       ("wheels.yml:kernel_store", ["contents"]),
                       ("wheels.yml:release", ["attestations", "contents", "id-token"]),
                       ("wheels.yml:publish", ["id-token", "pages"])]


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
            if local := re.fullmatch(r"\s*uses: \./\.github/workflows/([\w.-]+\.yml)", line):
                # a reusable workflow of this repository, at this commit: nothing to pin
                assert (WORKFLOWS / local.group(1)).is_file(), f"{path.name}:{n}"
            elif re.match(r"\s*(- )?uses:", line):
                assert VERSION_COMMENT.search(line), f"{path.name}:{n}: add a `# vX.Y.Z` comment"


def test_no_expressions_inside_run_scripts(workflows):
    # Inputs, branch names, matrix values and step outputs reach scripts through `env:` only.
    for where, _job, step in _steps(workflows):
        assert "${{" not in step.get("run", ""), f"{where}: pass the value through env:"


def test_no_expression_lost_a_brace():
    """``${ github.token }`` is a plain string to Actions (an expression is ``${{ ... }}``): a
    brace lost in an edit would hand a script the words instead of the value."""
    contexts = r"(github|env|inputs|matrix|steps|needs|runner|vars|secrets|job|strategy)\."
    for path in WORKFLOWS.glob("*.yml"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            assert not re.search(r"\$\{\s*" + contexts, line), f"{path.name}:{n}: {line.strip()}"
            assert not re.search(contexts + r"[\w.]*\s*\}(?!\})", line) or "${{" in line, \
                f"{path.name}:{n}: {line.strip()}"


def test_checkouts_keep_no_credentials(workflows):
    for where, _job, step in _steps(workflows):
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, where


def test_no_secrets_and_the_token_only_where_publishing(workflows):
    for path in WORKFLOWS.glob("*.yml"):
        assert not re.search(r"\$\{\{[^}]*\bsecrets\b", path.read_text()), path.name
    for where, job in _jobs(workflows):
        if "github.token" in yaml.safe_dump(job):
            # besides the publishing jobs and the kernel store's, the cells read their shard
            # caches from this run's artifacts by id and the kernel store's entries, the shards
            # their entries of the store, and the plan reads the Pages site's address (where the
            # live ledger is) and lists the store, each with a token that may only read
            assert where in ("wheels.yml:release", "wheels.yml:publish", "refresh.yml:refresh",
                             "wheels-linux-cell.yml:build", "wheels-windows-cell.yml:build",
                             "wheels-linux-shard.yml:compile",
                             "wheels-windows-shard.yml:compile",
                             "wheels.yml:plan", "wheels.yml:kernel_store"), where
            if where.endswith(":build"):
                assert job["permissions"] == {"contents": "read", "actions": "read"}, where
            if where.endswith(":compile"):
                assert job["permissions"] == {"contents": "read"}, where
            if where == "wheels.yml:kernel_store":
                assert job["permissions"] == {"contents": "write", "actions": "read"}
            if where == "wheels.yml:plan":
                assert job["permissions"] == {"contents": "read", "pages": "read"}


def test_every_job_has_a_timeout(workflows):
    for where, job in _jobs(workflows):
        if "uses" in job:
            # GitHub allows no timeout on a job that calls a reusable workflow: the called
            # workflow's jobs have theirs (checked here too, as jobs of their own file)
            assert "timeout-minutes" not in job and job["uses"].startswith("./"), where
            continue
        assert isinstance(job.get("timeout-minutes"), int), where


#: Each platform's stage suffix (tools.plan.stages.matrix_key, tools.core.variant.PLATFORM_PART)
#: and the reusable workflows its shard and cell jobs call.
PLATFORM_JOBS = {
    "": ("wheels-linux-shard.yml", "wheels-linux-cell.yml"),
    "_aarch64": ("wheels-linux-shard.yml", "wheels-linux-cell.yml"),
    "_win": ("wheels-windows-shard.yml", "wheels-windows-cell.yml"),
}
CELL_FILES = ("wheels-linux-cell.yml", "wheels-windows-cell.yml")
SHARD_FILES = ("wheels-linux-shard.yml", "wheels-windows-shard.yml")


def _entry(field: str) -> str:
    """How a called job reads a field of its matrix entry (the input `job`, the entry as JSON)."""
    return f"${{{{ fromJSON(inputs.job).{field} }}}}"


def _called(workflows: dict, job: dict) -> tuple[str, dict]:
    """The file a calling job's `uses:` names, and that reusable workflow's one job."""
    name = job["uses"].removeprefix("./.github/workflows/")
    (called,) = workflows[name]["jobs"].values()
    return name, called


def _stage_keys() -> list[str]:
    """Every matrix the planner prints (``--format github``), by the planner's own naming."""
    from tools.core.variant import PLATFORM_PART
    from tools.plan.stages import CELL_MATRICES, matrix_key
    names = ["shards"] + [f"cells{i}" for i in range(1, CELL_MATRICES + 1)]
    return [matrix_key(n, p) for p in PLATFORM_PART for n in names]


def test_every_stage_the_planner_prints_is_built_by_a_job_of_its_platform(workflows):
    """Each of the batch's matrices is a plan output (with its count) and the matrix of exactly
    one build job, which calls its platform's reusable workflow with the entry (its id and
    runner; the rest is in the plan artifact)."""
    wheels = workflows["wheels.yml"]
    jobs, outputs = wheels["jobs"], wheels["jobs"]["plan"]["outputs"]
    keys = _stage_keys()
    assert keys == [k + s for s in PLATFORM_JOBS for k in ("shards", "cells1", "cells2")]
    assert set(outputs) == {"count", "pending"} | set(keys) | {f"{k}_count" for k in keys}
    for key in keys:
        assert outputs[key] == f"${{{{ steps.batch.outputs.{key} }}}}"
        assert outputs[f"{key}_count"] == f"${{{{ steps.batch.outputs.{key}_count }}}}"
        matrix = f"${{{{ fromJSON(needs.plan.outputs.{key}) }}}}"
        users = {name for name, job in jobs.items()
                 if job.get("strategy", {}).get("matrix") == matrix}
        suffix = key[key.index("_"):] if "_" in key else ""
        shard_file, cell_file = PLATFORM_JOBS[suffix]
        build = key  # the build job is named after its stage
        assert build in users, key
        assert users == {build}, key
        job = jobs[build]
        assert job["uses"] == "./.github/workflows/" + (
            shard_file if key.startswith("shards") else cell_file)
        assert job["with"] == {"job": "${{ toJSON(matrix) }}"}    # the whole entry, as JSON
        assert f"needs.plan.outputs.{key}_count != '0'" in job["if"]  # none planned: skipped
        assert job["strategy"]["fail-fast"] is False and job["strategy"]["max-parallel"] >= 1
        # a cell reads its shard caches from this run's artifacts, listed by id
        assert job["permissions"] == ({"contents": "read"} if key.startswith("shards")
                                      else {"contents": "read", "actions": "read"})
        assert job["name"] == ("${{ matrix.id }}" if key.startswith("shards")
                               else "build-${{ matrix.id }}")  # the nox session, for a cell


def test_reusable_workflows_are_called_only_by_wheels_yml(workflows):
    called = {n for n, wf in workflows.items() if "workflow_call" in (wf["on"] or {})}
    assert called == set(SHARD_FILES) | set(CELL_FILES)
    for name in called:
        wf = workflows[name]
        assert set(wf["on"]) == {"workflow_call"}        # never run on their own
        assert wf["on"]["workflow_call"]["inputs"] == {"job": {
            "description": wf["on"]["workflow_call"]["inputs"]["job"]["description"],
            "type": "string", "required": True}}
        (job,) = wf["jobs"].values()
        assert job["runs-on"] == _entry("runner")         # the runner the plan was made for
        assert job["permissions"] == ({"contents": "read", "actions": "read"}
                                      if name in CELL_FILES else {"contents": "read"})
        # the entry carries the id; the rest comes from this run's plan artifact, by that id
        assert job["env"]["JOB_ID"] == _entry("id")
        _, read = _step(job, "Read the job's entry from the plan")
        assert "-m tools.release entry" in read["run"] and '>> "$GITHUB_ENV"' in read["run"]
        assert _step(job, "Download this run's plan")[1]["with"]["name"] == "batch-plan"
        # the caller's env doesn't reach a called workflow: the same Python as wheels.yml's
        assert wf["env"]["PYTHON_VERSION"] == workflows["wheels.yml"]["env"]["PYTHON_VERSION"]
        assert wf["defaults"] == {"run": {"shell": "bash"}}
    callers = {(name, job["uses"]) for name, wf in workflows.items()
               for job in wf["jobs"].values() if "uses" in job}
    assert {name for name, _ in callers} == {"wheels.yml"}
    assert {uses for _, uses in callers} == {f"./.github/workflows/{n}" for n in called}


@pytest.mark.parametrize("suffix", PLATFORM_JOBS)
def test_the_two_cell_jobs_are_one_job_with_two_matrices(workflows, suffix):
    jobs = workflows["wheels.yml"]["jobs"]
    one, two = jobs[f"cells1{suffix}"], jobs[f"cells2{suffix}"]
    # cells1: the cells that read no shard, at once; cells2: the others, after every shard of
    # the platform
    assert one["needs"] == "plan" and one["if"] == f"needs.plan.outputs.cells1{suffix}_count != '0'"
    assert two["needs"] == ["plan", f"shards{suffix}"]
    # whether the shards passed or not (a cell compiles what no shard cache holds), never when
    # the run was cancelled or the plan failed; no cells: skipped, not failed
    assert " ".join(two["if"].split()) == ("!cancelled() && needs.plan.result == 'success' "
                                           f"&& needs.plan.outputs.cells2{suffix}_count != '0'")
    same = {k: v for k, v in one.items() if k not in ("needs", "if")}
    assert yaml.safe_dump(same).replace(f"cells1{suffix}", f"cells2{suffix}") == \
        yaml.safe_dump({k: v for k, v in two.items() if k not in ("needs", "if")})
    # the platforms' jobs differ only in their stages and the kind of job they call
    x86, mine = ({k: copy.deepcopy(v) for k, v in job.items() if k not in ("needs", "if", "uses")}
                 for job in (jobs["cells1"], one))
    del x86["strategy"]["max-parallel"], mine["strategy"]["max-parallel"]
    assert yaml.safe_dump(x86).replace("cells1", f"cells1{suffix}") == yaml.safe_dump(mine)


def test_linux_cells_run_the_local_nox_session_in_their_builder_image(workflows):
    """x86_64 and aarch64 cells alike: the entry's runner and image, the container backend."""
    jobs = workflows["wheels.yml"]["jobs"]
    assert {jobs[k]["uses"] for k in ("cells1", "cells2", "cells1_aarch64", "cells2_aarch64")} \
        == {"./.github/workflows/wheels-linux-cell.yml"}
    job = workflows["wheels-linux-cell.yml"]["jobs"]["build"]
    start, start_step = _step(job, "Record the job's start")
    free, _ = _step(job, "Free disk space")
    install, install_step = _step(job, "Install the project's build tools")
    entry, _ = _step(job, "Read the job's entry from the plan")
    pull, pull_step = _step(job, "Pull the builder image")
    shards, shards_step = _step(job, "Download the group's shard caches")
    needed, needed_step = _step(job, "Download the published wheels the cells need")
    build, build_step = _step(job, "Build the cell")
    assert start == 0 and start_step["run"] == 'echo "JOB_START=$(date +%s)" >> "$GITHUB_ENV"'
    assert free < install < entry < pull < shards < needed < build
    # the build tools, not the test tools (zizmor has no aarch64 wheel)
    assert install_step["run"] == "make setup EXTRAS=farm"
    assert "for attempt in" in pull_step["run"]
    assert 'docker pull --quiet "$IMAGE"' in pull_step["run"]
    # the cell's shard caches, each by name from this run's artifacts listed page by page (a
    # pattern's listing can be cut); none for a cell that reads no shard
    assert shards_step["if"] == "env.SHARDS != ''"
    assert shards_step["env"] == {"GH_TOKEN": "${{ github.token }}",
                                  "GH_REPO": "${{ github.repository }}"}
    argv = shlex.split(shards_step["run"])
    assert argv[1:4] == ["-m", "tools.release", "artifacts"]
    assert dict(zip(argv[4::2], argv[5::2]))["--what"] == "shards"
    shard_dir = dict(zip(argv[4::2], argv[5::2]))["--dir"]
    (fetch,) = [ln for ln in needed_step["run"].splitlines() if "fetch-needed" in ln]
    assert "for cell in $CELLS; do" in needed_step["run"] and '--id "$cell"' in fetch
    needed_dir = dict(zip(shlex.split(fetch)[4::2], shlex.split(fetch)[5::2]))["--dir"]
    # What the step runs, not how it is spelled: nox's session for the cell, on the container
    # backend with docker (what the runner has), reading the shard caches, and nothing else.
    (line,) = [ln for ln in build_step["run"].splitlines() if "nox" in ln]
    argv = shlex.split(line.split("||")[0])
    # the build stops itself at the budget left, before the step's and the job's limits
    assert argv[:3] == ["timeout", "--kill-after=5m", "${left}s"]
    argv = argv[3:]
    assert Path(argv[0]).name == "nox"
    assert argv[1:3] == ["-s", "build-$cell"]
    assert "for cell in $CELLS; do" in build_step["run"]
    posargs = argv[argv.index("--") + 1:]
    assert posargs[0] == "${backend[@]}"
    options = dict(zip(posargs[1::2], posargs[2::2]))
    assert options == {"--shard-caches": shard_dir, "--wheelhouse": needed_dir}
    # the container backend unless the repository variable says host (the chain under act:
    # tools/devtools/actchain.py), which skips the steps that prepare docker
    assert "backend=(--backend container --engine docker)\n" in build_step["run"]
    assert job["env"]["BACKEND"] == "${{ vars.CUWHEELS_CELL_BACKEND || 'container' }}"
    for name in ("Free disk space", "Pull the builder image"):
        assert _step(job, name)[1]["if"] == "env.BACKEND == 'container'"
    assert _step(job, "Stop the builder container")[1]["if"] == \
        "always() && env.BACKEND == 'container'"
    assert build_step["timeout-minutes"] < job["timeout-minutes"]  # the report still uploads
    _check_cell_uploads(job, build)
    disk, disk_step = _step(job, "Disk used by this job")
    assert disk == len(job["steps"]) - 1 and disk_step["if"] == "always()"
    assert _step(job, "Stop the builder container")[0] > build
    # a Linux shard sets up the same way, in the same builder image
    shard = workflows["wheels-linux-shard.yml"]["jobs"]["compile"]
    for name in ("Record the job's start", "Free disk space", "Check out", "Set up Python",
                 "Install the project's build tools", "Download this run's plan",
                 "Read the job's entry from the plan", "Pull the builder image"):
        assert _step(shard, name)[1] == _step(job, name)[1], name


def _check_cell_uploads(job: dict, build: int) -> None:
    """A cell job's reports and wheels (also after a failed build: the cells that passed keep
    theirs), named by the job's id as the release and publish jobs look for them (report-*,
    wheels-*), the reports in their cells' folders."""
    uploads = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert {u["with"]["name"] for u in uploads} == {"report-${{ env.JOB_ID }}",
                                                    "wheels-${{ env.JOB_ID }}"}
    report, report_step = _step(job, "Upload the build report")
    assert report > build and report_step["if"] == "always()"
    assert report_step["with"]["path"] == "build-cells/*/report.json"
    _, wheels_step = _step(job, "Upload the wheel")
    assert wheels_step["with"]["path"] == "wheelhouse/*.whl" and wheels_step["if"] == "always()"
    assert wheels_step["with"]["if-no-files-found"] == "warn"
    # a re-run's upload replaces the earlier attempt's artifact of the same name
    assert all(u["with"]["overwrite"] is True for u in uploads)


WINDOWS_SETUP = ("Record the job's start", "Check out", "Set up Python",
                 "Keep Git's link from shadowing MSVC's link.exe", "Set up MSVC",
                 "Install the project's tools", "Download this run's plan",
                 "Read the job's entry from the plan", "Install the CUDA toolkit")


def test_windows_cells_build_natively_with_msvc_and_the_cuda_toolkit(workflows):
    jobs = workflows["wheels.yml"]["jobs"]
    assert {jobs[k]["uses"] for k in ("cells1_win", "cells2_win")} == \
        {"./.github/workflows/wheels-windows-cell.yml"}
    assert jobs["shards_win"]["uses"] == "./.github/workflows/wheels-windows-shard.yml"
    cell = workflows["wheels-windows-cell.yml"]["jobs"]["build"]
    shard = workflows["wheels-windows-shard.yml"]["jobs"]["compile"]
    for job in (cell, shard):
        # no container: nothing runs docker, no job container, no builder image
        assert "container" not in job
        assert not any("docker" in s.get("run", "") for s in job["steps"])
        # the entry (CELL_CUDA among it) is read before the CUDA installer needs it
        _, read = _step(job, "Read the job's entry from the plan")
        assert read["run"].startswith(".venv/Scripts/python -m tools.release entry")
        # the same setup in both, in this order, before anything is built
        assert [s["name"].split(" (")[0] for s in job["steps"][:len(WINDOWS_SETUP)]] == \
            list(WINDOWS_SETUP)
    assert cell["steps"][:len(WINDOWS_SETUP)] == shard["steps"][:len(WINDOWS_SETUP)]
    msvc, msvc_step = _step(cell, "Set up MSVC")
    cuda, cuda_step = _step(cell, "Install the CUDA toolkit")
    build, build_step = _step(cell, "Build the cell")
    assert msvc < cuda < build and "vcvars64.bat" in msvc_step["run"]
    assert "network_installers" in cuda_step["run"] and ">> \"$GITHUB_PATH\"" in cuda_step["run"]
    _, link = _step(cell, "Keep Git's link")
    assert link["run"] == "rm -f /usr/bin/link.exe"
    # the command the cell's nox session runs, on the host backend, reading the shard caches
    (line,) = [ln for ln in build_step["run"].splitlines() if "tools.build" in ln]
    argv = shlex.split(line.split("||")[0])
    assert argv[:3] == ["timeout", "--kill-after=5m", "${left}s"]
    _, shards_step = _step(cell, "Download the group's shard caches")
    assert argv[3:] == [".venv/Scripts/python", "-m", "tools.build", "$cell", "--backend",
                        "host", "--shard-caches", "shard-caches", "--wheelhouse", "needed-wheels"]
    assert shards_step["if"] == "env.SHARDS != ''"
    _check_cell_uploads(cell, build)
    # the steps a Windows cell shares with a Linux one are the same steps
    linux = workflows["wheels-linux-cell.yml"]["jobs"]["build"]
    for name in ("Restore the compiler cache", "Save the compiler cache",
                 "Upload the build report", "Upload the wheel"):
        assert _step(cell, name)[1] == _step(linux, name)[1], name
    # and those that run the project's commands differ only in the venv's layout
    for name in ("Download the group's shard caches", "Download the published wheels",
                 "Trim the compiler cache"):
        assert json.dumps(_step(cell, name)[1]).replace(".venv/Scripts/python", "PY").replace(
            ".venv/Scripts/ccache.exe", "CCACHE") == json.dumps(_step(linux, name)[1]).replace(
            ".venv/bin/python", "PY").replace(".venv/bin/ccache", "CCACHE"), name


def test_the_windows_cuda_installer_knows_every_cuda_the_table_has_for_windows(workflows):
    from tools.plan.table import load_table
    table = load_table()
    wanted = {c for row in table.torch.values() for p, on in row.platforms.items()
              if p == "win_amd64" for c in on.cuda}
    _, step = _step(workflows["wheels-windows-cell.yml"]["jobs"]["build"], "Install the CUDA toolkit")
    known = dict(re.findall(r"^\s*(\d+\.\d+)\) full=(\d+\.\d+\.\d+) ;;$", step["run"], re.M))
    assert wanted and wanted <= set(known), wanted - set(known)
    assert all(full.startswith(cuda + ".") for cuda, full in known.items())


#: The standard library's POSIX-only modules: a Windows Python has none of them.
POSIX_ONLY = ("fcntl", "resource", "pwd", "grp", "termios", "pty", "tty")
#: Attributes of os and signal that a Windows Python lacks, which a module could read at import
#: (os.O_DIRECTORY did, in tools.pipeline.source).
POSIX_ONLY_OS = ("O_DIRECTORY", "O_NOFOLLOW", "O_CLOEXEC", "O_NONBLOCK", "wait4", "killpg",
                 "getloadavg", "sysconf", "sched_getaffinity", "fork", "getuid", "geteuid",
                 "setsid", "WNOHANG", "getpgid", "fchown", "lchown", "uname", "mkfifo")
POSIX_ONLY_SIGNALS = ("SIGKILL", "SIGHUP", "SIGQUIT", "SIGALRM", "SIGCHLD", "SIGUSR1")
#: Run with a module's name: blocks the POSIX-only modules, takes the POSIX-only attributes away
#: once the standard library modules that read them at import are in (as a Windows Python has
#: them), then imports the module.
AS_ON_WINDOWS = f"""
import importlib, sys
for name in {POSIX_ONLY!r}:
    sys.modules[name] = None
import asyncio, concurrent.futures, ctypes, os, multiprocessing, shutil, signal, subprocess
import tempfile, threading
for name in {POSIX_ONLY_OS!r}:
    if hasattr(os, name):
        delattr(os, name)
for name in {POSIX_ONLY_SIGNALS!r}:
    if hasattr(signal, name):
        delattr(signal, name)
importlib.import_module(sys.argv[1])
"""


def test_the_tools_windows_jobs_run_import_without_posix_only_modules(workflows):
    """What the Windows jobs run (tools.build, tools.shard, the kernel check) and the plan and
    index tools import where the POSIX-only modules and os functions are missing, as on
    Windows, so wheels.yml plans win_amd64 like every platform: no opt-in list is left."""
    assert "OPT_IN_PLATFORMS" not in workflows["wheels.yml"]["env"]
    for module in ("tools.build", "tools.shard", "tools.kernelcheck", "tools.index",
                   "tools.matrix"):
        proc = subprocess.run([sys.executable, "-c", AS_ON_WINDOWS, module], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (module, proc.stderr[-2000:])
    # the check holds: what it blocks fails to import, what it takes away is gone
    for line, missing in (("import fcntl", "fcntl"), ("os.O_DIRECTORY", "O_DIRECTORY")):
        code = AS_ON_WINDOWS.replace("importlib.import_module(sys.argv[1])", line)
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode != 0 and missing in proc.stderr, line


FAKE_VSWHERE = """#!/bin/bash
printf '%s\\r\\n' "$FAKE_VS"
"""
#: Stands in for cmd.exe running the step's batch file: the environment before and after
#: vcvars64.bat (a variable changed, one added, one the same, PATH-like ones with repeats).
FAKE_CMD = r"""#!/bin/bash
bat="$3"
grep -o '@call "[^"]*"' "$bat" | sed 's/^@call //; s/"//g' > "$VCVARS_SEEN"
if [[ -n "$VCVARS_FAILS" ]]; then exit 1; fi
printf 'HOME=C:\\Users\\r\r\nPath=C:\\Windows;C:\\Git\\usr\\bin\r\nLIB=\r\n'
printf -- '--vcvars--\r\n--vcvars--\r\n'
printf 'HOME=C:\\Users\\r\r\nPath=C:\\VS\\bin;C:\\Windows;C:\\Git\\usr\\bin;C:\\VS\\bin\r\n'
printf 'LIB=C:\\VS\\lib;C:\\SDK\\lib;C:\\VS\\lib\r\nVCToolsInstallDir=C:\\VS\\Tools\\\r\n'
"""


@pytest.mark.parametrize("fails", (False, True))
def test_the_msvc_step_exports_what_vcvars64_set(tmp_path, workflows, fails):
    bin_dir = tmp_path / "bin"
    _executable(bin_dir / "vswhere", FAKE_VSWHERE)
    _executable(bin_dir / "cmd.exe", FAKE_CMD)
    _executable(bin_dir / "cygpath", '#!/bin/bash\necho "$2"\n')
    env_file = tmp_path / "github-env"
    env_file.write_text("")
    rc, log, _ = run_step(workflows, "build", "Set up MSVC", tmp_path, bin_dir,
                          workflow="wheels-windows-cell.yml", VSWHERE=str(bin_dir / "vswhere"),
                          FAKE_VS=r"C:\VS 2022", VCVARS_SEEN=str(tmp_path / "seen"),
                          VCVARS_FAILS="1" if fails else "", GITHUB_ENV=str(env_file))
    assert (tmp_path / "seen").read_text().strip() == \
        r"C:\VS 2022\VC\Auxiliary\Build\vcvars64.bat"
    if fails:
        assert rc != 0 and env_file.read_text() == ""
        return
    assert rc == 0, log
    # what changed, without repeated entries; nothing vcvars left as it was
    assert env_file.read_text().splitlines() == [
        r"Path=C:\VS\bin;C:\Windows;C:\Git\usr\bin", r"LIB=C:\VS\lib;C:\SDK\lib",
        "VCToolsInstallDir=C:\\VS\\Tools\\"]


def test_the_msvc_step_stops_without_visual_studio(tmp_path, workflows):
    bin_dir = tmp_path / "bin"
    _executable(bin_dir / "vswhere", "#!/bin/bash\n")
    rc, log, _ = run_step(workflows, "build", "Set up MSVC", tmp_path, bin_dir,
                          workflow="wheels-windows-cell.yml", VSWHERE=str(bin_dir / "vswhere"))
    assert rc == 1
    assert "::error title=msvc::vswhere found no Visual Studio with the x64 C++ tools" in log


FAKE_CURL = """#!/bin/bash
while [[ $# -gt 0 ]]; do
  case "$1" in --output) out="$2"; shift 2 ;; --retry|--retry-delay) shift 2 ;; -*) shift ;;
    *) echo "$1" > "$CURL_SEEN"; shift ;; esac
done
printf '#!/bin/bash\\necho "$*" > "$INSTALLER_SEEN"\\nmkdir -p "$CUDA_ROOT/bin"\\n' > "$out"
printf 'printf "#!/bin/bash\\\\necho nvcc 12.8\\\\n" > "$CUDA_ROOT/bin/nvcc.exe"\\n' >> "$out"
printf 'chmod +x "$CUDA_ROOT/bin/nvcc.exe"\\n' >> "$out"
chmod +x "$out"
"""


def test_the_cuda_step_installs_the_cells_toolkit_and_puts_it_on_path(tmp_path, workflows):
    bin_dir = tmp_path / "bin"
    _executable(bin_dir / "curl", FAKE_CURL)
    _executable(bin_dir / "cygpath", '#!/bin/bash\necho "$CUDA_ROOT"\n')
    env_file, path_file = tmp_path / "github-env", tmp_path / "github-path"
    env_file.write_text("")
    path_file.write_text("")
    seen = {k: tmp_path / k for k in ("CURL_SEEN", "INSTALLER_SEEN")}
    rc, log, _ = run_step(workflows, "build", "Install the CUDA toolkit", tmp_path, bin_dir,
                          workflow="wheels-windows-cell.yml", CELL_CUDA="12.8",
                          CUDA_ROOT=str(tmp_path / "cuda"), GITHUB_ENV=str(env_file),
                          GITHUB_PATH=str(path_file), **{k: str(v) for k, v in seen.items()})
    assert rc == 0, log
    assert seen["CURL_SEEN"].read_text().strip() == (
        "https://developer.download.nvidia.com/compute/cuda/12.8.1/network_installers/"
        "cuda_12.8.1_windows_network.exe")
    assert seen["INSTALLER_SEEN"].read_text().strip() == "-s"
    home = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v12.8"
    assert env_file.read_text().splitlines() == [f"CUDA_PATH={home}", f"CUDA_HOME={home}"]
    assert path_file.read_text().splitlines() == [home + "\\bin"]
    # a CUDA the step has no installer for stops it, saying where to add it
    rc, log, _ = run_step(workflows, "build", "Install the CUDA toolkit", tmp_path, bin_dir,
                          workflow="wheels-windows-cell.yml", CELL_CUDA="10.2")
    assert rc == 1 and "no installer version is known for CUDA 10.2" in log


CACHE_KEY = ("ccache-${{ matrix.package }}-cu${{ matrix.cuda }}-torch${{ matrix.torch }}"
             "-py${{ matrix.python }}-")


@pytest.mark.parametrize("workflow", CELL_FILES)
def test_compiler_cache_is_restored_always_and_saved_only_from_main(workflows, workflow):
    job = workflows[workflow]["jobs"]["build"]
    restore, restore_step = _step(job, "Restore the compiler cache")
    build, build_step = _step(job, "Build the cell")
    save, save_step = _step(job, "Save the compiler cache")
    assert restore < build < save
    if workflow == "wheels-linux-cell.yml":
        stop, stop_step = _step(job, "Stop the builder container")
        # (a host build, the chain under act, has no builder container)
        assert build < stop < save and stop_step["if"] == "always() && env.BACKEND == 'container'"
    assert restore_step["uses"].startswith("actions/cache/restore@")
    assert save_step["uses"].startswith("actions/cache/save@")
    assert restore_step["uses"].split("@")[1] == save_step["uses"].split("@")[1]
    assert "if" not in restore_step                       # pull requests read it too
    # only trusted runs write it, and also after a failed or stopped build (that is the point);
    # a cell that reads shards or the kernel store doesn't: its kernels are their objects
    assert save_step["if"].startswith("always() && ")
    assert all(guard in save_step["if"] for guard in WRITE_GUARDS)
    assert save_step["if"].endswith("&& env.SHARDS == '' && env.STORE_KEY == ''")
    # the directory tools.pipeline.ccache uses by default (the container backend mounts it)
    from tools.pipeline.ccache import cache_dir
    path = restore_step["with"]["path"]
    assert path == save_step["with"]["path"] and Path(path).expanduser() == cache_dir({})
    # this cell's newest cache first, then another Python's of the same package, CUDA and torch
    # (and platform): the planner's prefix (tools.plan.stages ccache_prefix), from the entry
    from tools.releasing.steps import ENV_FIELDS
    assert ENV_FIELDS["cell"]["ccache_prefix"] == "COMPILER_CACHE_PREFIX"
    assert ENV_FIELDS["cell"]["python"] == "CELL_PYTHON"
    # trimmed to the job's share of the repository's cache just before it is saved, under the
    # same conditions, with the size in ccache's units (a bare number would be gigabytes)
    trim, trim_step = _step(job, "Trim the compiler cache")
    assert trim == save - 1 and trim_step["if"] == save_step["if"]
    assert 'CCACHE_MAXSIZE="$(( CCACHE_SAVE_BYTES / 1000 ))kB"' in trim_step["run"]
    assert trim_step["run"].endswith("--cleanup")
    keys = restore_step["with"]["restore-keys"].strip().splitlines()
    assert keys == [_cell_key(), "${{ env.COMPILER_CACHE_PREFIX }}-"]
    run_key = _cell_key() + "${{ github.run_id }}-${{ github.run_attempt }}"
    assert restore_step["with"]["key"] == save_step["with"]["key"] == run_key
    # the budget of the runner file's runners ends the build well before the step's backstop,
    # which ends before the job's limit, which is inside the runners' own
    from tools.plan.runners import load_runners
    runner = load_runners().default
    assert runner.budget_hours * 60 + 5 < build_step["timeout-minutes"] < job["timeout-minutes"]
    assert job["timeout-minutes"] <= runner.job_limit_hours * 60


def _cell_key() -> str:
    return "${{ env.COMPILER_CACHE_PREFIX }}-py${{ env.CELL_PYTHON }}-"


def _render_key(entry: dict) -> str:
    """A cell job's compiler cache key (before the run id) for a matrix entry, as Actions
    expands the called job's env into the template."""
    return _cell_key().replace("${{ env.COMPILER_CACHE_PREFIX }}", entry["ccache_prefix"]) \
        .replace("${{ env.CELL_PYTHON }}", entry["python"])


def _run_budget_step(tmp_path, workflow: str, step_name: str, program: str, script: str,
                     used_s: int, budget_min: int, **env: str) -> subprocess.CompletedProcess:
    """A step of a reusable workflow's job that runs within the job's budget, with a stand-in
    ``program`` (under .venv/bin, or .venv/Scripts on Windows), as if the job had started
    ``used_s`` seconds ago with a budget of ``budget_min`` minutes."""
    (job,) = _load(WORKFLOWS / workflow)["jobs"].values()
    _, step = _step(job, step_name)
    where = "Scripts" if "windows" in workflow else "bin"
    stand_in = tmp_path / ".venv" / where / program
    stand_in.parent.mkdir(parents=True, exist_ok=True)
    stand_in.write_text("#!/bin/sh\n" + script)
    stand_in.chmod(0o755)
    full = {**os.environ, "JOB_START": str(int(time.time()) - used_s),
            "BUDGET_MINUTES": str(budget_min), **env}
    return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=full,
                          capture_output=True, text=True, timeout=60)


#: A cell job of two cells, as its entry sets CELLS.
TWO_CELLS = {"CELLS": "demo_ext-3.12-cu130 demo_ext-3.13-cu130", "JOB_ID": "demo_ext-cu130-job1"}


@pytest.mark.parametrize("workflow,program,argv", [
    ("wheels-linux-cell.yml", "nox", "-s build-{} -- --backend container --engine docker "
                                     "--shard-caches shard-caches --wheelhouse needed-wheels"),
    ("wheels-windows-cell.yml", "python", "-m tools.build {} --backend host --shard-caches "
                                          "shard-caches --wheelhouse needed-wheels"),
])
@pytest.mark.parametrize("first,used_s,ran,failed,out_of_time", [
    # both cells pass, each built with its own command and the shard caches' directory there
    ("exit 0", 0, 2, [], False),
    # the first fails by itself: the second is still built; the step fails naming the first
    ("exit 7", 0, 2, ["demo_ext-3.12-cu130"], False),
    # the first runs past the budget: stopped, with how to continue; the second not started
    ("sleep 30", 59, 1, ["demo_ext-3.12-cu130", "demo_ext-3.13-cu130"], True),
])
def test_build_step_builds_each_cell_within_the_jobs_budget(tmp_path, workflow, program, argv,
                                                            first, used_s, ran, failed,
                                                            out_of_time):
    script = ('echo "$*" >> calls\ntest -d shard-caches\n'
              f'case "$*" in *3.12-cu130*) {first} ;; esac\n')
    proc = _run_budget_step(tmp_path, workflow, "Build the cell", program, script, used_s, 1,
                            **TWO_CELLS)
    assert proc.returncode == (1 if failed else 0), proc.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == [argv.format(c) for c in TWO_CELLS["CELLS"].split()][:ran]
    assert (f"::error title=failed cells::{' '.join(failed)}" in proc.stdout) is bool(failed)
    message = ("::error title=out of time::demo_ext-3.12-cu130 stopped at the job's 1-minute "
               "budget (counted from the job's start); re-run this job to continue from what "
               "was kept: its group's shard caches, or on main its own compiler cache")
    assert (message in proc.stdout) is out_of_time
    assert ("demo_ext-3.13-cu130: not started" in proc.stdout) is (ran == 1)


@pytest.mark.parametrize("workflow,program", [("wheels-linux-cell.yml", "nox"),
                                              ("wheels-windows-cell.yml", "python")])
def test_the_budget_counts_from_the_jobs_start(tmp_path, workflow, program):
    # the setup (the image pull, the tools) used it all: no build starts, each cell says so
    proc = _run_budget_step(tmp_path, workflow, "Build the cell", program, "touch started\n",
                            61, 1, **TWO_CELLS)
    assert proc.returncode == 1
    for cell in TWO_CELLS["CELLS"].split():
        assert (f"::error title=out of time::{cell}: not started, the job's 1-minute budget is "
                "spent (the next run builds it)") in proc.stdout
    assert not (tmp_path / "started").exists()


# --------------------------------------------------------------------------- the shards


@pytest.mark.parametrize("suffix", PLATFORM_JOBS)
def test_shard_jobs_run_the_shard_command_and_hand_their_caches_on(workflows, suffix):
    caller = workflows["wheels.yml"]["jobs"][f"shards{suffix}"]
    assert caller["name"] == "${{ matrix.id }}" and caller["needs"] == "plan"
    assert caller["if"] == f"needs.plan.outputs.shards{suffix}_count != '0'"
    assert caller["strategy"]["matrix"] == f"${{{{ fromJSON(needs.plan.outputs.shards{suffix}) }}}}"
    assert caller["strategy"]["fail-fast"] is False
    workflow, job = _called(workflows, caller)
    assert workflow == PLATFORM_JOBS[suffix][0]
    linux_backend = {"BACKEND": "${{ vars.CUWHEELS_CELL_BACKEND || 'container' }}"}
    assert job["env"] == {"JOB_ID": _entry("id"), **(linux_backend if suffix != "_win" else {})}
    # the rest of the entry from the plan artifact, under the names the steps use
    from tools.releasing.steps import ENV_FIELDS
    assert set(ENV_FIELDS["shard"].values()) >= {"SHARD_ID", "GROUP", "SHARD", "OF", "CACHE_KEY",
                                                 "BUDGET_MINUTES", "CELL_CUDA", "IMAGE"}
    start, start_step = _step(job, "Record the job's start")
    restore, restore_step = _step(job, "Restore the shard's cache")
    run, run_step_ = _step(job, "Compile the shard")
    save, save_step = _step(job, "Save the shard's cache")
    upload, upload_step = _step(job, "Upload the shard's cache for the cells")
    report, report_step = _step(job, "Upload the shard's report")
    trim, trim_step = _step(job, "Trim the shard's cache")
    assert start == 0 and start_step["run"] == 'echo "JOB_START=$(date +%s)" >> "$GITHUB_ENV"'
    # the whole cache goes to this run's cells first; what is saved for later runs is trimmed
    # to the job's share of the repository's cache
    assert start < restore < run < upload < trim < save < report
    assert trim_step["if"] == save_step["if"] and "--trim-dir" in trim_step["run"]
    assert '--trim-max-size "$(( CCACHE_SAVE_BYTES / 1000 ))kB"' in trim_step["run"]
    (line,) = [ln for ln in run_step_["run"].splitlines() if "tools.shard" in ln]
    argv = shlex.split(line.split("||")[0])
    assert argv[:3] == ["timeout", "--kill-after=5m", "${left}s"]
    if suffix == "_win":
        # natively: the host backend (the container backend builds Linux cells only)
        assert argv[3:] == [".venv/Scripts/python", "-m", "tools.shard", "run", "$GROUP",
                            "--shard", "$SHARD/$OF", "--backend", "host", "--cache",
                            "shard-caches", "--work", "build-cells"]
        assert _step(job, "Set up MSVC")[0] < _step(job, "Install the CUDA toolkit")[0] < run
    else:
        # in the cells' builder image, so the shard's command lines are the cells'
        assert argv[3:] == [".venv/bin/python", "-m", "tools.shard", "run", "$GROUP", "--shard",
                            "$SHARD/$OF", "${backend[@]}", "--cache", "shard-caches", "--work",
                            "build-cells"]
        assert "backend=(--backend container --engine docker)\n" in run_step_["run"]
        pull, pull_step = _step(job, "Pull the builder image")
        disk, _ = _step(job, "Free disk space")
        assert start < disk < pull < run and 'docker pull --quiet "$IMAGE"' in pull_step["run"]
    # the cache: per group key and shard (the plan's cache_key), restored for every run, saved
    # only from main and only by this shard, also after a failed or stopped shard
    cache = "shard-caches/${{ env.SHARD_ID }}"
    key = "${{ env.CACHE_KEY }}-${{ github.run_id }}-${{ github.run_attempt }}"
    assert restore_step["with"] == {"path": cache, "key": key,
                                    "restore-keys": "${{ env.CACHE_KEY }}-\n"}
    assert "if" not in restore_step
    assert save_step["with"] == {"path": cache, "key": key}
    assert save_step["if"] == ("always() && github.event_name != 'pull_request' && "
                               "github.ref == 'refs/heads/main'")
    # handed to the cells as an artifact named after the shard, which they download by name
    assert upload_step["if"] == "always()"
    assert upload_step["with"]["name"] == "${{ env.SHARD_ID }}"
    assert upload_step["with"]["path"] == cache
    assert report_step["with"]["name"] == "shard-report-${{ env.SHARD_ID }}"  # not report-*
    # the same hand-off on every platform
    linux = workflows["wheels-linux-shard.yml"]["jobs"]["compile"]
    for name in ("Restore the shard's cache", "Save the shard's cache",
                 "Upload the shard's cache for the cells", "Upload the shard's report"):
        assert _step(job, name)[1] == _step(linux, name)[1], name


@pytest.mark.parametrize("workflow,backend", [
    ("wheels-linux-shard.yml", "container --engine docker"),
    ("wheels-windows-shard.yml", "host"),
])
@pytest.mark.parametrize("script,used_s,code,message", [
    # the shard runs the plan's group and shard, into the caches' folder
    (None, 0, 0, None),
    ("sleep 30\n", 59, 124,
     "::error title=out of time::flash_attn-cu130-shard2 stopped at its 1-minute budget (counted "
     "from the job's start); the cells compile the units it did not"),
    ("touch started\n", 61, 124,
     "::error title=out of time::flash_attn-cu130-shard2: the setup used the whole 1-minute budget"),
])
def test_shard_step_runs_within_the_budget(tmp_path, workflow, backend, script, used_s, code,
                                           message):
    passes = (f'test "$*" = "-m tools.shard run flash_attn-cu130 --shard 2/3 --backend {backend} '
              f'--cache shard-caches --work build-cells"\n')
    proc = _run_budget_step(tmp_path, workflow, "Compile the shard", "python", script or passes,
                            used_s, 1, SHARD_ID="flash_attn-cu130-shard2",
                            GROUP="flash_attn-cu130", SHARD="2", OF="3")
    assert proc.returncode == code, proc.stdout + proc.stderr
    if message:
        assert message in proc.stdout
    assert not (tmp_path / "started").exists()


# --------------------------------------------------------------------------- publishing


CELL_JOBS = [f"cells{n}{suffix}" for suffix in PLATFORM_JOBS for n in ("1", "2")]


def test_release_and_publish(workflows):
    jobs = workflows["wheels.yml"]["jobs"]
    release, publish = jobs["release"], jobs["publish"]
    # what built is released and published, whatever failed beside it, on any platform
    assert release["needs"] == ["plan", *CELL_JOBS]
    assert publish["needs"] == ["plan", "release"]

    def before(name: str) -> set[str]:
        needs = jobs[name].get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        return set(needs).union(*(before(n) for n in needs))
    builds = {k for k in jobs if k.startswith(("cells", "shards"))}
    assert builds == {k + s for s in PLATFORM_JOBS for k in ("shards", "cells1", "cells2")}
    assert before("publish") >= before("release") >= builds
    release_if, publish_if = (" ".join(job["if"].split()) for job in (release, publish))
    assert release_if.startswith("!cancelled() && needs.plan.result == 'success' "
                                 "&& needs.plan.outputs.count != '0'")
    # the publish also runs with nothing built when released wheels wait to be indexed
    assert publish_if.startswith("!cancelled() && needs.plan.result == 'success' "
                                 "&& (needs.plan.outputs.count != '0' "
                                 "|| needs.plan.outputs.pending != '0')")
    # one release run at a time is the workflow's concurrency group; the index's deployment
    # keeps its own group besides
    assert "concurrency" not in release
    assert publish["concurrency"] == {"group": "publish-index", "cancel-in-progress": False}
    assert publish["environment"]["name"] == "github-pages"
    plan, _ = _step(release, "Download this run's plan")
    wheels, wheels_step = _step(release, "Download this run's wheels")
    ledger, _ = _step(release, "Read the live site")
    hold, _ = _step(release, "Hold back wheels already published")
    index, index_step = _step(release, "Build the index")
    attest, attest_step = _step(release, "Attest the wheels' build provenance")
    made, made_step = _step(release, "Create the release")
    assert plan < wheels < ledger < hold < index < attest < made
    # the run's wheels listed page by page and downloaded by id, checked against the plan
    argv = shlex.split(wheels_step["run"])
    assert argv[1:4] == ["-m", "tools.release", "artifacts"]
    assert dict(zip(argv[4::2], argv[5::2]))["--what"] == "wheels"
    # one attestation of every wheel released (the held-back ones were moved out before it)
    assert attest_step["uses"].startswith("actions/attest-build-provenance@")
    assert attest_step["with"] == {"subject-path": "wheelhouse/*.whl"}
    # With nothing new (every wheel already published), nothing is released.
    for step in release["steps"][hold + 1:]:
        assert step.get("if") == "steps.batch.outputs.new != '0'", step["name"]
    assert index_step["run"].startswith("make index ")
    assert 'BASE_URL="$BASE_URL"' in index_step["run"]
    assert "continue-on-error" not in index_step
    # the upload goes through the paced, backed-off API (tools.releasing.ghapi)
    argv = shlex.split(made_step["run"])
    assert argv[1:4] == ["-m", "tools.release", "upload"]
    options = dict(zip(argv[4::2], argv[5::2]))
    assert options["--dir"] == "wheelhouse" and options["--limits"] == "$LIMITS_FILE"
    # the plan, the release and the publish read the same live ledger the same way
    _, site = _step(release, "Read the live site")
    assert shlex.split(site["run"])[1:4] == ["-m", "tools.release", "site"]
    for job in (jobs["plan"], publish):
        mine = {k: v for k, v in _step(job, "Read the live site")[1].items() if k != "if"}
        assert mine == site
    reports, reports_step = _step(publish, "Download the build reports of this run")
    p_ledger, _ = _step(publish, "Read the live site")
    tries, tries_step = _step(publish, "Count this run's failed tries")
    found, found_step = _step(publish, "Find the releases the index lacks")
    built, built_step = _step(publish, "Build the index from those releases")
    rebuilt, rebuilt_step = _step(publish, "Rebuild the site from the ledger")
    beside, beside_step = _step(publish, "Put the failed tries beside the ledger")
    upload, upload_step = _step(publish, "Upload the site")
    deploy, deploy_step = _step(publish, "Deploy the site")
    assert reports < p_ledger < tries < found < built < rebuilt < beside < upload < deploy
    assert "--what reports" in reports_step["run"]
    assert "-m tools.release attempts" in tries_step["run"]
    assert "-m tools.release to-index" in found_step["run"]
    assert "continue-on-error" not in built_step
    assert "--reports $RUNNER_TEMP/reports" in built_step["run"]
    assert "--reports $RUNNER_TEMP/reports" in rebuilt_step["run"]
    # deployed when there are new wheels, or new failed tries (the front page and the next
    # run's backlog read them)
    deploy_if = ("steps.index.outputs.new != '0' || steps.attempts.outputs.changed == 'true'")
    for step in (upload_step, deploy_step, beside_step):
        assert step["if"] == deploy_if
    assert upload_step["uses"].startswith("actions/upload-pages-artifact@")
    assert deploy_step["uses"].startswith("actions/deploy-pages@")
    # a re-run of the publish job deploys the artifact its own attempt uploaded
    name = "github-pages-${{ github.run_attempt }}"
    assert upload_step["with"] == {"path": "site", "name": name, "include-hidden-files": True}
    assert deploy_step["with"] == {"artifact_name": name}


def test_one_release_run_at_a_time_hourly_and_pull_requests_apart(workflows):
    """The drain: a schedule starts a run every hour; runs of push, schedule and dispatch share
    one concurrency group (never cancelled); a pull request has its own, cancelled by its next
    push, so it never waits behind the backlog."""
    wheels = workflows["wheels.yml"]
    from tools.plan.limits import load_limits
    limits = load_limits()
    (cron,) = wheels["on"]["schedule"]
    minute, hour, *rest = cron["cron"].split()
    assert minute.isdigit() and hour == "*" and rest == ["*", "*", "*"]
    assert limits.cron_hours == 1
    group = wheels["concurrency"]["group"]
    assert "'release'" in group and "format('pr-{0}', github.event.pull_request.number)" in group
    assert wheels["concurrency"]["cancel-in-progress"] == \
        "${{ github.event_name == 'pull_request' }}"
    # each platform's matrices run the policy's max_parallel at once
    for key in _stage_keys():
        suffix = key[key.index("_"):] if "_" in key else ""
        platform = {"": "linux_x86_64", "_aarch64": "linux_aarch64", "_win": "win_amd64"}[suffix]
        assert wheels["jobs"][key]["strategy"]["max-parallel"] == limits.max_parallel[platform]


def test_checks_run_the_make_targets(workflows):
    runs = [r for r in (s.get("run") for j in workflows["checks.yml"]["jobs"].values()
                        for s in j["steps"]) if r]
    # The tests job first gets the toolchain the runner lacks (CUDA from PyPI, a second Python)
    # through the project's own command, then runs the same target as everywhere else.
    assert [r for r in runs if r in ("make test", "make recipes", "make lint")] == ["make test", "make recipes", "make lint"]
    toolchain = next(r for r in runs if "tools.toolchain" in r)
    assert "tools.toolchain cuda-home" in toolchain and "tools.toolchain python 3.11 3.12" in toolchain
    assert runs.index(toolchain) < runs.index("make test")
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
    shutil.copy(ROOT / "recipes" / "runners.yaml", repo / "recipes" / "runners.yaml")
    shutil.copy(ROOT / "recipes" / "limits.yaml", repo / "recipes" / "limits.yaml")
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
    matrices = json.loads(proc.stdout)
    cells = _flat(matrices["cells1"]["include"] + matrices["cells2"]["include"])
    assert len(cells) == 14 and {c["package"] for c in cells} == {"demo_ext"}
    assert {"id", "image", "python", "cuda", "torch", "group", "runner", "shards",
            "estimate_hours", "budget_minutes"} <= set(cells[0])
    assert "changed recipes: demo_ext" in proc.stderr


def run_plan_step(repo: Path, workflows: dict, ledger: str | None = '{"schema": 2, "files": {}}',
                  attempts: str | None = None, **env: str) -> tuple[dict, str, str]:
    """Run wheels.yml's batch step as Actions does, after the ledger step left ``ledger`` (and
    the attempts step ``attempts``) in RUNNER_TEMP; returns (outputs, summary, log), the plan
    artifact under the key ``plan``."""
    _, step = _step(workflows["wheels.yml"]["jobs"]["plan"], "Choose this run's batch")
    runner_temp = repo / ".runner-temp"
    runner_temp.mkdir(exist_ok=True)
    if ledger is not None:
        (runner_temp / "ledger.json").write_text(ledger)
    if attempts is not None:
        (runner_temp / "attempts.json").write_text(attempts)
    out, summary = runner_temp / "output", runner_temp / "summary"
    out.write_text("")
    summary.write_text("")
    static = {k: str(v) for k, v in workflows["wheels.yml"]["env"].items() if "${{" not in str(v)}
    full_env = {**os.environ, **GIT_ENV, **static, "RUNNER_TEMP": str(runner_temp),
                "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary),
                "RUNNERS_FILE": "recipes/runners.yaml", "LIMITS_FILE": "recipes/limits.yaml",
                "PY": sys.executable, "IN_PACKAGE": "", "IN_PYTHON": "",
                "IN_CUDA": "", "IN_TORCH": "", "IN_PLATFORM": "", **env}
    # `shell: bash` runs a step as `bash --noprofile --norc -eo pipefail {0}`.
    script = runner_temp / "plan.sh"
    script.write_text(step["run"])
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                          cwd=repo, env=full_env, capture_output=True, text=True, timeout=120)
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    outputs["rc"] = proc.returncode
    plan = runner_temp / "batch" / "batch.json"
    if plan.exists():
        outputs["plan"] = json.loads(plan.read_text())
    return outputs, summary.read_text(), proc.stdout + proc.stderr


def _entries(outputs: dict, key: str) -> list[dict]:
    """A stage's full job entries: its matrix's ids, looked up in the plan artifact."""
    from tools.releasing.batch import job_entry
    return [job_entry(outputs["plan"], e["id"]) for e in json.loads(outputs[key])["include"]]


def _flat(jobs: list[dict]) -> list[dict]:
    """The cells of cell jobs, each with what its job gives all its cells (group, shards,
    runner, store key, ...) and its own fields over them."""
    return [{**{k: v for k, v in j.items() if k != "cells"}, **c} for j in jobs for c in j["cells"]]


def _cells_of(outputs: dict, key: str) -> list[dict]:
    """A cell stage's cells (:func:`_flat` of its job entries)."""
    return _flat(_entries(outputs, key))


def test_plan_step_a_push_or_the_schedule_takes_the_backlogs_first_run(scratch_repo, workflows):
    repo, add_recipe = scratch_repo
    add_recipe()
    for event in ("push", "schedule"):
        outputs, summary, log = run_plan_step(repo, workflows, EVENT=event)
        assert outputs["rc"] == 0, log
        matrix = json.loads(outputs["cells1"])["include"]
        assert str(len(matrix)) == outputs["cells1_count"]
        # the matrices carry ids and runners only; the entries are in the plan artifact
        assert all(set(e) == {"id", "runner"} for e in matrix)
        cells = _cells_of(outputs, "cells1")
        # the count is of cells, in fewer cell jobs
        assert outputs["count"] == "14" == str(len(cells)) and len(matrix) < 14
        assert {"id", "image", "python", "cuda", "torch", "group", "runner", "shards",
                "estimate_hours", "budget_minutes", "ccache_save_bytes"} <= set(cells[0])
        # demo_ext has no unit list: no shards, every cell in the matrix that waits for none
        assert (outputs["shards"], outputs["shards_count"]) == ('{"include":[]}', "0")
        assert (outputs["cells2"], outputs["cells2_count"]) == ('{"include":[]}', "0")
        assert "**Totals**: 1 runs, 14 cells" in summary
        assert "::warning" not in log


def test_plan_step_leaves_out_what_the_ledger_publishes_and_what_was_given_up(scratch_repo,
                                                                              workflows):
    repo, add_recipe = scratch_repo
    add_recipe()
    outputs, _, _ = run_plan_step(repo, workflows, EVENT="schedule")
    first = _cells_of(outputs, "cells1")[0]["id"]
    from tools.plan.cells import plan
    from tools.plan.recipes.model import load_all
    from tools.plan.table import load_table
    from tools.releasing.backlog import fingerprints
    table = load_table(repo / "recipes" / "table.yaml")
    recipes = load_all(repo / "recipes", table)
    prints = fingerprints(recipes, repo / "recipes" / "table.yaml",
                          repo / "recipes" / "runners.yaml")
    gave_up = json.dumps({"schema": 1, "cells": {first: {
        "tries": 3, "fingerprint": prints["demo_ext"], "error": "boom", "report": ""}}})
    outputs, summary, log = run_plan_step(repo, workflows, EVENT="schedule", attempts=gave_up)
    assert outputs["rc"] == 0, log
    assert outputs["count"] == "13"
    assert first not in [e["id"] for e in _cells_of(outputs, "cells1")]
    assert "1 given up after 3 tries" in summary
    # a wheel of a complete release the ledger lacks yet (its run's publish failed): published
    entry = _cells_of(outputs, "cells1")[0]
    tag = "cp" + entry["python"].replace(".", "")
    wheel = (f"demo_ext-{entry['version']}+{entry['label']}-{tag}-{tag}-"
             f"{entry['platform_tag']}.whl")
    (repo / ".runner-temp" / "pending.tsv").write_text(f"wheels-41\t{wheel}\n")
    outputs, _, log = run_plan_step(repo, workflows, EVENT="schedule", attempts=gave_up)
    assert (outputs["count"], outputs["pending"]) == ("12", "1"), log
    (repo / ".runner-temp" / "pending.tsv").unlink()
    # the recipe changed: its fingerprint too, and the cell is tried again
    (repo / "recipes" / "demo_ext" / "recipe.yaml").write_text(
        (repo / "recipes" / "demo_ext" / "recipe.yaml").read_text() + "\n")
    assert plan(recipes, table)  # still a valid recipe
    outputs, _, _ = run_plan_step(repo, workflows, EVENT="schedule", attempts=gave_up)
    assert outputs["count"] == "14"


def _too_big_for_one_job(scratch_repo) -> Path:
    """The scratch repository with demo_ext, whose 8 CUDA units of 4000 s need shards."""
    repo, add_recipe = scratch_repo
    add_recipe()
    units = {"schema": 1, "version": "1.0.0",
             "cost": {"cuda": {"seconds": 4000, "reason": "stated rule for the tests"}},
             "units": {"cuda": [f"csrc/k{i}.cu" for i in range(8)]}}
    (repo / "recipes" / "demo_ext" / "units.yaml").write_text(json.dumps(units))
    commit(repo, "demo_ext's units")
    return repo


def test_plan_step_plans_the_shards_of_a_group_too_big_for_one_job(scratch_repo, workflows):
    repo = _too_big_for_one_job(scratch_repo)
    outputs, summary, log = run_plan_step(repo, workflows, EVENT="push")
    assert outputs["rc"] == 0, log
    shards, jobs = _entries(outputs, "shards"), _entries(outputs, "cells2")
    cells = _flat(jobs)
    assert outputs["shards_count"] == str(len(shards)) and len(shards) > 4
    assert outputs["count"] == "14" == str(len(cells)) and outputs["cells1_count"] == "0"
    assert outputs["cells2_count"] == str(len(jobs))
    assert {s["group"] for s in shards} == {c["group"] for c in cells}
    assert all(c["shards"] for c in cells)
    assert max(j["estimate_hours"] for j in shards + jobs) <= 5


def test_plan_step_a_group_the_kernel_store_covers_runs_no_shard(scratch_repo, workflows):
    """The list step leaves the store's listing in RUNNER_TEMP; the batch step reads it: a group
    whose every shard an earlier run stored gets none, its cells start at once and pull the
    store's entries of its key. A listing that is not one stops the plan, naming the file."""
    repo = _too_big_for_one_job(scratch_repo)
    outputs, _, log = run_plan_step(repo, workflows, EVENT="push")
    shards = _entries(outputs, "shards")
    listing = {"schema": 1, "repo": "o/r", "tag": "kernel-cache", "entries": [
        {"name": f"{s['key']}-{s['shard']}of{s['of']}-{s['group']}", "key": s["key"],
         "group": s["group"], "index": s["shard"], "count": s["of"], "bytes": 1000,
         "created": "2026-11-01T00:00:00Z"} for s in shards]}
    (repo / ".runner-temp" / "kernel-store.json").write_text(json.dumps(listing))
    outputs, _, log = run_plan_step(repo, workflows, EVENT="push")
    assert outputs["rc"] == 0, log
    assert outputs["shards_count"] == "0" and outputs["cells2_count"] == "0"
    cells = _cells_of(outputs, "cells1")
    assert len(cells) == 14
    keys = {s["group"]: s["key"] for s in shards}
    assert all(c["shards"] == [] and c["store_key"] == keys[c["group"]] for c in cells)
    (repo / ".runner-temp" / "kernel-store.json").write_text('{"schema": 7}')
    outputs, _, log = run_plan_step(repo, workflows, EVENT="push")
    assert outputs["rc"] != 0 and "kernel-store.json: not a kernel store listing" in log
    # the listing comes from the store, read only, before the batch
    plan = workflows["wheels.yml"]["jobs"]["plan"]
    listed, list_step = _step(plan, "List the kernel store")
    assert listed < _step(plan, "Choose this run's batch")[0]
    assert "-m tools.release kernels list" in list_step["run"]
    assert "$RUNNER_TEMP/kernel-store.json" in list_step["run"]
    assert plan["permissions"] == {"contents": "read", "pages": "read"}


@pytest.mark.parametrize("workflow", CELL_FILES + SHARD_FILES)
def test_cells_and_shards_pull_from_the_kernel_store_before_they_compile(workflows, workflow):
    """A cell pulls its group's entries when its plan entry names the store's key; a shard
    pulls its own entry into its cache, so it compiles only what the store lacks. Read only,
    values through env:, and a store that can't be read never fails the job."""
    (job,) = workflows[workflow]["jobs"].values()
    pull, step = _step(job, "from the kernel store")
    build = _step(job, "Build the cell" if workflow in CELL_FILES else "Compile the shard")[0]
    assert pull < build
    assert step["env"] == {"GH_TOKEN": "${{ github.token }}",
                           "GH_REPO": "${{ github.repository }}"}
    argv = shlex.split(step["run"].split("||")[0].replace("\\\n", " "))
    assert argv[1:5] == ["-m", "tools.release", "kernels", "pull"]
    opts = dict(zip(argv[5::2], argv[6::2]))
    assert opts["--dir"] == "shard-caches" and opts["--repo"] == "$GH_REPO"
    if workflow in CELL_FILES:
        assert step["if"] == "env.STORE_KEY != ''" and opts["--key"] == "$STORE_KEY"
        assert "--shard" not in opts
    else:
        assert "if" not in step and opts["--key"] == "$GROUP_KEY"
        assert opts["--shard"] == "$SHARD/$OF"
    assert "|| echo \"::warning title=kernel store::" in step["run"]
    from tools.releasing.steps import ENV_FIELDS
    assert ENV_FIELDS["cell"]["store_key"] == "STORE_KEY"
    assert ENV_FIELDS["shard"]["key"] == "GROUP_KEY"


def test_the_kernel_store_job_prunes_then_pushes_the_runs_shards_from_main_only(workflows):
    jobs = workflows["wheels.yml"]["jobs"]
    job = jobs["kernel_store"]
    # after every platform's shards, whatever their result; never for a pull request
    assert job["needs"] == ["plan", "shards", "shards_aarch64", "shards_win"]
    cond = " ".join(job["if"].split())
    assert cond.startswith("!cancelled() && needs.plan.result == 'success'")
    assert all(guard in cond for guard in WRITE_GUARDS)
    assert job["permissions"] == {"contents": "write", "actions": "read"}
    # no cell waits for it
    assert not any("kernel_store" in str(j.get("needs", "")) for j in jobs.values())
    prune, prune_step = _step(job, "Prune the kernel store")
    push, push_step = _step(job, "Push this run's finished shard caches")
    assert prune < push
    for step, action in ((prune_step, "prune"), (push_step, "push")):
        argv = shlex.split(step["run"])
        assert argv[1:5] == ["-m", "tools.release", "kernels", action]
        assert dict(zip(argv[5::2], argv[6::2]))["--plan"] == "$RUNNER_TEMP/batch/batch.json"
    assert dict(zip(shlex.split(push_step["run"])[5::2],
                    shlex.split(push_step["run"])[6::2]))["--run-id"] == "$GITHUB_RUN_ID"


def test_plan_step_pull_request_builds_a_capped_sample_of_its_change(scratch_repo, workflows):
    repo, add_recipe = scratch_repo
    add_recipe()  # HEAD^1 is the base, as in the merge commit Actions checks out
    # published or not: a pull request builds its change (no ledger is read)
    outputs, summary, log = run_plan_step(repo, workflows, ledger=None, EVENT="pull_request")
    assert outputs["rc"] == 0, log
    from tools.plan.limits import load_limits
    cap = load_limits().pull_request_cells
    assert outputs["count"] == str(cap) == str(len(_cells_of(outputs, "cells1")))
    assert (f"::warning title=batch capped::capped: 14 cells changed, a pull request builds the "
            f"first {cap}") in log


def test_plan_step_without_a_recipe_change_a_pull_request_plans_nothing(scratch_repo, workflows):
    repo, add_recipe = scratch_repo
    add_recipe()
    (repo / "README.md").write_text("docs only\n")
    commit(repo, "docs")
    outputs, summary, log = run_plan_step(repo, workflows, ledger=None, EVENT="pull_request")
    assert outputs["rc"] == 0, log
    assert (outputs["count"], outputs["cells1"], outputs["shards"]) == \
        ("0", '{"include":[]}', '{"include":[]}')
    assert "Nothing to build" in summary


def test_plan_step_dispatch_filters(scratch_repo, workflows):
    repo, add_recipe = scratch_repo
    add_recipe()
    outputs, _, log = run_plan_step(repo, workflows, EVENT="workflow_dispatch",
                                    IN_PACKAGE="demo_ext", IN_PYTHON="3.12", IN_CUDA="13.0")
    assert outputs["rc"] == 0, log
    ids = sorted(c["id"] for c in _cells_of(outputs, "cells1"))
    assert ids == ["demo_ext-3.12-cu130", "demo_ext-3.12-cu130-torch2.9"]


@pytest.mark.parametrize("env,message", [
    ({"IN_PLATFORM": "win_arm64"}, "unknown platform(s): win_arm64"),
    ({"IN_PACKAGE": "$(touch pwned)"}, "unknown package(s): $(touch pwned)"),  # stays a string
])
def test_plan_step_dispatch_rejects_bad_inputs(scratch_repo, workflows, env, message):
    repo, add_recipe = scratch_repo
    add_recipe()
    outputs, _, log = run_plan_step(repo, workflows, EVENT="workflow_dispatch", **env)
    assert outputs["rc"] != 0
    assert message in log
    assert "cells1" not in outputs and "shards" not in outputs
    assert not (repo / "pwned").exists()


#: The test table with the three platforms: demo_ext's (CUDA, torch) pairs exist on each.
PLATFORM_TABLE = copy.deepcopy(MINI_TABLE)
PLATFORM_TABLE["platforms"] = {
    "linux_x86_64": {"tag": "manylinux_{manylinux}_x86_64", "build": "container",
                     "source": "test"},
    "linux_aarch64": {"tag": "manylinux_{manylinux}_aarch64", "build": "container",
                      "source": "test",
                      "images": {"12.9": "pytorch/manylinuxaarch64-builder:cuda12.9",
                                 "13.0": "pytorch/manylinuxaarch64-builder:cuda13.0"}},
    "win_amd64": {"tag": "win_amd64", "build": "native", "source": "test",
                  "toolchain": "Visual Studio 2022 and NVIDIA's CUDA installer"},
}
for _series, _cudas in (("2.8", ["12.9"]), ("2.9", ["13.0"]), ("2.10", ["13.0"])):
    PLATFORM_TABLE["torch"][_series]["platforms"] = {
        p: {"pypi_cuda": None, "cuda": list(_cudas), "source": "test"}
        for p in ("linux_aarch64", "win_amd64")}


@pytest.fixture
def platform_repo(scratch_repo):
    """The scratch repository with the three-platform table."""
    repo, add_recipe = scratch_repo
    (repo / "recipes" / "table.yaml").write_text(yaml.safe_dump(PLATFORM_TABLE, sort_keys=False))
    commit(repo, "three platforms")
    return repo, add_recipe


def _stage(outputs: dict, key: str) -> list[dict]:
    jobs = json.loads(outputs[key])["include"]
    assert outputs[f"{key}_count"] == str(len(jobs))
    return jobs


def test_plan_step_outputs_every_platforms_stages(platform_repo, workflows):
    repo, add_recipe = platform_repo
    add_recipe()
    outputs, summary, log = run_plan_step(repo, workflows, EVENT="push")
    assert outputs["rc"] == 0, log
    # the step writes every output the plan job declares, and nothing else
    assert set(outputs) - {"rc", "plan"} == set(workflows["wheels.yml"]["jobs"]["plan"]["outputs"])
    x86, arm = _cells_of(outputs, "cells1"), _cells_of(outputs, "cells1_aarch64")
    win = _cells_of(outputs, "cells1_win")
    assert len(x86) == len(arm) == len(win) == 14 and outputs["count"] == "42"
    assert {(c["platform"], c["runner"]) for c in x86} == {("linux_x86_64", "ubuntu-24.04")}
    assert {(c["platform"], c["runner"]) for c in arm} == {("linux_aarch64", "ubuntu-24.04-arm")}
    assert {c["image"] for c in arm} == {"pytorch/manylinuxaarch64-builder:cuda12.9",
                                         "pytorch/manylinuxaarch64-builder:cuda13.0"}
    assert all(c["id"].endswith("-aarch64") for c in arm)
    # Windows is planned as the others are, natively on its runner
    assert {(c["platform"], c["runner"], c["image"]) for c in win} == \
        {("win_amd64", "windows-2022", "")}
    # the matrix entry's runner is the one the plan made the job for
    assert [e["runner"] for e in json.loads(outputs["cells1_win"])["include"]] == \
        [j["runner"] for j in _entries(outputs, "cells1_win")]
    # the compiler cache: a Linux x86_64 job's key is the one CI always used for its first cell
    # (the old template, with that cell's values), and no key of another platform starts like
    # one of them
    x86_jobs = _entries(outputs, "cells1")
    old = [re.sub(r"\$\{\{ matrix\.(\w+) \}\}", lambda m, c=j["cells"][0]: c[m.group(1)],
                  CACHE_KEY) for j in x86_jobs]
    assert [_render_key(j) for j in x86_jobs] == old
    x86_prefixes = {_render_key(j) for j in x86_jobs} | {c["ccache_prefix"] + "-" for c in x86}
    others = [*((j, "linux_aarch64") for j in _entries(outputs, "cells1_aarch64")),
              *((j, "win_amd64") for j in _entries(outputs, "cells1_win"))]
    for job, platform in others:
        assert job["ccache_prefix"].startswith(f"ccache-{platform}-")
        assert not any(_render_key(job).startswith(p) for p in x86_prefixes), job["id"]


def test_plan_step_plans_windows_alone_when_a_dispatch_names_it(platform_repo, workflows):
    repo, add_recipe = platform_repo
    add_recipe()
    outputs, summary, log = run_plan_step(repo, workflows, EVENT="workflow_dispatch",
                                          IN_PLATFORM="win_amd64")
    assert outputs["rc"] == 0, log
    win = _cells_of(outputs, "cells1_win")
    assert len(win) == 14 and outputs["count"] == "14"
    # natively on the Windows runner: no builder image
    assert {(c["platform_tag"], c["runner"], c["image"]) for c in win} == \
        {("win_amd64", "windows-2022", "")}
    assert all(c["ccache_prefix"].startswith("ccache-win_amd64-") for c in win)
    for key in _stage_keys():
        if key != "cells1_win":
            assert json.loads(outputs[key])["include"] == [], key


# --------------------------------------------------------------------------- the hold-back step


def run_hold_back_step(workdir: Path, workflows: dict) -> tuple[int, str, str]:
    """Run wheels.yml's hold-back step as Actions does; returns (exit status, log, its outputs)."""
    _, step = _step(workflows["wheels.yml"]["jobs"]["release"], "Hold back wheels already published")
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
    from tools.sitegen.generate import IndexRun, build_index
    from wheelfactory import make_wheel

    runner_temp = tmp_path / ".runner-temp"
    runner_temp.mkdir()
    published = tmp_path / "published"
    make_wheel(published, "demo", "1.0", tag="py3-none-any")
    build_index(IndexRun(wheels_dir=published, output_dir=tmp_path / "site", base_url="https://h/1",
                ledger_path=runner_temp / "ledger.json", init_ledger=True))
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


# --------------------------------------------------------------------------- the release and the site


def run_step(workflows: dict, job: str, name: str, workdir: Path, bin_dir: Path | None = None,
             workflow: str = "wheels.yml", **env: str) -> tuple[int, str, dict[str, str]]:
    """Run one step of ``workflow`` as Actions does, with the workflow's, the job's and the step's
    env where it holds no expression (``env`` overrides them) and ``bin_dir`` first on PATH;
    returns (exit status, log, its outputs)."""
    wf = workflows[workflow]
    _, step = _step(wf["jobs"][job], name)
    runner_temp = workdir / ".runner-temp"
    runner_temp.mkdir(exist_ok=True)
    script, output = runner_temp / "step.sh", runner_temp / "output"
    script.write_text(step["run"])
    output.write_text("")
    static = {k: str(v) for k, v in {**wf["env"], **wf["jobs"][job].get("env", {}),
                                      **step.get("env", {})}.items()
              if "${{" not in str(v)}
    path = f"{bin_dir}:{os.environ['PATH']}" if bin_dir else os.environ["PATH"]
    full_env = {**os.environ, **static, "RUNNER_TEMP": str(runner_temp),
                "GITHUB_OUTPUT": str(output), "GITHUB_SERVER_URL": "https://github.com",
                "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "4242", "GITHUB_RUN_ATTEMPT": "1",
                "GITHUB_SHA": "0" * 40, "GH_REPO": "o/r", "PATH": path, **env}
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                          cwd=workdir, env=full_env, capture_output=True, text=True, timeout=120)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return proc.returncode, proc.stdout + proc.stderr, outputs


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def test_the_release_is_named_by_the_run_alone(tmp_path, workflows):
    (tmp_path / "bin").mkdir()
    tags = set()
    for day in ("20260901", "20261002"):  # a re-run on another day
        _executable(tmp_path / "bin" / "date", f"#!/bin/sh\necho {day}\n")
        rc, log, outputs = run_step(workflows, "release", "Name the release", tmp_path,
                                    tmp_path / "bin", GITHUB_RUN_ATTEMPT=day[-1])
        assert rc == 0, log
        tags.add((outputs["tag"], outputs["base_url"]))
    assert tags == {("wheels-4242", "https://github.com/o/r/releases/download/wheels-4242")}


# --------------------------------------------------------------------------- what is released


#: Stands in for the GitHub CLI where the publish job reads releases: $FAKE_RELEASES (JSON) is
#: the repository's releases, newest first as GitHub lists them, each with its assets, whose
#: files are under $FAKE_STORE/<tag>/. `--jq` is run by the real jq.
FAKE_GH_PUBLISH = """
import json, os, subprocess, sys
from pathlib import Path

args = sys.argv[1:]
with open(os.environ["GH_LOG"], "a") as log:
    log.write("gh " + " ".join(args) + "\\n")
releases = json.loads(Path(os.environ["FAKE_RELEASES"]).read_text())


def answer(data):
    query = args[args.index("--jq") + 1]
    sys.stdout.write(subprocess.run(["jq", "--raw-output", query], input=json.dumps(data),
                                    capture_output=True, text=True, check=True).stdout)


if args[0] == "api":
    endpoint = next(a for a in args[1:] if not a.startswith("-") and a != args[args.index("--jq") + 1])
    if endpoint == "repos/o/r/releases?per_page=30":
        answer([{"tag_name": r["tag"], "id": r["id"], "draft": r.get("draft", False)}
                for r in releases[:30]])
    else:
        rid = int(endpoint.split("/")[4])
        assets = next(r["assets"] for r in releases if r["id"] == rid)
        page = [{"name": n, "state": "uploaded"} for n in assets]
        answer(page if "--paginate" in args else page[:100])
elif args[:2] == ["release", "download"]:
    tag, name, folder = args[2], args[args.index("--pattern") + 1], args[args.index("--dir") + 1]
    assert name in next(r["assets"] for r in releases if r["tag"] == tag), (tag, name)
    Path(folder, name).write_bytes(Path(os.environ["FAKE_STORE"], tag, name).read_bytes())
"""


@pytest.fixture
def fake_releases(tmp_path):
    """A fake gh over a list of releases, and a ledger; returns (bin dir, env, set them, calls)."""
    bin_dir, state, log = tmp_path / "bin", tmp_path / "releases.json", tmp_path / "gh.log"
    _executable(bin_dir / "gh", f"#!{sys.executable}\n" + FAKE_GH_PUBLISH)
    log.write_text("")
    runner_temp = tmp_path / ".runner-temp"
    runner_temp.mkdir()

    def set_state(releases, published=(), removed=()):
        state.write_text(json.dumps(releases))
        # only jq reads this ledger: the names are what counts
        ledger = {"schema": 2, "files": {n: {} for n in published},
                  "removed": {n: {} for n in removed}}
        (runner_temp / "ledger.json").write_text(json.dumps(ledger))
    env = {"FAKE_RELEASES": str(state), "GH_LOG": str(log), "FAKE_STORE": str(tmp_path / "store")}
    return bin_dir, env, set_state, lambda: log.read_text().splitlines()


def _release(run: int, *wheels: str, draft: bool = False) -> dict:
    assets = [n for w in wheels for n in (w, w + ".metadata")]
    return {"tag": f"wheels-{run}", "id": run, "draft": draft, "assets": assets}


FAKE_MAKE = """#!/bin/bash
# Stands in for `make index` (the Makefile's setup aside): logs its arguments and runs what the
# target runs, tools.index, for real, without INDEX_FLAGS (the recipes and reports are the
# repository's, not this test's).
echo "make $*" >> "$MAKE_LOG"
for arg in "$@"; do
  case "$arg" in
    WHEELS_DIR=*) dir="${arg#WHEELS_DIR=}" ;;
    INDEX_DIR=*) site="${arg#INDEX_DIR=}" ;;
    LEDGER=*) ledger="${arg#LEDGER=}" ;;
    BASE_URL=*) base="${arg#BASE_URL=}" ;;
  esac
done
exec "$PY" -m tools.index --wheels "$dir" --site "$site" --base-url "$base" --ledger "$ledger"
"""


def test_publish_indexes_each_release_with_its_own_address(tmp_path, workflows, fake_releases):
    from tools.sitegen.ledger_file import dump_ledger
    from wheelfactory import make_wheel

    bin_dir, env, set_state, calls = fake_releases
    _executable(bin_dir / "make", FAKE_MAKE)
    store = tmp_path / "store"
    # the same cell built by both runs: the older release's wheel is indexed, the newer one's
    # held back (its name is taken by then)
    dup = make_wheel(store / "wheels-26", "dup", "1.0", tag="py3-none-any").name
    make_wheel(store / "wheels-31", "dup", "1.0", tag="py3-none-any", requires_dist=["numpy"])
    new = make_wheel(store / "wheels-31", "new", "1.0", tag="py3-none-any").name
    set_state([_release(31, dup, new), _release(26, dup)])
    runner_temp = tmp_path / ".runner-temp"
    (runner_temp / "ledger.json").write_text(dump_ledger({}))
    (runner_temp / "missing.tsv").write_text(
        f"wheels-26\t{dup}\nwheels-31\t{dup}\nwheels-31\t{new}\n")
    make_log = tmp_path / "make.log"
    rc, log, outputs = run_step(workflows, "publish", "Build the index from those releases",
                                tmp_path, bin_dir, TAGS="wheels-26 wheels-31", PY=sys.executable,
                                PYTHONPATH=str(ROOT), MAKE_LOG=str(make_log),
                                SITE_URL="https://o.github.io/r", **env)
    assert rc == 0, log
    assert outputs["new"] == "2"
    downloads = [c for c in calls() if c.startswith("gh release download")]
    assert downloads == [
        f"gh release download wheels-{run} --pattern {name} --dir {runner_temp}/releases/"
        f"wheels-{run} --clobber" for run, name in ((26, dup), (31, dup), (31, new))]
    makes = make_log.read_text().splitlines()
    assert len(makes) == 2
    for line, tag in zip(makes, ("wheels-26", "wheels-31")):
        assert f"WHEELS_DIR={runner_temp}/releases/{tag} INDEX_DIR=site" in line
        assert f"BASE_URL=https://github.com/o/r/releases/download/{tag} " in line
        assert f"--reports {runner_temp}/reports" in line
    # the rebuild of dup (other bytes) was held back, and said so
    assert [p.name for p in (runner_temp / "held-back").iterdir()] == [dup]
    assert f"{dup}: already published with other bytes" in (runner_temp / "held-back.txt").read_text()
    # one site, one ledger, each file at its own release's address
    ledger = json.loads((runner_temp / "ledger.json").read_text())["files"]
    assert ledger[dup]["url"].startswith("https://github.com/o/r/releases/download/wheels-26/")
    assert ledger[new]["url"].startswith("https://github.com/o/r/releases/download/wheels-31/")
    assert (tmp_path / "site" / "ledger.json").is_file()
    assert (runner_temp / "indexed-releases.md").read_text() == \
        "- wheels-26: 1 wheel(s)\n- wheels-31: 1 wheel(s)\n"


# --------------------------------------------------------------------------- disk


#: `df` and `sudo` and `systemctl` stand-ins: `df --output=avail` answers $ROOT_KB for / and
#: $LARGE_KB for the larger disk; `sudo` logs, and runs only mkdir and chown under $FAKE_ROOT.
FAKE_DF = """#!/bin/bash
if [[ "$1" == --output=avail ]]; then
  echo Avail
  if [[ "$3" == / ]]; then echo "$ROOT_KB"; else echo "$LARGE_KB"; fi
else
  echo "Filesystem Size Used Avail Use% Mounted on"
fi
"""
FAKE_SUDO = """#!/bin/bash
echo "sudo $*" >> "$SUDO_LOG"
case "$1" in
  mkdir|chown)
    for arg in "${@:2}"; do
      if [[ "$arg" != -* && "$arg" != *:* && "$arg" != "$FAKE_ROOT"* ]]; then exit 0; fi
    done
    "$@" ;;
esac
"""
FAKE_SYSTEMCTL = """#!/bin/bash
echo "systemctl $*" >> "$SUDO_LOG"
"""


@pytest.fixture
def disk_stand_ins(tmp_path):
    """df, sudo and systemctl stand-ins on PATH; returns (bin dir, env, the sudo log)."""
    bin_dir, log, large = tmp_path / "bin", tmp_path / "sudo.log", tmp_path / "large"
    _executable(bin_dir / "df", FAKE_DF)
    _executable(bin_dir / "sudo", FAKE_SUDO)
    _executable(bin_dir / "systemctl", FAKE_SYSTEMCTL)
    large.mkdir()
    log.write_text("")
    env = {"SUDO_LOG": str(log), "FAKE_ROOT": str(tmp_path), "LARGE_DISK": str(large),
           "HOME": str(tmp_path / "home")}
    return bin_dir, env, lambda: log.read_text().splitlines()


def test_build_job_moves_the_image_and_the_caches_to_the_larger_disk(tmp_path, workflows,
                                                                     disk_stand_ins):
    bin_dir, env, sudo_log = disk_stand_ins
    large = env["LARGE_DISK"]
    (tmp_path / "home" / ".cache" / "cuwheels").mkdir(parents=True)
    rc, log, _ = run_step(workflows, "build", "Free disk space", tmp_path, bin_dir,
                          workflow="wheels-linux-cell.yml", ROOT_KB="14000000",
                          LARGE_KB="70000000", **env)
    assert rc == 0, log
    units = "docker.socket docker.service containerd.service"
    calls = sudo_log()
    order = [calls.index(c) for c in (
        "sudo docker image prune --all --force",
        "systemctl cat containerd.service",
        f"sudo systemctl stop {units}",
        f"sudo mount --bind {large}/docker /var/lib/docker",
        f"sudo mount --bind {large}/containerd /var/lib/containerd",
        f"sudo systemctl start {units}")]
    assert order == sorted(order)
    assert calls[0].startswith("sudo rm -rf /usr/share/dotnet ")
    # the compiler cache the cache steps restore and save lands on the larger disk
    job = workflows["wheels-linux-cell.yml"]["jobs"]["build"]
    _, restore = _step(job, "Restore the compiler cache")
    ccache = Path(restore["with"]["path"].replace("~", env["HOME"], 1))
    assert ccache.parent.is_symlink()
    assert ccache.resolve() == Path(large) / "cuwheels-cache" / "ccache"
    assert f"the builder image and ~/.cache/cuwheels are on {large}" in log


def test_build_job_stays_on_the_root_disk_when_it_has_more_room(tmp_path, workflows,
                                                                disk_stand_ins):
    bin_dir, env, sudo_log = disk_stand_ins
    rc, log, _ = run_step(workflows, "build", "Free disk space", tmp_path, bin_dir,
                          workflow="wheels-linux-cell.yml", ROOT_KB="70000000",
                          LARGE_KB="14000000", **env)
    assert rc == 0, log
    assert not any("systemctl" in c or "mount" in c for c in sudo_log())
    assert not (tmp_path / "home" / ".cache" / "cuwheels").exists()
    assert f"::notice title=disk::{env['LARGE_DISK']} has no more room than /" in log


def test_release_job_holds_back_wheels_on_the_larger_disk(tmp_path, workflows, disk_stand_ins):
    from tools.sitegen.generate import IndexRun, build_index
    from wheelfactory import make_wheel

    bin_dir, env, _ = disk_stand_ins
    rc, log, _ = run_step(workflows, "release", "Make room for the wheels", tmp_path, bin_dir,
                          ROOT_KB="14000000", LARGE_KB="70000000", **env)
    assert rc == 0, log
    large = Path(env["LARGE_DISK"]) / "publish"
    assert (tmp_path / "wheelhouse").resolve() == large / "wheelhouse"
    # the hold-back step, run for real: the held-back wheel moves within the larger disk
    runner_temp = tmp_path / ".runner-temp"
    published = tmp_path / "published"
    make_wheel(published, "demo", "1.0", tag="py3-none-any")
    build_index(IndexRun(wheels_dir=published, output_dir=tmp_path / "site", base_url="https://h/1",
                ledger_path=runner_temp / "ledger.json", init_ledger=True))
    again = make_wheel(tmp_path / "wheelhouse", "demo", "1.0", tag="py3-none-any")
    rc, log, outputs = run_hold_back_step(tmp_path, workflows)
    assert rc == 0, log
    assert outputs == "new=0\n"
    assert [p.name for p in (large / "held-back").iterdir()] == [again.name]


def test_publish_job_downloads_the_releases_to_the_larger_disk(tmp_path, workflows,
                                                                disk_stand_ins):
    bin_dir, env, _ = disk_stand_ins
    (tmp_path / ".runner-temp").mkdir()
    rc, log, _ = run_step(workflows, "publish", "Make room for the releases' wheels", tmp_path,
                          bin_dir, ROOT_KB="14000000", LARGE_KB="70000000", **env)
    assert rc == 0, log
    large = Path(env["LARGE_DISK"]) / "publish"
    assert (tmp_path / ".runner-temp" / "releases").resolve() == large / "releases"
    assert (tmp_path / ".runner-temp" / "held-back").resolve() == large / "held-back"


# --------------------------------------------------------------------------- the refresh workflow


def test_refresh_runs_daily_and_by_hand_and_only_on_main(workflows):
    wf = workflows["refresh.yml"]
    assert set(wf["on"]) == {"schedule", "workflow_dispatch"}  # never for a pull request
    assert len(wf["on"]["schedule"]) == 1
    assert wf["concurrency"] == {"group": "registry-refresh", "cancel-in-progress": False}
    assert list(wf["jobs"]) == ["read", "probe", "kernels", "refresh"]
    read, probe, kernels, job = (wf["jobs"][j] for j in ("read", "probe", "kernels", "refresh"))
    # Only the last job writes; the registry is read and the probes run with a read-only token.
    assert read["permissions"] == probe["permissions"] == kernels["permissions"] == {
        "contents": "read"}
    assert job["permissions"] == {"contents": "write", "pull-requests": "write",
                                  "actions": "write"}
    _, first = _step(read, "Read the registry")
    assert first["run"].startswith(".venv/bin/python -m tools.refresh --write --summary ")
    assert '--probe-plan "$RUNNER_TEMP/probes.json"' in first["run"]
    _, again = _step(job, "Read the registry")
    _, pr = _step(job, "Open or update the pull request")
    assert again["run"].startswith(".venv/bin/python -m tools.refresh --write --summary ")
    assert '--probes "$RUNNER_TEMP/probes"' in again["run"]
    # the registry is read without the token (the runner file only names the jobs' runners)
    runners_file = {"RUNNERS_FILE": "${{ vars.CUWHEELS_RUNNERS || 'recipes/runners.yaml' }}"}
    assert first["env"] == again["env"] == runners_file
    assert pr["env"] == {"GH_TOKEN": "${{ github.token }}"}


def test_refresh_probes_every_named_cell_and_writes_after_them(workflows):
    """The probe jobs are read's matrix, one per cell, against the proposed recipes; a failed
    compile doesn't fail the job (the report is the finding); the writing job runs after them,
    or without them when nothing needs a probe, and reads every report."""
    wf = workflows["refresh.yml"]
    read, probe, job = (wf["jobs"][j] for j in ("read", "probe", "refresh"))
    assert read["outputs"]["probes"] == "${{ steps.read.outputs.probes }}"
    assert probe["needs"] == "read" and probe["if"] == "needs.read.outputs.count != '0'"
    assert probe["strategy"] == {"fail-fast": False,
                                 "matrix": "${{ fromJSON(needs.read.outputs.probes) }}"}
    _, kept = _step(read, "Keep the proposed recipes for the probes")
    _, taken = _step(probe, "Take the proposed recipes")
    assert (kept["with"]["name"], kept["with"]["path"]) == ("proposed-recipes", "recipes/")
    assert (taken["with"]["name"], taken["with"]["path"]) == ("proposed-recipes", "recipes")
    _, run = _step(probe, "Probe")
    assert run["env"] == {"CELL": "${{ matrix.cell }}", "ARCHS": "${{ matrix.archs }}"}
    assert '.venv/bin/python -m tools.probe "$CELL" --archs "$ARCHS" --work "$RUNNER_TEMP/probe" ' \
           "|| status=$?" in run["run"]
    _, report = _step(probe, "Keep the report")
    assert report["with"]["name"] == "probe-${{ matrix.cell }}"
    assert report["with"]["path"] == "${{ runner.temp }}/probe/*/probe/probe.json"
    assert job["needs"] == ["read", "probe", "kernels"]
    assert job["if"].startswith("always() && needs.read.result == 'success' && ")
    _, reports = _step(job, "Take the probe reports")
    assert reports["with"] == {"pattern": "probe-*", "path": "${{ runner.temp }}/probes"}


def test_refresh_measures_each_due_kernel_record_on_its_platforms_runner(workflows):
    """read names the kernel records due (--kernel-plan); one job per record runs on the
    runner its entry names (an arm64 machine for an aarch64 record) and measures it with the
    probe, nothing compiled; a failed measurement doesn't fail the job; the writing job takes
    every measurement and writes them into the recipes (--kernel-records)."""
    wf = workflows["refresh.yml"]
    read, kernels, job = (wf["jobs"][j] for j in ("read", "kernels", "refresh"))
    _, first = _step(read, "Read the registry")
    assert '--kernel-plan "$RUNNER_TEMP/kernels.json" --runners "$RUNNERS_FILE"' in first["run"]
    assert read["outputs"]["kernels"] == "${{ steps.read.outputs.kernels }}"
    assert kernels["needs"] == "read" and kernels["if"] == "needs.read.outputs.kernel_count != '0'"
    assert kernels["runs-on"] == "${{ matrix.runner }}"
    assert kernels["strategy"] == {"fail-fast": False,
                                   "matrix": "${{ fromJSON(needs.read.outputs.kernels) }}"}
    _, taken = _step(kernels, "Take the proposed recipes")
    assert (taken["with"]["name"], taken["with"]["path"]) == ("proposed-recipes", "recipes")
    _, tools = _step(kernels, "Toolchain (the runner has no CUDA toolkit)")
    assert "make setup EXTRAS=farm" in tools["run"]       # zizmor has no aarch64 wheel
    _, run = _step(kernels, "Measure")
    assert run["env"] == {"CELL": "${{ matrix.cell }}", "STAND_IN": "${{ matrix.stand_in }}"}
    assert ('.venv/bin/python -m tools.probe "$CELL" --across-torch ${STAND_IN:+"$STAND_IN"} '
            '--work "$RUNNER_TEMP/kernels" || status=$?') in run["run"]
    _, kept = _step(kernels, "Keep the measurement")
    assert kept["with"]["name"] == "kernels-${{ matrix.cell }}"
    assert kept["with"]["path"] == "${{ runner.temp }}/kernels/*/kernels/kernels.json"
    _, measurements = _step(job, "Take the measurements")
    assert measurements["with"] == {"pattern": "kernels-*", "path": "${{ runner.temp }}/kernels"}
    _, again = _step(job, "Read the registry")
    assert '--kernel-records "$RUNNER_TEMP/kernels"' in again["run"]


def test_the_read_steps_matrix_output_is_what_the_refresh_writes(workflows, tmp_path):
    """read's step, run for real with a stand-in refresh command: the plan file becomes one
    line of JSON in GITHUB_OUTPUT, and its count."""
    _, step = _step(workflows["refresh.yml"]["jobs"]["read"], "Read the registry")
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    plan = {"include": [{"package": "a", "series": "2.16", "cell": "a-3.11-cu132", "archs": "90"}]}
    due = {"include": [{"package": "a", "cuda": "13.0", "platform": "linux_aarch64",
                        "cell": "a-3.11-cu130-aarch64", "runner": "ubuntu-24.04-arm",
                        "stand_in": ""}] * 2}
    (venv / "python").write_text(
        "#!/bin/bash\n"
        'if [[ "$1" == -m ]]; then\n'
        '  echo summary > "$RUNNER_TEMP/summary.md"\n'
        f"  echo '{json.dumps(plan)}' > \"$RUNNER_TEMP/probes.json\"\n"
        f"  echo '{json.dumps(due)}' > \"$RUNNER_TEMP/kernels.json\"\n"
        "else\n"
        f'  exec {sys.executable} "$@"\n'
        "fi\n")
    (venv / "python").chmod(0o755)
    out, summary = tmp_path / "out", tmp_path / "summary"
    env = {**os.environ, "RUNNER_TEMP": str(tmp_path), "GITHUB_OUTPUT": str(out),
           "GITHUB_STEP_SUMMARY": str(summary)}
    subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], cwd=tmp_path, env=env,
                   check=True, timeout=60)
    assert out.read_text() == (f"probes={json.dumps(plan)}\ncount=1\n"
                               f"kernels={json.dumps(due)}\nkernel_count=2\n")


FAKE_GH = """#!/bin/bash
# Stands in for the GitHub CLI: logs each call. `pr list` answers $FAKE_PR; `pr create` prints the
# new pull request's address, or fails with $FAKE_CREATE_ERROR; `pr view` says the pull request was
# closed; `pr reopen` fails when $FAKE_REOPEN_FAILS is set.
echo "gh $*" >> "$GH_LOG"
case "$1 $2" in
  "pr list") echo "${FAKE_PR:-}" ;;
  "pr create")
    if [[ -n "${FAKE_CREATE_ERROR:-}" ]]; then echo "$FAKE_CREATE_ERROR" >&2; exit 1; fi
    echo "https://github.com/o/r/pull/8" ;;
  "pr view") echo CLOSED ;;
  "pr reopen") if [[ -n "${FAKE_REOPEN_FAILS:-}" ]]; then echo "could not reopen" >&2; exit 1; fi ;;
esac
"""

#: Stands in for GitHub's rule that a workflow token may not bring a change under
#: .github/workflows/ to a branch: an update is refused when the old and new tips differ there, a
#: new branch when one of its commits that no branch has yet changes a file there.
WORKFLOW_FILE_RULE = """#!/bin/bash
zero=0000000000000000000000000000000000000000
while read -r old new ref; do
  if [[ "$ref" == refs/heads/main || "$new" == "$zero" ]]; then continue; fi
  if [[ "$old" == "$zero" ]]; then
    files=$(git rev-list "$new" --not --all | xargs --no-run-if-empty -n 1 git diff-tree --no-commit-id --name-only -r)
  else
    files=$(git diff --name-only "$old" "$new")
  fi
  workflow=$(grep -m 1 '^\\.github/workflows/' <<< "$files" || true)
  if [[ -n "$workflow" ]]; then
    echo "refusing to allow a GitHub App to create or update workflow \\`$workflow\\` without \\`workflows\\` permission" >&2
    exit 1
  fi
done
"""

#: What `gh pr create` says where the repository doesn't let GitHub Actions open pull requests.
NOT_PERMITTED = ("pull request create failed: GraphQL: GitHub Actions is not permitted to create "
                 "or approve pull requests (createPullRequest)")


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
    hook = origin / "hooks" / "pre-receive"
    hook.write_text(WORKFLOW_FILE_RULE)
    hook.chmod(0o755)
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(FAKE_GH)
    (bin_dir / "gh").chmod(0o755)

    def run(workflows, *, pr: str = "", **fake: str) -> tuple[int, str, list[str], str]:
        """Run the pull request step as Actions does: (exit status, summary, gh calls, log)."""
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
               "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r",
               "GH_LOG": str(log), "FAKE_PR": pr, "GH_TOKEN": "not-a-token",
               "BRANCH": wf["env"]["BRANCH"], "BUILD_CAP": str(wf["env"]["BUILD_CAP"]), **fake}
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                              cwd=work, env=env, capture_output=True, text=True, timeout=120)
        return (proc.returncode, summary.read_text(), log.read_text().splitlines(),
                proc.stdout + proc.stderr)
    return work, origin, run


def test_refresh_with_nothing_new_opens_nothing(refresh_repo, workflows):
    _, origin, run = refresh_repo
    rc, summary, calls, log = run(workflows)
    assert rc == 0, log
    assert calls == []
    assert "Nothing new in the registry" in summary
    assert git(origin, "branch", "--list", "--format=%(refname:short)") == "main"


def test_refresh_opens_one_pull_request_and_dispatches_its_checks(refresh_repo, workflows):
    work, origin, run = refresh_repo
    branch = workflows["refresh.yml"]["env"]["BRANCH"]
    (work / "recipes" / "causal_conv1d" / "recipe.yaml").write_text('version: "1.7.0"\n')
    rc, summary, calls, log = run(workflows)
    assert rc == 0, log
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
    rc, summary, calls, log = run(workflows, pr="7")
    assert rc == 0, log
    assert git(origin, "rev-parse", branch) == first  # not pushed again
    assert [c.split(" --title")[0] for c in calls[2:]] == ["gh pr edit 7"]  # no new dispatch
    assert "no new checks dispatched" in summary


def _next_day_after_a_workflow_change(work: Path, origin: Path, run, workflows) -> str:
    """Day 1 pushes the branch; then main changes a workflow file and day 2 has a new change.
    Returns the new main's commit."""
    recipe = work / "recipes" / "causal_conv1d" / "recipe.yaml"
    recipe.write_text('version: "1.7.0"\n')
    assert run(workflows)[0] == 0
    git(work, "switch", "--quiet", "main")
    (work / ".github" / "workflows").mkdir(parents=True)
    (work / ".github" / "workflows" / "checks.yml").write_text("name: checks\n")
    main = commit(work, "checks: a new job")
    git(work, "push", "--quiet", "origin", "HEAD:refs/heads/main")
    recipe.write_text('version: "1.7.1"\n')
    return main


def test_refresh_recreates_the_branch_when_main_changed_a_workflow_file(refresh_repo, workflows):
    work, origin, run = refresh_repo
    branch = workflows["refresh.yml"]["env"]["BRANCH"]
    main = _next_day_after_a_workflow_change(work, origin, run, workflows)
    rc, summary, calls, log = run(workflows, pr="7")
    assert rc == 0, log
    assert "refusing to allow a GitHub App to create or update workflow" in log  # it was refused
    # the branch is the new main plus one commit, which changes the recipe only
    assert git(origin, "rev-parse", f"{branch}^") == main
    assert git(origin, "diff", "--name-only", f"{branch}^", branch) == \
        "recipes/causal_conv1d/recipe.yaml"
    assert git(origin, "show", f"{branch}:recipes/causal_conv1d/recipe.yaml") == 'version: "1.7.1"'
    # the pull request, closed by the deletion, is reopened and updated; its checks dispatched
    assert [c.split(" --")[0] for c in calls[2:5]] == ["gh pr view 7", "gh pr reopen 7",
                                                       "gh pr edit 7"]
    assert calls[5] == f"gh workflow run checks.yml --ref {branch}"
    assert "created again from main" in summary


def test_refresh_replaces_a_pull_request_github_wont_reopen(refresh_repo, workflows):
    work, origin, run = refresh_repo
    branch = workflows["refresh.yml"]["env"]["BRANCH"]
    main = _next_day_after_a_workflow_change(work, origin, run, workflows)
    rc, summary, calls, log = run(workflows, pr="7", FAKE_REOPEN_FAILS="1")
    assert rc == 0, log
    assert git(origin, "rev-parse", f"{branch}^") == main
    assert calls[3] == "gh pr reopen 7"
    assert calls[4].startswith(f"gh pr create --base main --head {branch} ")
    assert calls[5].startswith("gh pr comment 7 --body Replaced by https://github.com/o/r/pull/8")


def test_refresh_stops_on_any_other_refused_push(refresh_repo, workflows):
    work, origin, run = refresh_repo
    branch = workflows["refresh.yml"]["env"]["BRANCH"]
    hook = origin / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'protected branch hook declined' >&2\nexit 1\n")
    (work / "recipes" / "causal_conv1d" / "recipe.yaml").write_text('version: "1.7.0"\n')
    rc, _, calls, log = run(workflows)
    assert rc == 1
    assert f"::error title=refresh::pushing {branch} failed" in log
    assert not any("--delete" in c or "pr create" in c for c in calls)
    assert git(origin, "branch", "--list", "--format=%(refname:short)") == "main"


def test_refresh_names_the_setting_when_actions_may_not_open_pull_requests(refresh_repo,
                                                                           workflows):
    work, origin, run = refresh_repo
    branch = workflows["refresh.yml"]["env"]["BRANCH"]
    (work / "recipes" / "causal_conv1d" / "recipe.yaml").write_text('version: "1.7.0"\n')
    rc, summary, calls, log = run(workflows, FAKE_CREATE_ERROR=NOT_PERMITTED)
    assert rc == 1
    setting = '"Allow GitHub Actions to create and approve pull requests"'
    assert f"::error title=refresh::GitHub Actions may not open pull requests in o/r: turn on " \
           f"{setting} (Settings → Actions → General → Workflow permissions)" in log
    assert "in Settings → Actions → General → Workflow permissions, tick" in summary
    assert setting in summary
    assert f"https://github.com/o/r/compare/main...{branch}" in summary
    # the change waits on the branch; nothing is dispatched for a pull request that doesn't exist
    assert git(origin, "show", f"{branch}:recipes/causal_conv1d/recipe.yaml") == 'version: "1.7.0"'
    assert not any(c.startswith("gh workflow run") for c in calls)


def test_refresh_shows_any_other_pull_request_error_in_the_summary(refresh_repo, workflows):
    work, _, run = refresh_repo
    (work / "recipes" / "causal_conv1d" / "recipe.yaml").write_text('version: "1.7.0"\n')
    rc, summary, _, log = run(workflows, FAKE_CREATE_ERROR="HTTP 502: Bad Gateway")
    assert rc == 1
    assert "::error title=refresh::gh pr create failed" in log
    assert "HTTP 502: Bad Gateway" in summary and "Allow GitHub Actions" not in summary
