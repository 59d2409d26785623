"""Small, real wheels for tests: valid zip files with METADATA, WHEEL and a correct RECORD.

Shared by every test that needs a wheel, so no binary fixture is checked in. The same arguments
always give the same bytes (fixed zip timestamps), which lets tests compare hashes across runs.

    from wheelfactory import make_wheel
    path = make_wheel(tmp_path, "flash-attn", "2.8.3", local="cu128.torch2.8")

The ``metadata_name`` / ``metadata_version`` / ``omit_metadata`` / ``omit`` / ``wheel_version`` /
``extra_files`` knobs build the broken wheels the index must reject (tests/fixtures/hostile/ builds
the rest); ``payload`` pads a wheel to a chosen size (for benchmarks).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: Fixed member timestamp: the earliest a zip can hold, so output is byte-for-byte reproducible.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def dist_name(name: str) -> str:
    """The wheel-filename spelling of a project name: ``flash-attn`` -> ``flash_attn``."""
    return re.sub(r"[-_.]+", "_", name).lower()


def metadata_text(
    name: str,
    version: str,
    *,
    requires_python: str | None = None,
    requires_dist: Iterable[str] = (),
    summary: str | None = None,
) -> str:
    """A Core Metadata 2.1 document (the METADATA file) for ``name`` ``version``."""
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines.append(f"Summary: {summary if summary is not None else f'test wheel {name}'}")
    if requires_python:
        lines.append(f"Requires-Python: {requires_python}")
    lines += [f"Requires-Dist: {req}" for req in requires_dist]
    return "\n".join(lines) + "\n\n"


def make_wheel(
    directory: str | Path,
    name: str,
    version: str,
    *,
    local: str | None = None,
    requires_python: str | None = None,
    requires_dist: Iterable[str] = (),
    manifest: Mapping[str, Any] | None = None,
    tag: str = "cp311-cp311-manylinux_2_28_x86_64",
    build_tag: str | None = None,
    payload: bytes = b"",
    metadata_name: str | None = None,
    metadata_version: str | None = None,
    omit_metadata: bool = False,
    filename: str | None = None,
    omit: Iterable[str] = (),
    wheel_version: str = "1.0",
    extra_files: Mapping[str, bytes] | None = None,
) -> Path:
    """Write a valid wheel of ``name`` ``version[+local]`` into ``directory`` and return its path.

    ``manifest`` becomes ``<dist-info>/cuwheels.json`` (the build manifest, see tools.core.manifest).
    ``payload`` is stored uncompressed as ``<package>/_payload.bin`` to give the wheel a size.
    ``metadata_name`` / ``metadata_version`` put a different Name / Version in METADATA than in the
    filename; ``omit_metadata`` leaves METADATA out; ``filename`` overrides the file's name;
    ``omit`` leaves out other ``.dist-info`` files (``"WHEEL"``, ``"RECORD"``); ``wheel_version``
    is WHEEL's Wheel-Version; ``extra_files`` adds members (any path, as given, before RECORD).
    Those exist to build the invalid wheels an index must refuse.
    """
    full_version = f"{version}+{local}" if local else version
    dist = dist_name(name)
    dist_info = f"{dist}-{full_version}.dist-info"
    files: dict[str, bytes] = {
        f"{dist}/__init__.py": f'__version__ = "{full_version}"\n'.encode(),
    }
    if payload:
        files[f"{dist}/_payload.bin"] = payload
    if not omit_metadata:
        files[f"{dist_info}/METADATA"] = metadata_text(
            metadata_name or name,
            metadata_version or full_version,
            requires_python=requires_python,
            requires_dist=requires_dist,
        ).encode()
    wheel_lines = [f"Wheel-Version: {wheel_version}", "Generator: cuwheels-tests", "Root-Is-Purelib: false"]
    wheel_lines += [f"Tag: {t}" for t in _expand_tag(tag)]
    if build_tag:
        wheel_lines.append(f"Build: {build_tag}")
    files[f"{dist_info}/WHEEL"] = ("\n".join(wheel_lines) + "\n").encode()
    if manifest is not None:
        files[f"{dist_info}/cuwheels.json"] = json.dumps(dict(manifest), sort_keys=True).encode()
    for left_out in omit:
        files.pop(f"{dist_info}/{left_out}", None)  # RECORD is written below, unless left out
    files.update(extra_files or {})
    if "RECORD" not in omit:
        record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in files.items()]
        record.append(f"{dist_info}/RECORD,,")
        files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()

    parts = [dist, full_version] + ([build_tag] if build_tag else []) + [tag]
    path = Path(directory) / (filename or "-".join(parts) + ".whl")
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in files.items():
            info = zipfile.ZipInfo(member, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            # The payload is random bytes in benchmarks: deflating it only burns CPU.
            info.compress_type = zipfile.ZIP_STORED if member.endswith("_payload.bin") else zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return path


def _expand_tag(tag: str) -> list[str]:
    """``py2.py3-none-any`` -> ``["py2-none-any", "py3-none-any"]`` (WHEEL lists each one)."""
    py, abi, plat = tag.split("-")
    return [f"{p}-{a}-{q}" for p in py.split(".") for a in abi.split(".") for q in plat.split(".")]


def installed(venv: Path) -> dict[str, str]:
    """``{distribution: version}`` installed in the venv at ``venv`` (read from its dist-info
    directories, so it works for venvs made without pip)."""
    found = {}
    for info in Path(venv).glob("lib/python*/site-packages/*.dist-info"):
        name, version = info.name[: -len(".dist-info")].split("-", 1)
        found[name] = version
    return found
