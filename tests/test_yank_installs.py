"""What a yank means to the real pip and uv, as the README says it: a yanked file is skipped for a
range; an exact pin installs it with pip, but uv only with the full local label. A yank of some
files of a version (one platform's): pip and ``uv pip install`` skip the yanked file for a range,
but ``uv lock`` keeps the version whole and ``uv sync`` installs the yanked file.

The index is built with the real index command's function and served on 127.0.0.1 by a thread
the fixture stops; no registry is needed.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from wheelfactory import installed, make_wheel

from tools.pipeline.venvs import uv_bin
from tools.sitegen.generate import IndexRun, build_index
from tools.sitegen.server import make_server

LABEL = "cu128.torch2.9"


@pytest.fixture(scope="module")
def index_url(tmp_path_factory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("yanked")
    wheels = root / "wheels"
    for version in ("1.0", "1.1"):
        make_wheel(wheels, "demo-y", version, local=LABEL, tag="py3-none-any")
    (root / "yanked.yaml").write_text(f'demo_y-1.1+{LABEL}-py3-none-any.whl: "broken"\n')
    build_index(IndexRun(wheels_dir=wheels, output_dir=root / "site", base_url="/files",
                ledger_path=root / "ledger.json", yanked_path=root / "yanked.yaml", init_ledger=True))
    server = make_server(root / "site", wheels, negotiate=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield f"{server.url}/cu128/torch2.9/simple/"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _install(client: str, index_url: str, requirement: str, tmp_path: Path) -> tuple[int, str, dict]:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = str(venv / "bin" / "python")
    if client == "pip":
        cmd = [sys.executable, "-m", "pip", "--isolated", "--python", python, "install",
               "--no-cache-dir", "--no-input", "--index-url", index_url, requirement]
    else:
        cmd = [uv_bin(), "pip", "install", "--no-config", "--no-cache", "--python", python,
               "--index-url", index_url, requirement]
    # The machine's pip and uv configuration (find-links, extra index URLs) must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    return proc.returncode, proc.stdout + proc.stderr, installed(venv)


@pytest.mark.parametrize("client, requirement, installs", [
    ("pip", "demo-y>=1.0", "1.0"),                 # a range skips the yanked 1.1
    ("uv", "demo-y>=1.0", "1.0"),
    ("pip", "demo-y==1.1", "1.1"),                 # pip: an exact pin of the public version
    ("uv", "demo-y==1.1", None),                   # uv: not enough, it refuses
    ("pip", f"demo-y==1.1+{LABEL}", "1.1"),
    ("uv", f"demo-y==1.1+{LABEL}", "1.1"),         # uv: the full local label installs it
])
def test_a_yanked_file_for_pip_and_uv(index_url, tmp_path, client, requirement, installs):
    code, output, found = _install(client, index_url, requirement, tmp_path)
    if installs is None:
        assert code != 0 and "unsatisfiable" in output, output
    else:
        assert code == 0, output
        assert found == {"demo_y": f"{installs}+{LABEL}"}


PARTIAL = "demo_p-1.1-py3-none-manylinux_2_17_x86_64.whl"  # yanked; the other 1.1 file is py3-none-any


@pytest.fixture(scope="module")
def partial(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """demo-p 1.0, and 1.1 as a linux x86_64 wheel (yanked) and a pure one: (index URL, request log)."""
    root = tmp_path_factory.mktemp("partial")
    wheels = root / "wheels"
    make_wheel(wheels, "demo-p", "1.0", tag="py3-none-any")
    make_wheel(wheels, "demo-p", "1.1", tag="py3-none-manylinux_2_17_x86_64")
    make_wheel(wheels, "demo-p", "1.1", tag="py3-none-any")
    (root / "yanked.yaml").write_text(f'{PARTIAL}: "broken on linux"\n')
    build_index(IndexRun(wheels_dir=wheels, output_dir=root / "site", base_url="/files",
                ledger_path=root / "ledger.json", yanked_path=root / "yanked.yaml", init_ledger=True))
    log = root / "requests.log"
    server = make_server(root / "site", wheels, negotiate=True, log_path=log)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield f"{server.url}/simple/", log
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _fetched(log: Path, seen: int) -> list[str]:
    """The wheels downloaded since the log had ``seen`` lines."""
    lines = log.read_text().splitlines()[seen:]
    return [line.split()[1].rsplit("/", 1)[1] for line in lines if line.split()[1].endswith(".whl")]


@pytest.mark.skipif(sys.platform != "linux" or platform.machine() != "x86_64",
                    reason="the yanked file is the one a linux x86_64 machine prefers")
@pytest.mark.parametrize("client, requirement, fetches", [
    ("pip", "demo-p>=1.0", "demo_p-1.1-py3-none-any.whl"),   # each file judged: the yanked one skipped
    ("uv", "demo-p>=1.0", "demo_p-1.1-py3-none-any.whl"),
    ("pip", "demo-p==1.1", "demo_p-1.1-py3-none-any.whl"),
    ("uv", "demo-p==1.1", PARTIAL),                          # uv: a pinned version, its best file
    ("uv lock", "demo-p>=1.0", PARTIAL),                     # uv lock + uv sync: the version is whole
])
def test_a_yank_of_one_platforms_file(partial, tmp_path, client, requirement, fetches):
    index_url, log = partial
    seen = len(log.read_text().splitlines()) if log.exists() else 0
    if client == "uv lock":
        project = tmp_path / "proj"
        project.mkdir()
        (project / "pyproject.toml").write_text(
            f'[project]\nname = "consumer"\nversion = "0"\nrequires-python = ">=3.10"\n'
            f'dependencies = ["{requirement}"]\n\n[tool.uv]\npackage = false\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
        for step in ("lock", "sync"):
            proc = subprocess.run([uv_bin(), step, "--no-cache", "--default-index", index_url, "--python",
                                   sys.executable], cwd=project, capture_output=True, text=True, timeout=120, env=env)
            assert proc.returncode == 0, proc.stderr
        assert PARTIAL in (project / "uv.lock").read_text()
        found = installed(project / ".venv")
    else:
        code, output, found = _install(client, index_url, requirement, tmp_path)
        assert code == 0, output
    assert found == {"demo_p": "1.1"}
    assert _fetched(log, seen) == [fetches]
