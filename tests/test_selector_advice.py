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
from tools.selector import checks, cli, client

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


def test_driver_too_old_for_every_wheel_names_the_driver_and_an_older_cuda_torch(site):
    """torch 2.13 + CUDA 13.0 with driver 570: the site's minimum for CUDA 13.0, or torch 2.8 +
    CUDA 12.8 (which driver 570 runs); never a build, which would use CUDA 13.0 too."""
    need = client.Index(site.url).facts().driver_for("13.0")
    assert need  # the site publishes the table's floor
    a = pick(site, torch_version="2.13.0+cu130")
    assert not a.fits and a.build is None
    assert a.advice == [
        f"a newer NVIDIA driver: CUDA 13.0 (torch 2.13.0+cu130) needs driver >= {need}; this machine's is 570.86.10",
        torch_line("or a torch built for an older CUDA that this driver runs:", "2.8", "12.8")]
    # A driver known only by the CUDA version it supports (libcuda, or --cuda-driver 12.8).
    a = pick(site, torch_version="2.13.0+cu130", cuda_driver="12.8")
    assert a.build is None
    assert a.advice[0] == (f"a newer NVIDIA driver: CUDA 13.0 (torch 2.13.0+cu130) needs driver >= {need}; "
                           "this machine's is one that supports CUDA up to 12.8")


def test_driver_too_old_for_torch_itself_suggests_no_build_even_where_the_index_lacks_the_cell(site):
    a = pick(site, torch_version="2.11.0+cu130")
    assert "the variant index cu130/torch2.11/simple/ has none" in a.reason
    assert a.build is None
    assert a.advice[0].startswith("a newer NVIDIA driver: CUDA 13.0 (torch 2.11.0+cu130) needs driver >= ")
    assert a.advice[1] == torch_line("or a torch built for an older CUDA that this driver runs:", "2.8", "12.8")


@pytest.mark.parametrize("driver, torch, cuda", [("580.65.06", "2.13", "13.0"), ("570.86.10", "2.8", "12.8")])
def test_cpu_only_torch_gets_the_cuda_torch_the_index_has_for_this_driver(site, driver, torch, cuda):
    a = pick(site, torch_version="2.13.0+cpu", cuda_driver=driver)
    assert not a.fits and a.build is None
    assert "torch 2.13.0+cpu is a CPU-only build" in a.reason
    assert a.advice[0] == torch_line("install a CUDA build of torch:", torch, cuda)
    # PyPI's torch 2.13 is named where the site says it is a CUDA build, and only where this driver runs it.
    facts = client.Index(site.url).facts()
    builds = facts.torch_builds("2.13", "linux_x86_64")
    runs = bool(builds and builds.pypi_cuda) and checks.driver_problem(builds.pypi_cuda, a.machine, facts)[0] is None
    said = [line for line in a.advice if line.startswith("PyPI's torch 2.13 for Linux x86_64 is a CUDA ")]
    assert len(said) == int(runs), a.advice


def test_a_torch_series_without_wheels_gets_the_series_the_index_has_and_a_build(site):
    a = pick(site, torch_version="2.11.0+cu128")
    assert a.advice == [
        "a torch the index has flash-attn wheels for: torch 2.8 + CUDA 12.8, torch 2.13 + CUDA 13.0 (this is "
        "torch 2.11 + CUDA 12.8)",
        torch_line("e.g.", "2.8", "12.8")]
    assert a.build.startswith(f"nox -s build-{cell_id('flash_attn', '3.11', '12.8', '2.11')} -- --backend host  (")


def test_a_python_without_wheels_gets_the_pythons_the_index_has_and_a_build(site):
    a = pick(site, python_version="3.10")
    assert a.advice == ["a Python that flash-attn 2.8.3 has wheels for in cu128/torch2.8/simple/: 3.11, 3.12 "
                        "(this is Python 3.10)"]
    assert a.build.startswith(f"nox -s build-{cell_id('flash_attn', '3.10', '12.8', '2.8')} -- --backend host  (")


@pytest.mark.parametrize("flags", [{"machine": "aarch64"}, {"platform": "linux_aarch64", "machine": None}])
def test_an_aarch64_machine_is_told_to_build_its_own_cell(site, flags):
    a = pick(site, **flags)
    assert not a.fits
    assert a.advice == ["flash-attn 2.8.3 has no wheel for Linux aarch64 in cu128/torch2.8/simple/"]
    aarch64_cell = cell_id("flash_attn", "3.11", "12.8", "2.8", platform="linux_aarch64")
    assert aarch64_cell.endswith("-aarch64")
    assert a.build.startswith(f"nox -s build-{aarch64_cell} -- --backend host  (")
    # Answered on another platform (an x86_64 test host), the build is said to run there.
    assert ("(on that machine, in a clone" in a.build) is a.machine.foreign


def test_alternatives_are_the_same_package_only(site):
    """causal-conv1d is in the index; it is never offered for flash-attn, whether flash-attn is
    there (its own variant indexes only) or not (a list of the index's packages, no alternative)."""
    a = pick(site, torch_version="2.11.0+cu128")
    assert {alt["index"] for alt in a.alternatives} == {"cu128/torch2.8", "cu130/torch2.13"}
    assert "cu126" not in json.dumps(a.to_json())
    for alt in a.alternatives:
        page = client.Index(site.url).files(alt["index"] + "/", "flash-attn")
        assert page and all(f.filename.startswith("flash_attn-") for f in page)
    missing = pick(site, "flash-attention-3")
    assert (missing.alternatives, missing.advice, missing.build) == ([], [], None)
    assert missing.reasons == ["packages in the index: causal-conv1d, flash-attn"]
    close = pick(site, "flash")
    assert close.alternatives == [] and close.advice == ["a package of that name: flash-attn?"]


