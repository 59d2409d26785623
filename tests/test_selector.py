"""tools.selector: detection, answers from a real index, the printed pip/uv commands, and the doctor.

The index is built by tools.index from wheelfactory wheels (with build manifests and our labels)
and served by tools.serve in a thread of this process; a second served index stands in for PyPI
with a decoy ``demo-ext 99.0`` and an unlabelled ``1.2.0``, which the printed commands must never
pick. Fake torch installs (``torch/version.py``, dist-info, ``libc10.so``) and a fake
``nvidia-smi`` give the detection real files and processes to read; every server is shut down by
its fixture and every subprocess has a timeout.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from wheelfactory import installed, make_wheel

from tools import ROOT
from tools.selector import answer as selection
from tools.selector import checks, cli, client, detect, doctor, facts, fetch, gpu
from tools.sitegen.generate import IndexRun, build_index
from tools.pipeline.venvs import uv_bin
from tools.sitegen.server import make_server

CLIENT_TIMEOUT = 120
X86 = "manylinux_2_28_x86_64"
SO = "demo_ext_cuda.cpython-311-x86_64-linux-gnu.so"
C10_SYMBOL = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib"


# --------------------------------------------------------------------------- the small parsers


@pytest.mark.parametrize("spec", [">=3.9", ">=3.9,<3.12", "!=3.10.*", "==3.11.*", "~=3.10", "~=3.11.2", ">3.11",
                                  "<=3.11", "==3.11", ">=3.12", "", ">=3.8, !=3.11.0"])
@pytest.mark.parametrize("python", [(3, 9, 0), (3, 10, 4), (3, 11, 0), (3, 11, 7), (3, 12, 1), (3, 13, 0)])
def test_requires_python_matches_packaging(spec, python):
    assert checks.python_allowed(spec, python) == SpecifierSet(spec).contains(".".join(map(str, python)))


@pytest.mark.parametrize("arch, cc, sass, ptx", [
    ("80", (8, 0), True, True),
    ("80", (8, 6), True, True),     # same major, newer minor: the sm_80 SASS runs
    ("86", (8, 0), False, False),   # never on an older minor
    ("80", (9, 0), False, True),    # other major: only PTX, JIT-compiled
    ("90a", (9, 0), True, True),
    ("90a", (10, 0), False, False), # arch-specific code runs on exactly that GPU
    ("100f", (10, 3), True, True),  # family code on the family
    ("100f", (12, 0), False, False),
    ("120", (12, 1), True, True),   # a DGX Spark runs sm_120 SASS
    ("90", (12, 0), False, True),   # an RTX 5090 can JIT sm_90 PTX, not run its SASS
])
def test_arch_compatibility(arch, cc, sass, ptx):
    assert gpu.sass_runs(arch, cc) is sass
    assert gpu.ptx_runs(arch, cc) is ptx


@pytest.mark.parametrize("text, expected", [
    ("8.0", (8, 0)), ("sm_90", (9, 0)), ("90a", (9, 0)), ("120", (12, 0)), ("12.1", (12, 1)), ("x", None),
])
def test_parse_sm(text, expected):
    assert gpu.parse_sm(text) == expected


# --------------------------------------------------------------------------- fake environments


def fake_torch(site: Path, version: str, *, cuda: str | None, hip: str | None = None, cxx11_abi: bool = True) -> Path:
    """A torch install as detection sees it: dist-info, torch/version.py, torch/lib/libc10.so."""
    pkg = site / "torch"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (pkg / "version.py").write_text(
        "from typing import Optional\n\n"
        f"__version__ = {version!r}\ndebug = False\ncuda: Optional[str] = {cuda!r}\n"
        f"git_version = 'abc'\nhip: Optional[str] = {hip!r}\n"
    )
    # c10::Error's constructor takes a std::string: mangled with __cxx11 under the C++11 ABI only.
    symbol = b"_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE" \
        if cxx11_abi else b"_ZN3c105ErrorC2ENS_14SourceLocationESs"
    (pkg / "lib" / "libc10.so").write_bytes(b"\x7fELF" + b"\0" * 200_000 + symbol)
    info = site / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n\n")
    (info / "RECORD").write_text("")
    return info


def fake_nvidia_smi(bin_dir: Path, lines: list[str]) -> Path:
    """An ``nvidia-smi`` that prints ``lines`` for the query detection makes."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    body = "\n".join(f"echo {shlex.quote(line)}" for line in lines)
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


ENVIRONMENTS = [
    # id, nvidia-smi lines (None: not installed), libcuda probe, torch (version, cuda, hip, abi), glibc
    ("no-gpu-no-torch", None, None, None, "2.36"),
    ("a100-cuda12-torch", ["8.0, 535.104.05, NVIDIA A100-SXM4-80GB"], None, ("2.8.0+cu128", "12.8", None, True),
     "2.36"),
    ("h100-cuda13-torch", ["9.0, 580.65.06, NVIDIA H100 80GB HBM3"], {"driver_cuda": 13000, "gpus": []},
     ("2.13.0", "13.0", None, True), "2.39"),
    ("rtx5090-and-a100", ["12.0, 575.51.03, NVIDIA GeForce RTX 5090", "8.0, 575.51.03, NVIDIA A100"], None,
     ("2.9.1+cu128", "12.8", None, True), "2.35"),
    ("libcuda-only", None, {"driver_cuda": 12080, "gpus": [[[8, 6], "NVIDIA RTX A6000"]]},
     ("2.8.0+cu128", "12.8", None, True), "2.31"),
    ("old-glibc-old-abi", ["7.0, 470.57.02, Tesla V100"], None, ("2.4.1+cu118", "11.8", None, False), "2.17"),
    ("cpu-only-torch", None, None, ("2.13.0+cpu", None, None, True), "2.36"),
    ("rocm-torch", None, None, ("2.8.0+rocm6.3", None, "6.3.42131", True), "2.36"),
]

EXPECTED = {
    # id: (torch, build, cuda, abi, driver, driver_cuda, sms, glibc, undetected)
    "no-gpu-no-torch": (None, None, None, None, None, None, [], (2, 36), {"torch", "driver", "gpus"}),
    "a100-cuda12-torch": ("2.8.0+cu128", "cuda", "12.8", True, "535.104.05", None, ["80"], (2, 36), set()),
    "h100-cuda13-torch": ("2.13.0", "cuda", "13.0", True, "580.65.06", "13.0", ["90"], (2, 39), set()),
    "rtx5090-and-a100": ("2.9.1+cu128", "cuda", "12.8", True, "575.51.03", None, ["120", "80"], (2, 35), set()),
    "libcuda-only": ("2.8.0+cu128", "cuda", "12.8", True, None, "12.8", ["86"], (2, 31), set()),
    "old-glibc-old-abi": ("2.4.1+cu118", "cuda", "11.8", False, "470.57.02", None, ["70"], (2, 17), set()),
    "cpu-only-torch": ("2.13.0+cpu", "cpu", None, True, None, None, [], (2, 36), {"driver", "gpus"}),
    "rocm-torch": ("2.8.0+rocm6.3", "rocm", None, True, None, None, [], (2, 36), {"driver", "gpus"}),
}


