"""tools.index: the pages, the variant indexes, the ledger rules, validation and atomic output.

Clients (pip, uv) installing from the served index are in test_serve.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from pypi_simple import IndexPage, ProjectPage, RepositoryPage
from wheelfactory import make_wheel

from tools import ROOT
from tools import digest
from tools import index as idx
from tools.errors import IndexBuildError
from tools.ledger import load_ledger
from tools.selector.bundle import ZIPAPP_FILE, zipapp_bytes
from tools.variant import Variant

NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
BASE = "https://files.example/v1"
ANY = "py3-none-any"


def build(tmp_path: Path, **kwargs) -> idx.BuildReport:
    """Build with this test's defaults: wheels in tmp/wheels, site in tmp/site, a fresh ledger."""
    args = dict(
        wheels_dir=tmp_path / "wheels",
        output_dir=tmp_path / "site",
        base_url=BASE,
        ledger_path=tmp_path / "ledger.json",
        init_ledger=True,
        now=NOW,
    )
    args.update(kwargs)
    Path(args["wheels_dir"]).mkdir(parents=True, exist_ok=True)
    return idx.build_index(**args)


def page(site: Path, rel: str) -> str:
    return (site / rel).read_text(encoding="utf-8")


def project_json(site: Path, rel: str) -> dict:
    return json.loads(page(site, rel))


def listed(site: Path, prefix: str, project: str) -> list[str]:
    """File names on ``<prefix>simple/<project>/`` (empty when the page doesn't exist)."""
    path = site / prefix / "simple" / project / "index.json"
    if not path.exists():
        return []
    return [f["filename"] for f in json.loads(path.read_text())["files"]]


def assert_site_valid(site: Path) -> None:
    """Every page of the site parses with pypi-simple and agrees with its JSON twin."""
    roots = [p for p in site.rglob("simple/index.html")]
    assert roots, f"no simple/ index under {site}"
    for root_html in roots:
        base = f"https://site.example/{root_html.parent.relative_to(site).as_posix()}/"
        repo = RepositoryPage.from_html(root_html.read_text(), base_url=base)
        assert repo.repository_version == "1.1"
        names = IndexPage.from_html(root_html.read_text()).projects
        names_json = IndexPage.from_json_data(json.loads((root_html.parent / "index.json").read_text())).projects
        assert names == names_json and len(names) == len(repo.links)
        for link in repo.links:
            href = link.attrs["href"]
            assert href.endswith("/") and href[:-1] == canonicalize_name(href[:-1])
            html = root_html.parent / href / "index.html"
            proj = ProjectPage.from_html(href[:-1], html.read_text(), base_url=base + href)
            proj_json = ProjectPage.from_json_data(json.loads((html.parent / "index.json").read_text()), base_url=base + href)
            assert proj.repository_version == proj_json.repository_version == "1.1"
            assert [p.filename for p in proj.packages] == [p.filename for p in proj_json.packages]
            for a, b in zip(proj.packages, proj_json.packages):
                assert a.digests == b.digests and a.digests["sha256"]
                assert a.metadata_digests == b.metadata_digests and a.has_metadata
                assert a.requires_python == b.requires_python
                assert a.is_yanked == b.is_yanked and a.yanked_reason == b.yanked_reason
                assert b.size and b.upload_time


# --------------------------------------------------------------------------- pages


@pytest.fixture
def basic(tmp_path):
    w = tmp_path / "wheels"
    make_wheel(w, "Foo.Bar_baz", "1.0", tag=ANY, requires_python=">=3.9,<4")
    make_wheel(w, "Foo.Bar_baz", "1.1", tag=ANY, requires_python=">=3.9,<4")
    make_wheel(w, "flash-attn", "2.8.3", local="cu128.torch2.8", requires_python=">=3.9")
    report = build(tmp_path, yanked_path=_yank(tmp_path, {"foo_bar_baz-1.1-py3-none-any.whl": "broken <b>"}))
    return tmp_path / "site", report


