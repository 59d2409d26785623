"""Hostile build inputs against the real code: sdists, recipes, tables and downloads, made by
``tests/fixtures/hostile/make_inputs.py`` the way an attacker would make them.

Each input runs in a process of its own (the real command where there is one: ``python -m
tools.recipe``, ``python -m tools.matrix``; the source step and the registry client otherwise)
under an address-space limit, and each case asserts the named error and its exit code, that
nothing outside the work folder changed (a file beside it keeps its bytes; nothing half-written
is left behind), and bounded time and memory.
"""

from __future__ import annotations

import os
import stat
import sys
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from bounded import Run, run_bounded

from tests.fixtures.hostile import make_inputs
from tools import ROOT
from tools.core.errors import RecipeError, RegistryError, SourceError, TableError

#: Address space each run may have: a bomb that got through would need gigabytes.
ADDRESS_SPACE = 1 << 30
#: Resident memory a run may reach (a run that refuses early stays near 20-100 MiB).
MAX_RSS_MIB = 256
#: Seconds a run may take (the slowest refusal, 50,001 members, takes about a second).
MAX_SECONDS = 20
#: The deadline the download cases give (their servers never finish).
DEADLINE = 1.5


def run_python(*args: str) -> Run:
    """``python ARGS`` from the repository root, with ``ADDRESS_SPACE`` bytes of address space,
    killed after ``MAX_SECONDS`` seconds."""
    return run_bounded([sys.executable, *args], seconds=MAX_SECONDS, address_space=ADDRESS_SPACE,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})


def assert_refused(run: Run, error: type, expect: str, limit_s: float = MAX_SECONDS) -> None:
    """The run exited with ``error``'s code, named ``expect``, with no traceback, in time and
    memory."""
    assert run.returncode == error.exit_code, f"exit {run.returncode}:\n{run.stderr[-3000:]}"
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert expect in run.stderr, f"{expect!r} not in:\n{run.stderr[-3000:]}"
    assert run.seconds < limit_s, f"took {run.seconds:.1f} s"
    assert run.peak_rss_mib < MAX_RSS_MIB, f"used {run.peak_rss_mib:.0f} MiB"


def snapshot(folder: Path, leave_out: tuple[Path, ...] = ()) -> dict[str, tuple]:
    """Every path below ``folder`` (links not followed, FIFOs not opened) with its kind, mode
    and bytes or target, but those in ``leave_out``."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if any(path == skip or skip in path.parents for skip in leave_out):
            continue
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            found[str(path)] = ("link", os.readlink(path))
        elif stat.S_ISREG(st.st_mode):
            found[str(path)] = ("file", st.st_mode, path.read_bytes())
        else:
            found[str(path)] = (stat.S_IFMT(st.st_mode), st.st_mode)
    return found


# --------------------------------------------------------------------------- sdists

#: What the source step says about each hostile sdist (SourceError, exit 5).
SDIST_REFUSALS = {
    "absolute-member": "has an absolute path",
    "dotdot-member": "contains '..'",
    "symlink-out": "points outside the source tree",
    "symlink-absolute": "points outside the source tree",
    "symlink-then-write-through": "points outside the source tree",
    "symlink-inside-then-write-through": "lies below 'causal_conv1d-1.7.0/alias', a symbolic link",
    "symlink-chain-dotdot": "goes through the link 'causal_conv1d-1.7.0/here'",
    "symlink-to-symlink": "links to links are refused",
    "symlink-then-same-name-file": "appears twice (symbolic link, then file)",
    "pathmax-chain": "characters long (at most 1024)",
    "hardlink-out": "points outside the source tree",
    "hardlink-dotdot": "points outside the source tree",
    "hardlink-to-symlink": "not to a file before it in the archive",
    "char-device": "is a device or FIFO",
    "block-device": "is a device or FIFO",
    "fifo": "is a device or FIFO",
    "duplicate-file": "appears twice (file, then file)",
    "file-then-folder-below": "lies below 'causal_conv1d-1.7.0/setup.py', a file",
    "zip-bomb": "extracts to more than 1073741824 bytes",
    "many-bombs": "extracts to more than 1073741824 bytes",
    "member-flood": "more than 50000 members",
    "longname-bomb": "a tar header asks to read 1073741824 bytes at once",
    "pax-bomb": "a tar header asks to read 536870912 bytes at once",
    "pax-flood": "more than 67108864 bytes of tar headers",
    "deep-member": "folders deep (at most 64)",
    "long-member-name": "characters long (at most 1024)",
    "two-top-folders": "expected one top-level directory, found causal_conv1d-1.7.0, other-1.0",
    "top-is-a-link": "found causal_conv1d-1.7.0, a symbolic link",
    "not-gzip": "is not a readable .tar.gz",
    "truncated": "is not a readable .tar.gz",
}

#: The source step as a contributor's recipe reaches it: the recipe pins the hostile sdist's own
#: sha256, and ``prepare_source`` copies, verifies, extracts and patches it.
PREPARE = """
import dataclasses, sys
from pathlib import Path
from tools.core.digest import sha256_file
from tools.core.errors import cli
from tools.pipeline.source import prepare_source
from tools.plan.recipes.model import load_recipe
archive, work, folder = map(Path, sys.argv[1:4])
recipe = load_recipe(folder)
recipe = dataclasses.replace(recipe, source=dataclasses.replace(
    recipe.source, sha256=sha256_file(archive)))
