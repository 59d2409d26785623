"""Make a container engine start containers where the OCI runtime may not set resource limits.

Where root lacks ``CAP_SYS_RESOURCE`` (unprivileged CI sandboxes, some nested setups) every
container fails before it starts: podman hands runc/crun the OCI config with ``process.rlimits``
(``RLIMIT_NOFILE``, ``RLIMIT_NPROC``) and the runtime's ``setrlimit`` answers "Operation not
permitted"; ``--ulimit host`` and containers.conf's ``default_ulimits`` still write them. The
container itself needs none of them: without the entries it keeps the limits it inherits.

This module holds:

- the runtime wrapper: ``python -m tools.oci_runtime wrap RUNTIME ARGS...`` deletes
  ``process.rlimits`` from ``<bundle>/config.json`` (the bundle follows ``--bundle``/``-b``, what
  ``create``/``run`` get) and ``rlimits`` from the JSON file after ``--process``/``-p`` (what
  ``podman exec`` hands the runtime), then execs RUNTIME with the same arguments;
- :func:`install_wrapper`, which writes a script calling it to a stable path
  (``~/.cache/cuwheels/runc-no-rlimits``) for ``podman --runtime`` or containers.conf;
- :func:`check_starts`, which starts a tiny container plainly and, only if that fails with the
  rlimit error, through the wrapper, and says which worked.

It is a development machine's workaround, not the product's path: it reaches the container
backend only through the machine hook (``tools.backends.machine``, ``tools.devtools.sandbox``).

``python -m tools.oci_runtime check --engine podman --image NAME`` runs that check (``probe``
is its old name, still accepted).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.backends.machine import StartCheck
from tools.core.paths import cache_dir

#: What the runtime prints when it may not set a limit, lowercased: runc says "error setting
#: rlimit type 7: operation not permitted", crun "setrlimit `RLIMIT_NOFILE`: Operation not
#: permitted".
RLIMIT_MARKERS = ("rlimit", "not permitted")
WRAPPER_NAME = "runc-no-rlimits"

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess]


@dataclass(frozen=True)
class RuntimeFiles:
    """The JSON files a runtime command line points at, which may carry rlimits."""

    bundle: Path | None = None
    process: Path | None = None


def _option_value(args: Sequence[str], i: int, long: str, short: str) -> tuple[str, int] | None:
    """The value of ``--long V``/``--long=V``/``-s V``/``-s=V`` at ``args[i]``, and the index
    after it; None when ``args[i]`` is another argument."""
    arg = args[i]
    for name in (long, short):
        if arg == name:
            return (args[i + 1], i + 2) if i + 1 < len(args) else None
        if arg.startswith(name + "="):
            return arg[len(name) + 1:], i + 1
    return None


def parse_runtime_args(args: Sequence[str]) -> RuntimeFiles:
    """Find ``--bundle``/``-b`` and ``--process``/``-p`` in a runc or crun command line.

    Options may come in any of the forms urfave/cli and argp accept (``-b DIR``, ``-b=DIR``,
    ``--bundle DIR``, ``--bundle=DIR``). Parsing stops at ``--``: what follows is the command run
    inside the container, whose own ``-p`` is none of ours.
    """
    bundle = process = None
    i = 0
    while i < len(args):
        if args[i] == "--":
            break
        if (found := _option_value(args, i, "--bundle", "-b")) is not None:
            bundle, i = Path(found[0]), found[1]
        elif (found := _option_value(args, i, "--process", "-p")) is not None:
            process, i = Path(found[0]), found[1]
        else:
            i += 1
    return RuntimeFiles(bundle=bundle, process=process)


def _rewrite_json(path: Path, strip: Callable[[dict], bool]) -> bool:
    """Apply ``strip`` to the JSON object in ``path``; write it back (atomically, same mode) only
    if ``strip`` says it changed something. A missing or non-JSON file is left alone."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(data, dict) or not strip(data):
        return False
    # The runtime may read the file the moment we return: replace it whole, never half-written.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(data, out)
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def strip_bundle_rlimits(config: Path) -> bool:
    """Delete ``process.rlimits`` from an OCI bundle's ``config.json``; True if there were any."""
    def strip(data: dict) -> bool:
        process = data.get("process")
        return isinstance(process, dict) and process.pop("rlimits", None) is not None
    return _rewrite_json(config, strip)


def strip_process_rlimits(process: Path) -> bool:
    """Delete ``rlimits`` from an OCI process JSON (``runc exec --process``); True if any."""
    return _rewrite_json(process, lambda data: data.pop("rlimits", None) is not None)


