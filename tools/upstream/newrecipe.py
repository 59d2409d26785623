"""A new recipe's template: ``recipes/<name>/recipe.yaml`` for a contributor to finish.

``python -m tools.recipe new <pypi-name>`` asks the registry's JSON API for the newest release
(its version, summary, Requires-Python and ``.tar.gz`` sdist with its URL and sha256), and
writes every field the recipe format requires: what the registry says filled in, the rest a
``TODO`` marker, each line with a comment saying why it is there and what goes in it. The
validator (``python -m tools.recipe``, ``tools.plan.recipes.todo``) refuses the recipe, naming
every marker, until the contributor has replaced them all. ``--version`` writes the template
without asking the registry (the sdist's URL and digest are then markers too).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from tools.core.errors import RecipeError, RegistryError
from tools.core.variant import DEFAULT_PLATFORM
from tools.plan.recipes.model import RECIPE_FILE
from tools.plan.recipes.todo import TODO
from tools.plan.table import Table, version_key
from .registry import Registry

#: What a PyPI project name may be (PEP 508's names), before it is normalised into a folder.
_PROJECT = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class TemplateRelease:
    """What the template knows of the release: None where the registry was not asked or had
    nothing (the template writes a marker there)."""

    pypi: str
    version: str
    summary: str | None = None
    requires_python: str | None = None
    sdist: str | None = None
    url: str | None = None
    sha256: str | None = None


def folder_name(pypi: str) -> str:
    """The recipe folder (and ``package:``) of a PyPI project: its normalised name with ``_``.

    >>> folder_name("flash-attn"), folder_name("Causal.Conv1d")
    ('flash_attn', 'causal_conv1d')
    """
    if not _PROJECT.match(pypi):
        raise RecipeError(f"{pypi!r} is not a PyPI project name",
                          hint="give the name as the registry spells it, e.g. causal-conv1d")
    name = canonicalize_name(pypi).replace("-", "_")
    if not re.match(r"^[a-z][a-z0-9_]*$", name):
        raise RecipeError(f"{pypi!r} normalises to {name!r}, which is no recipe folder name",
                          hint="a recipe folder starts with a letter (recipe.schema.json "
                               "package:); name the folder by hand")
    return name


def lookup(pypi: str, registry: Registry) -> TemplateRelease:
    """The newest release of ``pypi`` on the registry: RegistryError naming the URL when the
    registry does not answer (the hint says how to go on without it)."""
    try:
        answer, url = registry.project(pypi)
    except RegistryError as exc:
        raise RegistryError(exc.message, hint="nothing was written; run again when the registry "
                            "answers, or give --version X.Y.Z to write the template without "
                            "asking it (the sdist's url and sha256 are then left as TODO)") from None
    info = answer.get("info") if isinstance(answer, dict) else None
    if not isinstance(info, dict) or not isinstance(info.get("version"), str):
        raise RegistryError(f"{url}: the answer has no info.version",
                            hint="check the project name on the registry")
    files = [f for f in answer.get("urls") or [] if isinstance(f, dict)
             and f.get("packagetype") == "sdist" and str(f.get("filename", "")).endswith(".tar.gz")]
    sdist = files[0] if files else {}
    digest = (sdist.get("digests") or {}).get("sha256")
    return TemplateRelease(pypi=str(info.get("name") or pypi), version=info["version"],
                   summary=_text(info.get("summary")),
                   requires_python=_text(info.get("requires_python")),
                   sdist=_text(sdist.get("filename")), url=_text(sdist.get("url")),
                   sha256=digest if isinstance(digest, str) else None)


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _q(text: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is YAML's)."""
    return json.dumps(text, ensure_ascii=False)


def _todo(what: str) -> str:
    return _q(f"{TODO}: {what}")


#: The archs marker: the two forms ``archs:`` takes.
_ARCHS = 'inherit (torch own list) or a list per CUDA version: {"*": ["80", "90"]}'


def _newest_cuda(table: Table) -> str:
    built = [c for c in table.cuda if table.torch_for_cuda(c)]
    return max(built or table.cuda, key=version_key)


