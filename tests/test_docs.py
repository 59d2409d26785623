"""The docs site (mkdocs.yml, docs/) builds in strict mode: a warning or a broken link fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tools import ROOT

ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def _build(config: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "-d", str(out)], capture_output=True, text=True, timeout=300, env=ENV)


def test_the_docs_build_strict_with_their_drawings(tmp_path):
    proc = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "site" / "architecture" / "index.html").read_text()
    # The drawings reach the page as Mermaid blocks the theme renders, not as code listings.
    assert page.count('class="mermaid"') >= 4
    assert "BuildJob" in page and "HostOS" in page


def test_a_broken_link_fails_the_build(tmp_path):
    shutil.copy2(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[gone](no-such-page.md)\n")
    proc = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0
    assert "no-such-page.md" in proc.stderr


def test_the_readme_is_a_front_door_not_a_manual():
    """At most 200 lines and 15 KB: what it is, the status, install, packages, two commands and
    links into the docs; everything else lives in docs/."""
    readme = (ROOT / "README.md").read_bytes()
    assert readme.count(b"\n") <= 200 and len(readme) <= 15 * 1024


def test_the_readme_and_contributing_link_only_to_files_that_exist():
    import re
    for name in ("README.md", "CONTRIBUTING.md"):
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", (ROOT / name).read_text()):
            assert (ROOT / target).exists(), f"{name} links to {target}, which doesn't exist"


def test_every_address_of_the_project_comes_from_its_one_setting():
    """A fork changes tools/core/site.py and regenerates the pages: no page or module may spell
    a GitHub Pages address or the repository's URL itself."""
    import re
    from tools.core import site
    texts = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md"),
             *(ROOT / "tools").rglob("*.py"), *(ROOT / "tools").rglob("*.html*")]
    for path in texts:
        text = path.read_text()
        if path == ROOT / "tools" / "core" / "site.py":
            continue
        parts = re.split(r"<!-- generated: [a-z0-9-]+ -->\n.*?<!-- end generated -->", text, flags=re.S)
        for part in parts:
            for url in re.findall(r"https://[a-z0-9.-]+\.github\.io/[^\s)\"'`<]*", part):
                assert not url.startswith(site.INDEX_URL), f"{path}: {url} spelt out; read tools/core/site.py"
            assert site.REPOSITORY_URL not in part, f"{path}: the repository's URL spelt out"
