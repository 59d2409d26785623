"""What the site adds to the selector's ``selector.json``: which torch builds exist per platform.

``tools.selector.bundle`` writes the document's selector-owned part (the minimum driver per CUDA
version); the index step adds ``torch_platforms`` from the compatibility table, so that the
selector can say where a machine's torch comes from when PyPI's isn't a CUDA build (``no aarch64
CUDA build of torch 2.10 on PyPI: use PyTorch's cu128 index``)::

    "torch_platforms": {"2.10": {"linux_x86_64": {"pypi_cuda": "12.8", "cuda": ["12.6", ...]},
                                 "linux_aarch64": {"pypi_cuda": null, "cuda": ["12.8"]},
                                 "win_amd64": {"pypi_cuda": null, "cuda": [...]}}, ...}

Per torch series (oldest first), each platform of the table the table records builds of for it:
``pypi_cuda`` the CUDA version of PyPI's wheel there, null when PyPI's is CPU-only; ``cuda`` every
CUDA build known (the others are on PyTorch's own per-CUDA index). A reader that doesn't know
the key ignores it (the selector's reader takes only the keys it knows).
"""

from __future__ import annotations

import json
from typing import Any

from tools.core.variant import DEFAULT_PLATFORM
from tools.plan.table import Table

#: The key this module adds to selector.json.
KEY = "torch_platforms"


def torch_platforms(table: Table) -> dict[str, dict[str, dict[str, Any]]]:
    """``{series: {platform: {"pypi_cuda": ..., "cuda": [...]}}}`` from the table (see the
    module docstring); a platform with no entry for a series is left out of it."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for series, entry in table.torch.items():
        # Linux x86_64's facts are the row itself; another platform's, its entry when it has one.
        out[series] = {platform: {"pypi_cuda": entry.pypi_cuda_on(platform),
                                  "cuda": list(entry.cuda_on(platform))}
                       for platform in table.platforms
                       if platform == DEFAULT_PLATFORM or platform in entry.platforms}
    return out


def with_torch_platforms(document: bytes, table: Table) -> bytes:
    """selector.json (as ``tools.selector.bundle`` wrote it) with :data:`KEY` added."""
    doc = json.loads(document)
    doc[KEY] = torch_platforms(table)
    return (json.dumps(doc, indent=1) + "\n").encode("utf-8")
