"""The selector against what tests/fixtures/hostile/make_selector_cases.py makes hostile: HTML
pages html.parser gives up on, a page listing another project's files, a torch, an nvidia-smi or
an error log on this machine that is a FIFO, a device or far too large, and the project's own
deployment (pages on one host, wheels on another) with and without the GPU archs in its pages.

Every run is made as users make it (``python -m tools.selector``, and the site's
``cuwheels-select.pyz`` under the oldest Python at hand for a subset) by tests/bounded.py's runner,
with tests/test_hostile_selector.py's assertions: the exit status, the words that name what was
wrong, no traceback, no raw control character, bounded time and memory. Pages and wheels are
served by the real ``python -m tools.serve`` on 127.0.0.1, each stopping by itself
(``--exit-after``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bounded import Run, run_bounded

from tests.fixtures.hostile.make_pages import MACHINE, PROJECT, RAW_CONTROLS, write_cases
from tests.fixtures.hostile.make_selector_cases import (
    LOCAL_READS, LOG_ERROR, elsewhere_wheels, make_local_read, page_cases,
)
from tests.test_hostile_selector import (  # noqa: F401 (pyz: a fixture used by name)
    ADDRESS_SPACE, RUN_LIMIT, assert_refused_well, pyz, selector, serve,
)
from tools import ROOT
from tools.sitegen.generate import IndexRun, build_index

#: The page cases, by name (their URLs are relative: nothing to fill in).
CASES = {c.name: c for c in page_cases()}
#: The cases also run by the zipapp.
PYZ_CASES = ["html-marked-section-digit", "html-marked-section-escape", "other-project-json", "other-project-html"]
PYZ_READS = ["smi-1200mb", "error-file-fifo", "error-file-large"]


def _machine(python: str = "3.11", torch: str = "2.8.0+cu128") -> list[str]:
    """make_pages.MACHINE with another Python or torch."""
    args = list(MACHINE)
    args[args.index("--python-version") + 1] = python
    args[args.index("--torch-version") + 1] = torch
    return args


def run_selector(cmd: list[str], *, pythonpath: tuple[Path, ...] = (), path: Path | None = None) -> Run:
    """Run ``cmd`` with a clean environment (no proxy, nothing of this process's PYTHONPATH) under
    ADDRESS_SPACE, ``pythonpath`` after the repository and ``path`` first on PATH; killed after
    RUN_LIMIT seconds."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), *map(str, pythonpath)]), PYTHONDONTWRITEBYTECODE="1")
    if path is not None:
        env["PATH"] = f"{path}{os.pathsep}{env.get('PATH', '')}"
    return run_bounded(cmd, seconds=RUN_LIMIT, address_space=ADDRESS_SPACE, env=env)


# --------------------------------------------------------------------------- pages


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[str]:
    """Every page case, served by tools.serve (wheels at /files/<case>/)."""
    tree = tmp_path_factory.mktemp("pages")
    write_cases(tree, list(CASES.values()))
    with serve(tree, tree / "_files") as url:
        yield url


def _runs(names: list[str], subset: list[str]) -> list:
    return [pytest.param(n, "module", id=f"{n}-module") for n in names] + [
        pytest.param(n, "pyz", id=f"{n}-pyz") for n in subset]


@pytest.mark.parametrize("name, runner", _runs(list(CASES), PYZ_CASES))
def test_a_hostile_page_is_named_and_bounded(name, runner, served, request):
    case = CASES[name]
    pyz_path = request.getfixturevalue("pyz") if runner == "pyz" else None
    run = run_selector(selector(runner, pyz_path, PROJECT, "--index", f"{served}{name}/", *MACHINE))
    assert_refused_well(run, exit=case.exit, expect=case.expect, stream=case.stream)


@pytest.mark.parametrize("name", ["html-marked-section-dash", "other-project-html"])
def test_a_local_site_is_read_by_the_same_rules(name, tmp_path):
    """A site directory (--index DIR) goes through the same parser and the same project rule."""
    write_cases(tmp_path, [CASES[name]])
    case = CASES[name]
    run = run_selector(selector("module", None, PROJECT, "--index", str(tmp_path / name), "--no-peek", *MACHINE))
    expect = case.expect if case.exit == 3 else case.expect.split(": it is")[0]
    assert_refused_well(run, exit=case.exit, expect=expect, stream=case.stream, seconds=15)


def test_another_projects_file_is_never_offered(served):
    """The other project's newer wheel is not the answer, in the JSON either: the note says why."""
    run = run_selector(selector("module", None, PROJECT, "--index", f"{served}other-project-json/", "--json",
                                *MACHINE))
    answer = json.loads(run.stdout)
    assert run.returncode == 0 and answer["filename"].startswith("demo_ext-1.0"), run.stdout
    assert answer["pip"].startswith(f'pip install "{PROJECT}==1.0+cu128.torch2.8"'), answer["pip"]
    assert any("it is a file of evil-ext, not of demo-ext" in n for n in answer["notes"]), answer["notes"]


# --------------------------------------------------------------------------- local reads


@pytest.fixture(scope="module")
def reads(tmp_path_factory) -> Path:
    """Every local-read case, each in its directory."""
    root = tmp_path_factory.mktemp("reads")
    for name in LOCAL_READS:
        make_local_read(root, name)
    return root


@pytest.mark.parametrize("name, runner", _runs(list(LOCAL_READS), PYZ_READS))
def test_a_hostile_local_read_is_named_and_bounded(name, runner, reads, request):
    case, where = LOCAL_READS[name], reads / name
    pyz_path = request.getfixturevalue("pyz") if runner == "pyz" else None
    args = [a.replace("{dir}", str(where)) for a in case.args]
    run = run_selector(selector(runner, pyz_path, *args), pythonpath=(where / "site",), path=where / "bin")
    assert_refused_well(run, exit=case.exit, expect=case.expect, stream=case.stream, seconds=20)


def test_the_end_of_a_large_log_is_explained(reads):
    """The doctor reads the last MiB of a 3.6 MB log: its error, at the end, is explained."""
    where = reads / "error-file-large"
    run = run_selector(selector("module", None, *[a.replace("{dir}", str(where)) for a in
                                                  LOCAL_READS["error-file-large"].args], "--json"))
    doc = json.loads(run.stdout)
    assert run.returncode == 1 and doc["kind"] == "undefined-symbol", run.stdout + run.stderr
    assert LOG_ERROR in doc["error"] and any("read the last 1 MiB" in d for d in doc["details"]), doc


def test_torch_is_still_detected_beside_an_unreadable_file(reads):
    """A version.py that can't be read leaves torch's version (its metadata) and its CUDA (its label)."""
    where = reads / "torch-version-py-fifo"
    run = run_selector(selector("module", None, *LOCAL_READS["torch-version-py-fifo"].args),
                       pythonpath=(where / "site",))
    doc = json.loads(run.stdout)
    assert doc["torch"]["version"] == "2.8.0+cu128" and doc["torch"]["cuda"] == "12.8", doc
    assert doc["torch"]["cxx11_abi"] is True, doc


# --------------------------------------------------------------------------- wheels on another host


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Iterator[dict]:
    """The project's own deployment on two servers of 127.0.0.1: the wheels on one (as release
    assets are), the pages tools.index builds for them on the other, as ``built`` (today's
    pages: ``_cuwheels`` on every file), ``older`` (the JSON without ``_cuwheels``, as another
    or an older index writes it) and ``html`` (PEP 503 pages only)."""
    root = tmp_path_factory.mktemp("deployment")
    wheels, empty, sites = root / "wheels", root / "empty", root / "sites"
    empty.mkdir()
    names = elsewhere_wheels(wheels)
    log = root / "wheels.log"
    with serve(empty, wheels, log) as wheel_host:
        build_index(IndexRun(wheels_dir=wheels, output_dir=sites / "built", base_url=f"{wheel_host}files",
                             ledger_path=root / "ledger.json", init_ledger=True))
        shutil.copytree(sites / "built", sites / "older")
        for page in (sites / "older").rglob("index.json"):
            doc = json.loads(page.read_text())
            for f in doc.get("files", []):
                f.pop("_cuwheels", None)
            page.write_text(json.dumps(doc))
        shutil.copytree(sites / "built", sites / "html")
        for page in (sites / "html").rglob("index.json"):
            page.unlink()
        with serve(sites) as pages:
            yield {"pages": pages, "wheel_host": wheel_host.rstrip("/").split("//", 1)[1], "log": log,
                   "names": names}


def test_the_published_pages_never_need_the_wheels_host(deployment):
    """Today's pages carry every wheel's archs: checked against the index, no wheel requested."""
    before = deployment["log"].read_text() if deployment["log"].exists() else ""
    run = run_selector(selector("module", None, PROJECT, "--index", f"{deployment['pages']}built/", *_machine()))
    assert_refused_well(run, exit=0, expect="GPU arch checked against the index: kernels for sm_90", stream="stdout")
    after = deployment["log"].read_text() if deployment["log"].exists() else ""
    assert ".whl" not in after[len(before):], after


def test_a_wheel_built_without_a_manifest_says_so_in_the_pages(deployment):
    """The label-only wheel (Python 3.12's): the pages say the index has no GPU code on record."""
    run = run_selector(selector("module", None, PROJECT, "--index", f"{deployment['pages']}built/",
                                *_machine("3.12")))
    assert_refused_well(run, exit=0, expect="the index records no GPU code for it", stream="stdout")


@pytest.mark.parametrize("pages, runner", [("older", "module"), ("older", "pyz"), ("html", "module")])
def test_a_wheel_on_another_host_without_archs_is_answered(pages, runner, deployment, request):
    """The issue's "done when": exit 0, the arch check skipped, and why (another host, and the
    flag that would read it)."""
    pyz_path = request.getfixturevalue("pyz") if runner == "pyz" else None
    host = deployment["wheel_host"]
    run = run_selector(selector(runner, pyz_path, PROJECT, "--index", f"{deployment['pages']}{pages}/",
                                *_machine()))
    assert_refused_well(run, exit=0, expect=f"fits: {PROJECT.replace('-', '_')}-1.0+cu128.torch2.8-cp311",
                        stream="stdout")
    assert "skipped the GPU arch check" in run.stdout and "lists no GPU archs for it" in run.stdout, run.stdout
    assert f"the wheel is on {host}, not on the index's host; pass --allow-host {host}" in run.stdout, run.stdout


def test_the_users_word_reads_the_wheel_elsewhere(deployment):
    host = deployment["wheel_host"]
    run = run_selector(selector("module", None, PROJECT, "--index", f"{deployment['pages']}older/",
                                "--allow-host", host, *_machine()))
    assert_refused_well(run, exit=0, expect="GPU arch checked against the wheel's cuwheels.json", stream="stdout")


def test_no_fit_with_the_wheels_elsewhere_is_still_an_answer(deployment):
    """Nothing for torch 2.9: the build hint (which reads a manifest where it may) goes on."""
    run = run_selector(selector("module", None, PROJECT, "--index", f"{deployment['pages']}older/",
                                *_machine(torch="2.9.0+cu128")))
    assert_refused_well(run, exit=1, expect="Build from source:", stream="stdout")


def test_pip_takes_the_answered_wheel_from_the_other_host(deployment, tmp_path):
    """The printed requirement and variant index, given to a real pip: the wheel comes from the
    wheels' host (the pages' URLs are absolute)."""
    run = run_selector(selector("module", None, PROJECT, "--index", f"{deployment['pages']}older/", "--json",
                                *_machine()))
    answer = json.loads(run.stdout)
    requirement = answer["uv"]["requirement"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_")) and not k.lower().endswith("_proxy")}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "download", "--no-deps", "--only-binary", ":all:", "--no-cache-dir",
         "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64", "--dest", str(tmp_path),
         "--index-url", answer["index_url"], requirement],
        capture_output=True, text=True, timeout=120, env={**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == [answer["filename"]]
    assert f"GET /files/{answer['filename'].replace('+', '%2B')}" in deployment["log"].read_text() or \
        f"GET /files/{answer['filename']}" in deployment["log"].read_text()
    assert not [c for c in RAW_CONTROLS if c in run.stdout]
