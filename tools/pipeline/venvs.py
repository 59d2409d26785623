"""Python environments for builds and smoke tests, made with uv (one shared cache).

torch with its CUDA libraries is about 4.7 GB installed; uv hard-links it from its cache, so each
cell's fresh build venv and fresh smoke-test venv cost seconds after the first download. uv
ignores pip's configuration files, so a machine-wide ``find-links`` holding a CPU torch (as on
our development machines) can't leak in. ``prepare_python`` makes a cell's build venv: its
torch and the recipe's build requirements, the torch checked against the cell. The venv's Python
is found wherever this machine keeps one, else installed by uv (``tools.pipeline.pythons``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tools.core.errors import ToolchainError
from tools.hostplat import HostOS, current
from tools.plan.cells import torch_index
from tools.plan.job import BuildJob, Inputs
from .pythons import find_cpython
from .build_toolchain import BuildPython, inspect_torch

PYPI_SIMPLE = "https://pypi.org/simple"


def uv_bin() -> str:
    """The uv executable: the pinned one from the project's environment, else PATH's."""
    try:
        from uv import find_uv_bin
        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise ToolchainError("uv is not installed", hint="run `make setup`") from None
        return found


def _uv_env() -> dict[str, str]:
    env = dict(os.environ)
    # A missing interpreter must be an error, not a 30 MB download of a different build.
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env.pop("VIRTUAL_ENV", None)
    return env


def find_python(version: str, *, install: bool = True) -> str:
    """The path of an installed CPython ``version`` (3.12) with its headers, from wherever it is
    kept (PATH, pyenv's versions, uv's managed Pythons, /opt/python), else installed by uv when
    ``install`` (``tools.pipeline.pythons``); ToolchainError listing where it looked."""
    return find_cpython(version, uv_bin(), install=install).executable


def venv_python(venv: Path, *, host: HostOS = current()) -> Path:
    """The interpreter of the virtual environment at ``venv`` in ``host``'s layout (default:
    this machine's): ``Scripts/python.exe`` on Windows, ``bin/python`` elsewhere. Every venv
    the host side makes (build, smoke test) is reached through this; the Linux images' venvs
    are Linux paths."""
    return host.venv_python(venv)


def create_venv(path: Path, python: str, *, seed: bool = False, install: bool = True) -> Path:
    """Create a fresh venv at ``path`` for Python ``python`` and return its interpreter.

    ``seed`` adds pip, setuptools and wheel (needed to build without isolation); ``install``
    lets uv download the Python when this machine has none (not for an offline build).
    """
    interpreter = find_python(python, install=install)
    if path.exists():
        shutil.rmtree(path)
    cmd = [uv_bin(), "venv", "--quiet", "--no-project", "--python", interpreter, str(path)]
    if seed:
        cmd.append("--seed")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_uv_env(), timeout=300)
    if proc.returncode != 0:
        raise ToolchainError(f"could not create a Python {python} venv at {path}: "
                             f"{proc.stderr.strip()}")
    return venv_python(path)


@dataclass(frozen=True)
class PackageSources:
    """Where an install finds its packages: an index instead of PyPI, more indexes, local
    folders of wheels, and whether only those folders (offline)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[Path, ...] = ()
    offline: bool = False


def install(python: Path, requirements: list[str], *, index_url: str | None = None,
            extra_index_urls: tuple[str, ...] = (), find_links: tuple[Path, ...] = (),
            offline: bool = False, log: Path | None = None, what: str = "packages") -> None:
    """Install ``requirements`` into the venv of ``python`` with uv.

    ``offline`` installs only from ``find_links`` (a local wheelhouse), for machines without
    internet. Output goes to ``log`` when given; a failure raises ToolchainError quoting uv.
    """
    cmd = [uv_bin(), "pip", "install", "--python", str(python)]
    if offline:
        cmd += ["--offline", "--no-index"]
    else:
        cmd += ["--index-url", index_url or PYPI_SIMPLE]
        for url in extra_index_urls:
            cmd += ["--extra-index-url", url]
        # torch's own index carries torch, not the rest of the world
        cmd += ["--index-strategy", "unsafe-best-match"] if extra_index_urls else []
    for link in find_links:
        cmd += ["--find-links", str(link)]
    cmd += requirements
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_uv_env(), timeout=3600)
    if log is not None:
        with log.open("a") as fh:
            fh.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        hint = ("pass --wheelhouse DIR holding the wheels (and --offline) on a machine without "
                "internet" if not offline else
                "the wheelhouse lacks a wheel for this Python/platform: add it")
        raise ToolchainError(f"installing {what} ({' '.join(requirements)}) failed:\n{tail}",
                             hint=hint)


def prepare_python(job: BuildJob, workdir: Path, inputs: Inputs, *, log: Path) -> BuildPython:
    """A fresh venv for the cell's Python with its torch (from the inputs' ``torch_index``,
    default the table's for its CUDA) and the recipe's build requirements (from the inputs'
    wheelhouse too; only from there when offline)."""
    cell, recipe, table = job.cell, job.recipe, job.table
    wheelhouse, offline, index_url = inputs.wheelhouse, inputs.offline, inputs.torch_index
    python = create_venv(workdir / "venv", cell.python, seed=True, install=not offline)
    extra = (index_url,) if index_url else ()
    if not index_url and (url := torch_index(cell, table)):
        extra = (url,)
    reqs = [cell.torch_requirement, *(d.requirement for d in recipe.build.requires)]
    install(python, reqs, extra_index_urls=extra, offline=offline,
            find_links=(wheelhouse,) if wheelhouse else (), log=log,
            what=f"the build requirements of {cell.id}")
    return inspect_torch(python, cell, table)
