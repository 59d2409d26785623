"""Build the stabletiny fixture (torch's stable ABI) for real, and import it under several torches.

    from stabletiny_support import shared_stabletiny
    builds = shared_stabletiny(tmp_path_factory)   # builds.good, builds.newer: wheels

stabletiny is CPU code compiled with g++ (no nvcc) against the registry's torch 2.13.0, the torch
the tinyext tests already install (uv hard-links it from its cache). It is built twice in one
build venv: with ``TORCH_TARGET_VERSION`` 2.11 (``good``: claims torch 2.11 and newer), and with
no target (``newer``: torch 2.13's headers then call shim functions torch 2.11 lacks). About
half a minute per build on 2 cores.

``import_venv("2.11.0")`` is a venv holding the registry's torch 2.11.0 (the second series; a
download of about 0.5 GB the first time, hard links after), into which a test installs a wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tools.pipeline import venvs as pyenv

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "stabletiny"
PYTHON = "3.11"
#: The torch that builds the fixture, and the oldest series the good build claims.
BUILD_TORCH = "2.13.0"
TARGET = "2.11"


def build_wheel(venv_python: Path, out: Path, *, target: str, workdir: Path) -> Path:
    """Build stabletiny with ``STABLETINY_TORCH_TARGET=target`` into ``out``; return the wheel."""
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env.update({"STABLETINY_TORCH_TARGET": target, "MAX_JOBS": "2",
                "PATH": os.pathsep.join([str(venv_python.parent), env.get("PATH", "")]),
                "SOURCE_DATE_EPOCH": "1577836800"})
    # A copy of the source per build: setuptools writes build/ and *.egg-info into the tree.
    src = workdir / f"src-{target or 'none'}"
    subprocess.run(["cp", "-r", str(FIXTURE), str(src)], check=True)
    # --isolated: pip's own config must not matter; --no-cache-dir: never reuse a cached wheel.
    cmd = [str(venv_python), "-m", "pip", "--isolated", "wheel", "--no-build-isolation",
           "--no-deps", "--no-cache-dir", "-w", str(out), str(src)]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    log = workdir / f"build-{target or 'none'}.log"
    log.write_text(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n"
                   f"# pip wheel took {time.monotonic() - start:.0f} s\n")
    wheels = sorted(out.glob("stabletiny-*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise AssertionError(f"building stabletiny failed (log: {log}):\n{tail}")
    return wheels[0]


@dataclass(frozen=True)
class StabletinyBuilds:
    """The two builds: ``good`` targets torch 2.11, ``newer`` takes torch 2.13's own shim."""

    good: Path
    newer: Path
    seconds: float


_SHARED: dict[str, StabletinyBuilds] = {}


def shared_stabletiny(tmp_path_factory) -> StabletinyBuilds:
    """Both stabletiny builds for this test process: made by the first caller, reused after."""
    if "builds" not in _SHARED:
        start = time.monotonic()
        work = tmp_path_factory.mktemp("stabletiny")
        python = pyenv.create_venv(work / "build-venv", PYTHON, seed=True)
        pyenv.install(python, [f"torch=={BUILD_TORCH}", "setuptools", "wheel", "ninja"],
                      log=work / "build-venv.log", what="the stabletiny build environment")
        good = build_wheel(python, work / "good", target=TARGET, workdir=work)
        newer = build_wheel(python, work / "newer", target="", workdir=work)
        _SHARED["builds"] = StabletinyBuilds(good, newer, time.monotonic() - start)
    return _SHARED["builds"]


def import_in(wheel: Path, torch_version: str, workdir: Path) -> subprocess.CompletedProcess:
    """Install ``wheel`` next to the registry's torch ``torch_version`` in a fresh venv and run
    ``stabletiny.add_one`` there; the finished process (the caller asserts on it)."""
    python = pyenv.create_venv(workdir / f"venv-torch{torch_version}", PYTHON)
    pyenv.install(python, [f"torch=={torch_version}", str(wheel)],
                  log=workdir / f"venv-torch{torch_version}.log",
                  what=f"{wheel.name} with torch {torch_version}")
    script = ("import torch, stabletiny; x = torch.arange(4, dtype=torch.float32); "
              "print(torch.__version__, stabletiny.add_one(x).tolist())")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(python), "-c", script], capture_output=True, text=True,
                          cwd=workdir, env=env, timeout=600)


if __name__ == "__main__":  # a quick manual run: python tests/stabletiny_support.py DIR
    import tempfile

    class _Factory:
        def mktemp(self, name):
            return Path(tempfile.mkdtemp(prefix=name, dir=sys.argv[1] if len(sys.argv) > 1 else None))

    print(shared_stabletiny(_Factory()))
