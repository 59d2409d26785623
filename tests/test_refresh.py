"""tools.refresh: the registry's change to the table and the recipes, from recorded answers.

A registry stands in on 127.0.0.1 (PyPI's JSON API, files with HTTP range requests, torch's
variant page). It replays the answers recorded in tests/fixtures/registry/ (torch 2.14.1 and
2.15.0, causal-conv1d 1.6.1 and 1.7.0, mamba-ssm 2.3.2.post1; `record.py` there regenerates them)
with small stand-in
files of the recorded names: torch wheels holding the recorded METADATA and torch/version.py, a
libshm.so compiled here with or without the C++11 ABI, and 1 MiB of padding; sdists holding a
setup.py. The repository is a copy of the fixture table (torch 2.14 only) and one recipe. One
test reads the live registry (marked network) for the agreement with recipes/table.yaml. Probe
reports of the new series are written by tests/fixtures/probes/make_reports.py (the probe's own
report code).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
import hashlib
import importlib.util
import io
import json
import os
import subprocess
import tarfile
import threading
import urllib.request
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from tools import ROOT
from tools import refresh as refresh_command
from tools.core.errors import CuwheelsError, RecipeError, RegistryError, TableError
from tools.plan.cells import plan, torch_index
from tools.plan.recipes.model import load_all
from tools.upstream.follow import propose, summary, write_all
from tools.upstream.registry import Registry
from tools.plan.table import load_table, parse_table

FIXTURES = Path(__file__).parent / "fixtures" / "registry"
RECORDED = {name: json.loads((FIXTURES / f"{name}.json").read_text())
            for name in ("torch", "causal-conv1d", "mamba-ssm")}
_spec = importlib.util.spec_from_file_location(
    "make_reports", Path(__file__).parent / "fixtures" / "probes" / "make_reports.py")
make_reports = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_reports)
MEMBERS = json.loads((FIXTURES / "members.json").read_text())
DATE = "2026-11-23"
PYPI_FILES = "https://files.pythonhosted.org/"

RECIPE = """\
schema: 1
package: causal_conv1d
summary: "Causal depthwise 1D convolution kernels (a test copy)"
source:
  pypi: causal-conv1d
  version: "1.6.1"
  sdist: causal_conv1d-1.6.1.tar.gz
  sha256: "{sha}"
  url: "https://files.pythonhosted.org/packages/63/15/x/causal_conv1d-1.6.1.tar.gz"
imports: [causal_conv1d_cuda, causal_conv1d]
python: ">=3.9"
cuda:
  "13.0": {{torch_from: "2.14", reason: "torch 2.14's PyPI build is CUDA 13.0; newer series of CUDA 13.0 too"}}
# a comment the refresh must keep
archs: {{"*": ["80", "90"]}}
arch_env: {{name: CAUSAL_CONV1D_CUDA_ARCHS, style: plain, reason: "added by patch 0001"}}
build:
  isolation: false
  requires:
    - {{requirement: "ninja", reason: "parallel compiles"}}
  job_memory_gib: 3.5
  job_memory_reason: "measured"
patches:
  - {{file: 0001-Read-arch-list-from-environment.patch, reason: "setup.py hard-codes its archs", upstream: "not submitted"}}
"""
SETUP_PY = 'import os\n\nARCHS = ["80", "90"]\nVERSION = "{version}"\n'
#: What 1.7.0 looks like when upstream rewrote the line patch 0001 touches.
SETUP_PY_REWRITTEN = 'import os\n\nARCHS = arch_list()\nVERSION = "{version}"\n'
PATCH = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
Subject: [PATCH] Read the arch list from the environment

---
--- a/setup.py
+++ b/setup.py
@@ -1,4 +1,4 @@
 import os
 
-ARCHS = ["80", "90"]
+ARCHS = os.environ.get("CAUSAL_CONV1D_CUDA_ARCHS", "80;90").split(";")
 VERSION = "{version}"
"""
LIBSHM_CPP = '#include <string>\nstd::string shm_name(const std::string& s) { return s + "x"; }\n'


def sdist_bytes(version: str, setup_py: str = SETUP_PY) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        body = setup_py.format(version=version).encode()
        info = tarfile.TarInfo(f"causal_conv1d-{version}/setup.py")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return buf.getvalue()


@pytest.fixture(scope="session")
def libshm(tmp_path_factory) -> dict[bool, bytes]:
    """A libshm.so stand-in built here with the C++11 ABI (True) and without (False)."""
    out = {}
    folder = tmp_path_factory.mktemp("libshm")
    (folder / "shm.cpp").write_text(LIBSHM_CPP)
    for abi in (True, False):
        so = folder / f"libshm-{int(abi)}.so"
        subprocess.run(["g++", "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={int(abi)}",
                        "-o", str(so), str(folder / "shm.cpp")], check=True, timeout=120)
        out[abi] = so.read_bytes()
    return out


