"""Where a cell's CPython (``3.12``) is found: every place people keep one, then uv's download.

In order:

1. PATH: every ``python3.12`` on it, then every ``python3`` and ``python``;
2. pyenv's versions directory (``$PYENV_ROOT``, else ``~/.pyenv``): each ``versions/3.12.N``,
   newest first, whether or not it is active (the ``python3.12`` shim of a version that isn't
   active answers "command not found", which is why PATH alone is not enough);
3. uv's managed Pythons (``uv python find --managed-python --system 3.12``);
4. the manylinux layout, ``/opt/python/cp312-cp312/bin/python``;
5. else ``uv python install 3.12``, unless downloads are off (``UV_PYTHON_DOWNLOADS=never``, or
   an offline build).

A free-threaded version is spelled as in a cell id, ``3.14t`` (PEP 703's build): PATH's
``python3.14t``, pyenv's ``versions/3.14.Nt``, uv's ``3.14t`` and manylinux's ``cp314-cp314t``.

Each candidate is run and asked what it is; it is taken when it is CPython of that version, of the
build asked for (free-threaded for ``3.14t``, else not), not a virtual environment, and has its
headers (``Python.h``: a build compiles against them). When none is, the error lists every place
looked in and what each held.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tools.core.errors import ToolchainError
from tools.core.variant import opt_python_dir, split_python
from tools.hostplat import HostOS, current

#: The manylinux images' Pythons: ``/opt/python/cp312-cp312/bin/python``.
OPT_PYTHON = Path("/opt/python")

#: Asked of every candidate, in syntax any Python 3 runs; a Python 2 fails it, and is refused.
QUERY = ("import json, os, sys, sysconfig; print(json.dumps({'impl': sys.implementation.name, "
         "'version': '%d.%d' % sys.version_info[:2], 'venv': sys.prefix != sys.base_prefix, "
         "'free_threaded': bool(sysconfig.get_config_var('Py_GIL_DISABLED')), "
         "'headers': os.path.isfile(os.path.join(sysconfig.get_paths()['include'], 'Python.h')),"
         " 'executable': sys.executable}))")


@dataclass(frozen=True)
class Places:
    """Where to look: PATH, pyenv's root, the manylinux root, and uv with the environment it
    runs with (which holds uv's own settings, such as ``UV_PYTHON_INSTALL_DIR``)."""

    path: str
    pyenv_root: Path
    uv: str
    opt_python: Path = OPT_PYTHON
    uv_environ: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, uv: str, environ: Mapping[str, str] | None = None,
           opt_python: Path = OPT_PYTHON) -> Places:
        """The places of ``environ`` (default: this process's environment), searched with the
        uv executable ``uv``."""
        environ = dict(os.environ if environ is None else environ)
        root = environ.get("PYENV_ROOT") or str(Path(environ.get("HOME") or Path.home())
                                                / ".pyenv")
        environ.pop("VIRTUAL_ENV", None)   # uv must not answer with the caller's venv
        return cls(environ.get("PATH", ""), Path(root), uv, opt_python, environ)


@dataclass(frozen=True)
class Found:
    """The interpreter taken: its real executable, and the place it was found in."""

    executable: str
    place: str


