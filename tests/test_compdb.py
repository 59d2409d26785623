"""tools.probing.compdb: the stand-in ninja and the units read from what it recorded.

The real ninja is replaced by a small script that answers ``-t compdb`` with a fixed compile
database and records every other call, so these tests need no ninja and compile nothing. The
whole path with the real ninja and torch's BuildExtension runs in tests/test_probe.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tools.hostplat import for_name, linux, windows
from tools.probing.compdb import STOP_STATUS, read_units, stand_in_object, write_shim

FAKE_NINJA = """#!{python}
import json, os, sys
with open({calls!r}, "a") as fh:
    fh.write(json.dumps([os.getcwd(), sys.argv[1:]]) + "\\n")
if sys.argv[1:] == ["--version"]:
    print("1.13.0")
elif "compdb" in sys.argv:
    print(json.dumps({db}))
"""


def _compdb(build: Path) -> list[dict]:
    """What torch's build.ninja for one CUDA extension gives: two compiles and a link edge."""
    return [
        {"directory": str(build), "command": "c++ -c /src/csrc/ext.cpp -o csrc/ext.o",
         "file": "/src/csrc/ext.cpp", "output": "csrc/ext.o"},
        {"directory": str(build), "command": "nvcc -c /src/csrc/k.cu -o csrc/k.o",
         "file": "/src/csrc/k.cu", "output": "csrc/k.o"},
        {"directory": str(build), "command": "c++ -shared csrc/ext.o csrc/k.o -o ext.so",
         "file": "csrc/ext.o", "output": "ext.so"},
    ]


def _setup(tmp_path: Path, *, stub: bool, host: str = "linux"
           ) -> tuple[Path, Path, Path, Path]:
    build = tmp_path / "build" / "temp"
    build.mkdir(parents=True)
    calls = tmp_path / "calls.jsonl"
    real = tmp_path / "real" / "ninja"
    real.parent.mkdir()
    real.write_text(FAKE_NINJA.format(python=sys.executable, calls=str(calls),
                                      db=_compdb(build)))
    real.chmod(0o755)
    record = tmp_path / "record"
    obj = stand_in_object(tmp_path / "stub" / "stand-in.o") if stub else None
    shim = write_shim(tmp_path / "shim", str(real), record, obj, host=for_name(host))
    return shim, build, record, calls


def _run(shim: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(shim), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def test_version_checks_and_tools_go_to_the_real_ninja(tmp_path):
    shim, build, record, calls = _setup(tmp_path, stub=True)
    assert _run(shim, "--version", cwd=build).stdout.strip() == "1.13.0"
    _run(shim, "-t", "restat", cwd=build)          # CMake runs ninja tools while configuring
    assert [c[1] for c in map(json.loads, calls.read_text().splitlines())] == \
        [["--version"], ["-t", "restat"]]
    assert not record.exists()                    # nothing recorded for those


def test_a_build_is_recorded_and_stand_in_objects_let_the_package_go_on(tmp_path):
    shim, build, record, calls = _setup(tmp_path, stub=True)
    proc = _run(shim, "-v", "-j", "2", cwd=build)  # how torch runs it
    assert proc.returncode == 0, proc.stderr
    assert "recorded 3 compile commands" in proc.stderr
    [call] = [json.loads(c) for c in calls.read_text().splitlines()]
    assert call[1][-3:] == ["-t", "compdb", "-x"] and call[1][1] == str(build)
    saved = json.loads((record / "compdb-0.json").read_text())
    assert saved["ninja_file"] == str(build / "build.ninja") and len(saved["commands"]) == 3
    for obj in ("csrc/ext.o", "csrc/k.o"):          # stand-ins where the objects would be
        assert (build / obj).read_bytes()[:4] == b"\x7fELF"
    assert not (build / "ext.so").exists()         # links are the package's own business
    _run(shim, "-C", str(build), cwd=tmp_path)     # a second extension: a second record
    assert (record / "compdb-1.json").is_file()


def test_without_a_stand_in_object_the_build_stops_after_recording(tmp_path):
    shim, build, record, _ = _setup(tmp_path, stub=False)
    proc = _run(shim, "-v", cwd=build)
    assert proc.returncode == STOP_STATUS
    assert (record / "compdb-0.json").is_file() and not (build / "csrc").exists()


def test_read_units_keeps_sources_once_and_names_them_by_their_path_in_the_tree(tmp_path):
    tree = tmp_path / "pkg"
    (tree / "csrc").mkdir(parents=True)
    for name in ("ext.cpp", "k.cu"):
        (tree / "csrc" / name).write_text("")
    record = tmp_path / "record"
    record.mkdir()
    build = tree / "build"
    db = [{"directory": str(build), "command": f"cc -c {f} -o {o}", "file": f, "output": o}
          for f, o in ((str(tree / "csrc/k.cu"), "k.o"), ("../csrc/ext.cpp", "ext.o"),
                       ("k.o", "ext.so"), ("/usr/include/x.c", "x.o"))]
    for n in (0, 1):  # PyG-style: the same sources again for the package's next extension
        (record / f"compdb-{n}.json").write_text(json.dumps({"commands": db}))
    units = read_units(record, tree)
    assert [(u.name, u.kind) for u in units] == [("csrc/k.cu", "cuda"), ("csrc/ext.cpp", "c++"),
                                                 ("/usr/include/x.c", "c")]
    assert units[0].directory == build and units[0].output == build / "k.o"


def test_stand_in_object_needs_a_c_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))      # no cc, no gcc
    assert stand_in_object(tmp_path / "o.o") is None
    assert os.listdir(tmp_path) == []


