"""Version and metadata step: put the local label, the torch pin and the manifest inside a wheel.

The local version label (``+cu130.torch2.13``) goes into METADATA's ``Version:``, the
``.dist-info`` directory name, RECORD and the file name together: pip rejects a wheel that was
only renamed ("inconsistent version"). The unpinned ``Requires-Dist: torch`` becomes
``torch==X.Y.*``, the torch the wheel's C++ symbols were linked against.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import re
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from tools.core.errors import VerifyError
from tools.core.manifest import MANIFEST_NAME, manifest_bytes


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _rewrite_metadata(text: str, version: str, torch_pin: str | None,
                      requires: tuple[str, ...] = ()) -> str:
    head, sep, body = text.partition("\n\n")
    lines = head.splitlines()
    out, pinned = [], False
    required = set()
    for line in lines:
        if line.startswith("Requires-Dist:"):
            with contextlib.suppress(InvalidRequirement):
                required.add(canonicalize_name(Requirement(line.split(":", 1)[1]).name))
        if line.startswith("Version:"):
            out.append(f"Version: {version}")
            continue
        if line.startswith("Requires-Dist:") and torch_pin:
            req_text = line.split(":", 1)[1].strip()
            try:
                req = Requirement(req_text)
            except InvalidRequirement:
                out.append(line)
                continue
            if canonicalize_name(req.name) == "torch":
                marker = f"; {req.marker}" if req.marker else ""
                out.append(f"Requires-Dist: {torch_pin}{marker}")
                pinned = True
                continue
        out.append(line)
    added = [torch_pin] if torch_pin and not pinned else []
    # A dependency the package's own metadata already names keeps its own requirement.
    added += [name for name in requires if canonicalize_name(name) not in required]
    last = max((i for i, l in enumerate(out) if l.startswith("Requires-Dist:")), default=None)
    at = last + 1 if last is not None else len(out)
    out[at:at] = [f"Requires-Dist: {req}" for req in added]
    return "\n".join(out) + (sep + body if sep else "\n")


def _set_wheel_build(text: str, number: int) -> str:
    """WHEEL with ``Build: number`` in place of any Build line the package's build wrote."""
    lines = [line for line in text.splitlines() if not line.lower().startswith("build:")]
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join([*lines, f"Build: {number}"]) + "\n"


@dataclass(frozen=True)
class FinalName:
    """What the metadata step names a wheel: its distribution name as its ``.dist-info``
    spells it, the version with the local label, that ``.dist-info`` folder and the file name."""

    dist_name: str
    version: Version
    dist_info: str
    file_name: str


def final_name(wheel: Path, *, label: str, build_number: int = 0) -> FinalName:
    """The names :func:`set_version_and_pin` gives ``wheel`` with ``label`` and
    ``build_number``: the SBOM names the final wheel before it is written."""
    _, old_version, build, tags = parse_wheel_filename(wheel.name)
    if build_number > 0:
        build = (build_number, "")
    new_version = Version(f"{old_version.public}+{label}")
    with zipfile.ZipFile(wheel) as zin:
        dist_infos = {i.filename.split("/")[0] for i in zin.infolist()
                      if i.filename.split("/")[0].endswith(".dist-info")}
    if len(dist_infos) != 1:
        raise VerifyError(f"{wheel.name} has {len(dist_infos)} .dist-info directories",
                          hint="the package's build produced a malformed wheel")
    dist_name = dist_infos.pop()[: -len(".dist-info")].rsplit("-", 1)[0]
    build_part = f"-{build[0]}{build[1]}" if build else ""
    tag_part = "-".join([
        ".".join(sorted({t.interpreter for t in tags})),
        ".".join(sorted({t.abi for t in tags})),
        ".".join(sorted({t.platform for t in tags})),
    ])
    return FinalName(dist_name, new_version, f"{dist_name}-{new_version}.dist-info",
                     f"{dist_name}-{new_version}{build_part}-{tag_part}.whl")


