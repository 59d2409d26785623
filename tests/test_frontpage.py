"""tools.sitegen.frontpage: the front page's coverage matrix, commands and missing cells, also as a browser renders them."""

from __future__ import annotations

import contextlib
import copy
import html as htmllib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading

import pytest
import yaml
from conftest import MINI_TABLE
from packaging.tags import parse_tag
from wheelfactory import make_wheel
from index_support import (
    ANY, build, load_entry, page, yank_file,
)

from browser_support import Browser, chromium
from tools import RECIPES_DIR, ROOT
from tools.pipeline.buildreport import BuildReport, ReportedError, write_report
from tools.core.variant import Variant
from tools.plan.cells import plan
from tools.plan.recipes.model import load_all
from tools.plan.table import load_table, version_key
from tools.sitegen.frontpage import load_planned, missing_cells
from tools.sitegen.ledger_file import load_ledger
from tools.sitegen.placement import place_variants


def test_home_page_has_matrix_and_commands(tmp_path):
    w = tmp_path / "wheels"
    make_wheel(w, "flash-attn", "2.8.3", local="cu128.torch2.8")
    make_wheel(w, "flash-attn", "2.8.3", local="cu128.torch2.8", tag="cp312-cp312-manylinux_2_28_x86_64")
    make_wheel(w, "flash-attn", "2.8.2", local="cu128.torch2.8")
    make_wheel(w, "flash-attn", "2.8.3", local="cu130.torch2.13")
    yanked = make_wheel(w, "flash-attn", "2.8.1", local="cu128.torch2.8").name
    build(tmp_path, site_url="https://wheels.example/", yanked_path=yank_file(tmp_path, {yanked: "broken"}))
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
    # The site URL was given: nothing to fill in, and the picker writes commands for that site.
    assert 'querySelectorAll("span.site")' not in html and "<noscript>" not in html
    assert '"site":"https://wheels.example/"' in html


def test_the_page_opens_for_people_links_counts_and_standards_in_the_footer(tmp_path):
    """The page opens with what the index is, counted in words (1 file, not 1 files), and the
    links of tools.core.site (the one setting a fork changes); the PEP list is in the footer."""
    from tools.core import site

    make_wheel(tmp_path / "wheels", "flash-attn", "2.8.3", local="cu128.torch2.8")
    build(tmp_path)
    html = page(tmp_path / "site", "index.html")
    top = html[html.index("<header>"):html.index("</header>")]
    assert "1 file in 1 variant index." in top and "1 files" not in html
    assert "PEP" not in html[:html.index("<footer")]
    footer = html[html.index("<footer"):]
    assert "PEP 503" in footer and "<details><summary>Standards" in footer
    for url in (site.DOCS_URL, site.REPOSITORY_URL, site.ISSUES_URL):
        assert f'href="{url}"' in top and f'href="{url}"' in footer
    # Nowhere else spelled: the templates and the renderer name no address of their own.
    from tools.sitegen import templating
    for path in [*templating.TEMPLATES.iterdir(), ROOT / "tools/sitegen/render.py",
                 ROOT / "tools/sitegen/picker.py"]:
        assert "github" not in path.read_text().lower(), path

    for n in range(2, 4):
        make_wheel(tmp_path / "wheels", "flash-attn", f"2.8.{n + 3}", local="cu130.torch2.13")
    build(tmp_path, init_ledger=False)
    top = page(tmp_path / "site", "index.html").split("</header>")[0]
    assert "3 files in 2 variant indexes." in top


@pytest.mark.parametrize("tags, need", [
    ("cp312-cp312-manylinux_2_28_x86_64", "glibc 2.28 or newer"),
    ("cp312-cp312-manylinux_2_28_aarch64", "glibc 2.28 or newer"),
    ("cp312-cp312-manylinux2014_x86_64", "glibc 2.17 or newer"),
    # a compressed tag set installs from its lowest baseline on
    ("cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.manylinux_2_28_x86_64",
     "glibc 2.17 or newer"),
    ("cp312-cp312-linux_x86_64", "not stated: tagged linux_x86_64"),
    ("cp312-cp312-win_amd64", "none"),
    ("py3-none-any", "none"),
])
def test_the_glibc_a_wheel_needs_from_its_platform_tag(tags, need):
    from tools.sitegen.picker import glibc_needed

    assert glibc_needed(frozenset(parse_tag(tags))) == need


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (Debian: apt-get install chromium)")
def test_home_page_in_a_headless_browser(tmp_path):
    from tools.sitegen.server import make_server
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
    assert f'uv pip install flash-attn --extra-index-url <span class="site">{server.url}/</span>cu130/torch2.13/simple/' in dom
    assert f'url = "<span class="site">{server.url}/</span>cu12/torch2.8/simple/"' in dom
    # The coverage matrix as the browser built it: a column per variant index, then simple/ only.
    tables = re.findall(r"<table>(.*?)</table>", dom, re.S)
    flash = next(t for t in tables if "<code>cu12/torch2.8</code>" in t)
    assert re.findall(r"<th><code>(.*?)</code></th>", flash) == ["cu12/torch2.8", "cu128/torch2.8", "cu130/torch2.13"]
    row = re.search(r"<tr><td>2\.8\.3</td>(.*?)</tr>", flash).group(1)
    assert row.count('<span class="py yes">3.11</span>') == 3
    pure = next(t for t in tables if "<code>simple/ only</code>" in t)
    assert '<tr><td>1.0</td><td><span class="py yes">py3</span></td></tr>' in pure
    assert "<script>" in dom and "span.site" in dom  # the script ran in the page, not removed
    # The screenshot shows a rendered page, not a blank one: many distinct pixel values.
    width, height, pixels = _png_pixels(shot.read_bytes())
    assert (width, height) == (1280, 1400)
    assert len(set(pixels)) > 20, "the screenshot is blank (a page that failed to render)"


