"""The generated parts of README.md and docs/ are what their generators print now."""

from __future__ import annotations

import pytest

from tools.devtools import docpages


def test_every_generated_part_of_the_readme_and_the_docs_is_current():
    assert docpages.stale() == [], "run python -m tools.devtools.docpages and commit the pages"


def test_every_generator_is_used_by_a_page():
    used = {m.group(1) for p in docpages.pages() for m in docpages.START.finditer(p.read_text())}
    assert used == set(docpages.GENERATORS)


def test_a_stale_part_is_named_and_rewritten(tmp_path):
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "p.md"
    page.write_text("# P\n<!-- generated: site-links -->\nold\n<!-- end generated -->\nafter\n")
    (tmp_path / "README.md").write_text("no parts\n")
    assert docpages.stale(tmp_path) == ["docs/p.md"]
    new = docpages.regenerate(page.read_text(), "docs/p.md", {})
    assert "old" not in new and new.endswith("<!-- end generated -->\nafter\n")
    assert docpages.GENERATORS["site-links"]() in new
    page.write_text(new)
    assert docpages.stale(tmp_path) == []


@pytest.mark.parametrize("text, says", [
    ("<!-- generated: nosuch -->\nx\n<!-- end generated -->\n", "unknown generator 'nosuch'"),
    ("<!-- generated: counts -->\nx\n", "has no"),
])
def test_a_bad_marker_is_refused_naming_the_page(text, says):
    with pytest.raises(SystemExit) as err:
        docpages.regenerate(text, "docs/bad.md", {})
    assert "docs/bad.md" in str(err.value) and says in str(err.value)
