"""The selector as the site publishes it: one zipapp, and the facts file it reads from the site.

``cuwheels-select.pyz`` runs with nothing but Python >= 3.8 (``python cuwheels-select.pyz
flash-attn``): it holds tools/__init__.py, the package tools/core (the facts the selector shares
with the build: cell ids and labels, the manifest, the range reader, and tools.core.site, whose
INDEX_URL is the default ``--index``), the
modules of tools/selector (this one excepted: it is the builder), a ``__main__.py`` that calls
tools.selector.cli.main, and the ``packaging`` package copied from its installed distribution
(its Python files as installed, and its license files). A ``.pyz`` name can't shadow a module the
way a ``select.py`` in the working directory shadows the standard library's ``select``.

The archive is reproducible: members in sorted order, each with the same fixed timestamp and
permissions, so an unchanged tree gives the same bytes and an unchanged site stays byte-identical.

``selector.json`` (tools.selector.facts) carries the facts the selector needs from
recipes/table.yaml (the minimum NVIDIA driver per CUDA version), written by the index step.
Building either needs this repository (and, for the facts, yaml); running the archive does not.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import zipapp
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from .facts import FACTS_FILE, SiteFacts

#: The archive's name under the site root.
ZIPAPP_FILE = "cuwheels-select.pyz"
#: The interpreter line: the first ``python3`` on PATH, as ``./cuwheels-select.pyz`` is run.
INTERPRETER = "/usr/bin/env python3"

_TOOLS = Path(__file__).resolve().parent.parent
#: The earliest date a zip header can hold: every member gets it, whatever the files' mtimes.
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)
_MAIN = b"import sys\n\nfrom tools.selector.cli import main\n\nsys.exit(main())\n"


def _members() -> dict[str, bytes]:
    """Archive name -> bytes of every member."""
    members = {"__main__.py": _MAIN}
    members["tools/__init__.py"] = (_TOOLS / "__init__.py").read_bytes()
    for module in sorted((_TOOLS / "core").glob("*.py")):
        members[f"tools/core/{module.name}"] = module.read_bytes()
    # The default --index is tools.core.site.INDEX_URL: without it the archive can't start.
    if "tools/core/site.py" not in members:
        raise RuntimeError(f"{_TOOLS / 'core' / 'site.py'} is missing: the selector's default index is read from it")
    for module in sorted((_TOOLS / "selector").glob("*.py")):
        if module.name not in ("bundle.py", "__main__.py"):
            members[f"tools/selector/{module.name}"] = module.read_bytes()
    dist = importlib.metadata.distribution("packaging")
    for file in dist.files or ():
        parts = file.parts
        shipped = (parts[0] == "packaging" and "__pycache__" not in parts and file.suffix in (".py", ".typed")) or (
            parts[0].endswith(".dist-info") and file.name.startswith("LICENSE"))
        if shipped:
            members[file.as_posix()] = Path(str(file.locate())).read_bytes()
    return members


@lru_cache(maxsize=1)
def zipapp_bytes() -> bytes:
    """The bytes of ``cuwheels-select.pyz`` (built once per process: its inputs don't change)."""
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        for name, data in sorted(_members().items()):
            info = zipfile.ZipInfo(name, date_time=_FIXED_DATE)
            info.create_system = 3  # Unix, wherever it is built, so that the permissions below apply
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=9)
    archive.seek(0)
    out = io.BytesIO()
    zipapp.create_archive(archive, out, interpreter=INTERPRETER)
    return out.getvalue()


def build_zipapp(dest: Path) -> Path:
    """Write ``cuwheels-select.pyz`` as ``dest`` (made executable) and return ``dest``."""
    dest = Path(dest)
    dest.write_bytes(zipapp_bytes())
    dest.chmod(0o755)
    return dest


def facts_document(table: Any) -> bytes:
    """selector.json for ``table`` (a loaded tools.plan.table.Table): the minimum driver per CUDA version."""
    facts = SiteFacts(min_driver={version: entry.min_driver for version, entry in table.cuda.items()})
    return (json.dumps(facts.to_json(), indent=1) + "\n").encode("utf-8")


def site_files(table: Any | None = None) -> dict[str, bytes]:
    """What the index publishes for the selector: ``{"cuwheels-select.pyz": ..., "selector.json": ...}``.

    ``table`` defaults to recipes/table.yaml, loaded here.
    """
    if table is None:
        from tools.plan.table import load_table  # needs yaml: only the builder imports it, never the archive

        table = load_table()
    return {ZIPAPP_FILE: zipapp_bytes(), FACTS_FILE: facts_document(table)}