NO_CHROMIUM = "chromium is not installed (Debian: apt-get install chromium)"


@contextlib.contextmanager
def _served(site, files):
    """The built site (and its wheels under /files) on 127.0.0.1 for the test's length."""
    from tools.sitegen.server import make_server

    server = make_server(site, files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _picker_site(tmp_path):
    """Wheels of demo-ext in four variant indexes on three platforms; the x86_64 one for
    torch 2.9 and CUDA 12.8 is for this Python, so its command installs here."""
    w = tmp_path / "wheels"
    here = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    make_wheel(w, "demo-ext", "1.0", local="cu128.torch2.9", tag=f"{here}-{here}-manylinux_2_28_x86_64")
    make_wheel(w, "demo-ext", "1.0", local="cu128.torch2.8", tag="cp312-cp312-manylinux_2_17_x86_64")
    make_wheel(w, "demo-ext", "1.0", local="cu130.torch2.10", tag="cp313-cp313-manylinux_2_28_x86_64")
    make_wheel(w, "demo-ext", "1.0", local="cu130.torch2.10", tag="cp313-cp313-manylinux_2_28_aarch64")
    make_wheel(w, "demo-ext", "1.0", local="cu130.torch2.10", tag="cp313-cp313-win_amd64")
    make_wheel(w, "other-ext", "2.0", local="cu130.torch2.10", tag="cp312-cp312-linux_x86_64")
    return w


@pytest.mark.skipif(chromium() is None, reason=NO_CHROMIUM)
def test_the_picker_gives_the_command_of_the_chosen_variant_and_it_installs(tmp_path):
    """A person's clicks in the picker (Linux x86_64, torch 2.9, CUDA 12.8, this Python) show
    that index's pip command, the same line the page's plain section has; pip installs with
    it. A combination with no wheel (Windows, with the same torch) says so."""
    w = _picker_site(tmp_path)
    build(tmp_path, base_url="/files")  # no --site-url: the page's own address is the host
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    with _served(tmp_path / "site", w) as server:
        with Browser(server.url + "/", tmp_path / "profile") as page_:
            page_.wait_for("document.readyState === 'complete' && !document.getElementById('picker').hidden")
            for key, value in (("platform", "linux_x86_64"), ("torch", "2.9"), ("cuda", "12.8"),
                               ("python", python)):
                page_.click(f'label.opt[data-key="{key}"][data-value="{value}"]')
                assert page_.evaluate(f'document.getElementById("pick-{key}-{value}").checked')
            shown = {k: page_.evaluate(f'document.getElementById("picker-{k}").textContent')
                     for k in ("pip", "uv", "select", "index", "glibc")}
            static = page_.evaluate('[...document.getElementById("cuwheels-cu128-torch2.9")'
                                    '.querySelectorAll("pre")].map(e => e.textContent)')
            # Windows with the same torch: nothing there, said plainly, no command shown.
            page_.click('label.opt[data-key="platform"][data-value="win_amd64"]')
            none = page_.evaluate('document.getElementById("picker-none").textContent')
            hidden = page_.evaluate('document.getElementById("picker-result").hidden')
            offered = page_.evaluate('[...document.querySelectorAll("label.opt[data-key=torch]")]'
                                     '.map(e => e.dataset.value)')
        index = f"{server.url}/cu128/torch2.9/simple/"
        assert shown["pip"] == f"pip install demo-ext --only-binary demo-ext --extra-index-url {index}"
        assert shown["pip"] == static[0].strip()  # the plain section's line, the same words
        assert shown["uv"] == f"uv pip install demo-ext --extra-index-url {index}"
        assert shown["select"] == (f"curl -O {server.url}/cuwheels-select.pyz && python "
                                   f"cuwheels-select.pyz demo-ext --index {server.url}/")
        assert shown["index"] == "cu128/torch2.9/simple/"
        assert shown["glibc"] == "C library the wheels need: demo-ext: glibc 2.28 or newer."
        assert none.startswith(f"No wheels for Windows x86_64, torch 2.9, CUDA 12.8, Python {python}.")
        assert "The index has no wheel for torch 2.9 on Windows x86_64." in none
        assert "Missing, and why" not in none  # built without recipes: no such section to point to
        assert hidden is True
        assert offered == ["2.10", "2.9", "2.8"]  # only the series the site has, newest first

        # The command as shown, pasted: pip installs the wheel of that index from 127.0.0.1.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
                   PIP_INDEX_URL=f"{server.url}/nothing-here/")  # stands in for PyPI
        args = shown["pip"].split()
        assert args[:2] == ["pip", "install"]
        proc = subprocess.run([sys.executable, "-m", "pip", "install", *args[2:], "--no-deps",
                               "--no-cache-dir", "--target", str(tmp_path / "target")],
                              capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p.name for p in (tmp_path / "target").glob("*.dist-info")] == [
        "demo_ext-1.0+cu128.torch2.9.dist-info"]


