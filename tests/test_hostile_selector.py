"""The selector against hostile indexes: every case of tests/fixtures/hostile/make_pages.py, run as
users run it (``python -m tools.selector`` and the site's ``cuwheels-select.pyz``) against the
pages served by the real ``python -m tools.serve`` on 127.0.0.1, or against the hostile HTTP
server of make_pages.py.

Each run asserts the exit status (3: "the index could not be read"), the message that names what
was wrong, no traceback, no raw escape sequence or control character on the terminal, and
bounded time and memory: the process runs under an address-space limit (RLIMIT_AS) and its peak
resident size and wall time are measured (``os.wait4``) and checked. Every server stops by
itself (``--exit-after``, the hostile server's lifetime), and every loop here is bounded.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from bounded import Run, run_bounded

from tests.fixtures.hostile.make_pages import (
    BEHAVIOURS, HUGE_WHEEL, LOCAL, MACHINE, PROJECT, RAW_CONTROLS, Case, HostileServer, make_local, page_cases, site,
    wheel_bytes, wheel_page, write_cases,
)
from tools import ROOT
from tools.selector import bundle

#: Seconds any one run may take (the slowest cases wait out a 2 s --timeout).
RUN_LIMIT = 30
#: The address space a run may map (a run that grew without bound fails here, not the machine).
ADDRESS_SPACE = 2 << 30
#: The peak resident memory a run may reach, in MiB (a page is read up to 16 MiB).
PEAK_RSS_MIB = 256
#: Seconds the servers live at most.
SERVER_LIFETIME = 900

#: The cases, built once with placeholders for their names, kinds and expectations.
CASES = {c.name: c for c in page_cases("http://127.0.0.1:1/", Path("/fifo"))}
#: One case of each kind (and each HTTP behaviour class) is also run by the zipapp.
PYZ_CASES = ["filename-number", "sass-number", "torch-invalid", "deep-files", "manifest-sass-number",
             "file-dev-zero", "file-fifo", "other-host", "userinfo", "yank-reason-escapes", "facts-deep",
             "facts-torch-platforms-escape"]
PYZ_BEHAVIOURS = ["endless-page", "drip", "redirect-other-host", "redirect-file", "wheel-huge-directory"]


def run_selector(cmd: list[str]) -> Run:
    """Run ``cmd`` with a clean environment (no proxy: 127.0.0.1 must be reached directly) under
    ADDRESS_SPACE; killed after RUN_LIMIT seconds."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    return run_bounded(cmd, seconds=RUN_LIMIT, address_space=ADDRESS_SPACE, env=env)


def assert_refused_well(run: Run, *, exit: int, expect: str, stream: str, seconds: float = RUN_LIMIT) -> None:
    """The run exited with ``exit``, said ``expect`` on ``stream``, without a traceback or a raw
    control character, in under ``seconds`` and PEAK_RSS_MIB."""
    shown = f"exit {run.returncode} in {run.seconds:.1f} s, {run.peak_rss_mib:.0f} MiB\n{run.stdout}\n{run.stderr}"
    assert run.returncode == exit, shown
    assert expect in (run.stderr if stream == "stderr" else run.stdout), shown
    assert "Traceback" not in run.stderr, shown
    assert not [c for c in RAW_CONTROLS if c in run.stdout + run.stderr], shown
    assert run.seconds < seconds, shown
    assert run.peak_rss_mib < PEAK_RSS_MIB, shown
    if exit == 3:
        assert run.stderr.startswith("index error: ") and "\n  fix: " in run.stderr, shown


# --------------------------------------------------------------------------- the servers and the runners


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The directory tools.serve serves: one site per case, wheels under ``_files``."""
    root = tmp_path_factory.mktemp("hostile")
    (root / "_files").mkdir()
    os.mkfifo(root / "fifo")
    return root


@contextmanager
def serve(site: Path, files: Path | None = None, log: Path | None = None) -> Iterator[str]:
    """``python -m tools.serve`` on ``site`` (and ``files`` at /files/); its root URL. It stops
    by itself after SERVER_LIFETIME seconds, and is stopped here."""
    cmd = [sys.executable, "-m", "tools.serve", "--site", str(site), "--port", "0", "--quiet",
           "--exit-after", str(SERVER_LIFETIME)]
    cmd += ["--wheels", str(files)] if files is not None else []
    cmd += ["--log", str(log)] if log is not None else []
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("serving http://127.0.0.1:"), line + (proc.stderr.read() if proc.poll() else "")
        yield line.split()[1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


@pytest.fixture(scope="module")
def served(tree) -> Iterator[str]:
    """``python -m tools.serve`` on the tree (it stops by itself after SERVER_LIFETIME seconds)."""
    with serve(tree, tree / "_files") as url:
        yield url


@pytest.fixture(scope="module")
def hostile(served) -> Iterator[HostileServer]:
    """The hostile server; its cross-host redirects go to tools.serve."""
    with HostileServer(other=served, lifetime=SERVER_LIFETIME) as server:
        yield server


@pytest.fixture(scope="module")
def cases(tree, hostile) -> dict[str, Case]:
    """Every page case, written into the served tree; "another host" is the hostile server."""
    made = {c.name: c for c in page_cases(hostile.url, tree / "fifo")}
    write_cases(tree, list(made.values()))
    # The wheel behaviours: a valid page on tools.serve whose wheel is on the hostile server.
    for name, behaviour in BEHAVIOURS.items():
        if behaviour.target == "wheel":
            size = HUGE_WHEEL if name == "wheel-huge-directory" else len(wheel_bytes())
            write_cases(tree, [Case(name, "http", behaviour.exit, behaviour.expect,
                                    site(wheel_page(name, hostile, size)))])
    return made


@pytest.fixture(scope="session")
def pyz(tmp_path_factory) -> Path:
    """The site's ``cuwheels-select.pyz``, built from this tree."""
    return bundle.build_zipapp(tmp_path_factory.mktemp("pyz") / bundle.ZIPAPP_FILE)