def test_a_pinned_version_that_misses_offers_the_version_of_the_same_package_that_fits(site):
    a = selection.select(client.Index(site.url), "flash-attn", machine(), version="2.8.1")
    assert a.build is None
    assert a.advice == ["another version: leave out --version for the newest that fits, or pass one of 2.8.3"]
    assert {alt["index"] for alt in a.alternatives} == {"cu128/torch2.8", "cu130/torch2.13"}


CLI_CASES = [
    # (id, flags, the advice's first line starts with, a build suggested)
    ("driver", {"torch_version": "2.13.0+cu130"}, "a newer NVIDIA driver: CUDA 13.0 (torch 2.13.0+cu130) needs", False),
    ("cpu-torch", {"torch_version": "2.13.0+cpu"}, "install a CUDA build of torch: torch 2.8 + CUDA 12.8", False),
    ("series", {"torch_version": "2.11.0+cu128"}, "a torch the index has flash-attn wheels for: torch 2.8", True),
    ("python", {"python_version": "3.10"}, "a Python that flash-attn 2.8.3 has wheels for", True),
    ("aarch64", {"machine": "aarch64"}, "flash-attn 2.8.3 has no wheel for Linux aarch64", True),
]


@pytest.mark.parametrize("case", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_the_command_prints_what_would_help(site, case):
    name, flags, first, build = case
    proc = run_select("flash-attn", "--index", site.url, **flags)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    advice = printed_advice(proc.stdout)
    assert advice and advice[0].startswith(first), proc.stdout
    assert ("Build from source:" in proc.stdout) is build
    assert ("nox -s build-" in proc.stdout) is build
    doc = json.loads(run_select("flash-attn", "--index", site.url, "--json", **flags).stdout)
    assert doc["advice"] == advice and (doc["build"] is not None) is build


def test_the_default_index_is_the_projects_one_setting(site, monkeypatch, capsys):
    """Without --index the command reads tools.core.site.INDEX_URL (pointed here at the served
    site: tests reach 127.0.0.1 only), and --help names it."""
    assert cli.build_parser().parse_args(["flash-attn"]).index is None
    help_text = subprocess.run([sys.executable, "-m", "tools.selector", "--help"], cwd=ROOT, capture_output=True,
                               text=True, timeout=CLIENT_TIMEOUT).stdout
    assert INDEX_URL in " ".join(help_text.split())
    monkeypatch.setattr(cli, "INDEX_URL", site.url + "/")
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in BASE.items()]
    assert cli.main(["flash-attn", "--json", *flags]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["index_url"] == f"{site.url}/cu128/torch2.8/simple/"


#: flash-attn for torch 2.13 as the index builds it: CUDA 13.0 (PyPI's torch) and CUDA 12.6
#: (PyTorch's cu126 index, its line for drivers older than 580), and for torch 2.8 + CUDA 12.8.
CU126_WHEELS = [
    ("flash-attn", "2.8.3", "cu130.torch2.13", f"cp311-cp311-{X86}", None),
    ("flash-attn", "2.8.3", "cu126.torch2.13", f"cp311-cp311-{X86}", None),
    ("flash-attn", "2.8.3", "cu128.torch2.8", f"cp311-cp311-{X86}", None),
]


@pytest.fixture(scope="module")
def cu126_site(tmp_path_factory) -> Iterator[Served]:
    served = _site(tmp_path_factory.mktemp("cu126"), CU126_WHEELS)
    yield served
    served.stop()


@pytest.mark.parametrize("driver", ["550.54.14", "535.104.05"])
def test_a_driver_older_than_580_is_sent_to_the_cu126_build_of_its_own_torch_series(cu126_site, driver):
    """PyPI's torch 2.13 is a CUDA 13.0 build, which needs driver 580: a machine with driver 550
    (or 535) gets the reason and PyTorch's CUDA 12.6 build of the same series, which the index has
    wheels for under cu126/torch2.13, before any other series."""
    facts = client.Index(cu126_site.url).facts()
    assert facts.driver_for("13.0") == "580" and facts.driver_for("12.6") == "525.60.13"
    a = pick(cu126_site, torch_version="2.13.0+cu130", cuda_driver=driver)
    assert not a.fits and a.build is None
    assert a.advice == [
        f"a newer NVIDIA driver: CUDA 13.0 (torch 2.13.0+cu130) needs driver >= 580; this machine's is {driver}",
        torch_line("or a torch built for an older CUDA that this driver runs:", "2.13", "12.6")]
    assert torch_index_url("12.6") == "https://download.pytorch.org/whl/cu126"
    # with PyTorch's cu126 torch installed, the cu126 wheel fits, from its variant index
    a = pick(cu126_site, torch_version="2.13.0+cu126", cuda_driver=driver)
    assert a.fits and a.filename.startswith("flash_attn-2.8.3+cu126.torch2.13-cp311")
    assert "/cu126/torch2.13/simple/" in a.pip