def set_version_and_pin(wheel: Path, out_dir: Path, *, label: str, torch_pin: str | None,
                        manifest: dict[str, Any] | None, epoch: int, build_number: int = 0,
                        requires: tuple[str, ...] = (),
                        dist_files: Mapping[str, bytes] | None = None) -> Path:
    """Write a new wheel into ``out_dir`` whose version carries ``label`` (replacing any local
    label the package set itself), whose torch requirement is ``torch_pin``, which also requires
    each of ``requires`` it doesn't already (a recipe's ``depends``), and which holds
    ``manifest``; returns its path. Entries get the ``epoch`` timestamp (reproducible zips).
    A ``build_number`` above 0 becomes the wheel's build tag, in its file name and in WHEEL's
    ``Build:`` (pip and uv prefer the higher build of the same version and tags).
    ``dist_files`` (a path inside ``.dist-info`` -> its bytes, such as the SBOM's
    ``sboms/cuwheels.cdx.json``) are written there too, each in place of any file of that path,
    and RECORD lists them with the rest."""
    names = final_name(wheel, label=label, build_number=build_number)
    _, old_version, _, _ = parse_wheel_filename(wheel.name)
    new_version, new_dist = names.version, names.dist_info
    added = dict(dist_files or {})
    if manifest is not None:
        added[MANIFEST_NAME] = manifest_bytes(manifest)
    stamp = time.gmtime(max(epoch, 315532800))[:6]  # zip can't go before 1980
    entries: list[tuple[zipfile.ZipInfo, bytes]] = []
    with zipfile.ZipFile(wheel) as zin:
        for info in zin.infolist():
            top, _, rest = info.filename.partition("/")
            in_dist = top.endswith(".dist-info")
            # RECORD lists files only, and so does the zip: a directory entry (the package's
            # build may write them) would land in RECORD, and `auditwheel show` iterates RECORD
            # and crashes on it (IsADirectoryError). Installers create directories themselves.
            if info.is_dir() or (in_dist and (rest in ("RECORD", MANIFEST_NAME) or rest in added)):
                continue
            data = zin.read(info)
            filename = f"{new_dist}/{rest}" if in_dist else info.filename
            if in_dist and rest == "METADATA":
                text = data.decode("utf-8")
                meta_version = re.search(r"^Version: *(.+)$", text, re.M)
                if not meta_version or Version(meta_version.group(1).strip()) != old_version:
                    raise VerifyError(f"{wheel.name}: METADATA Version does not match the file "
                                      "name", hint="the package's build produced a bad wheel")
                data = _rewrite_metadata(text, str(new_version), torch_pin, requires).encode()
            if in_dist and rest == "WHEEL" and build_number > 0:
                data = _set_wheel_build(data.decode("utf-8"), build_number).encode()
            new = zipfile.ZipInfo(filename, date_time=stamp)
            new.external_attr = info.external_attr
            new.compress_type = zipfile.ZIP_DEFLATED
            entries.append((new, data))
    for rest, data in sorted(added.items()):
        info = zipfile.ZipInfo(f"{new_dist}/{rest}", date_time=stamp)
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        entries.append((info, data))
    # .dist-info last, RECORD very last (the wheel spec's recommended order)
    entries.sort(key=lambda e: (e[0].filename.startswith(new_dist + "/"), e[0].filename))
    # csv quotes a path holding a comma or a quote, as the wheel spec's RECORD (a CSV file) requires.
    record_text = io.StringIO()
    record_csv = csv.writer(record_text, lineterminator="\n")
    record_csv.writerows((i.filename, _record_hash(d), len(d)) for i, d in entries)
    record_csv.writerow((f"{new_dist}/RECORD", "", ""))
    record = zipfile.ZipInfo(f"{new_dist}/RECORD", date_time=stamp)
    record.external_attr = 0o644 << 16
    record.compress_type = zipfile.ZIP_DEFLATED
    entries.append((record, record_text.getvalue().encode()))

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / names.file_name
    partial = target.with_suffix(".part")
    with zipfile.ZipFile(partial, "w") as zout:
        for info, data in entries:
            zout.writestr(info, data)
    partial.replace(target)
    return target


def read_metadata(wheel: Path) -> str:
    """The METADATA text of a wheel."""
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            parts = name.split("/")
            if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "METADATA":
                return zf.read(name).decode("utf-8")
    raise VerifyError(f"{wheel.name} has no METADATA")
