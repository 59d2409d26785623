"""Git sources (tools/pipeline/gitsource.py, tools/plan/recipes/source.py): a recipe that packs
its archive from one commit of a real git repository with a submodule, made here, served by
git's own local transport (no network), the way ``python -m tools.recipe archive`` and the
source step use it."""

from __future__ import annotations

import copy
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tools.core.errors import RecipeError, SourceError
from tools.pipeline.gitsource import pack, tar_sha256
from tools.pipeline.source import extract_sdist, fetch_sdist
from tools.plan.recipes.model import load_recipe
from tools.recipe import main as recipe_main

REPO = "https://git.example.invalid/owner/kernels"
SUB = "https://git.example.invalid/owner/headers.git"


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
           "GIT_AUTHOR_DATE": "2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE": "2026-01-02T03:04:05Z"}
    return subprocess.run(["git", "-c", "protocol.file.allow=always", "-C", str(cwd), *args],
                          check=True, capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture
def repos(tmp_path, monkeypatch):
    """A repository with a package folder, a README, an executable, a link and a submodule
    holding headers; git's global config points the recipe's https URLs at them and lets the
    local upload-pack serve partial fetches, as a mirror's owner would set it."""
    sub = tmp_path / "headers"
    (sub / "include" / "hdr").mkdir(parents=True)
    (sub / "include" / "hdr" / "a.h").write_text("#define A 1\n")
    (sub / "LICENSE.txt").write_text("headers licence\n")
    (sub / "docs").mkdir()
    (sub / "docs" / "big.txt").write_text("not taken\n")
    _git(sub, "init", "-q", "-b", "main")
    _git(sub, "add", ".")
    _git(sub, "commit", "-q", "-m", "headers")
    top = tmp_path / "kernels"
    (top / "pkg").mkdir(parents=True)
    (top / "pkg" / "setup.py").write_text("from setuptools import setup\nsetup(name='kern', "
                                          "version='1.0')\n")
    (top / "pkg" / "run.sh").write_text("#!/bin/sh\n")
    (top / "pkg" / "run.sh").chmod(0o755)
    os.symlink("setup.py", top / "pkg" / "alias.py")
    (top / "README.md").write_text("# kernels\n")
    _git(top, "init", "-q", "-b", "main")
    _git(top, "submodule", "add", "-q", SUB, "third/headers")
    # the submodule's checkout came from the example URL: it was rewritten to the local copy
    _git(top, "add", ".")
    _git(top, "commit", "-q", "-m", "kernels")
    config = tmp_path / "gitconfig"
    config.write_text(f'[uploadpack]\n\tallowFilter = true\n\tallowAnySHA1InWant = true\n'
                      f'[url "{top}"]\n\tinsteadOf = {REPO}\n'
                      f'[url "{sub}"]\n\tinsteadOf = {SUB}\n'
                      f'[protocol "file"]\n\tallow = always\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    return {"top": top, "sub": sub, "commit": _git(top, "rev-parse", "HEAD"),
            "sub_commit": _git(sub, "rev-parse", "HEAD")}


@pytest.fixture(autouse=True)
def _config_before_repos(tmp_path, monkeypatch):
    # `git submodule add` above clones SUB: point it at the local copy before the fixture runs
    config = tmp_path / "gitconfig"
    config.write_text(f'[url "{tmp_path / "headers"}"]\n\tinsteadOf = {SUB}\n'
                      f'[protocol "file"]\n\tallow = always\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))


def _recipe_data(good_recipe, commit: str, paths=None, sha256: str = "0" * 64) -> dict:
    data = copy.deepcopy(good_recipe)
    data["package"] = "kern"
    data["patches"] = []
    data["source"] = {
        "project": "kern", "version": "1.0", "sdist": "kern-1.0.tar.gz", "sha256": sha256,
        "git": {"repository": REPO, "commit": commit,
                "paths": paths or [
                    {"from": "pkg", "to": "."},
                    {"from": "README.md", "to": "README.md"},
                    {"from": "include", "to": "third/include", "submodule": "third/headers"},
                    {"from": "LICENSE.txt", "to": "third/LICENSE.txt",
                     "submodule": "third/headers"}],
                "reason": "the package publishes no sdist; the newest commit"}}
    return data


def _load(write_recipe, mini_table, data):
    return load_recipe(write_recipe(data, name="kern"), mini_table)


def test_a_git_source_packs_the_paths_it_names_and_the_same_commit_gives_the_same_tar(
        repos, write_recipe, mini_table, good_recipe, tmp_path):
    recipe = _load(write_recipe, mini_table, _recipe_data(good_recipe, repos["commit"]))
    assert recipe.source.git.commit == repos["commit"]
    assert recipe.source.url == f"git+{REPO}@{repos['commit']}"
    first = pack(recipe, tmp_path / "one")
    second = pack(recipe, tmp_path / "two")
    assert first.name == "kern-1.0.tar.gz"
    assert tar_sha256(first) == tar_sha256(second)
    with tarfile.open(first) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(n for n, m in members.items() if not m.isdir()) == [
        "kern-1.0/README.md", "kern-1.0/alias.py", "kern-1.0/run.sh", "kern-1.0/setup.py",
        "kern-1.0/third/LICENSE.txt", "kern-1.0/third/include/hdr/a.h"]
    assert members["kern-1.0/run.sh"].mode == 0o755
    assert members["kern-1.0/setup.py"].mode == 0o644
    assert members["kern-1.0/alias.py"].issym() and members["kern-1.0/alias.py"].linkname == \
        "setup.py"
    assert {m.uid for m in members.values()} == {0}
    assert len({m.mtime for m in members.values()}) == 1       # the commit's time, every one
    header = first.read_bytes()[:10]                            # no name, no time in gzip
    assert header[4:8] == b"\0\0\0\0" and not header[3] & 0x08
    # the archive is an sdist like any other to the source step
    tree = extract_sdist(first, tmp_path / "src")
    assert (tree / "third" / "include" / "hdr" / "a.h").read_text() == "#define A 1\n"


def test_the_source_step_checks_the_tar_against_the_recipe(repos, write_recipe, mini_table,
                                                          good_recipe, tmp_path):
    probe = _load(write_recipe, mini_table, _recipe_data(good_recipe, repos["commit"]))
    digest = tar_sha256(pack(probe, tmp_path / "probe"))
    right = _load(write_recipe, mini_table,
                  _recipe_data(good_recipe, repos["commit"], sha256=digest))
    got = fetch_sdist(right, tmp_path / "sdist")
    assert got.name == "kern-1.0.tar.gz" and tar_sha256(got) == digest
    wrong = _load(write_recipe, mini_table, _recipe_data(good_recipe, repos["commit"]))
    with pytest.raises(SourceError) as exc:
        fetch_sdist(wrong, tmp_path / "sdist2")
    assert digest in exc.value.message and "0" * 64 in exc.value.message
    assert "python -m tools.recipe archive" in exc.value.hint
    assert not list((tmp_path / "sdist2").iterdir())           # nothing half-written left
    # --sdist-dir: a packed archive from elsewhere is checked the same way (its tar)
    assert tar_sha256(fetch_sdist(right, tmp_path / "sdist3", sdist_dir=got.parent)) == digest


def test_archive_command_prints_the_sha256_and_says_whether_it_is_the_recipes(
        repos, write_recipe, mini_table, good_recipe, tmp_path, capsys, monkeypatch):
    folder = write_recipe(_recipe_data(good_recipe, repos["commit"]), name="kern")
    monkeypatch.setattr("tools.recipe.load_table", lambda: mini_table)
    rc = recipe_main(["archive", "kern", "--out", str(tmp_path / "out"),
                      "--recipes", str(folder.parent)])
    out = capsys.readouterr().out
    assert rc == 1 and "NOT the recipe's" in out
    digest = out.split("tar sha256 ")[1].split()[0]
    assert digest == tar_sha256(tmp_path / "out" / "kern-1.0.tar.gz")


@pytest.mark.parametrize("change, words", [
    (lambda d, r: d["source"]["git"].update(commit="1" * 40), "git fetch failed"),
    (lambda d, r: d["source"]["git"].update(paths=[{"from": "nothing", "to": "."}]),
     "holds no file"),
    (lambda d, r: d["source"]["git"].update(paths=[{"from": "x", "to": "x", "submodule": "pkg"}]),
     "is not a submodule"),
    (lambda d, r: d["source"]["git"].update(paths=[{"from": "pkg", "to": "."},
                                                   {"from": "README.md", "to": "setup.py"}]),
     "which an earlier path wrote too"),
])
def test_a_git_source_that_cannot_be_packed_says_why_and_leaves_nothing(
        repos, write_recipe, mini_table, good_recipe, tmp_path, change, words):
    data = _recipe_data(good_recipe, repos["commit"])
    change(data, repos)
    recipe = _load(write_recipe, mini_table, data)
    with pytest.raises(SourceError) as exc:
        pack(recipe, tmp_path / "out")
    assert words in exc.value.message
    assert "source.git" in exc.value.message
    assert not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize("change, words", [
    (lambda s: s.update(url="https://x.example.invalid/kern-1.0.tar.gz"),
     "has url (a registry sdist) and git, project (a git source)"),
    (lambda s: s.pop("git"), "lacks git"),
    (lambda s: s["git"].update(commit="main"), "is not a full commit id"),
    (lambda s: s["git"].update(repository="http://git.example.invalid/x"), "is not an https URL"),
    (lambda s: s["git"].update(paths=[{"from": "../etc", "to": "."}]), "leaves the tree"),
    (lambda s: s["git"].update(paths=[{"from": "a", "to": "/abs"}]), "leaves the tree"),
    (lambda s: s["git"].update(paths=[{"from": "a", "to": "x"}, {"from": "b", "to": "x/"}]),
     "is the place of a path given before it"),
    (lambda s: s.update(project="other"), "is not the sdist of other 1.0"),
    (lambda s: s["git"].update(reason="git"), "reason is too short"),
])
def test_a_bad_git_source_is_refused_with_the_key_and_the_fix(write_recipe, mini_table,
                                                            good_recipe, change, words):
    data = _recipe_data(good_recipe, "a" * 40)
    change(data["source"])
    with pytest.raises(RecipeError) as exc:
        _load(write_recipe, mini_table, data)
    assert words in str(exc.value)
    assert "fix:" in str(exc.value)


def test_the_flash_attn_3_recipe_is_a_git_source_of_a_whole_commit():
    recipe = load_recipe(Path(__file__).parents[1] / "recipes" / "flash_attn_3")
    git = recipe.source.git
    assert git.repository == "https://github.com/Dao-AILab/flash-attention"
    assert len(git.commit) == 40
    assert [p.submodule for p in git.paths].count("csrc/cutlass") == 2
    assert recipe.abi.python == "abi3" and recipe.abi.torch == "stable"


def test_the_refresh_reads_no_registry_for_a_git_source(tmp_path):
    """No registry lists a git source's releases: the refresh says what it builds and asks
    nothing (a registry call here would fail the test)."""
    from ruamel.yaml.comments import CommentedMap

    from tools.upstream.follow import Proposal, refresh_recipe

    class NoRegistry:
        def project(self, name):
            raise AssertionError(f"asked the registry for {name}")

    recipe = load_recipe(Path(__file__).parents[1] / "recipes" / "flash_attn_3")
    proposal = Proposal()
    assert refresh_recipe(NoRegistry(), recipe, CommentedMap(), "2026-11-29", tmp_path,
                          proposal) is False
    assert proposal.agreement == [
        f"flash_attn_3: builds commit {recipe.source.git.commit[:12]} of "
        "https://github.com/Dao-AILab/flash-attention (a git source: no registry lists its "
        "releases, so a person moves the commit)"]
    assert not proposal.changes and not proposal.notes