def torch_wheel(release: str, libshm: bytes, padding: bytes, version_py: str | None = None) -> bytes:
    """A stand-in torch wheel: the recorded METADATA and version.py (``version_py``: another
    platform's), libshm.so, 1 MiB of padding."""
    meta = "Metadata-Version: 2.4\nName: torch\nVersion: " + release + "\n" + "".join(
        f"Requires-Dist: {r}\n" for r in MEMBERS[release]["requires_dist"])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("torch/lib/libtorch_cuda.so", padding)  # stored: reading it would show
        zf.writestr("torch/version.py", version_py or MEMBERS[release]["version_py"])
        zf.writestr("torch/lib/libshm.so", libshm, compress_type=zipfile.ZIP_DEFLATED)
        zf.writestr(f"torch-{release}.dist-info/METADATA", meta)
        zf.writestr(f"torch-{release}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
    return buf.getvalue()


def platform_of(filename: str) -> str | None:
    """The table platform other than Linux x86_64 a recorded torch file is for (None: x86_64's
    or a file never read)."""
    if filename.endswith("_aarch64.whl"):
        return "linux_aarch64"
    return "win_amd64" if filename.endswith("-win_amd64.whl") else None


@dataclass
class LocalRegistry(Registry):
    """The registry client, with PyPI's file host (the recorded absolute https URLs, which the
    recipe loader requires) answered by the local server."""

    files: str = ""

    def _get(self, url: str) -> bytes:
        if url.startswith(PYPI_FILES):
            url = self.files + url.rsplit("/", 1)[-1]
        return super()._get(url)


class FakeRegistry:
    """PyPI's JSON API and files on 127.0.0.1; ``docs`` and ``files`` can be changed by a test."""

    def __init__(self, docs: dict, files: dict[str, bytes]):
        self.docs, self.files = docs, files
        self.fail: set[str] = set()      # paths answered with 500
        self.variant_page: str | None = None
        self.test_page: str | None = None  # PyTorch's test index (release candidates)
        self.sent: dict[str, int] = {}   # bytes sent per file
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                path = self.path
                if path in registry.fail:
                    return self._send(500, b"recorded outage")
                if path.startswith("/pypi/") and path.endswith("/json"):
                    doc = registry.served(path.split("/")[2])
                    return self._send(200, json.dumps(doc).encode()) if doc else self._send(404)
                if path == "/whl/torch/" and registry.variant_page is not None:
                    return self._send(200, registry.variant_page.encode())
                if path == "/whl/test/torch/" and registry.test_page is not None:
                    return self._send(200, registry.test_page.encode())
                name = path.rsplit("/", 1)[-1]
                if not path.startswith("/files/") or name not in registry.files:
                    return self._send(404)
                data = registry.files[name]
                rng = self.headers.get("Range")
                if rng:
                    lo, hi = (int(x) for x in rng.removeprefix("bytes=").split("-"))
                    chunk = data[lo: hi + 1]
                    registry.sent[name] = registry.sent.get(name, 0) + len(chunk)
                    return self._send(206, chunk, {"Content-Range":
                                                   f"bytes {lo}-{lo + len(chunk) - 1}/{len(data)}"})
                registry.sent[name] = registry.sent.get(name, 0) + len(data)
                return self._send(200, data)

            def _send(self, status, body=b"", headers=None):
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def served(self, name: str) -> dict | None:
        """The recorded answer with each file's URL, size and sha256 those of its stand-in."""
        doc = copy.deepcopy(self.docs.get(name))
        for files in (doc or {}).get("releases", {}).values():
            for f in files:
                data = self.files[f["filename"]]
                f.update(size=len(data), digests={"sha256": hashlib.sha256(data).hexdigest()})
                if not f["url"].startswith("https://"):
                    # Relative, as this network's registry answers torch's files.
                    f["url"] = f"../../files/{f['filename']}"
        return doc

    def registry(self) -> Registry:
        return LocalRegistry(f"{self.base}/pypi/", f"{self.base}/whl/torch/", timeout=30,
                             test=f"{self.base}/whl/test/torch/", files=f"{self.base}/files/")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def fake(libshm):
    padding = os.urandom(1 << 20)
    files = {}
    for release, entries in RECORDED["torch"]["releases"].items():
        wheels = {None: torch_wheel(release, libshm[True], padding)}
        for platform, version_py in MEMBERS[release]["platforms"].items():
            wheels[platform] = torch_wheel(release, libshm[True], padding, version_py)
        for f in entries:
            files[f["filename"]] = wheels[platform_of(f["filename"])]
    for version in RECORDED["causal-conv1d"]["releases"]:
        files[f"causal_conv1d-{version}.tar.gz"] = sdist_bytes(version)
    files["mamba_ssm-2.3.2.post1.tar.gz"] = b"not read: the recipe builds the newest release"
    docs = copy.deepcopy(RECORDED)
    registry = FakeRegistry(docs, files)
    yield registry
    registry.close()


@pytest.fixture
def repo(tmp_path):
    """recipes/ with the fixture table and a causal_conv1d recipe at 1.6.1 with its patch."""
    recipes = tmp_path / "recipes"
    folder = recipes / "causal_conv1d"
    (folder / "patches").mkdir(parents=True)
    (recipes / "table.yaml").write_text((FIXTURES / "table.yaml").read_text())
    (folder / "recipe.yaml").write_text(RECIPE.format(sha=hashlib.sha256(sdist_bytes("1.6.1")).hexdigest()))
    (folder / "patches" / "0001-Read-arch-list-from-environment.patch").write_text(
        PATCH.format(version="1.6.1"))
    return recipes


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_cli(recipes: Path, fake: FakeRegistry, monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``python -m tools.refresh`` in this process (its registry client sent to ``fake``):
    (exit status, stdout, stderr)."""
    monkeypatch.setattr(refresh_command, "Registry", lambda *a, **k: fake.registry())
    capsys.readouterr()
    rc = refresh_command.main(["--recipes", str(recipes), "--date", DATE, *args])
    out, err = capsys.readouterr()
    return rc, out, err


def without_release(fake: FakeRegistry, name: str, release: str) -> None:
    del fake.docs[name]["releases"][release]


# --------------------------------------------------------------------------- torch


def test_a_row_without_the_free_threaded_builds_pypi_has_gains_them(repo, fake):
    without_release(fake, "torch", "2.15.0")
    without_release(fake, "causal-conv1d", "1.7.0")
    table = repo / "table.yaml"
    table.write_text(table.read_text().replace('    free_threaded: ["3.14t"]\n', "", 1))
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    new = proposal.new[table]
    assert '    python: ["3.10", "3.11", "3.12", "3.13", "3.14"]\n    free_threaded: ["3.14t"]\n' \
        in new
    assert "torch 2.14: free_threaded [] -> [3.14t] (the registry says otherwise; PyPI JSON)" in \
        proposal.changes
    assert yaml.safe_load(new)["torch"]["2.14"]["source"].endswith(f"on {DATE}")


def test_torch_row_agrees_and_nothing_changes(repo, fake):
    without_release(fake, "torch", "2.15.0")
    without_release(fake, "causal-conv1d", "1.7.0")
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    assert proposal.new == {}
    assert proposal.agreement == ["torch 2.14: agrees (2.14.1)",
                                  "causal_conv1d: 1.6.1 is the newest release of causal-conv1d"]
    (facts,) = proposal.torch
    assert (facts.python, facts.free_threaded) == (["3.10", "3.11", "3.12", "3.13", "3.14"], ["3.14t"])
    assert (facts.pypi_cuda, facts.manylinux, facts.cxx11_abi) == ("13.0", "2_28", True)
    assert facts.how["pypi_cuda"] == ("wheel METADATA (cuda-toolkit[...]==13.0.3), "
                                      "torch/version.py (2.14.1+cu130)")
    # The wheel was read with range requests: its tail and two members, not the 1 MiB padding.
    read = fake.sent["torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl"]
    assert read < len(fake.files["torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl"]) // 4
    # torch's own index doesn't answer here: the cuda lists are named as unchecked, not changed.
    assert any("torch's own index could not be read" in n for n in proposal.notes)


def test_a_new_torch_series_gets_a_row_with_its_sources(repo, fake):
    without_release(fake, "causal-conv1d", "1.7.0")
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    table_path = repo / "table.yaml"
    assert list(proposal.new) == [table_path]
    new = proposal.new[table_path]
    old = proposal.old[table_path]
    assert new.startswith(old)  # every comment and row kept, byte for byte
    row = yaml.safe_load(new)["torch"]["2.15"]
    assert {k: row[k] for k in ("release", "python", "cuda", "pypi_cuda", "manylinux",
                                "cxx11_abi")} == {
        "release": "2.15.0", "python": ["3.11", "3.12", "3.13", "3.14", "3.15"],
        "cuda": ["13.2"], "pypi_cuda": "13.2", "manylinux": "2_28", "cxx11_abi": True}
    for read in ("PyPI JSON releases['2.15.0']", "cuda-toolkit[...]==13.2.2",
                 "torch/version.py (2.15.0+cu132)", "std::__cxx11 symbols in torch/lib/libshm.so",
                 "torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl read with HTTP range",
                 f"tools.refresh on {DATE}"):
        assert read in row["source"]
    # its free-threaded wheels are recorded beside python: (the planner builds them where a
    # recipe opts in)
    assert row["free_threaded"] == ["3.14t", "3.15t"] and "only the PyPI build's CUDA" in row["note"]
    assert '    python: ["3.11", "3.12", "3.13", "3.14", "3.15"]\n    free_threaded: ["3.14t", ' \
        '"3.15t"]\n' in new
    assert '\n\n  "2.15":\n    release: "2.15.0"\n    python: ["3.11",' in new  # the table's layout
    assert "new Python versions torch ships for: 3.15" in proposal.changes
    # 2.15's only variant is CUDA 13.2, which the recipe doesn't build: said, not proposed as
    # a recipe edit.
    assert proposal.plan == ["torch 2.15: no recipe's torch range builds it; not by "
                             "causal_conv1d (it builds no CUDA 13.2 wheels)"]
    parse_table(yaml.safe_load(new), table_path)  # what the loaders accept


def test_a_changed_value_is_named_with_its_reason(repo, fake):
    """The table says the old C++ ABI; the registry's libshm.so says otherwise."""
    without_release(fake, "torch", "2.15.0")
    without_release(fake, "causal-conv1d", "1.7.0")
    table = repo / "table.yaml"
    table.write_text(table.read_text().replace("cxx11_abi: true", "cxx11_abi: false"))
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    assert proposal.agreement[0] == "torch 2.14: differs in cxx11_abi"
    assert proposal.changes == ["torch 2.14: cxx11_abi false -> true (the registry says "
                                "otherwise; std::__cxx11 symbols in torch/lib/libshm.so)"]
    row = yaml.safe_load(proposal.new[table])["torch"]["2.14"]
    assert row["cxx11_abi"] is True
    assert row["source"].endswith("; refreshed: cxx11_abi: std::__cxx11 symbols in "
                                  "torch/lib/libshm.so; torch-2.14.1-cp312-cp312-manylinux_2_28_"
                                  f"x86_64.whl read with HTTP range requests, by tools.refresh on {DATE}")


def test_an_old_abi_library_reads_as_the_old_abi(repo, fake, libshm):
    without_release(fake, "causal-conv1d", "1.7.0")
    padding = b"\0" * 1024
    fake.files.update({f["filename"]: torch_wheel("2.15.0", libshm[False], padding)
                       for f in RECORDED["torch"]["releases"]["2.15.0"]})
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    facts = next(f for f in proposal.torch if f.series == "2.15")
    assert facts.cxx11_abi is False
    assert yaml.safe_load(proposal.new[repo / "table.yaml"])["torch"]["2.15"]["cxx11_abi"] is False


def test_variants_from_torchs_index_when_it_answers(repo, fake):
    without_release(fake, "causal-conv1d", "1.7.0")
    fake.variant_page = "".join(
        f'<a href="/whl/{cu}/torch-{rel}%2B{cu}-cp312-cp312-manylinux_2_28_x86_64.whl">x</a>\n'
        for rel, cu in [("2.14.1", "cu126"), ("2.14.1", "cu130"), ("2.14.1", "cu132"),
                        ("2.15.0", "cu130"), ("2.15.0", "cu132"), ("2.15.0", "cu133")])
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    assert "torch 2.14: agrees (2.14.1)" in proposal.agreement
    row = yaml.safe_load(proposal.new[repo / "table.yaml"])["torch"]["2.15"]
    assert row["cuda"] == ["13.0", "13.2"]
    assert "index was not read" not in row.get("note", "")
    # The recipe's open CUDA 13.0 range takes the new series in: planned, the recipe untouched.
    assert list(proposal.new) == [repo / "table.yaml"]
    assert proposal.plan == ["torch 2.15: built with no recipe edit by causal_conv1d "
                             "(CUDA 13.0: 5 cells)"]
    assert any("CUDA 13.3, which the table has no cuda: entry for" in n for n in proposal.notes)
    assert not any("could not be read" in n for n in proposal.notes)


def test_a_cuda_126_build_torch_stops_publishing_leaves_the_row(repo, fake):
    """The cu126 line is read like the others: where torch's index has no cu126 build of a
    release any more, the row's cuda: drops 12.6; a recipe whose 12.6 range then includes no
    published series loses that entry in the same change (the loader would refuse it, and the
    whole refresh with it), and nothing plans a 12.6 cell."""
    without_release(fake, "torch", "2.15.0")
    without_release(fake, "causal-conv1d", "1.7.0")
    recipe_file = repo / "causal_conv1d" / "recipe.yaml"
    recipe_file.write_text(recipe_file.read_text().replace('cuda:\n', 'cuda:\n  "12.6": {torch_from: '
                           '"2.14", torch_to: "2.14", reason: "PyTorch\'s cu126 build of 2.14"}\n'))
    table = load_table(repo / "table.yaml")
    assert {c.cuda for c in plan(load_all(repo, table), table)} == {"12.6", "13.0"}
    fake.variant_page = "".join(
        f'<a href="/whl/{cu}/torch-2.14.1%2B{cu}-cp312-cp312-manylinux_2_28_x86_64.whl">x</a>\n'
        for cu in ("cu130", "cu132"))
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    assert yaml.safe_load(proposal.new[repo / "table.yaml"])["torch"]["2.14"]["cuda"] == \
        ["13.0", "13.2"]
    assert any(c.startswith("torch 2.14: cuda [12.6, 13.0, 13.2] -> [13.0, 13.2]")
               for c in proposal.changes), proposal.changes
    assert ("causal_conv1d: CUDA 12.6 dropped: the table no longer publishes a CUDA 12.6 build "
            "of any series its range (2.14 only) includes (it did of 2.14)") in proposal.changes
    new_recipe = proposal.new[recipe_file]
    assert '"12.6"' not in new_recipe and "# a comment the refresh must keep" in new_recipe
    for path, text in proposal.new.items():
        path.write_text(text)
    table = load_table(repo / "table.yaml")
    assert {c.cuda for c in plan(load_all(repo, table), table)} == {"13.0"}


def test_the_written_table_alone_plans_the_new_series(repo, fake, monkeypatch, capsys, tmp_path):
    """With --write only the table changes, and the plan of the written files has the new
    series' cells; a range that ends before it is named as the reason it isn't built."""
    without_release(fake, "causal-conv1d", "1.7.0")
    fake.variant_page = "".join(
        f'<a href="/whl/{cu}/torch-{rel}%2B{cu}-cp312-cp312-manylinux_2_28_x86_64.whl">x</a>\n'
        for rel, cu in [("2.14.1", "cu126"), ("2.14.1", "cu130"), ("2.14.1", "cu132"),
                        ("2.15.0", "cu130"), ("2.15.0", "cu132")])
    recipe_file = repo / "causal_conv1d" / "recipe.yaml"
    before = recipe_file.read_text()
    summary_file = tmp_path / "summary.md"
    rc, _, err = run_cli(repo, fake, monkeypatch, capsys, "--write", "--summary", str(summary_file))
    assert rc == 0, err
    assert recipe_file.read_text() == before
    text = summary_file.read_text()
    assert ("### New series in the plan\n\n- torch 2.15: built with no recipe edit by "
            "causal_conv1d (CUDA 13.0: 5 cells)\n") in text
    table = load_table(repo / "table.yaml")
    ids = [c.id for c in plan(load_all(repo, table), table) if c.torch == "2.15"]
    # the newest series in the range is the CUDA version's default torch: no -torch part
    assert ids == [f"causal_conv1d-3.{m}-cu130" for m in (11, 12, 13, 14, 15)]

    # A range that stops at 2.14 doesn't take it in, and the summary says why.
    recipe_file.write_text(before.replace('torch_from: "2.14",', 'torch_from: "2.14", torch_to: "2.14",'))
    (repo / "table.yaml").write_text((FIXTURES / "table.yaml").read_text())
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    assert proposal.plan == ["torch 2.15: no recipe's torch range builds it; not by causal_conv1d "
                             "(its CUDA 13.0 range is torch 2.14 only; it builds no CUDA 13.2 "
                             "wheels)"]


def test_a_new_series_whose_cuda_the_table_lacks_is_left_out(repo, fake):
    without_release(fake, "causal-conv1d", "1.7.0")
    table = repo / "table.yaml"
    text = table.read_text()
    text = text[:text.index('  "13.2":')] + text[text.index("torch:"):]  # no CUDA 13.2 entry
    table.write_text(text.replace('cuda: ["12.6", "13.0", "13.2"]', 'cuda: ["12.6", "13.0"]'))
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    assert proposal.new == {}
    assert any(n.startswith("new torch series 2.15 (2.15.0) is left out: cuda.13.2 (the table "
                            "has no entry") for n in proposal.notes)


# --------------------------------------------------------------------------- other platforms of a new series

#: recipes/table.yaml's platforms: section as the fixture table would have it (its CUDA versions).
PLATFORMS = """platforms:
  linux_x86_64:
    tag: "manylinux_{manylinux}_x86_64"
    build: container
    source: "a test copy of recipes/table.yaml's"
  linux_aarch64:
    tag: "manylinux_{manylinux}_aarch64"
    build: container
    images: {IMAGES}
    source: "a test copy of recipes/table.yaml's"
  win_amd64:
    tag: "win_amd64"
    build: native
    toolchain: "Visual Studio 2022 and NVIDIA's CUDA installer"
    source: "a test copy of recipes/table.yaml's"

"""
#: The 2.14 row's platforms as recipes/table.yaml has them.
ROW_214_PLATFORMS = """    platforms:
      linux_aarch64: {pypi_cuda: "13.0", cuda: ["13.0"], source: "a test row"}
      win_amd64: {pypi_cuda: null, cuda: ["12.6", "13.0", "13.2"], source: "a test row"}
"""
NOT_READ = "torch's own index, https://download.pytorch.org/whl/torch/, could not be read by the refresh"


def with_platforms(repo: Path, images: tuple[str, ...] = ("13.0", "13.2")) -> Path:
    """The fixture table with the three platforms of recipes/table.yaml (aarch64 builder images
    for ``images``) and 2.14's platforms: block; its path."""
    table = repo / "table.yaml"
    text = table.read_text()
    section = PLATFORMS.replace("{IMAGES}", "{" + ", ".join(
        f'"{c}": "pytorch/manylinuxaarch64-builder:cuda{c}"' for c in images) + "}")
    text = text.replace("\ncuda:\n", "\n" + section + "cuda:\n", 1)
    table.write_text(text.rstrip("\n") + "\n" + ROW_214_PLATFORMS)
    load_table(table)  # the loaders accept it
    return table


def new_platforms(proposal, table: Path) -> dict:
    return yaml.safe_load(proposal.new[table])["torch"]["2.15"].get("platforms", {})


def test_a_new_series_gets_its_platforms_block_from_its_aarch64_and_windows_wheels(repo, fake):
    """The recorded 2.15.0: PyPI's aarch64 wheel is CUDA 13.2, its Windows wheel CPU-only (their
    torch/version.py, read with range requests). torch's own index doesn't answer: aarch64 gets
    PyPI's build only, Windows the series' Linux x86_64 list, each note saying so; the values
    are those recipes/table.yaml has by hand for 2.15, and the table loads."""
    without_release(fake, "causal-conv1d", "1.7.0")
    table = with_platforms(repo)
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    new = proposal.new[table]
    assert new.startswith(proposal.old[table])
    arm, win = new_platforms(proposal, table).values()
    assert arm == {
        "pypi_cuda": "13.2", "cuda": ["13.2"],
        "source": "PyPI JSON releases['2.15.0'] (torch-2.15.0-cp3XX-cp3XX-manylinux_2_28_aarch64"
                  ".whl); torch/version.py of torch-2.15.0-cp312-cp312-manylinux_2_28_aarch64.whl "
                  f"(2.15.0+cu132), read with HTTP range requests; by tools.refresh on {DATE}",
        "note": "Only PyPI's build is recorded: the other CUDA variants on PyTorch's own index "
                f"were not read ({NOT_READ})"}
    assert win == {
        "pypi_cuda": None, "cuda": ["13.2"],
        "source": "PyPI JSON releases['2.15.0'] (torch-2.15.0-cp3XX-cp3XX-win_amd64.whl); "
                  "torch/version.py of torch-2.15.0-cp312-cp312-win_amd64.whl (2.15.0+cpu, cuda "
                  "None), read with HTTP range requests: PyPI's Windows wheel is CPU-only; by "
                  f"tools.refresh on {DATE}",
        "note": f"cuda: not read ({NOT_READ}); the series' Linux x86_64 CUDA list, because "
                "PyTorch's binary build matrix (.github/scripts/generate_binary_build_matrix.py) "
                "builds its Windows wheels from the same CUDA list as Linux x86_64 (aarch64 has a "
                "list of its own). Check the cu<XYZ> folders of PyTorch's index before relying on "
                "one"}
    # the shape of the table's rows: one flow mapping per platform, after the row's note
    assert ('on download.pytorch.org."\n    platforms:\n      linux_aarch64: {pypi_cuda: "13.2", cuda: '
            '["13.2"], source: "PyPI JSON') in new
    assert '\n      win_amd64: {pypi_cuda: null, cuda: ["13.2"], source: "PyPI JSON' in new
    # what recipes/table.yaml says of 2.15 by hand, read from the same wheels
    by_hand = load_table().torch["2.15"].platforms
    assert {p: (e.pypi_cuda, list(e.cuda)) for p, e in by_hand.items()} == \
        {"linux_aarch64": ("13.2", ["13.2"]), "win_amd64": (None, ["13.2"])}
    loaded = parse_table(yaml.safe_load(new), table).torch["2.15"]  # tools.plan.table_platforms
    assert (loaded.pypi_cuda_on("linux_aarch64"), loaded.cuda_on("win_amd64")) == ("13.2", ("13.2",))
    assert "torch 2.15 on linux_aarch64: PyPI's wheel is CUDA 13.2; CUDA 13.2" in proposal.changes
    assert "torch 2.15 on win_amd64: PyPI's wheel is CPU-only; CUDA 13.2" in proposal.changes
    # one cp312 wheel per platform, read with range requests; 2.14's row has its block: not read
    for name in ("torch-2.15.0-cp312-cp312-manylinux_2_28_aarch64.whl",
                 "torch-2.15.0-cp312-cp312-win_amd64.whl"):
        assert 0 < fake.sent[name] < len(fake.files[name]) // 4
    assert sorted(n for n in fake.sent if platform_of(n)) == [
        "torch-2.15.0-cp312-cp312-manylinux_2_28_aarch64.whl", "torch-2.15.0-cp312-cp312-win_amd64.whl"]

def test_the_platforms_cuda_lists_come_from_torchs_index_when_it_answers(repo, fake):
    """torch's page lists 2.15.0's aarch64 and Windows +cuXYZ wheels too: each platform's list is
    its own files' (PyPI's CUDA build with them), the source names the page, no rule is
    applied; the written table plans the recipe's CUDA 13.0 cells on all three platforms."""
    without_release(fake, "causal-conv1d", "1.7.0")
    table = with_platforms(repo)
    pairs = [("2.14.1", "cu126"), ("2.14.1", "cu130"), ("2.14.1", "cu132"), ("2.15.0", "cu130"),
             ("2.15.0", "cu132")]
    fake.variant_page = variant_page(pairs) + "".join(
        f'<a href="/whl/{cu}/torch-2.15.0%2B{cu}-cp312-cp312-{tag}.whl">x</a>\n'
        for cu, tag in [("cu130", "manylinux_2_28_aarch64"), ("cu126", "win_amd64"),
                        ("cu130", "win_amd64"), ("cu132", "win_amd64")])
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    arm, win = new_platforms(proposal, table).values()
    assert (arm["pypi_cuda"], arm["cuda"], win["pypi_cuda"], win["cuda"]) == \
        ("13.2", ["13.0", "13.2"], None, ["12.6", "13.0", "13.2"])
    assert arm["source"].endswith("; cuda: https://download.pytorch.org/whl/torch/ "
                                  f"(torch-2.15.0+cuXYZ linux_aarch64 wheels); by tools.refresh on {DATE}")
    assert "note" not in arm and "note" not in win
    assert proposal.plan == ["torch 2.15: built with no recipe edit by causal_conv1d (CUDA 13.0: 5 "
                             "cells, linux_aarch64 CUDA 13.0: 5 cells, win_amd64 CUDA 13.0: 5 cells)"]
    write_all(proposal.new, proposal.old)
    load_table.cache_clear()
    written = load_table(table)
    ids = [c.id for c in plan(load_all(repo, written), written) if c.torch == "2.15"]
    assert "causal_conv1d-3.12-cu130-aarch64" in ids and "causal_conv1d-3.12-cu130-win" in ids


@pytest.mark.parametrize("case", ["no-windows-file", "cpu-only-aarch64", "no-aarch64-image"])
def test_a_platform_the_registry_has_no_cuda_build_of_plans_nothing(repo, fake, libshm, case):
    """PyPI has no Windows file of 2.15.0 / its aarch64 wheel is CPU-only / the table has no
    aarch64 builder image for its CUDA: the entry says so (or is left out, with a note), the
    table loads, and the written table plans no cell of 2.15 there (the recipe builds CUDA 13.2,
    2.15's, on the other two)."""
    without_release(fake, "causal-conv1d", "1.7.0")
    table = with_platforms(repo, ("13.0",) if case == "no-aarch64-image" else ("13.0", "13.2"))
    recipe = repo / "causal_conv1d" / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("\n# a comment", '\n  "13.2": {torch_from: "2.14", '
                                                 'reason: "torch 2.15\'s PyPI build is CUDA 13.2"}'
                                                 "\n# a comment"))
    files = fake.docs["torch"]["releases"]["2.15.0"]
    if case == "no-windows-file":
        files[:] = [f for f in files if platform_of(f["filename"]) != "win_amd64"]
    if case == "cpu-only-aarch64":
        cpu = MEMBERS["2.15.0"]["platforms"]["linux_aarch64"].replace("+cu132", "+cpu").replace(
            "cuda: Optional[str] = '13.2'", "cuda: Optional[str] = None")
        for f in files:
            if platform_of(f["filename"]) == "linux_aarch64":
                fake.files[f["filename"]] = torch_wheel("2.15.0", libshm[True], b"", cpu)
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    block = new_platforms(proposal, table)
    if case == "no-windows-file":
        missing = "win_amd64"
        assert block["win_amd64"] == {
            "pypi_cuda": None, "cuda": [],
            "source": f"PyPI JSON releases['2.15.0'] (no file name ends in win_amd64.whl); by "
                      f"tools.refresh on {DATE}",
            "note": "PyPI has no win_amd64 file of torch 2.15.0, so no win_amd64 cell of 2.15 is "
                    "planned"}
        assert block["linux_aarch64"]["cuda"] == ["13.2"]
        assert "torch 2.15 on win_amd64: PyPI has no win_amd64 file; no cell planned" in proposal.changes
    elif case == "cpu-only-aarch64":
        missing = "linux_aarch64"
        assert block["linux_aarch64"] == {
            "pypi_cuda": None, "cuda": [],
            "source": "PyPI JSON releases['2.15.0'] (torch-2.15.0-cp3XX-cp3XX-manylinux_2_28_aarch64"
                      ".whl); torch/version.py of torch-2.15.0-cp312-cp312-manylinux_2_28_aarch64"
                      ".whl (2.15.0+cpu, cuda None), read with HTTP range requests: PyPI's aarch64 "
                      f"wheel is CPU-only; by tools.refresh on {DATE}",
            "note": "PyPI's aarch64 wheel is CPU-only; which aarch64 CUDA builds PyTorch's own "
                    f"index holds for 2.15 was not read ({NOT_READ}), so no aarch64 cell of 2.15 "
                    "is planned"}
    else:
        missing = "linux_aarch64"
        assert "linux_aarch64" not in block
        (note,) = [n for n in proposal.notes if "linux_aarch64 entry is left out" in n]
        assert note == ("new torch series 2.15: its linux_aarch64 entry is left out, so no "
                        "linux_aarch64 cell of it is planned: PyPI's aarch64 wheel is CUDA 13.2 "
                        "(platforms.linux_aarch64.images has no builder image for it); add it, "
                        "then platforms.linux_aarch64 to the row")
    if case != "no-windows-file":  # Windows: the series' Linux x86_64 list
        assert (block["win_amd64"]["pypi_cuda"], block["win_amd64"]["cuda"]) == (None, ["13.2"])
    write_all(proposal.new, proposal.old)
    load_table.cache_clear()
    written = load_table(table)
    cells = [c for c in plan(load_all(repo, written), written) if c.torch == "2.15"]
    assert {c.platform for c in cells} == {"linux_x86_64", "linux_aarch64", "win_amd64"} - {missing}
    assert {c.cuda for c in cells} == {"13.2"}


def test_a_release_candidate_row_gets_its_platforms_block_when_the_final_is_out(repo, fake):
    """A candidate row (written by --rc, no platforms: block) becomes the release row on release
    day; the final's aarch64 and Windows wheels give its platforms: block."""
    without_release(fake, "causal-conv1d", "1.7.0")
    table = with_platforms(repo)
    with table.open("a") as f:
        f.write('\n  "2.15":\n    release: "2.15.0"\n    python: ["3.11", "3.12"]\n'
                '    cuda: ["13.0", "13.2"]\n    pypi_cuda: "13.2"\n    manylinux: "2_28"\n'
                '    cxx11_abi: true\n    candidate: {git: "' + recorded_git("2.15.0") + '", index: '
                '"https://download.pytorch.org/whl/test/"}\n    source: "a test row"\n')
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    assert "torch 2.15: promoted from its release candidate (2.15.0)" in proposal.agreement
    row = yaml.safe_load(proposal.new[table])["torch"]["2.15"]
    assert "candidate" not in row
    arm, win = row["platforms"].values()
    assert (arm["pypi_cuda"], arm["cuda"], win["pypi_cuda"], win["cuda"]) == \
        ("13.2", ["13.2"], None, ["13.0", "13.2"])
    parse_table(yaml.safe_load(proposal.new[table]), table)


# --------------------------------------------------------------------------- probes of a new series

MAMBA = """\
schema: 1
package: mamba_ssm
summary: "Mamba selective-scan kernels (a test copy)"
source:
  pypi: mamba-ssm
  version: "2.3.2.post1"
  sdist: mamba_ssm-2.3.2.post1.tar.gz
  sha256: "104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028"
  url: "https://files.pythonhosted.org/packages/af/48/aa7bec0efc7453fa0512276c0069c854bf684219050294266534bfef34bb/mamba_ssm-2.3.2.post1.tar.gz"
imports: [selective_scan_cuda, mamba_ssm]
python: ">=3.9"
cuda:
  "13.0": {torch_from: "2.14", reason: "torch 2.14's PyPI build is CUDA 13.0; newer series of CUDA 13.0 too"}
archs: {"*": ["80", "90"]}
arch_env: {name: MAMBA_CUDA_ARCHS, style: plain, reason: "read by the real recipe's patched setup.py"}
build:
  isolation: false
  requires:
    - {requirement: "ninja", reason: "parallel compiles"}
  job_memory_gib: 2.0
  job_memory_reason: "measured"
"""
#: torch's index as it would list 2.15.0's variants beside 2.14.1's.
VARIANTS_215 = [("2.14.1", "cu126"), ("2.14.1", "cu130"), ("2.14.1", "cu132"),
                ("2.15.0", "cu130"), ("2.15.0", "cu132")]


def variant_page(pairs) -> str:
    return "".join(f'<a href="/whl/{cu}/torch-{rel}%2B{cu}-cp312-cp312-manylinux_2_28_x86_64.whl">'
                   "x</a>\n" for rel, cu in pairs)


def test_a_recorded_new_series_gets_its_row_exclusions_and_plan_in_one_run(
        repo, fake, monkeypatch, capsys, tmp_path):
    """The recorded registry has torch 2.15.0, which the fixture table lacks. The first run names
    the cells to probe (--probe-plan); with the probe reports (causal_conv1d's compiles,
    mamba_ssm's C++ unit stops at torch's C++20 check) one run proposes the table row, an
    exclusion in mamba_ssm's recipe with the failure as its reason, and the plan of the rest;
    the summary has a verdict per recipe, and the written files plan exactly that."""
    without_release(fake, "causal-conv1d", "1.7.0")
    fake.variant_page = variant_page(VARIANTS_215)
    (repo / "mamba_ssm").mkdir()
    (repo / "mamba_ssm" / "recipe.yaml").write_text(MAMBA)
    before = snapshot(repo)
    plan_file, summary_file = tmp_path / "probes.json", tmp_path / "summary.md"
    rc, _, err = run_cli(repo, fake, monkeypatch, capsys, "--probe-plan", str(plan_file),
                         "--summary", str(summary_file))
    assert rc == 0, err
    assert snapshot(repo) == before  # without --write nothing changes
    matrix = json.loads(plan_file.read_text())
    # 2.15's PyPI build is CUDA 13.2, which neither recipe builds: each probes its CUDA 13.0 cell
    assert matrix == {"include": [
        {"package": "causal_conv1d", "series": "2.15", "cell": "causal_conv1d-3.11-cu130",
         "archs": "90"},
        {"package": "mamba_ssm", "series": "2.15", "cell": "mamba_ssm-3.11-cu130", "archs": "90"}]}
    assert ("- torch 2.15, causal_conv1d: not probed yet (`python -m tools.probe "
            "causal_conv1d-3.11-cu130 --archs 90`;") in summary_file.read_text()

    probes = tmp_path / "probes"  # as download-artifact lays them out: one folder per job
    make_reports.write_report(probes / "probe-causal_conv1d", "causal_conv1d-3.11-cu130",
                              "passed", torch="2.15.0+cu130")
    make_reports.write_report(probes / "probe-mamba_ssm", "mamba_ssm-3.11-cu130", "failed",
                              torch="2.15.0+cu130", job_memory_gib=2.0)
    rc, _, err = run_cli(repo, fake, monkeypatch, capsys, "--write", "--probes", str(probes),
                         "--summary", str(summary_file))
    assert rc == 0, err
    error = ("torch/include/ATen/ATen.h:5: #error C++20 or later compatible compiler is required "
             "to use ATen.")
    text = summary_file.read_text()
    assert ("### Probes against what is new\n\n"
            "- torch 2.15, causal_conv1d: compiles (causal_conv1d-3.11-cu130, sm_90: "
            "causal_conv1d_bwd.cu 916 s, causal_conv1d.cpp 176 s)\n"
            "- torch 2.15, mamba_ssm: fails at `csrc/selective_scan/selective_scan.cpp`: "
            f"{error} (mamba_ssm-3.11-cu130, sm_90)\n") in text
    reason = ("probe of mamba_ssm-3.11-cu130 (sm_90) on 2026-11-23 failed at "
              f"csrc/selective_scan/selective_scan.cpp: {error}; remove this entry once a patch "
              "or a new release compiles it (python -m tools.probe)")
    assert ("- torch 2.15: built with no recipe edit by causal_conv1d (CUDA 13.0: 5 cells); not "
            f"by mamba_ssm (excluded for CUDA 13.0: {reason}; it builds no CUDA 13.2 wheels)") \
        in text
    assert "- mamba_ssm: excludes torch 2.15 for CUDA 13.0, whose probe fails at" in text
    # written: the table's new row, mamba_ssm's exclusion; causal_conv1d untouched
    table = load_table(repo / "table.yaml")
    assert table.torch["2.15"].cuda == ("13.0", "13.2")
    assert (repo / "causal_conv1d" / "recipe.yaml").read_bytes() == \
        before["causal_conv1d/recipe.yaml"]
    mamba = (repo / "mamba_ssm" / "recipe.yaml").read_text()
    assert mamba.startswith(MAMBA)
    assert yaml.safe_load(mamba)["exclude"] == [{"torch": "2.15", "cuda": "13.0", "reason": reason}]
    ids = [c.id for c in plan(load_all(repo, table), table) if c.torch == "2.15"]
    assert ids == [f"causal_conv1d-3.{m}-cu130" for m in (11, 12, 13, 14, 15)]


def test_probes_of_a_run_without_anything_new_say_nothing(repo, fake, tmp_path):
    without_release(fake, "torch", "2.15.0")
    without_release(fake, "causal-conv1d", "1.7.0")
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE, probes=tmp_path)
    assert (proposal.targets, proposal.verdicts) == ([], [])
    assert "Probes" not in summary(proposal)


