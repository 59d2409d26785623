"""This project's development machines, as the container backend's machine hook.

The machines this project is developed and tested on run podman in a sandbox whose OCI runtime
may not set resource limits, and build in local stand-in images (``tools.devtools.standin_image``,
``tools.devtools.armimage``) because they can pull no builder image. Both are this project's
workarounds, not the product's path, so they reach the container backend only through the hook
``tools.backends.machine`` defines: ``CUWHEELS_MACHINE_HOOK=tools.devtools.sandbox:MACHINE``.

- :meth:`SandboxMachine.start`: a container plainly, and only if the runtime refuses rlimits,
  through the rlimit-stripping wrapper (``tools.devtools.rlimit_runtime.check_starts``);
- :meth:`SandboxMachine.image_facts`: a stand-in image's labels: its wheels are repaired to the
  lowest policy their symbols allow (its glibc is newer than the tag's), its finish Python where
  it has no cp312, and an emulated image's ``/proc/cpuinfo`` (``tools.devtools.emulated``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tools.backends.machine import ImageFacts, StartCheck
from .emulated import TOOLS_PYTHON_LABEL, emulated_machine, emulation_volumes
from .rlimit_runtime import check_starts

#: The labels a local stand-in image carries (``tools.devtools.standin_image`` writes them).
STAND_IN_LABEL = "org.cuwheels.builder.stand-in"
POLICY_LABEL = "org.cuwheels.builder.manylinux"


@dataclass(frozen=True)
class SandboxMachine:
    """The hook for this project's development machines (see the module docstring)."""

    def start(self, engine: str, image: str) -> StartCheck:
        """Plainly, else through the rlimit-stripping wrapper (podman only)."""
        return check_starts(engine, image)

    def image_facts(self, platform_tag: str, labels: Mapping[str, str]) -> ImageFacts:
        """A stand-in's policy, finish Python, emulation volumes and note; nothing for an image
        without the stand-in's labels."""
        tools_python = labels.get(TOOLS_PYTHON_LABEL) or None
        emulated = emulated_machine(labels)
        volumes = emulation_volumes(labels)
        report = {"emulated": emulated} if volumes else {}
        if labels.get(STAND_IN_LABEL) != "true":
            return ImageFacts(tools_python=tools_python, volumes=volumes, report=report)
        policy = labels.get(POLICY_LABEL, "its glibc's")
        note = (f"a local stand-in (wheels up to {policy}): they are repaired to the lowest "
                f"policy their symbols allow, not {platform_tag}"
                + (f"; its {emulated} binaries run here under qemu-user, slowly"
                   if emulated else ""))
        return ImageFacts("auto", note, tools_python, volumes, report)


#: What ``CUWHEELS_MACHINE_HOOK=tools.devtools.sandbox:MACHINE`` names.
MACHINE = SandboxMachine()