@pytest.mark.parametrize("env", ENVIRONMENTS, ids=[e[0] for e in ENVIRONMENTS])
def test_detection(env, tmp_path, monkeypatch):
    name, smi, libcuda, torch, glibc = env
    smi_path = fake_nvidia_smi(tmp_path / "bin", smi) if smi is not None else None
    monkeypatch.setattr(detect, "_which", lambda prog: str(smi_path) if prog == "nvidia-smi" and smi_path else
                        shutil.which(prog) if prog != "nvidia-smi" else None)
    monkeypatch.setattr(detect, "_libcuda_query", lambda: libcuda)
    monkeypatch.setattr(detect, "_proc_driver_version", lambda: None)
    monkeypatch.setattr(detect, "_libc_version", lambda: ("glibc", glibc))
    monkeypatch.setattr(detect, "_import_torch_query", lambda: pytest.fail("torch must be read, not imported"))
    dist = None
    if torch is not None:
        version, cuda, hip, abi = torch
        dist = importlib.metadata.PathDistribution(fake_torch(tmp_path / "site", version, cuda=cuda, hip=hip,
                                                              cxx11_abi=abi))
    monkeypatch.setattr(detect, "_torch_distribution", lambda: dist)

    m = detect.detect_machine({})
    torch_v, build, cuda, abi, driver, driver_cuda, sms, glibc_t, undetected = EXPECTED[name]
    assert (m.torch, m.torch_build, m.torch_cuda, m.cxx11_abi) == (torch_v, build, cuda, abi)
    assert (m.driver, m.driver_cuda) == (driver, driver_cuda)
    assert [g.sm for g in m.gpus] == sms
    assert m.glibc == glibc_t
    assert set(m.unknown) == undetected
    assert m.python_tag == f"cp{sys.version_info[0]}{sys.version_info[1]}"
    json.dumps(m.to_json())  # always serializable
    assert cli.format_machine(m)


def test_overrides_replace_every_fact(monkeypatch):
    monkeypatch.setattr(detect, "_which", lambda prog: None)
    monkeypatch.setattr(detect, "_libcuda_query", lambda: None)
    monkeypatch.setattr(detect, "_torch_distribution", lambda: pytest.fail("torch given: not looked up"))
    m = detect.detect_machine({"python_version": "3.12", "machine": "aarch64", "glibc": "2.28",
                            "torch_version": "2.8.0+cu128", "cxx11_abi": "1", "cuda_driver": "580.65.06",
                            "sm": "9.0,120"})
    assert (m.python[:2], m.arch, m.glibc, m.torch, m.torch_build, m.torch_cuda, m.cxx11_abi, m.driver) == \
        ((3, 12), "aarch64", (2, 28), "2.8.0+cu128", "cuda", "12.8", True, "580.65.06")
    assert [g.sm for g in m.gpus] == ["90", "120"]
    assert m.unknown == {}
    m = detect.detect_machine({"torch_version": "2.9.1", "torch_cuda": "12.8", "cuda_driver": "12.4", "sm": "none"})
    assert (m.torch_cuda, m.driver, m.driver_cuda, m.gpus) == ("12.8", None, "12.4", [])
    m = detect.detect_machine({"torch_version": "2.9.1", "sm": "none", "cuda_driver": "13.0"})
    assert m.torch_build is None and "torch_cuda" in m.unknown


def test_torch_is_imported_only_when_its_files_say_nothing(tmp_path, monkeypatch):
    info = fake_torch(tmp_path, "2.8.0", cuda="12.8")
    (tmp_path / "torch" / "version.py").unlink()
    (tmp_path / "torch" / "lib" / "libc10.so").unlink()
    monkeypatch.setattr(detect, "_torch_distribution", lambda: importlib.metadata.PathDistribution(info))
    monkeypatch.setattr(detect, "_import_torch_query", lambda: {"version": "2.8.0", "cuda": "12.8", "cxx11_abi": True,
                                                             "gpus": [[[9, 0], "NVIDIA H100"]]})
    m = detect.Machine(python=(3, 11, 7))
    detect.detect_torch(m)
    assert (m.torch_build, m.torch_cuda, m.cxx11_abi, [g.sm for g in m.gpus]) == ("cuda", "12.8", True, ["90"])
    assert m.sources["cxx11_abi"] == "import torch (subprocess)"


def test_nvidia_smi_parsing():
    driver, gpus = detect.parse_nvidia_smi("8.0, 535.104.05, NVIDIA A100-SXM4-80GB\n9.0, 535.104.05, NVIDIA H100\n\n"
                                        "[N/A], 535.104.05, odd\n")
    assert driver == "535.104.05"
    assert [(g.sm, g.name) for g in gpus] == [("80", "NVIDIA A100-SXM4-80GB"), ("90", "NVIDIA H100")]


