"""What a failed compile log blames, in the formats ninja, gcc and nvcc write."""

from __future__ import annotations

import pytest

from tools.pipeline.compilelog import failing_file


@pytest.mark.parametrize("log,expect", [
    # ninja's target plus gcc's first error (header missing)
    ("  FAILED: [code=1] /b/temp/csrc/ext.o\n  /t/include/x.h:7:10: fatal error: cuda_runtime.h: "
     "No such file or directory\n", "ext.o (first error: /t/include/x.h:7: cuda_runtime.h"),
    # nvcc's error format
    ('FAILED: /b/k.o\ncsrc/k.cu(12): error: identifier "foo" is undefined\n',
     'k.o (first error: csrc/k.cu:12: identifier "foo" is undefined)'),
    # no ninja (setuptools' serial build)
    ("csrc/a.cpp:3:1: error: expected ';'\n", "csrc/a.cpp:3: expected ';'"),
    ("nothing useful\n", None),
])
def test_failing_file(log, expect):
    got = failing_file(log)
    assert (got is None) if expect is None else got.startswith(expect) or expect in got
