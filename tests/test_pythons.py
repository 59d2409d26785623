"""tools.pipeline.pythons: a cell's CPython found wherever people keep one.

Fake layouts in tmp dirs with real executables: this test's own interpreter linked into a PATH
folder, a pyenv root whose version isn't active (its shim answers "command not found"), uv's
managed-Python folder, the manylinux /opt/python tree; and a real ``uv python install`` from a
download list served on 127.0.0.1. What is not a usable CPython of the version (another
version, PyPy, free-threaded, a venv, no headers, a failing shim, not a Python) is refused, and
the error lists every place and why.
"""

from __future__ import annotations

import http.server
import json
import platform
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from tools.core.errors import ToolchainError
from tools.hostplat import linux, windows
from tools.pipeline.pythons import OPT_PYTHON, _on_path as on_path, ask, find_cpython
from tools.pipeline.venvs import uv_bin

#: This interpreter's version, and the real (non-venv) interpreter of it the fakes link to.
HERE = "%d.%d" % sys.version_info[:2]
FULL = platform.python_version()
REAL = Path(sys.base_prefix) / "bin" / f"python{HERE}"
TAG = "cp" + HERE.replace(".", "")


def _link(path: Path, target: Path = REAL) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


def _answers(path: Path, **changes) -> Path:
    """An executable that answers the search's question as a Python with ``changes`` would."""
    info = {"impl": "cpython", "version": HERE, "venv": False, "free_threaded": False,
            "headers": True, "executable": str(path), **changes}
    return _script(path, f"echo '{json.dumps(info)}'\n")


def _shim(path: Path) -> Path:
    """pyenv's shim of a version that isn't active."""
    name = path.name
    return _script(path, f"echo 'pyenv: {name}: command not found' >&2\nexit 127\n")


def _environ(root: Path, **extra: str) -> dict[str, str]:
    """A machine whose every place is under ``root`` and empty unless a layout fills it."""
    (root / "bin").mkdir(parents=True, exist_ok=True)
    return {"PATH": str(root / "bin"), "HOME": str(root / "home"),
            "PYENV_ROOT": str(root / "pyenv"), "UV_PYTHON_INSTALL_DIR": str(root / "uv"),
            "UV_PYTHON_BIN_DIR": str(root / "uv-bin"), "UV_CACHE_DIR": str(root / "uv-cache"),
            "UV_PYTHON_DOWNLOADS": "never", **extra}


def _find(root: Path, environ: dict[str, str], **kwargs):
    return find_cpython(HERE, uv_bin(), environ, opt_python=root / "opt" / "python", **kwargs)


# --------------------------------------------------------------------------- where it is found


def _on_path(root):
    return _link(root / "bin" / f"python{HERE}")


def _python3_on_path(root):
    return _link(root / "bin" / "python3")


def _pyenv_not_active(root):
    _shim(root / "bin" / f"python{HERE}")         # what PATH holds: the shim
    return _link(root / "pyenv" / "versions" / FULL / "bin" / f"python{HERE}")


def _pyenv_newest_first(root):
    _script(root / "pyenv" / "versions" / f"{HERE}.0" / "bin" / f"python{HERE}", "exit 1\n")
    return _link(root / "pyenv" / "versions" / f"{HERE}.99" / "bin" / f"python{HERE}")


def _uv_managed(root):
    machine = platform.machine()
    return _link(root / "uv" / f"cpython-{FULL}-linux-{machine}-gnu" / "bin" / f"python{HERE}")


def _manylinux(root):
    return _link(root / "opt" / "python" / f"{TAG}-{TAG}" / "bin" / "python")


def _path_before_pyenv(root):
    _pyenv_not_active(root)
    return _python3_on_path(root)


@pytest.mark.parametrize("layout,place", [
    (_on_path, "PATH"),
    (_python3_on_path, "PATH"),
    (_pyenv_not_active, "pyenv ("),
    (_pyenv_newest_first, "pyenv ("),
    (_uv_managed, "uv's managed Pythons"),
    (_manylinux, "the manylinux layout"),
    (_path_before_pyenv, "PATH"),
])
def test_found_where_it_is_kept(tmp_path, layout, place):
    expected = layout(tmp_path)
    found = _find(tmp_path, _environ(tmp_path))
    assert found.place.startswith(place)
    # the interpreter the candidate runs: this one's, reached through the layout's path
    assert Path(found.executable).resolve() == REAL.resolve()
    if place != "uv's managed Pythons":
        assert found.executable == str(expected)


