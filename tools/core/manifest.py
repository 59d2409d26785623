"""The build manifest: a JSON file inside each wheel's ``.dist-info`` saying how it was built.

It records the cell, the CUDA/torch/ABI the wheel was built against, the GPU architectures found
in its extensions (not just requested), the source's sha256, the patches applied, the compiler
versions, the recipe revision and, from the host backend, ``kernel_check``: the kernel check's
verdict (``passed``, or ``not run: no GPU``), the GPU and the largest error of each op and dtype
against its tolerance (``tools.kernels.check.summary``). The index reads the variant from it; the doctor reads it to
explain an ``undefined symbol``.
"""

from __future__ import annotations

import json
import zipfile
from typing import Any

from .variant import Variant, torch_series

#: File name inside ``<name>-<version>.dist-info/``.
MANIFEST_NAME = "cuwheels.json"
#: Bumped when a key changes meaning; readers accept what they know.
MANIFEST_SCHEMA = 1


def read_manifest(wheel: zipfile.ZipFile, names: list[str] | None = None) -> dict[str, Any] | None:
    """The manifest of an open wheel, or None when the wheel has none (built elsewhere).

    ``names``: the wheel's member names to look among, when the caller has already narrowed them
    (a long namelist is then scanned once, not twice).
    """
    suffix = f".dist-info/{MANIFEST_NAME}"
    for name in wheel.namelist() if names is None else names:
        if name.endswith(suffix) and name.count("/") == 1:
            return json.loads(wheel.read(name))
    return None


def variant_from_manifest(manifest: dict[str, Any]) -> Variant | None:
    """The Variant a manifest records, or None when it records no CUDA build.

    A stable-ABI build's manifest has ``abi: {torch: "stable", serves: [series...]}``: the torch
    series its shim symbols were checked against, each of whose variant indexes lists it.
    """
    cuda, torch = manifest.get("cuda"), manifest.get("torch")
    if not cuda or not torch:
        return None
    abi = manifest.get("abi")
    serves: tuple[str, ...] = ()
    if isinstance(abi, dict) and abi.get("torch") == "stable":
        raw = abi.get("serves")
        if not isinstance(raw, list) or not raw or not all(isinstance(x, str) for x in raw):
            raise ValueError(f"abi.serves must be a non-empty list of torch series, got {raw!r}")
        serves = tuple(torch_series(x) for x in raw)
    return Variant(str(cuda), torch_series(str(torch)), manifest.get("cxx11_abi"), serves)
