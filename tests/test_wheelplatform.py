"""tools.finish.wheelplatform: one finish platform per wheel platform; the finish steps hold no
platform conditional of their own (each platform's repair and inspection run for real in
tests/test_finish.py and tests/test_finish_platforms.py)."""

from __future__ import annotations

import ast

import pytest

from tools import ROOT
from tools.finish.wheelplatform import LinuxFinish, WindowsFinish, finish_platform


@pytest.mark.parametrize("platform, kind", [
    ("linux_x86_64", LinuxFinish), ("linux_aarch64", LinuxFinish),
    ("manylinux_2_28_x86_64", LinuxFinish), ("win_amd64", WindowsFinish)])
def test_each_wheel_platform_has_its_finish(platform, kind):
    assert isinstance(finish_platform(platform), kind)


def test_the_finish_steps_ask_the_platform():
    tree = ast.parse((ROOT / "tools" / "finish" / "steps.py").read_text())
    tests = [ast.unparse(n.test) for n in ast.walk(tree) if isinstance(n, (ast.If, ast.IfExp))]
    assert not [t for t in tests if "win" in t.lower()], tests