@pytest.mark.skipif(chromium() is None, reason=NO_CHROMIUM)
def test_the_picker_offers_a_free_threaded_python_after_its_normal_build(tmp_path):
    """A cp314 and a cp314t wheel: the picker starts on the normal 3.14 (a free-threaded wheel
    is only for those who run that interpreter) and offers 3.14t after it, shown as such."""
    w = tmp_path / "wheels"
    for abi in ("cp314", "cp314t", "cp313"):
        make_wheel(w, "demo-ext", "1.0", local="cu130.torch2.14",
                   tag=f"{abi[:5]}-{abi}-manylinux_2_28_x86_64")
    build(tmp_path, base_url="/files")
    with _served(tmp_path / "site", w) as server:
        with Browser(server.url + "/", tmp_path / "profile") as page_:
            page_.wait_for("document.readyState === 'complete' && !document.getElementById('picker').hidden")
            offered = page_.evaluate('[...document.querySelectorAll("label.opt[data-key=python]")]'
                                     '.map(e => [e.dataset.value, e.textContent.trim()])')
            chosen = page_.evaluate('[...document.querySelectorAll("input[name=pick-python]")]'
                                    '.filter(e => e.checked).map(e => e.value)')
    assert offered == [["3.13", "3.13"], ["3.14", "3.14"], ["3.14t", "3.14t (free-threaded)"]]
    assert chosen == ["3.14"]


@pytest.mark.skipif(chromium() is None, reason=NO_CHROMIUM)
def test_without_javascript_every_command_is_on_the_page(tmp_path):
    """With scripts off, the picker stays hidden and the plain sections hold the pip and uv
    command of every project of every variant index, complete (built with its site URL)."""
    w = _picker_site(tmp_path)
    build(tmp_path, base_url="/files")  # a site to serve, then built again with its address
    with _served(tmp_path / "site", w) as server:
        report = build(tmp_path, base_url="/files", site_url=server.url + "/", init_ledger=False)
        with Browser(server.url + "/", tmp_path / "profile", javascript=False) as browser:
            dom = browser.html()
    text = htmllib.unescape(re.sub(r"<[^>]+>", "", dom))
    assert report.variant_indexes and len(report.variant_indexes) == 3
    for path in report.variant_indexes:
        projects = json.loads(page(tmp_path / "site", f"{path}/simple/index.json"))["projects"]
        assert projects
        for project in (p["name"] for p in projects):
            index = f"{server.url}/{path}/simple/"
            assert f"pip install {project} --only-binary {project} --extra-index-url {index}\n" in text
            assert f"uv pip install {project} --extra-index-url {index}\n" in text
    assert '<section id="picker" hidden="">' in dom  # no script ran to un-hide it
    # The C library each wheel needs, per project and platform, from its platform tag.
    rows = re.findall(r"<tr><td>([\w-]+)</td><td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td></tr>", dom)
    assert ("demo-ext", "Linux x86_64", "3.12", "glibc 2.17 or newer") in rows
    assert ("demo-ext", "Linux aarch64", "3.13", "glibc 2.28 or newer") in rows
    assert ("demo-ext", "Windows x86_64", "3.13", "none") in rows
    assert ("other-ext", "Linux x86_64", "3.12", "not stated: tagged linux_x86_64") in rows


def _png_pixels(png: bytes) -> tuple[int, int, bytes]:
    """(width, height, the decompressed scanlines) of an 8-bit RGB(A) PNG, still filtered: a blank
    page filters to a handful of byte values (0, the filter types, 255), a drawn one to many."""
    import zlib

    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height, depth, color = struct.unpack(">IIBB", png[16:26])
    assert depth == 8 and color in (2, 6), f"unexpected PNG format: depth {depth}, color type {color}"
    data, pos = b"", 8
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos: pos + 8])
        if kind == b"IDAT":
            data += png[pos + 8: pos + 8 + length]
        pos += 12 + length
    return width, height, zlib.decompress(data)


# --------------------------------------------------------------------------- missing cells


