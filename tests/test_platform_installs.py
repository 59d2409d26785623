"""One version, three platforms, one variant index: the real pip and uv take the file of the
platform they are asked for (Linux x86_64, Linux aarch64, Windows x86_64), and this machine's
file when asked for nothing, as the selector's commands rely on.

The three wheels, each holding a stand-in binary of its platform (an ELF header with the
platform's machine, a minimal PE DLL: tests/fixtures/binaries/make_binaries.py, the same
files the index's architecture check is tested with), are indexed by the real index command into
``cu130/torch2.14/``, which the project's server serves on 127.0.0.1 from a thread that stops by
itself (and is stopped by the fixture); no registry is needed.
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
from wheelfactory import make_wheel

from tests.fixtures.binaries.make_binaries import AMD64, EM_AARCH64, EM_X86_64, elf_header, pe_dll

from tools.core.platforms import platform_name, uv_python_platform
from tools.pipeline.venvs import uv_bin
from tools.sitegen.server import make_server, serve

LABEL = "cu130.torch2.14"
VERSION = f"1.0+{LABEL}"
VARIANT = "cu130/torch2.14"
TIMEOUT = 120

#: platform name -> its wheel's platform tag
WHEELS = {
    "linux_x86_64": "manylinux_2_28_x86_64",
    "linux_aarch64": "manylinux_2_28_aarch64",
    "win_amd64": "win_amd64",
}


#: platform name -> the extension module a wheel of it would hold, as a stand-in
BINARIES = {
    "linux_x86_64": ("platdemo/_C.cpython-312-x86_64-linux-gnu.so", elf_header(EM_X86_64)),
    "linux_aarch64": ("platdemo/_C.cpython-312-aarch64-linux-gnu.so", elf_header(EM_AARCH64)),
    "win_amd64": ("platdemo/_C.cp312-win_amd64.pyd", pe_dll(AMD64)),
}


def filename(plat: str) -> str:
    """The wheel file of ``plat``."""
    return f"platdemo-{VERSION}-cp312-cp312-{WHEELS[plat]}.whl"


@pytest.fixture(scope="module")
def index_url(tmp_path_factory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("platforms")
    wheels = root / "wheels"
    for plat, tag in WHEELS.items():
        member, data = BINARIES[plat]
        path = make_wheel(wheels, "platdemo", "1.0", local=LABEL, tag=f"cp312-cp312-{tag}",
                          requires_python=">=3.12", extra_files={member: data})
        assert path.name == filename(plat)
    proc = subprocess.run(
        [sys.executable, "-m", "tools.index", "--wheels", str(wheels), "--site",
         str(root / "site"), "--base-url", "/files", "--ledger", str(root / "ledger.json"),
         "--init-ledger", "--jobs", "1"],
        capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    server = make_server(root / "site", wheels, negotiate=True)
    # Stops by itself, should the fixture's own shutdown never come.
    thread = threading.Thread(target=serve, args=(server,), kwargs={"exit_after": 600}, daemon=True)
    thread.start()
    yield f"{server.url}/{VARIANT}/simple/"
    server.shutdown()
    thread.join(timeout=10)


def _env() -> dict[str, str]:
    # The machine's pip and uv configuration (find-links, extra index URLs) must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=_env())
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout}{proc.stderr}"
    return proc.stdout + proc.stderr


def _installed_files(target: Path) -> tuple[str, set[str]]:
    """The WHEEL tag of the one platdemo installed under ``target`` and its package's files."""
    (dist_info,) = target.glob("platdemo-*.dist-info")
    tags = [line.split(": ", 1)[1] for line in (dist_info / "WHEEL").read_text().splitlines()
            if line.startswith("Tag: ")]
    return tags[0], {p.name for p in (target / "platdemo").iterdir()}


def _this_platform() -> str | None:
    return platform_name("linux" if sys.platform.startswith("linux") else sys.platform, platform.machine())


@pytest.mark.parametrize("plat", [
    "linux_x86_64",    # --platform manylinux_2_28_x86_64
    "linux_aarch64",   # --platform manylinux_2_28_aarch64
    "win_amd64",       # --platform win_amd64
    None,              # no --platform: this machine's own file
])
def test_pip_downloads_the_file_of_the_platform_it_is_asked_for(index_url, tmp_path, plat):
    # --python-version alone keeps this machine's platforms: the wheels are cp312 whatever
    # Python runs the tests.
    cmd = [sys.executable, "-m", "pip", "--isolated", "download", "--no-cache-dir", "--no-input",
           "--no-deps", "--only-binary", ":all:", "--python-version", "3.12", "--index-url",
           index_url, "--dest", str(tmp_path), f"platdemo=={VERSION}"]
    if plat is None:
        plat = _this_platform()
        if plat is None:
            pytest.skip(f"no wheels are built for this machine ({sys.platform} {platform.machine()})")
    else:
        cmd += ["--platform", WHEELS[plat]]
    _run(cmd)
    assert sorted(p.name for p in tmp_path.iterdir()) == [filename(plat)]


@pytest.mark.parametrize("plat, python_platform, selectors", [
    ("linux_x86_64", "x86_64-manylinux_2_28", True),       # what the selector prints for the file
    ("linux_aarch64", "aarch64-manylinux_2_28", True),
    ("win_amd64", "x86_64-pc-windows-msvc", True),
    ("linux_aarch64", "aarch64-unknown-linux-gnu", False),  # uv's own triple, its default glibc
])
def test_uv_installs_the_file_of_the_platform_it_is_asked_for(index_url, tmp_path, plat,
                                                               python_platform, selectors):
    if selectors:
        assert uv_python_platform(WHEELS[plat]) == python_platform
    target = tmp_path / "target"
    _run([uv_bin(), "pip", "install", "--no-config", "--no-cache", "--no-deps",
          "--python", sys.executable, "--python-platform", python_platform, "--python-version", "3.12",
          "--target", str(target), "--index-url", index_url, f"platdemo=={VERSION}"])
    tag, files = _installed_files(target)
    assert tag == f"cp312-cp312-{WHEELS[plat]}"
    assert files == {"__init__.py", Path(BINARIES[plat][0]).name}
