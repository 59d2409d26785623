"""tools.upstream.registry: reading PyPI's answers (file names, pins, ELF facts, torch's variant page).

The file names and pins below are real ones from PyPI's torch releases; tools.refresh's tests run
the same functions against recorded answers served on 127.0.0.1.
"""

from __future__ import annotations

import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from packaging.utils import parse_wheel_filename

from tools.core.errors import RegistryError
from tools.upstream.registry import (PYPI_JSON, TORCH_TEST, TORCH_VARIANTS, Registry,
                                     cuda_from_requires,
                                     elf_facts, manylinux_tag, newest_by_series, newest_release,
                                     platform_variants, python_versions, read_variants)


def wheels(*names: str) -> list:
    return [({"filename": n}, *parse_wheel_filename(n)[2:]) for n in names]


@pytest.mark.parametrize("lines,expect", [
    # torch >= 2.11: one cuda-toolkit pin with extras (2.14.1's METADATA)
    (["filelock", 'cuda-toolkit[cublas,cudart,nvrtc]==13.0.3; platform_system == "Linux"'],
     ("13.0", "cuda-toolkit[...]==13.0.3")),
    # torch <= 2.10: nvidia-*-cu12 packages (2.9.1's METADATA)
    (['nvidia-cuda-nvrtc-cu12==12.8.93; platform_system == "Linux"',
      'nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"'],
     ("12.8", "nvidia-cuda-runtime-cu12==12.8.90")),
    # a CPU build pins nothing: not guessed
    (["filelock", "sympy>=1.13.3"], (None, "")),
])
def test_cuda_from_requires(lines, expect):
    assert cuda_from_requires(lines) == expect