def _yank(tmp_path: Path, mapping: dict) -> Path:
    path = tmp_path / "yanked.yaml"
    path.write_text("\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in mapping.items()) + "\n")
    return path


def test_root_page_lists_normalized_names_with_trailing_slashes(basic):
    site, report = basic
    html = page(site, "simple/index.html")
    assert '<a href="foo-bar-baz/">Foo.Bar_baz</a>' in html
    assert '<a href="flash-attn/">flash-attn</a>' in html
    assert '<meta name="pypi:repository-version" content="1.1">' in html
    assert report.projects == 2 and report.files == 3


def test_project_page_links(basic):
    site, _ = basic
    html = page(site, "simple/foo-bar-baz/index.html")
    wheel = site.parent / "wheels" / "foo_bar_baz-1.0-py3-none-any.whl"
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    meta_sha = hashlib.sha256((wheel.parent / (wheel.name + ".metadata")).read_bytes()).hexdigest()
    assert (
        f'<a href="{BASE}/foo_bar_baz-1.0-py3-none-any.whl#sha256={sha}" '
        f'data-requires-python="&gt;=3.9,&lt;4" data-core-metadata="sha256={meta_sha}" '
        f'data-dist-info-metadata="sha256={meta_sha}">foo_bar_baz-1.0-py3-none-any.whl</a>'
    ) in html
    # The yank reason is escaped like any attribute value.
    assert 'data-yanked="broken &lt;b&gt;"' in html


def test_local_version_plus_is_percent_encoded_in_urls(basic):
    site, _ = basic
    data = project_json(site, "simple/flash-attn/index.json")
    assert data["files"][0]["url"] == f"{BASE}/flash_attn-2.8.3%2Bcu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl"


def test_metadata_file_is_the_wheels_metadata_beside_it(basic):
    site, _ = basic
    wheel = site.parent / "wheels" / "flash_attn-2.8.3+cu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl"
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read("flash_attn-2.8.3+cu128.torch2.8.dist-info/METADATA")
    assert (wheel.parent / (wheel.name + ".metadata")).read_bytes() == metadata
    entry = project_json(site, "simple/flash-attn/index.json")["files"][0]
    assert entry["core-metadata"] == entry["dist-info-metadata"] == {"sha256": hashlib.sha256(metadata).hexdigest()}


@pytest.mark.parametrize("jobs", [1, 2])
def test_one_release_for_several_pythons_shares_one_metadata_file(tmp_path, monkeypatch, jobs):
    # Same METADATA, so one file and hard links to it: one per process that read some of them
    # (each worker links only to its own). Each is still the right METADATA, the one the page's
    # data-core-metadata hash describes.
    import zipfile

    w = tmp_path / "wheels"
    pythons = ("cp310", "cp311", "cp312")
    wheels = [make_wheel(w, "ext", "1.0", local="cu128.torch2.8", tag=f"{py}-{py}-manylinux_2_28_x86_64")
              for py in pythons]
    other = make_wheel(w, "ext", "1.1", local="cu128.torch2.8", tag="cp312-cp312-manylinux_2_28_x86_64")
    monkeypatch.setattr(digest, "PARALLEL_MIN_BYTES", 0)  # with jobs=2: workers, as for a large batch
    build(tmp_path, jobs=jobs)
    inodes = {(st.st_dev, st.st_ino): st.st_nlink for st in (os.stat(f"{p}.metadata") for p in wheels)}
    assert len(inodes) <= jobs and sum(inodes.values()) == len(pythons)
    if jobs == 1:
        assert list(inodes.values()) == [len(pythons)]
    assert os.stat(f"{other}.metadata").st_nlink == 1
    files = {f["filename"]: f for f in project_json(tmp_path / "site", "cu128/torch2.8/simple/ext/index.json")["files"]}
    for wheel in [*wheels, other]:
        data = Path(f"{wheel}.metadata").read_bytes()
        with zipfile.ZipFile(wheel) as zf:
            assert data == zf.read(f"ext-{wheel.name.split('-')[1]}.dist-info/METADATA")
        assert files[wheel.name]["core-metadata"] == {"sha256": hashlib.sha256(data).hexdigest()}


def test_json_pages_are_pep691_api_1_1(basic):
    site, _ = basic
    root = project_json(site, "simple/index.json")
    assert root == {"meta": {"api-version": "1.1"}, "projects": [{"name": "flash-attn"}, {"name": "Foo.Bar_baz"}]}
    data = project_json(site, "simple/foo-bar-baz/index.json")
    assert data["meta"] == {"api-version": "1.1"} and data["name"] == "foo-bar-baz"
    assert sorted(data["versions"]) == ["1.0", "1.1"]
    wheel = site.parent / "wheels" / "foo_bar_baz-1.0-py3-none-any.whl"
    first, second = data["files"]
    assert first["size"] == wheel.stat().st_size
    assert first["upload-time"] == "2026-01-02T03:04:05.678901Z"
    assert first["hashes"] == {"sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}
    assert first["requires-python"] == ">=3.9,<4"
    assert first["yanked"] is False and second["yanked"] == "broken <b>"


def test_every_page_parses_with_an_independent_client(basic):
    assert_site_valid(basic[0])


def test_no_requires_python_attribute_when_the_wheel_has_none(tmp_path):
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    build(tmp_path)
    assert "data-requires-python" not in page(tmp_path / "site", "simple/demo/index.html")
    assert "requires-python" not in project_json(tmp_path / "site", "simple/demo/index.json")["files"][0]


# --------------------------------------------------------------------------- variant indexes


@pytest.mark.parametrize(
    "local, manifest, index",
    [
        ("cu130.torch2.13", None, "cu130/torch2.13"),  # our label
        ("cu128torch2.8", None, "cu128/torch2.8"),  # no separator
        ("cu.12.8.torch.2.10", None, "cu128/torch2.10"),  # dotted
        ("pt28cu126", None, "cu126/torch2.8"),  # PyG
        ("cu12torch2.8cxx11abiTRUE", None, "cu12/torch2.8"),  # Dao-AILab: any CUDA 12.x
        (None, {"cuda": "12.9", "torch": "2.8.0"}, "cu129/torch2.8"),  # manifest only
        ("cu129.torch2.8", {"cuda": "12.9", "torch": "2.8.0", "cxx11_abi": True}, "cu129/torch2.8"),
    ],
)
def test_variant_comes_from_manifest_or_label(tmp_path, local, manifest, index):
    fn = make_wheel(tmp_path / "wheels", "ext", "1.0", local=local, manifest=manifest).name
    report = build(tmp_path)
    assert report.variant_indexes == (index,)
    assert listed(tmp_path / "site", index + "/", "ext") == [fn]
    assert listed(tmp_path / "site", "", "ext") == [fn]


@pytest.mark.parametrize("local", [None, "cpu", "post1"])
def test_wheels_without_cuda_identity_are_only_in_the_combined_index(tmp_path, local):
    make_wheel(tmp_path / "wheels", "pure", "1.0", local=local, tag=ANY)
    report = build(tmp_path)
    assert report.variant_indexes == ()
    assert len(listed(tmp_path / "site", "", "pure")) == 1


def test_manifest_wins_over_an_unparsable_label(tmp_path):
    make_wheel(tmp_path / "wheels", "ext", "1.0", local="build7", manifest={"cuda": "13.0", "torch": "2.13.0"})
    assert build(tmp_path).variant_indexes == ("cu130/torch2.13",)


def test_each_torch_gets_its_own_index(tmp_path):
    w = tmp_path / "wheels"
    for label in ("cu128.torch2.8", "cu128.torch2.9", "cu128.torch2.10"):
        make_wheel(w, "ext", "1.0", local=label)
    report = build(tmp_path)
    # Numeric order: torch2.10 after torch2.9.
    assert report.variant_indexes == ("cu128/torch2.8", "cu128/torch2.9", "cu128/torch2.10")
    for label in ("2.8", "2.9", "2.10"):
        assert listed(tmp_path / "site", f"cu128/torch{label}/", "ext") == [
            f"ext-1.0+cu128.torch{label}-cp311-cp311-manylinux_2_28_x86_64.whl"
        ]


def test_any_cuda12_wheels_join_the_exact_12x_indexes_of_their_torch(tmp_path):
    w = tmp_path / "wheels"
    dao = make_wheel(w, "flash-attn", "2.8.3", local="cu12torch2.8cxx11abiTRUE").name
    dao312 = make_wheel(w, "flash-attn", "2.8.3", local="cu12torch2.8cxx11abiTRUE", tag="cp312-cp312-linux_x86_64").name
    ours = make_wheel(w, "flash-attn", "2.8.3", local="cu128.torch2.8").name  # exact build, cp311 only
    other = make_wheel(w, "causal-conv1d", "1.6", local="cu126.torch2.8").name  # makes cu126/torch2.8 exist
    make_wheel(w, "flash-attn", "2.8.3", local="cu130.torch2.8")  # CUDA 13: not a 12.x index
    report = build(tmp_path)
    site = tmp_path / "site"
    assert report.variant_indexes == ("cu12/torch2.8", "cu126/torch2.8", "cu128/torch2.8", "cu130/torch2.8")
    assert listed(site, "cu12/torch2.8/", "flash-attn") == [dao, dao312]
    assert listed(site, "cu126/torch2.8/", "flash-attn") == [dao, dao312]
    assert listed(site, "cu126/torch2.8/", "causal-conv1d") == [other]
    # cu128 has an exact cp311 build: that one wins; cp312 only exists as the generic wheel.
    assert sorted(listed(site, "cu128/torch2.8/", "flash-attn")) == sorted([ours, dao312])
    assert dao not in listed(site, "cu130/torch2.8/", "flash-attn")
    assert not (site / "cu129").exists()  # no index is invented for a CUDA nothing was built for


@pytest.mark.parametrize(
    "local, index",
    [
        ("cu12torch2.8cxx11abiTRUE", "cu12/torch2.8"),  # torch >= 2.7: C++11 ABI
        ("cu12torch2.8cxx11abiFALSE", None),
        ("cu12torch2.6cxx11abiFALSE", "cu12/torch2.6"),  # torch 2.6 on PyPI: pre-C++11 ABI
        ("cu12torch2.6cxx11abiTRUE", None),
        ("cu124.torch2.6.cxx11abi0", "cu124/torch2.6"),
        ("cu126.torch2.6", "cu126/torch2.6"),  # no ABI stated: trusted
    ],
)
def test_cxx11_abi_must_match_the_official_torch(tmp_path, local, index):
    fn = make_wheel(tmp_path / "wheels", "ext", "1.0", local=local).name
    report = build(tmp_path)
    assert report.variant_indexes == ((index,) if index else ())
    assert listed(tmp_path / "site", "", "ext") == [fn]


def test_official_abi_rule_agrees_with_the_global_table():
    from tools.table import load_table

    for series, torch in load_table().torch.items():
        assert idx.official_cxx11_abi(torch.pypi_cuda, series) == torch.cxx11_abi, series


def test_official_abi_table():
    assert idx.official_cxx11_abi("12.8", "2.7") and idx.official_cxx11_abi("13.0", "2.13")
    assert idx.official_cxx11_abi("12.6", "2.6") and not idx.official_cxx11_abi("12.4", "2.6")
    assert not idx.official_cxx11_abi("12", "2.6")


def test_place_variants_is_pure():
    e = load_entry("ext-1.0+cu128.torch2.8-py3-none-any.whl", Variant("12.8", "2.8"))
    assert idx.place_variants([e]) == {Variant("12.8", "2.8"): [e]}


def load_entry(filename: str, variant: Variant | None):
    from tools.ledger import Entry

    return Entry(filename, "ext", filename.split("-")[1], f"{BASE}/{filename}", "0" * 64, 1, "t", None, "1" * 64, variant)


# --------------------------------------------------------------------------- ledger, incremental


def test_a_new_batch_keeps_everything_published_before(tmp_path):
    w1, w2 = tmp_path / "batch1", tmp_path / "batch2"
    old = make_wheel(w1, "demo", "1.0", tag=ANY).name
    build(tmp_path, wheels_dir=w1)
    later = datetime(2026, 2, 1, tzinfo=timezone.utc)
    new = make_wheel(w2, "demo", "2.0", tag=ANY).name
    report = build(tmp_path, wheels_dir=w2, base_url="https://elsewhere/v2", init_ledger=False, now=later)
    assert report.added == (new,) and report.files == 2
    files = {f["filename"]: f for f in project_json(tmp_path / "site", "simple/demo/index.json")["files"]}
    assert files[old]["url"] == f"{BASE}/{old}"  # where it was published, not the new base URL
    assert files[old]["upload-time"] == "2026-01-02T03:04:05.678901Z"
    assert files[new]["url"] == f"https://elsewhere/v2/{new}"
    assert files[new]["upload-time"] == "2026-02-01T00:00:00.000000Z"
    assert sorted(load_ledger(tmp_path / "ledger.json")) == sorted([old, new])
    assert_site_valid(tmp_path / "site")


def test_ledger_holds_everything_needed_to_render(tmp_path):
    make_wheel(tmp_path / "wheels", "ext", "1.0", local="cu128.torch2.8", requires_python=">=3.10")
    build(tmp_path)
    site_before = {p.relative_to(tmp_path / "site"): p.read_bytes() for p in (tmp_path / "site").rglob("*") if p.is_file()}
    shutil.rmtree(tmp_path / "wheels")
    build(tmp_path, init_ledger=False)  # no wheel files at all now
    site_after = {p.relative_to(tmp_path / "site"): p.read_bytes() for p in (tmp_path / "site").rglob("*") if p.is_file()}
    assert site_after == site_before


def test_same_name_other_bytes_is_refused_and_nothing_changes(tmp_path):
    w = tmp_path / "wheels"
    fn = make_wheel(w, "demo", "1.0", tag=ANY).name
    build(tmp_path)
    before = {p: p.read_bytes() for p in [tmp_path / "ledger.json", *(tmp_path / "site").rglob("*.html")]}
    (w / fn).unlink()
    (w / (fn + ".metadata")).unlink()
    make_wheel(w, "demo", "1.0", tag=ANY, requires_dist=["numpy"])  # rebuilt, same name
    make_wheel(w, "demo", "2.0", tag=ANY)
    with pytest.raises(IndexBuildError, match="files are immutable") as exc:
        build(tmp_path, init_ledger=False)
    assert fn in str(exc.value) and "published with" in str(exc.value)
    assert {p: p.read_bytes() for p in before} == before
    assert not (w / "demo-2.0-py3-none-any.whl.metadata").exists()  # nothing written for the batch


def test_known_files_are_not_hashed_again(tmp_path, monkeypatch):
    w = tmp_path / "wheels"
    for v in ("1.0", "1.1", "1.2"):
        make_wheel(w, "demo", v, tag=ANY)
    assert build(tmp_path).hashed == 3
    reads = []
    real_hash_files, real_index_wheel = idx.hash_files, idx.index_wheel

    def hash_files(paths, **kw):  # known wheels whose hashes aren't cached
        reads.extend(os.path.basename(p) for p in paths)
        return real_hash_files(paths, **kw)

    def index_wheel(path, **kw):  # new wheels, in this process (a small batch)
        reads.append(os.path.basename(path))
        return real_index_wheel(path, **kw)

    monkeypatch.setattr(idx, "hash_files", hash_files)
    monkeypatch.setattr(idx, "index_wheel", index_wheel)
    make_wheel(w, "demo", "2.0", tag=ANY)
    report = build(tmp_path, init_ledger=False)
    assert report.hashed == 1 and reads == ["demo-2.0-py3-none-any.whl"]
    # A touched file is hashed again, found unchanged, and stays published as it was.
    os.utime(w / "demo-1.0-py3-none-any.whl", ns=(1, 1))
    reads.clear()
    report = build(tmp_path, init_ledger=False)
    assert reads == ["demo-1.0-py3-none-any.whl"] and report.added == () and report.files == 4


def test_missing_metadata_file_of_a_known_wheel_is_restored(tmp_path):
    w = tmp_path / "wheels"
    fn = make_wheel(w, "demo", "1.0", tag=ANY).name
    build(tmp_path)
    content = (w / (fn + ".metadata")).read_bytes()
    (w / (fn + ".metadata")).unlink()
    build(tmp_path, init_ledger=False)
    assert (w / (fn + ".metadata")).read_bytes() == content


def test_yanked_files_are_marked_on_every_page_listing_them(tmp_path):
    w = tmp_path / "wheels"
    fn = make_wheel(w, "ext", "1.0", local="cu128.torch2.8").name
    make_wheel(w, "ext", "1.1", local="cu128.torch2.8")
    build(tmp_path, yanked_path=_yank(tmp_path, {fn: ""}))
    for prefix in ("", "cu128/torch2.8/"):
        html = page(tmp_path / "site", f"{prefix}simple/ext/index.html")
        assert html.count("data-yanked") == 1 and 'data-yanked=""' in html
        yanked = {f["filename"]: f["yanked"] for f in project_json(tmp_path / "site", f"{prefix}simple/ext/index.json")["files"]}
        assert yanked[fn] is True  # no reason: JSON says true
        assert sum(1 for v in yanked.values() if v) == 1


def test_yank_list_errors(tmp_path):
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    with pytest.raises(IndexBuildError, match="never published: demo-9.0"):
        build(tmp_path, yanked_path=_yank(tmp_path, {"demo-9.0-py3-none-any.whl": "typo"}))
    with pytest.raises(IndexBuildError, match="yank list .*nope.yaml does not exist"):
        build(tmp_path, yanked_path=tmp_path / "nope.yaml")
    (tmp_path / "yanked.yaml").write_text("- a list\n")
    with pytest.raises(IndexBuildError, match="must be a mapping"):
        build(tmp_path, yanked_path=tmp_path / "yanked.yaml")


def test_the_repository_yank_list_and_ledger_start_empty():
    assert idx.load_yanked(ROOT / "index" / "yanked.yaml") == {}
    assert load_ledger(ROOT / "index" / "ledger.json") == {}


def test_removal_is_explicit(tmp_path):
    w = tmp_path / "wheels"
    gone = make_wheel(w, "demo", "1.0", tag=ANY).name
    make_wheel(w, "demo", "2.0", tag=ANY)
    build(tmp_path)
    # A ledger that lost an entry (a wrong --ledger, a bad merge) can't shrink the site.
    shutil.rmtree(w)
    with pytest.raises(IndexBuildError, match="publishes 2 file.*the ledger doesn.t have: demo-1.0") as exc:
        build(tmp_path, ledger_path=tmp_path / "other.json")
    assert "--remove" in str(exc.value)
    report = build(tmp_path, init_ledger=False, remove=[gone])
    assert report.removed == (gone,) and report.files == 1
    assert gone not in load_ledger(tmp_path / "ledger.json")
    assert listed(tmp_path / "site", "", "demo") == ["demo-2.0-py3-none-any.whl"]
    with pytest.raises(IndexBuildError, match="no such file"):
        build(tmp_path, init_ledger=False, remove=["nope-1.0-py3-none-any.whl"])


def test_missing_ledger_is_refused_without_init(tmp_path):
    with pytest.raises(IndexBuildError, match="does not exist"):
        build(tmp_path, init_ledger=False)
    assert not (tmp_path / "site").exists()


# --------------------------------------------------------------------------- validation


def test_bad_wheels_are_named_and_left_out_and_the_rest_is_indexed(tmp_path, capsys):
    w = tmp_path / "wheels"
    good = make_wheel(w, "good", "1.0", tag=ANY).name
    make_wheel(w, "renamed", "1.0", tag=ANY, metadata_name="other")
    make_wheel(w, "relabelled", "1.0", local="cu128.torch2.8", tag=ANY, metadata_version="1.0")
    make_wheel(w, "nometa", "1.0", tag=ANY, omit_metadata=True)
    make_wheel(w, "liar", "1.0", local="cu128.torch2.8", tag=ANY, manifest={"cuda": "13.0", "torch": "2.13"})
    (w / "broken-1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 not really a zip")
    (w / "not_a_wheel.whl").write_bytes(b"")
    (w / "demo-1.0.tar.gz").write_bytes(b"")
    rc = idx.main([
        "--wheels-dir", str(w), "--output-dir", str(tmp_path / "site"), "--base-url", BASE,
        "--ledger", str(tmp_path / "ledger.json"), "--init-ledger",
    ])
    err = capsys.readouterr().err
    assert rc == 11
    reasons = dict(re.findall(r"^  (\S+): (.*)$", err, re.M))
    assert reasons == {
        "broken-1.0-py3-none-any.whl": reasons["broken-1.0-py3-none-any.whl"],
        "demo-1.0.tar.gz": "not a wheel: only .whl files are indexed",
        "liar-1.0+cu128.torch2.8-py3-none-any.whl": reasons["liar-1.0+cu128.torch2.8-py3-none-any.whl"],
        "nometa-1.0-py3-none-any.whl": reasons["nometa-1.0-py3-none-any.whl"],
        "not_a_wheel.whl": reasons["not_a_wheel.whl"],
        "relabelled-1.0+cu128.torch2.8-py3-none-any.whl": reasons["relabelled-1.0+cu128.torch2.8-py3-none-any.whl"],
        "renamed-1.0-py3-none-any.whl": reasons["renamed-1.0-py3-none-any.whl"],
    }
    assert reasons["broken-1.0-py3-none-any.whl"].startswith("unreadable zip")
    assert "build manifest says CUDA 13.0" in reasons["liar-1.0+cu128.torch2.8-py3-none-any.whl"]
    assert reasons["nometa-1.0-py3-none-any.whl"].startswith("no METADATA")
    assert reasons["not_a_wheel.whl"].startswith("invalid wheel filename")
    assert "METADATA Version '1.0' disagrees" in reasons["relabelled-1.0+cu128.torch2.8-py3-none-any.whl"]
    assert "METADATA Name 'other' disagrees" in reasons["renamed-1.0-py3-none-any.whl"]
    assert sorted(load_ledger(tmp_path / "ledger.json")) == [good]
    assert listed(tmp_path / "site", "", "good") == [good]
    assert_site_valid(tmp_path / "site")


def test_unusual_zips_go_through_the_zipfile_module(tmp_path):
    w = tmp_path / "wheels"
    prefixed = make_wheel(w, "prefixed", "1.0", tag=ANY)
    prefixed.write_bytes(b"#!/bin/sh\n" + prefixed.read_bytes())  # data before the archive: still a zip
    corrupt = make_wheel(w, "corrupt", "1.0", tag=ANY)
    data = bytearray(corrupt.read_bytes())
    # The first occurrence of the name is METADATA's local header; its deflated bytes follow.
    meta_at = data.index(b"corrupt-1.0.dist-info/METADATA") + len("corrupt-1.0.dist-info/METADATA")
    data[meta_at + 2] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    report = build(tmp_path)
    assert [r.filename for r in report.rejected] == [corrupt.name]
    assert report.rejected[0].reason.startswith("unreadable zip")
    assert listed(tmp_path / "site", "", "prefixed") == [prefixed.name]


def test_main_exits_zero_when_everything_is_indexed(tmp_path, capsys):
    make_wheel(tmp_path / "w", "good", "1.0", tag=ANY)
    rc = idx.main(["--wheels-dir", str(tmp_path / "w"), "--output-dir", str(tmp_path / "site"),
                   "--base-url", BASE, "--ledger", str(tmp_path / "l.json"), "--init-ledger"])
    assert rc == 0
    assert "1 files in 1 projects" in capsys.readouterr().out


def test_worker_processes_index_exactly_what_one_process_does(tmp_path, monkeypatch):
    w = tmp_path / "wheels"
    for v in range(12):
        make_wheel(w, "ext", f"1.{v}", local="cu128.torch2.8", manifest={"cuda": "12.8", "torch": "2.8"})
    make_wheel(w, "renamed", "1.0", tag=ANY, metadata_name="other")
    (w / "broken-1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 not really a zip")
    (w / "bad name.whl").write_bytes(b"")
    monkeypatch.setattr(digest, "PARALLEL_MIN_BYTES", 0)  # a small batch, as if it were a large one
    started = []
    real_index, real_hash = idx.map_in_workers, digest.map_in_workers
    monkeypatch.setattr(idx, "map_in_workers", lambda target, items, **kw: started.append((target, len(items), kw["workers"]))
                        or real_index(target, items, **kw))
    monkeypatch.setattr(digest, "map_in_workers", lambda target, items, **kw: started.append((target, len(items), kw["workers"]))
                        or real_hash(target, items, **kw))
    reports = {}
    for jobs in (1, 2):
        reports[jobs] = build(tmp_path, output_dir=tmp_path / f"site{jobs}",
                              ledger_path=tmp_path / f"ledger{jobs}.json", jobs=jobs)
    assert started == [("tools.wheelread:indexer", 15, 2)]  # jobs=1 started none
    assert reports[1].rejected == reports[2].rejected and len(reports[2].rejected) == 3
    assert reports[2].hashed == 12
    assert (tmp_path / "ledger1.json").read_text() == (tmp_path / "ledger2.json").read_text()
    assert _snapshot(tmp_path / "site1") == _snapshot(tmp_path / "site2")
    # Known wheels whose hashes aren't cached are compared in the workers too.
    os.unlink(tmp_path / ".site2.hashcache.json")
    assert build(tmp_path, output_dir=tmp_path / "site2", ledger_path=tmp_path / "ledger2.json",
                 init_ledger=False, jobs=2).hashed == 12
    assert started[1:] == [("tools.digest:hasher", 12, 2),
                           ("tools.wheelread:indexer", 3, 2)]  # the rejected files, read again as new


def test_an_error_while_reading_a_batch_stops_the_workers_at_once(tmp_path, monkeypatch):
    import subprocess as sp

    from tools import workers

    w = tmp_path / "wheels"
    for v in range(300):
        make_wheel(w, "ext", f"1.{v}", tag=ANY)
    monkeypatch.setattr(digest, "PARALLEL_MIN_BYTES", 0)  # a small batch, as if it were a large one
    started = []

    class Popen(sp.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

    def parse_indexed(line, filename):
        raise IndexBuildError(f"{filename}: stop here")

    monkeypatch.setattr(workers.subprocess, "Popen", Popen)
    monkeypatch.setattr(idx, "parse_indexed", parse_indexed)
    try:
        build(tmp_path, jobs=2)
    except IndexBuildError as exc:
        # Checked while the traceback (and so the reading loop's frame) is still alive: the
        # workers were stopped and waited for by the error itself, not by garbage collection.
        assert "stop here" in str(exc)
        assert len(started) == 2 and all(proc.returncode is not None for proc in started)
    else:
        pytest.fail("the build went on after an error")
    assert not (tmp_path / "ledger.json").exists() and not (tmp_path / "site").exists()


def test_jobs_must_be_a_positive_number(tmp_path, capsys):
    make_wheel(tmp_path / "w", "good", "1.0", tag=ANY)
    with pytest.raises(SystemExit) as exc:
        idx.main(["--wheels-dir", str(tmp_path / "w"), "--output-dir", str(tmp_path / "site"),
                  "--base-url", BASE, "--ledger", str(tmp_path / "l.json"), "--init-ledger", "--jobs", "0"])
    assert exc.value.code == 2
    assert "--jobs: '0' is not a number of processes" in capsys.readouterr().err
    assert not (tmp_path / "site").exists()


# --------------------------------------------------------------------------- atomic output


def _snapshot(site: Path) -> dict:
    return {p.relative_to(site): p.read_bytes() for p in site.rglob("*") if p.is_file()}


def test_a_failed_write_leaves_the_previous_site(tmp_path, monkeypatch):
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    build(tmp_path)
    before = _snapshot(tmp_path / "site")
    make_wheel(tmp_path / "wheels", "demo", "2.0", tag=ANY)

    real = idx._WrittenPages.__setitem__
    written = []

    def die_at_the_fifth_page(self, rel, data):
        if len(written) == 5:
            raise KeyboardInterrupt  # as if killed halfway through writing the new site
        written.append(rel)
        real(self, rel, data)

    monkeypatch.setattr(idx._WrittenPages, "__setitem__", die_at_the_fifth_page)
    with pytest.raises(KeyboardInterrupt):
        build(tmp_path, init_ledger=False)
    assert _snapshot(tmp_path / "site") == before
    assert [p.name for p in tmp_path.iterdir() if ".new-" in p.name] == []


def test_fallback_swap_without_renameat2_and_recovery(tmp_path, monkeypatch):
    monkeypatch.setattr(idx, "_exchange", lambda a, b: False)
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    build(tmp_path)
    make_wheel(tmp_path / "wheels", "demo", "2.0", tag=ANY)
    build(tmp_path, init_ledger=False)
    assert len(listed(tmp_path / "site", "", "demo")) == 2
    assert len(listed(tmp_path / ".site.prev", "", "demo")) == 1  # the previous site, kept for a rollback
    # A run killed between the two renames leaves the old site at .site.prev: the next run restores it.
    shutil.rmtree(tmp_path / ".site.prev")
    (tmp_path / ".site.swapping").touch()
    os.rename(tmp_path / "site", tmp_path / ".site.prev")
    (tmp_path / ".site.new-x").mkdir()
    trash = idx.recover(tmp_path / "site")
    assert len(listed(tmp_path / "site", "", "demo")) == 2
    assert [p.name for p in trash] == [".site.new-x"]
    build(tmp_path, init_ledger=False)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".site.")) == [
        ".site.hashcache.json", ".site.lock", ".site.prev",
    ]


def test_a_site_deleted_by_hand_is_not_resurrected(tmp_path):
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    build(tmp_path)
    build(tmp_path, init_ledger=False)  # leaves the previous site at .site.prev
    shutil.rmtree(tmp_path / "site")
    (tmp_path / "ledger.json").unlink()
    shutil.rmtree(tmp_path / "wheels")
    report = build(tmp_path)  # from scratch, on purpose
    assert report.files == 0 and listed(tmp_path / "site", "", "demo") == []


def test_refuses_to_replace_a_directory_it_did_not_make(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "precious.txt").write_text("keep me")
    with pytest.raises(IndexBuildError, match="refusing to replace"):
        build(tmp_path)
    assert (tmp_path / "site" / "precious.txt").read_text() == "keep me"


def test_a_second_concurrent_build_is_refused(tmp_path):
    import fcntl

    with open(tmp_path / ".site.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        with pytest.raises(IndexBuildError, match="another index build"):
            build(tmp_path)


def test_site_survives_being_killed_at_any_moment(tmp_path):
    """SIGKILL a real build at several moments: the site is always the old one or the new one."""
    w = tmp_path / "wheels"
    for i in range(60):
        make_wheel(w, f"proj{i % 6}", f"1.{i}", local=f"cu12{i % 3}.torch2.{7 + i % 2}", tag=ANY)
    cmd = [sys.executable, "-m", "tools.index", "--wheels-dir", str(w), "--output-dir", str(tmp_path / "site"),
           "--base-url", BASE, "--ledger", str(tmp_path / "ledger.json"), "--init-ledger",
]
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=60, capture_output=True)
    extra = 0
    for delay in (0.05, 0.15, 0.25, 0.35, 0.45, 0.6):
        make_wheel(w, "late", f"1.{extra}", tag=ANY)
        extra += 1
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert_site_valid(tmp_path / "site")
        published = set(json.loads((tmp_path / "site" / "ledger.json").read_text())["files"])
        assert published <= set(load_ledger(tmp_path / "ledger.json"))  # the site never lists what the ledger lacks
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=60, capture_output=True)
    assert len(listed(tmp_path / "site", "", "late")) == extra
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".site.")) == [
        ".site.hashcache.json", ".site.lock", ".site.prev",
    ]


