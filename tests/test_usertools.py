"""tools.finish.usertools: the real ``installer`` and the real ``auditwheel show`` on small
gcc-built wheels (no CUDA needed; the real tinyext wheel goes through them in test_finish.py)."""

from __future__ import annotations

import base64
import hashlib
import platform
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from wheelfactory import make_wheel

from tools.core.errors import VerifyError
from tools.finish.usertools import (auditwheel_show, check_as_users_do, manylinux_glibc,
                                    validate_record)
from tools.finish.wheelmeta import set_version_and_pin

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

#: dlopen is versioned GLIBC_2.34 since glibc 2.34 merged libdl into libc: a module using it
#: can't load on an older glibc, whatever its wheel's tag says.
NEEDS_GLIBC_2_34 = "#include <dlfcn.h>\nvoid *f(void) { return dlopen(\"x\", 0); }\n"


def _glibc() -> tuple[int, int]:
    name, version = platform.libc_ver()
    if name != "glibc":
        pytest.skip("needs glibc")
    return tuple(int(x) for x in version.split(".")[:2])


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _module(tmp_path: Path, source: str = NEEDS_GLIBC_2_34) -> bytes:
    src = tmp_path / "m.c"
    src.write_text(source)
    out = tmp_path / "m.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True, timeout=120)
    return out.read_bytes()


def extension_wheel(tmp_path: Path, *, tag: str, dirs_in_record: bool = False,
                    tamper: bool = False) -> Path:
    """A wheel (from tests/wheelfactory) plus a compiled module, RECORD rewritten to match;
    ``dirs_in_record`` adds directory entries to the zip and RECORD, as some builds write them;
    ``tamper`` changes the module's bytes after RECORD was written."""
    base = make_wheel(tmp_path / "base", "demo", "1.0", tag=tag)
    module = _module(tmp_path)
    members: dict[str, bytes] = {}
    with zipfile.ZipFile(base) as zf:
        for name in zf.namelist():
            if not name.endswith("/RECORD"):
                members[name] = zf.read(name)
        record_name = next(n for n in zf.namelist() if n.endswith("/RECORD"))
    members["demo/_C.cpython-311-x86_64-linux-gnu.so"] = module
    if dirs_in_record:
        members = {"demo/": b"", "demo-1.0.dist-info/": b"", **members}
    rows = [f"{n},{_record_hash(d)},{len(d)}" for n, d in members.items()]
    members[record_name] = ("\n".join(rows + [f"{record_name},,"]) + "\n").encode()
    if tamper:
        members["demo/_C.cpython-311-x86_64-linux-gnu.so"] = module + b"\0"
    out = tmp_path / "dist" / base.name
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out


@pytest.mark.parametrize("tag, glibc", [
    ("manylinux_2_28_x86_64", (2, 28)),
    ("manylinux_2_34_aarch64", (2, 34)),
    ("manylinux2014_x86_64", None),     # the legacy alias is not what auditwheel prints
    ("linux_x86_64", None),
])
def test_manylinux_glibc(tag, glibc):
    assert manylinux_glibc(tag) == glibc


def test_a_good_wheel_passes_both(tmp_path):
    if _glibc() < (2, 34):
        pytest.skip("the module's symbols need glibc 2.34")
    wheel = extension_wheel(tmp_path, tag="cp311-cp311-manylinux_2_34_x86_64")
    seen = check_as_users_do(wheel)
    assert seen.record_files == 5  # __init__.py, _C.so, METADATA, WHEEL, RECORD
    assert seen.auditwheel_constraint == "manylinux_2_34_x86_64"


def test_directories_in_record_are_what_auditwheel_show_crashes_on(tmp_path):
    """installer accepts such a wheel (as pip and uv do); auditwheel show does not."""
    wheel = extension_wheel(tmp_path, tag="cp311-cp311-linux_x86_64", dirs_in_record=True)
    validate_record(wheel)
    with pytest.raises(VerifyError, match=r"`auditwheel show` fails on it .*IsADirectoryError"):
        auditwheel_show(wheel)


def test_a_tag_older_than_the_symbols_allow_is_refused(tmp_path):
    if _glibc() < (2, 34):
        pytest.skip("the module's symbols need glibc 2.34")
    wheel = extension_wheel(tmp_path, tag="cp311-cp311-manylinux_2_28_x86_64")
    with pytest.raises(VerifyError, match="tagged manylinux_2_28_x86_64, but .* constrain it to "
                                          "manylinux_2_34_x86_64"):
        auditwheel_show(wheel)


def test_a_file_that_differs_from_record_is_refused(tmp_path):
    wheel = extension_wheel(tmp_path, tag="cp311-cp311-linux_x86_64", tamper=True)
    with pytest.raises(VerifyError, match=r"installer --validate-record all refuses it: .*_C"):
        validate_record(wheel)


def test_the_metadata_step_writes_files_only(tmp_path):
    """A package build that wrote directory entries: the finished wheel has none, in the zip or
    in RECORD, and users' tools take it."""
    wheel = extension_wheel(tmp_path, tag="cp311-cp311-linux_x86_64", dirs_in_record=True)
    out = set_version_and_pin(wheel, tmp_path / "final", label="cu130.torch2.14",
                              torch_pin="torch==2.14.*", manifest=None, epoch=1577750400)
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
        record = zf.read("demo-1.0+cu130.torch2.14.dist-info/RECORD").decode()
    assert not [n for n in names if n.endswith("/")]
    assert not [line for line in record.splitlines() if line.split(",")[0].endswith("/")]
    assert check_as_users_do(out).record_files == 5
