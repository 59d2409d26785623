"""Old pips against the index: pip 22.3 to 23.1 (Debian 12's pip is 23.0.1) install from what we
serve, from the negotiating server (JSON pages) and from a static host (HTML only, as GitHub Pages
serves it).

Those pips break on the old PEP 658 key (pypa/pip#12042, #12038: ``TypeError: unhashable type:
'dict'`` on the JSON ``dist-info-metadata``, "inconsistent Name" on the HTML
``data-dist-info-metadata``), which is why PEP 714 renamed it and the pages carry only
``core-metadata``. Without it these pips download whole wheels; today's pip still reads only
``.metadata`` (tests/test_serve.py checks that on the same kind of index).

Each old pip is installed from the registry into a venv of its own (pip's cache makes the second
run cheap); the index is served on 127.0.0.1 by a thread the fixture stops.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from wheelfactory import make_wheel

from tools.sitegen.generate import IndexRun, build_index
from tools.sitegen.server import make_server

pytestmark = pytest.mark.network

ANY = "py3-none-any"
TIMEOUT = 180


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """Projects whose METADATA spells the name with ``_`` while requirements and pages use the
    normalized ``-`` (as flash_attn's and causal_conv1d's do: the HTML bug needs that), a
    dependency, and a variant index, as the real index has them."""
    root = tmp_path_factory.mktemp("old-pip-index")
    w = root / "wheels"
    make_wheel(w, "cwtest_lib", "1.0", tag=ANY)
    make_wheel(w, "cwtest_appa", "1.0", tag=ANY, requires_dist=["cwtest-lib"])
    make_wheel(w, "cwtest_ext", "1.0", local="cu130.torch2.13", tag=ANY)
    build_index(IndexRun(wheels_dir=w, output_dir=root / "site", base_url="/files",
                ledger_path=root / "ledger.json", init_ledger=True))
    return root


@pytest.fixture(scope="module", params=["negotiating", "static"])
def served(request, site) -> Iterator[str]:
    server = make_server(site / "site", site / "wheels", negotiate=request.param == "negotiating")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield server.url
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _env() -> dict[str, str]:
    # The machine's pip configuration (find-links, extra index URLs) must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


@pytest.fixture(scope="module", params=["22.3.1", "23.0.1", "23.1.2"])
def old_pip(request, tmp_path_factory) -> Path:
    """A venv whose pip is the old version (from the registry)."""
    venv = tmp_path_factory.mktemp(f"pip-{request.param}") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=TIMEOUT)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"pip=={request.param}"],
                   check=True, timeout=TIMEOUT, env=_env(), capture_output=True)
    version = subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True,
                             text=True, check=True).stdout
    assert version.startswith(f"pip {request.param} "), version
    return venv


@pytest.mark.parametrize("index, requirement, expected", [
    ("simple/", "cwtest-appa", {"cwtest_appa": "1.0", "cwtest_lib": "1.0"}),
    ("cu130/torch2.13/simple/", "cwtest-ext", {"cwtest_ext": "1.0+cu130.torch2.13"}),
])
def test_an_old_pip_installs_from_the_index(old_pip, served, index, requirement, expected):
    target = old_pip.parent / f"target-{len(os.listdir(old_pip.parent))}"
    proc = subprocess.run([str(old_pip / "bin" / "python"), "-m", "pip", "--isolated", "install",
                           "--no-cache-dir", "--no-input", "--index-url", f"{served}/{index}",
                           "--target", str(target), requirement],
                          capture_output=True, text=True, timeout=TIMEOUT, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _installed(target) == expected


def _installed(target: Path) -> dict[str, str]:
    """``{distribution: version}`` that ``pip install --target`` put into ``target``."""
    return dict(info.name[: -len(".dist-info")].split("-", 1) for info in target.glob("*.dist-info"))
