"""tools.core.manifest: the build manifest's one definition, written by the finish stage and read
by the index and the selector."""

from __future__ import annotations

import json
import zipfile

import pytest

from tests.wheelfactory import make_wheel
from tools.core.manifest import (
    MANIFEST_NAME,
    MANIFEST_SCHEMA,
    Manifest,
    archs_found,
    manifest_bytes,
    manifest_platform,
    parse_manifest,
    read_manifest,
    variant_from_manifest,
)
from tools.core.variant import Variant
from tools.finish.wheelmeta import set_version_and_pin
from tools.selector.client import Index
from tools.sitegen.wheelread import inspect_wheel

SO = "demo_ext/_C.cpython-311-x86_64-linux-gnu.so"
FOUND = {SO: {"sass": ["80", "90"], "ptx": ["90"]}}
ABI = {"python": "cpython", "torch": "exact"}
COMPILER = {"nvcc": "Build cuda_13.0.r13.0/compiler.36424714_0", "gcc": "gcc (Debian 12.2.0-14) 12.2.0"}
EXTRA = {"image": "pytorch/manylinux2_28-builder:cuda13.0", "engine": "podman"}


def _manifest(**changes) -> Manifest:
    fields = dict(cell="demo_ext-3.11-cu130", package="demo_ext", version="1.2.0", python="3.11",
                  cuda="13.0", torch="2.13.0", cxx11_abi=True, archs_requested=("80", "90"),
                  archs_found=FOUND, sdist="demo_ext-1.2.0.tar.gz", sha256="ab" * 32,
                  url="https://files.example.invalid/demo_ext-1.2.0.tar.gz",
                  patches=("0001-Read-arch-list.patch",), recipe_revision="0123abcd-dirty",
                  build_number=2, backend="container", compiler=COMPILER, torch_cuda="13.0",
                  archs_override=False, abi=ABI, build_platform="Linux x86_64 glibc 2.28",
                  extra=EXTRA)
    fields.update(changes)
    return Manifest(**fields)


def _written_before(m: Manifest) -> dict:
    """The manifest as the finish stage spelled it out (a dict literal) before this module
    defined it, from the same values."""
    return {
        "schema": MANIFEST_SCHEMA,
        "cell": m.cell,
        "package": m.package,
        "version": m.version,
        "python": m.python,
        "cuda": m.cuda,
        "torch": m.torch,
        "cxx11_abi": m.cxx11_abi,
        "archs": {"requested": list(m.archs_requested), "found": m.archs_found},
        "source": {"sdist": m.sdist, "sha256": m.sha256, "url": m.url},
        "patches": list(m.patches),
        "recipe_revision": m.recipe_revision,
        "build_number": m.build_number,
        "backend": m.backend,
        "compiler": m.compiler,
        "torch_cuda": m.torch_cuda,
        "archs_override": m.archs_override,
        "abi": m.abi,
        "build_platform": m.build_platform,
        "platform": m.platform,     # added with aarch64 and Windows builds
        "checks": m.checks,
        **m.extra,
    }


@pytest.mark.parametrize("changes", [
    {},
    # a host build: no image, the existing-interpreter flag, an old-ABI torch, no patches
    {"extra": {"existing_python": True}, "cxx11_abi": False, "patches": (), "backend": "host"},
    # the kernel check's summary added after the fact, and a backend key that wins over a field
    {"extra": {"kernel_check": {"verdict": "not run: no GPU"}, "build_platform": "elsewhere"}},
    # a Windows build: the ABI check can't run and the manifest says so
    {"platform": "win_amd64", "checks": {"abi_check": "not possible on Windows: ...",
                                         "dll_imports": "passed: 11 DLLs"}},
])
def test_the_bytes_are_those_the_finish_stage_wrote(changes):
    m = _manifest(**changes)
    before = _written_before(m)
    assert list(m.to_json()) == list(before)  # the same keys in the same order (the build report)
    assert m.to_json() == before
    assert manifest_bytes(m.to_json()) == json.dumps(before, indent=2, sort_keys=True).encode() + b"\n"


def test_the_written_text():
    text = manifest_bytes(_manifest().to_json()).decode()
    assert text.startswith('{\n  "abi": {\n    "python": "cpython",\n    "torch": "exact"\n  },\n')
    assert '\n  "archs": {\n    "found": {\n      "demo_ext/_C.cpython-311' in text
    assert text.endswith('\n  "version": "1.2.0"\n}\n')