# --------------------------------------------------------------------------- release candidates


def candidate_page(release: str, cudas: list[str]) -> str:
    """The test index's page as it lists a candidate: its plain builds (the recorded PyPI file
    names, served by the fake's file host) and its +cuXYZ builds (never read)."""
    plain = [f["filename"] for f in RECORDED["torch"]["releases"][release] if "linux" in f["filename"]]
    links = [f'<a href="../../../files/{n}#sha256=0">{n}</a>' for n in plain]
    links += [f'<a href="/whl/test/{cu}/torch-{release}%2B{cu}-cp312-cp312-manylinux_2_28_x86_64.whl">'
              f"torch-{release}+{cu}</a>" for cu in cudas]
    return "\n".join(links)


GIT_215 = "git_version = '"  # torch/version.py's line; the recorded 2.15.0 names its commit


def recorded_git(release: str) -> str:
    line = next(ln for ln in MEMBERS[release]["version_py"].splitlines() if ln.startswith(GIT_215))
    return line.split("'")[1]


def test_a_release_candidate_gets_a_row_into_the_pre_release_index_and_the_final_promotes_it(
        repo, fake, monkeypatch, capsys, tmp_path):
    """Before torch 2.15.0's release day: PyPI has 2.14.1 only, the test index the 2.15.0
    candidate (the recorded 2.15.0 wheel, built from the commit the final was). --rc proposes its
    row, cited, with the candidate's commit; the written table plans its cells apart, into the
    pre-release index, torch from the test index; the plan names the cell to probe ahead of the
    release. The same candidate again changes nothing. On release day the final on PyPI turns the
    row into the release row, and the series' cells are the ordinary ones."""
    without_release(fake, "causal-conv1d", "1.7.0")
    final = fake.docs["torch"]["releases"].pop("2.15.0")
    fake.test_page = candidate_page("2.15.0", ["cu130", "cu132"])
    summary_file, plan_file = tmp_path / "summary.md", tmp_path / "probes.json"
    rc, _, err = run_cli(repo, fake, monkeypatch, capsys, "--rc", "--write", "--summary",
                         str(summary_file), "--probe-plan", str(plan_file))
    assert rc == 0, err
    git = recorded_git("2.15.0")
    row = yaml.safe_load((repo / "table.yaml").read_text())["torch"]["2.15"]
    assert row["candidate"] == {"git": git, "index": f"{fake.base}/whl/test/"}
    assert (row["release"], row["cuda"], row["pypi_cuda"]) == ("2.15.0", ["13.0", "13.2"], "13.2")
    assert row["source"].startswith(
        f"release candidate on PyTorch's test index: python: {fake.base}/whl/test/torch/ "
        "(torch-2.15.0 x86_64 Linux file names); pypi_cuda: wheel METADATA")
    assert f"git: torch/version.py git_version {git}" in row["source"]
    text = summary_file.read_text()
    assert (f"- torch 2.15: release candidate 2.15.0 (git {git[:7]}, Python 3.11, 3.12, 3.13, "
            "3.14, 3.15, CUDA 13.0, 13.2; its cells build into the pre-release index only)") in text
    assert ("- torch 2.15 (release candidate: into the pre-release index only): built with no "
            "recipe edit by causal_conv1d (CUDA 13.0: 5 cells)") in text
    table = load_table(repo / "table.yaml")
    cells = [c for c in plan(load_all(repo, table), table) if c.torch == "2.15"]
    assert [c.id for c in cells] == [f"causal_conv1d-3.{m}-cu130-torch2.15rc" for m in range(11, 16)]
    assert {p for c in cells for p in c.index_paths} == {"pre/cu130/torch2.15"}
    assert torch_index(cells[0], table) == f"{fake.base}/whl/test/cu130"
    assert json.loads(plan_file.read_text())["include"] == [
        {"package": "causal_conv1d", "series": "2.15", "cell": "causal_conv1d-3.11-cu130-torch2.15rc",
         "archs": "90"}]

    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE, rc=True)
    assert proposal.new == {}
    assert f"torch 2.15: release candidate {git[:7]} agrees (2.15.0)" in proposal.agreement
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)  # without --rc: said
    assert (f"torch 2.15: a release candidate (git {git[:7]}); PyPI has no final yet (--rc reads "
            "the test index)") in proposal.agreement

    fake.docs["torch"]["releases"]["2.15.0"] = final  # release day
    rc, _, err = run_cli(repo, fake, monkeypatch, capsys, "--write", "--summary", str(summary_file))
    assert rc == 0, err
    row = yaml.safe_load((repo / "table.yaml").read_text())["torch"]["2.15"]
    assert "candidate" not in row
    assert row["source"].startswith("python: PyPI JSON releases['2.15.0']")
    assert row["source"].endswith(f"; was the release candidate git {git[:7]} until then")
    assert (f"- torch 2.15: the final 2.15.0 is on PyPI: the release candidate row (git "
            f"{git[:7]}) becomes the release row;") in summary_file.read_text()
    load_table.cache_clear()  # the file changed under the same path
    table = load_table(repo / "table.yaml")
    cells = [c for c in plan(load_all(repo, table), table) if c.torch == "2.15"]
    assert [c.id for c in cells] == [f"causal_conv1d-3.{m}-cu130" for m in range(11, 16)]
    assert {p for c in cells for p in c.index_paths} == {"cu130/torch2.15"}


