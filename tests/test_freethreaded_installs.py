"""Free-threaded wheels in the index: a version with a ``cp314-cp314`` and a ``cp314-cp314t`` file
for Linux x86_64, indexed by the real index step into ``cu130/torch2.14/`` and served on
127.0.0.1. The real pip and uv take the ``t`` file for a free-threaded CPython 3.14 and never for
a normal one, and the selector answers with the file that fits each.

Two kinds of test:

- resolution for a target (pip's ``--python-version 3.14 --abi cp314t``, uv's ``--python-version
  3.14t``), which needs no such interpreter and runs everywhere;
- a real free-threaded interpreter (``3.14t``, found where people keep one: PATH's
  ``python3.14t``, pyenv, uv's managed Pythons, ``/opt/python/cp314-cp314t``), in a venv of
  its own: pip and uv install into it, and the selector runs under it. On a machine without one
  these tests skip, saying every place looked in; ``uv python install 3.14t`` provides one
  where uv can download it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from wheelfactory import make_wheel

from tools import ROOT
from tools.core.errors import ToolchainError
from tools.pipeline.pythons import find_cpython
from tools.pipeline.venvs import uv_bin
from tools.sitegen.generate import IndexRun, build_index
from tools.sitegen.server import make_server, serve

TIMEOUT = 180
LABEL = "cu130.torch2.14"
VERSION = f"1.0+{LABEL}"
PLATFORM_TAG = "manylinux_2_28_x86_64"
NORMAL = f"ftdemo-{VERSION}-cp314-cp314-{PLATFORM_TAG}.whl"
FREE = f"ftdemo-{VERSION}-cp314-cp314t-{PLATFORM_TAG}.whl"


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> Iterator[str]:
    """The served site's root; the wheels are in ``cu130/torch2.14/``."""
    root = tmp_path_factory.mktemp("freethreaded")
    for abi in ("cp314", "cp314t"):
        # each file says which build it is, so an install shows which one was taken
        make_wheel(root / "files", "ftdemo", "1.0", local=LABEL, tag=f"cp314-{abi}-{PLATFORM_TAG}",
                   requires_python=">=3.10", extra_files={"ftdemo/built_for.py": f"ABI = {abi!r}\n".encode()})
    report = build_index(IndexRun(wheels_dir=root / "files", output_dir=root / "site",
                                  base_url="/files", ledger_path=root / "ledger.json",
                                  init_ledger=True))
    assert not report.rejected, report.rejected
    server = make_server(root / "site", root / "files")
    # Stops by itself, should the fixture's own shutdown never come.
    thread = threading.Thread(target=serve, args=(server,), kwargs={"exit_after": 900}, daemon=True)
    thread.start()
    yield server.url
    server.shutdown()
    thread.join(timeout=10)


def _simple(url: str) -> str:
    return f"{url}/cu130/torch2.14/simple/"


def _env() -> dict[str, str]:
    # The machine's pip and uv configuration (find-links, extra index URLs) must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VIRTUAL_ENV"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
               UV_PYTHON_DOWNLOADS="never")
    return env


def _run(cmd: list, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=TIMEOUT,
                          env=_env(), **kw)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout}{proc.stderr}"
    return proc


def test_both_files_are_listed_in_the_variant_index(url):
    import urllib.request
    with urllib.request.urlopen(_simple(url) + "ftdemo/", timeout=30) as r:
        page = r.read().decode()
    assert NORMAL in page and FREE in page
    # and the front page's picker offers each as its own Python, in order
    with urllib.request.urlopen(f"{url}/", timeout=30) as r:
        home = r.read().decode()
    assert ('"wheels":[[0,"linux_x86_64","3.14","ftdemo","glibc 2.28 or newer"],'
            '[0,"linux_x86_64","3.14t","ftdemo","glibc 2.28 or newer"]]') in home


@pytest.mark.parametrize("abi, expected", [("cp314t", FREE), ("cp314", NORMAL), (None, NORMAL)])
def test_pip_downloads_the_file_of_the_abi_it_is_asked_for(url, tmp_path, abi, expected):
    cmd = [sys.executable, "-m", "pip", "--isolated", "download", "--no-cache-dir", "--no-input",
           "--no-deps", "--only-binary", ":all:", "--platform", PLATFORM_TAG, "--python-version",
           "3.14", "--index-url", _simple(url), "--dest", tmp_path, f"ftdemo=={VERSION}"]
    if abi:
        cmd[cmd.index("--dest"):cmd.index("--dest")] = ["--abi", abi]
    _run(cmd)
    assert [p.name for p in tmp_path.iterdir()] == [expected]


def test_uv_for_a_normal_3_14_target_installs_the_normal_file(url, tmp_path):
    target = tmp_path / "target"
    _run([uv_bin(), "pip", "install", "--no-config", "--no-cache", "--no-deps", "--python",
          sys.executable, "--python-platform", "x86_64-manylinux_2_28", "--python-version", "3.14",
          "--target", target, "--index-url", _simple(url), f"ftdemo=={VERSION}"])
    assert _built_for(target) == NORMAL


def test_uv_takes_no_t_in_python_version(url, tmp_path):
    """What the selector's uv command rests on: uv takes a free-threaded ABI only from the
    interpreter it runs (``--python 3.14t``), never from ``--python-version``."""
    proc = subprocess.run([uv_bin(), "pip", "install", "--no-config", "--no-cache", "--no-deps",
                           "--python", sys.executable, "--python-platform",
                           "x86_64-manylinux_2_28", "--python-version", "3.14t", "--target",
                           str(tmp_path / "target"), "--index-url", _simple(url),
                           f"ftdemo=={VERSION}"],
                          capture_output=True, text=True, timeout=TIMEOUT, env=_env())
    assert proc.returncode == 2 and "`3.14t` could not be parsed" in proc.stderr, proc.stderr


