"""tools.sitegen.render: the pages (PEP 503/629/592/658/691/700), their JSON twins, fingerprints, the selector download."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys

from wheelfactory import make_wheel
from index_support import basic  # noqa: F401  (a fixture, used by name)
from index_support import (
    ANY, BASE, FOUND, SO, TAG_311, assert_site_valid, build, load_entry, manifest_wheel, page, project_json,
)

from tools.sitegen import render
from tools.sitegen import templating
from tools.sitegen.ledger_file import load_ledger
from tools.selector.bundle import ZIPAPP_FILE, zipapp_bytes
from tools.selector.facts import parse_facts
from tools.sitegen.selectorfacts import torch_platforms
from tools.plan.table import load_table


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
        f'data-upload-time="{load_ledger(site / "ledger.json")["foo_bar_baz-1.0-py3-none-any.whl"].upload_time}">'
        f'foo_bar_baz-1.0-py3-none-any.whl</a>'
    ) in html
    # PEP 714: the old name, which pip 22.3 to 23.1 break on, is never sent.
    assert "dist-info-metadata" not in html
    # The yank reason is escaped like any attribute value.
    assert 'data-yanked="broken &lt;b&gt;"' in html


def test_every_html_page_declares_utf8_and_carries_upload_times(basic):
    """A host that sends bare ``text/html`` must not garble a non-ASCII yank reason: every page
    says its charset; each link carries its PEP 700 upload time the way uv reads it in HTML
    (``data-upload-time``, the same value as the JSON's ``upload-time``)."""
    site, _ = basic
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 4
    for path in pages:
        head = path.read_text().split("</head>", 1)[0]
        assert '<meta charset="utf-8">' in head, path
    html = page(site, "simple/flash-attn/index.html")
    data = project_json(site, "simple/flash-attn/index.json")
    times = re.findall(r'data-upload-time="([^"]+)"', html)
    assert times and times == [f["upload-time"] for f in data["files"]]


def test_local_version_plus_is_percent_encoded_in_urls(basic):
    site, _ = basic
    data = project_json(site, "simple/flash-attn/index.json")
    assert data["files"][0]["url"] == f"{BASE}/flash_attn-2.8.3%2Bcu128.torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl"


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


def test_a_template_change_renders_every_page_again(tmp_path, monkeypatch):
    templates = tmp_path / "templates"
    shutil.copytree(templating.TEMPLATES, templates)
    monkeypatch.setattr(templating, "TEMPLATES", templates)
    templating.jinja_env.cache_clear()
    render.render_identity.cache_clear()
    try:
        make_wheel(tmp_path / "wheels", "demo", "1.0", tag=ANY)
        build(tmp_path)
        assert build(tmp_path, init_ledger=False).reused_pages == 2
        tpl = templates / "simple_project.html"
        tpl.write_text(tpl.read_text().replace("<h1>Links for", "<h1>Files of"))
        templating.jinja_env.cache_clear()
        render.render_identity.cache_clear()
        assert build(tmp_path, init_ledger=False).reused_pages == 0
        assert "<h1>Files of demo</h1>" in page(tmp_path / "site", "simple/demo/index.html")
    finally:
        templating.jinja_env.cache_clear()
        render.render_identity.cache_clear()


def test_file_json_is_what_json_dumps_would_say():
    e = load_entry("ext-1.0+cu128.torch2.8-py3-none-any.whl", None)._replace(requires_python=">=3.9")
    for reason, yanked in ((None, False), ("", True), ('"quoted" <r>', '"quoted" <r>')):
        assert json.loads(render._file_json(e, reason)) == {
            "filename": e.filename, "url": e.url, "hashes": {"sha256": e.sha256},
            "requires-python": ">=3.9", "core-metadata": {"sha256": e.metadata_sha256},
            "yanked": yanked, "size": e.size,
            "upload-time": e.upload_time,
            "_cuwheels": {"cuda": None, "torch": None, "cxx11_abi": None, "archs": None},
        }


def test_json_pages_carry_cuwheels_build_data(tmp_path):
    fn = manifest_wheel(tmp_path)
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
    # Every file says what the index knows of it: a pure-Python wheel, no variant and no GPU code.
    assert project_json(site, "simple/pure/index.json")["files"][0]["_cuwheels"] == {
        "cuda": None, "torch": None, "cxx11_abi": None, "archs": None}
    assert load_ledger(tmp_path / "ledger.json")[pure].archs is None
    assert "_cuwheels" not in page(site, "simple/ext/index.html")
    assert_site_valid(site)


def test_page_fingerprints_include_the_page_format(monkeypatch):
    before = render.render_identity()
    render.render_identity.cache_clear()
    monkeypatch.setattr(render, "PAGE_FORMAT", render.PAGE_FORMAT + 1)
    try:
        assert render.render_identity() != before
    finally:
        render.render_identity.cache_clear()


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
    fn = manifest_wheel(tmp_path)
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


def test_selector_json_says_which_torch_builds_exist_per_platform(tmp_path):
    # The selector explains a CPU-only PyPI torch from this: "no aarch64 CUDA build of torch
    # 2.10 on PyPI: use PyTorch's cu128 index".
    make_wheel(tmp_path / "wheels", "pure", "1.0", tag=ANY)
    build(tmp_path)
    doc = json.loads(page(tmp_path / "site", "selector.json"))
    assert doc["min_driver"]["13.0"] == "580"  # the selector's own part, as before
    table = load_table()
    assert doc["torch_platforms"] == torch_platforms(table)
    assert doc["torch_platforms"]["2.10"]["linux_aarch64"] == {"pypi_cuda": None, "cuda": ["12.8"]}
    assert doc["torch_platforms"]["2.14"]["linux_aarch64"] == {"pypi_cuda": "13.0", "cuda": ["13.0"]}
    assert doc["torch_platforms"]["2.14"]["linux_x86_64"]["pypi_cuda"] == "13.0"
    assert all(p["win_amd64"]["pypi_cuda"] is None for p in doc["torch_platforms"].values())
    assert list(doc["torch_platforms"]) == list(table.torch)  # oldest first
    parse_facts(doc, "selector.json")  # the selector still reads it


def test_json_in_a_script_element_cannot_close_it():
    """The picker's facts sit in a <script type="application/json">: no value may end it."""
    text = str(render.script_json({"name": "</script><b>&"}))
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"name": "</script><b>&"}
