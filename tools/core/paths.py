"""Where cuwheels keeps what it caches on this machine.

One rule, the XDG base directory one: ``$XDG_CACHE_HOME/cuwheels``, else ``~/.cache/cuwheels``.
Each cache under it keeps its own override variable (``CUWHEELS_CCACHE_DIR``,
``CUWHEELS_CONTAINER_PIP_CACHE``), read by the module that owns that cache.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: The directory's name under the cache home.
CACHE_NAME = "cuwheels"


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """cuwheels' cache directory: ``$XDG_CACHE_HOME/cuwheels``, or ``~/.cache/cuwheels`` when
    ``XDG_CACHE_HOME`` is unset or empty. ``environ`` defaults to the process environment."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / CACHE_NAME
