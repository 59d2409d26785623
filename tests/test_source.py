"""Source step: hash verification, hostile archives, patches; and the real sdists' patches."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from tools.core.errors import PatchError, SourceError
from tools.hostplat import for_name
from tools.plan.recipes.model import load_all, load_recipe
from tools.pipeline import source
from tools.pipeline.source import apply_patches, extract_sdist, fetch_sdist, prepare_source

SETUP_PY = "ARCHS = ['80', '90']\nprint(ARCHS)\n"
PATCH = """From: cuwheels <cuwheels@example.invalid>
Subject: [PATCH] Read the arch list from the environment

Why: the test patch.
---
--- a/setup.py
+++ b/setup.py
@@ -1,2 +1,3 @@
-ARCHS = ['80', '90']
+import os
+ARCHS = os.environ.get('DEMO_CUDA_ARCHS', '80;90').split(';')
 print(ARCHS)
"""


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _sdist(tmp_path: Path) -> Path:
    return _tar(tmp_path / "demo_ext-1.0.0.tar.gz", [
        _file("demo_ext-1.0.0/setup.py", SETUP_PY.encode()),
        _file("demo_ext-1.0.0/PKG-INFO", b"Metadata-Version: 2.1\nName: demo-ext\n"),
    ])


@pytest.fixture
def demo(tmp_path, write_recipe, good_recipe, mini_table):
    sdist = _sdist(tmp_path)
    good_recipe["source"]["sha256"] = hashlib.sha256(sdist.read_bytes()).hexdigest()
    folder = write_recipe(good_recipe)
    (folder / "patches" / "0001-Read-arch-list.patch").write_text(PATCH)
    return load_recipe(folder, mini_table), sdist


def test_prepare_source_verifies_extracts_and_patches(demo, tmp_path):
    recipe, sdist = demo
    prepared = prepare_source(recipe, tmp_path / "work", sdist=sdist)
    assert prepared.patches == ("0001-Read-arch-list.patch",)
    assert "DEMO_CUDA_ARCHS" in (prepared.tree / "setup.py").read_text()
    assert prepared.tree.name == "demo_ext-1.0.0"


def test_sdist_dir(demo, tmp_path):
    recipe, sdist = demo
    assert fetch_sdist(recipe, tmp_path / "w", sdist_dir=sdist.parent).is_file()
    with pytest.raises(SourceError, match="is not in --sdist-dir"):
        fetch_sdist(recipe, tmp_path / "w2", sdist_dir=tmp_path / "nowhere")


def test_wrong_hash_is_refused_naming_both(demo, tmp_path):
    recipe, _ = demo
    other = _tar(tmp_path / "other.tar.gz", [_file("demo_ext-1.0.0/setup.py", b"evil\n")])
    with pytest.raises(SourceError) as info:
        fetch_sdist(recipe, tmp_path / "w", sdist=other)
    msg = str(info.value)
    assert recipe.source.sha256 in msg
    assert hashlib.sha256(other.read_bytes()).hexdigest() in msg
    assert "source.sha256" in msg
    assert not (tmp_path / "w" / recipe.source.sdist).exists()  # nothing unverified is kept


def _link(name, target, kind=tarfile.SYMTYPE):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def _dev(name):
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return info, None


@pytest.mark.parametrize("member,expect", [
    (_file("/etc/cron.d/x", b"x"), "absolute path"),                       # absolute
    (_file("demo/../../escape.txt", b"x"), "contains '..'"),               # traversal
    (_link("demo/link", "../../../etc/passwd"), "points outside"),          # symlink out
    (_link("demo/abs", "/etc/passwd"), "points outside"),                   # absolute symlink
    (_link("demo/hard", "/etc/passwd", tarfile.LNKTYPE), "points outside"),  # hardlink out
    (_dev("demo/null"), "device or FIFO"),                                  # device node
])
@pytest.mark.parametrize("host", ["linux", "windows"])
def test_hostile_archives_are_refused_before_writing(tmp_path, member, expect, host):
    archive = _tar(tmp_path / "bad.tar.gz", [_file("demo/ok.txt", b"fine"), member])
    with pytest.raises(SourceError, match=expect):
        extract_sdist(archive, tmp_path / "out", host=for_name(host))
    assert not (tmp_path / "out" / "demo" / "ok.txt").exists()  # checked before any write


def test_link_inside_the_tree_is_fine(tmp_path):
    archive = _tar(tmp_path / "ok.tar.gz", [_file("demo/a.txt", b"a"),
                                            _link("demo/b.txt", "a.txt")])
    assert (extract_sdist(archive, tmp_path / "out") / "b.txt").read_text() == "a"


def test_unreadable_archive(tmp_path):
    bad = tmp_path / "x.tar.gz"
    bad.write_bytes(b"this is not gzip")
    with pytest.raises(SourceError, match="not a readable .tar.gz"):
        extract_sdist(bad, tmp_path / "out")


def test_patch_that_does_not_apply_names_patch_and_hunk(demo, tmp_path):
    recipe, sdist = demo
    tree = extract_sdist(sdist, tmp_path / "src")
    (tree / "setup.py").write_text("ARCHS = ['70']\nprint(ARCHS)\n")
    with pytest.raises(PatchError) as info:
        apply_patches(tree, recipe.patches)
    msg = str(info.value)
    assert "0001-Read-arch-list.patch does not apply" in msg
    assert "Hunk #1 FAILED" in msg and "setup.py" in msg
    assert (tree / "setup.py").read_text().startswith("ARCHS = ['70']")  # untouched


@pytest.mark.network
@pytest.mark.parametrize("recipe", [r for r in load_all() if r.source.git is None],
                         ids=lambda r: r.package)
def test_real_sdist_hash_and_patches(recipe, tmp_path):
    """Download each recipe's sdist from the registry, verify it, apply its patches. (A git
    source's repository is no registry, which is all the tests reach: packing, checking and
    patching one is tests/test_gitsource.py's, on a repository made there.)"""
    prepared = prepare_source(recipe, tmp_path)
    assert prepared.patches == tuple(p.file for p in recipe.patches)
    assert (prepared.tree / "setup.py").is_file()