def test_missing_cells_say_why_and_link_failed_builds(tmp_path, write_recipe, good_recipe):
    write_recipe(good_recipe)  # demo_ext 1.0.0: CUDA 12.9 for torch 2.8, 13.0 for 2.10 and 2.9
    recipes = tmp_path / "recipes"
    (recipes / "table.yaml").write_text(yaml.safe_dump(MINI_TABLE))
    w = tmp_path / "wheels"
    make_wheel(w, "demo-ext", "1.0.0", local="cu130.torch2.10", tag="cp312-cp312-manylinux_2_28_x86_64")
    make_wheel(w, "demo-ext", "0.9.0", local="cu130.torch2.10", tag="cp313-cp313-manylinux_2_28_x86_64")
    reports = tmp_path / "build-cells"
    write_report(reports / "demo_ext-3.11-cu130" / "report.json", BuildReport(
        "demo_ext-3.11-cu130", "container", error=ReportedError("compile", "nvcc failed")))
    write_report(reports / "demo_ext-3.10-cu130" / "report.json",
                 BuildReport("demo_ext-3.10-cu130", "container", "passed"))
    # a report of another schema version is not read: its cell is "not built yet"
    (reports / "demo_ext-3.13-cu130").mkdir()
    (reports / "demo_ext-3.13-cu130" / "report.json").write_text(json.dumps(
        {"schema": 99, "cell": "demo_ext-3.13-cu130", "error": {"kind": "compile"}}))
    build(tmp_path, recipes_dir=recipes, reports_dir=reports)

    html = page(tmp_path / "site", "index.html")
    table = load_table(recipes / "table.yaml")
    (demo,) = missing_cells(load_planned(recipes, table), table, {})  # nothing built: every cell is missing
    rows = {(g["torch"], g["cuda"], g["kind"]): [c["python"] for c in g["cells"]]
            for g in demo["groups"]}
    assert demo["published"] == []
    assert rows[("2.10", "13.0", "todo")] == ["3.10", "3.11", "3.12", "3.13", "3.14"]
    assert rows[("2.8", "12.9", "todo")] == ["3.10", "3.11", "3.12", "3.13"]  # python >=3.10
    assert ("2.9", "13.0", "todo") in rows
    # A pair the recipe doesn't list has a reason but no cells: the planner plans none there.
    assert rows[("2.8", "12.6", "unsupported")] == []

    # On the page: 3.12 has a wheel of 1.0.0 (0.9.0's 3.13 doesn't count), 3.11 failed and links
    # to its report, 3.10 built without an error (then: not built yet), the rest not built yet.
    section = html[html.index('<h2 id="missing">'):]
    row = re.search(r'<tr class="failed"><td>2\.10</td><td>13\.0</td><td>linux_x86_64</td>'
                    r'<td>(.*?)</td><td>(.*?)</td>', section)
    assert row.group(1) == ('<a class="py failed" href="reports/demo_ext-3.11-cu130.json" '
                            'title="demo_ext-3.11-cu130: compile error">3.11</a>')
    assert row.group(2) == "the build failed: see each cell&#39;s report"
    row = re.search(r'<tr class="todo"><td>2\.10</td><td>13\.0</td><td>linux_x86_64</td>'
                    r'<td>(.*?)</td><td>not built yet</td>', section)
    assert re.findall(r">(3\.\d+)<", row.group(1)) == ["3.10", "3.13", "3.14"]
    assert ('<td>2.9</td><td>13.0</td><td>linux_x86_64</td><td><span class="py no" '
            'title="demo_ext-3.10-cu130-torch2.9">') in section
    # torch 2.10 is built: only its CUDA 12.6 variant is missing, and the page says so.
    assert ('<tr class="unsupported"><td>2.10</td><td>12.6</td><td>—</td><td>—</td><td>no CUDA 12.6 '
            'variant: the recipe builds for CUDA 12.9, 13.0 only; torch 2.10 is built for CUDA '
            '13.0</td></tr>') in section
    assert "isn&#39;t known to support" not in section
    report = json.loads(page(tmp_path / "site", "reports/demo_ext-3.11-cu130.json"))
    assert report["error"] == {"kind": "compile", "message": "nvcc failed"}


def test_no_missing_section_without_recipes(tmp_path):
    make_wheel(tmp_path / "wheels", "demo-ext", "1.0.0", local="cu130.torch2.10")
    build(tmp_path)
    assert 'id="missing"' not in page(tmp_path / "site", "index.html")


def _first_cell_wheel(directory, cell, recipe):
    """The wheel a build of ``cell`` makes (name, label, tags and, for a stable-ABI build, the
    manifest that says which torch series it serves)."""
    python = min(cell.serves_python or (cell.python,), key=version_key).replace(".", "")
    tag = {"cpython": f"cp{python}-cp{python}", "abi3": f"cp{python}-abi3",
           "none": f"py{python}-none"}[cell.python_abi] + f"-{cell.platform_tag}"
    manifest = None
    if cell.torch_abi == "stable":
        manifest = {"cuda": cell.cuda, "torch": cell.torch_version, "cxx11_abi": cell.cxx11_abi,
                    "abi": {"python": cell.python_abi, "torch": "stable", "torch_from": cell.torch_from,
                            "serves": list(cell.serves_torch)}}
    return make_wheel(directory, recipe.source.pypi, recipe.source.version, local=cell.label, tag=tag,
                      manifest=manifest)


