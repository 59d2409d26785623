"""A wheel as a build made it, and how the finish steps are to treat it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.pipeline.buildenv import DEFAULT_SOURCE_DATE_EPOCH
from tools.plan.cells import Cell
from tools.plan.recipes.model import Recipe


@dataclass(frozen=True)
class RawWheel:
    """A wheel as a build made it: the cell and recipe it is of, the archs it was compiled for,
    the torch it was built against (its libraries in ``torch_lib``), the backend that built it
    and the nvcc it compiled with (None: not known here)."""

    path: Path
    cell: Cell
    recipe: Recipe
    archs: tuple[str, ...]
    torch_lib: Path
    torch_version: str
    torch_cuda: str
    backend: str
    nvcc: str | None


@dataclass(frozen=True)
class FinishSettings:
    """How a wheel is finished, where the backends differ."""

    #: auditwheel's target (``auto``: the lowest this build allows; the container passes the
    #: table's manylinux target, ``manylinux_2_28_aarch64`` for an aarch64 cell).
    plat: str = "auto"
    #: The cell's platform (``linux_x86_64``, ``linux_aarch64``, ``win_amd64``; None: the
    #: cell's).
    wheel_platform: str | None = None
    #: The recipe's git revision for the manifest (None: read from the checkout).
    recipe_revision: str | None = None
    #: SOURCE_DATE_EPOCH for the rewritten wheel's timestamps.
    epoch: int = DEFAULT_SOURCE_DATE_EPOCH
    #: More facts for the manifest's ``extra`` (the image, the workarounds, ``--interpreter``).
    manifest_extra: dict[str, Any] | None = None
