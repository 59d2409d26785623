"""The build manifest: a JSON file inside each wheel's ``.dist-info`` saying how it was built.

It records the cell, the CUDA/torch/ABI the wheel was built against, the GPU architectures found
in its extensions (not just requested), the source's sha256, the patches applied, the compiler
versions, the recipe revision, the platform (``linux_x86_64``, ``linux_aarch64``, ``win_amd64``)
and which checks ran (``checks``: the Windows ABI check is not possible, and says so; ``sbom``
names the bill of materials in ``.dist-info/sboms/`` with its sha256), and, from
the host backend, ``kernel_check``: the kernel check's
verdict (``passed``, or ``not run: no GPU``), the GPU and the largest error of each op and dtype
against its tolerance (``tools.kernels.check.summary``). The index reads the variant from it; the
selector reads the GPU code from it; the doctor reads it to explain an ``undefined symbol``.

This module is the manifest's one definition: :class:`Manifest` names every field the finish
stage writes, :func:`manifest_bytes` is how it is written, :func:`parse_manifest` and
:func:`read_manifest` how it is read. Readers take the parsed JSON object as it is and accept
what they know: a manifest from an older build may lack a field.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .variant import Variant, is_dotted_digits, torch_series

#: File name inside ``<name>-<version>.dist-info/``.
MANIFEST_NAME = "cuwheels.json"
#: Bumped when a key changes meaning; readers accept what they know. ``platform`` and ``checks``
#: were added without a bump: no key changed meaning, and a manifest without them is a Linux
#: x86_64 build's (manifest_platform), from before other platforms were built.
MANIFEST_SCHEMA = 1
#: The platform of a manifest that names none: every wheel built before ``platform`` was written.
DEFAULT_PLATFORM = "linux_x86_64"


@dataclass(frozen=True)
class Manifest:
    """What the finish stage records about one finished wheel.

    ``archs_requested``/``archs_found`` are written as ``archs: {requested, found}`` (``found``:
    module path -> ``{sass: [...], ptx: [...]}``), ``sdist``/``sha256``/``url`` as ``source``.
    ``abi`` is the recipe's abi claim as checked (a stable build's ``serves`` places it in each
    variant index). ``extra`` holds what a backend adds (``image``, ``existing_python``) and the
    kernel check's ``kernel_check``; its keys come last and win over the fields'.
    """

    cell: str
    package: str
    version: str
    python: str
    cuda: str
    torch: str
    cxx11_abi: bool | None
    archs_requested: tuple[str, ...]
    archs_found: dict[str, Any]
    sdist: str
    sha256: str
    url: str
    patches: tuple[str, ...]
    recipe_revision: str
    build_number: int
    backend: str
    compiler: dict[str, str]
    torch_cuda: str
    archs_override: bool
    abi: dict[str, Any]
    build_platform: str
    extra: dict[str, Any] = field(default_factory=dict)
    schema: int = MANIFEST_SCHEMA
    #: The platform the wheel is for (``linux_x86_64``, ``linux_aarch64``, ``win_amd64``).
    platform: str = DEFAULT_PLATFORM
    #: Which checks of the finish step ran and what each found (``passed: ...``), or why one did
    #: not (``not possible on Windows: ...``): check name -> one line; and ``sbom``, the bill of
    #: materials the wheel carries (tools.finish.sbom): its ``path``, ``format`` and ``sha256``.
    checks: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The manifest as the JSON object written into the wheel (and kept in the build report)."""
        return {
            "schema": self.schema,
            "cell": self.cell,
            "package": self.package,
            "version": self.version,
            "python": self.python,
            "cuda": self.cuda,
            "torch": self.torch,
            "cxx11_abi": self.cxx11_abi,
            "archs": {"requested": list(self.archs_requested), "found": self.archs_found},
            "source": {"sdist": self.sdist, "sha256": self.sha256, "url": self.url},
            "patches": list(self.patches),
            "recipe_revision": self.recipe_revision,
            "build_number": self.build_number,
            "backend": self.backend,
            "compiler": self.compiler,
            "torch_cuda": self.torch_cuda,
            "archs_override": self.archs_override,
            "abi": self.abi,
            "build_platform": self.build_platform,
            "platform": self.platform,
            "checks": self.checks,
            **self.extra,
        }


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    """The bytes of ``cuwheels.json`` for ``manifest`` (a :meth:`Manifest.to_json` object, or one
    a later step extended): sorted keys and a fixed indent, so that the same manifest is the same
    bytes and a reproducible wheel stays reproducible."""
    return json.dumps(dict(manifest), indent=2, sort_keys=True).encode() + b"\n"


