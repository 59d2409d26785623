"""``python -m tools.devtools.docpages``: the generated parts of the README and the docs, kept current.

A page holds a generated part between two markers::

    <!-- generated: counts -->
    ...
    <!-- end generated -->

where ``counts`` names one of :data:`GENERATORS`. This command rewrites every such part in
README.md and docs/ from the code and data it comes from (the plan, the schedule, the command
lines, the recipe schema); ``--check`` rewrites nothing and exits 1 naming each stale part, which
is what ``tests/test_docpages.py`` runs, so no page drifts from what it describes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
from collections.abc import Callable
from pathlib import Path

from tools import ROOT
from tools.core import exitcodes
from tools.devtools import commandline, envvars

START = re.compile(r"^<!-- generated: ([a-z0-9-]+) -->\n", re.M)
END = "<!-- end generated -->"


def _command_output(module: str, argv: list[str]) -> str:
    """What ``python -m <module> <argv>`` prints, run in this process."""
    main = __import__(module, fromlist=["main"]).main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    if code:
        raise RuntimeError(f"python -m {module} {' '.join(argv)} exited {code}")
    return out.getvalue().rstrip("\n")


def _counts() -> str:
    return _command_output("tools.matrix", ["--format", "counts-md"])


def _schedule() -> str:
    # The whole backlog, as before the first release: the ledger of a site that has nothing yet.
    return _command_output("tools.matrix", ["--format", "schedule-md",
                                            "--ledger", str(ROOT / "index" / "ledger.json")])


def _site_links() -> str:
    from tools.core import site
    return "\n".join([f"- The index: <{site.INDEX_URL}>",
                      f"- The docs: <{site.DOCS_URL}>",
                      f"- The repository: <{site.REPOSITORY_URL}>, issues at <{site.ISSUES_URL}>"])


#: Every generated part, by the name its marker gives: a function returning its Markdown.
GENERATORS: dict[str, Callable[[], str]] = {
    "counts": _counts,
    "schedule": _schedule,
    "site-links": _site_links,
    "commands": commandline.reference_page,
    "exit-codes": exitcodes.reference_page,
    "environment": envvars.reference_page,
}


def pages(root: Path = ROOT) -> list[Path]:
    """The pages that may hold generated parts: README.md and every Markdown file under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def regenerate(text: str, where: str, cache: dict[str, str]) -> str:
    """``text`` with every generated part made anew; ``cache`` holds each generator's output once."""
    out, pos = [], 0
    for m in START.finditer(text):
        name = m.group(1)
        if name not in GENERATORS:
            raise SystemExit(f"error: {where}: marker names unknown generator {name!r}\n"
                             f"  hint: known: {', '.join(sorted(GENERATORS))} "
                             "(tools/devtools/docpages.py GENERATORS)")
        end = text.find(END, m.end())
        if end < 0:
            raise SystemExit(f"error: {where}: the generated part {name!r} has no {END!r}\n"
                             "  hint: close it on a line of its own")
        if name not in cache:
            cache[name] = GENERATORS[name]()
        out += [text[pos:m.end()], cache[name], "\n"]
        pos = end
    return "".join(out) + text[pos:]


def stale(root: Path = ROOT) -> list[str]:
    """The pages (relative to ``root``) whose generated parts differ from what they'd be now."""
    cache: dict[str, str] = {}
    return [str(p.relative_to(root)) for p in pages(root)
            if p.read_text() != regenerate(p.read_text(), str(p.relative_to(root)), cache)]


def main(argv: list[str] | None = None) -> int:
    """Rewrite the generated parts of README.md and docs/ (``--check``: only say which are stale)."""
    ap = argparse.ArgumentParser(prog="python -m tools.devtools.docpages",
                                 description="Rewrite the generated parts of README.md and docs/.")
    ap.add_argument("--check", action="store_true",
                    help="rewrite nothing; exit 1 naming each page whose generated parts are stale")
    args = ap.parse_args(argv)
    if args.check:
        old = stale()
        for page in old:
            print(f"stale: {page} (run python -m tools.devtools.docpages)", file=sys.stderr)
        return 1 if old else 0
    cache: dict[str, str] = {}
    for page in pages():
        text = page.read_text()
        new = regenerate(text, str(page.relative_to(ROOT)), cache)
        if new != text:
            page.write_text(new)
            print(f"rewrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
