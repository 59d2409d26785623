"""The project's commands, found and described from their own parsers.

Every module directly in ``tools/`` is a command run as ``python -m tools.<name>``; the selector
(``python -m tools.selector``) and the docs generator (``python -m tools.devtools.docpages``)
are the two run from inside a package. :func:`commands` finds them all (a new ``tools/*.py`` is
listed without being registered anywhere), :func:`parser_of` gets each one's ``argparse``
parser without running it, and :func:`listing` and :func:`reference_page` describe them:
``python -m tools --help`` and ``docs/reference/commands.md``.
"""

from __future__ import annotations

import argparse
import importlib
import io
import contextlib
from collections.abc import Iterator
from pathlib import Path

TOOLS = Path(__file__).resolve().parent.parent
#: The commands that live in a package: name -> the module that builds their parser.
PACKAGED = {"selector": "tools.selector.cli", "devtools.docpages": "tools.devtools.docpages"}
#: The width of the help text on the reference page (stable, whatever the terminal).
HELP_WIDTH = 100


class _Parsed(Exception):
    """Carries the parser a command's ``main`` built out of it, before it parses anything."""

    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__("parser captured")
        self.parser = parser


def commands() -> list[str]:
    """Every command's name (``matrix``, ``selector``, ``devtools.docpages``...), sorted."""
    found = {p.stem for p in TOOLS.glob("*.py")} - {"__init__", "__main__"}
    return sorted(found | set(PACKAGED))


def module_of(name: str) -> str:
    """The module whose ``main`` (or ``parser``) makes the command ``name``'s parser."""
    return PACKAGED.get(name, f"tools.{name}")


def parser_of(name: str) -> argparse.ArgumentParser:
    """The command's parser: its ``parser()``/``build_parser()`` where it has one, else the one
    its ``main`` builds (caught when ``main`` asks it to parse, so nothing else runs)."""
    module = importlib.import_module(module_of(name))
    for factory in ("parser", "build_parser"):
        if callable(getattr(module, factory, None)):
            return getattr(module, factory)()
    original = argparse.ArgumentParser.parse_args

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Parsed(self)

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign]
    try:
        module.main([])
    except _Parsed as parsed:
        return parsed.parser
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
    raise RuntimeError(f"python -m {module_of(name)}: main() parsed no command line")


def _anchor(name: str) -> str:
    """The heading anchor mkdocs' toc makes for the command's section."""
    return "python-m-tools" + name.replace(".", "")


def run_line(name: str) -> str:
    """How the command is run: ``python -m tools.<name>``."""
    return f"python -m tools.{name}"


def subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Each subcommand's (name, parser), once (an alias is not listed again)."""
    seen: set[int] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield sub_name, sub


def help_text(parser: argparse.ArgumentParser) -> str:
    """What ``--help`` prints, at a fixed width."""
    saved = parser.formatter_class

    def formatter(prog: str) -> argparse.HelpFormatter:
        return saved(prog, width=HELP_WIDTH)

    parser.formatter_class = formatter  # type: ignore[assignment]
    try:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            parser.print_help()
        return out.getvalue().rstrip("\n")
    finally:
        parser.formatter_class = saved


def listing() -> str:
    """``python -m tools --help``: every command with its one line."""
    described = [(name, parser_of(name).description or "") for name in commands()]
    width = max(len(name) for name, _ in described)
    lines = ["usage: python -m tools.COMMAND [options]   (python -m tools.COMMAND --help for its options)",
             "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in described]
    lines += ["", "exit codes: docs/reference/exit-codes.md (tools/core/exitcodes.py)"]
    return "\n".join(lines)


def _relative_defaults(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with each default path in the repository shown relative to it, so the page is
    the same in every checkout."""
    root = TOOLS.parent
    for p in [parser, *(sub for _, sub in subparsers(parser))]:
        for action in p._actions:
            if isinstance(action.default, Path) and action.default.is_relative_to(root):
                action.default = action.default.relative_to(root)
    return parser


def reference_page() -> str:
    """docs/reference/commands.md: each command, its line and its ``--help``."""
    parts = ["| Command | What it does |", "|---|---|"]
    parts += [f"| [`{run_line(n)}`](#{_anchor(n)}) | {parser_of(n).description} |" for n in commands()]
    for name in commands():
        parser = _relative_defaults(parser_of(name))
        parts += ["", f"## `{run_line(name)}`", "", parser.description or "", "",
                  "```text", help_text(parser), "```"]
        for sub_name, sub in subparsers(parser):
            parts += ["", f"### `{run_line(name)} {sub_name}`", "", "```text", help_text(sub), "```"]
    return "\n".join(parts)