def test_a_release_candidate_whose_wheel_cant_be_read_stops_the_refresh(repo, fake, monkeypatch,
                                                                        capsys):
    without_release(fake, "causal-conv1d", "1.7.0")
    del fake.docs["torch"]["releases"]["2.15.0"]
    fake.test_page = candidate_page("2.15.0", ["cu132"])
    for f in RECORDED["torch"]["releases"]["2.15.0"]:
        fake.files[f["filename"]] = b"not a wheel"
    before = snapshot(repo)
    rc, out, err = run_cli(repo, fake, monkeypatch, capsys, "--rc", "--write")
    assert rc == RegistryError.exit_code and out == ""
    assert f'{repo / "table.yaml"}: torch."2.15": the release candidate\'s wheel could not be read: ' \
           f"reading {fake.base}/files/torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl with " \
           "range requests failed" in err
    assert "fix: nothing was written; run again when the test index serves the wheel, or run " \
           "the refresh without --rc" in err
    assert snapshot(repo) == before
    # only +cuXYZ builds: no plain wheel to read the PyPI build's CUDA from
    fake.test_page = "\n".join(ln for ln in candidate_page("2.15.0", ["cu132"]).splitlines()
                                if "%2B" in ln)
    rc, _, err = run_cli(repo, fake, monkeypatch, capsys, "--rc", "--write")
    assert rc == RegistryError.exit_code
    assert 'torch."2.15": ' in err and "no plain x86_64 wheel (the PyPI build)" in err
    assert snapshot(repo) == before