def ask(candidate: str | Path, version: str) -> tuple[str | None, str]:
    """Run ``candidate`` and judge it: (its real executable, "") when it is CPython
    ``version`` (``3.14t``: free-threaded; ``3.14``: not) with headers and not a venv; else
    (None, why not)."""
    version, free_threaded = split_python(version)
    try:
        proc = subprocess.run([str(candidate), "-I", "-c", QUERY], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"does not run ({exc.__class__.__name__})"
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        return None, f"exit {proc.returncode}: {said[0] if said else 'no output'}"
    try:
        info = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, "not a Python that answers"
    if info["impl"] != "cpython" or info["version"] != version:
        return None, f"{info['impl']} {info['version']}"
    if info["free_threaded"] != free_threaded:
        return None, "free-threaded" if info["free_threaded"] else "not free-threaded"
    if info["venv"]:
        return None, "a virtual environment"
    if not info["headers"]:
        return None, f"no Python.h (its headers: your distribution's python{version}-dev)"
    return info["executable"], ""


def _on_path(version: str, path: str, *, host: HostOS = current()) -> list[Path]:
    """PATH's ``python3.12``, ``python3`` and ``python`` (each ``.exe`` on a Windows ``host``)."""
    dirs = [Path(d) for d in path.split(os.pathsep) if d]
    found, seen = [], set()
    for name in (f"python{version}", "python3", "python"):
        for directory in dirs:
            exe = directory / host.exe_name(name)
            if exe.is_file() and os.access(exe, os.X_OK) and exe.resolve() not in seen:
                seen.add(exe.resolve())
                found.append(exe)
    return found


def _in_pyenv(version: str, root: Path) -> list[Path]:
    base, free_threaded = split_python(version)
    suffix = "t" if free_threaded else ""
    pattern = re.compile(rf"^{re.escape(base)}\.(\d+){suffix}$")
    versions = sorted(((int(m.group(1)), d) for d in (root / "versions").glob(f"{base}.*")
                       if (m := pattern.match(d.name))), reverse=True)
    return [d / "bin" / f"python{version}" for _, d in versions]


def _uv(places: Places, args: list[str], timeout: int, **extra: str
        ) -> subprocess.CompletedProcess:
    return subprocess.run([places.uv, *args], capture_output=True, text=True,
                          env={**places.uv_environ, **extra}, timeout=timeout)


def _uv_managed(version: str, places: Places) -> tuple[Path | None, str]:
    # --system: a virtual environment (the caller's .venv) is not a managed Python
    proc = _uv(places, ["python", "find", "--managed-python", "--system", "--no-project",
                        version], timeout=120, UV_PYTHON_DOWNLOADS="never")
    if proc.returncode != 0 or not proc.stdout.strip():
        said = proc.stderr.strip().splitlines()
        return None, said[-1] if said else f"exit {proc.returncode}"
    return Path(proc.stdout.strip().splitlines()[-1]), ""


class Search:
    """One search for CPython ``version`` over ``places``, keeping what each place held."""

    def __init__(self, version: str, places: Places):
        self.version, self.places = version, places
        self.looked: list[str] = []

    def _try(self, place: str, candidates: list[Path], empty: str) -> Found | None:
        notes = []
        for candidate in candidates:
            if not candidate.exists():
                notes.append(f"{candidate} (absent)")
                continue
            executable, why = ask(candidate, self.version)
            if executable:
                return Found(executable, place)
            notes.append(f"{candidate} ({why})")
        self.looked.append(f"{place}: {'; '.join(notes) if notes else empty}")
        return None

    def installed(self) -> Found | None:
        """The first acceptable interpreter already on this machine, or None."""
        v, p = self.version, self.places
        base, free_threaded = split_python(v)
        found = (self._try("PATH", _on_path(v, p.path),
                           f"no python{v}, python3 or python on it")
                 or self._try(f"pyenv ({p.pyenv_root}/versions/{base}.*"
                              f"{'t' if free_threaded else ''})",
                              _in_pyenv(v, p.pyenv_root), "none"))
        if found:
            return found
        managed, why = _uv_managed(v, p)
        found = self._try("uv's managed Pythons (uv python find --managed-python)",
                          [managed] if managed else [], why or "none")
        return found or self._try(
            "the manylinux layout", [p.opt_python / opt_python_dir(v) / "bin" / "python"], "")

    def download(self, allowed: bool, why_not: str) -> Found | None:
        """``uv python install`` the version, when ``allowed``; the installed one, or None."""
        place = f"uv python install {self.version}"
        if not allowed:
            self.looked.append(f"{place}: not tried ({why_not})")
            return None
        proc = _uv(self.places, ["python", "install", self.version], timeout=900)
        if proc.returncode != 0:
            said = (proc.stderr or proc.stdout).strip().splitlines()
            self.looked.append(f"{place}: failed ({said[-1] if said else proc.returncode})")
            return None
        managed, why = _uv_managed(self.version, self.places)
        return self._try(place, [managed] if managed else [], why or "none")


def find_cpython(version: str, uv: str, environ: Mapping[str, str] | None = None, *,
                 install: bool = True, opt_python: Path = OPT_PYTHON) -> Found:
    """CPython ``version`` from where people keep it (module docstring), else installed by the
    uv executable ``uv`` when ``install`` and uv's own setting allow; ToolchainError listing
    every place looked in."""
    places = Places.of(uv, environ, opt_python)
    search = Search(version, places)
    if found := search.installed():
        return found
    never = places.uv_environ.get("UV_PYTHON_DOWNLOADS") == "never"
    why_not = ("UV_PYTHON_DOWNLOADS=never" if never else
               "downloads are off for this run: an offline build, or --no-install")
    if found := search.download(install and not never, why_not):
        return found
    looked = "\n".join(f"  - {line}" for line in search.looked)
    raise ToolchainError(
        f"Python {version} is not installed on this machine; looked in:\n{looked}",
        hint=f"install python{version} with its headers (`uv python install {version}`, "
             f"`pyenv install {version}` or your distribution's python{version}-dev), or pick "
             "a cell for another Python")