# ---- extraction that cannot leave its folder, within caps -------------------------------------

@pytest.mark.parametrize("host", ["linux", "windows"])
def test_members_are_written_as_tarfiles_data_filter_would(tmp_path, host):
    """Modes lose set-id and group/other write bits, times are kept, ``./`` is the top, hard
    links inside the tree are links, symbolic links inside the tree work; the same through
    Windows' way of writing (by path: Windows has no dir_fd), run here."""
    folder = tarfile.TarInfo("./demo")
    folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o775, 1_600_000_000
    run, plain = _file("./demo/run.sh", b"#!/bin/sh\n"), _file("demo/data.txt", b"data")
    run[0].mode, run[0].mtime = 0o6777, 1_500_000_000
    plain[0].mode = 0o666
    hard = _link("demo/again.txt", "demo/data.txt", tarfile.LNKTYPE)
    archive = _tar(tmp_path / "ok.tar.gz", [(folder, None), run, plain, hard,
                                            _link("demo/alias.txt", "data.txt")])
    tree = extract_sdist(archive, tmp_path / "out", host=for_name(host))
    assert tree == tmp_path / "out" / "demo"
    assert stat.S_IMODE((tree / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((tree / "data.txt").stat().st_mode) == 0o644
    assert (tree / "run.sh").stat().st_mtime == 1_500_000_000
    assert tree.stat().st_mtime == 1_600_000_000
    assert (tree / "again.txt").stat().st_ino == (tree / "data.txt").stat().st_ino
    assert (tree / "alias.txt").is_symlink() and (tree / "alias.txt").read_text() == "data"


def _chain(tmp_path: Path) -> tuple[Path, Path]:
    """The PATH_MAX link chain of tests/fixtures/hostile, aimed at a file beside the tree."""
    from tests.fixtures.hostile.make_inputs import pathmax_chain
    outside = tmp_path / "outside.txt"
    outside.write_text("must never change\n")
    pathmax_chain(tmp_path / "chain.tar.gz", outside)
    return tmp_path / "chain.tar.gz", outside


@pytest.mark.parametrize("host", ["linux", "windows"])
def test_the_path_max_link_chain_is_refused_by_the_link_rules_alone(tmp_path, monkeypatch,
                                                                   host):
    """Its member names pass the length cap here, lifted: the links still cannot be followed."""
    monkeypatch.setattr(source, "MAX_PATH_CHARS", 1 << 20)
    archive, outside = _chain(tmp_path)
    with pytest.raises(SourceError, match="lies below 'a', a symbolic link: nothing is written "
                                          "through a link"):
        extract_sdist(archive, tmp_path / "src", host=for_name(host))
    assert outside.read_text() == "must never change\n"
    assert not (tmp_path / "src").exists()  # nothing half-written is left


@pytest.mark.parametrize("cap,value,members,message", [
    ("MAX_MEMBERS", 3, [_file(f"demo/{i}", b"") for i in range(4)], "more than 3 members"),
    ("MAX_EXTRACTED_BYTES", 10, [_file("demo/a", b"123456"), _file("demo/b", b"123456")],
     "extracts to more than 10 bytes (at member 'demo/b')"),
    ("MAX_DEPTH", 3, [_file("demo/a/b/c", b"")], "is 4 folders deep (at most 3)"),
    ("MAX_PATH_CHARS", 10, [_file("demo/abcdefgh", b"")], "is 13 characters long (at most 10)"),
    # tarfile reads a long name whole, at the size its header states
    ("MAX_READ", 1024, [_file("demo/" + "n" * 2000, b"")], "a tar header asks to read 2048 bytes"),
    ("MAX_HEADER_BYTES", 4096, [_file(f"demo/{i}", b"") for i in range(10)],
     "more than 4096 bytes of tar headers"),
])
def test_each_cap_refuses_before_anything_is_written(tmp_path, monkeypatch, cap, value, members,
                                                     message):
    monkeypatch.setattr(source, cap, value)
    archive = _tar(tmp_path / "big.tar.gz", members)
    with pytest.raises(SourceError) as info:
        extract_sdist(archive, tmp_path / "out")
    assert message in str(info.value)
    assert not (tmp_path / "out").exists()


def test_the_source_steps_sdist_name_is_a_plain_name_there_too(demo, tmp_path):
    """A recipe object made without the loader still cannot name a path."""
    recipe, sdist = demo
    hostile = dataclasses.replace(recipe, source=dataclasses.replace(
        recipe.source, sdist="../../demo_ext-1.0.0.tar.gz"))
    with pytest.raises(SourceError, match="is not a plain file name"):
        fetch_sdist(hostile, tmp_path / "w", sdist=sdist)
    assert not (tmp_path.parent / "demo_ext-1.0.0.tar.gz").exists()  # where w/../../ would be


def test_a_local_sdist_over_the_cap_is_refused(demo, tmp_path):
    recipe, sdist = demo
    with pytest.raises(SourceError, match=r"bytes, more than the 100 an sdist may have"):
        fetch_sdist(recipe, tmp_path / "w", sdist=sdist, max_bytes=100)


def test_a_download_comes_from_the_registrys_file_host_only(demo, tmp_path):
    """The recipe's URL (files.example.invalid) is not PyPI's file host: refused unasked."""
    recipe, _ = demo
    with pytest.raises(SourceError, match="https://files.example.invalid is not "
                                          "https://files.pythonhosted.org"):
        fetch_sdist(recipe, tmp_path / "w")
    assert list((tmp_path / "w").iterdir()) == []


# ---- patched trees held to the sdist's link rules ---------------------------------------------

@pytest.mark.parametrize("parts,target,links,problem", [
    (("top", "a"), "b", set(), None),
    (("top", "d", "a"), "../b", set(), None),
    (("top", "a"), "../../x", set(), "points outside the source tree"),
    (("top", "a"), "/etc/passwd", set(), "points outside the source tree"),
    (("top", "a"), "", set(), "has an empty or overlong target"),
    (("top", "a"), "x" * 1025, set(), "has an empty or overlong target"),
    (("top", "a"), "alias/b", {"top/alias"}, "goes through the link 'top/alias'"),
])
def test_link_problem_is_the_one_rule_for_sdists_and_patched_trees(parts, target, links,
                                                                   problem):
    got = source.link_problem(parts, target, lambda name: name in links)
    assert got == problem or (problem and got.startswith(problem))


def test_a_patched_tree_with_a_link_out_or_a_fifo_is_named(tmp_path):
    tree = tmp_path / "src" / "demo"
    (tree / "sub").mkdir(parents=True)
    (tree / "setup.py").write_text("x")
    (tree / "ok.py").symlink_to("setup.py")
    assert source.check_patched_tree(tree) is None
    (tree / "sub" / "out").symlink_to("../../../x")
    assert source.check_patched_tree(tree) == \
        "link 'demo/sub/out' -> '../../../x' points outside the source tree"
    (tree / "sub" / "out").unlink()
    os.mkfifo(tree / "pipe")
    assert source.check_patched_tree(tree) == "'demo/pipe' is a device, FIFO or socket"


_LINK_OUT = """diff --git a/evil b/evil
new file mode 120000
--- /dev/null
+++ b/evil
@@ -0,0 +1 @@
+../../outside.txt
\\ No newline at end of file
"""


def test_a_patch_making_a_link_out_is_refused_and_its_tree_removed(demo, tmp_path):
    recipe, sdist = demo
    tree = extract_sdist(sdist, tmp_path / "work" / "src")
    (tmp_path / "work" / "outside.txt").write_text("kept\n")
    evil = recipe.folder / "patches" / "0002-Link-out.patch"
    evil.write_text(_LINK_OUT)
    patches = (*recipe.patches, dataclasses.replace(recipe.patches[0], file=evil.name, path=evil))
    with pytest.raises(PatchError) as info:
        apply_patches(tree, patches)
    msg = str(info.value)
    assert "0002-Link-out.patch (patches/0002-Link-out.patch) applied to demo_ext-1.0.0 makes " \
           "link 'demo_ext-1.0.0/evil' -> '../../outside.txt' points outside" in msg
    assert "the sdist's link rule" in msg
    assert not tree.exists() and (tmp_path / "work" / "outside.txt").read_text() == "kept\n"