def test_the_front_page_lists_exactly_the_planned_cells_of_every_recipe(tmp_path):
    """For every recipe in recipes/: the cells the front page shows missing plus those it counts
    as published are the planner's cells, each once: ``python -m tools.matrix --format ids``."""
    table = load_table()
    recipes = load_all(RECIPES_DIR, table)
    planned_ids = [c.id for c in plan(recipes, table)]
    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", "ids"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == sorted(planned_ids)
    assert any(i.startswith("xformers-py3-") for i in planned_ids)  # a collapsed recipe is among them

    # One wheel per recipe and platform, its first cell's there (xformers: the stable-ABI build
    # for CUDA 12.8): a wheel counts for the cell of its own platform only.
    by_package = {r.package: r for r in recipes}
    firsts = {}
    for cell in plan(recipes, table):
        firsts.setdefault((cell.package, cell.platform), cell)
    assert {p for _, p in firsts} == set(table.platforms)
    for cell in firsts.values():
        _first_cell_wheel(tmp_path / "wheels", cell, by_package[cell.package])
    build(tmp_path, recipes_dir=RECIPES_DIR)

    section = page(tmp_path / "site", "index.html")
    section = section[section.index('<h2 id="missing">'):]
    shown = re.findall(r'title="([^":]+)', section)
    published = {c.id for c in firsts.values()}
    assert len(shown) == len(set(shown)), "a cell is listed twice"
    assert set(shown) == set(planned_ids) - published
    assert "xformers-3.10-cu130-torch2.13" not in section  # no per-Python cell of a py3 build

    entries = load_ledger(tmp_path / "ledger.json").values()
    model = missing_cells(load_planned(RECIPES_DIR, table), table, place_variants(entries, table=table))
    said_published = [i for r in model for i in r["published"]]
    said_missing = [c["cell"] for r in model for g in r["groups"] for c in g["cells"]]
    assert set(said_published) == published
    assert sorted(said_published + said_missing) == sorted(planned_ids)


def test_a_stable_abi_cell_is_published_only_when_its_wheel_serves_every_series():
    """xformers' CUDA 13.0 cell serves several torch series with one build: a wheel checked
    against fewer of them (built before the recipe listed one more) leaves the cell missing."""
    table = load_table()
    planned = load_planned(RECIPES_DIR, table)
    (cell,) = [c for c in planned.cells if c.package == "xformers" and c.cuda == "13.0"
               and c.platform == "linux_x86_64"]
    assert cell.id == "xformers-py3-cu130-torch2.10+" and len(cell.serves_torch) > 1
    version = next(r for r in planned.recipes if r.package == "xformers").source.version
    lowest = min(cell.serves_python, key=version_key)
    fn = f"xformers-{version}+{cell.label}-py{lowest.replace('.', '')}-none-{cell.platform_tag}.whl"

    def front_page_of(serves):
        entry = load_entry(fn, Variant(cell.cuda, cell.torch, cell.cxx11_abi, serves))._replace(name="xformers")
        placed = place_variants([entry], table=table)
        return next(r for r in missing_cells(planned, table, placed) if r["package"] == "xformers")

    assert cell.id in front_page_of(cell.serves_torch)["published"]
    fewer = front_page_of(cell.serves_torch[1:])
    assert cell.id not in fewer["published"]
    (row,) = [g for g in fewer["groups"] if g["cuda"] == "13.0" and g["kind"] == "todo"
              and g["platform"] == "linux_x86_64"]
    assert row["torch"] == ", ".join(sorted(cell.serves_torch, key=version_key))  # every series it serves
    assert row["cells"] == [{"python": f"{lowest}+", "cell": cell.id, "report": None, "error": None}]


def test_python_labels_of_compressed_and_abi3_tags():
    from tools.sitegen.frontpage import python_labels

    def labels(tags):
        return set(python_labels(frozenset(parse_tag(tags))))

    assert labels("cp311-cp311-manylinux_2_28_x86_64") == {"3.11"}
    assert labels("cp39-abi3-manylinux_2_28_x86_64") == {"3.9+"}
    assert labels("py39-none-manylinux_2_28_x86_64") == {"3.9+"}
    assert labels("py2.py3-none-any") == {"py2", "py3"}
    assert labels("cp310.cp311-cp310.cp311-linux_x86_64") == {"3.10", "3.11"}
    # only a wheel that is abi3 through and through serves the later Pythons
    assert labels("cp39-abi3.cp39-linux_x86_64") == {"3.9"}
    # a free-threaded build is a Python of its own
    assert labels("cp314-cp314t-manylinux_2_28_x86_64") == {"3.14t"}
    assert labels("cp314-cp314.cp314t-manylinux_2_28_x86_64") == {"3.14", "3.14t"}


@pytest.mark.parametrize("abi, normal, free", [("cp314", True, False), ("cp314t", False, True)])
def test_a_free_threaded_wheel_publishes_only_the_free_threaded_cell(abi, normal, free):
    """causal_conv1d's 3.14 and 3.14t cells share version, label and variant index: each is
    published only by a wheel of its own ABI."""
    table = load_table()
    planned = load_planned(RECIPES_DIR, table)
    cells = {c.python: c for c in planned.cells if c.package == "causal_conv1d"
             and c.cuda == "13.0" and c.default_torch and c.platform == "linux_x86_64"}
    cell = cells["3.14"]
    recipe = next(r for r in planned.recipes if r.package == "causal_conv1d")
    fn = f"causal_conv1d-{recipe.source.version}+{cell.label}-cp314-{abi}-manylinux_2_28_x86_64.whl"
    entry = load_entry(fn, Variant(cell.cuda, cell.torch))._replace(name=recipe.source.pypi)
    model = missing_cells(planned, table, place_variants([entry], table=table))
    said = next(r for r in model if r["package"] == "causal_conv1d")["published"]
    assert (cells["3.14"].id in said, cells["3.14t"].id in said) == (normal, free)