def parse_manifest(data: bytes | str, where: str = MANIFEST_NAME) -> dict[str, Any]:
    """The manifest in ``data`` (the file's bytes or text); ValueError naming ``where`` when it is
    not JSON or not a JSON object."""
    manifest = json.loads(data)
    if not isinstance(manifest, dict):
        raise ValueError(f"{where} holds a JSON {type(manifest).__name__}, not an object")
    return manifest


def manifest_member(names: Iterable[str]) -> str | None:
    """Which of a wheel's member ``names`` is its manifest (``<x>.dist-info/cuwheels.json``)."""
    suffix = f".dist-info/{MANIFEST_NAME}"
    return next((name for name in names if name.endswith(suffix) and name.count("/") == 1), None)


def read_manifest(wheel: zipfile.ZipFile, names: list[str] | None = None) -> dict[str, Any] | None:
    """The manifest of an open wheel, or None when the wheel has none (built elsewhere).

    ``names``: the wheel's member names to look among, when the caller has already narrowed them
    (a long namelist is then scanned once, not twice). ValueError for a manifest that can't be
    parsed.
    """
    member = manifest_member(wheel.namelist() if names is None else names)
    return None if member is None else parse_manifest(wheel.read(member), member)


def manifest_platform(manifest: Mapping[str, Any]) -> str:
    """The platform a manifest records (``linux_aarch64``...); DEFAULT_PLATFORM for one written
    before the key existed. ValueError for a value that is not a platform name."""
    value = manifest.get("platform", DEFAULT_PLATFORM)
    if not isinstance(value, str) or not value.replace("_", "").isalnum():
        raise ValueError(f"platform must be a platform name such as linux_aarch64, got {value!r}")
    return value


def archs_found(manifest: Mapping[str, Any]) -> Any:
    """The manifest's ``archs.found`` (module path -> its SASS and PTX archs) as written, or None
    when it records none; its shape is the caller's to check."""
    archs = manifest.get("archs")
    return archs.get("found") if isinstance(archs, dict) else None


def variant_from_manifest(manifest: dict[str, Any]) -> Variant | None:
    """The Variant a manifest records, or None when it records no CUDA build.

    A stable-ABI build's manifest has ``abi: {torch: "stable", serves: [series...]}``: the torch
    series its shim symbols were checked against, each of whose variant indexes lists it.
    """
    cuda, torch = manifest.get("cuda"), manifest.get("torch")
    if not cuda or not torch:
        return None
    # One rule for a variant's versions (is_dotted_digits): a value that breaks it would name a
    # variant index (cu<cuda>/) and be sorted as a number.
    if not is_dotted_digits(cuda) or cuda.count(".") > 1:
        raise ValueError(f"cuda must be a CUDA version of ASCII digits such as \"12.8\", got {cuda!r}")
    if not isinstance(torch, str):
        raise ValueError(f"torch must be a torch version such as \"2.8\", got {torch!r}")
    cxx11_abi = manifest.get("cxx11_abi")
    if cxx11_abi is not None and not isinstance(cxx11_abi, bool):
        raise ValueError(f"cxx11_abi must be true, false or null, got {cxx11_abi!r}")
    abi = manifest.get("abi")
    serves: tuple[str, ...] = ()
    if isinstance(abi, dict) and abi.get("torch") == "stable":
        raw = abi.get("serves")
        if not isinstance(raw, list) or not raw or not all(isinstance(x, str) for x in raw):
            raise ValueError(f"abi.serves must be a non-empty list of torch series, got {raw!r}")
        serves = tuple(torch_series(x) for x in raw)
    return Variant(cuda, torch_series(torch), cxx11_abi, serves)