# --------------------------------------------------------------------------- incremental rendering


def test_an_incremental_site_is_the_same_as_a_full_render(tmp_path):
    w = tmp_path / "wheels"
    for label in ("cu128.torch2.8", "cu128.torch2.9", "cu12torch2.8cxx11abiTRUE", None):
        make_wheel(w, "ext", "1.0", local=label, tag=ANY)
    make_wheel(w, "other", "1.0", local="cu128.torch2.9", tag=ANY)
    make_wheel(w, "pure", "1.0", tag=ANY)
    build(tmp_path)
    make_wheel(w, "ext", "2.0", local="cu128.torch2.8", tag=ANY)
    yanks = {"other-1.0+cu128.torch2.9-py3-none-any.whl": "bad"}
    report = build(tmp_path, init_ledger=False, yanked_path=_yank(tmp_path, yanks))
    # Rendered again: ext in simple/ and cu128/torch2.8 (a new file), other in simple/ and
    # cu128/torch2.9 (a yank). Reused, HTML and JSON: pure, ext in cu128/torch2.9 and cu12/torch2.8.
    assert report.reused_pages == 6
    full = idx.render_site(load_ledger(tmp_path / "ledger.json"), yanks,
                           ledger_text=(tmp_path / "ledger.json").read_text())
    assert _snapshot(tmp_path / "site") == {Path(k): v for k, v in full.pages.items()}