@pytest.mark.parametrize("platform_tag, published", [
    ("manylinux_2_28_x86_64", True),     # the cell's own platform
    ("manylinux_2_17_x86_64", True),     # an older baseline installs there too
    ("manylinux_2_28_aarch64", False),   # another platform's wheel of the same version and index
    ("win_amd64", False),
])
def test_a_cell_is_published_only_by_a_wheel_of_its_platform(platform_tag, published):
    """The aarch64 and Windows wheels of a version share the variant index with the x86_64 one:
    each counts only for a cell of its own platform."""
    table = load_table()
    planned = load_planned(RECIPES_DIR, table)
    cell = next(c for c in planned.cells if c.python_abi == "cpython" and c.torch_abi == "exact"
                and not c.candidate)
    assert cell.platform_tag == "manylinux_2_28_x86_64"
    recipe = next(r for r in planned.recipes if r.package == cell.package)
    py = cell.python.replace(".", "")
    fn = f"{cell.package}-{recipe.source.version}+{cell.label}-cp{py}-cp{py}-{platform_tag}.whl"
    entry = load_entry(fn, Variant(cell.cuda, cell.torch))._replace(name=recipe.source.pypi)
    model = missing_cells(planned, table, place_variants([entry], table=table))
    said = next(r for r in model if r["package"] == cell.package)["published"]
    assert (cell.id in said) is published


# --------------------------------------------------------------------------- platforms

#: The small table with aarch64 and Windows (torch 2.10 built on both, CUDA 13.0).
PLATFORMS = {
    "linux_x86_64": {"tag": "manylinux_{manylinux}_x86_64", "build": "container", "source": "test"},
    "linux_aarch64": {"tag": "manylinux_{manylinux}_aarch64", "build": "container",
                      "images": {"13.0": "pytorch/manylinuxaarch64-builder:cuda13.0"},
                      "source": "test"},
    "win_amd64": {"tag": "win_amd64", "build": "native",
                  "toolchain": "Visual Studio 2022 and CUDA", "source": "test"},
}


def test_the_coverage_matrix_and_what_is_missing_show_each_platform(tmp_path, write_recipe,
                                                                     good_recipe):
    """A site built from wheels of three platforms in one variant index (and two in none): the
    matrix has a column per index and platform, Linux x86_64 unmarked and first whatever order
    the files sort in, each with its own Python pills; "what is missing" gives each missing
    cell's platform, its id (with the platform part) and its reason, a failed aarch64 build
    linked to its report."""
    write_recipe(good_recipe)  # demo_ext 1.0.0: CUDA 13.0 for torch 2.10 and 2.9, 12.9 for 2.8
    table_data = copy.deepcopy(MINI_TABLE)
    table_data["platforms"] = copy.deepcopy(PLATFORMS)
    table_data["torch"]["2.10"]["platforms"] = {
        "linux_aarch64": {"pypi_cuda": "13.0", "cuda": ["13.0"], "source": "test"},
        "win_amd64": {"pypi_cuda": None, "cuda": ["13.0"], "source": "test"}}
    recipes = tmp_path / "recipes"
    (recipes / "table.yaml").write_text(yaml.safe_dump(table_data))
    w = tmp_path / "wheels"
    label = "cu130.torch2.10"
    # aarch64's files sort before x86_64's: the columns are in the platforms' order all the same
    make_wheel(w, "demo-ext", "1.0.0", local=label, tag="cp311-cp311-manylinux_2_28_aarch64")
    make_wheel(w, "demo-ext", "1.0.0", local=label, tag="cp312-cp312-manylinux_2_28_aarch64")
    make_wheel(w, "demo-ext", "1.0.0", local=label, tag="cp312-cp312-manylinux_2_28_x86_64")
    make_wheel(w, "demo-ext", "1.0.0", local=label, tag="cp312-cp312-win_amd64")
    # no CUDA/torch identity: in no variant index, one simple/ only column per platform
    make_wheel(w, "demo-ext", "0.5.0", tag="cp311-cp311-manylinux_2_28_aarch64")
    make_wheel(w, "demo-ext", "0.5.0", tag="cp312-cp312-manylinux_2_28_x86_64")
    reports = tmp_path / "build-cells"
    write_report(reports / "demo_ext-3.13-cu130-aarch64" / "report.json", BuildReport(
        "demo_ext-3.13-cu130-aarch64", "container", error=ReportedError("compile", "nvcc")))
    build(tmp_path, recipes_dir=recipes, reports_dir=reports)
    html = page(tmp_path / "site", "index.html")

    coverage = html[html.index('<h2 id="coverage">'):html.index('<h2 id="missing">')]
    assert ("a column per variant index and platform: <code>aarch64</code> Linux aarch64, "
            "<code>win</code> Windows x86-64, unmarked Linux x86_64") in coverage
    assert re.findall(r"<th><code>(.*?)</code></th>", coverage) == [
        "cu130/torch2.10", "cu130/torch2.10 aarch64", "cu130/torch2.10 win", "simple/ only",
        "simple/ only aarch64"]

    def pills(cell):  # Python -> state of one matrix cell
        return {py: state
                for state, py in re.findall(r'<span class="py (\w+)"[^>]*>([\d.]+)</span>', cell)}

    row = re.findall(r"<td>(.*?)</td>|<td class=\"none\">(—)</td>",
                     re.search(r"<tr><td>1\.0\.0</td>(.*?)</tr>", coverage).group(1))
    assert [pills(a) or b for a, b in row] == [
        {"3.11": "no", "3.12": "yes"},     # x86_64
        {"3.11": "yes", "3.12": "yes"},    # aarch64
        {"3.11": "no", "3.12": "yes"},     # Windows
        "—", "—"]
    row = re.findall(r"<td>(.*?)</td>|<td class=\"none\">(—)</td>",
                     re.search(r"<tr><td>0\.5\.0</td>(.*?)</tr>", coverage).group(1))
    assert [pills(a) or b for a, b in row] == [
        "—", "—", "—", {"3.11": "no", "3.12": "yes"}, {"3.11": "yes", "3.12": "no"}]

    missing = html[html.index('<h2 id="missing">'):]
    rows = re.findall(r'<tr class="(\w+)"><td>2\.10</td><td>13\.0</td><td>(\w+)</td><td>(.*?)</td>'
                      r"<td>(.*?)</td></tr>", missing)
    assert [(kind, platform, re.findall(r'title="([^"]+)"', cells), why)
            for kind, platform, cells, why in rows] == [
        ("todo", "linux_x86_64", ["demo_ext-3.10-cu130", "demo_ext-3.11-cu130",
                                  "demo_ext-3.13-cu130", "demo_ext-3.14-cu130"], "not built yet"),
        ("failed", "linux_aarch64", ["demo_ext-3.13-cu130-aarch64: compile error"],
         "the build failed: see each cell&#39;s report"),
        ("todo", "linux_aarch64", ["demo_ext-3.10-cu130-aarch64", "demo_ext-3.14-cu130-aarch64"],
         "not built yet"),
        ("todo", "win_amd64", ["demo_ext-3.10-cu130-win", "demo_ext-3.11-cu130-win",
                               "demo_ext-3.13-cu130-win", "demo_ext-3.14-cu130-win"],
         "not built yet")]
    assert ('<a class="py failed" href="reports/demo_ext-3.13-cu130-aarch64.json" '
            'title="demo_ext-3.13-cu130-aarch64: compile error">3.13</a>') in missing
    # the published cells, one per platform's wheel, are not listed; 2.9 has no build but x86_64's
    for published in ("demo_ext-3.12-cu130", "demo_ext-3.11-cu130-aarch64",
                      "demo_ext-3.12-cu130-aarch64", "demo_ext-3.12-cu130-win"):
        assert f'title="{published}"' not in missing
    assert not re.search(r"<td>2\.9</td><td>13\.0</td><td>(linux_aarch64|win_amd64)</td>", missing)


