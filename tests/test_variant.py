"""tools.core.variant: the local-label grammar (ours and the third-party conventions), with and
without trailing build metadata, and the names derived from a variant."""

from __future__ import annotations

import doctest

import pytest

from tools.core import variant
from tools.core.variant import Variant, parse_label, uv_index_name

LABELS = [
    # (label, expected Variant or None)
    ("cu130.torch2.13", Variant("13.0", "2.13")),                          # ours
    ("cu124.torch2.6.cxx11abi0", Variant("12.4", "2.6", False)),           # ours, pre-C++11 ABI torch
    ("cu124.torch2.6.cxx11abi1", Variant("12.4", "2.6", True)),            # ours, ABI stated explicitly
    ("cu12torch2.8cxx11abiTRUE", Variant("12", "2.8", True)),              # Dao-AILab: any CUDA 12.x
    ("cu12torch2.10cxx11abiFALSE", Variant("12", "2.10", False)),          # Dao-AILab, two-digit torch minor
    ("cu128torch2.8", Variant("12.8", "2.8")),                             # exact CUDA, no ABI flag
    ("cu.12.8.torch.2.10", Variant("12.8", "2.10")),                       # dotted
    ("pt28cu128", Variant("12.8", "2.8")),                                 # PyG
    ("pt210cu126", Variant("12.6", "2.10")),                               # PyG, two-digit torch minor
    ("cu130torch2.10gite2743ab", Variant("13.0", "2.10")),                 # flash-attn 3: git hash glued on
    ("cu128torch2.8.post1", Variant("12.8", "2.8")),                       # a dotted post-release suffix
    ("cu12torch2.8cxx11abiTRUE.post2", Variant("12", "2.8", True)),        # metadata after the ABI flag
    ("cu128torch2.8post1", Variant("12.8", "2.8")),                        # post glued on
    ("cu128torch2.8dev3.gitabc1234", Variant("12.8", "2.8")),              # glued word, then a dotted segment
    ("cu130.torch2.13.gite2743ab", Variant("13.0", "2.13")),               # ours with a dotted git hash
    ("cu.12.8.torch.2.10.post1", Variant("12.8", "2.10")),                 # dotted with a suffix
    ("cu132.torch2.16rc.git0123abc", Variant("13.2", "2.16", prerelease=True)),  # ours, a candidate
    ("cu124.torch2.6rc.git0123abc.cxx11abi0", Variant("12.4", "2.6", False, prerelease=True)),
    ("cu132.torch2.16rc", None),                                           # a candidate names its commit
    ("cu132.torch2.16rc.gitxyz", None),                                    # ... in hex
    ("pt28cu128.1", Variant("12.8", "2.8")),                               # PyG with a numeric segment
    ("CU128TORCH2.8", Variant("12.8", "2.8")),                             # PEP 440 labels ignore case
    ("cu128torch2.8x", None),                                              # glued garbage: not metadata
    ("cu128torch2.8git123", None),                                         # a git hash needs 7+ hex digits
    ("cu124.torch2.6.cxx11abi2", None),                                    # a malformed ABI flag is refused
    ("cu128torch2.8.cu129", None),                                         # a second CUDA is not metadata
    ("cu128torch2.8.", None),                                              # an empty segment
    ("cpu", None),                                                         # not a variant
    ("cu128", None),                                                       # CUDA without torch
    ("torch2.8", None),                                                    # torch without CUDA
    ("", None),                                                            # no label
]


@pytest.mark.parametrize("label, expected", LABELS, ids=[row[0] or "empty" for row in LABELS])
def test_parse_label(label, expected):
    assert parse_label(label) == expected


def test_uv_index_name():
    assert uv_index_name(Variant("12.8", "2.9").index_path) == "cuwheels-cu128-torch2.9"


def test_a_candidates_wheel_sorts_before_the_finals_and_lives_under_pre():
    """PEP 440 compares the segment ``16rc`` (letters) below ``16`` (digits): the final's wheel of
    the same version wins wherever both are seen; the candidate's index is pre/ only."""
    from packaging.version import Version
    rc = variant.format_label("13.2", "2.16.0", candidate="0123abcdef")
    assert Version(f"2.8.3+{rc}") < Version("2.8.3+cu132.torch2.16")
    assert Version(f"2.8.3+{rc}") < Version("2.8.3+cu132.torch2.16.post1")
    assert parse_label(rc).index_path == "pre/cu132/torch2.16"
    assert Variant("13.2", "2.16", serves=("2.15", "2.16"), prerelease=True).index_paths == (
        "pre/cu132/torch2.15", "pre/cu132/torch2.16")
    assert variant.is_candidate_label(rc) and not variant.is_candidate_label("cu132.torch2.16")


