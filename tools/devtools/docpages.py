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
from tools.plan.recipes.reference import reference_markdown
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


def _new_series() -> str:
    return _command_output("tools.matrix", ["--format", "new-series-md", "--platform",
                                            "linux_x86_64"])


def _schedule() -> str:
    # The whole backlog, as before the first release: the ledger of a site that has nothing yet.
    return _command_output("tools.matrix", ["--format", "schedule-md",
                                            "--ledger", str(ROOT / "index" / "ledger.json")])


def _packages() -> str:
    """Per recipe: the PyPI name and version, and the CUDA versions, torch series, Pythons and
    platforms its planned wheels cover (from the plan, as ``python -m tools.matrix`` has it)."""
    from packaging.version import Version
    from tools.plan.cells import plan
    from tools.plan.recipes.model import load_all
    from tools.plan.table import load_table, python_key
    table = load_table()
    recipes = load_all(table=table)
    cells = plan(recipes, table)
    names = {"linux_x86_64": "Linux x86_64", "linux_aarch64": "Linux aarch64", "win_amd64": "Windows"}
    rows = ["| package | version | CUDA | torch | Python | platforms | wheels planned |",
            "| --- | --- | --- | --- | --- | --- | --- |"]

    def spread(values: set[str], key=Version) -> str:
        return ", ".join(sorted(values, key=key))

    for recipe in sorted(recipes, key=lambda r: r.source.pypi):
        own = [c for c in cells if c.package == recipe.package]
        pythons = {p for c in own for p in c.serves_python if p[0].isdigit()}
        home = recipe.source.git.repository if recipe.source.git else \
            f"https://pypi.org/project/{recipe.source.pypi}/"
        rows.append(f"| [{recipe.source.pypi}]({home}) "
                    f"| {recipe.source.version} | {spread({c.cuda for c in own})} "
                    f"| {spread({t for c in own for t in c.serves_torch})} "
                    f"| {spread(pythons, python_key) or 'any (abi3)'} "
                    f"| {', '.join(names.get(p, p) for p in table.platforms if any(c.platform == p for c in own))} "
                    f"| {len(own)} |")
    return "\n".join(rows)


def _install() -> str:
    """The three commands a user runs, with the project's index address."""
    from tools.core import site
    return "\n".join([
        "```bash",
        "# 1. which torch and CUDA you have (the variant index is named after them)",
        'python -c "import torch; print(torch.__version__)"    # e.g. 2.14.1+cu130',
        "# 2. the selector names the index and prints the exact command for this machine",
        f"curl -fsSLO {site.INDEX_URL}cuwheels-select.pyz && python cuwheels-select.pyz flash-attn",
        "# 3. install from the variant index of your CUDA and torch",
        f"pip install flash-attn --only-binary flash-attn --extra-index-url {site.INDEX_URL}cu130/torch2.14/simple/",
        "```"])


#: The variant the docs' examples install from: CUDA 13.0 and torch 2.14, PyPI's own torch build.
EXAMPLE_VARIANT = "cu130/torch2.14"


def _fence(lang: str, *lines: str) -> str:
    return "\n".join([f"```{lang}", *lines, "```"])


def _variant_url() -> str:
    from tools.core import site
    return f"{site.INDEX_URL}{EXAMPLE_VARIANT}/simple/"


def _install_pip() -> str:
    return _fence("bash", f"pip install flash-attn --only-binary flash-attn --extra-index-url {_variant_url()}")


def _install_uv() -> str:
    return _fence("bash", f"uv pip install flash-attn --extra-index-url {_variant_url()}")


def _install_uv_project() -> str:
    name = "cuwheels-" + EXAMPLE_VARIANT.replace("/", "-")
    return _fence("toml", "[[tool.uv.index]]", f'name = "{name}"', f'url = "{_variant_url()}"',
                  "explicit = true", "", "[tool.uv.sources]", f'flash-attn = {{ index = "{name}" }}')


def _install_poetry() -> str:
    return _fence("bash", f"poetry source add --priority=explicit cuwheels {_variant_url()}",
                  "poetry add flash-attn --source cuwheels")


def _install_pdm() -> str:
    return _fence("toml", "[[tool.pdm.source]]", 'name = "cuwheels"', f'url = "{_variant_url()}"',
                  'include_packages = ["flash-attn"]')


def _install_selector() -> str:
    from tools.core import site
    return _fence("bash", f"curl -fsSLO {site.INDEX_URL}cuwheels-select.pyz",
                  "python cuwheels-select.pyz flash-attn")


def _site_layout() -> str:
    """The site's layout, as the index module's docstring draws it."""
    from tools.sitegen import generate
    doc = generate.__doc__
    block = doc.split("Layout of the site", 1)[1].split("::\n\n", 1)[1].split("\n\n", 1)[0]
    return "```text\n" + "\n".join(line[4:] for line in block.splitlines()) + "\n```"


def _site_links() -> str:
    from tools.core import site
    return "\n".join([f"- The index: <{site.INDEX_URL}>",
                      f"- The docs: <{site.DOCS_URL}>",
                      f"- The repository: <{site.REPOSITORY_URL}>, issues at <{site.ISSUES_URL}>"])


#: Every generated part, by the name its marker gives: a function returning its Markdown.
GENERATORS: dict[str, Callable[[], str]] = {
    "counts": _counts,
    "install": _install,
    "install-pdm": _install_pdm,
    "install-pip": _install_pip,
    "install-poetry": _install_poetry,
    "install-selector": _install_selector,
    "install-uv": _install_uv,
    "install-uv-project": _install_uv_project,
    "new-series": _new_series,
    "packages": _packages,
    "schedule": _schedule,
    "site-layout": _site_layout,
    "site-links": _site_links,
    "recipe-reference": reference_markdown,
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