# --------------------------------------------------------------------------- why a pair is missing


def _reason_of(tmp_path, write_recipe, recipe, series, cuda):
    """(reason, detail) the front page's model gives for the recipe's (torch, CUDA) pair."""
    write_recipe(recipe)
    recipes = tmp_path / "recipes"
    (recipes / "table.yaml").write_text(yaml.safe_dump(MINI_TABLE))
    table = load_table(recipes / "table.yaml")
    (model,) = missing_cells(load_planned(recipes, table), table, {})
    (group,) = [g for g in model["groups"] if (g["torch"], g["cuda"]) == (series, cuda)]
    assert group["kind"] == "unsupported" and group["cells"] == []
    return group["reason"], group["detail"]


def test_a_missing_cuda_variant_is_not_called_an_unsupported_torch(tmp_path, write_recipe,
                                                                    good_recipe):
    """torch 2.10 is built for CUDA 13.0; only its 12.6 variant is missing (no 12.6 entry)."""
    reason, detail = _reason_of(tmp_path, write_recipe, good_recipe, "2.10", "12.6")
    assert reason == ("no CUDA 12.6 variant: the recipe builds for CUDA 12.9, 13.0 only; "
                      "torch 2.10 is built for CUDA 13.0")
    assert detail is None


def test_an_exclusion_is_the_reason_with_the_recipes_words(tmp_path, write_recipe, good_recipe):
    good_recipe["cuda"]["13.0"] = {"torch_from": "2.9", "reason": "torch's default CUDA 13"}
    good_recipe["exclude"] = [{"torch": "2.9", "cuda": "13.0",
                               "reason": "2.9's headers break the kernels (upstream #123)"}]
    reason, detail = _reason_of(tmp_path, write_recipe, good_recipe, "2.9", "13.0")
    assert reason == "excluded by the recipe: torch 2.9 with CUDA 13.0"
    assert detail == "2.9's headers break the kernels (upstream #123)"


def test_a_series_outside_the_cuda_range_says_the_range_and_its_reason(tmp_path, write_recipe,
                                                                        good_recipe):
    good_recipe["cuda"]["13.0"] = {"torch_from": "2.10", "reason": "13.0 builds start at 2.10"}
    reason, detail = _reason_of(tmp_path, write_recipe, good_recipe, "2.9", "13.0")
    assert reason == "torch 2.9 is older than the recipe's CUDA 13.0 range (torch 2.10 and newer)"
    assert detail == "13.0 builds start at 2.10"