def test_written_by_finish_read_by_the_index_and_the_selector(tmp_path):
    raw = make_wheel(tmp_path / "raw", "demo-ext", "1.2.0", tag="cp311-cp311-manylinux_2_28_x86_64")
    written = _manifest().to_json()
    wheel = set_version_and_pin(raw, tmp_path / "out", label="cu130.torch2.13",
                                torch_pin="torch==2.13.*", manifest=written, epoch=1577750400)
    with zipfile.ZipFile(wheel) as zf:
        member = f"demo_ext-1.2.0+cu130.torch2.13.dist-info/{MANIFEST_NAME}"
        assert zf.read(member) == manifest_bytes(written)
        assert read_manifest(zf) == written
    # the selector, on a local wheel
    found, how = Index(str(wheel.parent)).wheel_manifest(wheel.as_uri(), None)
    assert (found, how) == (written, "read from the local wheel")
    assert archs_found(found) == FOUND
    # the index
    facts = inspect_wheel(wheel)
    assert facts.variant == Variant("13.0", "2.13", True)
    assert facts.archs == {SO: {"ptx": ["90"], "sass": ["80", "90"]}}


def test_a_wheel_without_a_manifest_and_nested_files(tmp_path):
    wheel = make_wheel(tmp_path, "ext", "1.0")
    with zipfile.ZipFile(wheel) as zf:
        assert read_manifest(zf) is None
        # only <name>.dist-info/cuwheels.json at the top counts, not a vendored package's
        assert read_manifest(zf, ["ext/vendored-1.0.dist-info/cuwheels.json"]) is None


@pytest.mark.parametrize("data, message", [
    (b"[1, 2]", "x.dist-info/cuwheels.json holds a JSON list, not an object"),
    (b'"text"', "holds a JSON str, not an object"),
    (b"{not json", "Expecting property name"),
])
def test_parse_refuses_what_is_not_a_json_object(data, message):
    with pytest.raises(ValueError, match=message):
        parse_manifest(data, "x.dist-info/cuwheels.json")


def test_parse_takes_bytes_and_text():
    assert parse_manifest(b'{"cuda": "12.8"}') == parse_manifest('{"cuda": "12.8"}') == {"cuda": "12.8"}


@pytest.mark.parametrize("manifest, found", [
    ({"archs": {"requested": ["90"], "found": FOUND}}, FOUND),
    ({"archs": {"requested": ["90"]}}, None),
    ({"archs": ["90"]}, None),
    ({}, None),
])
def test_archs_found(manifest, found):
    assert archs_found(manifest) == found


def test_variant_of_a_stable_build_lists_the_series_it_serves():
    m = _manifest(abi={"python": "none", "torch": "stable", "serves": ["2.11", "2.13.1"]})
    assert variant_from_manifest(m.to_json()) == Variant("13.0", "2.13", True, ("2.11", "2.13"))
    assert variant_from_manifest({"cell": "x"}) is None
    with pytest.raises(ValueError, match="abi.serves must be a non-empty list"):
        variant_from_manifest({"cuda": "13.0", "torch": "2.13", "abi": {"torch": "stable", "serves": []}})


PLATFORMS = [
    # (manifest, platform it records)
    ({"platform": "linux_aarch64"}, "linux_aarch64"),
    ({"platform": "win_amd64"}, "win_amd64"),
    ({}, "linux_x86_64"),              # written before the key existed: every such build was x86_64
]


@pytest.mark.parametrize("manifest, platform", PLATFORMS, ids=[p for _, p in PLATFORMS])
def test_manifest_platform(manifest, platform):
    assert manifest_platform(manifest) == platform


@pytest.mark.parametrize("value", [3, "linux aarch64", "<script>", None])
def test_a_platform_that_is_not_a_name_is_refused(value):
    with pytest.raises(ValueError, match="platform must be a platform name"):
        manifest_platform({"platform": value})


def test_an_old_manifest_still_reads(tmp_path):
    """A manifest of a build before ``platform`` and ``checks``: the same variant, x86_64."""
    old = {k: v for k, v in _manifest().to_json().items() if k not in ("platform", "checks")}
    assert variant_from_manifest(old) == variant_from_manifest(_manifest().to_json())
    assert manifest_platform(old) == "linux_x86_64"


@pytest.mark.parametrize("field,value,rule", [
    ("cuda", "12.x", "cuda must be a CUDA version of ASCII digits"),
    ("cuda", "\u0661\u0662.\u0668", "cuda must be a CUDA version of ASCII digits"),  # would make cu١٢٨/
    ("cuda", "12.8.1", "cuda must be a CUDA version of ASCII digits"),
    ("cuda", 12.8, "cuda must be a CUDA version of ASCII digits"),
    ("torch", "2.\u0668", "not a torch version"),
    ("torch", 2.8, "torch must be a torch version"),
    ("cxx11_abi", "yes", "cxx11_abi must be true, false or null"),
])
def test_a_manifest_variant_breaking_the_one_rule_is_a_value_error(field, value, rule):
    manifest = {"cuda": "12.8", "torch": "2.8", field: value}
    with pytest.raises(ValueError, match=rule):
        variant_from_manifest(manifest)