def test_on_windows_path_holds_python_exe(tmp_path):
    """A Windows PATH holds python.exe (setup-python's, python.org's); the same names without
    .exe are what POSIX has."""
    for name in ("python.exe", "python3"):
        (tmp_path / name).write_text("")
        (tmp_path / name).chmod(0o755)
    assert on_path(HERE, str(tmp_path), host=windows) == [tmp_path / "python.exe"]
    assert on_path(HERE, str(tmp_path), host=linux) == [tmp_path / "python3"]


def test_the_default_manylinux_root():
    assert OPT_PYTHON == Path("/opt/python")


# --------------------------------------------------------------------------- what is refused


@pytest.mark.parametrize("make,why", [
    (lambda p: _shim(p), f"exit 127: pyenv: python{HERE}: command not found"),
    (lambda p: _answers(p, version="3.99"), "cpython 3.99"),
    (lambda p: _answers(p, impl="pypy"), f"pypy {HERE}"),
    (lambda p: _answers(p, free_threaded=True), "free-threaded"),
    (lambda p: _answers(p, venv=True), "a virtual environment"),
    (lambda p: _answers(p, headers=False), f"no Python.h (its headers: your distribution's "
                                           f"python{HERE}-dev)"),
    (lambda p: _script(p, "echo hello\n"), "not a Python that answers"),
    (lambda p: _script(p, "exit 3\n"), "exit 3: no output"),
])
def test_what_is_not_a_usable_cpython_is_refused_and_said(tmp_path, make, why):
    candidate = make(tmp_path / "bin" / f"python{HERE}")
    assert ask(candidate, HERE) == (None, why)
    with pytest.raises(ToolchainError) as info:
        _find(tmp_path, _environ(tmp_path))
    assert f"  - PATH: {candidate} ({why})" in info.value.message


def test_a_real_venv_is_refused(tmp_path):
    subprocess.run([str(REAL), "-m", "venv", "--without-pip", str(tmp_path / "venv")],
                   check=True, timeout=120)
    assert ask(tmp_path / "venv" / "bin" / "python", HERE) == (None, "a virtual environment")


@pytest.mark.parametrize("downloads,install,why", [
    ("never", True, "not tried (UV_PYTHON_DOWNLOADS=never)"),
    ("automatic", False, "not tried (downloads are off for this run: an offline build, or "
                         "--no-install)"),
])
def test_none_found_lists_every_place(tmp_path, downloads, install, why):
    _shim(tmp_path / "bin" / f"python{HERE}")
    environ = _environ(tmp_path, UV_PYTHON_DOWNLOADS=downloads)
    with pytest.raises(ToolchainError) as info:
        _find(tmp_path, environ, install=install)
    lines = info.value.message.splitlines()
    assert lines[0] == f"Python {HERE} is not installed on this machine; looked in:"
    assert lines[1] == (f"  - PATH: {tmp_path}/bin/python{HERE} (exit 127: pyenv: python{HERE}"
                        ": command not found)")
    assert lines[2] == f"  - pyenv ({tmp_path}/pyenv/versions/{HERE}.*): none"
    assert lines[3].startswith("  - uv's managed Pythons (uv python find --managed-python): ")
    assert lines[4] == (f"  - the manylinux layout: {tmp_path}/opt/python/{TAG}-{TAG}/bin/python"
                        " (absent)")
    assert lines[5] == f"  - uv python install {HERE}: {why}"
    assert f"uv python install {HERE}" in info.value.hint
    assert f"pyenv install {HERE}" in info.value.hint


# --------------------------------------------------------------------------- installed by uv


