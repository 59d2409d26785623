"""The Jinja2 environment of the site's templates (``tools/sitegen/templates/``), shared by every page."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).parent / "templates"


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """A count in words people use: ``1 file``, ``3 files``, ``0 files`` (``plural``: for a
    noun that doesn't just take an ``s``). The templates' ``counted`` filter."""
    return f"{number} {noun if number == 1 else (plural or noun + 's')}"


@lru_cache(maxsize=1)
def jinja_env() -> jinja2.Environment:
    """The environment every page is rendered with: autoescaped, strict about undefined names,
    with the ``counted`` filter (``{{ n|counted("file") }}``)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["counted"] = counted
    return env
