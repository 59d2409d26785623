"""Container engines: which of docker and podman can build from a cell's image here.

"An engine answers ``info``" is not "an engine can build": on a machine whose root may not set
resource limits every container fails to start, and an image that is neither local nor pullable
stops cibuildwheel after it has set everything up. :func:`readiness` asks the three questions in
order, each from the real engine:

1. does the engine answer (``<engine> info``)?
2. is the image here (``<engine> image inspect``, which also gives its labels), or can it be
   pulled (``<engine> manifest inspect``, which reads the registry without downloading layers)?
3. does a container start from it (this machine's hook, ``tools.backends.machine``: plainly,
   or as the hook starts it)? Only a local image can be started; a pullable one is started
   after the pull, by the container backend.

The readiness check is a parameter wherever it is used (``ReadinessCheck``: ``(engine, image) -> Readiness``), so a
caller (a test) can say what the machine has instead of asking it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tools.core.errors import ToolchainError
from .machine import StartCheck, current_machine, runtime_conf

#: The engines tried, in order, when none is named.
ENGINES = ("docker", "podman")

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess]


@dataclass(frozen=True)
class Readiness:
    """Whether ``engine`` can build from ``image`` here, and how.

    ``local``: the image is already here (else it must be pulled first). ``runtime_args``: the
    global engine arguments containers need (``--runtime <wrapper>``), and ``containers_conf``
    the same as a file for tools that run the engine themselves (cibuildwheel reads
    ``CONTAINERS_CONF``). ``labels``: the image's labels (a local stand-in image says what it is
    there).
    """

    engine: str
    image: str
    ok: bool
    why: str
    local: bool = False
    runtime_args: tuple[str, ...] = ()
    containers_conf: Path | None = None
    labels: dict[str, str] = field(default_factory=dict, compare=False)


#: Says whether an engine can build from an image: ``(engine, image) -> Readiness``.
ReadinessCheck = Callable[[str, str], Readiness]


def _run(argv: Sequence[str], timeout: int = 60) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"no answer in {timeout} s")
    except OSError as exc:
        return subprocess.CompletedProcess(list(argv), 127, "", str(exc))


def _said(proc: subprocess.CompletedProcess) -> str:
    lines = ((proc.stderr or "") + (proc.stdout or "")).strip().splitlines()
    return lines[-1] if lines else "no output"


def engine_answers(engine: str, run: Runner = _run) -> tuple[bool, str]:
    """Whether a container engine answers (``<engine> info``), and what it said."""
    if not shutil.which(engine):
        return False, f"{engine} is not installed"
    proc = run([engine, "info"])
    if proc.returncode != 0:
        return False, f"`{engine} info` failed: {_said(proc)}"
    return True, f"{engine} answers"


def image_labels(engine: str, image: str, run: Runner = _run) -> dict[str, str] | None:
    """The labels of local image ``image`` (``{}`` when it has none), or None when the image
    is not here."""
    proc = run([engine, "image", "inspect", "--format", "{{json .Config.Labels}}"
                if os.path.basename(engine) == "docker" else "{{json .Labels}}", image])
    if proc.returncode != 0:
        return None
    try:
        return json.loads(proc.stdout or "null") or {}
    except json.JSONDecodeError:
        return {}


def qualified(image: str) -> str:
    """``image`` with its registry named: podman refuses to guess one for a short name without a
    terminal to ask on (short-name mode "enforcing"), docker assumes Docker Hub."""
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if "/" in image else f"docker.io/library/{image}"


def image_pullable(engine: str, image: str, run: Runner = _run) -> tuple[bool, str]:
    """Whether the registry serves ``image`` (its manifest, not its layers), and what it said.
    (podman 4.3 reads a remote manifest for a qualified name, not for ``docker://``.)"""
    proc = run([engine, "manifest", "inspect", qualified(image)])
    if proc.returncode == 0:
        return True, f"{image} can be pulled"
    return False, f"{image} is not here and cannot be pulled ({_said(proc)})"


def readiness(engine: str, image: str, *, run: Runner = _run,
              start: Callable[[str, str], StartCheck] | None = None) -> Readiness:
    """Whether ``engine`` can build from ``image`` here (see the module docstring), asked of the
    real engine. ``start(engine, image)`` starts a container (default: this machine's hook,
    ``tools.backends.machine.current_machine``)."""
    answers, why = engine_answers(engine, run)
    if not answers:
        return Readiness(engine, image, False, why)
    labels = image_labels(engine, image, run)
    if labels is None:
        pullable, why = image_pullable(engine, image, run)
        return Readiness(engine, image, pullable, why + (
            "; a container is started from it after the pull" if pullable else ""))
    started = (start or current_machine().start)(engine, image)
    if not started.ok:
        return Readiness(engine, image, False, f"{engine} cannot start a container from "
                         f"{image}: {started.why}", local=True, labels=labels)
    conf = runtime_conf(started.wrapper) if started.wrapper is not None else None
    return Readiness(engine, image, True, f"{image} is here and {started.why}", local=True,
                     runtime_args=tuple(started.runtime_args), containers_conf=conf,
                     labels=labels)


def first_ready(engine: str | None, image: str, can_build: ReadinessCheck = readiness
                ) -> tuple[Readiness | None, list[str]]:
    """The first engine that can build from ``image`` (``engine`` alone when named, else docker
    then podman), and why each one before it could not."""
    reasons = []
    for candidate in [engine] if engine else ENGINES:
        found = can_build(candidate, image)
        if found.ok:
            return found, reasons
        reasons.append(found.why)
    return None, reasons


def find_engine(engine: str | None, image: str, can_build: ReadinessCheck = readiness) -> Readiness:
    """The engine to build with: ``engine`` if it can build from ``image``, else docker or
    podman, whichever can.

    ToolchainError naming what each said and what to do when none can.
    """
    found, reasons = first_ready(engine, image, can_build)
    if found:
        return found
    raise ToolchainError(
        f"no container engine can build from {image} here (" + "; ".join(reasons) + "): the "
        "container backend runs cibuildwheel, which needs docker or podman and the image",
        hint="start the engine (`sudo systemctl start docker`, or install podman and pass "
             "--engine podman); without a registry, build a local stand-in image with "
             "`python -m tools.localimage --cuda X.Y` and pass --image; --dry-run prints the "
             "commands without one; --backend host builds on this machine (wheels tagged for "
             "its glibc)")


def pull(engine: str, image: str, run: Runner = _run, timeout: int = 3600) -> None:
    """Pull ``image``; ToolchainError with the engine's words when it fails."""
    proc = run([engine, "pull", image], timeout=timeout)
    if proc.returncode != 0:
        raise ToolchainError(f"`{engine} pull {image}` failed: {_said(proc)}",
                             hint="check the registry is reachable, or build a local stand-in "
                                  "with `python -m tools.localimage` and pass --image")