def test_a_page_rendered_after_being_linked_never_writes_into_the_current_site(tmp_path):
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    build(tmp_path)
    site = tmp_path / "site"
    (site / "simple" / "demo" / "index.html").write_text("edited by hand")  # same fingerprint on record
    (site / "simple" / "demo" / "index.json").unlink()  # so the page pair is rendered after all
    build(tmp_path, init_ledger=False)
    assert (tmp_path / ".site.prev" / "simple" / "demo" / "index.html").read_text() == "edited by hand"
    assert "Links for demo" in page(site, "simple/demo/index.html")
    assert_site_valid(site)


def test_a_template_change_renders_every_page_again(tmp_path, monkeypatch):
    templates = tmp_path / "templates"
    shutil.copytree(idx.TEMPLATES, templates)
    monkeypatch.setattr(idx, "TEMPLATES", templates)
    idx._env.cache_clear()
    idx.render_identity.cache_clear()
    try:
        make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
        build(tmp_path)
        assert build(tmp_path, init_ledger=False).reused_pages == 2
        tpl = templates / "simple_project.html"
        tpl.write_text(tpl.read_text().replace("<h1>Links for", "<h1>Files of"))
        idx._env.cache_clear()
        idx.render_identity.cache_clear()
        assert build(tmp_path, init_ledger=False).reused_pages == 0
        assert "<h1>Files of demo</h1>" in page(tmp_path / "site", "simple/demo/index.html")
    finally:
        idx._env.cache_clear()
        idx.render_identity.cache_clear()