def test_a_test_index_that_does_not_answer_is_said(repo, fake):
    without_release(fake, "causal-conv1d", "1.7.0")
    without_release(fake, "torch", "2.15.0")
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE, rc=True)  # no page: 404
    assert proposal.new == {}
    assert any(n.startswith("PyTorch's test index could not be read (") and
               n.endswith("): no release candidate was looked for") for n in proposal.notes)


# --------------------------------------------------------------------------- bad input


#: torch 2.13 in the fixture table: a row like 2.14's, for a recipe whose range starts after it.
ROW_213 = """  "2.13":
    release: "2.13.0"
    python: ["3.10", "3.11", "3.12", "3.13", "3.14"]
    cuda: ["12.6", "13.0"]
    pypi_cuda: "13.0"
    manylinux: "2_28"
    cxx11_abi: true
    source: "a test row"
"""


@pytest.mark.parametrize("change,row,expect", [
    # a range that includes no series the table knows
    (('torch_from: "2.14",', 'torch_from: "2.16",'), "",
     ["cuda.13.0.torch_from: torch '2.16' is not in the compatibility table; the table's newest "
      "is 2.14, so a range from it includes no series the table knows",
      "fix: use one of 2.14, or add the series to the table first"]),
    # a range that excludes a series the recipe's patches are written for
    (("upstream: \"not submitted\"}", "upstream: \"not submitted\", torch_from: \"2.13\"}"),
     ROW_213,
     ["patches[0].torch_from: 0001-Read-arch-list-from-environment.patch is written for torch "
      "2.13, but the recipe builds no cell of torch 2.13 (its CUDA 13.0 range is torch 2.14 and "
      "newer)", "fix: widen the range or remove the exclusion so that 2.13 is built, or, if the "
      "patch is for other series now, set torch_from to one the recipe builds (2.14)"]),
], ids=["range-past-the-table", "patch-for-a-series-outside-the-range"])
def test_a_bad_recipe_stops_the_refresh_before_anything_is_written(repo, fake, monkeypatch,
                                                                   capsys, change, row, expect):
    table = repo / "table.yaml"
    table.write_text(table.read_text().replace('  "2.14":\n', row + '  "2.14":\n'))
    recipe_file = repo / "causal_conv1d" / "recipe.yaml"
    text = recipe_file.read_text()
    assert change[0] in text
    recipe_file.write_text(text.replace(change[0], change[1]))
    before = snapshot(repo)
    rc, out, err = run_cli(repo, fake, monkeypatch, capsys, "--write")
    assert rc == RecipeError.exit_code and out == ""
    assert f"{recipe_file}: 1 problem:" in err  # the file
    for part in expect:  # the field, the rule and the fix
        assert part in err, err
    assert snapshot(repo) == before


