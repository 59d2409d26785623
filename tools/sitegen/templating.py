"""The Jinja2 environment of the site's templates (``tools/sitegen/templates/``), shared by every page."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).parent / "templates"


@lru_cache(maxsize=1)
def jinja_env() -> jinja2.Environment:
    """The environment every page is rendered with: autoescaped, strict about undefined names."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
