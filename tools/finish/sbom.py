"""The wheel's bill of materials: one CycloneDX 1.6 JSON document in ``<name>-<version>.dist-info/sboms/``.

PEP 770 gives SBOM documents a place in a wheel: ``.dist-info/sboms/``, any number of them, each
listed in RECORD like every other file, kept by installers in site-packages. Ours is
``sboms/cuwheels.cdx.json`` (``.cdx.json``: the name CycloneDX readers look for); auditwheel
writes its own ``sboms/auditwheel.cdx.json`` beside it when it grafts a library a system package
provides, and that one is kept as it is.

It names what the wheel is and what made it, every fact taken from the build manifest
(``tools.core.manifest``) or the recipe, never measured again:

* the wheel itself (``metadata.component``: name, the final version with its local label, a
  ``pkg:pypi`` purl with the wheel's file name, the cell, CUDA, torch, Python, platform);
* the upstream sdist (its URL and sha256) and each of the recipe's patch files (sha256);
* torch as built against (the build venv's torch, whose headers the extension compiled with),
  the CUDA toolkit, nvcc and the host C++ compiler (the manifest's ``compiler`` lines);
* the builder image (its tag; the build does not record a digest, and the document says so);
* the tools of the build (``metadata.tools``): this project's tools (version, recipe revision),
  the repair tool, the package's build backend (the raw wheel's ``WHEEL`` ``Generator:``) and
  the recipe's build requirements as installed in the build venv (ninja...), where known.

The document is deterministic: keys sorted, lists sorted, the timestamp from SOURCE_DATE_EPOCH
and a serial number derived from the wheel's file name (a UUID 5), so the same build gives the
same bytes. It is checked against the CycloneDX 1.6 JSON Schema vendored in ``schemas/`` (no
network at build time); a document that does not validate stops the finish step
(:class:`~tools.core.errors.VerifyError`, exit 10).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import time
import uuid
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jsonschema import Draft7Validator, FormatChecker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from tools import ROOT
from tools.core.errors import VerifyError

#: The folder PEP 770 gives SBOM documents inside ``.dist-info``.
SBOM_DIR = "sboms"
#: Our document's name there (auditwheel's is ``auditwheel.cdx.json``).
SBOM_NAME = "cuwheels.cdx.json"
#: What the manifest's ``checks.sbom.format`` says.
SBOM_FORMAT = "CycloneDX 1.6 JSON"
#: The vendored schemas (source and license: ``schemas/README.md``).
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
BOM_SCHEMA = "bom-1.6.schema.json"
#: The namespace of our own property names (CycloneDX properties are free name/value pairs).
PROP = "cuwheels"
#: RFC 3339's date-time, the format the schema gives ``metadata.timestamp``.
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
#: The UUID namespace of serial numbers: one fixed UUID, so a file name always gives the same one.
_SERIAL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://cuwheels/sbom")


@dataclass(frozen=True)
class Tool:
    """A tool of the build as the SBOM names it: its name, its version (None: not recorded) and
    where the fact comes from (or why it is not known)."""

    name: str
    version: str | None
    source: str


@dataclass(frozen=True)
class PatchFile:
    """A patch applied to the sdist: its file name, sha256 and the recipe's reason."""

    file: str
    sha256: str
    reason: str


@dataclass(frozen=True)
class SbomInputs:
    """What one wheel's SBOM is made of: the manifest (the facts of the build), the wheel's
    final distribution name, version and file name, the patches and the build's tools, and the
    build's SOURCE_DATE_EPOCH."""

    manifest: Mapping[str, Any]
    name: str
    version: str
    file_name: str
    patches: tuple[PatchFile, ...]
    tools: tuple[Tool, ...]
    epoch: int


def project_tool(root: Path = ROOT) -> Tool:
    """This project's tools as the SBOM names them: the version in the ``pyproject.toml`` beside
    them (the container backend stages it with the tools), else the installed distribution's."""
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        project = pyproject.read_text(encoding="utf-8").partition("[project]")[2]
        if m := re.search(r'^version\s*=\s*"([^"]+)"', project, re.M):
            return Tool("cuwheels-tools", m.group(1), "pyproject.toml beside the tools")
    try:
        return Tool("cuwheels-tools", importlib.metadata.version("cuwheels-tools"),
                    "the installed distribution")
    except importlib.metadata.PackageNotFoundError:
        return Tool("cuwheels-tools", None, "not recorded: no pyproject.toml beside the tools "
                                            "and no installed distribution")