# --------------------------------------------------------------------------- recipes


def test_a_new_recipe_release_is_proposed_with_its_patch_applied(repo, fake, monkeypatch, capsys):
    without_release(fake, "torch", "2.15.0")
    fake.files["causal_conv1d-1.7.0.tar.gz"] = sdist_bytes("1.7.0")
    rc, diff, err = run_cli(repo, fake, monkeypatch, capsys)
    assert rc == 0, err
    sha = hashlib.sha256(fake.files["causal_conv1d-1.7.0.tar.gz"]).hexdigest()
    url = RECORDED["causal-conv1d"]["releases"]["1.7.0"][0]["url"]
    assert "--- a/recipes/causal_conv1d/recipe.yaml\n+++ b/recipes/causal_conv1d/recipe.yaml" in diff
    assert ('+  version: "1.7.0"  # PyPI JSON releases[\'1.7.0\'] (sdist, sha256, URL), read by '
            f'tools.refresh on {DATE}; patches 0001-Read-arch-list-from-environment.patch apply') in diff
    assert f'+  sha256: "{sha}"' in diff
    assert f'+  url: "{url}"' in diff  # the URL the registry states
    assert "table.yaml" not in diff
    assert "causal_conv1d: 1.6.1 -> 1.7.0" in err
    # Without --write nothing changed; with it, the recipe loads and keeps its comment.
    assert 'version: "1.6.1"' in (repo / "causal_conv1d" / "recipe.yaml").read_text()
    rc, _, err = run_cli(repo, fake, monkeypatch, capsys, "--write")
    assert rc == 0, err
    text = (repo / "causal_conv1d" / "recipe.yaml").read_text()
    assert "# a comment the refresh must keep\n" in text
    (recipe,) = load_all(repo, load_table(repo / "table.yaml"))
    assert (recipe.source.version, recipe.source.sha256) == ("1.7.0", sha)
    assert run_cli(repo, fake, monkeypatch, capsys)[1] == ""  # a second run proposes nothing more


