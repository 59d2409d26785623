"""Build the tinyext fixture for real, and fetch another torch's libraries, for the slow-ish tests.

    from tinyext_support import build_tinyext_wheel
    wheel, venv_python = build_tinyext_wheel(tmp_path)

``build_tinyext_wheel`` makes a uv venv with Python 3.11 and the registry's torch 2.13.0 (CUDA
13.0, matching the local nvcc; uv ignores pip's CPU-torch ``find-links``), writes the tinyext
sdist and builds it with ``pip wheel --no-build-isolation`` for sm_90: about 2 minutes on 2 cores.
``shared_tinyext`` does that once per test process, for every test module that asks.

``torch_lib_dir("2.9.1")`` gives another torch's ``torch/lib`` without installing its 3 GB of
CUDA libraries: the wheel alone is downloaded (once, cached under ~/.cache/cuwheels-tests) and
only ``torch/lib/lib*.so*`` is extracted.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tools.core.errors import ToolchainError
from tools.pipeline import venvs as pyenv
from tools.pipeline.build_toolchain import find_nvcc

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: What the fixture builds with: the torch whose CUDA (13.0) matches the local nvcc.
PYTHON = "3.11"
#: The second Python the suite builds tinyext for, found wherever the machine keeps it (``.ci/run``
#: makes sure it is there: ``python -m tools.toolchain python 3.11 3.12``).
SECOND_PYTHON = "3.12"
TORCH_VERSION = "2.13.0"
ARCHS = "90"
#: Downloads that outlive a test run (override with CUWHEELS_TEST_CACHE).
CACHE_DIR = Path(os.environ.get("CUWHEELS_TEST_CACHE", Path.home() / ".cache" / "cuwheels-tests"))


def _load_sdist_maker():
    # The fixture script lives beside the fixture, not in an importable package.
    spec = importlib.util.spec_from_file_location("make_tinyext_sdist",
                                                  FIXTURES / "make_tinyext_sdist.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_sdist = _load_sdist_maker().make_sdist


def nvcc_path() -> str | None:
    """The nvcc the builds use (``tools.pipeline.build_toolchain.find_nvcc``: this machine's, else the
    CUDA 13.0 toolkit from PyPI in the cache, installed the first time), or None when there is
    none to be had."""
    try:
        return find_nvcc().path
    except ToolchainError:
        return None


def cuda_home() -> str:
    """The CUDA toolkit root for torch's build: CUDA_HOME, else the root of the nvcc the builds
    use (``find_nvcc``).

    torch guesses it from ``which nvcc``; here that may be a wrapper script in /usr/local/bin,
    so the guess (/usr/local) has no CUDA headers.
    """
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    return find_nvcc().cuda_home


def cuda_torch_venv(path: Path, *, python: str = PYTHON, torch_version: str = TORCH_VERSION
                    ) -> Path:
    """A uv venv at ``path`` with the registry's CUDA torch ``torch_version`` and tinyext's
    build requirements (setuptools, wheel, ninja, and pip from the seed); returns its python.
    Seconds once uv's cache holds torch."""
    venv_python = pyenv.create_venv(Path(path), python, seed=True)
    pyenv.install(venv_python, [f"torch=={torch_version}", "setuptools", "wheel", "ninja"],
                  log=Path(path).parent / f"{Path(path).name}.log",
                  what="the tinyext build environment")
    return venv_python


def build_tinyext_wheel(workdir: Path, *, archs: str = ARCHS, python: str = PYTHON,
                        torch_version: str = TORCH_VERSION) -> tuple[Path, Path]:
    """Build tinyext from its sdist under ``workdir``; return (wheel path, build venv's python).

    The build venv (torch, setuptools, wheel, ninja) stays, so callers can ABI-check against its
    ``torch/lib``. Raises AssertionError with the build log's tail when the build fails.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    venv_python = cuda_torch_venv(workdir / "build-venv", python=python,
                                  torch_version=torch_version)
    sdist = make_sdist(workdir / "sdist")
    out = workdir / "dist"
    out.mkdir(exist_ok=True)
    env = dict(os.environ)
    env.update({
        "TINYEXT_CUDA_ARCHS": archs,
        "MAX_JOBS": "2",                # the development machines have 2 cores
        "CUDA_HOME": cuda_home(),
        "PATH": os.pathsep.join([str(venv_python.parent), env.get("PATH", "")]),  # ninja
        "SOURCE_DATE_EPOCH": "1577836800",
    })
    env.pop("VIRTUAL_ENV", None)
    # --isolated: pip's own config (a find-links with a CPU torch) must not matter;
    # --no-cache-dir: a wheel cached by an earlier run would skip the compile under test.
    cmd = [str(venv_python), "-m", "pip", "--isolated", "wheel", "--no-build-isolation",
           "--no-deps", "--no-cache-dir", "-w", str(out), str(sdist)]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    (workdir / "build.log").write_text(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n"
                                       f"# pip wheel took {time.monotonic() - start:.0f} s\n")
    wheels = sorted(out.glob("tinyext-*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise AssertionError(f"building tinyext failed (log: {workdir / 'build.log'}):\n{tail}")
    return wheels[0], venv_python


@dataclass(frozen=True)
class TinyextBuild:
    """A finished tinyext build: the wheel, the build venv's python and its torch/lib."""

    wheel: Path
    python: Path
    seconds: float

    @property
    def torch_lib(self) -> Path:
        """``site-packages/torch/lib`` of the build venv."""
        return _site_packages(self.python) / "torch" / "lib"


def _site_packages(python: Path) -> Path:
    venv = Path(python).parent.parent
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise AssertionError(f"no site-packages under {venv}")
    return found[0]


_SHARED: dict[str, TinyextBuild] = {}


def shared_tinyext(tmp_path_factory) -> TinyextBuild:
    """The tinyext build for this test process: built by the first caller, reused after."""
    if "build" not in _SHARED:
        start = time.monotonic()
        wheel, python = build_tinyext_wheel(tmp_path_factory.mktemp("tinyext"))
        _SHARED["build"] = TinyextBuild(wheel, python, time.monotonic() - start)
    return _SHARED["build"]


def torch_lib_dir(version: str, *, python: str = PYTHON) -> Path:
    """``torch/lib`` of the registry's torch ``version`` (its libraries only), cached."""
    root = CACHE_DIR / f"torch-{version}-cp{python.replace('.', '')}"
    lib_dir = root / "torch" / "lib"
    stamp = root / "extracted.ok"
    if stamp.exists():
        return lib_dir
    root.mkdir(parents=True, exist_ok=True)
    wheels = sorted(root.glob(f"torch-{version}-*.whl"))
    if not wheels:
        # Into a scratch dir first, so an interrupted download never looks complete.
        with tempfile.TemporaryDirectory(dir=root) as scratch:
            cmd = [sys.executable, "-m", "pip", "download", "--isolated", "--no-deps",
                   f"torch=={version}", "--python-version", python, "--only-binary", ":all:",
                   "-d", scratch]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
            got = sorted(Path(scratch).glob("torch-*.whl"))
            if proc.returncode != 0 or len(got) != 1:
                raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
            wheels = [Path(shutil.move(str(got[0]), root / got[0].name))]
    with zipfile.ZipFile(wheels[0]) as zf:
        for name in zf.namelist():
            if name.startswith("torch/lib/lib") and ".so" in name.rsplit("/", 1)[-1]:
                zf.extract(name, root)
    stamp.write_text(f"{wheels[0].name}\n")
    return lib_dir