def installed_tool(name: str, where: str) -> Tool:
    """A tool this finish step runs from its own environment (auditwheel, delvewheel): the
    version installed there is the one that ran."""
    try:
        return Tool(name, importlib.metadata.version(name), where)
    except importlib.metadata.PackageNotFoundError:
        return Tool(name, None, f"not recorded: {name} is not installed beside the tools")


def wheel_generator(wheel: Path) -> Tool | None:
    """The package's build backend as the raw wheel's ``WHEEL`` names it (``Generator:
    setuptools (80.9.0)``), or None when it names none."""
    with zipfile.ZipFile(wheel) as zf:
        member = next((n for n in zf.namelist() if n.count("/") == 1
                       and n.endswith(".dist-info/WHEEL")), None)
        text = zf.read(member).decode("utf-8", "replace") if member else ""
    m = re.search(r"^Generator:\s*(\S+)(?:\s+\(([^)]+)\))?\s*$", text, re.M)
    return Tool(m.group(1), m.group(2), "the raw wheel's WHEEL Generator") if m else None


def build_venv_tools(site_packages: Path, requirements: Iterable[str], *,
                     isolated: bool) -> list[Tool]:
    """The recipe's build requirements (ninja, setuptools, ...) at the versions the build venv
    holds (its ``site-packages``, where the build's torch is), read from their installed
    metadata. A build with pip's isolation installed them elsewhere, in an environment gone by
    now: then each is named without a version, and says so."""
    names = sorted({Requirement(r).name for r in requirements})
    if isolated:
        return [Tool(n, None, "not recorded: built with pip's build isolation") for n in names]
    found = {canonicalize_name(d.metadata["Name"] or ""): d.version
             for d in importlib.metadata.distributions(path=[str(site_packages)])}
    return [Tool(n, found[canonicalize_name(n)], "the build venv's installed metadata")
            if canonicalize_name(n) in found
            else Tool(n, None, "not recorded: not installed in the build venv") for n in names]


def sbom_member(dist_info: str) -> str:
    """The SBOM's path inside the wheel, for the ``.dist-info`` folder ``dist_info``."""
    return f"{dist_info}/{SBOM_DIR}/{SBOM_NAME}"


def pypi_purl(name: str, version: str, file_name: str | None = None) -> str:
    """The package URL of a PyPI distribution (the purl spec's ``pypi`` type: the name lower
    case with ``-`` for ``_``; a ``file_name`` qualifier names one file of the release)."""
    purl = f"pkg:pypi/{quote(name.lower().replace('_', '-'), safe='')}@{quote(version, safe='')}"
    return purl + (f"?file_name={quote(file_name, safe='')}" if file_name else "")


def _props(pairs: Mapping[str, Any]) -> list[dict[str, str]]:
    """CycloneDX properties from ``pairs`` (None values left out), sorted by name."""
    return [{"name": f"{PROP}:{k}", "value": json.dumps(v) if isinstance(v, bool) else str(v)}
            for k, v in sorted(pairs.items()) if v is not None]


def _sha256(hex_digest: str) -> list[dict[str, str]]:
    return [{"alg": "SHA-256", "content": hex_digest}]


def compiler_version(line: str) -> str | None:
    """The version in a compiler's version line as the manifest keeps it: nvcc's ``Build
    cuda_13.0.r13.0/compiler.36424714_0`` gives ``13.0``, gcc's ``gcc (Debian 12.2.0-14)
    12.2.0`` gives ``12.2.0``; None for ``unknown`` or a line naming no version."""
    if m := re.search(r"\bcuda_(\d+\.\d+)", line):
        return m.group(1)
    found = re.findall(r"(?<![\w.-])(\d+\.\d+(?:\.\d+)*)(?![\w.-])", line)
    return found[-1] if found else None


