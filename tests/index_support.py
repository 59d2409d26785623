"""What the index tests share: a build with test defaults, page readers, an independent client's
check of every page, and small fixtures (a basic site, a wheel with a build manifest)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from pypi_simple import IndexPage, ProjectPage, RepositoryPage
from wheelfactory import make_wheel

from tools.sitegen import generate as idx
from tools.core.variant import Variant

NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)


BASE = "https://files.example/v1"


ANY = "py3-none-any"


def build(tmp_path: Path, **kwargs) -> idx.IndexReport:
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
    return idx.build_index(idx.IndexRun(**args))


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


def yank_file(tmp_path: Path, mapping: dict) -> Path:
    path = tmp_path / "yanked.yaml"
    path.write_text("\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in mapping.items()) + "\n")
    return path


def load_entry(filename: str, variant: Variant | None):
    """A ledger entry for ``filename`` with placeholder hashes, for tests of pure functions."""
    from tools.sitegen.ledger_file import Entry

    return Entry(filename, "ext", filename.split("-")[1], f"{BASE}/{filename}", "0" * 64, 1, "t", None, "1" * 64, variant)


def snapshot(site: Path) -> dict:
    return {p.relative_to(site): p.read_bytes() for p in site.rglob("*") if p.is_file()}


SO = "ext/_C.cpython-311-x86_64-linux-gnu.so"


FOUND = {SO: {"ptx": [], "sass": ["80", "90"]}}


TAG_311 = "cp311-cp311-manylinux_2_28_x86_64"


def manifest_wheel(tmp_path: Path) -> str:
    return make_wheel(tmp_path / "wheels", "ext", "1.0", local="cu128.torch2.8", tag=TAG_311,
                      manifest={"cuda": "12.8", "torch": "2.8.0", "cxx11_abi": True,
                                "archs": {"requested": ["80", "90"], "found": FOUND}}).name


@pytest.fixture
def basic(tmp_path):
    w = tmp_path / "wheels"
    make_wheel(w, "Foo.Bar_baz", "1.0", tag=ANY, requires_python=">=3.9,<4")
    make_wheel(w, "Foo.Bar_baz", "1.1", tag=ANY, requires_python=">=3.9,<4")
    make_wheel(w, "flash-attn", "2.8.3", local="cu128.torch2.8", requires_python=">=3.9")
    report = build(tmp_path, yanked_path=yank_file(tmp_path, {"foo_bar_baz-1.1-py3-none-any.whl": "broken <b>"}))
    return tmp_path / "site", report