def test_python_versions_split_free_threaded_builds():
    got = python_versions(wheels("torch-2.15.0-cp315-cp315-manylinux_2_28_x86_64.whl",
                                 "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                                 "torch-2.15.0-cp314-cp314t-manylinux_2_28_x86_64.whl"))
    assert got == (["3.11", "3.15"], ["3.14t"])


@pytest.mark.parametrize("names,expect", [
    # PEP 600 tag (torch >= 2.7)
    (["torch-2.9.1-cp312-cp312-manylinux_2_28_x86_64.whl"], "2_28"),
    # a compound tag: the lowest glibc it states
    (["x-1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"], "2_17"),
    # only a legacy tag (torch 2.6's manylinux1): read from the libraries instead
    (["torch-2.6.0-cp312-cp312-manylinux1_x86_64.whl"], None),
    # files that disagree: not one answer
    (["x-1.0-cp311-cp311-manylinux_2_17_x86_64.whl",
      "x-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"], None),
])
def test_manylinux_tag(names, expect):
    assert manylinux_tag(wheels(*names)) == expect


def release(*names, yanked=False, kind="bdist_wheel"):
    return [{"filename": n, "packagetype": kind, "yanked": yanked} for n in names]


def test_newest_by_series_skips_prereleases_yanked_files_and_other_platforms():
    doc = {"releases": {
        "2.9.0": release("torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl"),
        "2.9.1": release("torch-2.9.1-cp312-cp312-manylinux_2_28_x86_64.whl"),
        "2.10.0": release("torch-2.10.0-cp312-cp312-manylinux_2_28_x86_64.whl"),
        "2.10.1": release("torch-2.10.1-cp312-cp312-manylinux_2_28_x86_64.whl", yanked=True),
        "2.11.0rc1": release("torch-2.11.0rc1-cp312-cp312-manylinux_2_28_x86_64.whl"),
        "2.11.0": release("torch-2.11.0-cp312-cp312-macosx_14_0_arm64.whl"),
    }}
    assert newest_by_series(doc) == {"2.9": "2.9.1", "2.10": "2.10.0"}


def test_newest_release():
    doc = {"releases": {"1.6.1": release("a-1.6.1.tar.gz", kind="sdist"),
                        "1.7.0": release("a-1.7.0.tar.gz", kind="sdist"),
                        "1.8.0": release("a-1.8.0.tar.gz", kind="sdist", yanked=True),
                        "1.9.0.dev1": release("a-1.9.0.dev1.tar.gz", kind="sdist"),
                        "2.0.0": []}}
    assert newest_release(doc) == "1.7.0"
    assert newest_release({"releases": {}}) is None


@pytest.mark.parametrize("abi", [True, False])
def test_elf_facts_read_the_cxx11_abi_and_the_glibc_floor(tmp_path, abi):
    src = tmp_path / "shm.cpp"
    src.write_text("#include <cstdlib>\n#include <string>\n"
                   "std::string name(const std::string& s) { return s + std::getenv(\"X\"); }\n")
    so = tmp_path / "libshm.so"
    subprocess.run(["g++", "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={int(abi)}", "-o",
                    str(so), str(src)], check=True, timeout=120)
    cxx11, glibc = elf_facts(so.read_bytes())
    assert cxx11 is abi
    # Whatever glibc built it, the floor is a version like 2_34, never a guess.
    assert glibc is not None and glibc.startswith("2_")


def test_variants_come_from_torchs_page_and_an_unreachable_page_is_said(tmp_path):
    page = tmp_path / "torch.html"
    page.write_text(
        '<a href="/whl/cu128/torch-2.9.1%2Bcu128-cp312-cp312-manylinux_2_28_x86_64.whl">a</a>\n'
        '<a href="/whl/cu130/torch-2.9.1%2Bcu130-cp313-cp313t-manylinux_2_28_x86_64.whl">b</a>\n'
        '<a href="/whl/cu118/torch-2.6.0%2Bcu118-cp312-cp312-linux_x86_64.whl">c</a>\n'
        '<a href="/whl/cpu/torch-2.9.1%2Bcpu-cp312-cp312-manylinux_2_28_x86_64.whl">d</a>\n'
        '<a href="/whl/cu130/torch-2.9.1%2Bcu130-cp312-cp312-manylinux_2_28_aarch64.whl">e</a>\n')
    found, why = read_variants(Registry(variants=page.as_uri()))
    assert (found, why) == ({"2.9.1": {"12.8", "13.0"}, "2.6.0": {"11.8"}}, "")
    found, why = read_variants(Registry(variants=(tmp_path / "missing.html").as_uri()))
    assert found is None and "missing.html failed" in why


def test_the_other_platforms_variants_come_from_the_same_page():
    """The page lists every platform's +cuXYZ wheels: each table platform's by its tag pattern
    (a compound tag counts when one of its tags matches); CPU builds are no variant."""
    page = (
        '<a href="/whl/cu128/torch-2.9.1%2Bcu128-cp312-cp312-manylinux_2_28_x86_64.whl">a</a>\n'
        '<a href="/whl/cu128/torch-2.9.1%2Bcu128-cp312-cp312-manylinux_2_28_aarch64.whl">b</a>\n'
        '<a href="/whl/cu130/torch-2.9.1%2Bcu130-cp313-cp313t-manylinux_2_17_aarch64.'
        'manylinux2014_aarch64.whl">c</a>\n'
        '<a href="/whl/cpu/torch-2.9.1%2Bcpu-cp312-cp312-manylinux_2_28_aarch64.whl">d</a>\n'
        '<a href="/whl/cu126/torch-2.9.1%2Bcu126-cp312-cp312-win_amd64.whl">e</a>\n'
        '<a href="/whl/cu130/torch-2.10.0+cu130-cp312-cp312-win_amd64.whl">f</a>\n')
    assert platform_variants(page, "manylinux_{manylinux}_aarch64") == {"2.9.1": {"12.8", "13.0"}}
    assert platform_variants(page, "win_amd64") == {"2.9.1": {"12.6"}, "2.10.0": {"13.0"}}
    assert platform_variants(page, "manylinux_{manylinux}_x86_64") == {"2.9.1": {"12.8"}}


# ---- where the client reads, and how much ------------------------------------------------------

class Files(BaseHTTPRequestHandler):
    """``/files/<n>`` answers n bytes; every path asked is recorded."""

    asked: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's naming
        """Answer the path."""
        self.asked.append(self.path)
        size = int(self.path.rsplit("/", 1)[-1])
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        self.wfile.write(bytes(size))

    def log_message(self, *args):
        """Quiet."""


@pytest.fixture
def local():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Files)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield Registry(pypi=f"{base}/pypi/", variants=f"{base}/whl/torch/", timeout=5, max_bytes=1000)
    httpd.shutdown()
    httpd.server_close()


def test_the_client_reads_its_own_origins_and_pypis_file_host(local):
    assert Registry().origins() == (PYPI_JSON, TORCH_VARIANTS, TORCH_TEST,
                                    "https://files.pythonhosted.org")
    assert local.origins()[0].startswith("http://127.0.0.1:")


def test_a_download_within_the_cap_is_written(local, tmp_path):
    base = local.pypi.removesuffix("/pypi/")
    assert local.download(f"{base}/files/1000", tmp_path / "x.tar.gz").read_bytes() == bytes(1000)
    with pytest.raises(RegistryError, match="larger than 1000 bytes"):
        local.download(f"{base}/files/1001", tmp_path / "y.tar.gz")
    assert not (tmp_path / "y.tar.gz").exists()


@pytest.mark.parametrize("url", [
    "https://pypi.org@127.0.0.1:{port}/files/10",      # the host is the one after '@'
    "http://localhost:{port}/files/10",                # not exactly the configured host
])
def test_an_answer_naming_another_place_is_never_asked(local, tmp_path, url):
    port = local.pypi.split(":")[2].split("/")[0]
    asked = len(Files.asked)
    with pytest.raises(RegistryError):
        local.download(url.format(port=port), tmp_path / "x.tar.gz")
    with pytest.raises(RegistryError):
        local.members(url.format(port=port), 10, ["METADATA"])
    assert len(Files.asked) == asked and not (tmp_path / "x.tar.gz").exists()