def _oldest_python() -> str:
    """Python 3.8 where one is installed (pyenv): the oldest the zipapp promises; else this one."""
    found = sorted(Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")).glob("versions/3.8*/bin/python3.8"))
    return str(found[0]) if found else sys.executable


def selector(runner: str, pyz_path: Path | None, *args: str) -> list[str]:
    """The command line of the selector as ``runner`` (``module`` or ``pyz``) runs it."""
    if runner == "pyz":
        return [_oldest_python(), "-I", str(pyz_path), *args]
    return [sys.executable, "-m", "tools.selector", *args]


def _runs(names: list[str], subset: list[str]) -> list:
    return [pytest.param(n, "module", id=f"{n}-module") for n in names] + [
        pytest.param(n, "pyz", id=f"{n}-pyz") for n in subset]


# --------------------------------------------------------------------------- the cases


@pytest.mark.parametrize("name, runner", _runs(list(CASES), PYZ_CASES))
def test_a_hostile_page_is_named_and_bounded(name, runner, cases, served, request):
    case = cases[name]
    pyz_path = request.getfixturevalue("pyz") if runner == "pyz" else None
    run = run_selector(selector(runner, pyz_path, PROJECT, "--index", f"{served}{name}/", *MACHINE, *case.args))
    assert_refused_well(run, exit=case.exit, expect=case.expect, stream=case.stream)


@pytest.mark.parametrize("name", list(LOCAL))
def test_a_local_site_reads_regular_files_only(name, tmp_path):
    run = run_selector(selector("module", None, PROJECT, "--index", str(make_local(tmp_path, name)), *MACHINE))
    assert_refused_well(run, exit=3, expect=LOCAL[name], stream="stderr", seconds=15)


@pytest.mark.parametrize("name, runner", _runs(list(BEHAVIOURS), PYZ_BEHAVIOURS))
def test_a_hostile_server_is_named_and_bounded(name, runner, cases, served, hostile, request):
    behaviour = BEHAVIOURS[name]
    pyz_path = request.getfixturevalue("pyz") if runner == "pyz" else None
    if behaviour.target == "index":
        args = ["--index", f"{hostile.url}{name}/"]
    else:
        port = hostile.url.rstrip("/").rsplit(":", 1)[1]
        args = ["--index", f"{served}{name}/", "--allow-host", f"127.0.0.1:{port}"]
    run = run_selector(selector(runner, pyz_path, PROJECT, *args, *MACHINE, *behaviour.args))
    # Cut at the limit, whatever the server does: a 2 s request timeout or deadline, plus start-up.
    assert_refused_well(run, exit=behaviour.exit, expect=behaviour.expect, stream=behaviour.stream, seconds=10)


def test_escapes_stay_escaped_in_json(cases, served):
    """--json escapes control characters itself; the reason reads as the index wrote it, made visible."""
    run = run_selector(selector("module", None, PROJECT, "--index", f"{served}yank-reason-escapes/", "--json",
                                *MACHINE))
    assert run.returncode == 1 and not [c for c in RAW_CONTROLS if c in run.stdout], run.stdout
    reasons = json.loads(run.stdout)["reasons"]
    assert any("is yanked (\\x1b]0;owned\\x07" in r for r in reasons), reasons


def test_the_wheel_another_host_serves_needs_the_users_word(cases, served, hostile):
    """The same page: not read without --allow-host (the answer stands, the arch check skipped,
    the flag named), read with it (other-host-allowed), and --no-peek reads nothing."""
    index = f"{served}other-host/"
    unasked = run_selector(selector("module", None, PROJECT, "--index", index, *MACHINE))
    assert unasked.returncode == 0 and "skipped the GPU arch check" in unasked.stdout, unasked.stdout
    assert "pass --allow-host 127.0.0.1:" in unasked.stdout, unasked.stdout
    unread = run_selector(selector("module", None, PROJECT, "--index", index, "--no-peek", *MACHINE))
    assert unread.returncode == 0 and "didn't check the GPU arch (--no-peek)" in unread.stdout, unread.stderr
