"""A recipe's ``platforms:`` block: where the package is built besides Linux x86_64, and why not.

A recipe is built on every platform of the table (``recipes/table.yaml``'s ``platforms:``) for
the (CUDA, torch series) pairs it builds that the table has a torch build of on that platform:
a platform the table gains is planned for every recipe with no recipe edit, as a torch series
is. The block narrows that, one entry per platform, each with its reason::

    platforms:
      linux_aarch64: {reason: "setup.py has no x86-only flags; triton has aarch64 wheels"}
      win_amd64: {exclude: true, reason: "requires triton, which has no Windows wheel"}
      linux_aarch64: {archs: {"*": ["80", "90"]}, reason: "..."}   # its own arch list there

``exclude: true`` plans no cell on the platform; ``archs`` (the shape of the recipe's own
``archs``: per CUDA version or ``"*"``) replaces the recipe's list there; an entry with neither
says why the package builds there. Every arch must be one the platform's nvcc compiles for that
CUDA version (the table's ``platforms.<platform>.archs``, else its ``cuda.<X.Y>.archs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tools.core.variant import DEFAULT_PLATFORM
from .shape import check_block_shape
from ..schema import Problems
from ..table import Table, arch_key


@dataclass(frozen=True)
class PlatformChoice:
    """What a recipe says about one platform."""

    platform: str
    reason: str
    exclude: bool = False
    #: CUDA version or ``"*"`` -> the arch list built on this platform; None: the recipe's own.
    archs: dict[str, tuple[str, ...]] | None = None


def parse_platforms(p: Problems, raw: Any, cudas: tuple[str, ...],
                    own_archs: dict[str, tuple[str, ...]] | None, table: Table
                    ) -> dict[str, PlatformChoice]:
    """The recipe's ``platforms:`` (``cudas``: the CUDA versions it builds; ``own_archs``: its
    ``archs``, None for ``inherit``); every problem goes to ``p``."""
    if raw is not None:
        check_block_shape(p, raw, "platforms")
    out: dict[str, PlatformChoice] = {}
    for name, value in (raw.items() if isinstance(raw, dict) and p.usable("platforms") else ()):
        where = f"platforms.{name}"
        if name not in table.platforms:
            p.add(where, f"the table has no platform {name!r}",
                  f"use one of {', '.join(table.platforms)} (recipes/table.yaml platforms:)")
            continue
        m = p.shaped(value, where)
        if m is None:
            continue
        p.reason(m["reason"], f"{where}.reason")
        if m.get("exclude") and "archs" in m:
            p.add(f"{where}.archs", "an excluded platform builds nothing",
                  "remove archs, or exclude: true")
        if name == DEFAULT_PLATFORM and (m.get("exclude") or "archs" in m):
            p.add(where, f"every recipe builds for {DEFAULT_PLATFORM} with its own archs: the "
                  "platform the table's torch rows describe",
                  "remove exclude and archs here (the recipe's archs are this platform's)")
        archs = None
        if "archs" in m:
            archs = {}
            for key, listed in m["archs"].items():
                at = f"{where}.archs.{key}"
                if key != "*" and key not in cudas:
                    p.add(at, f"{key!r} is not one of this recipe's CUDA versions or \"*\"",
                          f"use one of {', '.join(cudas)} (quoted) or \"*\"")
                    continue
                if p.usable(at):
                    p.once(listed, at, "arch")
                    archs[str(key)] = tuple(sorted(set(listed), key=arch_key))
        out[str(name)] = PlatformChoice(str(name), m["reason"], bool(m.get("exclude")), archs)
    for name in table.platforms:
        choice = out.get(name)
        if name != DEFAULT_PLATFORM and not (choice and choice.exclude):
            _check_archs(p, name, choice, cudas, own_archs, table)
    return out


def archs_on(choice: PlatformChoice | None, cuda: str,
             own_archs: dict[str, tuple[str, ...]] | None, table: Table,
             platform: str) -> tuple[str, ...]:
    """The arch list a recipe builds for ``cuda`` on ``platform``: the platform entry's own,
    else the recipe's, else (``archs: inherit``) torch's default list there."""
    for archs in ((choice.archs if choice else None), own_archs):
        if archs is not None and (cuda in archs or "*" in archs):
            return archs.get(cuda, archs.get("*", ()))
    return table.default_archs(cuda, platform)


def _check_archs(p: Problems, platform: str, choice: PlatformChoice | None,
                 cudas: tuple[str, ...], own_archs: dict[str, tuple[str, ...]] | None,
                 table: Table) -> None:
    """Every arch built on ``platform`` must be one its nvcc compiles for the CUDA version."""
    for cuda in cudas:
        if not any(cuda in t.cuda_on(platform) for t in table.torch.values()):
            continue  # no torch build of this CUDA there: nothing is planned
        archs = archs_on(choice, cuda, own_archs, table, platform)
        known = table.compilable(cuda, platform)
        for arch in (a for a in archs if a not in known):
            own = choice is not None and choice.archs is not None and \
                (cuda in choice.archs or "*" in choice.archs)
            p.add(f"platforms.{platform}.archs" if own else "archs",
                  f"sm_{arch} cannot be compiled by CUDA {cuda} on {platform} "
                  f"(its nvcc knows {', '.join(known)})",
                  f'give the platform its own list: platforms: {{{platform}: {{archs: '
                  f'{{"{cuda}": [...]}}, reason: ...}}}}')