def test_a_new_release_whose_patch_no_longer_applies_is_not_proposed(repo, fake):
    without_release(fake, "torch", "2.15.0")
    fake.files["causal_conv1d-1.7.0.tar.gz"] = sdist_bytes("1.7.0", SETUP_PY_REWRITTEN)
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    assert proposal.new == {}
    (note,) = [n for n in proposal.notes if n.startswith("causal_conv1d")]
    assert note.startswith("causal_conv1d: causal-conv1d 1.7.0 is out (the recipe builds 1.6.1), "
                           "but the recipe's patches do not apply to its sdist: "
                           "0001-Read-arch-list-from-environment.patch does not apply to "
                           "causal_conv1d-1.7.0: Hunk #1 FAILED at 1 in setup.py")
    assert note.endswith("refresh the patch against 1.7.0, then bump the recipe")


def test_a_release_without_an_sdist_is_named_not_guessed(repo, fake):
    without_release(fake, "torch", "2.15.0")
    wheel = "causal_conv1d-1.7.0-cp312-cp312-linux_x86_64.whl"
    fake.files[wheel] = b"PK\x05\x06" + b"\0" * 18
    fake.docs["causal-conv1d"]["releases"]["1.7.0"] = [
        {"filename": wheel, "packagetype": "bdist_wheel", "yanked": False, "url": "",
         "size": 0, "digests": {}, "requires_python": ">=3.9"}]
    proposal = propose(fake.registry(), recipes_dir=repo, date=DATE)
    assert proposal.new == {}
    assert ("causal_conv1d: causal-conv1d 1.7.0 is out (the recipe builds 1.6.1), but it has no "
            "sdist on PyPI (files: linux_x86_64.whl)") in " ".join(proposal.notes)


def test_a_registry_error_mid_run_leaves_every_file_untouched(repo, fake, monkeypatch, capsys):
    """torch is read (and would add a row), then the recipe's project answers 500."""
    fake.fail.add("/pypi/causal-conv1d/json")
    before = snapshot(repo)
    rc, out, err = run_cli(repo, fake, monkeypatch, capsys, "--write")
    assert rc == RegistryError.exit_code
    assert "registry error: reading http://127.0.0.1:" in err
    assert "/pypi/causal-conv1d/json failed: HTTP Error 500" in err
    assert "nothing was written" in err and out == ""
    assert snapshot(repo) == before  # no file changed, no temporary file left


def test_write_all_puts_back_what_it_renamed_when_a_rename_fails(tmp_path, monkeypatch):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("a: 1\n")
    b.write_text("b: 1\n")
    real = os.replace

    def flaky(src, dst):
        if Path(dst) == b:
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(CuwheelsError, match="every file is as it was"):
        write_all({a: "a: 2\n", b: "b: 2\n"}, {a: "a: 1\n", b: "b: 1\n"})
    assert (a.read_text(), b.read_text()) == ("a: 1\n", "b: 1\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml"]


# --------------------------------------------------------------------------- the live registry


