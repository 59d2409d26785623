"""tools.selector.bundle: the single file a site publishes, used the way users use it.

A site is built by tools.index from wheelfactory wheels and served by tools.serve on 127.0.0.1;
``cuwheels-select.pyz`` is downloaded from it with urllib and run by the Python of a bare venv
(nothing installed but pip), from a directory that also holds a stray ``select.py``, and by the
oldest Python >= 3.8 at hand. Every answer is given for overridden facts (torch, driver, GPU), so
it is the same on any test host.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import threading
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from wheelfactory import make_wheel

from tools import ROOT
from tools.core.site import INDEX_URL
from tools.sitegen.generate import IndexRun, build_index
from tools.selector import bundle
from tools.sitegen.server import make_server

X86 = "manylinux_2_28_x86_64"
SO = "ext_cuda.cpython-311-x86_64-linux-gnu.so"
TIMEOUT = 120


def _manifest(cuda: str, torch: str, sass: list[str]) -> dict:
    return {"schema": 1, "cuda": cuda, "torch": torch, "cxx11_abi": True,
            "archs": {"requested": sass, "found": {SO: {"sass": sass, "ptx": []}}}}


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[str]:
    """A built and served site: ext 1.0 for torch 2.8 (CUDA 12.8) and torch 2.13 (CUDA 13.0)."""
    root = tmp_path_factory.mktemp("site")
    files, site = root / "files", root / "site"
    files.mkdir()
    site.mkdir()
    make_wheel(files, "ext", "1.0", local="cu128.torch2.8", tag=f"cp311-cp311-{X86}",
               manifest=_manifest("12.8", "2.8.0", ["80", "90"]))
    make_wheel(files, "ext", "1.0", local="cu130.torch2.13", tag=f"cp311-cp311-{X86}",
               manifest=_manifest("13.0", "2.13.0", ["90", "120"]))
    report = build_index(IndexRun(wheels_dir=files, output_dir=site, base_url="/files", ledger_path=root / "ledger.json",
                         init_ledger=True))
    assert not report.rejected
    server = make_server(site, files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.url + "/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def downloaded(served, tmp_path_factory) -> Path:
    """cuwheels-select.pyz as ``curl -O`` would save it, in a directory with a stray select.py."""
    workdir = tmp_path_factory.mktemp("user")
    with urllib.request.urlopen(served + bundle.ZIPAPP_FILE, timeout=TIMEOUT) as resp:
        (workdir / bundle.ZIPAPP_FILE).write_bytes(resp.read())
    # What an earlier download left behind: it shadows the standard library's select module.
    (workdir / "select.py").write_text("raise SystemExit('the stray select.py was imported')\n")
    return workdir


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """A venv's interpreter with nothing installed but pip (no packaging, no tools)."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=TIMEOUT)
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import packaging"], capture_output=True, timeout=TIMEOUT)
    assert probe.returncode != 0, "the bare venv must not have packaging"
    return python