sys.exit(cli(lambda: print(prepare_source(recipe, work, sdist=archive).tree))())
"""


@pytest.fixture(scope="module")
def sdists(tmp_path_factory) -> dict[str, Path]:
    return make_inputs.make_sdists(tmp_path_factory.mktemp("hostile-sdists"))


def test_every_hostile_sdist_has_its_expectation():
    assert set(make_inputs.SDISTS) == set(SDIST_REFUSALS)


@pytest.mark.parametrize("name", sorted(SDIST_REFUSALS))
def test_hostile_sdist_is_refused_and_nothing_outside_changes(sdists, name):
    archive = sdists[name]
    case = archive.parent
    work = case / "work"
    extracted = work / "src"
    outside = work / "outside.txt"  # beside the extraction folder, where escapes aim
    work.mkdir()
    (case / "outside.txt").rename(outside)
    before = snapshot(case, leave_out=(work / "sdist",))
    run = run_python("-c", PREPARE, str(archive), str(work), str(make_inputs.BASE_RECIPE))
    assert_refused(run, SourceError, SDIST_REFUSALS[name])
    assert outside.read_text() == make_inputs.OUTSIDE_TEXT
    assert not extracted.exists(), "a refused sdist leaves nothing half-extracted"
    assert snapshot(case, leave_out=(work / "sdist",)) == before


def test_the_chain_sdist_escapes_tarfiles_own_filter_here(tmp_path):
    """The PATH_MAX chain is the real attack: this Python's ``filter="data"`` lets it write
    outside (a Python that refuses it itself skips this test)."""
    outside = tmp_path / "outside.txt"
    outside.write_text(make_inputs.OUTSIDE_TEXT)
    make_inputs.pathmax_chain(tmp_path / "chain.tar.gz", outside)
    try:
        with tarfile.open(tmp_path / "chain.tar.gz") as tar:
            tar.extractall(tmp_path / "src", filter="data")
    except tarfile.TarError:
        pytest.skip(f"this Python ({sys.version.split()[0]}) refuses the chain itself")
    assert outside.read_text() != make_inputs.OUTSIDE_TEXT


# --------------------------------------------------------------------------- recipes

#: What ``python -m tools.recipe FOLDER`` says about each hostile recipe (RecipeError).
RECIPE_REFUSALS = {
    "sdist-absolute": "source.sdist: '/tmp/cuwheels-victim/causal_conv1d-1.7.0.tar.gz' is not a plain file name",
    "sdist-dotdot": "source.sdist: '../../causal_conv1d-1.7.0.tar.gz' is not a plain file name",
    "pypi-path": "source.pypi: '../../causal-conv1d' is not a PyPI project name",
    "version-path": "source.version: '1.7.0/../../x' is not a PEP 440 version",
    "url-userinfo": "has a user name or password before '@': the download would go to '127.0.0.1'",
    "url-http": "source.url: must be an https URL",
    "url-port": "source.url: 'https://files.pythonhosted.org:8443/causal_conv1d-1.7.0.tar.gz' names a port",
    "url-fragment": "has a query or fragment",
    "url-file": "source.url: must be an https URL",
    "url-bad-ipv6": "is not a URL (Invalid IPv6 URL)",
    "requirement-index-option": "'--extra-index-url=http://127.0.0.1:8443/simple' is not a PEP 508 requirement",
    "requirement-option-after": "is not a PEP 508 requirement",
    "requirement-newline": "requirement: contains a newline or another control character",
    "requirement-url": "names a URL: build requirements come from the registry",
    "requirement-torch": "torch comes from the cell, not build.requires",
    "env-ld-preload": "env.LD_PRELOAD: LD_PRELOAD is not the package's to set: the dynamic loader",
    "env-ld-library-path": "env.LD_LIBRARY_PATH: LD_LIBRARY_PATH is not the package's to set",
    "env-path": "env.PATH: PATH is not a package's build variable: a one-word name",
    "env-pythonpath": "env.PYTHONPATH: PYTHONPATH is not the package's to set",
    "env-pip-index": "env.PIP_INDEX_URL: PIP_INDEX_URL is not the package's to set",
    "env-uv-index": "env.UV_INDEX_URL: UV_INDEX_URL is not the package's to set",
    "env-pytorch-nvcc": "env.PYTORCH_NVCC: PYTORCH_NVCC is not the package's to set",
    "env-cc": "env.CC: CC is not a package's build variable",
    "env-newline": "env.CAUSAL_CONV1D_FORCE_BUILD.value: contains a newline",
    "env-lowercase": "'ld_preload' is not an UPPER_CASE environment variable name",
    "env-value-huge": "env.CAUSAL_CONV1D_FORCE_BUILD.value: is 500000 characters long (at most 4096)",
    "env-reserved": "env.MAX_JOBS: MAX_JOBS is set by the pipeline",
    "arch-env-ld-preload": "arch_env.name: LD_PRELOAD is not the package's to set",
    "memory-nan": "build.job_memory_gib: nan is not a size of one compile job",
    "memory-inf": "build.job_memory_gib: inf is not a size of one compile job",
    "memory-string": "build.job_memory_gib: must be an integer or a number, got a string ('3.5')",
    "memory-huge": "build.job_memory_gib: 1000000000.0 is not a size of one compile job",
    "memory-negative": "build.job_memory_gib: -1 is not a size of one compile job",
    "threads-huge": "build.nvcc_threads: 1000000000 is not a thread count",
    "threads-zero": "build.nvcc_threads: 0 is not a thread count",
    "isolation-string": "build.isolation: must be true or false, got a string ('no')",
    "requires-string": "build.requires: must be a list, got a string ('ninja')",
    "build-number-huge": "build.number: 1000000000000000000000000000000 is not a build number",
    "probe-unit-outside": "probe.units[0]: '../../../etc/passwd' is not a path inside the source tree",
    "patch-path": "patches[0].file: '../../0001-evil.patch' is not named NNNN-Subject.patch",
    "check-path": "check.file: '../../evil.py' is not a Python file name in the recipe folder",
    "depends-path": "depends[0].package: '../evil' is not a recipe folder name",
    "duplicate-sha256": "the key 'sha256' is given twice",
    "duplicate-top-key": "the key 'package' is given twice",
    "alias-bomb": "an anchor (&a0) is not allowed here",
    "anchor-and-alias": "an anchor (&i) is not allowed here",
    "merge-key": "a merge key (<<) is not allowed here",
    "python-tag": "could not determine a constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system'",
    "deep-nesting": "nested more than 32 levels deep",
    "huge-int": "Exceeds the limit (4300 digits) for integer string conversion",
    "control-character": "not valid YAML: unacceptable character #x0000",
    "not-utf8": "not UTF-8 text (byte",
    "huge-file": "larger than 1048576 bytes",
    "empty-file": "(top level): must be a mapping, got nothing (null)",
    "top-level-list": "(top level): must be a mapping, got a list",
    "link-to-dev-zero": "is not a regular file but a device, FIFO or socket",
    "fifo": "is not a regular file but a device, FIFO or socket",
    "folder": "is not a regular file but a folder",
}


@pytest.fixture(scope="module")
def recipes(tmp_path_factory) -> dict[str, Path]:
    return make_inputs.make_recipes(tmp_path_factory.mktemp("hostile-recipes"))


def test_every_hostile_recipe_has_its_expectation():
    assert set(make_inputs.RECIPE_VALUES) | set(make_inputs.RECIPE_FILES) == set(RECIPE_REFUSALS)


@pytest.mark.parametrize("name", sorted(RECIPE_REFUSALS))
def test_hostile_recipe_is_a_named_recipe_error(recipes, name):
    folder = recipes[name]
    outside = folder.parent / "outside.txt"
    outside.write_text(make_inputs.OUTSIDE_TEXT)
    before = snapshot(folder.parent)
    run = run_python("-m", "tools.recipe", str(folder))
    assert_refused(run, RecipeError, RECIPE_REFUSALS[name])
    assert str(folder / "recipe.yaml") in run.stderr  # the file is named
    assert "1 of 1 recipe(s) invalid" in run.stderr
    assert len(run.stderr) < 20_000  # no message carries a hostile value whole
    assert snapshot(folder.parent) == before


def test_the_base_recipe_itself_is_valid():
    """The hostile recipes differ from a valid one by their attack alone."""
    run = run_python("-m", "tools.recipe", str(make_inputs.BASE_RECIPE))
    assert run.returncode == 0, run.stderr


def test_two_recipes_of_one_project_are_refused_by_both_commands(tmp_path):
    first, second = make_inputs.make_same_project(tmp_path)
    run = run_python("-m", "tools.recipe", str(first), str(second))
    assert_refused(run, RecipeError, "both build causal-conv1d")
    assert str(first / "recipe.yaml") in run.stderr and str(second / "recipe.yaml") in run.stderr
    run = run_python("-m", "tools.matrix", "--recipes", str(first.parent), "--format", "ids")
    assert_refused(run, RecipeError, "two recipes build the same PyPI project")
    assert run.stdout == ""


# --------------------------------------------------------------------------- tables

#: What ``python -m tools.matrix --table FILE`` says about each hostile table (TableError).
TABLE_REFUSALS = {
    "duplicate-cuda-key": "the key '12.8' is given twice",
    "alias-bomb": "an anchor (&a0) is not allowed here",
    "deep-nesting": "nested more than 32 levels deep",
    "missing-key-beside-optional": "image: required key is missing",
    "link-to-dev-zero": "is not a regular file but a device, FIFO or socket",
}


def test_every_hostile_table_has_its_expectation():
    assert set(make_inputs.TABLES) == set(TABLE_REFUSALS)


@pytest.mark.parametrize("name", sorted(TABLE_REFUSALS))
def test_hostile_table_is_a_named_table_error(tmp_path, name):
    table = make_inputs.make_tables(tmp_path / "tables", ROOT / "recipes" / "table.yaml")[name]
    (tmp_path / "recipes").mkdir()
    before = snapshot(tmp_path)
    run = run_python("-m", "tools.matrix", "--recipes", str(tmp_path / "recipes"),
                     "--table", str(table))
    assert_refused(run, TableError, TABLE_REFUSALS[name])
    assert str(table) in run.stderr and run.stdout == ""
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- downloads


class Hostile(BaseHTTPRequestHandler):
    """A server that answers too much, too slowly or elsewhere; it records every path asked."""

    asked: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's naming
        """Answer the path's attack."""
        self.asked.append(self.path)
        try:
            getattr(self, "_" + self.path.strip("/").split("/")[-1].replace("-", "_"))()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up, as it should

    def _big(self):
        self._head(200, {"Content-Length": str(3 << 20)})
        self.wfile.write(bytes(3 << 20))

    def _big_unsized(self):
        self._head(200, {})
        for _ in range(48):
            self.wfile.write(bytes(64 << 10))

    def _liar(self):
        self._head(200, {"Content-Length": str(10 << 30)})
        self.wfile.write(b"x" * 1024)

    def _drip(self):
        self._head(200, {"Content-Length": "1000000"})
        for _ in range(600):
            self.wfile.write(b"x")
            self.wfile.flush()
            time.sleep(0.05)

    def _drip_headers(self):
        self.wfile.write(b"HTTP/1.0 200 OK\r\n")
        for _ in range(600):
            self.wfile.write(b"X")
            self.wfile.flush()
            time.sleep(0.05)

    def _redirect(self):
        port = self.server.server_address[1]
        self._head(302, {"Location": f"http://localhost:{port}/sdist/big", "Content-Length": "0"})

    def _random(self):
        self._head(200, {"Content-Length": "4096"})
        self.wfile.write(os.urandom(4096))

    def _head(self, status, headers):
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()

    def log_message(self, *args):
        """Quiet: the test reads ``asked``."""


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


