"""tools.sitegen.frontpage: the front page's coverage matrix and commands, also as a browser renders them."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import pytest
from wheelfactory import make_wheel
from index_support import (
    ANY, build, page, yank_file,
)


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
    assert "<script>" not in html  # the site URL was given: nothing to fill in


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (Debian: apt-get install chromium)")
def test_home_page_in_a_headless_browser(tmp_path):
    from tools.sitegen.serve import make_server
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
    import json

    import yaml
    from conftest import MINI_TABLE

    from tools.sitegen.frontpage import missing_cells

    write_recipe(good_recipe)  # demo_ext 1.0.0: CUDA 12.9 for torch 2.8, 13.0 for 2.10 and 2.9
    recipes = tmp_path / "recipes"
    (recipes / "table.yaml").write_text(yaml.safe_dump(MINI_TABLE))
    w = tmp_path / "wheels"
    make_wheel(w, "demo-ext", "1.0.0", local="cu130.torch2.10", tag="cp312-cp312-manylinux_2_28_x86_64")
    make_wheel(w, "demo-ext", "0.9.0", local="cu130.torch2.10", tag="cp313-cp313-manylinux_2_28_x86_64")
    reports = tmp_path / "build-cells"
    (reports / "demo_ext-3.11-cu130").mkdir(parents=True)
    (reports / "demo_ext-3.11-cu130" / "report.json").write_text(json.dumps(
        {"cell": "demo_ext-3.11-cu130", "error": {"kind": "compile", "message": "nvcc failed"}}))
    (reports / "demo_ext-3.10-cu130").mkdir()
    (reports / "demo_ext-3.10-cu130" / "report.json").write_text('{"cell": "demo_ext-3.10-cu130"}')
    build(tmp_path, recipes_dir=recipes, reports_dir=reports)

    html = page(tmp_path / "site", "index.html")
    (demo,) = missing_cells(*_world(recipes), [], {})  # nothing built: every cell is missing
    rows = {(g["torch"], g["cuda"], g["kind"]): [c["python"] for c in g["cells"]]
            for g in demo["groups"]}
    assert rows[("2.10", "13.0", "todo")] == ["3.10", "3.11", "3.12", "3.13", "3.14"]
    assert rows[("2.8", "12.9", "todo")] == ["3.10", "3.11", "3.12", "3.13"]  # python >=3.10
    assert ("2.8", "12.6", "unsupported") in rows and ("2.9", "13.0", "todo") in rows

    # On the page: 3.12 has a wheel of 1.0.0 (0.9.0's 3.13 doesn't count), 3.11 failed and links
    # to its report, 3.10 built without an error (then: not built yet), the rest not built yet.
    section = html[html.index('<h2 id="missing">'):]
    row = re.search(r'<tr class="failed"><td>2\.10</td><td>13\.0</td><td>(.*?)</td><td>(.*?)</td>',
                    section)
    assert row.group(1) == ('<a class="py failed" href="reports/demo_ext-3.11-cu130.json" '
                            'title="demo_ext-3.11-cu130: compile error">3.11</a>')
    assert row.group(2) == "the build failed: see each cell&#39;s report"
    row = re.search(r'<tr class="todo"><td>2\.10</td><td>13\.0</td><td>(.*?)</td><td>not built yet</td>',
                    section)
    assert re.findall(r">(3\.\d+)<", row.group(1)) == ["3.10", "3.13", "3.14"]
    assert '<td>2.9</td><td>13.0</td><td><span class="py no" title="demo_ext-3.10-cu130-torch2.9">' in section
    assert ("<td>the package isn&#39;t known to support torch 2.10 yet: the recipe builds no CUDA "
            "12.6 wheels (it lists CUDA 12.9, 13.0)</td>") in section
    report = json.loads(page(tmp_path / "site", "reports/demo_ext-3.11-cu130.json"))
    assert report["error"] == {"kind": "compile", "message": "nvcc failed"}


def test_no_missing_section_without_recipes(tmp_path):
    make_wheel(tmp_path / "wheels", "demo-ext", "1.0.0", local="cu130.torch2.10")
    build(tmp_path)
    assert 'id="missing"' not in page(tmp_path / "site", "index.html")


def _world(recipes):
    from tools.plan.recipe import load_all
    from tools.plan.table import load_table

    table = load_table(recipes / "table.yaml")
    return load_all(recipes, table), table
