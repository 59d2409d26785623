"""tools.selector.advice: what a miss says would help, for each reason, against a real served index.

A site built by tools.index and served by tools.serve on 127.0.0.1 holds flash-attn for torch
2.8 + CUDA 12.8 (Python 3.11 and 3.12, Linux x86_64 only) and torch 2.13 + CUDA 13.0 (Python
3.11), and causal-conv1d, another package, for torch 2.9 + CUDA 12.6 on both Linux platforms.
Machines are given by overrides (tests/test_selector.py's ``machine``): the same answers on any
host. The command runs as users run it (``python -m tools.selector``), its printed answer read
back; the minimum driver is the site's own word (selector.json, from recipes/table.yaml).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from test_selector import CLIENT_TIMEOUT, X86, Served, _site, machine
from tools import ROOT
from tools.core.site import INDEX_URL
from tools.core.variant import cell_id, torch_index_url
from tools.selector import answer as selection
from tools.selector import cli, client

AARCH64 = "manylinux_2_28_aarch64"
WHEELS = [
    ("flash-attn", "2.8.3", "cu128.torch2.8", f"cp311-cp311-{X86}", None),
    ("flash-attn", "2.8.3", "cu128.torch2.8", f"cp312-cp312-{X86}", None),
    ("flash-attn", "2.8.3", "cu130.torch2.13", f"cp311-cp311-{X86}", None),
    ("causal-conv1d", "1.5.0", "cu126.torch2.9", f"cp311-cp311-{X86}", None),
    ("causal-conv1d", "1.5.0", "cu126.torch2.9", f"cp311-cp311-{AARCH64}", None),
]
#: The flags of the machine every case starts from: Python 3.11, Linux x86_64, driver 570.
BASE = {"python_version": "3.11", "machine": "x86_64", "glibc": "2.36", "torch_version": "2.8.0+cu128",
        "cxx11_abi": "1", "cuda_driver": "570.86.10", "sm": "90"}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[Served]:
    served = _site(tmp_path_factory.mktemp("advice"), WHEELS)
    yield served
    served.stop()


def pick(site: Served, package: str = "flash-attn", **overrides: str) -> selection.Answer:
    return selection.select(client.Index(site.url), package, machine(**overrides))


def torch_line(lead: str, torch: str, cuda: str) -> str:
    index = f"cu{cuda.replace('.', '')}/torch{torch}"
    return (f"{lead} torch {torch} + CUDA {cuda}, which the index has flash-attn wheels for ({index}): "
            f'pip install "torch=={torch}.*" --index-url {torch_index_url(cuda)}, then run this again')


def run_select(*args: str, **overrides: str) -> subprocess.CompletedProcess:
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in {**BASE, **overrides}.items()]
    return subprocess.run([sys.executable, "-m", "tools.selector", *args, *flags], cwd=ROOT, capture_output=True,
                          text=True, timeout=CLIENT_TIMEOUT)


def printed_advice(stdout: str) -> list[str]:
    """The lines of the printed answer's "What would help:" section."""
    lines = stdout.splitlines()
    start = lines.index("What would help:") + 1
    out = []
    for line in lines[start:]:
        if not line.startswith("  - "):
            break
        out.append(line[4:])
    return out