def test_docstring_examples():
    assert doctest.testmod(variant).failed == 0


CELL_IDS = [
    # (cell_id arguments, the id, the group id)
    (("flash_attn", "3.12", "12.9"), "flash_attn-3.12-cu129", "flash_attn-cu129"),  # default torch
    (("flash_attn", "3.12", "12.9", "2.8"), "flash_attn-3.12-cu129-torch2.8",
     "flash_attn-cu129-torch2.8"),                                                   # another series
    (("xformers", "py3", "13.0", "2.10+"), "xformers-py3-cu130-torch2.10+",
     "xformers-cu130-torch2.10+"),                                                   # stable ABI
    (("flash_attn", "3.12", "13.0", None, "linux_aarch64"), "flash_attn-3.12-cu130-aarch64",
     "flash_attn-cu130-aarch64"),                                                    # aarch64
    (("flash_attn", "3.12", "13.0", "2.12", "linux_aarch64"),
     "flash_attn-3.12-cu130-torch2.12-aarch64", "flash_attn-cu130-torch2.12-aarch64"),
    (("xformers", "py3", "13.2", "2.10+", "win_amd64"), "xformers-py3-cu132-torch2.10+-win",
     "xformers-cu132-torch2.10+-win"),                                               # Windows
    (("mmcv", "abi3", "12.8", "2.16rc", "win_amd64"), "mmcv-abi3-cu128-torch2.16rc-win",
     "mmcv-cu128-torch2.16rc-win"),                                                  # a candidate
]


@pytest.mark.parametrize("args,expect,group", CELL_IDS)
def test_cell_ids_and_their_parts(args, expect, group):
    assert variant.cell_id(*args) == expect
    package, _python, *rest = args
    assert variant.group_id(package, *rest) == group
    parts = variant.parse_cell_id(expect)
    platform = args[4] if len(args) > 4 else variant.DEFAULT_PLATFORM
    assert (parts.package, parts.python, parts.cuda, parts.torch, parts.platform) == \
        (args[0], args[1], args[2], args[3] if len(args) > 3 else None, platform)


@pytest.mark.parametrize("text", [
    "flash_attn-3.12-cu130-arm64",         # not a platform part
    "flash_attn-3.12-cu130-torch2.12-x86",  # nor this
    "flash_attn-cu130",                     # a group id, not a cell id
    "flash_attn-3.12-cu130-aarch64-torch2.12",  # the platform part comes last
])
def test_what_is_not_a_cell_id(text):
    assert variant.parse_cell_id(text) is None


def test_a_platform_without_an_id_part_is_refused():
    with pytest.raises(ValueError, match="no id part for platform 'linux_riscv64'"):
        variant.cell_id("flash_attn", "3.12", "13.0", platform="linux_riscv64")


# Arabic-Indic, Devanagari and fullwidth digits: str.isdigit(), int() and re's \d take them all.
UNICODE_DIGITS = ["\u0661\u0662.\u0668", "\u0967\u0968.\u096e", "\uff11\uff12.\uff18", "12.\u0668"]


@pytest.mark.parametrize("text", ["12.8", "2.10", "13", "2.8.0"])
def test_dotted_digits_are_ascii_digits_in_dot_separated_parts(text):
    assert variant.is_dotted_digits(text)
    assert variant.dotted_key(text) == tuple(int(p) for p in text.split("."))


@pytest.mark.parametrize("text", [*UNICODE_DIGITS, "12.x", "", ".8", "12.", "12..8", " 12.8", "+12", "1_2",
                                  "12.8\n", 12.8, None])
def test_anything_else_is_not_a_variant_version(text):
    assert not variant.is_dotted_digits(text)
    with pytest.raises(ValueError, match="ASCII digits in dot-separated parts"):
        variant.dotted_key(text)


@pytest.mark.parametrize("text", UNICODE_DIGITS)
def test_unicode_digits_name_no_variant_anywhere(text):
    nodot = text.replace(".", "")
    assert parse_label(f"cu{nodot}.torch2.8") is None
    assert parse_label(f"cu128.torch{text}") is None
    with pytest.raises(ValueError):
        variant.cuda_from_nodot(nodot)
    with pytest.raises(ValueError):
        variant.torch_series(text)
    assert variant.parse_cell_id(f"demo-3.12-cu{nodot}") is None