_FETCH = """
import dataclasses, sys
from pathlib import Path
from tools.core.errors import cli
from tools.pipeline.source import fetch_sdist
from tools.plan.recipes.model import load_recipe
url, work, base, folder, deadline = sys.argv[1:6]
recipe = load_recipe(Path(folder))
recipe = dataclasses.replace(recipe, source=dataclasses.replace(recipe.source, url=url))
sys.exit(cli(lambda: print(fetch_sdist(recipe, Path(work), origins=(base,), max_bytes=1 << 20,
                                       deadline=float(deadline), timeout=5)))())
"""
_REGISTRY = """
import sys
from pathlib import Path
from tools.core.errors import cli
from tools.upstream.registry import Registry
url, work, base, folder, deadline = sys.argv[1:6]
registry = Registry(pypi=base + "/pypi/", variants=base + "/whl/torch/", timeout=5,
                    deadline=float(deadline), max_bytes=1 << 20)
Path(work).mkdir(parents=True, exist_ok=True)
sys.exit(cli(lambda: print(registry.download(url, Path(work) / "x.tar.gz")))())
"""
CLIENTS = {"source": (_FETCH, SourceError), "registry": (_REGISTRY, RegistryError)}

#: name -> (URL, with {base} the server's http://127.0.0.1:PORT and {port} its port; what the
#: error says; whether the server may see the request at all).
DOWNLOAD_REFUSALS = {
    "too-big": ("{base}/sdist/big", "the answer is larger than 1048576 bytes", True),
    "too-big-unsized": ("{base}/sdist/big-unsized", "the answer is larger than 1048576 bytes", True),
    "content-length-lie": ("{base}/sdist/liar", "the answer is larger than 1048576 bytes", True),
    "drip-body": ("{base}/sdist/drip", f"did not finish within {DEADLINE:g} s", True),
    "drip-headers": ("{base}/sdist/drip-headers", f"did not finish within {DEADLINE:g} s", True),
    "redirect-elsewhere": ("{base}/sdist/redirect", "http://localhost:{port} is not", True),
    "userinfo": ("http://127.0.0.1:{port}@localhost:{port}/sdist/big",
                 "a URL with a user name or password", False),
    "userinfo-registry-host": ("https://files.pythonhosted.org@127.0.0.1:{port}/sdist/big",
                               "a URL with a user name or password", False),
    "other-host": ("http://localhost:{port}/sdist/big", "http://localhost:{port} is not", False),
    "other-scheme": ("https://127.0.0.1:{port}/sdist/big", "https://127.0.0.1:{port} is not", False),
    "file-url": ("file:///dev/zero", "file:// is not", False),
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("name", sorted(DOWNLOAD_REFUSALS))
def test_hostile_download_is_refused_in_time(server, tmp_path, client, name):
    code, error = CLIENTS[client]
    port = server.rsplit(":", 1)[1]
    url, expect, reaches = DOWNLOAD_REFUSALS[name]
    url, expect = url.format(base=server, port=port), expect.format(port=port)
    work = tmp_path / "work"
    (tmp_path / "outside.txt").write_text(make_inputs.OUTSIDE_TEXT)
    before = snapshot(tmp_path)
    asked = len(Hostile.asked)
    run = run_python("-c", code, url, str(work), server, str(make_inputs.BASE_RECIPE),
                     str(DEADLINE))
    assert_refused(run, error, expect, limit_s=DEADLINE + 6)
    assert not work.exists() or not any(work.iterdir()), "a refused download leaves no file"
    assert snapshot(tmp_path, leave_out=(work,)) == before
    if not reaches:
        assert len(Hostile.asked) == asked, "a refused URL was requested all the same"


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_download_within_the_bounds_goes_through(server, tmp_path, client):
    """The control: the same clients fetch a small answer from the same server (the source
    step then refuses its hash, which proves the bytes arrived)."""
    code, error = CLIENTS[client]
    run = run_python("-c", code, f"{server}/sdist/random", str(tmp_path / "work"), server,
                     str(make_inputs.BASE_RECIPE), "30")
    if client == "source":
        assert_refused(run, SourceError, "has sha256")
    else:
        assert run.returncode == 0, run.stderr
        assert (tmp_path / "work" / "x.tar.gz").stat().st_size == 4096

