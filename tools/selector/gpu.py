"""GPU architectures: which SASS and PTX run on which GPU, and what a wheel's kernels cover."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DetectedGpu:
    """One GPU: its compute capability and name."""

    cc: tuple[int, int]
    name: str = ""

    @property
    def sm(self) -> str:
        """``(9, 0)`` -> ``"90"``."""
        return f"{self.cc[0]}{self.cc[1]}"


def parse_sm(text: str) -> tuple[int, int] | None:
    """A compute capability: ``"8.0"``, ``"80"``, ``"sm_80"``, ``"120"`` -> ``(8, 0)``/``(12, 0)``."""
    t = text.strip().lower()
    for prefix in ("sm_", "sm", "compute_"):
        if t.startswith(prefix):
            t = t[len(prefix):]
            break
    m = re.fullmatch(r"(\d+)\.(\d+)", t)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.fullmatch(r"(\d+)(\d)[af]?", t)
    if m:
        return int(m.group(1)), int(m.group(2))
    return None


def _arch(text: str) -> tuple[int, int, str] | None:
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)(\d)([af]?)", str(text).strip().lower())
    return (int(m.group(1)), int(m.group(2)), m.group(3)) if m else None


def sass_runs(arch: str, cc: tuple[int, int]) -> bool:
    """Whether SASS for ``arch`` (``"80"``, ``"90a"``, ``"100f"``) runs on a GPU of capability ``cc``.

    SASS runs on the same major with an equal or higher minor (sm_80 code on an sm_86 GPU), never
    across majors; ``a`` (arch-specific) code only on exactly that capability.
    """
    a = _arch(arch)
    if a is None:
        return False
    major, minor, suffix = a
    if major != cc[0]:
        return False
    return minor == cc[1] if suffix == "a" else minor <= cc[1]


def ptx_runs(arch: str, cc: tuple[int, int]) -> bool:
    """Whether PTX for ``arch`` can be JIT-compiled for capability ``cc`` (any equal or newer GPU,
    same major for ``f`` family code, exactly that GPU for ``a`` code)."""
    a = _arch(arch)
    if a is None:
        return False
    major, minor, suffix = a
    if suffix == "a":
        return (major, minor) == cc
    if suffix == "f":
        return major == cc[0] and minor <= cc[1]
    return (major, minor) <= cc


def module_archs(found: dict[str, Any]) -> dict[str, tuple[list[str], list[str]]]:
    """``{module: (sass, ptx)}`` from a manifest's ``archs.found`` (modules without device code dropped)."""
    out = {}
    for module, report in (found or {}).items():
        if not isinstance(report, dict):
            continue
        sass = [str(a) for a in report.get("sass") or []]
        ptx = [str(a) for a in report.get("ptx") or []]
        if sass or ptx:
            out[module] = (sass, ptx)
    return out


def arch_list(archs: list[str]) -> str:
    """``["80", "90"]`` -> ``"sm_80, sm_90"`` (``"none"`` when empty)."""
    return ", ".join(f"sm_{a}" for a in archs) if archs else "none"


def arch_problem(found: dict[str, Any], gpus: list[DetectedGpu]) -> str | None:
    """Why the modules of a wheel (manifest ``archs.found``) can't run on ``gpus``, or None."""
    modules = module_archs(found)
    if not modules:
        return None
    bad = []
    for gpu in gpus:
        for module, (sass, ptx) in sorted(modules.items()):
            if any(sass_runs(a, gpu.cc) for a in sass) or any(ptx_runs(a, gpu.cc) for a in ptx):
                continue
            bad.append(
                f"{module} has no kernels for sm_{gpu.sm} ({gpu.name or 'your GPU'}): "
                f"SASS for {arch_list(sass)}, PTX for {arch_list(ptx)}"
            )
    return "; ".join(bad) or None