def strip_rlimits(args: Sequence[str]) -> RuntimeFiles:
    """Strip rlimits from every file the runtime command line ``args`` points at; returns them."""
    files = parse_runtime_args(args)
    if files.bundle is not None:
        strip_bundle_rlimits(files.bundle / "config.json")
    if files.process is not None:
        strip_process_rlimits(files.process)
    return files


def wrap(runtime: str, args: Sequence[str]) -> None:
    """Strip the rlimits ``args`` point at, then replace this process with ``runtime args``."""
    strip_rlimits(args)
    os.execv(runtime, [runtime, *args])


def wrapper_script(runtime: str, python: str = sys.executable,
                   package_parent: Path = Path(__file__).resolve().parents[2]) -> str:
    """The text of the wrapper: an isolated Python running :func:`wrap` for ``runtime``.

    ``package_parent`` (the directory holding ``tools/``) goes first on ``sys.path`` so the
    wrapper works from a source checkout as well as from an installed copy; ``-I`` keeps the
    caller's PYTHONPATH and user site out of a process the engine starts.
    """
    return (f"#!{python} -I\n"
            "# Written by cuwheels (tools/devtools/rlimit_runtime.py): runs the OCI runtime without the\n"
            "# rlimits this machine does not let it set.\n"
            "import sys\n"
            f"sys.path.insert(0, {str(package_parent)!r})\n"
            "from tools.devtools.rlimit_runtime import wrap\n"
            f"wrap({runtime!r}, sys.argv[1:])\n")


def install_wrapper(runtime: str, dest: Path | None = None, *,
                    python: str = sys.executable) -> Path:
    """Write the wrapper for ``runtime`` (the engine's OCI runtime, e.g. ``/usr/bin/runc``) to
    ``dest`` (default ``<cache>/runc-no-rlimits``), executable; rewritten only when it differs."""
    dest = dest or cache_dir() / WRAPPER_NAME
    text = wrapper_script(runtime, python)
    if not (dest.is_file() and dest.read_text() == text and os.access(dest, os.X_OK)):
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, dest)
    return dest


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=300,
                          check=False)


def _output(proc: subprocess.CompletedProcess) -> str:
    return ((proc.stderr or "") + (proc.stdout or "")).strip()


def is_rlimit_failure(output: str) -> bool:
    """Whether an engine's error output is the runtime refusing to set a resource limit."""
    lowered = output.lower()
    return all(marker in lowered for marker in RLIMIT_MARKERS)


def engine_runtime(engine: str, run: Runner = _run) -> str | None:
    """The OCI runtime binary podman is configured with (``podman info``), or None."""
    proc = run([engine, "info", "--format", "{{.Host.OCIRuntime.Path}}"])
    path = (proc.stdout or "").strip()
    return path if proc.returncode == 0 and path.startswith("/") else None


def check_starts(engine: str, image: str, *, run: Runner = _run,
                 install: Callable[[str], Path] = install_wrapper) -> StartCheck:
    """Really start ``<engine> run --rm IMAGE true``: plainly first, and only if the runtime
    refuses to set rlimits, again through the wrapper (podman only: docker's runtime is the
    daemon's). ``image`` must already be local (nothing is pulled)."""
    base = [engine, "run", "--rm", "--pull=never", "--network=none", image, "true"]
    plain = run(base)
    if plain.returncode == 0:
        return StartCheck(True, (), f"{engine} starts containers as it is")
    said = _output(plain)
    if not is_rlimit_failure(said):
        return StartCheck(False, (), f"`{shlex.join(base)}` failed (exit {plain.returncode}): {said}")
    if os.path.basename(engine) != "podman":
        return StartCheck(False, (), f"{engine}'s OCI runtime may not set resource limits here "
                     f"({said}); only podman can be pointed at the rlimit-stripping wrapper")
    runtime = engine_runtime(engine, run)
    if runtime is None:
        return StartCheck(False, (), f"{engine} refuses rlimits ({said}) and `{engine} info` names "
                     "no OCI runtime binary to wrap")
    wrapper = install(runtime)
    args = ("--runtime", str(wrapper))
    wrapped = run([engine, *args, *base[1:]])
    if wrapped.returncode == 0:
        return StartCheck(True, args, f"{runtime} may not set rlimits here ({said.splitlines()[-1]}); "
                     f"containers start through {wrapper}, which drops them", wrapper)
    return StartCheck(False, (), f"{runtime} may not set rlimits here, and through {wrapper} "
                 f"the container still fails (exit {wrapped.returncode}): {_output(wrapped)}")