def test_detection_here_never_crashes():
    """The real command on this machine (maybe no GPU, no nvidia-smi, no torch) answers and exits 0."""
    proc = subprocess.run([sys.executable, "-m", "tools.selector", "--detect", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["python"].startswith(f"{sys.version_info[0]}.{sys.version_info[1]}.")
    if not shutil.which("nvidia-smi"):
        assert "no nvidia-smi on PATH" in facts["undetected"].get("gpus", "no nvidia-smi on PATH")


# --------------------------------------------------------------------------- the index


def manifest(cuda: str, torch: str, sass: list[str], ptx: list[str] = ()) -> dict:
    """A build manifest as tools.build writes it (the keys the selector and the index read)."""
    return {"schema": 1, "cell": f"demo_ext-3.11-cu{cuda.replace('.', '')}", "package": "demo_ext",
            "version": "1.2.0", "python": "3.11", "cuda": cuda, "torch": torch, "cxx11_abi": True,
            "archs": {"requested": list(sass), "found": {SO: {"sass": list(sass), "ptx": list(ptx)}}}}


#: (name, version, label, tag, manifest): what our index publishes.
OUR_WHEELS = [
    ("demo-ext", "1.2.0", "cu128.torch2.8", f"cp311-cp311-{X86}", manifest("12.8", "2.8.0", ["80", "90"])),
    ("demo-ext", "1.2.0", "cu128.torch2.8", f"cp312-cp312-{X86}", manifest("12.8", "2.8.0", ["80", "90"])),
    ("demo-ext", "1.2.0", "cu128.torch2.8", "cp311-cp311-manylinux_2_28_aarch64", manifest("12.8", "2.8.0", ["90"])),
    ("demo-ext", "1.1.0", "cu128.torch2.8", f"cp311-cp311-{X86}", manifest("12.8", "2.8.0", ["80", "90", "120"])),
    ("demo-ext", "1.0.0", "cu128.torch2.8", f"cp311-cp311-{X86}", manifest("12.8", "2.8.0", ["80", "90", "120"])),
    ("demo-ext", "1.2.0", "cu128.torch2.9", f"cp311-cp311-{X86}", manifest("12.8", "2.9.1", ["80", "90"])),
    ("demo-ext", "1.2.0", "cu130.torch2.13", f"cp311-cp311-{X86}",
     manifest("13.0", "2.13.0", ["80", "90", "120"], ["120"])),
    ("demo-ext", "1.2.0", "cu130.torch2.10", "cp311-cp311-manylinux_2_39_x86_64", manifest("13.0", "2.10.0", ["90"])),
    # Built elsewhere: no manifest, Dao-AILab's "any CUDA 12.x" label.
    ("other-ext", "0.5", "cu12torch2.8cxx11abiTRUE", f"cp311-cp311-{X86}", None),
]
YANKED = "demo_ext-1.0.0+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl"
#: What the stand-in for PyPI has: a newer release and an unlabelled build of the same version.
DECOYS = [("demo-ext", "99.0"), ("demo-ext", "1.2.0"), ("other-ext", "99.0")]


class Served:
    """A served site: ``url`` is its root, without a trailing slash."""

    def __init__(self, server):
        self.server = server
        self.url = server.url
        self.thread = threading.Thread(target=server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def _site(root: Path, wheels: list[tuple], *, yanked: str | None = None) -> Served:
    files, site = root / "files", root / "site"
    files.mkdir(parents=True)
    site.mkdir()
    for name, version, label, tag, man in wheels:
        make_wheel(files, name, version, local=label, tag=tag, manifest=man, requires_python=">=3.9")
    yanked_path = None
    if yanked:
        yanked_path = root / "yanked.yaml"
        yanked_path.write_text(f"{yanked}: broken build\n")
    # "/files" is resolved against each page's URL: the pages don't need to know the port.
    report = build_index(IndexRun(wheels_dir=files, output_dir=site, base_url="/files", ledger_path=root / "ledger.json",
                         init_ledger=True, yanked_path=yanked_path))
    assert not report.rejected
    return Served(make_server(site, files))


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Iterator[Served]:
    """Our index, built by tools.index and served by tools.serve."""
    served = _site(tmp_path_factory.mktemp("ours"), OUR_WHEELS, yanked=YANKED)
    yield served
    served.stop()


@pytest.fixture(scope="module")
def decoy(tmp_path_factory) -> Iterator[Served]:
    """The stand-in for the default index (PyPI)."""
    served = _site(tmp_path_factory.mktemp("decoy"), [(n, v, None, "py3-none-any", None) for n, v in DECOYS])
    yield served
    served.stop()


def machine(**overrides: str) -> detect.Machine:
    """A machine from overrides only (nothing detected: the same answer on any test host)."""
    base = {"python_version": "3.11", "machine": "x86_64", "glibc": "2.36", "torch_version": "2.8.0+cu128",
            "cxx11_abi": "1", "cuda_driver": "570.86.10", "sm": "90"}
    base.update(overrides)
    return detect.detect_machine({k: v for k, v in base.items() if v is not None}, allow_import=False)


SELECT_CASES = [
    # (id, machine overrides, version, fits, expected index or reason fragment, expected version/filename part)
    ("h100-torch2.8", {}, None, True, "cu128/torch2.8", "1.2.0+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64"),
    ("python3.12", {"python_version": "3.12"}, None, True, "cu128/torch2.8", "cp312-cp312"),
    ("a100-sm80", {"sm": "80"}, None, True, "cu128/torch2.8", "1.2.0+cu128.torch2.8-cp311"),
    ("a6000-sm86-runs-sm80-sass", {"sm": "86"}, None, True, "cu128/torch2.8", "1.2.0+cu128.torch2.8-cp311"),
    # 1.2.0 has no sm_120 kernels: the newest that fits is 1.1.0.
    ("rtx5090-sm120", {"sm": "120"}, None, True, "cu128/torch2.8", "1.1.0+cu128.torch2.8"),
    ("no-gpu", {"sm": "none"}, None, True, "cu128/torch2.8", "1.2.0+cu128.torch2.8-cp311"),
    ("aarch64", {"machine": "aarch64"}, None, True, "cu128/torch2.8", "manylinux_2_28_aarch64"),
    ("torch2.9", {"torch_version": "2.9.1+cu128"}, None, True, "cu128/torch2.9", "1.2.0+cu128.torch2.9"),
    ("torch2.13-driver580", {"torch_version": "2.13.0+cu130", "cuda_driver": "580.65.06", "sm": "120"}, None, True,
     "cu130/torch2.13", "1.2.0+cu130.torch2.13"),
    ("torch2.13-driver-cuda-13.0", {"torch_version": "2.13.0", "torch_cuda": "13.0", "cuda_driver": "13.0"}, None,
     True, "cu130/torch2.13", "1.2.0+cu130.torch2.13"),
    ("torch2.10-new-glibc", {"torch_version": "2.10.0+cu130", "cuda_driver": "580.65.06", "glibc": "2.39"}, None, True,
     "cu130/torch2.10", "manylinux_2_39"),
    ("other-ext-cu126-uses-any-12x", {"torch_version": "2.8.0+cu126"}, None, True, "cu12/torch2.8",
     "other_ext-0.5+cu12torch2.8cxx11abiTRUE"),
    ("pinned-older-version", {}, "1.1.0", True, "cu128/torch2.8", "1.1.0+cu128.torch2.8"),
    # Nothing fits, and why.
    ("python3.10", {"python_version": "3.10"}, None, False, "cp311-cp311, cp312-cp312 only, this is Python 3.10", None),
    ("sm120-pinned", {"sm": "120"}, "1.2.0", False, "has no kernels for sm_120", None),
    ("torch2.13-driver570", {"torch_version": "2.13.0+cu130"}, None, False, "needs NVIDIA driver >= 580;", None),
    ("torch2.10-old-glibc", {"torch_version": "2.10.0+cu130", "cuda_driver": "580.65.06", "glibc": "2.35"}, None,
     False, "needs glibc >= 2.39 (manylinux_2_39_x86_64), this machine has glibc 2.35", None),
    ("torch2.11-no-variant", {"torch_version": "2.11.0+cu128"}, None, False,
     "no demo-ext wheel for torch 2.11 + CUDA 12.8 (the variant index cu128/torch2.11/simple/ has none)", None),
    ("cpu-torch", {"torch_version": "2.13.0+cpu"}, None, False, "is a CPU-only build", None),
    ("rocm-torch", {"torch_version": "2.8.0+rocm6.3"}, None, False, "is a ROCm build", None),
    ("old-abi-torch", {"cxx11_abi": "0", "torch_version": "2.8.0+cu126"}, None, False, "C++ ABI", None),
    ("yanked", {}, "1.0.0", False, "is yanked (broken build)", None),
    ("no-such-version", {}, "3.0", False, "the index has no demo-ext 3.0", None),
    ("windows", {"platform": "win_amd64"}, None, False, "this machine runs windows", None),
]


#: Misses no build helps: the driver is too old for the CUDA of torch itself, torch has no CUDA,
#: the version is withdrawn or absent.
NO_BUILD = {"torch2.13-driver570", "cpu-torch", "rocm-torch", "yanked", "no-such-version"}


@pytest.mark.parametrize("case", SELECT_CASES, ids=[c[0] for c in SELECT_CASES])
def test_select(case, index):
    name, overrides, version, fits, where, what = case
    package = "other-ext" if name.startswith("other-ext") else "demo-ext"
    if name == "old-abi-torch":
        package = "other-ext"  # its label says cxx11abiTRUE; this torch uses the old ABI
    answer = selection.select(client.Index(index.url), package, machine(**overrides), version=version)
    assert answer.fits is fits, (answer.reason, answer.reasons)
    if fits:
        assert answer.index_path == where
        assert answer.index_url == f"{index.url}/{where}/simple/"
        assert what in answer.filename
        assert answer.pip == f'pip install "{package}=={answer.version}" --extra-index-url {answer.index_url}'
        assert f'{package} = {{ index = "cuwheels-{where.replace("/", "-")}" }}' in answer.uv["pyproject"]
        assert answer.build is None
    else:
        assert where in answer.reason + " ".join(answer.reasons)
        assert answer.advice, answer.reason  # every miss says what would help
        if name in NO_BUILD:  # a build for this machine would not fit it either
            assert answer.build is None
        else:
            assert answer.build and "--backend host" in answer.build
    json.dumps(answer.to_json())
    assert cli.format_answer(answer)


def test_a_stable_abi_build_is_picked_for_every_torch_it_serves(tmp_path_factory):
    # One build against torch 2.14 on its stable ABI, for every Python (py39-none), listed for 2.11-2.14.
    man = {**manifest("13.0", "2.14.1", ["80", "90"]), "package": "stable_ext",
           "abi": {"python": "none", "torch": "stable", "torch_from": "2.10", "serves": ["2.14", "2.13", "2.12", "2.11"]}}
    served = _site(tmp_path_factory.mktemp("stable"),
                   [("stable-ext", "1.0", "cu130.torch2.14", "py39-none-manylinux_2_28_x86_64", man)])
    try:
        idx = client.Index(served.url)
        for torch, python in (("2.11.0+cu130", "3.10"), ("2.13.0+cu130", "3.14")):
            m = machine(torch_version=torch, python_version=python, cuda_driver="580.65.06")
            answer = selection.select(idx, "stable-ext", m)
            assert answer.fits, (answer.reason, answer.reasons)
            assert answer.index_path == f"cu130/torch{torch[:4]}"
            assert answer.filename == "stable_ext-1.0+cu130.torch2.14-py39-none-manylinux_2_28_x86_64.whl"
        # torch 2.9 is not served: the alternatives are the four indexes that list it.
        answer = selection.select(idx, "stable-ext", machine(torch_version="2.9.1+cu130", cuda_driver="580.65.06"))
        assert not answer.fits
        assert [a["index"] for a in answer.alternatives] == [f"cu130/torch2.{m}" for m in (11, 12, 13, 14)]
    finally:
        served.stop()


def test_a_release_candidates_build_is_named_only_with_pre(tmp_path_factory):
    """A build against torch 2.16's release candidate is in pre/cu130/torch2.16 only: without
    --pre the selector never names that index (not even among the alternatives); with it, the
    wheel is picked after the release indexes, with a note; a final's build wins over it."""
    rc_label = "cu130.torch2.16rc.git0123abc"
    wheels = [("demo-ext", "1.2.0", rc_label, f"cp311-cp311-{X86}", None),
              ("demo-ext", "1.2.0", "cu130.torch2.13", f"cp311-cp311-{X86}", None)]
    served = _site(tmp_path_factory.mktemp("candidate"), wheels)
    try:
        idx = client.Index(served.url)
        m = machine(torch_version="2.16.0+cu130", cuda_driver="580.65.06")
        plain = selection.select(idx, "demo-ext", m)
        assert not plain.fits
        assert "pre/" not in json.dumps(plain.to_json())
        assert [a["index"] for a in plain.alternatives] == ["cu130/torch2.13"]
        pre = selection.select(idx, "demo-ext", m, pre=True)
        assert pre.fits and pre.index_path == "pre/cu130/torch2.16"
        assert pre.filename == f"demo_ext-1.2.0+{rc_label}-cp311-cp311-{X86}.whl"
        assert pre.index_url == f"{served.url}/pre/cu130/torch2.16/simple/"
        assert any("release candidate of torch 2.16" in n for n in pre.notes)
        assert cli.build_parser().parse_args(["demo-ext", "--pre"]).pre
    finally:
        served.stop()
    wheels.append(("demo-ext", "1.2.0", "cu130.torch2.16", f"cp311-cp311-{X86}", None))
    served = _site(tmp_path_factory.mktemp("final"), wheels)
    try:
        final = selection.select(client.Index(served.url), "demo-ext", m, pre=True)
        assert final.index_path == "cu130/torch2.16"
        assert final.filename == f"demo_ext-1.2.0+cu130.torch2.16-cp311-cp311-{X86}.whl"
    finally:
        served.stop()


def test_the_highest_build_of_a_version_is_picked_as_pip_and_uv_do():
    def cand(filename):
        return checks.FileCandidate(client.IndexFile(filename, filename), checks.parse_wheel(filename), None, "x")

    names = [f"demo_ext-1.2.0+cu128.torch2.8{b}-cp311-cp311-{X86}.whl" for b in ("", "-2", "-10", "-1")]
    names.append(f"demo_ext-1.1.0+cu128.torch2.8-11-cp311-cp311-{X86}.whl")  # an older version's rebuild
    order = [c.file.filename for c in selection.pick_order([cand(n) for n in names], pinned=False)]
    assert order == [names[2], names[1], names[3], names[0], names[4]]


def test_arch_failure_suggests_a_build_for_the_gpu_and_the_version_that_fits(index):
    answer = selection.select(client.Index(index.url), "demo-ext", machine(sm="120"), version="1.2.0")
    assert "nox -s build-demo_ext-3.11-cu128-torch2.8 -- --backend host --archs 120" in answer.build
    assert answer.alternatives[0]["versions"] == ["1.1.0"]
    assert "demo-ext==1.1.0+cu128.torch2.8" in answer.alternatives[0]["pip"]


def test_the_build_hint_names_the_cell_the_recipes_abi_gives(tmp_path_factory):
    # One stable-ABI build for every Python (its torch_from only in the manifest), one abi3 build
    # (its tag says so; the index's data says it is an exact build), one with neither known.
    stable = {**manifest("13.0", "2.14.1", ["90"]), "package": "stable_ext",
              "abi": {"python": "none", "torch": "stable", "torch_from": "2.10", "serves": ["2.14", "2.13"]}}
    served = _site(tmp_path_factory.mktemp("hint"), [
        ("stable-ext", "1.0", "cu130.torch2.14", "py39-none-manylinux_2_28_x86_64", stable),
        ("abi3-ext", "1.0", "cu128.torch2.8", "cp310-abi3-manylinux_2_28_x86_64", manifest("12.8", "2.8.0", ["90"])),
        ("plain-ext", "1.0", None, "py3-none-any", None),
    ])
    try:
        idx = client.Index(served.url)
        old_glibc = {"glibc": "2.17", "python_version": "3.12"}  # nothing fits: the hint is given
        m = machine(torch_version="2.13.0+cu130", cuda_driver="580.65.06", **old_glibc)
        assert selection.select(idx, "stable-ext", m).build.startswith(
            "nox -s build-stable_ext-py3-cu130-torch2.10+ -- --backend host  (")
        assert selection.select(idx, "abi3-ext", machine(**old_glibc)).build.startswith(
            "nox -s build-abi3_ext-abi3-cu128-torch2.8 -- --backend host  (")
        # Not known (the manifest not read, no build data at all): the planner says, for this platform.
        assert selection.select(idx, "stable-ext", m, peek=False).build.startswith(
            "python -m tools.matrix --package stable_ext --python 3.12 --cuda 13.0 --torch 2.13 "
            "--platform linux_x86_64 --format ids  (")
        assert selection.select(idx, "plain-ext", machine(**old_glibc)).build.startswith(
            "python -m tools.matrix --package plain_ext --python 3.12 --cuda 12.8 --torch 2.8 "
            "--platform linux_x86_64 --format ids  (")
        # A CPU-only torch: no build would fit it (tests/test_selector_advice.py says what does).
        cpu = selection.select(idx, "abi3-ext", machine(torch_version="2.13.0+cpu", python_version="3.12"))
        assert cpu.build is None
    finally:
        served.stop()


def test_alternatives_name_the_torch_versions_that_have_wheels(index):
    answer = selection.select(client.Index(index.url), "demo-ext", machine(torch_version="2.11.0+cu128"))
    assert [a["index"] for a in answer.alternatives][:2] == ["cu128/torch2.9", "cu128/torch2.8"]  # nearest torch first
    assert answer.alternatives[0]["torch_install"] == \
        'pip install "torch==2.9.*" --index-url https://download.pytorch.org/whl/cu128'
    by_index = {a["index"]: a for a in answer.alternatives}
    assert by_index["cu130/torch2.13"]["fits_otherwise"] is False  # driver 570 is too old for CUDA 13


def test_no_torch_lists_what_exists(index, monkeypatch):
    monkeypatch.setattr(detect, "_torch_distribution", lambda: None)
    m = detect.detect_machine({"glibc": "2.36", "cuda_driver": "580.65.06", "sm": "90", "python_version": "3.11"})
    answer = selection.select(client.Index(index.url), "demo-ext", m)
    assert not answer.fits and "torch is not installed" in answer.reason
    assert {a["index"] for a in answer.alternatives} >= {"cu128/torch2.8", "cu130/torch2.13"}


def test_unknown_project(index):
    answer = selection.select(client.Index(index.url), "demo", machine())
    assert not answer.fits and "demo is not in the index" in answer.reason
    # Another package is no alternative: the close names are a question, the rest a list.
    assert answer.alternatives == [] and answer.build is None
    assert answer.advice == ["a package of that name: demo-ext?"]
    assert answer.reasons == ["packages in the index: demo-ext, other-ext"]
    answer = selection.select(client.Index(index.url), "flash-attn", machine())
    assert (answer.alternatives, answer.advice, answer.build) == ([], [], None)
    assert answer.reasons == ["packages in the index: demo-ext, other-ext"]


def test_arch_is_read_from_the_wheel_with_range_requests(tmp_path):
    """A 2 MiB wheel: the manifest comes from its last block and one member, not the whole file."""
    make_wheel(tmp_path, "demo-ext", "1.2.0", local="cu128.torch2.8", tag=f"cp311-cp311-{X86}",
               manifest=manifest("12.8", "2.8.0", ["80"]), payload=os.urandom(2 << 20))
    wheel = next(tmp_path.glob("*.whl"))
    data = wheel.read_bytes()
    sent = []

    class Ranges(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            lo, hi = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
            chunk = data[lo: hi + 1]
            sent.append(len(chunk))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {lo}-{lo + len(chunk) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(chunk)))
            self.end_headers()
            self.wfile.write(chunk)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ranges)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        root = f"http://127.0.0.1:{server.server_address[1]}/"
        found, how = client.Index(root).wheel_manifest(root + wheel.name, len(data))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert found["archs"]["found"][SO]["sass"] == ["80"]
    assert sum(sent) < 200_000 < len(data), how


def test_arch_check_is_skipped_when_the_server_ignores_ranges(tmp_path, monkeypatch):
    monkeypatch.setattr(client, "PEEK_FULL_LIMIT", 1 << 20)
    files, site = tmp_path / "files", tmp_path / "site"
    make_wheel(files, "demo-ext", "1.2.0", local="cu128.torch2.8", tag=f"cp311-cp311-{X86}",
               manifest=manifest("12.8", "2.8.0", ["80"]), payload=os.urandom(2 << 20))
    site.mkdir()
    build_index(IndexRun(wheels_dir=files, output_dir=site, base_url="/files", ledger_path=tmp_path / "l.json", init_ledger=True))
    # an index without per-file arch data (ours has it): the selector must read the wheel
    for page in site.rglob("index.json"):
        doc = json.loads(page.read_text())
        for f in doc.get("files", []):
            f.pop("_cuwheels", None)
        page.write_text(json.dumps(doc))
    server = make_server(site, files)

    class IgnoresRanges(server.RequestHandlerClass):
        """A host that answers a range request with the whole file (tools.serve honours one range)."""

        def parse_request(self) -> bool:
            ok = super().parse_request()
            if ok:
                del self.headers["Range"]
            return ok

    server.RequestHandlerClass = IgnoresRanges
    served = Served(server)
    try:
        answer = selection.select(client.Index(served.url), "demo-ext", machine(sm="120"))
    finally:
        served.stop()
    assert answer.fits  # unchecked is not a failure...
    assert any("couldn't check the GPU arch" in n and "range requests" in n for n in answer.notes)  # ...but is said


def test_arch_data_from_the_index_itself_is_used_first(index, tmp_path):
    """An index may add a private ``_cuwheels`` key per file (PEP 691 reserves ``_`` keys): no wheel read."""
    site = tmp_path / "site"
    shutil.copytree(index.server.site_dir, site)
    page = site / "cu128" / "torch2.8" / "simple" / "demo-ext" / "index.json"
    doc = json.loads(page.read_text())
    for f in doc["files"]:
        f["_cuwheels"] = {"cuda": "12.8", "torch": "2.8", "cxx11_abi": True,
                          "archs": {SO: {"sass": ["80"], "ptx": []}}}
    page.write_text(json.dumps(doc))
    answer = selection.select(client.Index(str(site)), "demo-ext", machine(sm="90"), peek=False)
    assert not answer.fits and "has no kernels for sm_90" in answer.reason
    assert selection.select(client.Index(str(site)), "demo-ext", machine(sm="86"), peek=False).fits


def test_html_only_index(index, tmp_path):
    """A PEP 503 index without the JSON pages (another host's mirror) is read from its HTML."""
    site = tmp_path / "site"
    shutil.copytree(index.server.site_dir, site)
    for page in site.rglob("index.json"):
        page.unlink()
    answer = selection.select(client.Index(str(site)), "demo-ext", machine(sm="none"))
    assert answer.fits and answer.filename == "demo_ext-1.2.0+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert selection.select(client.Index(str(site)), "demo-ext", machine(), version="1.0.0").reasons[0].endswith(
        "is yanked (broken build)")


def test_local_site_directory_and_its_public_url(index, tmp_path):
    site = Path(index.server.site_dir)
    answer = selection.select(client.Index(str(site / "cu128" / "torch2.8" / "simple"), site_url="https://w.example/cuwheels"),
                        "demo-ext", machine(sm="none"))
    assert answer.fits and answer.index_url == "https://w.example/cuwheels/cu128/torch2.8/simple/"


# --------------------------------------------------------------------------- the command, pip and uv


def _clean_env(**extra: str) -> dict[str, str]:
    # The machine's pip and uv configuration (find-links, extra index URLs) must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", UV_PYTHON_DOWNLOADS="never", **extra)
    return env


def _uv() -> str:
    return uv_bin()


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=60)
    return path / "bin" / "python"