def test_a_series_left_out_of_a_cuda_list_says_the_list(tmp_path, write_recipe, good_recipe):
    good_recipe["cuda"]["13.0"] = {"torch": ["2.10"], "reason": "only 2.10 is asked for"}
    reason, detail = _reason_of(tmp_path, write_recipe, good_recipe, "2.9", "13.0")
    assert reason == "the recipe's CUDA 13.0 build lists torch 2.10 only"
    assert detail == "only 2.10 is asked for"


def test_a_series_newer_than_the_packages_range_is_not_supported_yet(tmp_path, write_recipe,
                                                                      good_recipe):
    good_recipe["cuda"]["13.0"] = {"torch_from": "2.9", "reason": "torch's default CUDA 13"}
    good_recipe["torch"] = {"from": "2.8", "to": "2.9", "reason": "setup.py pins torch<2.10"}
    reason, detail = _reason_of(tmp_path, write_recipe, good_recipe, "2.10", "13.0")
    assert reason == ("torch 2.10 is not in the recipe's torch range (2.8 to 2.9) yet: the "
                      "package isn't known to support it yet")


def test_a_series_older_than_the_packages_range_says_what_it_needs(tmp_path, write_recipe,
                                                                    good_recipe):
    good_recipe["cuda"]["13.0"] = {"torch_from": "2.9", "reason": "torch's default CUDA 13"}
    good_recipe["torch"] = {"from": "2.10", "reason": "requires torch>=2.10"}
    del good_recipe["cuda"]["12.9"]  # its list, torch 2.8, would be outside that range
    good_recipe["archs"].pop("12.9")
    reason, detail = _reason_of(tmp_path, write_recipe, good_recipe, "2.9", "13.0")
    assert reason == "the package needs torch 2.10 or newer (the recipe's torch range: 2.10 and newer)"


def test_the_page_shows_a_reason_with_the_recipes_words_and_excluded_platforms(
        tmp_path, write_recipe, good_recipe):
    good_recipe["cuda"]["13.0"] = {"torch_from": "2.9", "reason": "torch's default CUDA 13"}
    good_recipe["exclude"] = [{"torch": "2.9", "cuda": "13.0", "reason": "headers <break> it"}]
    write_recipe(good_recipe)
    recipes = tmp_path / "recipes"
    table_data = copy.deepcopy(MINI_TABLE)
    table_data["platforms"] = copy.deepcopy(PLATFORMS)
    (recipes / "table.yaml").write_text(yaml.safe_dump(table_data))
    recipe_file = recipes / "demo_ext" / "recipe.yaml"
    data = yaml.safe_load(recipe_file.read_text())
    data["platforms"] = {"win_amd64": {"exclude": True, "reason": "no MSVC path in setup.py"}}
    recipe_file.write_text(yaml.safe_dump(data, sort_keys=False))
    make_wheel(tmp_path / "wheels", "demo-ext", "1.0.0", local="cu130.torch2.10")
    build(tmp_path, recipes_dir=recipes)
    section = page(tmp_path / "site", "index.html")
    section = section[section.index('<h2 id="missing">'):]
    assert ('<td>excluded by the recipe: torch 2.9 with CUDA 13.0; torch 2.9 is built for CUDA '
            '12.6<br>' not in section)  # 12.6 is not the recipe's: nothing said that isn't so
    assert ('<td>excluded by the recipe: torch 2.9 with CUDA 13.0<br><span class="muted">The '
            'recipe: headers &lt;break&gt; it</span></td>') in section
    assert '<p class="excluded">Not built for Windows x86_64: no MSVC path in setup.py</p>' in section


def test_the_page_names_a_cell_its_builder_image_cannot_build(tmp_path, write_recipe, good_recipe):
    """A cell whose image lacks its Python (the table's images:) is not planned, and the page
    says so with the reason."""
    write_recipe(good_recipe)
    recipes = tmp_path / "recipes"
    table_data = copy.deepcopy(MINI_TABLE)
    table_data["images"] = {f"pytorch/manylinux2_28-builder:cuda{c}": {
        "pythons": ["3.10", "3.11", "3.12", "3.13"] + (["3.14"] if c != "13.0" else []),
        "source": "test listing"} for c in ("12.6", "12.9", "13.0")}
    (recipes / "table.yaml").write_text(yaml.safe_dump(table_data))
    make_wheel(tmp_path / "wheels", "demo-ext", "1.0.0", local="cu130.torch2.10")
    build(tmp_path, recipes_dir=recipes)
    section = page(tmp_path / "site", "index.html")
    section = section[section.index('<h2 id="missing">'):]
    assert ('<p class="excluded">Not planned, demo_ext-3.14-cu130: '
            'pytorch/manylinux2_28-builder:cuda13.0 has no /opt/python/cp314-cp314 (the table&#39;s '
            'images: lists 3.10, 3.11, 3.12, 3.13)</p>') in section
    assert 'title="demo_ext-3.14-cu130"' not in section     # not among the planned cells