def test_file_json_is_what_json_dumps_would_say():
    e = load_entry("ext-1.0+cu128.torch2.8-py3-none-any.whl", None)._replace(requires_python=">=3.9")
    for reason, yanked in ((None, False), ("", True), ('"quoted" <r>', '"quoted" <r>')):
        assert json.loads(idx._file_json(e, reason)) == {
            "filename": e.filename, "url": e.url, "hashes": {"sha256": e.sha256},
            "requires-python": ">=3.9", "core-metadata": {"sha256": e.metadata_sha256},
            "dist-info-metadata": {"sha256": e.metadata_sha256}, "yanked": yanked, "size": e.size,
            "upload-time": e.upload_time,
        }


def test_a_yank_reason_is_one_line(tmp_path):
    make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
    with pytest.raises(IndexBuildError, match="one line of text"):
        build(tmp_path, yanked_path=_yank(tmp_path, {"demo-1.0-py3-none-any.whl": "a\nb"}))


# --------------------------------------------------------------------------- the page for people


def test_home_page_has_matrix_and_commands(tmp_path):
    w = tmp_path / "wheels"
    make_wheel(w, "flash-attn", "2.8.3", local="cu128.torch2.8")
    make_wheel(w, "flash-attn", "2.8.3", local="cu128.torch2.8", tag="cp312-cp312-manylinux_2_28_x86_64")
    make_wheel(w, "flash-attn", "2.8.2", local="cu128.torch2.8")
    make_wheel(w, "flash-attn", "2.8.3", local="cu130.torch2.13")
    yanked = make_wheel(w, "flash-attn", "2.8.1", local="cu128.torch2.8").name
    build(tmp_path, site_url="https://wheels.example/", yanked_path=_yank(tmp_path, {yanked: "broken"}))
    html = page(tmp_path / "site", "index.html")
    url = "https://wheels.example/cu128/torch2.8/simple/"
    assert ('pip install flash-attn --only-binary flash-attn --extra-index-url '
            '<span class="site">https://wheels.example/</span>cu128/torch2.8/simple/') in html
    assert "uv pip install flash-attn --extra-index-url" in html
    assert '[[tool.uv.index]]\nname = "cuwheels-cu128-torch2.8"' in html
    assert 'flash-attn = { index = "cuwheels-cu128-torch2.8" }' in html
    assert "explicit = true" in html and url.split("/cu")[0] in html
    # 2.8.2 exists for cu128/torch2.8 on 3.11 only; for cu130/torch2.13 not at all.
    row = re.search(r"<tr><td>2\.8\.2</td>(.*?)</tr>", html).group(1)
    assert row == ('<td><span class="py yes">3.11</span><span class="py no">3.12</span></td>'
                   '<td class="none">—</td>')
    row = re.search(r"<tr><td>2\.8\.1</td>(.*?)</tr>", html).group(1)
    assert row.startswith('<td><span class="py yanked" title="yanked">3.11</span><span class="py no">3.12</span>')
    assert "<script>" not in html  # the site URL was given: nothing to fill in


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (Debian: apt-get install chromium)")
def test_home_page_in_a_headless_browser(tmp_path):
    from tools.serve import make_server
    import threading

    w = tmp_path / "wheels"
    for label in ("cu128.torch2.8", "cu130.torch2.13", "cu12torch2.8cxx11abiTRUE"):
        make_wheel(w, "flash-attn", "2.8.3", local=label)
    make_wheel(w, "pure", "1.0", tag=ANY)
    build(tmp_path, base_url="/files")
    server = make_server(tmp_path / "site", w)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run"]
    try:
        dom = subprocess.run(
            [_chromium(), *flags, f"--user-data-dir={tmp_path / 'profile1'}", "--dump-dom", server.url + "/"],
            capture_output=True, text=True, timeout=60,
        ).stdout
        shot = tmp_path / "home.png"
        subprocess.run(
            [_chromium(), *flags, f"--user-data-dir={tmp_path / 'profile2'}", "--window-size=1280,1400",
             f"--screenshot={shot}", server.url + "/"],
            capture_output=True, timeout=60,
        )
    finally:
        server.shutdown()
        server.server_close()
    # Built without --site-url: the page's script fills in its own address.
    assert f'--extra-index-url <span class="site">{server.url}/</span>cu128/torch2.8/simple/' in dom
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (1280, 1400)
    assert len(png) > 20_000  # a blank page compresses to a few KB


