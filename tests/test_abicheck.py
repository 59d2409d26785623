"""tools.abicheck: a wheel's binaries depend on no more than its recipe's ``abi`` claims.

Fast tests use real ELF files compiled here with gcc (each declares the undefined symbols a test
needs) and the committed shim lists. The network tests build the stabletiny fixture against the
registry's torch 2.13.0 and import it under torch 2.11.0 and 2.13.0, and read the real xformers
0.0.35 wheel from the registry.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import shutil
import subprocess
import threading
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tools import abicheck as abicheck_command
from tools.finish import abi
from tools.core.errors import VerifyError
from tools.plan.cells import plan
from tools.plan.recipes.model import load_all
from tools.plan.table import load_table, version_key
from tools.finish.checks import undefined_torch_symbols


# --------------------------------------------------------------------------- real ELF files

def make_so(path: Path, *, needs: tuple[str, ...] = (), exports: tuple[str, ...] = ()) -> Path:
    """Compile a shared library that needs ``needs`` (undefined) and defines ``exports``; any
    name works, mangled C++ ones included (asm labels)."""
    lines = [f'extern void need{i}(void) __asm__("{name}");' for i, name in enumerate(needs)]
    for i, name in enumerate(exports):
        lines.append(f'void export{i}(void) __asm__("{name}");\nvoid export{i}(void) {{}}')
    lines.append("void entry(void) {" + "".join(f" need{i}();" for i in range(len(needs))) + " }")
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.with_suffix(".c")
    src.write_text("\n".join(lines) + "\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(path), str(src)], check=True,
                   capture_output=True, timeout=120)
    return path


needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to make ELF files")


def write_list(root: Path, torch: str, symbols: list[str]) -> None:
    """A shim list for a made-up release (what `extract` writes, with a test source)."""
    abi.write_shim(abi.ShimList(torch, {"wheel": f"torch-{torch}-test.whl", "sha256": "0" * 64},
                                          {"libtorch_cpu.so": tuple(sorted(symbols))}), root)


@pytest.mark.parametrize("name, shim, python", [
    ("aoti_torch_get_sizes", True, False),          # the AOTInductor C shim
    ("aoti_torch_cuda_mm_out", True, False),        # its CUDA part (libtorch_cuda)
    ("torch_library_impl", True, False),            # torch/csrc/stable/c/shim.h
    ("_ZN3c1019UndefinedTensorImpl10_singletonE", False, False),  # C++: not shim
    ("PyLong_FromLong", False, True),               # the Python C API
    ("_Py_Dealloc", False, True),
    ("memcpy", False, False),
])
def test_symbol_kinds(name, shim, python):
    assert abi.is_shim_symbol(name) is shim
    assert abi.is_python_symbol(name) is python


@needs_gcc
def test_the_exact_abi_check_now_covers_shim_symbols(tmp_path):
    so = make_so(tmp_path / "ext.so", needs=("aoti_torch_get_sizes", "_ZN3c104cuda9device_idEv", "memcpy"))
    assert undefined_torch_symbols(so) == {"aoti_torch_get_sizes", "_ZN3c104cuda9device_idEv"}


@needs_gcc
def test_python_none_refuses_python_c_api_symbols(tmp_path):
    clean = make_so(tmp_path / "clean.so", needs=("aoti_torch_get_sizes",))
    abi.check_python_none([clean])
    dirty = make_so(tmp_path / "dirty.so", needs=("PyLong_FromLong", "_Py_Dealloc"))
    with pytest.raises(VerifyError, match=r"abi.python: none.*\n  dirty.so: PyLong_FromLong\n  dirty.so: _Py_Dealloc"):
        abi.check_python_none([clean, dirty])


@needs_gcc
def test_stable_check_names_each_series_and_symbol_missing(tmp_path):
    root = tmp_path / "shim"
    write_list(root, "2.11.0", ["aoti_torch_get_sizes", "torch_library_impl"])
    write_list(root, "2.13.0", ["aoti_torch_get_sizes", "torch_library_impl", "torch_exception_get_what"])
    old = make_so(tmp_path / "old.so", needs=("aoti_torch_get_sizes", "torch_library_impl"))
    report = abi.check_stable([old], torch_from="2.11", serves=("2.13",), root=root)
    assert report.loads_with == ("2.11", "2.13") and report.shim == {"old.so": ("aoti_torch_get_sizes",
                                                                               "torch_library_impl")}
    newer = make_so(tmp_path / "newer.so", needs=("aoti_torch_get_sizes", "torch_exception_get_what"))
    with pytest.raises(VerifyError) as exc:
        abi.check_stable([newer], torch_from="2.11", serves=("2.13",), root=root)
    assert "torch 2.11 lacks 1: torch_exception_get_what" in exc.value.message
    assert "promise torch 2.11 and newer" in exc.value.message
    assert "TORCH_TARGET_VERSION" in exc.value.hint


@needs_gcc
def test_stable_check_refuses_torch_cxx_symbols_by_their_cxx_names(tmp_path):
    root = tmp_path / "shim"
    write_list(root, "2.13.0", ["aoti_torch_get_sizes"])
    so = make_so(tmp_path / "mixed.so", needs=("aoti_torch_get_sizes",
                                               "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb"))
    with pytest.raises(VerifyError, match=r"1 torch C\+\+ symbol\(s\).*\n  mixed.so: c10::cuda::c10_cuda_check_impl"):
        abi.check_stable([so], torch_from="2.13", serves=("2.13",), root=root)


def test_a_missing_list_says_how_to_make_it(tmp_path):
    with pytest.raises(VerifyError) as exc:
        abi.load_shim("2.99", tmp_path)
    assert "no list of torch 2.99" in exc.value.message
    assert "python -m tools.abicheck extract" in exc.value.hint
    (tmp_path / "torch-2.98.json").write_text('{"schema": 1, "torch": "2.97.0", "source": {}, "libraries": {}}')
    with pytest.raises(VerifyError, match="holds torch 2.97.0, not a 2.98 release"):
        abi.load_shim("2.98", tmp_path)


# --------------------------------------------------------------------------- the committed lists

def test_committed_lists_name_their_wheel_and_only_ever_grow():
    series = abi.known_series()
    assert {"2.10", "2.11", "2.12", "2.13", "2.14", "2.15"} <= set(series)
    previous = None
    for s in series:
        shim = abi.load_shim(s)
        src = shim.source
        assert re.fullmatch(rf"torch-{re.escape(shim.torch)}(-\d+)?-cp\d+-cp\d+-manylinux_2_28_x86_64\.whl", src["wheel"])
        assert re.fullmatch(r"[0-9a-f]{64}", src["sha256"]) and src["url"].endswith("/" + src["wheel"])
        # A CUDA build: the CUDA part of the shim comes from libtorch_cuda.
        assert any(n.startswith("aoti_torch_cuda_") for n in shim.libraries["libtorch_cuda.so"])
        # torch's stable ABI promise, as measured: no release removed a shim symbol.
        if previous is not None:
            assert previous.symbols <= shim.symbols, (previous.series, s)
        previous = shim


def test_every_stable_recipe_has_the_lists_its_check_needs():
    table = load_table()
    have = set(abi.known_series())
    for cell in plan(load_all(table=table), table):
        if cell.torch_abi == "stable":
            assert {cell.torch_from, *cell.serves_torch} <= have, cell.id


# --------------------------------------------------------------------------- extraction

def fake_torch_wheel(tmp_path: Path) -> Path:
    """A small wheel shaped like torch's: METADATA and torch/lib libraries exporting shim symbols."""
    cpu = make_so(tmp_path / "cpu" / "libtorch_cpu.so", exports=(
        "aoti_torch_get_sizes", "torch_library_impl", "cblas_sgemm", "_ZN3c106detail19torchCheckFailEv"))
    cuda = make_so(tmp_path / "cuda" / "libtorch_cuda.so", exports=("aoti_torch_get_current_cuda_stream",))
    python = make_so(tmp_path / "py" / "libtorch_python.so", exports=("torch_c_dynamo_eval_frame_init",))
    wheel = tmp_path / "torch-2.99.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("torch/__init__.py", "")
        for lib in (cpu, cuda, python):
            zf.write(lib, f"torch/lib/{lib.name}")
        zf.writestr("torch-2.99.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 2.99.0+cu130\n")
    return wheel


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves one file, honouring ``Range: bytes=a-b`` (as the registry's file host does)."""

    data = b""
    ranges = True

    def do_GET(self):  # noqa: N802 (the stdlib's name)
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if not (m and self.ranges):
            self.send_response(200)
            self.send_header("Content-Length", str(len(self.data)))
            self.end_headers()
            self.wfile.write(self.data)
            return
        start, end = int(m.group(1)), min(int(m.group(2)), len(self.data) - 1)
        body = self.data[start:end + 1]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(self.data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _serve(data: bytes, *, ranges: bool = True):
    handler = type("H", (_RangeHandler,), {"data": data, "ranges": ranges})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


@needs_gcc
def test_extract_reads_the_shim_of_a_remote_wheel_by_range_requests(tmp_path, monkeypatch):
    wheel = fake_torch_wheel(tmp_path)
    data = wheel.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    server, thread = _serve(data)
    # Small blocks, so that reading one member really takes several range requests.
    monkeypatch.setattr(abi, "_RANGE_BLOCK", 4096)
    monkeypatch.setattr(urllib.request, "getproxies", lambda: {})
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/files/{wheel.name}"
        shim = abi.extract_shim(url, sha256=sha)
        with pytest.raises(VerifyError, match="range request answered 200, not 206"):
            server.RequestHandlerClass.ranges = False
            abi.extract_shim(url, sha256=sha)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert shim.torch == "2.99.0" and shim.series == "2.99"
    assert shim.libraries == {"libtorch_cpu.so": ("aoti_torch_get_sizes", "torch_library_impl"),
                              "libtorch_cuda.so": ("aoti_torch_get_current_cuda_stream",)}
    assert shim.source["url"] == url and shim.source["sha256"] == sha
    assert re.search(r"HTTP range requests of the zip members torch/lib/libtorch_cpu.so, "
                     r"torch/lib/libtorch_cuda.so \(\d+ of the wheel's \d+ bytes\)", shim.source["read"])
    # What is written is what the check reads back.
    path = abi.write_shim(shim, tmp_path / "lists")
    assert path.name == "torch-2.99.json" and abi.load_shim("2.99", tmp_path / "lists") == shim


@needs_gcc
def test_extract_from_a_local_wheel_checks_its_sha256(tmp_path):
    wheel = fake_torch_wheel(tmp_path)
    shim = abi.extract_shim(str(wheel))
    assert shim.source["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert "range" not in shim.source["read"]
    with pytest.raises(VerifyError, match="is not the expected"):
        abi.extract_shim(str(wheel), sha256="f" * 64)


# --------------------------------------------------------------------------- abi3 (abi3audit)

def _wheel_with(tmp_path: Path, so: Path, tag: str) -> Path:
    wheel = tmp_path / f"demo-1.0-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(so, f"demo/{so.name}")
        zf.writestr("demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        zf.writestr("demo-1.0.dist-info/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n")
        zf.writestr("demo-1.0.dist-info/RECORD", "")
    return wheel


@needs_gcc
def test_abi3_claims_are_checked_by_abi3audit(tmp_path):
    tag = "cp310-abi3-manylinux_2_28_x86_64"
    good = make_so(tmp_path / "good" / "_ext.abi3.so", needs=("PyLong_FromLong", "PyModule_Create2"))
    results = abi.check_abi3(_wheel_with(tmp_path / "good", good, tag))
    assert results["_ext.abi3.so"]["is_abi3"] is True
    bad = make_so(tmp_path / "bad" / "_ext.abi3.so", needs=("PyLong_FromLong", "_PyObject_GC_Malloc"))
    with pytest.raises(VerifyError, match=r"_ext.abi3.so: .*non-abi3 symbols: _PyObject_GC_Malloc"):
        abi.check_abi3(_wheel_with(tmp_path / "bad", bad, tag))


# --------------------------------------------------------------------------- real builds, real wheels

@pytest.fixture(scope="module")
def stabletiny(tmp_path_factory):
    from stabletiny_support import shared_stabletiny
    return shared_stabletiny(tmp_path_factory)


def _modules(wheel: Path, where: Path) -> list[Path]:
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(where)
    from tools.finish.checks import extension_modules
    return extension_modules(where)


@pytest.mark.network
def test_stabletiny_built_once_loads_with_two_torch_series(stabletiny, tmp_path):
    from stabletiny_support import TARGET, import_in
    modules = _modules(stabletiny.good, tmp_path / "unpacked")
    claims = abi.check_claims(stabletiny.good, modules, python_abi="none", torch_abi="stable",
                                   torch_from=TARGET, serves=("2.11", "2.12", "2.13"))
    assert claims["loads_with"] == ["2.11", "2.12", "2.13"] and claims["python_symbols"] == 0
    assert claims["shim_symbols"] > 10
    # The check's verdict, confirmed by the real thing: one build imports and runs under both.
    for torch_version in ("2.11.0", "2.13.0"):
        proc = import_in(stabletiny.good, torch_version, tmp_path / "run")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [f"{torch_version}+cu130", "[1.0,", "2.0,", "3.0,", "4.0]"]


@pytest.mark.network
def test_stabletiny_built_against_a_newer_shim_is_refused_and_would_not_load(stabletiny, tmp_path):
    from stabletiny_support import TARGET, import_in
    modules = _modules(stabletiny.newer, tmp_path / "unpacked")
    with pytest.raises(VerifyError) as exc:
        abi.check_stable(modules, torch_from=TARGET, serves=("2.11", "2.12", "2.13"))
    message = exc.value.message
    for series in ("2.11", "2.12"):
        assert f"torch {series} lacks 2: torch_exception_get_what, torch_exception_get_what_without_backtrace" in message
    assert "torch 2.13 lacks" not in message
    # And the refusal is right: under torch 2.11 the library does not load, for that symbol.
    proc = import_in(stabletiny.newer, "2.11.0", tmp_path / "run")
    assert proc.returncode != 0
    assert "undefined symbol: torch_exception_get_what" in proc.stderr


#: The registry's only Linux wheel of xformers 0.0.35 (sha256 from its file listing).
XFORMERS_WHEEL = "xformers-0.0.35-py39-none-manylinux_2_28_x86_64.whl"
XFORMERS_URL = ("https://files.pythonhosted.org/packages/a4/85/6d71f9b16f2ac647877e66ed4af723b3fbd477806ab8b8a89d39a3"
                "62b85f/" + XFORMERS_WHEEL)
XFORMERS_SHA256 = "ccc73c7db9890224ab05f5fb60e2034f9e6c8672a10be0cf00e95cbbae3eda7c"


def xformers_wheel() -> Path:
    """The real xformers 0.0.35 wheel (3 MB), downloaded once into the test cache."""
    from tinyext_support import CACHE_DIR
    path = CACHE_DIR / "xformers" / XFORMERS_WHEEL
    if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != XFORMERS_SHA256:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        with urllib.request.urlopen(XFORMERS_URL, timeout=300) as resp:  # noqa: S310
            partial.write_bytes(resp.read())
        assert hashlib.sha256(partial.read_bytes()).hexdigest() == XFORMERS_SHA256
        partial.replace(path)
    return path


@pytest.mark.network
def test_the_real_xformers_wheel_loads_with_torch_2_10_on(tmp_path, capsys):
    wheel = xformers_wheel()
    assert abicheck_command.main(["check", str(wheel)]) == 0
    out = capsys.readouterr().out
    assert "_C.so: 70 stable shim symbols, 0 torch C++ symbols, 0 Python C API symbols" in out
    assert "  aoti_torch_get_current_cuda_stream\n" in out and "  torch_library_impl\n" in out
    # Built for torch 2.10's shim (-DTORCH_TARGET_VERSION=0x020a...): 2.9 lacks 11 of its symbols.
    assert re.search(r"torch 2.9: 11 missing: .*torch_library_impl", out)
    newer = [s for s in abi.known_series() if version_key(s) >= (2, 10)]
    assert f"loads with torch {', '.join(newer)}\n" in out
    # What the recipe claims for it holds: every series it lists for CUDA 13.0, from 2.10.
    modules = _modules(wheel, tmp_path / "unpacked")
    claims = abi.check_claims(wheel, modules, python_abi="none", torch_abi="stable", torch_from="2.10",
                                   serves=("2.14", "2.13", "2.12", "2.11"))
    assert claims["loads_with"] == ["2.10", "2.11", "2.12", "2.13", "2.14"] and claims["shim_symbols"] == 70
    assert json.dumps(claims)  # goes into the manifest as is