def _source_components(m: Mapping[str, Any], patches: tuple[PatchFile, ...]) -> list[dict]:
    """The sdist the wheel was built from, and each patch applied to it."""
    source = m.get("source") or {}
    sdist = {
        "type": "library", "bom-ref": f"sdist:{source.get('sdist')}",
        "name": m["package"], "version": m["version"],
        "purl": pypi_purl(m["package"], m["version"], source.get("sdist")),
        "hashes": _sha256(source["sha256"]),
        "externalReferences": [{"type": "source-distribution", "url": source["url"],
                                "hashes": _sha256(source["sha256"])}],
        "properties": _props({"role": "source"}),
    }
    if str(source.get("url", "")).startswith("git+"):
        # A git source (tools.pipeline.gitsource): the commit is the source; the sha256 is of
        # the tar the project packed from it, which no registry holds.
        sdist["purl"] = (f"pkg:generic/{quote(m['package'], safe='')}@"
                         f"{quote(m['version'], safe='')}?vcs_url={quote(source['url'], safe='')}")
        sdist["externalReferences"] = [{"type": "vcs", "url": source["url"]}]
        sdist["properties"] = _props({"role": "source", "archive": f"{source.get('sdist')}, "
                                      "packed from the commit; its sha256 is the tar's"})
    out = [sdist]
    for patch in patches:
        out.append({"type": "file", "bom-ref": f"patch:{patch.file}", "name": patch.file,
                    "hashes": _sha256(patch.sha256), "description": patch.reason,
                    "properties": _props({"role": "patch", "applied-to": sdist["bom-ref"]})})
    return out


def _toolchain_components(m: Mapping[str, Any]) -> list[dict]:
    """torch as built against, the CUDA toolkit, the compilers and the builder image."""
    compiler = m.get("compiler") or {}
    out = [
        {"type": "library", "bom-ref": "build:torch", "name": "torch", "version": m["torch"],
         "purl": pypi_purl("torch", m["torch"]),
         "description": "the torch whose headers and libraries the extension was built against",
         "properties": _props({"role": "built-against", "torch-cuda": m.get("torch_cuda")})},
        {"type": "framework", "bom-ref": "build:cuda-toolkit", "name": "cuda-toolkit",
         "version": m["cuda"], "scope": "excluded",
         "description": "the CUDA toolkit whose headers and nvcc compiled the extension",
         "properties": _props({"role": "built-against"})},
    ]
    for name in sorted(compiler):
        line = compiler[name]
        out.append({"type": "application", "bom-ref": f"compiler:{name}", "name": name,
                    **({"version": v} if (v := compiler_version(line)) else {}),
                    "scope": "excluded", "description": line,
                    "properties": _props({"role": "compiler"})})
    if m.get("image"):
        out.append(_image_component(str(m["image"])))
    return out


def _image_component(image: str) -> dict:
    """The builder image as the manifest names it: ``repo:tag`` or ``repo@sha256:...``."""
    ref, _, digest = image.partition("@")
    last = ref.rsplit("/", 1)[-1]
    repo, tag = (ref.rsplit(":", 1) if ":" in last else (ref, ""))
    return {"type": "container", "bom-ref": "build:image", "name": repo,
            **({"version": tag} if tag else {}), "scope": "excluded",
            **({"hashes": _sha256(digest.removeprefix("sha256:"))}
               if digest.startswith("sha256:") else {}),
            "description": "the builder image the wheel was compiled and finished in",
            "properties": _props({"role": "builder-image", "image": image,
                                  "digest": digest or "not recorded: the build names the image "
                                                      "by its tag only"})}


def _tool_components(tools: Iterable[Tool]) -> list[dict]:
    return [{"type": "application", "bom-ref": f"tool:{t.name}", "name": t.name,
             **({"version": t.version} if t.version else {}),
             "properties": _props({"source": t.source})} for t in sorted(tools, key=lambda t: t.name)]


def sbom_document(inputs: SbomInputs) -> dict[str, Any]:
    """The CycloneDX 1.6 document of one wheel (see the module docstring)."""
    m = inputs.manifest
    purl = pypi_purl(inputs.name, inputs.version, inputs.file_name)
    archs = m.get("archs") or {}
    wheel = {
        "type": "library", "bom-ref": purl, "name": inputs.name, "version": inputs.version,
        "purl": purl,
        "description": f"{m['package']} {m['version']} built for CUDA {m['cuda']} and torch "
                       f"{m['torch']} (cell {m['cell']})",
        "properties": _props({
            "cell": m.get("cell"), "python": m.get("python"), "cuda": m.get("cuda"),
            "torch": m.get("torch"), "cxx11-abi": m.get("cxx11_abi"), "platform": m.get("platform"),
            "archs-requested": " ".join(archs.get("requested") or []) or None,
            "build-number": m.get("build_number"), "backend": m.get("backend"),
            "build-platform": m.get("build_platform"), "recipe-revision": m.get("recipe_revision"),
            "builder-image": m.get("image") or f"none: built by the {m.get('backend')} backend "
                                               "outside a builder image",
        }),
    }
    components = _source_components(m, inputs.patches) + _toolchain_components(m)
    components.sort(key=lambda c: c["bom-ref"])
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(inputs.epoch))
    return {
        "$schema": "http://cyclonedx.org/schema/bom-1.6.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "serialNumber": f"urn:uuid:{uuid.uuid5(_SERIAL_NAMESPACE, inputs.file_name)}",
        "version": 1,
        "metadata": {
            "timestamp": stamp,
            "lifecycles": [{"phase": "build"}],
            "tools": {"components": _tool_components(inputs.tools)},
            "component": wheel,
        },
        "components": components,
        # At run time the wheel needs torch (its pin); the rest made it (their ``role``).
        "dependencies": [{"ref": purl, "dependsOn": ["build:torch"]}, {"ref": "build:torch"}],
    }