def run_select(*args: str, pythonpath: Path | None = None, path_prefix: Path | None = None,
               python: str = sys.executable, cwd: Path = ROOT, module: bool = True) -> subprocess.CompletedProcess:
    env = _clean_env()
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env.get('PATH', '')}"
    cmd = [python, "-m", "tools.selector", *args] if module else [python, *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=CLIENT_TIMEOUT, env=env)


@pytest.fixture(scope="module")
def h100_env(tmp_path_factory) -> tuple[Path, Path]:
    """(PYTHONPATH with torch 2.8.0+cu128, a bin dir with an nvidia-smi for one H100 on driver 570)."""
    root = tmp_path_factory.mktemp("h100")
    fake_torch(root / "site", "2.8.0+cu128", cuda="12.8")
    fake_nvidia_smi(root / "bin", ["9.0, 570.86.10, NVIDIA H100 80GB HBM3"])
    return root / "site", root / "bin"


@pytest.fixture(scope="module")
def answer(index, h100_env) -> dict:
    """The command's JSON answer, everything detected (no override) in an environment with a CUDA torch."""
    site, bin_dir = h100_env
    proc = run_select("demo-ext", "--index", index.url + "/", "--json", pythonpath=site, path_prefix=bin_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_the_command_names_the_variant_index(answer, index):
    assert answer["fits"] is True
    assert answer["index_url"] == f"{index.url}/cu128/torch2.8/simple/"
    assert answer["filename"] == "demo_ext-1.2.0+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert answer["machine"]["torch"] == {"version": "2.8.0+cu128", "build": "cuda", "cuda": "12.8", "cxx11_abi": True}
    assert answer["machine"]["gpus"] == [{"sm": "90", "name": "NVIDIA H100 80GB HBM3"}]
    assert any("GPU arch checked against the index" in n for n in answer["notes"])  # _cuwheels
    assert set(answer["uv"]) == {"command", "requirement", "index_name", "pyproject"}


def test_printed_pip_command_installs_the_wheel(answer, decoy, tmp_path):
    """pip --isolated, the default index being the decoy: the exact pin can only come from ours."""
    printed = shlex.split(answer["pip"])
    assert printed[:2] == ["pip", "install"]
    venv = _venv(tmp_path / "venv")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "--python", str(venv), "install", "--no-cache-dir", "--no-input",
         "--index-url", decoy.url + "/simple/", *printed[2:]],
        capture_output=True, text=True, timeout=CLIENT_TIMEOUT, env=_clean_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert installed(tmp_path / "venv") == {"demo_ext": "1.2.0+cu128.torch2.8"}


