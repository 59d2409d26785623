"""The wheelhouse: the directory of verified wheels the index is built from.

``publish`` is the last step of every backend and the one place a wheel enters it, only after
every check passed; it never leaves a half-copied file under a wheel's name.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .report import Step


def publish(wheel: Path, out_dir: Path, step: Step) -> Path:
    """Move a verified wheel into the wheelhouse atomically (same name: replaced)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{wheel.name}.part"
    shutil.copyfile(wheel, tmp)
    target = out_dir / wheel.name
    tmp.replace(target)
    step.detail.update(wheel=str(target), size=target.stat().st_size)
    return target