def test_a_normal_python_never_takes_the_free_threaded_file(url, tmp_path):
    """With only the ``t`` file in the index, a normal 3.14 finds nothing (pip and uv)."""
    only = tmp_path / "only"
    only.mkdir()
    cmd = [sys.executable, "-m", "pip", "--isolated", "download", "--no-cache-dir", "--no-input",
           "--no-deps", "--only-binary", ":all:", "--platform", PLATFORM_TAG, "--python-version",
           "3.14", "--index-url", _simple(url), "--dest", only, f"ftdemo=={VERSION}"]
    # the index has both: asking for the normal ABI explicitly never yields the t file
    _run([*cmd[:cmd.index("--dest")], "--abi", "cp314", *cmd[cmd.index("--dest"):]])
    assert [p.name for p in only.iterdir()] == [NORMAL]
    # and the selector's answer for each (the interpreter given, not run): the file that fits
    for python, expected in (("3.14t", FREE), ("3.14", NORMAL)):
        assert _select(url, sys.executable, "--python-version", python)["filename"] == expected


def _built_for(target: Path) -> str:
    """The file that was installed under ``target``, by the module it carries."""
    text = (target / "ftdemo" / "built_for.py").read_text()
    return FREE if "cp314t" in text else NORMAL


def _select(url: str, python: str, *args: str) -> dict:
    proc = _run([python, "-m", "tools.selector", "ftdemo", "--index", url + "/", "--json",
                 "--torch-version", "2.14.1+cu130", "--cxx11-abi", "1",
                 "--cuda-driver", "580.65.06", "--sm", "none", *args], cwd=ROOT)
    return json.loads(proc.stdout)


# --------------------------------------------------------------------------- a real 3.14t


@pytest.fixture(scope="module")
def free_python(tmp_path_factory) -> str:
    """A venv of a real free-threaded CPython 3.14 (none is downloaded: UV_PYTHON_DOWNLOADS=never
    is how a test run stays off the network beyond the registries)."""
    try:
        found = find_cpython("3.14t", uv_bin(), _env(), install=False)
    except ToolchainError as exc:
        pytest.skip(f"no free-threaded CPython 3.14 on this machine: {exc}")
    venv = tmp_path_factory.mktemp("ftvenv") / "venv"
    _run([found.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    said = _run([python, "-c", "import sys, sysconfig; print(sysconfig.get_config_var("
                 "'Py_GIL_DISABLED'), sys._is_gil_enabled())"]).stdout.split()
    assert said == ["1", "False"], said   # free-threaded, the GIL off
    return str(python)


def test_pip_on_a_free_threaded_python_installs_the_t_file(url, free_python):
    _run([free_python, "-m", "pip", "--isolated", "install", "--no-cache-dir", "--no-deps",
          "--index-url", _simple(url), f"ftdemo=={VERSION}"])
    said = _run([free_python, "-c", "import ftdemo.built_for as b; print(b.ABI)"]).stdout.strip()
    assert said == "cp314t"
    _run([free_python, "-m", "pip", "uninstall", "-y", "ftdemo"])


def test_uv_on_a_free_threaded_python_installs_the_t_file(url, free_python, tmp_path):
    target = tmp_path / "target"
    _run([uv_bin(), "pip", "install", "--no-config", "--no-cache", "--no-deps", "--python",
          free_python, "--target", target, "--index-url", _simple(url), f"ftdemo=={VERSION}"])
    assert _built_for(target) == FREE


def test_the_selector_run_by_a_free_threaded_python_answers_with_the_t_file(url, free_python,
                                                                            tmp_path):
    """The site's selector (its one-file download, as users run it), run by the free-threaded
    interpreter, detects it and answers with the t file."""
    import urllib.request

    from tools.selector.bundle import ZIPAPP_FILE
    with urllib.request.urlopen(f"{url}/{ZIPAPP_FILE}", timeout=30) as r:
        (tmp_path / ZIPAPP_FILE).write_bytes(r.read())
    proc = _run([free_python, ZIPAPP_FILE, "ftdemo", "--index", url + "/", "--json",
                 "--torch-version", "2.14.1+cu130", "--cxx11-abi", "1", "--cuda-driver",
                 "580.65.06", "--sm", "none"], cwd=tmp_path)
    doc = json.loads(proc.stdout)
    assert doc["machine"]["python_tag"] == "cp314t"
    assert doc["filename"] == FREE


def test_the_selectors_uv_command_for_a_free_threaded_machine_runs(url, free_python, tmp_path):
    """The command the selector prints to fetch a free-threaded machine's file (``--python
    3.14t``: uv finds the free-threaded interpreter on PATH) takes the t file."""
    from tools.selector import detect
    from tools.selector.target import DOWNLOAD_DIR, download_commands

    m = detect.detect_machine({"python_version": "3.14t", "torch_version": "2.14.1+cu130",
                               "cxx11_abi": "1", "cuda_driver": "580.65.06", "sm": "none",
                               "platform": "linux_x86_64"}, allow_import=False)
    uv = download_commands("ftdemo", VERSION, _simple(url), PLATFORM_TAG, m)["uv"]
    assert "--python 3.14t" in uv
    words = ["--index-url" if w == "--extra-index-url" else w for w in shlex.split(uv)]
    env = {**_env(), "PATH": f"{Path(free_python).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([uv_bin(), "pip", "install", "--no-config", "--no-cache", *words[3:]],
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _built_for(tmp_path / DOWNLOAD_DIR) == FREE