def test_without_the_local_label_pip_would_take_the_decoy(answer, decoy, tmp_path):
    """Why the printed pin carries the label: pip merges indexes, and an unpinned name goes to the
    highest version anywhere (here the decoy's 99.0; on PyPI, any newer release or its sdist)."""
    venv = _venv(tmp_path / "venv")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "--python", str(venv), "install", "--no-cache-dir", "--no-input",
         "--index-url", decoy.url + "/simple/", "demo-ext", "--extra-index-url", answer["index_url"]],
        capture_output=True, text=True, timeout=CLIENT_TIMEOUT, env=_clean_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert installed(tmp_path / "venv") == {"demo_ext": "99.0"}


def test_printed_uv_command_installs_the_wheel(answer, decoy, tmp_path):
    printed = shlex.split(answer["uv"]["command"])
    assert printed[:3] == ["uv", "pip", "install"]
    venv = _venv(tmp_path / "venv")
    proc = subprocess.run(
        [_uv(), "pip", "install", "--no-config", "--no-cache", "--python", str(venv),
         "--index-url", decoy.url + "/simple/", *printed[3:]],
        capture_output=True, text=True, timeout=CLIENT_TIMEOUT, env=_clean_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert installed(tmp_path / "venv") == {"demo_ext": "1.2.0+cu128.torch2.8"}


def test_printed_uv_project_configuration_syncs(answer, decoy, tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "consumer"\nversion = "0"\nrequires-python = ">=3.11,<3.12"\n'
        f'dependencies = ["{answer["uv"]["requirement"]}"]\n\n' + answer["uv"]["pyproject"])
    proc = subprocess.run(
        [_uv(), "sync", "--no-cache", "--default-index", decoy.url + "/simple/", "--python", sys.executable],
        cwd=project, capture_output=True, text=True, timeout=CLIENT_TIMEOUT, env=_clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert installed(project / ".venv") == {"demo_ext": "1.2.0+cu128.torch2.8"}


def test_the_command_explains_a_miss_in_json(index, h100_env):
    site, bin_dir = h100_env
    proc = run_select("demo-ext", "--index", index.url, "--json", "--python-version", "3.10",
                      pythonpath=site, path_prefix=bin_dir)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["fits"] is False and "Python 3.10" in doc["reason"]
    assert {"index", "index_url", "versions", "pythons"} <= set(doc["alternatives"][0])
    assert "pip" not in doc and "uv" not in doc


def test_real_run_here_does_not_crash(index):
    """Nothing faked: this machine's Python, glibc, torch (if any), driver (if any)."""
    proc = run_select("demo-ext", "--index", index.url, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["fits"] or doc["reason"]


def test_unreachable_index_is_exit_3():
    proc = run_select("demo-ext", "--index", "http://127.0.0.1:9/", "--timeout", "5", "--torch-version",
                      "2.8.0+cu128", "--sm", "none", "--cuda-driver", "12.8")
    assert proc.returncode == 3 and "index error" in proc.stderr


# --------------------------------------------------------------------------- the doctor


def installed_dist(site: Path, *, with_module: bool, undefined: str | None = None) -> None:
    """demo-ext 1.2.0+cu128.torch2.8 installed in ``site``: its package imports ``demo_ext_cuda``,
    a compiled module that is absent, or present and needing ``undefined`` from torch."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "demo_ext").mkdir()
    (site / "demo_ext" / "__init__.py").write_text("import demo_ext_cuda\n")
    info = site / "demo_ext-1.2.0+cu128.torch2.8.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-ext\nVersion: 1.2.0+cu128.torch2.8\n\n")
    (info / "cuwheels.json").write_text(json.dumps(manifest("12.8", "2.8.0", ["80", "90"])))
    (info / "top_level.txt").write_text("demo_ext\n")
    record = ["demo_ext/__init__.py,,", f"{info.name}/METADATA,,", f"{info.name}/cuwheels.json,,"]
    if with_module:
        suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
        source = site / "ext.c"
        source.write_text(f"extern void {undefined}(void);\n"
                          f"void *PyInit_demo_ext_cuda(void) {{ {undefined}(); return 0; }}\n")
        subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-o", str(site / f"demo_ext_cuda{suffix}"),
                        str(source)], check=True, timeout=60)
        source.unlink()
        record.append(f"demo_ext_cuda{suffix},,")
    (info / "RECORD").write_text("\n".join(record) + "\n")


needs_cc = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="needs a C compiler")


@needs_cc
def test_doctor_reproduces_and_explains_an_undefined_torch_symbol(index, tmp_path):
    """A real ImportError: the compiled module needs a c10 symbol; torch 2.9 here, built for 2.8."""
    site = tmp_path / "site"
    fake_torch(site, "2.9.1+cu128", cuda="12.8")
    installed_dist(site, with_module=True, undefined=C10_SYMBOL)
    proc = run_select("--doctor", "demo-ext", "--index", index.url, "--json", "--sm", "90", "--cuda-driver",
                      "570.86.10", pythonpath=site)
    assert proc.returncode == 1, proc.stderr
    d = json.loads(proc.stdout)
    assert d["kind"] == "undefined-symbol"
    assert f"undefined symbol: {C10_SYMBOL}" in d["error"]
    assert d["summary"].startswith("demo-ext 1.2.0+cu128.torch2.8 was built for torch 2.8, this environment has "
                                   "torch 2.9.1+cu128")
    assert any("c10::cuda::c10_cuda_check_implementation" in line for line in d["details"])
    assert d["fixes"][0] == 'install the torch it was built for: pip install "torch==2.8.*" --index-url ' \
                            "https://download.pytorch.org/whl/cu128"
    assert "torch2.9 variant index" in d["fixes"][1]
    assert f'pip install "demo-ext==1.2.0+cu128.torch2.9" --extra-index-url {index.url}/cu128/torch2.9/simple/' \
        in d["fixes"][1]


def test_doctor_reproduces_a_missing_compiled_module(tmp_path):
    site = tmp_path / "site"
    fake_torch(site, "2.8.0+cu128", cuda="12.8")
    installed_dist(site, with_module=False)
    proc = run_select("--doctor", "demo-ext", "--sm", "none", "--cuda-driver", "12.8", pythonpath=site)
    assert proc.returncode == 1, proc.stderr
    assert "Diagnosis (missing-extension): demo-ext 1.2.0+cu128.torch2.8 is installed without its compiled CUDA " \
           "extension demo_ext_cuda: a source-only or CPU-only install" in proc.stdout
    assert "pip uninstall -y demo-ext" in proc.stdout


def test_doctor_when_the_import_works(tmp_path):
    """No error to explain: the import succeeds; the GPU is still checked against the manifest."""
    site = tmp_path / "site"
    fake_torch(site, "2.8.0+cu128", cuda="12.8")
    installed_dist(site, with_module=False)
    (site / "demo_ext" / "__init__.py").write_text("")
    ok = run_select("--doctor", "demo-ext", "--sm", "90", "--cuda-driver", "12.8", pythonpath=site)
    assert ok.returncode == 0, ok.stderr
    assert "Diagnosis (ok): demo-ext 1.2.0+cu128.torch2.8 imports fine here" in ok.stdout
    bad = run_select("--doctor", "demo-ext", "--sm", "120", "--cuda-driver", "12.8", "--json", pythonpath=site)
    assert bad.returncode == 1, bad.stderr
    assert json.loads(bad.stdout)["kind"] == "no-kernel-image"


def test_doctor_reads_the_error_from_a_file(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("Traceback (most recent call last):\n  ...\nImportError: /lib/x86_64-linux-gnu/libc.so.6: version "
                   "`GLIBC_2.39' not found (required by /venv/demo_ext_cuda.so)\n")
    proc = run_select("--doctor", "demo-ext", "--error-file", str(log), "--glibc", "2.35", "--json",
                      "--torch-version", "2.8.0+cu128", "--sm", "none", "--cuda-driver", "12.8")
    assert proc.returncode == 1, proc.stderr
    d = json.loads(proc.stdout)
    assert d["kind"] == "glibc"
    assert d["summary"] == ("the module needs glibc 2.39 (required by /venv/demo_ext_cuda.so), this machine has "
                            "glibc 2.35")


def _installed(**manifest_overrides) -> doctor.InstalledDist:
    man = manifest("12.8", "2.8.0", ["80", "90"])
    man.update(manifest_overrides)
    return doctor.InstalledDist("demo-ext", "1.2.0+cu128.torch2.8", man, ["demo_ext_cuda"], ["demo_ext"], "/venv")


DOCTOR_CASES = [
    # (id, error text, machine overrides, installed, kind, fragments of summary + details + fixes)
    ("undefined-symbol-torch-2.9", f"ImportError: /v/{SO}: undefined symbol: {C10_SYMBOL}",
     {"torch_version": "2.9.1+cu128"}, _installed(),
     "undefined-symbol", ["built for torch 2.8", "torch 2.9.1+cu128", 'torch==2.8.*', "torch2.9 variant index",
                          "c10::cuda::c10_cuda_check_implementation"]),
    ("undefined-symbol-abi", f"ImportError: /v/{SO}: undefined symbol: "
     "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
     {"torch_version": "2.8.0+cu128", "cxx11_abi": "0"}, _installed(),
     "undefined-symbol", ["C++11 ABI", "pre-C++11"]),
    ("undefined-symbol-cuda-major", f"ImportError: /v/{SO}: undefined symbol: {C10_SYMBOL}",
     {"torch_version": "2.8.0+cu130"}, _installed(cuda="12.8"), "undefined-symbol", ["built for CUDA 12.8",
                                                                                     "CUDA 13.0"]),
    ("undefined-symbol-no-manifest", f"ImportError: /v/x.so: undefined symbol: {C10_SYMBOL}",
     {"torch_version": "2.9.1+cu128"}, doctor.InstalledDist("demo-ext", "1.2.0", None, ["x"], ["demo_ext"], "/v"),
     "undefined-symbol", ["manifest is missing"]),
    ("undefined-symbol-not-torch", "ImportError: /v/x.so: undefined symbol: _ZN5flash12run_mha_fwd_EPv",
     {}, _installed(), "undefined-symbol", ["isn't torch's", "flash::run_mha_fwd_"]),
    # A stable-ABI build under a torch older than it serves: the shim function is what's missing.
    ("undefined-symbol-stable-shim", "OSError: /v/_C.so: undefined symbol: torch_exception_get_what",
     {"torch_version": "2.11.0+cu130"},
     _installed(torch="2.14.1", abi={"python": "none", "torch": "stable", "torch_from": "2.13",
                                     "serves": ["2.14", "2.13"]}),
     "undefined-symbol", ["stable ABI for torch 2.14, 2.13", "torch 2.11.0+cu130, which doesn't export "
                          "torch_exception_get_what", 'pip install "torch==2.14.*"']),
    # A shim symbol is torch's, even without a manifest saying stable.
    ("undefined-symbol-shim-no-manifest", "OSError: /v/x.so: undefined symbol: aoti_torch_get_sizes",
     {"torch_version": "2.9.1+cu128"}, doctor.InstalledDist("demo-ext", "1.2.0", None, ["x"], ["demo_ext"], "/v"),
     "undefined-symbol", ["manifest is missing"]),
    ("missing-cuda-module", "ModuleNotFoundError: No module named 'flash_attn_2_cuda'", {},
     doctor.InstalledDist("flash-attn", "2.8.3", None, [], ["flash_attn"], "/v"),
     "missing-extension", ["without its compiled CUDA extension flash_attn_2_cuda", "source-only or CPU-only",
                           "pip uninstall -y demo-ext"]),
    ("torch-missing", "ModuleNotFoundError: No module named 'torch'", {}, _installed(), "torch-missing",
     ["torch is not installed"]),
    ("glibc", "OSError: /lib64/libc.so.6: version `GLIBC_2.32' not found (required by /v/x.so)", {"glibc": "2.28"},
     _installed(), "glibc", ["needs glibc 2.32", "has glibc 2.28", "manylinux_2_X with X <= 28", "--backend host"]),
    ("glibcxx", "ImportError: /opt/conda/lib/libstdc++.so.6: version `GLIBCXX_3.4.32' not found", {}, _installed(),
     "glibcxx", ["GLIBCXX_3.4.32", "libstdcxx-ng"]),
    ("no-kernel-image-sm120", "RuntimeError: CUDA error: no kernel image is available for execution on the device",
     {"sm": "120"}, _installed(), "no-kernel-image",
     ["GPU sm_120", "SASS for sm_80, sm_90; PTX for none", "--backend host --archs 120"]),
    ("no-kernel-image-but-we-have-it", "CUDA error: no kernel image is available for execution on the device",
     {"sm": "90"}, _installed(), "no-kernel-image", ["has kernels for GPU sm_90", "another library"]),
    ("cpu-torch-cuda-lib", "ImportError: libc10_cuda.so: cannot open shared object file: No such file or directory",
     {"torch_version": "2.13.0+cpu"}, _installed(), "missing-library", ["needs a CUDA build of torch"]),
    ("cudart-major", "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
     {"torch_version": "2.13.0+cu130"}, _installed(), "missing-library", ["libcudart.so.12 (CUDA 12)",
                                                                          "CUDA 13.0"]),
    ("unknown", "Segmentation fault", {}, _installed(), "unknown", ["not one of the errors"]),
]


@pytest.mark.parametrize("case", DOCTOR_CASES, ids=[c[0] for c in DOCTOR_CASES])
def test_doctor_explains(case, index):
    name, error, overrides, inst, kind, fragments = case
    m = machine(**overrides)
    idx = client.Index(index.url)
    answer = selection.select(idx, "demo-ext", m)
    d = doctor.diagnose(error, "demo-ext", m, inst, index=idx, answer=answer)
    assert d.kind == kind
    text = "\n".join([d.summary, *d.details, *d.fixes])
    for fragment in fragments:
        assert fragment in text, text
    assert cli.format_diagnosis(d, m)


def test_module_names_from_installed_files():
    assert doctor.module_name("flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so") == "flash_attn_2_cuda"
    assert doctor.module_name("causal_conv1d/_C.abi3.so") == "causal_conv1d._C"
    assert doctor.module_name("flash_attn.libs/libgomp-a34b3233.so.1.0.0") is None
    assert doctor.module_name("demo_ext/__init__.py") is None


# --------------------------------------------------------------------------- the site's facts


def test_driver_floor_comes_from_the_site_and_its_absence_is_said(index, tmp_path):
    """An older site without selector.json: the driver version is not compared, and the answer says so."""
    m = machine(torch_version="2.13.0+cu130", cuda_driver="570.86.10")
    site = tmp_path / "site"
    shutil.copytree(index.server.site_dir, site)
    assert not selection.select(client.Index(str(site)), "demo-ext", m).fits  # 570 < 580, from selector.json
    (site / facts.FACTS_FILE).unlink()
    older = selection.select(client.Index(str(site)), "demo-ext", m)
    assert older.fits
    assert any(n.startswith("couldn't check the NVIDIA driver 570.86.10 against CUDA 13.0: the index publishes no "
                            "selector.json") for n in older.notes), older.notes


def test_facts_lookup_and_validation():
    site = facts.SiteFacts(min_driver={"12.8": "525.60.13", "12.4": "525.60.13", "13.0": "580"})
    assert site.driver_for("12.8") == "525.60.13"
    assert site.driver_for("12") == "525.60.13"     # "any 12.x": the floor of the major
    assert site.driver_for("13.2") == "580"         # a minor the table lacks: minor-version compatibility
    assert site.driver_for("14.0") is None
    assert facts.parse_facts(site.to_json(), "x") == site
    with pytest.raises(facts.FactsError, match="schema 1"):
        facts.parse_facts({"schema": 2}, "x")
    for drivers in ({"12.8": 525}, {"12.8": "banana"}, {"12.8": "\u00b2"}, {"twelve": "580"}):
        with pytest.raises(facts.FactsError, match="'min_driver'"):
            facts.parse_facts({"schema": 1, "min_driver": drivers}, "x")


# --------------------------------------------------------------------------- what an index may make it read
# (tests/test_hostile_selector.py runs the whole command against hostile sites and servers)


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1", ("127.0.0.1", None)), ("127.0.0.1:8000", ("127.0.0.1", 8000)), ("[::1]:80", ("::1", 80)),
    ("Files.Example.ORG.", ("files.example.org", None)), ("https://files.example.org", ("files.example.org", 443)),
])
def test_allowed_host_values(text, expected):
    assert fetch.origin(text) == expected


@pytest.mark.parametrize("text", ["", "a/b", "user@host", "host:port", "https://host/path"])
def test_an_allowed_host_is_a_host(text):
    with pytest.raises(ValueError):
        fetch.origin(text)
    with pytest.raises(SystemExit) as exc:
        cli.main(["demo-ext", "--index", "http://127.0.0.1:9/", "--allow-host", text])
    assert exc.value.code == 2


@pytest.mark.parametrize("url, refused", [
    ("http://127.0.0.1:8000/files/x.whl", None),
    ("HTTP://127.0.0.1:8000/files/x.whl", None),
    ("http://files.example.org/x.whl", None),              # allowed: any port of that host
    ("https://files.example.org:8443/x.whl", None),
    ("file:///dev/zero", "reads only http:// and https:// URLs from an index, not file:"),
    ("ftp://127.0.0.1:8000/x.whl", "not ftp:"),
    ("x.whl", "not a URL without a scheme"),
    ("http://127.0.0.1:8001/x.whl", "127.0.0.1:8001 is not the index's host"),
    ("http://127.0.0.1/x.whl", "127.0.0.1:80 is not the index's host"),
    ("http://localhost:8000/x.whl", "localhost:8000 is not the index's host"),
    ("http://127.0.0.1:8000@evil.example/x.whl", "a URL with a user name or password"),
    ("http://pypi.org@127.0.0.1:8000/x.whl", "a URL with a user name or password"),
    ("http://127.0.0.1:99999/x.whl", "is not a port number"),
    ("http://[::1/x.whl", "not a URL"),
])
def test_what_an_index_may_make_the_selector_read(url, refused):
    fetcher = fetch.Fetcher([("127.0.0.1", 8000), ("files.example.org", None)], timeout=5, deadline=5)
    if refused is None:
        fetcher.check(url)
        return
    with pytest.raises(fetch.IndexReadError, match=re.escape(refused)) as exc:
        fetcher.check(url)
    assert exc.value.exit_code == 3 and exc.value.hint


@pytest.mark.parametrize("text, keep, expected", [
    ("broken build", "", "broken build"),
    ("\x1b[2J\x07bell", "", "\\x1b[2J\\x07bell"),
    ("line\nbreak\ttab", "", "line\\nbreak\\ttab"),
    ("line\nbreak\ttab", "\n\t", "line\nbreak\ttab"),
    ("rtl \u202e override, zero\u200bwidth", "", "rtl \\u202e override, zero\\u200bwidth"),
    ("caf\u00e9 \u2014 ok", "", "caf\u00e9 \u2014 ok"),   # printable: kept as it is
])
def test_visible(text, keep, expected):
    assert client.visible(text, keep) == expected


def test_the_page_fields_are_checked_and_normalised():
    base = "http://127.0.0.1:8000/simple/demo-ext/"
    doc = {"files": [{"filename": "a\x1bb.whl", "url": "../../files/x.whl", "yanked": "bad\nbuild", "size": 5,
                      "requires-python": ">=3.9",
                      "_cuwheels": {"cuda": "12.8", "torch": "2.8.1", "cxx11_abi": None, "serves": ["2.9.0"],
                                    "archs": {"found": {"m.so": {"sass": ["90a"], "ptx": None}}}}}]}
    [f] = client.parse_json_files(doc, base, "page")
    assert (f.filename, f.url, f.yanked, f.size) == ("a\\x1bb.whl", "http://127.0.0.1:8000/files/x.whl",
                                                     "bad\\nbuild", 5)
    assert f.extra == {"cuda": "12.8", "torch": "2.8", "cxx11_abi": None, "serves": ["2.9"],
                       "archs": {"m.so": {"sass": ["90a"], "ptx": []}}}
    with pytest.raises(fetch.IndexReadError, match=re.escape("page: files[0] (x.whl)._cuwheels.archs['m.so'].sass")):
        client.parse_json_files({"files": [{"filename": "x.whl", "url": "x", "_cuwheels": {"archs": {
            "m.so": {"sass": 90}}}}]}, base, "page")


def test_a_local_wheel_must_be_a_regular_file(tmp_path):
    fifo = tmp_path / "w.whl"
    os.mkfifo(fifo)
    index = client.Index(str(tmp_path))
    with pytest.raises(fetch.IndexReadError, match="is a FIFO, not a regular file"):
        index.wheel_manifest(fifo.as_uri(), None)
    with pytest.raises(fetch.IndexReadError, match="reads only http:// and https:// URLs"):
        index.wheel_manifest("data:,x", None)


# --------------------------------------------------------------------------- hostile pages, another host


@pytest.mark.parametrize("tail", ["<![ ]]>", "<![1[x]]>", "<![-", "<![\x00", "<![\x1b[2J"])
def test_an_html_page_the_parser_gives_up_on_is_an_index_error(tail):
    body = f'<a href="x.whl">x.whl</a>{tail}'.encode()
    with pytest.raises(fetch.IndexReadError, match=r"page: is not an HTML page the selector can read \(html.parser: ") \
            as exc:
        client.Index._parse(body, False, "page")
    assert client.visible(exc.value.message) == exc.value.message  # nothing raw in it


@pytest.mark.parametrize("filename, project", [
    ("demo_ext-1.0+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl", "demo-ext"),
    ("Demo.Ext-1.0-py3-none-any.whl", "demo-ext"),
    ("evil_ext-9.0-py3-none-any.whl", "evil-ext"),
    ("demo-ext-1.0.tar.gz", "demo-ext"),
    ("not a wheel.whl", None),
    ("README.txt", None),
])
def test_the_project_a_file_name_gives(filename, project):
    assert client.file_project(filename) == project


def test_a_pages_files_of_another_project_are_skipped_with_a_note(tmp_path):
    page = tmp_path / "simple" / "demo-ext" / "index.json"
    page.parent.mkdir(parents=True)
    page.write_text(json.dumps({"files": [
        {"filename": "evil_ext-9.0-py3-none-any.whl", "url": "e.whl"},
        {"filename": "Demo_Ext-1.0-py3-none-any.whl", "url": "d.whl"}]}))
    index = client.Index(str(tmp_path))
    assert [f.filename for f in index.files("", "demo-ext")] == ["Demo_Ext-1.0-py3-none-any.whl"]
    assert index.notes == ["simple/demo-ext/: skipped evil_ext-9.0-py3-none-any.whl: it is a file of evil-ext, "
                           "not of demo-ext"]


@pytest.mark.parametrize("url, named", [
    ("http://127.0.0.1:9/x.whl", "127.0.0.1:9"),
    ("https://github.com/o/r/releases/download/v1/x.whl", "github.com:443"),
    ("http://[::1]:9/x.whl", "[::1]:9"),
    ("http://127.0.0.1:8000/files/x.whl", None),      # the index's own host: read
    ("http://pypi.org@127.0.0.1:9/x.whl", None),      # refused outright, not "elsewhere"
    ("file:///dev/zero", None),
    ("http://127.0.0.1:99999/x.whl", None),
])
def test_which_wheel_urls_are_on_another_host(url, named):
    assert fetch.Fetcher([("127.0.0.1", 8000)], timeout=5, deadline=5).elsewhere(url) == named


def _candidate(extra, url="https://github.com/o/r/releases/download/v1/demo_ext-1.0-cp311-cp311-linux_x86_64.whl"):
    f = client.IndexFile(filename=url.rsplit("/", 1)[1], url=url, extra=extra)
    return checks.FileCandidate(f, checks.parse_wheel(f.filename), None, "cu128/torch2.8")


def test_a_wheel_on_another_host_is_not_read_and_the_note_says_why():
    index = client.Index("http://127.0.0.1:8000/")
    c, budget = _candidate(None), [checks.PEEK_MAX]
    checks.check_arch(c, machine(), index=index, peek=True, budget=budget)
    assert not c.problems and budget == [checks.PEEK_MAX]
    assert c.notes == ["skipped the GPU arch check for demo_ext-1.0-cp311-cp311-linux_x86_64.whl: the index's page "
                       "lists no GPU archs for it and the wheel is on github.com:443, not on the index's host; pass "
                       "--allow-host github.com:443 to read its build manifest from there"]
    assert index.wheel_manifest(c.file.url, None)[0] is None  # and the build hint's read is not made either


def test_archs_the_index_records_as_null_are_its_word():
    """Every file of a page tools.index writes has ``_cuwheels``: null archs mean none on record."""
    extra = client.parse_cuwheels({"cuda": None, "torch": None, "cxx11_abi": None, "archs": None}, "page", "f")
    assert extra == {"cxx11_abi": None, "archs": None}
    c = _candidate(extra, "http://127.0.0.1:8000/files/demo_ext-1.0-cp311-cp311-linux_x86_64.whl")
    checks.check_arch(c, machine(), index=client.Index("http://127.0.0.1:8000/"), peek=True, budget=[1])
    assert c.notes == ["skipped the GPU arch check for demo_ext-1.0-cp311-cp311-linux_x86_64.whl: the index records "
                       "no GPU code for it (a wheel without a build manifest)"]