@pytest.fixture
def download_list(tmp_path):
    """A download list for uv on 127.0.0.1 offering this version: an archive of the
    python-build-standalone shape whose interpreter runs this machine's own."""
    src = tmp_path / "archive" / "python"
    _script(src / "bin" / f"python{HERE}", f'exec {REAL} "$@"\n')
    (src / "bin" / "python3").symlink_to(f"python{HERE}")
    lib = src / "lib" / f"python{HERE}"
    lib.mkdir(parents=True)
    for data in (Path(sys.base_prefix) / "lib" / f"python{HERE}").glob("_sysconfigdata_*.py"):
        (lib / data.name).write_bytes(data.read_bytes())   # uv rewrites its prefix
    served = tmp_path / "served"
    served.mkdir()
    with tarfile.open(served / "python.tar.gz", "w:gz") as tar:
        tar.add(src, arcname="python")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(served), **kwargs)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    major, minor, patch = FULL.split(".")[:3]

    def offer(versions: dict[str, str]) -> str:
        (served / "downloads.json").write_text(json.dumps({
            f"cpython-{v}-linux-{platform.machine()}-gnu": {
                "name": "cpython", "arch": {"family": platform.machine(), "variant": None},
                "os": "linux", "libc": "gnu", "major": int(v.split(".")[0]),
                "minor": int(v.split(".")[1]), "patch": int(v.split(".")[2]),
                "prerelease": "", "url": f"{base}/{archive}", "sha256": None, "variant": None}
            for v, archive in versions.items()}))
        return f"{base}/downloads.json"

    yield offer, f"{major}.{minor}.{patch}"
    server.shutdown()
    server.server_close()


def test_installed_by_uv_when_nowhere_else(tmp_path, download_list):
    offer, version = download_list
    environ = _environ(tmp_path, UV_PYTHON_DOWNLOADS="automatic",
                       UV_PYTHON_DOWNLOADS_JSON_URL=offer({version: "python.tar.gz"}))
    found = _find(tmp_path, environ)
    assert found.place == f"uv python install {HERE}"
    assert Path(found.executable).resolve() == REAL.resolve()
    assert list((tmp_path / "uv").glob(f"cpython-{version}-*"))
    # found where uv keeps it from now on, without a download
    again = _find(tmp_path, {**environ, "UV_PYTHON_DOWNLOADS": "never"})
    assert again.place.startswith("uv's managed Pythons")


def test_a_failed_uv_install_is_listed(tmp_path, download_list):
    offer, version = download_list
    environ = _environ(tmp_path, UV_PYTHON_DOWNLOADS="automatic",
                       UV_PYTHON_DOWNLOADS_JSON_URL=offer({version: "missing.tar.gz"}))
    with pytest.raises(ToolchainError) as info:
        _find(tmp_path, environ)
    last = info.value.message.splitlines()[-1]
    assert last.startswith(f"  - uv python install {HERE}: failed (") and "404" in last


# --------------------------------------------------------------------------- free-threaded (3.14t)


def test_a_free_threaded_version_takes_only_a_free_threaded_build(tmp_path):
    free = f"{HERE}t"
    # PATH's python3.Xt answering as a normal build is refused; the manylinux cpXY-cpXYt is taken
    normal = _answers(tmp_path / "bin" / f"python{free}")
    wanted = _answers(tmp_path / "opt" / "python" / f"{TAG}-{TAG}t" / "bin" / "python",
                      free_threaded=True)
    assert ask(normal, free) == (None, "not free-threaded")
    found = find_cpython(free, uv_bin(), _environ(tmp_path), opt_python=tmp_path / "opt" / "python")
    assert (found.executable, found.place) == (str(wanted), "the manylinux layout")
    # and the normal version never takes the free-threaded one
    assert ask(wanted, HERE) == (None, "free-threaded")


def test_pyenv_free_threaded_versions_are_found_by_their_t(tmp_path):
    free = f"{HERE}t"
    _answers(tmp_path / "pyenv" / "versions" / f"{FULL}" / "bin" / f"python{free}")
    taken = _answers(tmp_path / "pyenv" / "versions" / f"{FULL}t" / "bin" / f"python{free}",
                     free_threaded=True)
    found = find_cpython(free, uv_bin(), _environ(tmp_path), opt_python=tmp_path / "opt")
    assert found.executable == str(taken) and found.place.startswith("pyenv (")
    assert found.place.endswith(f"/versions/{HERE}.*t)")


def test_no_free_threaded_build_names_every_place_looked_in(tmp_path):
    with pytest.raises(ToolchainError) as info:
        find_cpython(f"{HERE}t", uv_bin(), _environ(tmp_path), opt_python=tmp_path / "opt")
    message = info.value.message
    assert f"Python {HERE}t is not installed on this machine" in message
    assert f"{tmp_path}/opt/{TAG}-{TAG}t/bin/python (absent)" in message
