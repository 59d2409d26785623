"""The OS a build runs on, behind one seam: ``tools.hostplat.base.HostOS``, implemented by
``linux`` and ``windows`` (one module each). The only place that asks which OS this machine runs
(:func:`current`); every other module takes a ``host`` and uses what it says.

Named ``hostplat``, not ``host`` or ``platforms``: ``tools.backends.host`` is the host *backend*
(``--backend host``), and ``tools.core.platforms`` is the platforms' identity (name, OS, arch)
that the selector carries; no ``python -m tools.<command>`` shares the name either.
"""

from __future__ import annotations

import os

from tools.core.platforms import PLATFORMS
from . import linux, windows
from .base import HostOS

#: Every host OS, by ``tools.core.platforms.Platform.os``.
HOSTS: dict[str, HostOS] = {"linux": linux, "windows": windows}


def for_name(name: str) -> HostOS:
    """The host OS called ``name`` (``linux``, ``windows``); KeyError for another."""
    return HOSTS[name]


def for_platform(platform: str) -> HostOS:
    """The host OS a cell of ``platform`` (``win_amd64``) builds on: its platform's OS."""
    return for_name(PLATFORMS[platform].os)


def current() -> HostOS:
    """This machine's: Windows where Python says ``nt``, else Linux (macOS and the other
    POSIX systems build nothing here, and take Linux's ways where they run at all)."""
    return windows if os.name == "nt" else linux
