"""The selector across platforms (tools.selector.detect, .target, .answer, .facts): which platform a
machine is, answers for another one (``--platform``) with the commands that fetch its wheel, what
the site says of PyPI's torch there (``selector.json``'s ``torch_platforms``), and the printed
commands run by the real pip and uv against a served index holding every platform's wheel.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from wheelfactory import make_wheel

from tools import ROOT
from tools.pipeline.venvs import uv_bin
from tools.selector import answer as selection
from tools.selector import cli, client, detect, facts
from tools.selector.target import DOWNLOAD_DIR
from tools.sitegen.generate import IndexRun, build_index
from tools.sitegen.server import make_server, serve

TIMEOUT = 120

#: platform -> its wheel's platform tag
TAGS = {"linux_x86_64": "manylinux_2_28_x86_64", "linux_aarch64": "manylinux_2_28_aarch64",
        "win_amd64": "win_amd64"}
#: The site's word on PyPI's torch: aarch64 CPU-only for 2.10, CUDA 13.0 for 2.14.
TORCH_PLATFORMS = {
    "2.10": {"linux_aarch64": {"pypi_cuda": None, "cuda": ["12.6", "12.8", "13.0"]},
             "linux_x86_64": {"pypi_cuda": "12.8", "cuda": ["12.6", "12.8", "13.0"]}},
    "2.14": {"linux_aarch64": {"pypi_cuda": "13.0", "cuda": ["12.6", "12.8", "13.0", "13.2"]}},
}


def wheel_name(label: str, plat: str) -> str:
    return f"demo_ext-1.0+{label}-cp311-cp311-{TAGS[plat]}.whl"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """One version for each platform in cu128/torch2.10 and cu128/torch2.14; a selector.json
    with ``torch_platforms``."""
    root = tmp_path_factory.mktemp("platforms")
    for label in ("cu128.torch2.10", "cu128.torch2.14"):
        for tag in TAGS.values():
            make_wheel(root / "files", "demo-ext", "1.0", local=label, tag=f"cp311-cp311-{tag}",
                       requires_python=">=3.9")
    report = build_index(IndexRun(wheels_dir=root / "files", output_dir=root / "site", base_url="/files",
                         ledger_path=root / "ledger.json", init_ledger=True))
    assert not report.rejected
    doc = json.loads((root / "site" / facts.FACTS_FILE).read_text())
    doc["torch_platforms"] = TORCH_PLATFORMS
    (root / "site" / facts.FACTS_FILE).write_text(json.dumps(doc))
    return root


@pytest.fixture(scope="module")
def url(site) -> Iterator[str]:
    server = make_server(site / "site", site / "files")
    # Stops by itself, should the fixture's own shutdown never come.
    thread = threading.Thread(target=serve, args=(server,), kwargs={"exit_after": 600}, daemon=True)
    thread.start()
    yield server.url
    server.shutdown()
    thread.join(timeout=10)


def machine(**overrides: str) -> detect.Machine:
    """A machine from overrides only (nothing detected: the same answer on any test host)."""
    base = {"python_version": "3.11", "torch_version": "2.10.0+cu128", "cxx11_abi": "1",
            "cuda_driver": "570.86.10", "sm": "none"}
    base.update(overrides)
    return detect.detect_machine({k: v for k, v in base.items() if v is not None}, allow_import=False)


# --------------------------------------------------------------------------- which platform


@pytest.mark.parametrize("sys_platform, sysconfig_platform, machine_arch, os_name, arch, platform", [
    ("linux", "linux-x86_64", "x86_64", "linux", "x86_64", "linux_x86_64"),
    ("linux", "linux-aarch64", "aarch64", "linux", "aarch64", "linux_aarch64"),
    ("linux", "linux-i686", "x86_64", "linux", "i686", None),      # a 32-bit Python: its wheels are i686
    ("win32", "win-amd64", "AMD64", "windows", "amd64", "win_amd64"),
    ("win32", "win-arm64", "ARM64", "windows", "arm64", None),
    ("win32", "win32", "AMD64", "windows", "x86", None),           # a 32-bit Python on 64-bit Windows
    ("darwin", "macosx-11.0-arm64", "arm64", "darwin", "arm64", None),
])
def test_the_platform_of_the_machine_it_runs_on(monkeypatch, sys_platform, sysconfig_platform, machine_arch,
                                                os_name, arch, platform):
    monkeypatch.setattr(detect.sys, "platform", sys_platform)
    monkeypatch.setattr(detect.sysconfig, "get_platform", lambda: sysconfig_platform)
    monkeypatch.setattr(detect.platform, "machine", lambda: machine_arch)
    monkeypatch.setattr(detect, "_libc_version", lambda: ("glibc", "2.36"))
    m = detect.Machine(python=(3, 11))
    detect.detect_platform(m)
    assert (m.os, m.arch, m.platform) == (os_name, arch, platform)
    assert (m.libc is None) is (os_name != "linux")


@pytest.mark.parametrize("overrides, platform, foreign, glibc", [
    ({}, "linux_x86_64", False, (2, 36)),                                   # this machine, as detected
    ({"platform": "linux_x86_64"}, "linux_x86_64", False, (2, 36)),         # the same platform
    ({"platform": "linux_aarch64"}, "linux_aarch64", True, None),           # another's glibc is unknown
    ({"platform": "linux_aarch64", "glibc": "2.39"}, "linux_aarch64", True, (2, 39)),
    ({"platform": "win_amd64"}, "win_amd64", True, None),
    ({"machine": "aarch64"}, "linux_aarch64", True, None),                  # --machine alone, as before
    ({"machine": "AMD64"}, "linux_x86_64", False, (2, 36)),                 # Windows' spelling of x86_64
])
def test_answering_for_another_platform(monkeypatch, overrides, platform, foreign, glibc):
    monkeypatch.setattr(detect, "detect_platform", _linux_x86_64)
    m = detect.detect_machine({"torch_version": "2.10.0+cu128", "cuda_driver": "13.0", "sm": "none",
                               "cxx11_abi": "1", **overrides}, allow_import=False)
    assert (m.platform, m.foreign, m.glibc) == (platform, foreign, glibc)
    assert (m.cxx11_abi is None) is (platform == "win_amd64")  # libstdc++'s ABI: not Windows'
    assert ("glibc" in m.unknown) is (glibc is None and platform != "win_amd64")
    assert m.to_json()["platform"] == platform


def _linux_x86_64(m: detect.Machine) -> None:
    m.os, m.arch, m.libc, m.glibc = "linux", "x86_64", "glibc", (2, 36)


def test_an_unknown_platform_is_refused():
    with pytest.raises(ValueError, match="'macos_arm64' is not one of linux_x86_64, linux_aarch64, win_amd64"):
        machine(platform="macos_arm64")
    assert subprocess.run([sys.executable, "-m", "tools.selector", "demo-ext", "--index", "x", "--platform",
                           "macos_arm64"], cwd=ROOT, capture_output=True, timeout=TIMEOUT).returncode == 2


# --------------------------------------------------------------------------- the answers

SELECT_CASES = [
    # (id, machine overrides, fits, file's platform or what the answer says)
    ("x86_64-here", {"platform": None, "machine": "x86_64", "glibc": "2.36"}, True, "linux_x86_64"),
    ("aarch64", {"platform": "linux_aarch64"}, True, "linux_aarch64"),
    ("aarch64-glibc", {"platform": "linux_aarch64", "glibc": "2.39"}, True, "linux_aarch64"),
    ("windows", {"platform": "win_amd64"}, True, "win_amd64"),
    ("old-glibc", {"platform": "linux_aarch64", "glibc": "2.17"}, False,
     "needs glibc >= 2.28 (manylinux_2_28_aarch64), this machine has glibc 2.17"),
    ("aarch64-cpu-torch-2.10", {"platform": "linux_aarch64", "torch_version": "2.10.0+cpu"}, False,
     "no Linux aarch64 CUDA build of torch 2.10 on PyPI (its wheel there is CPU-only): use PyTorch's "
     "cu128 index (https://download.pytorch.org/whl/cu128)"),
    ("aarch64-pypi-torch-2.10", {"platform": "linux_aarch64", "torch_version": "2.10.0"}, False,
     "no Linux aarch64 CUDA build of torch 2.10 on PyPI"),
    ("aarch64-pypi-torch-2.14", {"platform": "linux_aarch64", "torch_version": "2.14.0"}, False,
     "PyPI's torch 2.14 for Linux aarch64 is a CUDA 13.0 build: pass --torch-cuda 13.0 if this torch is PyPI's"),
    # (with a driver for CUDA 13.0: PyPI's build is no advice for one too old for it)
    ("aarch64-cpu-torch-2.14", {"platform": "linux_aarch64", "torch_version": "2.14.0+cpu",
                                "cuda_driver": "580.65.06"}, False,
     "PyPI's torch 2.14 for Linux aarch64 is a CUDA 13.0 build"),
    ("x86_64-cpu-torch-2.14-unknown", {"platform": "linux_x86_64", "torch_version": "2.14.0+cpu"}, False,
     "is a CPU-only build"),   # the site says nothing of 2.14 on x86_64: nor does the answer
]


@pytest.mark.parametrize("case", SELECT_CASES, ids=[c[0] for c in SELECT_CASES])
def test_select_for_each_platform(case, url):
    name, overrides, fits, expected = case
    m = machine(**overrides)
    a = selection.select(client.Index(url), "demo-ext", m)
    assert a.fits is fits, (a.reason, a.reasons)
    if fits:
        assert a.filename == wheel_name("cu128.torch2.10", expected)
        assert a.pip == f'pip install "demo-ext==1.0+cu128.torch2.10" --extra-index-url {a.index_url}'
        assert (a.download is not None) is m.foreign
        assert ("download" in a.to_json()) is m.foreign
    else:
        said = " ".join([a.reason or "", *a.reasons, *a.advice])
        assert expected in said, said
        if name.endswith("unknown"):
            assert "PyPI" not in said
    assert cli.format_answer(a)


@pytest.mark.parametrize("torch_version, note", [
    ("2.10.0+cu128", "on that machine: no Linux aarch64 CUDA build of torch 2.10 on PyPI (its wheel there is "
                     "CPU-only): use PyTorch's cu128 index (https://download.pytorch.org/whl/cu128)"),
    ("2.14.0+cu128", "on that machine: PyPI's torch 2.14 for Linux aarch64 is a CUDA 13.0 build, and this wheel "
                     "is for CUDA 12.8: install torch from PyTorch's cu128 index (https://download.pytorch.org/whl/cu128)"),
])
def test_an_answer_for_another_platform_says_where_its_torch_is(url, torch_version, note):
    a = selection.select(client.Index(url), "demo-ext", machine(platform="linux_aarch64", torch_version=torch_version))
    assert a.fits and note in a.notes, a.notes


def test_a_site_without_torch_platforms_says_nothing_of_pypi(site, tmp_path):
    """An older selector.json (no ``torch_platforms``): the answers stand, without the advice."""
    local = tmp_path / "site"
    shutil.copytree(site / "site", local)
    doc = json.loads((local / facts.FACTS_FILE).read_text())
    del doc["torch_platforms"]
    (local / facts.FACTS_FILE).write_text(json.dumps(doc))
    for torch_version in ("2.10.0+cpu", "2.10.0+cu128"):
        a = selection.select(client.Index(str(local)), "demo-ext",
                             machine(platform="linux_aarch64", torch_version=torch_version))
        assert "PyPI" not in " ".join([a.reason or "", *a.reasons, *a.advice, *a.notes])


def test_a_machine_of_no_platform_here_is_told_at_once(url):
    m = machine()
    m.os, m.arch = "darwin", "arm64"
    a = selection.select(client.Index(url), "demo-ext", m)
    assert not a.fits and a.build is None
    assert a.reason == ("no wheels for this platform (darwin arm64): CUDA wheels are built for Linux x86_64 "
                        "(linux_x86_64), Linux aarch64 (linux_aarch64), Windows x86_64 (win_amd64); answer for "
                        "one of those with --platform")
    assert "no wheels for this platform" in cli.format_answer(a)


@pytest.mark.parametrize("overrides, field, pip, uv", [
    ({"platform": "linux_aarch64"}, "manylinux_2_28_aarch64",
     "--platform manylinux_2_28_aarch64 --python-version 3.11", "--python-platform aarch64-manylinux_2_28 "
     "--python-version 3.11"),
    ({"platform": "win_amd64", "python_version": "3.12"}, "win_amd64",
     "--platform win_amd64 --python-version 3.12", "--python-platform x86_64-pc-windows-msvc --python-version 3.12"),
    # a compressed tag set: one of its tags is enough for pip
    ({"platform": "linux_x86_64"}, "manylinux_2_17_x86_64.manylinux2014_x86_64",
     "--platform manylinux_2_17_x86_64 --python-version", "--python-platform x86_64-manylinux_2_17"),
    # a free-threaded Python: its ABI is not the default one
    ({"platform": "linux_aarch64", "python_version": "3.13t"}, "manylinux_2_28_aarch64",
     "--python-version 3.13 --abi cp313t", "--python 3.13t"),
    # a pure wheel: no platform for pip to ask for; uv still resolves for that machine
    ({"platform": "linux_aarch64"}, "any", "--only-binary :all: --python-version 3.11",
     "--python-platform aarch64-unknown-linux-gnu"),
])
def test_the_commands_that_fetch_another_platforms_wheel(overrides, field, pip, uv):
    from tools.selector.target import download_commands

    cmds = download_commands("demo-ext", "1.0+cu128.torch2.10", "https://i/cu128/torch2.10/simple/", field,
                             machine(**overrides))
    assert cmds["pip"].startswith('pip download "demo-ext==1.0+cu128.torch2.10" --no-deps --only-binary :all:')
    assert pip in cmds["pip"] and cmds["pip"].endswith(
        f"--extra-index-url https://i/cu128/torch2.10/simple/ --dest {DOWNLOAD_DIR}")
    assert cmds["uv"].startswith('uv pip install "demo-ext==1.0+cu128.torch2.10" --no-deps ')
    assert uv in cmds["uv"] and cmds["uv"].endswith(f"--target {DOWNLOAD_DIR}")


def _env() -> dict[str, str]:
    # The machine's pip and uv configuration (find-links, extra index URLs) must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", UV_PYTHON_DOWNLOADS="never")
    return env


def _local_only(words: list[str]) -> list[str]:
    """A printed command with the variant index as the only index: nothing is asked of PyPI."""
    return ["--index-url" if w == "--extra-index-url" else w for w in words]


@pytest.mark.parametrize("plat", ["linux_aarch64", "win_amd64"])
def test_the_printed_commands_fetch_that_platforms_file(url, tmp_path, plat):
    """The selector's --json answer for another platform, its commands run by the real pip and uv."""
    proc = subprocess.run(
        [sys.executable, "-m", "tools.selector", "demo-ext", "--index", url + "/", "--json", "--platform", plat,
         "--python-version", "3.11", "--torch-version", "2.10.0+cu128", "--cxx11-abi", "1",
         "--cuda-driver", "570.86.10", "--sm", "none"],
        cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["machine"]["platform"] == plat and doc["machine"]["foreign"] is True
    expected = wheel_name("cu128.torch2.10", plat)
    assert doc["filename"] == expected
    pip = _local_only(shlex.split(doc["download"]["pip"]))
    assert pip[:2] == ["pip", "download"]
    run = subprocess.run([sys.executable, "-m", "pip", "--isolated", *pip[1:]], cwd=tmp_path,
                         capture_output=True, text=True, timeout=TIMEOUT, env=_env())
    assert run.returncode == 0, run.stdout + run.stderr
    assert [p.name for p in (tmp_path / DOWNLOAD_DIR).iterdir()] == [expected]
    uv = _local_only(shlex.split(doc["download"]["uv"]))
    assert uv[:3] == ["uv", "pip", "install"]
    run = subprocess.run([uv_bin(), "pip", "install", "--no-config", "--no-cache", "--python", sys.executable,
                          *uv[3:]], cwd=_made(tmp_path / "uv"),
                         capture_output=True, text=True, timeout=TIMEOUT, env=_env())
    assert run.returncode == 0, run.stdout + run.stderr
    (dist_info,) = (tmp_path / "uv" / DOWNLOAD_DIR).glob("demo_ext-*.dist-info")
    assert f"Tag: cp311-cp311-{TAGS[plat]}" in (dist_info / "WHEEL").read_text()


def _made(path: Path) -> Path:
    path.mkdir()
    return path


# --------------------------------------------------------------------------- selector.json


@pytest.mark.parametrize("value, builds", [
    (None, None),                                                        # an older site: unknown
    ({"2.10": {"linux_aarch64": {"pypi_cuda": None, "cuda": ["12.8"]}}}, facts.TorchBuilds(None, ("12.8",))),
    ({"2.10": {"linux_aarch64": {"pypi_cuda": "13.0"}}}, facts.TorchBuilds("13.0", ())),
    ({"2.10": {"linux_aarch64": {"cuda": ["12.8"]}}}, None),             # no pypi_cuda: says nothing
    ({"2.10": {"riscv64_linux": {"pypi_cuda": None}}}, None),            # a platform of a later site
    ({"2.11": {"linux_aarch64": {"pypi_cuda": None}}}, None),            # another series
])
def test_torch_platforms_is_read_when_there(value, builds):
    doc = {"schema": 1, "min_driver": {"12.8": "525.60.13"}}
    if value is not None:
        doc["torch_platforms"] = value
    site = facts.parse_facts(doc, "x")
    assert site.torch_builds("2.10", "linux_aarch64") == builds
    assert facts.parse_facts(site.to_json(), "y") == site                # written as read


@pytest.mark.parametrize("value", [
    [],                                                                  # not a mapping
    {"2.10": []},
    {"two.ten": {"linux_aarch64": {"pypi_cuda": None}}},                 # not a series
    {"2.10": {"Linux aarch64": {"pypi_cuda": None}}},                    # not a platform name
    {"2.10": {"linux_aarch64": ["13.0"]}},
    {"2.10": {"linux_aarch64": {"pypi_cuda": 13.0}}},                    # a number, not a version string
    {"2.10": {"linux_aarch64": {"pypi_cuda": "\x1b[2J"}}},              # escapes never reach a message
    {"2.10": {"linux_aarch64": {"pypi_cuda": "\u00b9\u00b3.0"}}},      # digits of another script
    {"2.10": {"linux_aarch64": {"pypi_cuda": None, "cuda": "12.8"}}},
    {"2.10": {"linux_aarch64": {"pypi_cuda": None, "cuda": [12.8]}}},
    {"2.10": {"linux_aarch64": {"pypi_cuda": None, "cuda": ["12.8"] * 65}}},  # more than any table has
    {"2.10": {"linux_aarch64": {"pypi_cuda": None, "cuda": [None]}}},
])
def test_a_bad_torch_platforms_is_refused_with_its_name(value):
    with pytest.raises(facts.FactsError, match="'torch_platforms' must map torch series to platforms"):
        facts.parse_facts({"schema": 1, "min_driver": {}, "torch_platforms": value}, "x")