def test_the_windows_stand_in_is_a_ninja_exe_launcher_that_runs_the_same_script(tmp_path):
    """On Windows the stand-in is ninja.exe: distlib's console launcher (a PE file), this
    Python's path as its shebang, the script as a zip after it. Python runs such a file as the
    launcher has it run (``python ninja.exe ARGS``), so its Windows path runs here: a version
    check goes to the real ninja through a child process (Windows has no exec), a build is
    recorded as on POSIX."""
    shim, build, record, calls = _setup(tmp_path, stub=False, host="windows")
    assert shim == tmp_path / "shim" / "ninja.exe" and os.listdir(shim.parent) == ["ninja.exe"]
    data = shim.read_bytes()
    assert data[:2] == b"MZ"
    assert f"#!{sys.executable}\n".encode() in data
    with zipfile.ZipFile(shim) as zf:
        script = zf.read("__main__.py").decode()
    assert "EXECS = " in script and ", False\n" in script.split("EXECS = ")[1].split("args")[0]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(shim), *args], cwd=build,
                              capture_output=True, text=True, timeout=60)

    assert run("--version").stdout.strip() == "1.13.0"
    assert run("-v").returncode == STOP_STATUS
    assert (record / "compdb-0.json").is_file()


def test_the_posix_stand_in_is_an_executable_script_of_this_python(tmp_path):
    shim = write_shim(tmp_path / "shim", "/usr/bin/ninja", tmp_path / "record", None,
                      host=linux)
    assert shim == tmp_path / "shim" / "ninja" and os.access(shim, os.X_OK)
    first, *rest = shim.read_text().splitlines()
    assert first == f"#!{sys.executable}" and "REAL, OUT, STUB, EXECS = " in "\n".join(rest)


def test_stand_in_object_on_windows_compiles_an_empty_file_with_cl(tmp_path, monkeypatch):
    """MSVC's cl (a stand-in here that writes what /Fo names): /c of an empty .c file beside
    the object, which is gone after."""
    fake = tmp_path / "bin" / "cl"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"open({str(tmp_path / 'cl-args.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
                    "out = [a[3:] for a in sys.argv if a.startswith('/Fo')][0]\n"
                    "open(out, 'wb').write(b'\\x64\\x86')\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    obj = tmp_path / "shim" / "stand-in.obj"
    assert stand_in_object(obj, host=windows) == obj and obj.read_bytes() == b"\x64\x86"
    args = json.loads((tmp_path / "cl-args.json").read_text())
    assert args == ["/nologo", "/c", str(obj.with_suffix(".c")), f"/Fo{obj}"]
    assert os.listdir(obj.parent) == ["stand-in.obj"]
    assert stand_in_object(tmp_path / "o.o", host=linux) is None   # no cc on that PATH
