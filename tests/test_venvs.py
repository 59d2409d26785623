"""tools.pipeline.venvs: real venvs made by the project's uv for this Python, wheels installed
into them offline from a local wheelhouse, and the failures named; and the tinyext fixture built
for a second Python, found wherever this machine keeps it (where each place is searched:
tests/test_pythons.py)."""

from __future__ import annotations

import subprocess
import sys
import time
import zipfile

import pytest

from tinyext_support import PYTHON, SECOND_PYTHON, build_tinyext_wheel, nvcc_path
from tools.core.errors import ToolchainError
from tools.hostplat import linux, windows
from tools.pipeline.venvs import _uv_env, create_venv, find_python, install, uv_bin, venv_python
from wheelfactory import installed, make_wheel

#: This interpreter's version: the one Python every test machine is sure to have.
HERE = "%d.%d" % sys.version_info[:2]
#: The wheel tag this Python installs: a pure wheel, so no platform is needed.
PURE = "py3-none-any"


def _version_of(python) -> str:
    return subprocess.run([str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_uv_is_found_and_runs():
    proc = subprocess.run([uv_bin(), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("uv ")


def test_uv_never_downloads_a_python_nor_uses_the_callers_venv(monkeypatch):
    monkeypatch.setenv("VIRTUAL_ENV", "/somewhere/else")
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS", "automatic")
    env = _uv_env()
    assert env["UV_PYTHON_DOWNLOADS"] == "never" and "VIRTUAL_ENV" not in env


def test_find_python():
    assert _version_of(find_python(HERE)) == HERE
    with pytest.raises(ToolchainError, match="Python 3.2 is not installed") as info:
        find_python("3.2")
    assert "pyenv install 3.2" in info.value.hint
    assert "  - pyenv (" in info.value.message and "  - uv python install 3.2: " in \
        info.value.message


@pytest.mark.parametrize("seed,has_pip", [(False, False), (True, True)])
def test_create_venv_replaces_what_was_there(tmp_path, seed, has_pip):
    path = tmp_path / "venv"
    path.mkdir()
    (path / "stale").write_text("from an earlier run")
    python = create_venv(path, HERE, seed=seed)
    assert python == path / "bin" / "python" and _version_of(python) == HERE
    assert not (path / "stale").exists()
    assert ("pip" in installed(path)) is has_pip


def test_install_offline_from_a_wheelhouse(tmp_path):
    wheels = tmp_path / "wheelhouse"
    make_wheel(wheels, "demo-dep", "1.0", tag=PURE)
    make_wheel(wheels, "demo-ext", "2.0", tag=PURE, requires_dist=["demo-dep>=1"])
    python = create_venv(tmp_path / "venv", HERE)
    log = tmp_path / "install.log"
    install(python, ["demo-ext==2.0"], find_links=(wheels,), offline=True, log=log)
    found = installed(tmp_path / "venv")
    assert (found["demo_ext"], found["demo_dep"]) == ("2.0", "1.0")
    assert log.read_text().startswith(f"$ {uv_bin()} pip install --python {python} --offline "
                                      f"--no-index --find-links {wheels} demo-ext==2.0\n")


@pytest.mark.parametrize("offline,hint", [
    (True, "the wheelhouse lacks a wheel for this Python/platform"),
    (False, "pass --wheelhouse DIR holding the wheels (and --offline)"),
])
def test_a_failed_install_quotes_uv_and_says_what_to_do(tmp_path, offline, hint):
    python = create_venv(tmp_path / "venv", HERE)
    # online or not, nothing can serve it: the index is a closed port on this machine
    with pytest.raises(ToolchainError, match=r"installing the demo \(demo-missing==9\) failed") \
            as info:
        install(python, ["demo-missing==9"], find_links=(tmp_path,), offline=offline,
                index_url="http://127.0.0.1:9/simple", what="the demo")
    assert "demo-missing" in info.value.message.split("failed:\n", 1)[1]
    assert hint in info.value.hint


@pytest.mark.cuda
@pytest.mark.network
def test_tinyext_builds_for_a_second_python(tmp_path):
    """The default suite builds for more than one Python: the second is found wherever this
    machine keeps it (a development machine's pyenv holds it without it being active), its venv
    gets the registry's torch for it, and the wheel it builds imports with that torch."""
    assert SECOND_PYTHON != PYTHON
    if nvcc_path() is None:
        pytest.skip("needs nvcc")
    try:
        interpreter = find_python(SECOND_PYTHON, install=False)
    except ToolchainError as exc:
        pytest.skip(f"{exc} (.ci/run installs it: python -m tools.toolchain python "
                    f"{SECOND_PYTHON})")
    start = time.monotonic()
    wheel, python = build_tinyext_wheel(tmp_path, python=SECOND_PYTHON)
    tag = "cp" + SECOND_PYTHON.replace(".", "")
    assert wheel.name.startswith(f"tinyext-0.1.0-{tag}-{tag}-linux_"), wheel.name
    assert _version_of(python) == SECOND_PYTHON == _version_of(interpreter)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "unpacked")
    proc = subprocess.run([str(python), "-c", "import tinyext, tinyext_cuda; "
                           "print(tinyext_cuda.__file__)"], cwd=tmp_path,
                          env={"PYTHONPATH": str(tmp_path / "unpacked"), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f".cpython-{tag[2:]}-" in proc.stdout   # the extension of that Python's ABI
    print(f"tinyext for Python {SECOND_PYTHON}: {time.monotonic() - start:.0f} s")


def test_a_venvs_interpreter_is_found_on_its_platforms_layout(tmp_path):
    assert venv_python(tmp_path / "v", host=linux) == tmp_path / "v" / "bin" / "python"
    assert venv_python(tmp_path / "v", host=windows) == tmp_path / "v" / "Scripts" / "python.exe"
    # a real venv of this machine has its interpreter where the default says
    python = create_venv(tmp_path / "real", HERE)
    assert python == venv_python(tmp_path / "real") and python.is_file()