# --------------------------------------------------------------------------- build data for the selector

SO = "ext/_C.cpython-311-x86_64-linux-gnu.so"
FOUND = {SO: {"ptx": [], "sass": ["80", "90"]}}
TAG_311 = "cp311-cp311-manylinux_2_28_x86_64"


def _manifest_wheel(tmp_path: Path) -> str:
    return make_wheel(tmp_path / "wheels", "ext", "1.0", local="cu128.torch2.8", tag=TAG_311,
                      manifest={"cuda": "12.8", "torch": "2.8.0", "cxx11_abi": True,
                                "archs": {"requested": ["80", "90"], "found": FOUND}}).name


def test_json_pages_carry_cuwheels_build_data(tmp_path):
    fn = _manifest_wheel(tmp_path)
    labelled = make_wheel(tmp_path / "wheels", "ext", "0.9", local="cu128.torch2.8", tag=TAG_311).name
    pure = make_wheel(tmp_path / "wheels", "pure", "1.0", tag=ANY).name
    build(tmp_path)
    site = tmp_path / "site"
    assert load_ledger(tmp_path / "ledger.json")[fn].archs == FOUND
    want = {"cuda": "12.8", "torch": "2.8", "cxx11_abi": True, "archs": FOUND}
    for rel in ("simple/ext/index.json", "cu128/torch2.8/simple/ext/index.json"):
        files = {f["filename"]: f for f in project_json(site, rel)["files"]}
        assert files[fn]["_cuwheels"] == want
        assert files[labelled]["_cuwheels"] == {"cuda": "12.8", "torch": "2.8", "cxx11_abi": None, "archs": None}
    assert "_cuwheels" not in project_json(site, "simple/pure/index.json")["files"][0]
    assert load_ledger(tmp_path / "ledger.json")[pure].archs is None
    assert "_cuwheels" not in page(site, "simple/ext/index.html")
    assert_site_valid(site)


