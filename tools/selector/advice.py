"""What would help when no wheel fits: one line per remedy, for the reason at hand.

tools.selector.answer finds why nothing fits; this module says what to do about it, from what
the index has for the same package (its ``alternatives``: other variant indexes, each with
``fits_otherwise`` and, for an exact CUDA version, the pip command of PyTorch's matching torch)
and the site's facts (the minimum NVIDIA driver per CUDA version). It also says whether building
from source could help at all: never when the driver is too old for the CUDA of torch itself
(a build uses that CUDA too) nor for a torch without CUDA; a build is for a cell the index lacks
(this Python, this platform, this glibc, these GPUs, this torch series).
"""

from __future__ import annotations

from typing import Any

from .checks import FileCandidate, driver_problem
from .detect import Machine, release
from .facts import SiteFacts

#: The kinds of problem (tools.selector.checks) a build for this machine removes: a build
#: compiles for this Python, platform, glibc, GPUs and C++ ABI. ``driver`` and ``yanked`` are
#: not among them: a build uses the same CUDA, and rebuilding a withdrawn version is the
#: maintainers' work.
BUILD_FIXES = frozenset({"python", "requires-python", "platform", "glibc", "arch", "abi"})


def driver_too_old(m: Machine, facts: SiteFacts | None, seen: list[FileCandidate]) -> bool:
    """Whether the NVIDIA driver is what stands in the way: too old for the CUDA torch itself is
    built with, or for the CUDA of every wheel of the machine's variant indexes."""
    if m.torch_cuda and driver_problem(m.torch_cuda, m, facts)[0]:
        return True
    return bool(seen) and all(any(k == "driver" for k, _ in c.problems) for c in seen)


def build_helps(seen: list[FileCandidate]) -> bool:
    """Whether a build for this machine would give a wheel that fits: some wheel of the
    machine's variant indexes fails only for what a build changes (BUILD_FIXES), or there is
    none at all (the index lacks the cell)."""
    return not seen or any(c.problems and all(k in BUILD_FIXES for k, _ in c.problems) for c in seen)


def _torch_choice(alts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The nearest variant index whose wheels fit this machine but for its torch, and that
    names PyTorch's torch for it (alternatives come nearest first)."""
    return next((a for a in alts if a.get("fits_otherwise") and a.get("torch_install")), None)


def _install_torch_line(project: str, alt: dict[str, Any], lead: str) -> str:
    return (f"{lead} torch {alt['torch']} + CUDA {alt['cuda']}, which the index has {project} wheels "
            f"for ({alt['index']}): {alt['torch_install']}, then run this again")


def driver_advice(project: str, m: Machine, facts: SiteFacts | None, alts: list[dict[str, Any]]) -> list[str]:
    """A newer driver (the minimum for torch's CUDA when the site says it), or a torch built for
    an older CUDA that this driver runs and the index has wheels of ``project`` for."""
    cuda = m.torch_cuda or ""
    need = facts.driver_for(cuda) if facts is not None and cuda else None
    has = m.driver or (f"one that supports CUDA up to {m.driver_cuda}" if m.driver_cuda else "unknown")
    if need:
        lines = [f"a newer NVIDIA driver: CUDA {cuda} (torch {m.torch}) needs driver >= {need}; this "
                 f"machine's is {has}"]
    else:
        lines = [f"a newer NVIDIA driver, one that supports CUDA {cuda} (torch {m.torch}); this "
                 f"machine's is {has}"]
    older = [a for a in alts if a.get("fits_otherwise") and a.get("torch_install")
             and release(a["cuda"]) < release(cuda or "0")]
    if older:
        lead = "or a torch built for an older CUDA that this driver runs:"
        lines.append(_install_torch_line(project, older[0], lead))
    return lines


def cuda_torch_advice(project: str, alts: list[dict[str, Any]]) -> list[str]:
    """For a torch without CUDA (CPU-only, ROCm) or no torch at all: the CUDA torch to install,
    one the index has wheels of ``project`` for and that fits this machine otherwise."""
    alt = _torch_choice(alts)
    if alt is not None:
        return [_install_torch_line(project, alt, "install a CUDA build of torch:")]
    listed = _pairs(alts)
    if listed:
        return [f"install a CUDA build of torch; the index has {project} wheels for {listed}, none of "
                "them for this machine's Python, platform or driver"]
    return []


def series_advice(project: str, m: Machine, series: str, alts: list[dict[str, Any]]) -> list[str]:
    """For a torch (series, CUDA) the index has no wheels of ``project`` for: the pairs it has,
    and the pip command of the nearest that fits this machine otherwise."""
    listed = _pairs(alts)
    if not listed:
        return []
    lines = [f"a torch the index has {project} wheels for: {listed} (this is torch {series} + CUDA "
             f"{m.torch_cuda})"]
    alt = _torch_choice(alts)
    if alt is not None:
        lines.append(_install_torch_line(project, alt, "e.g."))
    return lines


def python_advice(project: str, version: str, where: str, m: Machine, group: list[FileCandidate]) -> list[str]:
    """For wheels that are all for other Pythons: the Pythons they are for."""
    have = sorted({python_of(c) for c in group}, key=_python_key)
    return [f"a Python that {project} {version} has wheels for in {where}: {', '.join(have)} (this is "
            f"Python {m.python[0]}.{m.python[1]}{'t' if m.free_threaded else ''})"]


def python_of(c: FileCandidate) -> str:
    """The Pythons a wheel is for, as people say them: ``3.12``, ``3.13t`` (free-threaded),
    ``3.9+`` (abi3), else its tags (``py3-none``)."""
    py, abi = c.wheel.python, c.wheel.abi
    if py.startswith("cp") and py[2:].isdigit() and len(py) >= 4:
        base = f"{py[2]}.{py[3:]}"
        if abi == "abi3":
            return f"{base}+"
        return base + ("t" if abi.endswith("t") else "")
    return f"{py}-{abi}"


def _python_key(text: str) -> tuple:
    head = text.rstrip("t+")
    try:
        return (0, release(head), text)
    except ValueError:
        return (1, (), text)


def _pairs(alts: list[dict[str, Any]]) -> str:
    """``torch 2.13 + CUDA 13.0, torch 2.9 + CUDA 12.8``: the variant indexes, nearest first."""
    return ", ".join(f"torch {a['torch']} + CUDA {a['cuda']}" for a in alts if "torch" in a)