def _run(python: Path | str, workdir: Path, *args: str, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run([str(python), *flags, bundle.ZIPAPP_FILE, *args], cwd=workdir, capture_output=True, text=True,
                          timeout=TIMEOUT, env=env)


MACHINE = ["--python-version", "3.11", "--machine", "x86_64", "--glibc", "2.36", "--cxx11-abi", "1"]


def test_downloaded_zipapp_answers_in_a_bare_venv(served, downloaded, bare_python):
    proc = _run(bare_python, downloaded, "ext", "--index", served, "--json", *MACHINE,
                "--torch-version", "2.8.0+cu128", "--cuda-driver", "570.86.10", "--sm", "90")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["index_url"] == served + "cu128/torch2.8/simple/"
    assert answer["filename"] == f"ext-1.0+cu128.torch2.8-cp311-cp311-{X86}.whl"
    assert answer["pip"] == f'pip install "ext==1.0+cu128.torch2.8" --extra-index-url {served}cu128/torch2.8/simple/'
    assert any("GPU arch checked against the index" in n for n in answer["notes"])


def test_downloaded_zipapp_reads_the_driver_floor_from_the_site(served, downloaded, bare_python):
    """CUDA 13.0 needs driver 580 (recipes/table.yaml, published as selector.json): 570 is refused."""
    proc = _run(bare_python, downloaded, "ext", "--index", served, "--json", *MACHINE,
                "--torch-version", "2.13.0+cu130", "--cuda-driver", "570.86.10", "--sm", "90")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    answer = json.loads(proc.stdout)
    assert "needs NVIDIA driver >= 580; this machine's driver is 570.86.10" in answer["reason"]


def test_downloaded_zipapp_defaults_to_the_projects_index(downloaded, bare_python):
    """The archive carries tools.core.site: --help names its INDEX_URL as the default --index
    (the answers above name a 127.0.0.1 index explicitly, which still wins)."""
    proc = _run(bare_python, downloaded, "--help")
    assert proc.returncode == 0, proc.stderr
    assert f"(default: $CUWHEELS_INDEX, else {INDEX_URL}" in " ".join(proc.stdout.split())
    with zipfile.ZipFile(downloaded / bundle.ZIPAPP_FILE) as zf:
        assert zf.read("tools/core/site.py") == (ROOT / "tools" / "core" / "site.py").read_bytes()


def test_downloaded_zipapp_exit_status_for_an_unreachable_index(downloaded, bare_python):
    proc = _run(bare_python, downloaded, "ext", "--index", "http://127.0.0.1:9/", "--timeout", "5",
                "--torch-version", "2.8.0+cu128", "--sm", "none", "--cuda-driver", "12.8")
    assert proc.returncode == 3 and "index error" in proc.stderr


def test_oldest_python_runs_it_isolated(served, downloaded):
    """Python 3.8 where one is installed (pyenv), else this one; -I: nothing from the environment."""
    pythons = sorted(Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")).glob("versions/3.8*/bin/python3.8"))
    python = str(pythons[0]) if pythons else sys.executable
    proc = _run(python, downloaded, "ext", "--index", served, "--json", *MACHINE,
                "--torch-version", "2.13.0+cu130", "--cuda-driver", "580.65.06", "--sm", "12.0", flags=("-I",))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["index_url"] == served + "cu130/torch2.13/simple/"


def test_the_archive_is_reproducible(tmp_path):
    """Built in another process from the same tree: the same bytes (no timestamps, fixed order)."""
    first = bundle.build_zipapp(tmp_path / "a.pyz")
    code = "import sys; from pathlib import Path; from tools.selector.bundle import build_zipapp; " \
           "build_zipapp(Path(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "b.pyz")], cwd=ROOT, check=True, timeout=TIMEOUT)
    assert first.read_bytes() == (tmp_path / "b.pyz").read_bytes()
    assert os.access(first, os.X_OK) and first.read_bytes().startswith(b"#!/usr/bin/env python3\n")


def test_the_archive_holds_the_selector_and_packaging_only(tmp_path):
    with zipfile.ZipFile(bundle.build_zipapp(tmp_path / "s.pyz")) as zf:
        names = zf.namelist()
        infos = zf.infolist()
    assert names == sorted(names)
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    tops = {n.split("/")[0] for n in names}
    assert tops == {"__main__.py", "tools", "packaging", next(t for t in tops if t.endswith(".dist-info"))}
    assert "tools/selector/bundle.py" not in names  # the builder is not part of what it builds
    assert {"tools/core/variant.py", "tools/core/symbols.py", "tools/core/manifest.py",
            "tools/selector/cli.py", "packaging/tags.py"} <= set(names)
    # the whole core package, and nothing else of tools outside the selector
    assert {n for n in names if n.startswith("tools/") and not n.startswith("tools/selector/")} == {
        "tools/__init__.py", *(f"tools/core/{p.name}" for p in (ROOT / "tools" / "core").glob("*.py"))}


def test_shipped_modules_import_only_what_the_archive_holds():
    """No yaml, jinja2, elftools or other tools module: the archive must run with Python alone."""
    shipped = [ROOT / "tools" / "__init__.py", *(ROOT / "tools" / "core").glob("*.py")]
    shipped += [p for p in (ROOT / "tools" / "selector").glob("*.py") if p.name != "bundle.py"]
    allowed_tools = {"tools.core", "tools.selector"}
    for path in shipped:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: resolve against the module's package
                    package = {"selector": "tools.selector", "core": "tools.core"}.get(path.parent.name, "tools")
                    base = package.rsplit(".", node.level - 1)[0]
                    names = [f"{base}.{node.module}" if node.module else base]
                else:
                    names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                ok = top in sys.stdlib_module_names or top in ("__future__", "packaging") or any(
                    name == t or name.startswith(t + ".") for t in allowed_tools)
                assert ok, f"{path.relative_to(ROOT)} imports {name}"