def test_a_schema_1_ledger_is_upgraded(tmp_path):
    fn = _manifest_wheel(tmp_path)
    build(tmp_path)
    ledger_path, site = tmp_path / "ledger.json", tmp_path / "site"
    doc = json.loads(ledger_path.read_text())
    assert doc["schema"] == 2
    # The same ledger as a schema-1 run wrote it, and its site copy.
    old = '{"schema": 1, "files": {\n' + ",\n".join(
        json.dumps(name) + ": " + json.dumps({k: v for k, v in data.items() if k != "archs"}, sort_keys=True)
        for name, data in sorted(doc["files"].items())
    ) + "\n}}\n"
    ledger_path.write_text(old)
    (site / "ledger.json").write_text(old)
    report = build(tmp_path, init_ledger=False)
    assert report.added == ()
    upgraded = json.loads(ledger_path.read_text())
    assert upgraded["schema"] == 2 and upgraded["files"][fn]["archs"] is None
    assert page(site, "ledger.json") == ledger_path.read_text()
    assert build(tmp_path, init_ledger=False).reused_pages > 0  # and is stable from then on
    assert ledger_path.read_text() == page(site, "ledger.json")


def test_page_fingerprints_include_the_page_format(monkeypatch):
    before = idx.render_identity()
    idx.render_identity.cache_clear()
    monkeypatch.setattr(idx, "PAGE_FORMAT", idx.PAGE_FORMAT + 1)
    try:
        assert idx.render_identity() != before
    finally:
        idx.render_identity.cache_clear()