def render(release: TemplateRelease, name: str, table: Table) -> str:
    """The text of the template's recipe.yaml for ``release`` in folder ``name``."""
    r, asked = release, release.url is not None
    sdist = r.sdist or f"{name}-{r.version}.tar.gz"
    cuda = _newest_cuda(table)
    lines = [
        f"# recipes/{name}/recipe.yaml: how the index builds {r.pypi} {r.version}, one value a line,",
        "# each with its why (a reason: field, or the comment on its line). Written by",
        f"# `python -m tools.recipe new {r.pypi}`: every {TODO} marker is a value only the package's",
        f"# sources can tell; `python -m tools.recipe recipes/{name}` refuses the recipe, naming",
        "# each marker, until none is left. The folder may also hold (none is written for you):",
        "#   patches/NNNN-Subject.patch  changes to the sdist, applied in order (git format-patch",
        "#                               names), each listed under patches: with why and upstream",
        "#   check.py                    the GPU kernel check run by python -m tools.kernelcheck,",
        "#                               named by check: {file: check.py, reason: ...}",
        "#   units.yaml                  the build's translation units and their cost, which the plan",
        "#                               splits into kernel shards: python -m tools.shard units",
        "#                               <cell> --write (without it a cell compiles as one job)",
        "# The sdist must ship its license file (LICENSE, COPYING, NOTICE): the finish step refuses a",
        "# wheel that does not carry it (a patch adds it, or names it in license-files, if the build",
        "# leaves it out).",
        "# Every field: docs/contributing/recipe-reference.md (from tools/plan/recipes/recipe.schema.json).",
        "schema: 1  # the recipe format's version",
        f"package: {name}  # the folder's name: the PyPI name normalised (lowercase, '-' and '.' as '_')",
        f"summary: {_q(r.summary) if r.summary else _todo('one line saying what the package is')}"
        "  # shown on the index's front page" + (": the registry's own summary" if r.summary else ""),
        "source:  # the registry's sdist every wheel is built from"
        + (f" (https://pypi.org/pypi/{r.pypi}/json)" if asked else ""),
        f"  pypi: {r.pypi}  # the project name as the registry spells it",
        f"  version: {_q(r.version)}  # "
        + ("the newest release on the registry when this was written" if asked
           else "the release given with --version (the registry was not asked)"),
        f"  sdist: {sdist}  # "
        + ("the release's .tar.gz sdist on the registry" if r.sdist
           else "PEP 625's file name for it: check it against the registry's file listing"),
        f"  sha256: {_q(r.sha256) if r.sha256 else _todo('the sdist sha256 from the registry file listing')}"
        "  # the sdist's digest: the build refuses any other file",
        f"  url: {_q(r.url) if r.url else _todo('the sdist https URL from the registry file listing')}"
        "  # where the build downloads the sdist",
        f"imports: [{_todo(f'the compiled extension module, e.g. {name}_cuda')}, {name}]"
        "  # what the import check imports from an installed wheel: the compiled module first",
        f"python: {_q(r.requires_python) if r.requires_python else _todo('a specifier such as >=3.9')}"
        "  # the Pythons built, within the table's" + (": the release's Requires-Python" if r.requires_python else ""),
        f"abi: {{python: cpython, torch: exact, reason: {_todo('what in the source makes it so (a pybind11 module on torch C++ API: one build per Python and torch series)')}}}"
        "  # what the binary depends on; abi3 / stable only if its sources say so",
        "cuda:  # each CUDA version built (a version of recipes/table.yaml) and its torch series",
        f"  {_q(cuda)}: {{torch_from: {_todo('the oldest torch series, e.g. 2.11')}, reason: "
        f"{_todo('why this CUDA version and these torch series')}}}  # the table's newest CUDA",
        f"archs: {_todo(_ARCHS)}"
        "  # the GPU architectures built, from the package's own list",
        "arch_env: {name: TORCH_CUDA_ARCH_LIST, style: torch, reason: "
        f"{_todo('where the package build reads its arch list (its setup.py may read its own variable)')}}}"
        "  # the variable the arch list is handed in",
        "build:  # how the package is built",
        "  isolation: false  # its setup.py imports torch, which must be the cell's own torch",
        "  requires:  # build requirements besides torch, each with its reason",
        f"    - {{requirement: \"setuptools>=70.1\", reason: {_todo('what the sdist build backend needs (pyproject build-system requires)')}}}"
        "  # the build backend",
        "    - {requirement: \"ninja\", reason: \"torch's BuildExtension compiles in parallel "
        "(MAX_JOBS) only with ninja\"}  # parallel compiles",
        f"  job_memory_gib: {_todo('the measured peak GiB of one nvcc job, e.g. 3.5')}"
        "  # the plan sizes parallel jobs by it",
        f"  job_memory_reason: {_todo('how job_memory_gib was measured (which unit, nvcc, arch)')}"
        "  # so the next release can be measured the same way",
        "platforms:  # the table's other platforms: build there, or exclude: true, each with why",
    ]
    lines += [f"  {p}: {{reason: {_todo(f'why it builds on {p}, or exclude: true and why not')}}}"
              "  # built here unless excluded" for p in table.platforms if p != DEFAULT_PLATFORM]
    return "\n".join(lines) + "\n"


def write_template(root: Path, release: TemplateRelease, table: Table) -> Path:
    """Write ``<root>/<name>/recipe.yaml`` for ``release``; returns it. RecipeError when the
    folder exists (a template never overwrites a recipe)."""
    name = folder_name(release.pypi)
    folder = Path(root) / name
    if folder.exists() or folder.is_symlink():
        raise RecipeError(f"{folder} already exists: a template never overwrites a recipe",
                          hint=f"edit {folder / RECIPE_FILE} itself, or move the folder away "
                               "and run again")
    text = render(release, name, table)
    folder.mkdir(parents=True)
    path = folder / RECIPE_FILE
    partial = path.with_suffix(".part")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)
    return path