def sbom_bytes(document: Mapping[str, Any]) -> bytes:
    """The file's bytes: sorted keys and a fixed indent, so one document is one byte string."""
    return json.dumps(dict(document), indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"


@lru_cache(maxsize=1)
def _validator() -> Draft7Validator:
    """The CycloneDX 1.6 validator, its ``$ref``s to the SPDX and JSF schemas resolved from the
    vendored files by their ``$id`` (never fetched)."""
    resources = []
    for path in sorted(SCHEMA_DIR.glob("*.schema.json")):
        contents = json.loads(path.read_text(encoding="utf-8"))
        resources.append((contents["$id"], Resource.from_contents(contents, DRAFT7)))
    registry = Registry().with_resources(resources)
    schema = json.loads((SCHEMA_DIR / BOM_SCHEMA).read_text(encoding="utf-8"))
    return Draft7Validator(schema, registry=registry, format_checker=_formats())


def _formats() -> FormatChecker:
    """jsonschema's format checks, with ``date-time`` checked here: its own check needs a
    package this project does not install, and skips the format silently without it."""
    checker = FormatChecker()

    @checker.checks("date-time")
    def _date_time(value: object) -> bool:
        return not isinstance(value, str) or _RFC3339.fullmatch(value) is not None
    return checker


def _where(error: ValidationError) -> str:
    """The JSON path of an error's place in the document (``metadata.component``)."""
    parts = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return parts.lstrip(".") or "the document"


def schema_problem(document: Any) -> ValidationError | None:
    """The most telling of the schema's errors for ``document``, or None when it validates."""
    return best_match(_validator().iter_errors(document))


def validate_sbom(data: bytes, *, wheel: str, member: str) -> dict[str, Any]:
    """The parsed document in ``data`` (``member`` of ``wheel``), checked against CycloneDX 1.6;
    VerifyError naming the wheel, the member, the place, the schema rule and the fix."""
    fix = ("the SBOM is written by tools.finish.sbom.sbom_document from the build manifest: "
           "fix the field there (or the manifest fact it is made from) and finish the wheel again")
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise VerifyError(f"{wheel}: {member} is not JSON ({exc})", hint=fix) from None
    error = schema_problem(document)
    if error is not None:
        rule = "/".join(str(p) for p in error.absolute_schema_path)
        raise VerifyError(f"{wheel}: {member} is not a valid {SBOM_FORMAT} document: at "
                          f"{_where(error)}: {error.message} (the schema's rule "
                          f"#/{rule} in {BOM_SCHEMA})", hint=fix)
    return document


def sbom_record(member: str, data: bytes) -> dict[str, str]:
    """What the manifest's ``checks.sbom`` says: the SBOM's path, format and sha256."""
    return {"path": member, "format": SBOM_FORMAT, "sha256": hashlib.sha256(data).hexdigest()}


def check_wheel_sbom(wheel: Path) -> dict[str, str]:
    """The finished ``wheel``'s SBOM read back and validated; returns its ``checks.sbom`` record.
    VerifyError when the wheel has none or it does not validate."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        dist_infos = sorted({n.split("/")[0] for n in names
                             if n.count("/") >= 1 and n.split("/")[0].endswith(".dist-info")})
        member = sbom_member(dist_infos[0]) if len(dist_infos) == 1 else None
        if member is None or member not in names:
            raise VerifyError(f"{wheel.name} carries no {SBOM_DIR}/{SBOM_NAME} in its .dist-info",
                              hint="the metadata step writes it (tools.finish.sbom); a step "
                                   "that rewrote the wheel after it dropped it")
        data = zf.read(member)
    validate_sbom(data, wheel=wheel.name, member=member)
    return sbom_record(member, data)
