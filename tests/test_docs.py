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
