"""Container engines: which of docker and podman answers here.

The one probe both the ``auto`` backend choice and the container backend use. The probe is a
parameter wherever it is used, so a caller (a test) can say which engines answer instead of
asking the machine.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

from .errors import ToolchainError

#: The engines tried, in order, when none is named.
ENGINES = ("docker", "podman")

#: Answers (does ``engine`` answer, what it said).
Probe = Callable[[str], tuple[bool, str]]


def engine_answers(engine: str) -> tuple[bool, str]:
    """Whether a container engine answers (``docker info``), and what it said."""
    exe = shutil.which(engine)
    if not exe:
        return False, f"{engine} is not installed"
    try:
        proc = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return False, f"`{engine} info` did not answer in 30 s"
    if proc.returncode != 0:
        first = (proc.stderr or proc.stdout).strip().splitlines()
        return False, f"`{engine} info` failed: {first[0] if first else 'no output'}"
    return True, f"{engine} answers"


def first_answering(engine: str | None, probe: Probe = engine_answers
                    ) -> tuple[str | None, str, list[str]]:
    """The first engine that answers (``engine`` alone when named, else docker then podman):
    (that engine or None, what it said, what each one before it said)."""
    reasons = []
    for candidate in [engine] if engine else ENGINES:
        ok, why = probe(candidate)
        if ok:
            return candidate, why, reasons
        reasons.append(why)
    return None, "", reasons


def find_engine(engine: str | None, probe: Probe = engine_answers) -> str:
    """The engine to use: ``engine`` if it answers, else docker or podman, whichever answers.

    ToolchainError naming what each said and what to do when none does.
    """
    found, _, reasons = first_answering(engine, probe)
    if found:
        return found
    raise ToolchainError(
        "no container engine answers (" + "; ".join(reasons) + "): the container backend runs "
        "cibuildwheel, which needs docker or podman",
        hint="start the engine (`sudo systemctl start docker`, or install podman and pass "
             "--engine podman); --dry-run prints the commands without one; --backend host "
             "builds on this machine (wheels tagged for its glibc)")