def _pypi_answers() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/pypi/torch/json", timeout=15) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.mark.network
def test_live_registry_agrees_with_the_table():
    """Every torch row of recipes/table.yaml is what the registry says, unless PyPI now has a
    newer release of the series (then that is the proposal); causal-conv1d is at 1.7.0 or later
    in the recipe or in the proposal."""
    if not _pypi_answers():
        pytest.skip("https://pypi.org/pypi/torch/json does not answer from here")
    table = load_table()
    proposal = propose(Registry(timeout=60), recipes_dir=ROOT / "recipes")
    facts = {f.series: f for f in proposal.torch}
    for series, row in table.torch.items():
        f = facts[series]
        if Version(f.release) > Version(row.release):
            assert f"torch {series}: release {row.release} -> {f.release}" in " ".join(proposal.changes)
            continue
        assert (f.release, f.python, f.pypi_cuda, f.manylinux, f.cxx11_abi) == (
            row.release, list(row.python), row.pypi_cuda, row.manylinux, row.cxx11_abi), series
        assert f"torch {series}: agrees ({row.release})" in proposal.agreement
    conv = next(r for r in load_all() if r.package == "causal_conv1d")
    proposed = [c for c in proposal.changes if c.startswith(f"causal_conv1d: {conv.source.version} -> ")]
    version = proposed[0].split(" -> ")[1].split()[0] if proposed else conv.source.version
    assert Version(version) >= Version("1.7.0"), (conv.source.version, proposal.notes)


# --------------------------------------------------------------------------- probes of a series the table has


def test_reprobe_probes_a_series_the_table_has_as_if_it_were_new(
        repo, fake, monkeypatch, capsys, tmp_path):
    """Nothing is new in the registry (no torch 2.15.0), yet --reprobe 2.14 names the cell of
    every recipe that builds 2.14 and, with its probe report, the summary's verdict: where the
    recipes stand against the newest series the table has."""
    without_release(fake, "torch", "2.15.0")
    without_release(fake, "causal-conv1d", "1.7.0")
    plan_file, summary_file = tmp_path / "probes.json", tmp_path / "summary.md"
    rc, _, err = run_cli(repo, fake, monkeypatch, capsys, "--reprobe", "2.14",
                         "--probe-plan", str(plan_file))
    assert rc == 0, err
    assert json.loads(plan_file.read_text()) == {"include": [
        {"package": "causal_conv1d", "series": "2.14", "cell": "causal_conv1d-3.10-cu130",
         "archs": "90"}]}
    probes = tmp_path / "probes"
    make_reports.write_report(probes / "probe-causal_conv1d", "causal_conv1d-3.10-cu130",
                              "passed", torch="2.14.1+cu130")
    before = snapshot(repo)
    rc, _, err = run_cli(repo, fake, monkeypatch, capsys, "--reprobe", "2.14", "--probes",
                         str(probes), "--summary", str(summary_file))
    assert rc == 0, err
    assert ("- torch 2.14, causal_conv1d: compiles (causal_conv1d-3.10-cu130, sm_90: "
            "causal_conv1d_bwd.cu 916 s, causal_conv1d.cpp 176 s)") in summary_file.read_text()
    assert snapshot(repo) == before


def test_reprobe_of_a_series_the_table_lacks_is_refused_before_the_registry_is_read(
        repo, fake, monkeypatch, capsys):
    before = snapshot(repo)
    rc, _, err = run_cli(repo, fake, monkeypatch, capsys, "--reprobe", "2.99")
    assert rc == TableError.exit_code
    assert "--reprobe 2.99: torch '2.99' is not a series of" in err
    assert "(it has 2.14)" in err and "fix: name a series the table has" in err
    assert snapshot(repo) == before


# --------------------------------------------------------------------------- progress


def test_reading_the_registry_shows_progress_on_a_terminal_and_in_a_log(repo, fake):
    """Each read of the registry counts: a live line on a terminal (a real pty), a plain line
    per ``every`` reads in a log."""
    import pty
    from test_progress import drain_pty
    from tools.core.progress import StepCounter

    log = io.StringIO()
    registry = fake.registry()
    registry.progress = StepCounter("reading the registry", stream=log, every=1)
    propose(registry, recipes_dir=repo, date=DATE)
    registry.progress.close()
    lines = log.getvalue().splitlines()
    assert len(lines) >= 3 and lines[0].startswith("reading the registry: 1 (")
    assert [int(x.split(": ")[1].split()[0]) for x in lines] == list(range(1, len(lines) + 1))

    master, slave = pty.openpty()
    got = bytearray()
    reader = drain_pty(master, got)
    with os.fdopen(slave, "w") as tty:
        registry = fake.registry()
        registry.progress = StepCounter("reading the registry", stream=tty)
        propose(registry, recipes_dir=repo, date=DATE)
        registry.progress.close()
    reader.join(timeout=10)
    os.close(master)
    text = got.decode()
    assert text.startswith("\rreading the registry: 1 torch/json") and "\n" not in text
    assert text.endswith("\r") and f"reading the registry: {len(lines)}" not in text.split("\r")[-1]


# --------------------------------------------------------------------------- kernel records


def test_a_new_series_makes_its_kernel_record_due_and_the_measurement_joins_it(
        repo, fake, monkeypatch, capsys, tmp_path):
    """causal_conv1d's kernels are recorded as shared by torch 2.14 and 2.13 for CUDA 13.0. The
    registry's torch 2.15 (a CUDA 13.0 build) joins the table: the record lacks 2.15, so
    --kernel-plan names the job that measures it, on the runner file's label; the job's
    kernels.json, given to --kernel-records with --write, puts 2.15 into the record in the same
    change, and the summary says so."""
    from tools.plan.groups import sources_digest
    without_release(fake, "causal-conv1d", "1.7.0")
    fake.variant_page = variant_page(VARIANTS_215)
    table = load_table(repo / "table.yaml")
    recipe, = load_all(repo, table)
    record = {"platform": "linux_x86_64", "torch": ["2.14", "2.13"], "digest": "d" * 64,
              "sources": sources_digest(recipe), "units": 1, "read_with": "by hand"}
    (repo / "causal_conv1d" / "units.yaml").write_text(yaml.safe_dump({
        "schema": 1, "version": "1.6.1", "units": {"cuda": ["csrc/a.cu"]},
        "cost": {"cuda": {"seconds": 10, "reason": "stated for the test"}},
        "kernels": {"13.0": record}}, sort_keys=False))
    (repo / "runners.yaml").write_text((ROOT / "recipes" / "runners.yaml").read_text())
    plan_file, summary_file = tmp_path / "kernels.json", tmp_path / "summary.md"
    rc, _, err = run_cli(repo, fake, monkeypatch, capsys, "--write", "--kernel-plan",
                         str(plan_file), "--summary", str(summary_file))
    assert rc == 0, err
    entry, = json.loads(plan_file.read_text())["include"]
    assert (entry["package"], entry["cuda"], entry["platform"], entry["stand_in"]) == (
        "causal_conv1d", "13.0", "linux_x86_64", "")
    assert entry["runner"] == "ubuntu-24.04" and entry["cell"].startswith("causal_conv1d-3.")
    text = summary_file.read_text()
    assert "### Kernel records" in text and "torch 2.15 not measured" in text

    measured = tmp_path / "artifacts" / f"kernels-{entry['cell']}" / "kernels"
    measured.mkdir(parents=True)
    span = {**record, "torch": ["2.15", "2.14"], "read_with": "the job"}
    (measured / "kernels.json").write_text(json.dumps({"cell": entry["cell"], "span": span}))
    rc, _, err = run_cli(repo, fake, monkeypatch, capsys, "--write", "--kernel-records",
                         str(tmp_path / "artifacts"), "--kernel-plan", str(plan_file),
                         "--summary", str(summary_file))
    assert rc == 0, err
    units = yaml.safe_load((repo / "causal_conv1d" / "units.yaml").read_text())
    assert units["kernels"]["13.0"]["torch"] == ["2.15", "2.14"]
    text = summary_file.read_text()
    assert ("- causal_conv1d CUDA 13.0 on linux_x86_64: 1 CUDA units alike in torch 2.15, 2.14: "
            "one kernel group") in text
    assert "- every kernel record is current" in text
    assert json.loads(plan_file.read_text()) == {"include": []}
