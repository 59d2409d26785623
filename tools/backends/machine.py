"""The one hook through which a machine's own workarounds reach the container backend.

A GitHub runner or a workstation with docker needs none: a container starts as the engine starts
it, and the image is the table's builder image. Some machines need more, and what they need is
not the product's business: a sandbox whose OCI runtime may not set resource limits (every
container fails to start until a wrapper drops them), a local stand-in image made from Debian
packages whose glibc is newer than its manylinux tag, an arm64 stand-in that runs under qemu-user
and needs an aarch64 ``/proc/cpuinfo``. Those live in ``tools/devtools/`` (``sandbox``,
``rlimit_runtime``, ``emulated``) and reach the container backend through :class:`MachineHook`
alone, named by ``CUWHEELS_MACHINE_HOOK=module:attribute`` (this project's own development
machines: ``tools.devtools.sandbox:MACHINE``; the test suite sets it). Unset, the backend uses
:class:`PlainMachine`, which reads nothing of them: a maintainer's build on a real runner never
does.

The hook answers two questions: can a container start from this local image, and how
(:meth:`MachineHook.start`: global engine arguments, a containers.conf for tools that run the engine
themselves); and what this image's labels change for a cell (:meth:`MachineHook.image_facts`: the
repair policy, the finish step's Python, extra volumes, a note and report entries).
"""

from __future__ import annotations

import importlib
import json
import os
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tools.core.errors import ToolchainError
from tools.core.paths import cache_dir

#: The variable naming the hook (``module:attribute``).
HOOK_VARIABLE = "CUWHEELS_MACHINE_HOOK"
#: The hook this project's development machines use.
SANDBOX_HOOK = "tools.devtools.sandbox:MACHINE"


@dataclass(frozen=True)
class StartCheck:
    """Whether containers start from an image, the global engine arguments that make them
    (``("--runtime", wrapper)`` or none), why, in words, and the runtime wrapper when one is
    needed (a containers.conf naming it is written for cibuildwheel)."""

    ok: bool
    runtime_args: tuple[str, ...] = ()
    why: str = ""
    wrapper: Path | None = field(default=None, compare=False)

    def __iter__(self):
        # Unpacks as (ok, runtime_args, why), the shape callers use.
        return iter((self.ok, self.runtime_args, self.why))


@dataclass(frozen=True)
class ImageFacts:
    """What an image's labels change for a cell's build. Every field empty: nothing."""

    #: auditwheel's target instead of the cell's manylinux tag (``auto``: the lowest policy the
    #: wheel's symbols allow, for an image whose glibc is newer than its tag).
    plat: str | None = None
    #: A line for the build's progress and the invocation's header.
    note: str = ""
    #: The finish step's Python in the image, where it is not the builder image's cp312.
    tools_python: str | None = None
    #: More ``--volume`` values for the container.
    volumes: tuple[str, ...] = ()
    #: Entries for the build report (``{"emulated": "aarch64"}``).
    report: Mapping[str, Any] = field(default_factory=dict)


class MachineHook(Protocol):
    """What this machine adds to the container backend (see the module docstring)."""

    def start(self, engine: str, image: str) -> StartCheck:
        """Really start a container from local ``image`` with ``engine``; say how it started."""
        ...

    def image_facts(self, platform_tag: str, labels: Mapping[str, str]) -> ImageFacts:
        """What ``labels`` (a local image's) change for a cell tagged ``platform_tag``."""
        ...


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


@dataclass(frozen=True)
class PlainMachine:
    """A machine that needs nothing: containers start as the engine starts them, and an
    image's labels change nothing."""

    def start(self, engine: str, image: str, run=_run) -> StartCheck:
        """``<engine> run --rm IMAGE true``, as it is; a failure is said in the engine's words
        (with the hook to set when the runtime refuses resource limits)."""
        argv = [engine, "run", "--rm", "--pull=never", "--network=none", image, "true"]
        proc = run(argv)
        if proc.returncode == 0:
            return StartCheck(True, (), f"{engine} starts containers as it is")
        said = ((proc.stderr or "") + (proc.stdout or "")).strip()
        hint = ""
        if "rlimit" in said.lower() and "not permitted" in said.lower():
            hint = (f" (the OCI runtime may not set resource limits on this machine: "
                    f"{HOOK_VARIABLE}={SANDBOX_HOOK} starts containers through a wrapper that "
                    "drops them)")
        return StartCheck(False, (), f"`{shlex.join(argv)}` failed (exit {proc.returncode}): "
                                     f"{said}{hint}")

    def image_facts(self, platform_tag: str, labels: Mapping[str, str]) -> ImageFacts:
        """Nothing: the table's builder images need nothing of their labels."""
        return ImageFacts()


def current_machine(environ: Mapping[str, str] | None = None) -> MachineHook:
    """The hook ``CUWHEELS_MACHINE_HOOK`` names, else :class:`PlainMachine`. ToolchainError
    naming the variable when it names nothing importable."""
    spec = (os.environ if environ is None else environ).get(HOOK_VARIABLE, "").strip()
    if not spec:
        return PlainMachine()
    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name or "MACHINE")
    except (ImportError, AttributeError) as exc:
        raise ToolchainError(f"{HOOK_VARIABLE}={spec}: {exc}",
                             hint=f"name a module and an attribute (e.g. {SANDBOX_HOOK}), or "
                                  "unset it on a machine that needs no workaround") from None


def runtime_conf(wrapper: Path, dest: Path | None = None) -> Path:
    """A containers.conf making ``wrapper`` podman's runtime, for tools that call podman
    themselves (cibuildwheel runs ``podman create/start/exec``): set ``CONTAINERS_CONF`` to it."""
    dest = dest or cache_dir() / "containers.conf"
    text = ("# Written by cuwheels (tools/backends/machine.py).\n"
            "[engine]\n"
            'runtime = "cuwheels-runc"\n'
            "[engine.runtimes]\n"
            f"cuwheels-runc = [{json.dumps(str(wrapper))}]\n")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
    return dest