def test_site_publishes_the_selector(tmp_path):
    make_wheel(tmp_path / "wheels", "pure", "1.0", tag=ANY)
    build(tmp_path, site_url="https://w.example/cuwheels")
    site = tmp_path / "site"
    assert (site / ZIPAPP_FILE).read_bytes() == zipapp_bytes()
    assert json.loads(page(site, "selector.json"))["min_driver"]["13.0"] == "580"
    assert not (site / "select.py").exists()
    home = page(site, "index.html")
    assert "Which index fits my machine?" in home
    text = re.sub(r"<[^>]+>", "", home).replace("&amp;", "&")
    assert ("curl -O https://w.example/cuwheels/cuwheels-select.pyz && "
            "python cuwheels-select.pyz flash-attn --index https://w.example/cuwheels/") in text
    before = {p.relative_to(site): p.read_bytes() for p in site.rglob("*") if p.is_file()}
    build(tmp_path, site_url="https://w.example/cuwheels", init_ledger=False)  # again: byte for byte the same
    assert {p.relative_to(site): p.read_bytes() for p in site.rglob("*") if p.is_file()} == before


def test_no_published_name_shadows_a_standard_library_module(tmp_path):
    """A download saved under a published name must not shadow a module for Python started beside it."""
    make_wheel(tmp_path / "wheels", "pure", "1.0", tag=ANY)
    build(tmp_path)
    for path in (tmp_path / "site").iterdir():
        top = path.name.split(".")[0]
        assert top not in sys.stdlib_module_names, path.name


def test_selector_reads_the_arch_mismatch_from_the_site_without_the_wheel(tmp_path):
    fn = _manifest_wheel(tmp_path)
    build(tmp_path)
    for p in (tmp_path / "wheels").iterdir():
        p.unlink()  # nothing to peek into: the arch data can only come from the pages
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "site" / ZIPAPP_FILE), "ext", "--index", str(tmp_path / "site"),
         "--python-version", "3.11", "--glibc", "2.36", "--torch-version", "2.8.0+cu128", "--cxx11-abi", "true",
         "--cuda-driver", "570.0", "--sm", "120", "--json", "--no-peek"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["fits"] is False
    out = json.dumps(answer)
    assert "has no kernels for sm_120" in out and SO in out and fn in out
    assert "--no-peek" not in out  # the check was done, from the index
